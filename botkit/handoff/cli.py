"""``python -m botkit handoffs [--json]``: the conversations handed to people now."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from botkit.stores.handoffs import Handoff, HandoffStore
from botkit.targets import load_settings

__all__ = ["add_parser", "handoff_json", "run"]


def add_parser(commands: Any) -> None:
    """Add ``handoffs`` to the command line's subcommands."""
    handoffs = commands.add_parser("handoffs", help="conversations handed to people now")
    handoffs.add_argument("--json", action="store_true", help="one JSON object per line")


def handoff_json(handoff: Handoff) -> dict[str, Any]:
    """One open handoff as a JSON object (times in ISO 8601, UTC)."""
    replied = handoff.first_reply_at.isoformat() if handoff.first_reply_at else None
    return {
        "user_id": handoff.user_id,
        "name": handoff.name,
        "since": handoff.opened_at.isoformat(),
        "topic_id": handoff.topic_id,
        "first_reply_at": replied,
    }


def run(args: argparse.Namespace) -> int:
    """List the open handoffs, oldest first; the exit status."""
    from botkit.admin import format_table
    from botkit.log import configure_logging

    settings = load_settings()
    configure_logging(settings.log_level, secrets=settings.secret_values())
    handoffs = asyncio.run(_open_handoffs(settings))
    if args.json:
        for handoff in handoffs:
            print(json.dumps(handoff_json(handoff), ensure_ascii=False))
    elif not handoffs:
        print("no open handoffs")
    else:
        rows = [_row(handoff) for handoff in handoffs]
        headers = ["USER", "NAME", "SINCE (UTC)", "TOPIC", "ANSWERED"]
        print(format_table(headers, rows, right={0, 3}))
    return 0


async def _open_handoffs(settings: Any) -> list[Handoff]:
    from botkit.access import open_user_store
    from botkit.errors import ConfigError

    store = await open_user_store(settings)
    try:
        if not isinstance(store, HandoffStore):
            raise ConfigError(f"{type(store).__name__} keeps no handoffs")
        return await store.open_handoffs()
    finally:
        await store.close()


def _row(handoff: Handoff) -> list[str]:
    answered = f"{handoff.first_reply_at:%Y-%m-%d %H:%M}" if handoff.first_reply_at else "not yet"
    since = f"{handoff.opened_at:%Y-%m-%d %H:%M}"
    name = " ".join(handoff.name.split())  # no newlines or tabs in a table
    return [str(handoff.user_id), name, since, str(handoff.topic_id), answered]
