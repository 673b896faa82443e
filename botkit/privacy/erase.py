"""``users forget`` and ``users export``: a user's data erased (GDPR art. 17) or handed over
(art. 15), part by part."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import structlog

from botkit.config import Settings
from botkit.privacy.defaults import default_parts
from botkit.privacy.parts import Described, Part

__all__ = ["add_actions", "export_user", "forget_user", "run"]

log = structlog.get_logger(__name__)

README = """What botkit holds about user {user_id}, exported {when}.

{listing}
Sessions are JSON Lines: one entry (a message, a reset, a summary) a line, oldest first.
A picture or document in them is a reference ("type": "stored") whose "sha256" names its file
in media/.
"""


async def forget_user(
    user_id: int, parts: list[Part], *, keep_block: bool = False
) -> dict[str, int]:
    """Delete what every part holds about ``user_id``; how many items each deleted."""
    counts = {part.name: await part.forget(user_id, keep_block=keep_block) for part in parts}
    log.warning("privacy.user_forgotten", user_id=user_id, keep_block=keep_block, **counts)
    return counts


async def export_user(user_id: int, folder: Path, parts: list[Part]) -> Described:
    """Write what every part holds about ``user_id`` into ``folder``, with a README."""
    from datetime import UTC, datetime

    await asyncio.to_thread(folder.mkdir, mode=0o700, parents=True, exist_ok=True)
    described: Described = {}
    for part in parts:
        described |= await part.export(user_id, folder)
    listing = "".join(f"- {name}: {text}\n" for name, text in sorted(described.items()))
    when = datetime.now(UTC).isoformat(timespec="seconds")
    readme = README.format(user_id=user_id, when=when, listing=listing or "(nothing)\n")
    await asyncio.to_thread((folder / "README.txt").write_text, readme, encoding="utf-8")
    log.info("privacy.user_exported", user_id=user_id, files=len(described))
    return described


def add_actions(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``users forget ID [--yes] [--keep-block]`` and ``users export ID DIR``."""
    forget = actions.add_parser("forget", help="erase everything kept about a user (GDPR 17)")
    forget.add_argument("user_id", type=int, metavar="ID")
    forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    forget.add_argument("--keep-block", action="store_true", help="keep them blocked")
    export = actions.add_parser("export", help="write everything kept about a user (GDPR 15)")
    export.add_argument("user_id", type=int, metavar="ID")
    export.add_argument("directory", metavar="DIR")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run ``users forget`` or ``users export``; the exit status."""
    from botkit.log import configure_logging

    # The command's own line says what it did, so its info lines are not logged; an erasure's
    # audit line (a warning) still is, on stderr (``2>/dev/null`` leaves the one line).
    configure_logging("WARNING", secrets=settings.secret_values())
    parts = default_parts(settings)
    if args.action == "export":
        described = asyncio.run(export_user(args.user_id, Path(args.directory), parts))
        print(f"Wrote {len(described)} files and README.txt to {args.directory}.")
        return 0
    if not args.yes:
        answer = input(f"Erase everything kept about user {args.user_id}? Type yes: ")
        if answer.strip().lower() != "yes":
            print("Nothing was erased.", file=sys.stderr)
            return 1
    counts = asyncio.run(forget_user(args.user_id, parts, keep_block=args.keep_block))
    print(f"Forgot user {args.user_id}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0
