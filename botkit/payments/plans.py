"""Paid plans: what a user can buy for Telegram Stars, and what it grants them."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from botkit.errors import ConfigError

__all__ = ["SUBSCRIPTION_PERIOD", "Invoice", "Plan", "load_plans"]

SUBSCRIPTION_PERIOD = 2_592_000
"""30 days in seconds: the one period Telegram allows for Stars subscriptions."""


class Plan(BaseModel):
    """A plan users buy with Telegram Stars: a daily token budget for 30 days (or a month's
    subscription, renewed by Telegram until cancelled), optionally with a role."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")
    """Names the plan in invoices and records: keep it once users have bought it."""
    title: str = Field(min_length=1, max_length=32)
    """Shown on the invoice (Telegram allows 1-32 characters)."""
    description: str = Field(min_length=1, max_length=255)
    """Shown on the invoice and in ``/plans`` (1-255 characters)."""
    stars: int = Field(gt=0, le=10_000)
    """The price in Telegram Stars (``XTR``)."""
    daily_tokens: int = Field(gt=0)
    """The daily token budget while the plan lasts (instead of BOTKIT_DAILY_TOKEN_BUDGET)."""
    subscription: bool = False
    """Renewed every 30 days by Telegram until the user cancels; else a one-off purchase."""
    days: int = Field(30, gt=0, le=3660)
    """How long a one-off purchase lasts (a subscription lasts its paid period, 30 days)."""
    role: str | None = None
    """A role the user has while the plan lasts (e.g. for tools offered by role)."""
    models: tuple[str, ...] = ()
    """Models only this plan's holders may pick with ``/model`` (see ``botkit.choices``)."""
    personas: tuple[str, ...] = ()
    """Personas (their ids) only this plan's holders may pick with ``/persona``."""


_PLANS = TypeAdapter(list[Plan])


def load_plans(setting: str | None, in_code: Iterable[Plan] = ()) -> tuple[Plan, ...]:
    """The plans given in code, then those of BOTKIT_PLANS (JSON, or a JSON file's path).

    A malformed setting, or two plans with one id, is a ``ConfigError`` saying what to fix.
    """
    plans = [*in_code, *_parse_setting(setting)]
    ids = [plan.id for plan in plans]
    doubled = sorted({plan_id for plan_id in ids if ids.count(plan_id) > 1})
    if doubled:
        raise ConfigError(f"two plans have the id {', '.join(doubled)}: plan ids must differ")
    return tuple(plans)


def _parse_setting(setting: str | None) -> list[Plan]:
    if setting is None or not setting.strip():
        return []
    text = setting
    if not setting.lstrip().startswith(("[", "{")):  # JSON itself, else a file's path
        try:
            text = Path(setting).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"BOTKIT_PLANS: cannot read {setting}: {e.strerror}") from e
    try:
        return _PLANS.validate_python(json.loads(text))
    except (ValueError, ValidationError) as e:
        first = e.errors()[0] if isinstance(e, ValidationError) else None
        where = ".".join(str(part) for part in first["loc"]) if first else ""
        why = first["msg"] if first else str(e)
        raise ConfigError(
            f"BOTKIT_PLANS is not a JSON list of plans: {where + ': ' if where else ''}{why}"
        ) from e


@dataclass(frozen=True, slots=True)
class Invoice:
    """What an invoice's payload carries: the plan, its price when sent, and the buyer."""

    plan_id: str
    stars: int
    user_id: int

    def payload(self) -> str:
        """The invoice payload (at most 128 bytes: a plan id is at most 32 characters)."""
        return f"plan:{self.plan_id}:{self.stars}:{self.user_id}"

    @classmethod
    def parse(cls, payload: str) -> Invoice | None:
        """The invoice a payload names, or ``None`` for one botkit did not make."""
        kind, _, rest = payload.partition(":")
        plan_id, _, numbers = rest.partition(":")
        stars, _, user_id = numbers.partition(":")
        if kind != "plan" or not plan_id or not stars.isdigit() or not user_id.isdigit():
            return None
        return cls(plan_id, int(stars), int(user_id))
