"""One bot per data folder and per database: whose data it is, and who serves from it.

Two bots started in one working directory would write into each other's session files,
inbox journal and SQLite store (a reminder set through one bot delivered by the other). So
the data folder (BOTKIT_SESSIONS_DIR) records its bot's id in ``bot.json``, and a serving
process holds an OS lock on ``botkit.lock`` there: ``fcntl.flock``, which the kernel
releases when the process ends, however it ends (SIGKILL included), so a lock is never left
stuck. Another bot, or a second serving process of the same bot, refuses to start with one
sentence. Commands that only read or send (``replay``, ``users``, ``invite``, ``doctor``)
take no lock and keep working while the bot runs.

With a database (BOTKIT_DATABASE_URL) the bot's id is recorded there instead (table
``botkit_bot``, migration 008): processes of another bot refuse, while any number of
``receive``/``work`` processes of the same bot share it by design.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import structlog

from botkit.config import Settings
from botkit.errors import ConfigError

if TYPE_CHECKING:
    from botkit.runtime.queue import TurnQueue

__all__ = [
    "LOCK_FILE",
    "OWNER_FILE",
    "claim_database",
    "data_folder_held",
    "folder_refusal",
    "settings_bot_id",
]

log = structlog.get_logger(__name__)

LOCK_FILE = "botkit.lock"
"""The file in the data folder a serving process holds an exclusive ``flock`` on."""
OWNER_FILE = "bot.json"
"""The file in the data folder naming the bot whose data it holds: ``{"bot_id": 123}``."""

_RECORD = "INSERT INTO botkit_bot (bot_id) VALUES (%(bot_id)s) ON CONFLICT DO NOTHING"
_OWNER = "SELECT bot_id FROM botkit_bot"


def settings_bot_id(settings: Settings) -> int | None:
    """The bot's id from its token, or ``None`` when there is no (well-formed) token."""
    try:
        return settings.bot_id
    except ConfigError:
        return None


@contextmanager
def data_folder_held(settings: Settings, bot_id: int | None) -> Iterator[None]:
    """Hold the data folder for this process inside the block, recording ``bot_id`` as its
    owner (``None``: check nothing but the lock); ``ConfigError`` if it is not ours to use."""
    folder = settings.sessions_dir
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise ConfigError(f"cannot use the data folder {folder} (BOTKIT_SESSIONS_DIR): {e}") from e
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _check_owner(folder, bot_id)  # another bot's folder says so first
            raise ConfigError(
                f"Another botkit process is already serving from {folder} "
                "(BOTKIT_SESSIONS_DIR): stop it first, or give this one a folder of its own."
            ) from None
        _check_owner(folder, bot_id)
        if bot_id is not None:
            _record_owner(folder, bot_id)
        yield
    finally:
        os.close(fd)  # also releases the lock


def folder_refusal(settings: Settings) -> str | None:
    """Why this bot could not serve from its data folder because of whose data it holds
    (for ``doctor``: no lock is taken); ``None`` when it could."""
    try:
        _check_owner(settings.sessions_dir, settings_bot_id(settings))
    except ConfigError as e:
        return str(e)
    return None


def _check_owner(folder: Path, bot_id: int | None) -> None:
    owner = _recorded_owner(folder)
    if bot_id is not None and owner is not None and owner != bot_id:
        raise ConfigError(
            f"{folder} (BOTKIT_SESSIONS_DIR) holds the data of bot {owner}, not of this bot "
            f"({bot_id}): give each bot its own BOTKIT_SESSIONS_DIR."
        )


def _recorded_owner(folder: Path) -> int | None:
    path = folder / OWNER_FILE
    try:
        return int(orjson.loads(path.read_bytes())["bot_id"])
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ConfigError(
            f"cannot read {path} ({type(e).__name__}), which names the bot whose data "
            f"{folder} holds: if it is this bot's, delete the file and start again."
        ) from e


def _record_owner(folder: Path, bot_id: int) -> None:
    path = folder / OWNER_FILE
    if _recorded_owner(folder) == bot_id:
        return
    temporary = path.with_suffix(".tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(orjson.dumps({"bot_id": bot_id}) + b"\n")
        os.replace(temporary, path)
    except OSError as e:
        with suppress(OSError):
            temporary.unlink()
        raise ConfigError(f"cannot write {path} (BOTKIT_SESSIONS_DIR): {e}") from e
    log.debug("bot.data_folder_claimed", folder=str(folder), bot_id=bot_id)


async def claim_database(queue: TurnQueue, bot_id: int) -> None:
    """Record ``bot_id`` as the owner of ``queue``'s database if none is, else check it is
    ours; ``ConfigError`` (one sentence) for another bot's database or a missing migration."""
    from procrastinate.exceptions import ConnectorException

    connector = queue.app.connector
    try:
        await connector.execute_query_async(_RECORD, bot_id=bot_id)
        row = await connector.execute_query_one_async(_OWNER)
    except (ConnectorException, OSError) as e:
        raise ConfigError(
            "the database lacks the table botkit_bot (or cannot be read): "
            "run `python -m botkit migrate`"
        ) from e
    owner = int(row["bot_id"])
    if owner != bot_id:
        raise ConfigError(
            f"The database in BOTKIT_DATABASE_URL holds the data of bot {owner}, not of this "
            f"bot ({bot_id}): give each bot its own database."
        )
