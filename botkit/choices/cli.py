"""``users show`` lines and ``users choose``: a user's choices seen and set from the CLI."""

from __future__ import annotations

import argparse
import os

from botkit.choices.personas import load_personas
from botkit.choices.store import Choice, ChoiceField, ChoiceStore, choice_store_for
from botkit.config import Settings
from botkit.errors import ConfigError
from botkit.payments.plans import load_plans
from botkit.stores.base import UserStore

__all__ = ["add_choose", "choice_lines", "choose"]


def add_choose(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``users choose ID [--model M] [--persona P] [--instructions TEXT] [--reset]``."""
    choose = actions.add_parser(
        "choose", help="set or reset the model, persona or instructions of a user's conversation"
    )
    choose.add_argument("user_id", type=int, metavar="ID")
    choose.add_argument("--conversation", help="a group's key (default: the private chat)")
    choose.add_argument("--model", help="one of BOTKIT_MODELS (or a plan's)")
    choose.add_argument("--persona", help="a persona's id (BOTKIT_PERSONAS_DIR)")
    choose.add_argument("--instructions", help="the standing instructions ('' clears them)")
    choose.add_argument("--reset", action="store_true", help="back to the bot's defaults")


def _opened(users: UserStore) -> ChoiceStore | None:
    """The choice store, unless the SQLite file does not exist (nothing was ever chosen)."""
    path = getattr(users, "path", None)
    if path is not None and not os.path.exists(path):
        return None
    return choice_store_for(users)


async def choice_lines(users: UserStore, user_id: int) -> list[tuple[str, str]]:
    """``users show``'s lines about the conversations whose choices ``user_id`` made."""
    store = _opened(users)
    if store is None:
        return []
    try:
        choices = await store.of_user(user_id)
    finally:
        await store.close()
    return [("choices in " + _where(c, user_id), _described(c)) for c in choices]


def _where(choice: Choice, user_id: int) -> str:
    return "private chat" if choice.conversation == str(user_id) else choice.conversation


def _described(choice: Choice) -> str:
    parts = [
        f"model {choice.model or 'default'}",
        f"persona {choice.persona or 'default'}",
        f"instructions {choice.instructions!r}" if choice.instructions else "no instructions",
    ]
    return ", ".join(parts)


async def choose(users: UserStore, settings: Settings, args: argparse.Namespace) -> str:
    """Apply ``users choose``; what it did. A model or persona not offered is a
    ``ConfigError`` naming the ones that are."""
    changes: dict[ChoiceField, str | None] = {}
    if args.reset:
        changes = {"model": None, "persona": None, "instructions": None}
    if args.model is not None:
        changes["model"] = _offered_model(settings, args.model)
    if args.persona is not None:
        changes["persona"] = _offered_persona(settings, args.persona)
    if args.instructions is not None:
        changes["instructions"] = args.instructions or None
    if not changes:
        raise ConfigError("say what to set: --model, --persona, --instructions or --reset")
    store = choice_store_for(users)
    try:
        choice = await store.set(args.conversation or str(args.user_id), args.user_id, changes)
    finally:
        await store.close()
    return f"{_where(choice, args.user_id)} of {args.user_id}: {_described(choice)}"


def _offered_model(settings: Settings, model: str) -> str:
    offered = [settings.model, *settings.models]
    offered += [m for plan in load_plans(settings.plans) for m in plan.models]
    if model not in offered:
        raise ConfigError(
            f"{model} is not offered: pick one of {', '.join(dict.fromkeys(offered))}"
        )
    return model


def _offered_persona(settings: Settings, persona: str) -> str:
    ids = [p.id for p in load_personas(settings.personas_dir)]
    if persona not in ids:
        known = ", ".join(ids) or "none (set BOTKIT_PERSONAS_DIR)"
        raise ConfigError(f"no persona {persona!r} in BOTKIT_PERSONAS_DIR: there are {known}")
    return persona
