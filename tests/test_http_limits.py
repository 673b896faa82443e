"""The webhook and ops servers are bounded: a cap on open connections, a deadline for each
request, loopback by default; a body the parser cannot take is a 400, never a 500.

The flood test runs ``python -m botkit receive`` (webhook mode, on PostgreSQL) as a process of
its own with the usual 1024 open files, so its file descriptors can be counted in /proc.
"""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from pydantic import SecretStr
from structlog.testing import capture_logs

from botkit.messengers.flood import FloodControl
from botkit.metrics import Metrics
from botkit.ops import ops_server
from botkit.runtime.cluster import queue_for, serve_queued
from botkit.runtime.telegram import messenger_for
from botkit.testing import FakeAnthropicServer, FakeTelegramServer, make_bot, make_settings

SECRET = "s3cret_Token-1"
PATH = "/telegram/hook"
HALF_A_REQUEST_LINE = b"POST /telegram/hook HT"

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def an_update(update_id: int, user: int, text: str) -> dict[str, Any]:
    chat = {"id": user, "type": "private", "first_name": "U"}
    sender = {"id": user, "is_bot": False, "first_name": "U"}
    message = {"message_id": update_id, "date": 1_700_000_000, "chat": chat, "from": sender}
    return {"update_id": update_id, "message": {**message, "text": text}}


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def connections_on(pid: int, port: int) -> int:
    """The process's open TCP connections (not its listening socket) on local ``port``."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        with suppress(FileNotFoundError), open(f"/proc/{pid}/net/{table}") as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if local_port == port and fields[3] != "0A":  # 0A: LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
    links = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with suppress(OSError):
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return sum(link in inodes for link in links)


def allow_open_files(wanted: int) -> None:
    """Raise this process's soft limit of open files to ``wanted`` (the clients need them)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))


def usual_open_files_limit() -> None:
    """In the server's process: the 1024 open files most systems give a service."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft = 1024 if hard == resource.RLIM_INFINITY else min(1024, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def half_open(
    port: int, count: int, first_bytes: bytes = HALF_A_REQUEST_LINE
) -> list[Stream]:
    """``count`` connections that send ``first_bytes`` and then nothing."""

    async def one() -> Stream | None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(first_bytes)
            return reader, writer
        except OSError:
            return None  # refused while connecting: already closed

    opened: list[Stream] = []
    for start in range(0, count, 100):
        batch = await asyncio.gather(*(one() for _ in range(min(100, count - start))))
        opened += [stream for stream in batch if stream is not None]
    return opened


async def closed_by_server(stream: Stream, within: float) -> bool:
    """Whether the server closes ``stream`` (end of stream or reset) within ``within`` s."""
    reader, _ = stream
    try:
        async with asyncio.timeout(within):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except OSError:
        pass
    return True


async def wait_closed(streams: list[Stream], within: float) -> list[bool]:
    return list(await asyncio.gather(*(closed_by_server(s, within) for s in streams)))


def close_all(streams: list[Stream]) -> None:
    for _, writer in streams:
        writer.transport.abort()


async def post_until_answered(url: str, body: bytes, seconds: float) -> tuple[int, float]:
    """POST ``body`` like Telegram does, again after a refused or cut connection, until it is
    answered or ``seconds`` pass: the status (0: never answered) and the time it took."""
    started = time.monotonic()
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET, "Content-Type": "application/json"}
    while (spent := time.monotonic() - started) < seconds:
        try:
            timeout = aiohttp.ClientTimeout(total=max(0.1, seconds - spent))
            async with (
                aiohttp.ClientSession(timeout=timeout) as http,
                http.post(url, data=body, headers=headers) as response,
            ):
                return response.status, time.monotonic() - started
        except (aiohttp.ClientError, TimeoutError):
            await asyncio.sleep(0.05)
    return 0, time.monotonic() - started


def start_receiver(
    telegram: FakeTelegramServer, tmp_path: Path, db: str, port: int, read_timeout: float
) -> subprocess.Popen[bytes]:
    """``python -m botkit receive`` serving the webhook on ``port``, logging to receiver.log."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))}
    env = {
        **{k: v for k, v in keep.items() if not k.startswith("BOTKIT_")},
        "TELEGRAM_BOT_TOKEN": telegram.token,
        "TELEGRAM_API_BASE": telegram.base_url,
        "ANTHROPIC_API_KEY": "test-key",
        "BOTKIT_DATABASE_URL": db,
        "BOTKIT_ACCESS": "open",
        "BOTKIT_SESSIONS_DIR": str(tmp_path / "sessions"),
        "BOTKIT_WEBHOOK_URL": f"https://bot.example.com{PATH}",
        "BOTKIT_WEBHOOK_SECRET": SECRET,
        "BOTKIT_WEBHOOK_LISTEN": f"127.0.0.1:{port}",
        "BOTKIT_HTTP_READ_TIMEOUT": str(read_timeout),
    }
    with (tmp_path / "receiver.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "botkit", "receive"],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=usual_open_files_limit,
        )


@asynccontextmanager
async def receiver_process(
    telegram: FakeTelegramServer, tmp_path: Path, db: str, port: int, read_timeout: float
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """``start_receiver`` once it has set its webhook, until the block ends (then SIGTERM)."""
    process = start_receiver(telegram, tmp_path, db, port, read_timeout)
    try:
        await until(lambda: telegram.webhook is not None or process.poll() is not None, 60)
        assert process.poll() is None, (tmp_path / "receiver.log").read_text()
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


async def until(predicate: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"not true within {seconds} s"
        await asyncio.sleep(0.05)


# --- the webhook under a flood of half-open connections ----------------------------------------


async def test_half_open_connections_cannot_exhaust_the_webhook_receiver(
    telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    allow_open_files(4096)
    port, read_timeout, flood = free_port(), 2.0, 1_100
    async with receiver_process(telegram, tmp_path, db, port, read_timeout) as process:
        before = open_files(process.pid)
        opened = await half_open(port, flood)
        flooded_at = time.monotonic()
        most_open, most_held = open_files(process.pid), connections_on(process.pid, port)
        body = orjson.dumps(an_update(7001, 9, "hello"))
        status, took = await post_until_answered(f"http://127.0.0.1:{port}{PATH}", body, 10)
        most_open = max(most_open, open_files(process.pid))
        most_held = max(most_held, connections_on(process.pid, port))
        closed = await wait_closed(
            opened, max(0.5, flooded_at + read_timeout + 4 - time.monotonic())
        )
        after = open_files(process.pid)
        close_all(opened)
    limit = 256
    # A connection past the cap is accepted and aborted; its socket closes on the loop's next
    # pass, and asyncio accepts up to 100 (its backlog) in one pass: so at most 100 of those.
    refused_in_flight = 100
    # Besides the webhook's sockets, the real update opens the queue's database connections.
    assert status == 200, f"the real update was not answered ({took:.1f} s)"
    assert took < 2.0, f"answered after {took:.1f} s"
    assert most_held <= limit + refused_in_flight, (limit, most_held)
    assert most_open <= before + limit + refused_in_flight + 40, (before, most_open)
    assert all(closed), f"{closed.count(False)} of {len(closed)} half-open connections still open"
    assert after <= before + 5, (before, after)


# --- the ops server -----------------------------------------------------------------------------


async def test_the_ops_server_caps_connections_and_closes_slow_requests(tmp_path: Path) -> None:
    cap, read_timeout = 8, 2.0

    async def slower_than_the_read_timeout() -> str | None:
        await asyncio.sleep(read_timeout + 0.5)
        return None

    settings = make_settings(
        tmp_path, metrics_port=0, http_max_connections=cap, http_read_timeout=read_timeout
    )
    with capture_logs() as logs:
        async with ops_server(settings, Metrics(), [slower_than_the_read_timeout]) as url:
            assert url is not None
            port = int(url.rsplit(":", 1)[1])
            admitted = await half_open(port, cap - 1)
            trickler = (await half_open(port, 1, b"G"))[0]
            started = time.monotonic()
            trickling = asyncio.create_task(
                trickle(trickler, b"ET / HTTP/1.1\r\n" + b"X: y\r\n" * 8)
            )
            await asyncio.sleep(0.2)  # all of them accepted before the next ones come
            excess = await half_open(port, 5)
            # at the cap a newcomer takes the place of the oldest connection still waiting for
            # a whole request (#51): one client cannot hold every slot
            evicted = await wait_closed(admitted[:5], 1.0)
            excess_open = [not r.at_eof() and r.exception() is None for r, _ in excess]
            admitted_open = [not r.at_eof() and r.exception() is None for r, _ in admitted[5:]]
            timed_out = await wait_closed([*admitted[5:], trickler, *excess], read_timeout + 4)
            closed_after = time.monotonic() - started
            trickling.cancel()
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{url}/healthz") as response:
                    health = response.status, await response.text()
                async with http.get(f"{url}/readyz") as response:
                    ready = response.status, await response.text()
            close_all([*admitted, trickler, *excess])
    assert all(evicted), "the oldest waiting connections made room at once"
    assert all(excess_open), "the newcomers got in"
    assert all(admitted_open), "the younger connections already open are not touched"
    assert all(timed_out), "requests not received within the read timeout are closed"
    assert read_timeout * 0.8 <= closed_after < read_timeout + 4, closed_after
    assert health == (200, "ok\n")
    assert ready == (200, "ready\n"), "a handler running past the read timeout is not cut"
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert [e["event"] for e in warnings] == ["ops.connections_evicted", "ops.request_timeout"]


async def test_a_keep_alive_connection_is_closed_when_idle_or_slow_after_a_response(
    tmp_path: Path,
) -> None:
    read_timeout = 1.0
    settings = make_settings(tmp_path, metrics_port=0, http_read_timeout=read_timeout)
    get = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    async with ops_server(settings, Metrics()) as url:
        assert url is not None
        port = int(url.rsplit(":", 1)[1])
        idle, slow = await half_open(port, 2, get)
        answers = [await reader.readuntil(b"ok\n") for reader, _ in (idle, slow)]
        slow[1].write(get[:10])  # the next request, never finished
        started = time.monotonic()
        closed = await wait_closed([idle, slow], read_timeout + 4)
        took = time.monotonic() - started
        close_all([idle, slow])
    assert all(answer.startswith(b"HTTP/1.1 200 OK") for answer in answers)
    assert closed == [True, True], "closed after the read timeout, not aiohttp's hour"
    assert took >= read_timeout * 0.8, took


async def trickle(stream: Stream, data: bytes) -> None:
    """Send ``data`` a byte every 0.1 s: a client keeping its request alive forever."""
    _, writer = stream
    with suppress(OSError):
        for byte in data:
            writer.write(bytes([byte]))
            await asyncio.sleep(0.1)


# --- bodies the webhook cannot take ------------------------------------------------------------


@asynccontextmanager
async def webhook(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> AsyncIterator[str]:
    """A receiver in webhook mode in this process (read timeout 1 s); yields its URL."""
    port = free_port()
    bot = make_bot(
        claude,
        tmp_path,
        database_url=SecretStr(db),
        telegram_bot_token=SecretStr(telegram.token),
        telegram_api_base=telegram.base_url,
        access="open",
        webhook_url=f"https://bot.example.com{PATH}",
        webhook_secret=SecretStr(SECRET),
        webhook_listen=f"127.0.0.1:{port}",
        http_read_timeout=1.0,
    )
    messenger = messenger_for(bot.settings, flood=FloodControl.unlimited(), inbox=False)
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve_queued(
            bot, stop, receive=True, work=False, messenger=messenger, queue=queue_for(bot.settings)
        )
    )
    try:
        await until(lambda: telegram.webhook is not None or task.done(), 30)
        assert not task.done(), task
        yield f"http://127.0.0.1:{port}{PATH}"
    finally:
        stop.set()
        await task


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


async def test_json_nested_too_deep_is_400_and_a_normal_update_still_200(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    update = orjson.dumps(an_update(8001, 9, "hi"))
    deep_in_a_field = update[:-1] + b', "x": ' + nested(1000) + b"}"
    bodies = [b'{"update_id": 8002, "x": ' + nested(100_000) + b"}", deep_in_a_field, update]
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET, "Content-Type": "application/json"}
    async with (
        webhook(claude, telegram, tmp_path, db) as url,
        aiohttp.ClientSession() as http,
    ):
        statuses = []
        for body in bodies:
            async with http.post(url, data=body, headers=headers) as response:
                statuses.append(response.status)
    assert statuses == [400, 400, 200]


async def test_a_body_not_sent_in_time_is_408_and_the_connection_closed(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    async with webhook(claude, telegram, tmp_path, db) as url:
        port = int(url.split(":")[2].split("/")[0])
        head = (
            f"POST {PATH} HTTP/1.1\r\nHost: x\r\nX-Telegram-Bot-Api-Secret-Token: {SECRET}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        ).encode()
        (stream,) = await half_open(port, 1, head + b'{"update_id": 80')
        started = time.monotonic()
        try:
            async with asyncio.timeout(5):
                answer = await stream[0].read()
        except TimeoutError:
            answer = b""
        took = time.monotonic() - started
        close_all([stream])
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert took < 4, took


async def test_a_signed_update_gets_in_past_a_flood_and_bad_secrets_are_not_a_log_flood(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    """#51: with 400 half-open connections from one address (past the 256 cap), a signed post
    is answered within 3 s at its first try; 500 posts with a wrong secret log a line or two."""
    allow_open_files(2048)
    body = orjson.dumps(an_update(7101, 9, "hello"))
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET, "Content-Type": "application/json"}
    with capture_logs() as logs:
        async with webhook(claude, telegram, tmp_path, db) as url:
            port = int(url.split(":")[2].split("/")[0])
            opened = await half_open(port, 400)
            started = time.monotonic()
            async with aiohttp.ClientSession() as http:
                async with http.post(url, data=body, headers=headers) as response:
                    status = response.status
                took = time.monotonic() - started
                wrong = {**headers, "X-Telegram-Bot-Api-Secret-Token": "nope"}
                for _ in range(500):
                    async with http.post(url, data=body, headers=wrong) as refused:
                        assert refused.status == 401
            close_all(opened)
    assert status == 200 and took < 3.0, (status, took)
    bad = [e for e in logs if e["event"] == "webhook.bad_secret"]
    assert 1 <= len(bad) <= 2, len(bad)


def test_at_the_cap_the_busiest_address_makes_room() -> None:
    """#51: a flood from one address evicts its own oldest waiting connection, not another
    client's; a connection being answered is never evicted."""
    from types import SimpleNamespace

    from botkit._http import _to_evict

    def conn(peer: str, waiting: bool = True) -> Any:
        return SimpleNamespace(peer=peer, waiting=waiting)

    telegram, flood = conn("149.154.160.1"), [conn("10.9.9.9") for _ in range(3)]
    assert _to_evict([telegram, *flood]) is flood[0]
    assert _to_evict([conn("a", waiting=False), conn("b", waiting=False)]) is None
