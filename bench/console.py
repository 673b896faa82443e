"""The operators' console over 10,000 conversations (#48): a page, a far page, a search by
user and by text, a transcript, through HTTP, on the files store and on PostgreSQL; and the
memory 100 open sessions take.

Yardstick: the bare read a page needs without the console: on PostgreSQL the same page's
query with asyncpg, in the files' folder a listing of the files by time (``os.scandir``). The
console's time is printed beside it as a ratio. Target: every page under 1 s.

    python bench/console.py            # about a minute; --conversations, --repeats
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import asyncpg  # type: ignore[import-untyped]
import orjson
from pydantic import SecretStr
from scaleout import Cluster, fresh_database

from botkit.access import Access
from botkit.config import Settings
from botkit.console.app import COOKIE, ConsoleApp
from botkit.console.conversations import conversations_of
from botkit.console.settings import ConsoleSettings
from botkit.console.signin import Sessions, make_link_token
from botkit.options import BotOptions
from botkit.sessions import session_store_for
from botkit.sessions.base import SessionStore
from botkit.testing.kit import make_settings

ADMIN = 1
TARGET = 1.0
WORDS = ["tide", "moon", "harbour", "ferry", "lighthouse", "gull", "anchor", "rope", "sail", "keel"]


def entries(user: int, at: datetime) -> list[bytes]:
    """Four lines of a conversation: two questions, two answers."""
    lines = []
    for turn in range(2):
        when = (at + timedelta(seconds=turn)).isoformat()
        word = WORDS[(user + turn) % len(WORDS)]
        for role, text in (("user", f"about the {word} {user}"), ("assistant", f"the {word}")):
            entry = {
                "type": "message",
                "version": 1,
                "timestamp": when,
                "user_id": user,
                "role": role,
                "content": [{"type": "text", "text": text}],
            }
            lines.append(orjson.dumps(entry))
    if user == 7:  # "needle-7" is in this conversation only
        lines[0] = lines[0].replace(b"about the", b"needle-7 about the")
    return lines


def write_files(folder: Path, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for user in range(100, 100 + count):
        path = folder / f"{user}.jsonl"
        path.write_bytes(b"\n".join(entries(user, start)) + b"\n")
        moment = (start + timedelta(seconds=user)).timestamp()
        os.utime(path, (moment, moment))
    (folder / "7.jsonl").write_bytes(b"\n".join(entries(7, start)) + b"\n")


async def fill_database(url: str, count: int) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows, heads = [], []
    for user in [7, *range(100, 100 + count)]:
        lines = entries(user, start)
        for seq, line in enumerate(lines, 1):
            rows.append((str(user), seq, line.decode(), start + timedelta(seconds=user)))
        heads.append((str(user), len(lines)))
    conn = await asyncpg.connect(url)
    try:
        await conn.copy_records_to_table(
            "botkit_sessions",
            records=rows,
            columns=["conversation", "seq", "entry", "recorded_at"],
        )
        await conn.copy_records_to_table(
            "botkit_session_heads", records=heads, columns=["conversation", "last_seq"]
        )
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


async def timed(call: Callable[[], Awaitable[object]], repeats: int) -> float:
    """The median seconds of ``repeats`` calls (after one to warm up)."""
    await call()
    seconds = []
    for _ in range(repeats):
        began = time.perf_counter()
        await call()
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds)


async def measure(
    label: str, settings: Settings, bare: Callable[[], Awaitable[object]], repeats: int, count: int
) -> list[tuple[str, str, float, float | None]]:
    sessions: SessionStore = session_store_for(settings)
    access = Access(settings, BotOptions())
    console = ConsoleApp(
        ConsoleSettings.of(settings),
        access,
        sessions,
        conversations_of(sessions, settings.sessions_dir),
        NoApprovals(),
    )
    runner = aiohttp.web.AppRunner(console.application(), access_log=None)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}"
    store = await access.user_store()
    token = await make_link_token(store, ADMIN, 300)  # type: ignore[arg-type]
    results = []
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"{base}/signin", data={"token": token}, allow_redirects=False
            ) as r:
                cookie = r.cookies[COOKIE].value
            http.cookie_jar.update_cookies({COOKIE: cookie})
            last_page = count // console.settings.page_size - 1

            async def get(path: str) -> None:
                async with http.get(base + path) as response:
                    assert response.status == 200, (path, response.status)
                    await response.read()

            pages = [
                ("first page", "/conversations"),
                ("page 100", "/conversations?page=100"),
                ("last page", f"/conversations?page={last_page}"),
                ("by user", "/conversations?user=5042"),
                ("by text", "/conversations?q=needle-7"),
                ("transcript", "/conversations/5042"),
            ]
            for name, path in pages:
                seconds = await timed(lambda p=path: get(p), repeats)  # type: ignore[misc]
                results.append((label, name, seconds, None))
            bare_seconds = await timed(bare, repeats)
            results[0] = (label, "first page", results[0][2], bare_seconds)
    finally:
        await runner.cleanup()
        await sessions.close()
        await access.close()
    return results


class NoApprovals:
    """The pages measured here read no approvals."""

    async def waiting(self) -> list[object]:
        return []

    async def press(self, approval_id: str, choice: str, user_id: int) -> str:
        return ""


def session_memory(count: int) -> int:
    """Bytes ``count`` console sessions hold (tracemalloc)."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    sessions = Sessions(3600, 1000)
    tokens = [sessions.start(user) for user in range(count)]
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(tokens) == len(sessions) == count
    return after - before


def settings_for(home: Path, database_url: str | None = None) -> Settings:
    """The defaults of ``python -m botkit`` in ``home`` (with the database, if given)."""
    values: dict[str, object] = {"admins": frozenset({ADMIN}), "console_port": 0}
    if database_url is not None:
        values["database_url"] = SecretStr(database_url)
    return make_settings(home, **values)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="botkit-bench-console-") as tmp:
        home = Path(tmp)
        write_files(home / "sessions", args.conversations)

        async def scan() -> object:
            def listing() -> list[tuple[float, str]]:
                with os.scandir(home / "sessions") as found:
                    return sorted((-e.stat().st_mtime, e.name) for e in found)[:50]

            return await asyncio.to_thread(listing)

        results += await measure(
            "files", settings_for(home), scan, args.repeats, args.conversations
        )
        cluster = Cluster()
        cluster.start()
        try:
            url = await fresh_database(cluster.dsn)
            await fill_database(url, args.conversations)
            pg_home = home / "pg"
            pg_home.mkdir()

            conn = await asyncpg.connect(url)  # kept open, as the console's pool keeps its own

            async def query() -> object:
                return await conn.fetch(
                    "SELECT h.conversation FROM botkit_session_heads h LEFT JOIN "
                    "botkit_sessions s ON s.conversation = h.conversation AND "
                    "s.seq = h.last_seq ORDER BY s.recorded_at DESC NULLS LAST, "
                    "h.conversation LIMIT 51"
                )

            try:
                results += await measure(
                    "postgres", settings_for(pg_home, url), query, args.repeats, args.conversations
                )
            finally:
                await conn.close()
        finally:
            cluster.stop()
    print(f"{args.conversations:,} conversations, median of {args.repeats}; target < {TARGET:g} s")
    print(f"{'store':9} {'page':11} {'console':>9} {'bare read':>10} {'ratio':>6}")
    worst = 0.0
    for store, page, seconds, bare in results:
        worst = max(worst, seconds)
        extra = f"{bare * 1000:8.1f}ms {seconds / bare:5.1f}x" if bare else ""
        print(f"{store:9} {page:11} {seconds * 1000:7.1f}ms {extra}")
    memory = session_memory(100)
    print(f"100 open sessions: {memory / 1024:.1f} KiB ({memory / 100:.0f} B each)")
    print(f"slowest page {worst * 1000:.0f} ms: {'within' if worst < TARGET else 'OVER'} target")
    return 0 if worst < TARGET else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
