"""``python -m botkit replay``: a session as a readable transcript, or as JSON lines.

The session comes from its file, or from PostgreSQL when BOTKIT_DATABASE_URL is set.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError
from structlog.testing import capture_logs

from botkit.config import Settings
from botkit.errors import BotkitError, SessionError
from botkit.extras import require_extra
from botkit.sessions import (
    CompactionEntry,
    FeedbackEntry,
    NumberedSessionFile,
    ResetEntry,
    SessionEntry,
    SessionFile,
    is_conversation_key,
    read_session_file,
)
from botkit.terminal import printable
from botkit.types import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    RedactedThinkingBlock,
    ServerBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

__all__ = ["all_sessions", "format_transcript", "read_session", "replay", "session_files"]

EXIT_OK = 0
EXIT_BROKEN_PIPE = 1
EXIT_UNREADABLE = 2

CUT = 300
"""Tool results and tool arguments longer than this are cut (with ``…``)."""
RULE = "────"
INDENT = "  "

Entry = SessionEntry | ResetEntry | CompactionEntry | FeedbackEntry


class _ReplayError(Exception):
    """The session cannot be replayed; the message is the one line shown on stderr."""


def replay(session: str, *, as_json: bool = False) -> int:
    """Print a session (a file path, or a user id) and return the exit status.

    ``session`` made only of digits is a user id, read from PostgreSQL when
    ``Settings().database_url`` is set (a group's ``chat_…`` key too, if no such file exists),
    else looked up as ``Settings().sessions_dir / "<id>.jsonl"``; anything else is a path. A
    missing or unreadable session, an unreachable database, or invalid settings, give one line
    on stderr and exit status 2. Row numbers stand for line numbers when read from PostgreSQL.

    Torn or corrupt lines do not stop the replay: each is reported on stderr as
    ``line N: <reason> (skipped)`` (and, with ``as_json``, as a ``problem`` object on stdout in its
    line position), the rest of the file is printed, and the exit status is still 0 — someone
    replaying a damaged file wants to see everything that could be read. A reader that goes away
    early (``| head``) ends the output quietly with status 1.
    """
    try:
        source, file, numbers = _load(session)
    except _ReplayError as e:
        print(f"botkit: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    text = _json_lines(file, numbers) if as_json else format_transcript(file, source=source)
    for number, reason in file.problems:
        print(f"line {number}: {reason} (skipped)", file=sys.stderr)
    return _write(text)


def format_transcript(file: SessionFile, *, source: str) -> str:
    """The session as a readable transcript: a header, each entry in order, then totals."""
    names = _tool_names(file.entries)
    lines = [_header(file, source)]
    last_day: date | None = None
    for entry in file.entries:
        stamp, last_day = _stamp(entry.timestamp, last_day)
        lines.append("")
        lines.extend(_entry(entry, stamp, names))
    lines += ["", _totals(file.entries)]
    return "\n".join(lines) + "\n"


# --- finding and reading the session ------------------------------------------------------------


def read_session(session: str) -> tuple[str, SessionFile]:
    """Where ``session`` (a file, a user id or a conversation key) was found, and what it holds;
    a ``SessionError`` saying in one sentence why it cannot be read."""
    try:
        source, file, _ = _load(session)
    except _ReplayError as e:
        raise SessionError(str(e)) from None
    return source, file


def all_sessions() -> list[str]:
    """Every session there is: PostgreSQL's conversations when BOTKIT_DATABASE_URL is set,
    else the session files of the sessions folder; a ``SessionError`` when they cannot be
    listed."""
    try:
        settings = _settings()
    except _ReplayError as e:
        raise SessionError(str(e)) from None
    if settings.database_url is not None:
        return asyncio.run(_conversations(settings.database_url.get_secret_value()))
    return [str(path) for path in session_files(settings.sessions_dir)]


def session_files(folder: Path) -> list[Path]:
    """The session files in ``folder`` (named by a conversation key), in name order."""
    return sorted(
        path for path in folder.glob("*.jsonl") if path.is_file() and is_conversation_key(path.stem)
    )


async def _conversations(dsn: str) -> list[str]:
    try:
        require_extra("asyncpg", "postgres", "BOTKIT_DATABASE_URL")
        from botkit.sessions.postgres import PostgresSessionStore

        store = await PostgresSessionStore.connect(dsn)
        try:
            return await store.conversations()
        finally:
            await store.close()
    except BotkitError as e:
        raise SessionError(f"cannot read sessions from the database: {e}") from None


def _load(session: str) -> tuple[str, SessionFile, list[int]]:
    """Where the session came from, what it holds, and each entry's line (or row) number."""
    if _is_key(session):
        settings = _settings()
        if settings.database_url is not None:
            dsn = settings.database_url.get_secret_value()
            rows = asyncio.run(_from_database(dsn, session))
            return f"PostgreSQL conversation {session}", rows, rows.numbers
    path = _resolve(session)
    file = _read(path)
    return str(path), file, _entry_line_numbers(path, file)


def _is_key(session: str) -> bool:
    """A user id; or a group's key that is not also the name of a file here."""
    if session.isascii() and session.isdigit():
        return True
    return is_conversation_key(session) and not Path(session).exists()


async def _from_database(dsn: str, key: str) -> NumberedSessionFile:
    """The conversation's rows in PostgreSQL; a _ReplayError when there are none or no database."""
    try:
        require_extra("asyncpg", "postgres", "BOTKIT_DATABASE_URL")
        from botkit.sessions.postgres import PostgresSessionStore

        store = await PostgresSessionStore.connect(dsn)
        try:
            with capture_logs():  # damaged rows are reported by replay(), not logged on stdout
                file = await store.load(key)
        finally:
            await store.close()
    except BotkitError as e:
        raise _ReplayError(f"cannot read sessions from the database: {e}") from None
    if not file.entries and not file.problems:
        raise _ReplayError(f"no session for {_who(key)} in the database")
    return file


def _who(key: str) -> str:
    """``user 42``, or ``conversation chat_-100_7``."""
    return f"user {key}" if key.isdigit() else f"conversation {key}"


def _resolve(session: str) -> Path:
    """The session file ``session`` names; a _ReplayError when there is none."""
    if _is_key(session):
        path = _sessions_dir() / f"{session}.jsonl"
        missing = f"no session file for {_who(session)} at {path}"
    else:
        path = Path(session)
        missing = f"no session file at {path}"
    if not path.exists():
        raise _ReplayError(missing)
    if not path.is_file():
        raise _ReplayError(f"not a session file: {path}")
    return path


def _sessions_dir() -> Path:
    """Where session files live, per the settings (env, ``.env``)."""
    return _settings().sessions_dir


def _settings() -> Settings:
    """The settings (env, ``.env``); a _ReplayError when they are invalid."""
    try:
        return Settings()
    except ValidationError as e:
        error = e.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "settings"
        raise _ReplayError(f"invalid setting: {where}: {error['msg']}") from None


def _read(path: Path) -> SessionFile:
    """The entries and problems of ``path``, without the reader's own log lines."""
    # The reader logs each skipped line; unconfigured structlog would print that on stdout,
    # in the middle of the transcript or the JSON. replay() reports problems itself.
    try:
        with capture_logs():
            return read_session_file(path)
    except SessionError as e:
        raise _ReplayError(str(e)) from None


def _entry_line_numbers(path: Path, file: SessionFile) -> list[int]:
    """The line number of each entry of ``file``: the non-blank lines that were no problem."""
    try:
        raw = path.read_bytes()
    except OSError:
        return []  # gone since it was read: entries keep their order, after the problems
    skipped = {number for number, _ in file.problems}
    lines = enumerate(raw.split(b"\n"), start=1)
    return [number for number, line in lines if line.strip() and number not in skipped]


def _write(text: str) -> int:
    """Write ``text`` on stdout (its control characters escaped: it holds what users wrote);
    a reader that went away (``| head``) is no traceback."""
    try:
        sys.stdout.write(printable(text))
        sys.stdout.flush()
    except BrokenPipeError:
        # As the Python docs advise: no second error when the interpreter flushes stdout.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return EXIT_OK


# --- JSON lines ----------------------------------------------------------------------------------


def _json_lines(file: SessionFile, entry_lines: list[int]) -> str:
    """One JSON object per line: each entry as recorded, each problem, in file order."""
    records: list[tuple[float, dict[str, Any]]] = [
        (number, {"type": "problem", "line": number, "reason": reason})
        for number, reason in file.problems
    ]
    for index, entry in enumerate(file.entries):
        number = entry_lines[index] if index < len(entry_lines) else float("inf")
        records.append((number, entry.model_dump(mode="json", exclude_none=True)))
    records.sort(key=lambda record: record[0])  # stable: unnumbered entries keep their order
    return "".join(orjson.dumps(record).decode() + "\n" for _, record in records)


# --- the transcript ------------------------------------------------------------------------------


def _header(file: SessionFile, source: str) -> str:
    """``session of user 42 · sessions/42.jsonl · 9 entries`` (and the skipped lines)."""
    user = str(file.entries[0].user_id) if file.entries else Path(source).stem
    parts = [f"session of user {user}", source, _count(len(file.entries), "entry", "entries")]
    if file.problems:
        parts.append(_count(len(file.problems), "unreadable line", "unreadable lines") + " skipped")
    return " · ".join(parts) + " (times UTC)"


def _stamp(timestamp: datetime, last_day: date | None) -> tuple[str, date]:
    """``[HH:MM:SS]``, or ``[YYYY-MM-DD HH:MM:SS]`` when the day changed; and the day."""
    utc = timestamp.replace(tzinfo=UTC) if timestamp.tzinfo is None else timestamp.astimezone(UTC)
    day = utc.date()
    shown = f"{utc:%H:%M:%S}" if day == last_day else f"{utc:%Y-%m-%d %H:%M:%S}"
    return f"[{shown}]", day


def _entry(entry: Entry, stamp: str, names: dict[str, str]) -> list[str]:
    """The lines showing one entry."""
    if isinstance(entry, ResetEntry):
        return [f"{stamp} {_reset(entry)}"]
    if isinstance(entry, CompactionEntry):
        return _compaction(entry, stamp)
    if isinstance(entry, FeedbackEntry):
        return [f"{stamp} {_feedback(entry)}"]
    return _message(entry, stamp, names)


def _feedback(entry: FeedbackEntry) -> str:
    """``feedback 👎 (negative) from 42 on the reply to update 7``."""
    shown = " ".join(entry.emoji) or "taken back"
    return (
        f"feedback {shown} ({entry.kind}) from {entry.by} on the reply to update {entry.update_id}"
    )


def _reset(entry: ResetEntry) -> str:
    """``──── context cleared (/clear) ────``."""
    reason = f" ({entry.reason})" if entry.reason else ""
    return f"{RULE} context cleared{reason} {RULE}"


def _compaction(entry: CompactionEntry, stamp: str) -> list[str]:
    """The compaction separator, the summary indented, and what the summary cost."""
    kept = _count(entry.kept, "message", "messages")
    lines = [f"{stamp} {RULE} context compacted: earlier messages summarised, {kept} kept {RULE}"]
    lines += _indented(entry.summary)
    if entry.usage is not None:
        lines.append(f"{INDENT}usage: {_usage(entry.usage)}")
    return lines


def _message(entry: SessionEntry, stamp: str, names: dict[str, str]) -> list[str]:
    """A user or assistant message: its blocks, then (assistant) usage and stop reason."""
    about: list[str] = [entry.role]
    if entry.update_id is not None:
        about.append(f"update {entry.update_id}")
    if entry.model:
        about.append(entry.model)
    lines = [f"{stamp} {' · '.join(about)}"]
    for block in entry.content:
        lines += _block(block, names)
    if not entry.content:
        lines.append(f"{INDENT}(empty)")
    meta = _meta(entry)
    if meta:
        lines.append(f"{INDENT}{meta}")
    return lines


def _block(block: ContentBlock, names: dict[str, str]) -> list[str]:
    """The lines showing one content block."""
    if isinstance(block, TextBlock):
        return _indented(block.text)
    if isinstance(block, ImageBlock):
        return [f"{INDENT}{_image(block)}"]
    if isinstance(block, DocumentBlock):
        return [f"{INDENT}{_document(block)}"]
    if isinstance(block, ToolUseBlock):
        return [f"{INDENT}→ {block.name}({_cut(_compact_json(block.input))})"]
    if isinstance(block, ThinkingBlock):
        if not block.thinking:
            return [f"{INDENT}(thinking, not shown)"]
        return _indented("(thinking) " + block.thinking)
    if isinstance(block, RedactedThinkingBlock):
        return [f"{INDENT}(thinking, encrypted)"]
    if isinstance(block, ServerBlock):
        return [f"{INDENT}[{block.type}]"]
    return [f"{INDENT}{_tool_result(block, names)}"]


def _indented(text: str) -> list[str]:
    """Each line of ``text``, indented."""
    return [f"{INDENT}{line}".rstrip() for line in text.splitlines() or [""]]


def _image(block: ImageBlock) -> str:
    """``[image image/png, 12 KB]``, or ``[image <url>]``."""
    source = block.source
    if source.url is not None:
        return f"[image {source.url}]"
    data = source.data or ""
    size = len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))
    return f"[image {source.media_type or 'of unknown type'}, {_size(size)}]"


def _document(block: DocumentBlock) -> str:
    """``[document report.pdf, application/pdf, 120 KB]``; a text file's size in characters."""
    source = block.source
    name = block.title or "untitled"
    data = source.data or ""
    if source.type == "text":
        return f"[document {name}, {source.media_type}, {len(data):,} characters]"
    size = len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))
    return f"[document {name}, {source.media_type}, {_size(size)}]"


def _size(n: int) -> str:
    """``512 B``, ``12 KB``, ``1.5 MB``."""
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{round(n / 1024)} KB"
    return f"{n / (1024 * 1024):.1f} MB"


def _tool_result(block: ToolResultBlock, names: dict[str, str]) -> str:
    """``↳ result of <tool> (<id>): <text>``, with ``ERROR`` when the tool failed."""
    name = names.get(block.tool_use_id, "an unknown tool")
    error = " ERROR" if block.is_error else ""
    text = " ".join(block.content.split()) or "(empty)"
    return f"↳ result of {name} ({block.tool_use_id}){error}: {_cut(text)}"


def _meta(entry: SessionEntry) -> str:
    """``usage: in 1,234 · out 56 · … · stop: max_tokens``, or nothing."""
    parts: list[str] = []
    if entry.usage is not None:
        parts.append(f"usage: {_usage(entry.usage)}")
    if entry.stop_reason and entry.stop_reason != "end_turn":
        parts.append(f"stop: {entry.stop_reason}")
    if entry.approval == "waiting":
        parts.append("waiting for approval")
    elif entry.approval:
        parts.append(f"approval: {entry.approval}")
    return " · ".join(parts)


def _usage(usage: Usage) -> str:
    """``in 1,234 · out 56 · cache write 0 · cache read 1,100``."""
    return (
        f"in {usage.input_tokens:,} · out {usage.output_tokens:,} · "
        f"cache write {usage.cache_creation_input_tokens:,} · "
        f"cache read {usage.cache_read_input_tokens:,}"
    )


def _totals(entries: Iterable[Entry]) -> str:
    """``total: 3 turns · in … · out … · cache write … · cache read …``."""
    usage = Usage()
    turns = 0
    for entry in entries:
        if isinstance(entry, ResetEntry | FeedbackEntry):
            continue
        if entry.usage is not None:
            usage += entry.usage
        if isinstance(entry, SessionEntry) and _is_turn(entry):
            turns += 1
    return f"total: {_count(turns, 'turn', 'turns')} · {_usage(usage)}"


def _is_turn(entry: SessionEntry) -> bool:
    """Whether ``entry`` is a user's message (not tool results sent back to the model)."""
    has_text = any(isinstance(block, TextBlock) for block in entry.content)
    return entry.role == "user" and (entry.update_id is not None or has_text)


def _tool_names(entries: Iterable[Entry]) -> dict[str, str]:
    """The tool name of each tool call id in ``entries``."""
    return {
        block.id: block.name
        for entry in entries
        if isinstance(entry, SessionEntry)
        for block in entry.content
        if isinstance(block, ToolUseBlock)
    }


def _compact_json(value: object) -> str:
    """``value`` as JSON without spaces, non-ASCII kept readable."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _cut(text: str) -> str:
    """``text``, cut to about CUT characters."""
    return text if len(text) <= CUT else text[: CUT - 1] + "…"


def _count(n: int, one: str, many: str) -> str:
    """``1 entry``, ``3 entries``."""
    return f"{n:,} {one if n == 1 else many}"
