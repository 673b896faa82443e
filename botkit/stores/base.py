"""Users, invites and token usage: the records and the seam a store implements."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Protocol

from botkit.stores.schedules import ScheduleStore
from botkit.types import Usage

__all__ = [
    "INVITE_CODE_PATTERN",
    "INVITE_PREFIX_LENGTH",
    "DailyUsage",
    "Invite",
    "ModelUsage",
    "RedeemFailure",
    "RedeemResult",
    "RevokeResult",
    "StoredInvite",
    "UserRecord",
    "UserStore",
    "check_tokens",
    "hash_invite_code",
    "is_invite_prefix",
    "new_invite",
    "new_invite_code",
    "token_kinds",
    "utc",
]

INVITE_CODE_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What Telegram accepts as a ``/start`` parameter, so an invite fits a ``t.me`` link."""


def new_invite_code() -> str:
    """A fresh, unguessable invite code: 22 URL-safe characters, never starting with ``-``.

    A leading dash would read as an option on a command line (``invites revoke -F9W``).
    """
    while (code := secrets.token_urlsafe(16)).startswith("-"):
        pass
    return code


INVITE_PREFIX_LENGTH = 4
"""How many leading characters of a code a store keeps, so operators can tell invites apart."""


def hash_invite_code(code: str) -> str:
    """The SHA-256 (hex) of ``code``: all a store keeps of it, besides its first characters.

    No salt is needed: a code holds 128 random bits, too many to guess from the hash.
    """
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


def utc(moment: datetime) -> datetime:
    """``moment`` in UTC; naive datetimes are refused, as their zone is a guess."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"expected a timezone-aware datetime, got {moment!r}")
    return moment.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class UserRecord:
    """A registered user."""

    user_id: int
    """The Telegram user id."""
    role: str
    """What the bot lets them do, e.g. ``"user"`` or ``"admin"``; botkit gives it no meaning."""
    display_name: str | None
    """A name to show to admins, if known."""
    joined_at: datetime
    """When they were first registered, in UTC."""
    blocked: bool
    """Blocked users stay registered but should be refused service."""


@dataclass(frozen=True, slots=True)
class Invite:
    """A code that registers whoever redeems it, with a role."""

    code: str
    """The secret, usable as ``https://t.me/<bot>?start=<code>``.

    Stores keep only its hash and prefix: the invite made by ``create_invite`` carries the
    code (show it once, in the link), and ``get_invite`` returns the code it was given.
    """
    role: str
    """The role given to users who redeem it."""
    uses_left: int
    """How many more users can redeem it."""
    expires_at: datetime | None
    """After this moment (UTC) it can no longer be redeemed; ``None``: never expires."""
    created_by: int | None
    """The user id of whoever made it, if a user did."""
    created_at: datetime
    """When it was made, in UTC."""

    @property
    def prefix(self) -> str:
        """The first characters of the code, which stores keep to tell invites apart."""
        return self.code[:INVITE_PREFIX_LENGTH]

    @property
    def code_hash(self) -> str:
        """What stores keep instead of the code: its SHA-256, in hex."""
        return hash_invite_code(self.code)

    def refusal(self, now: datetime) -> RedeemFailure | None:
        """Why the invite cannot be redeemed at ``now``, or ``None`` if it can."""
        return _refusal(self.expires_at, self.uses_left, now)


@dataclass(frozen=True, slots=True)
class StoredInvite:
    """An invite as a store lists it: everything but the code, of which it keeps no copy."""

    prefix: str
    """The first characters of the code (:data:`INVITE_PREFIX_LENGTH`)."""
    role: str
    """The role given to users who redeem it."""
    uses_left: int
    """How many more users can redeem it."""
    expires_at: datetime | None
    """After this moment (UTC) it can no longer be redeemed; ``None``: never expires."""
    created_by: int | None
    """The user id of whoever made it, if a user did."""
    created_at: datetime
    """When it was made, in UTC."""

    def refusal(self, now: datetime) -> RedeemFailure | None:
        """Why the invite cannot be redeemed at ``now``, or ``None`` if it can."""
        return _refusal(self.expires_at, self.uses_left, now)


@dataclass(frozen=True, slots=True)
class RevokeResult:
    """The outcome of revoking an invite by its code or its prefix."""

    matches: tuple[StoredInvite, ...]
    """The invites the code or prefix named; one was revoked only if it named exactly one."""

    @property
    def revoked(self) -> StoredInvite | None:
        """The invite revoked (deleted), or ``None`` if the text named none or several."""
        return self.matches[0] if len(self.matches) == 1 else None

    @property
    def ambiguous(self) -> bool:
        """Several invites start with the prefix: none was revoked."""
        return len(self.matches) > 1


@dataclass(frozen=True, slots=True)
class DailyUsage:
    """The tokens one user spent on one UTC day."""

    user_id: int
    """The Telegram user id."""
    day: date
    """The UTC day."""
    tokens: int
    """Tokens counted against the user's budget that day."""


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """The tokens one user spent with one model on one UTC day, by kind."""

    user_id: int
    """The Telegram user id."""
    day: date
    """The UTC day."""
    model: str
    """The model that billed them."""
    usage: Usage
    """Input, output, cache-read and cache-write tokens."""


def is_invite_prefix(text: str) -> bool:
    """Whether ``text`` is short enough to be matched against the prefixes stores keep."""
    return 0 < len(text) <= INVITE_PREFIX_LENGTH


def _refusal(expires_at: datetime | None, uses_left: int, now: datetime) -> RedeemFailure | None:
    if expires_at is not None and expires_at <= now:
        return RedeemFailure.EXPIRED
    if uses_left < 1:
        return RedeemFailure.USED_UP
    return None


def new_invite(role: str, uses: int, expires_at: datetime | None, created_by: int | None) -> Invite:
    """The record of a new invite, with a fresh code, made now; checks the arguments."""
    if uses < 1:
        raise ValueError(f"an invite needs at least one use, got {uses}")
    return Invite(
        code=new_invite_code(),
        role=role,
        uses_left=uses,
        expires_at=None if expires_at is None else utc(expires_at),
        created_by=created_by,
        created_at=datetime.now(UTC),
    )


def check_tokens(tokens: int) -> int:
    """``tokens``, if it is a count that can be added to usage."""
    if tokens < 0:
        raise ValueError(f"token usage cannot be negative, got {tokens}")
    return tokens


def token_kinds(usage: Usage) -> tuple[int, int, int, int, int, int, int]:
    """Input, output, cache-read, cache-write and (of those) 1-hour cache-write tokens, seconds
    of audio heard and characters spoken, each checked: the columns stores keep per model."""
    return (
        check_tokens(usage.input_tokens),
        check_tokens(usage.output_tokens),
        check_tokens(usage.cache_read_input_tokens),
        check_tokens(usage.cache_creation_input_tokens),
        check_tokens(min(usage.cache_write_1h_tokens, usage.cache_creation_input_tokens)),
        check_tokens(usage.audio_seconds),
        check_tokens(usage.spoken_chars),
    )


class RedeemFailure(StrEnum):
    """Why an invite could not be redeemed."""

    UNKNOWN = "unknown"
    """No invite has this code."""
    EXPIRED = "expired"
    """The invite's ``expires_at`` has passed."""
    USED_UP = "used_up"
    """Every use of the invite has been taken."""


@dataclass(frozen=True, slots=True)
class RedeemResult:
    """The outcome of redeeming an invite: the registered user, or why not."""

    user: UserRecord | None = None
    """The user, as registered now, when it worked."""
    failure: RedeemFailure | None = None
    """Why it did not work."""
    already_registered: bool = False
    """The user existed before: nothing changed and no use of the invite was taken."""

    def __post_init__(self) -> None:
        if (self.user is None) == (self.failure is None):
            raise ValueError("a RedeemResult has either a user or a failure")

    @property
    def ok(self) -> bool:
        """Whether the user is registered now."""
        return self.user is not None

    @classmethod
    def success(cls, user: UserRecord, *, already_registered: bool = False) -> RedeemResult:
        """The user is registered."""
        return cls(user=user, already_registered=already_registered)

    @classmethod
    def failed(cls, failure: RedeemFailure) -> RedeemResult:
        """Nobody was registered, because of ``failure``."""
        return cls(failure=failure)


class UserStore(ScheduleStore, Protocol):
    """Where a bot keeps its users, their invites, their daily token usage and their schedules."""

    async def get_user(self, user_id: int) -> UserRecord | None:
        """The user, or ``None`` if they are not registered."""
        ...

    async def upsert_user(
        self, user_id: int, role: str, display_name: str | None = None
    ) -> UserRecord:
        """Register the user, or set their role (and their name, if given) if registered."""
        ...

    async def set_blocked(self, user_id: int, blocked: bool) -> bool:
        """Block or unblock a user; ``False`` if there is no such user."""
        ...

    async def set_role(self, user_id: int, role: str) -> bool:
        """Change a user's role; ``False`` if there is no such user."""
        ...

    async def block_user(self, user_id: int, role: str = "user") -> UserRecord:
        """Block the user; one never registered is registered now, with ``role``, blocked."""
        ...

    async def list_users(
        self,
        role: str | None = None,
        *,
        blocked: bool | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> list[UserRecord]:
        """Every user (or those with ``role``, or ``blocked`` or not), in the order they joined;
        from the ``offset``-th, at most ``limit`` of them (all, with ``None``)."""
        ...

    async def create_invite(
        self,
        role: str,
        uses: int = 1,
        expires_at: datetime | None = None,
        created_by: int | None = None,
    ) -> Invite:
        """A new invite with a fresh code, redeemable ``uses`` times until ``expires_at``."""
        ...

    async def get_invite(self, code: str) -> Invite | None:
        """The invite with this code, or ``None``."""
        ...

    async def redeem_invite(
        self, code: str, user_id: int, display_name: str | None = None
    ) -> RedeemResult:
        """Atomically take one use of the invite and register the user with its role.

        A user who is already registered keeps their record and role, takes no use of
        the invite, and gets a success with ``already_registered`` set, whatever the code.
        """
        ...

    async def list_invites(self) -> list[StoredInvite]:
        """Every invite, used up and expired ones too, oldest first."""
        ...

    async def revoke_invite(self, code: str) -> RevokeResult:
        """Delete the invite with this code, or the only one whose prefix starts with it.

        ``code`` is a whole code, or up to :data:`INVITE_PREFIX_LENGTH` leading characters
        of one; a prefix several invites share revokes none of them.
        """
        ...

    async def add_usage(self, user_id: int, day: date, tokens: int) -> None:
        """Add ``tokens`` to what the user spent on ``day``."""
        ...

    async def usage_on(self, user_id: int, day: date) -> int:
        """The tokens the user spent on ``day`` (0 if none)."""
        ...

    async def usage_since(self, first_day: date) -> list[DailyUsage]:
        """What each user spent on each day from ``first_day`` on, by day, then user id."""
        ...

    async def add_model_usage(self, entries: Sequence[ModelUsage]) -> None:
        """Add each entry's tokens to its user, day and model (all in one transaction)."""
        ...

    async def model_usage_since(self, first_day: date) -> list[ModelUsage]:
        """Tokens per user, day and model from ``first_day`` on, by day, user id, model."""
        ...

    async def close(self) -> None:
        """Release the store's connections; calling it again does nothing."""
        ...
