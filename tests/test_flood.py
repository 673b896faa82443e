"""FloodControl driving the real aiogram Bot against the fake Telegram Bot API.

Each test runs on a ``VirtualTimeLoop``: flood control reads the running loop's clock (its
sleeps and aiolimiter's buckets), so pacing and waits are measured in loop time, exactly,
without sleeping real seconds.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    TelegramBadRequest,
    TelegramForbiddenError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)
from aiogram.types import Message
from structlog.testing import capture_logs

from botkit.errors import MessengerError
from botkit.messengers.flood import FloodControl, FloodLimits
from botkit.testing import run_in_virtual_time
from botkit.testing.telegram import FakeTelegramServer

FAST = FloodLimits(
    global_per_second=10_000, chat_per_second=1_000, chat_burst=10, group_per_minute=600_000
)
"""Limits high enough that pacing never shows in a test's duration."""

Attempts = list[tuple[str, float]]
"""Each attempt to send, as (text, loop time when the request was made), retries included."""


def make_bot(base_url: str, token: str) -> Bot:
    return Bot(token, session=AiohttpSession(api=TelegramAPIServer.from_base(base_url)))


def in_virtual_time(
    test: Callable[[FakeTelegramServer, Bot], Awaitable[None]],
) -> Callable[[], None]:
    """``test`` against a fresh fake Telegram, on a loop whose idle waits take no real time."""

    async def main() -> None:
        async with FakeTelegramServer() as tg:
            bot = make_bot(tg.base_url, tg.token)
            try:
                await test(tg, bot)
            finally:
                await bot.session.close()

    def run() -> None:
        run_in_virtual_time(main)

    run.__doc__ = test.__doc__
    return run


def now() -> float:
    return asyncio.get_running_loop().time()


async def send(
    flood: FloodControl,
    bot: Bot,
    chat_id: int,
    text: str,
    attempts: Attempts | None = None,
    **kwargs: Any,
) -> Message:
    async def call() -> Message:
        if attempts is not None:
            attempts.append((text, now()))
        return await bot.send_message(chat_id, text)

    return await flood.send(chat_id, call, **kwargs)


def texts(tg: FakeTelegramServer, chat_id: int | None = None) -> list[str]:
    return [m.text for m in tg.sent_messages(chat_id)]


# ---- flood waits ------------------------------------------------------------------------


@in_virtual_time
async def test_429_waits_retry_after_and_resends_once(tg: FakeTelegramServer, bot: Bot) -> None:
    flood = FloodControl(FAST)
    tg.fail_next("sendMessage", retry_after=1)
    attempts: Attempts = []
    start = now()
    with capture_logs() as logs:
        message = await send(flood, bot, 42, "hello", attempts)
    elapsed = now() - start

    assert elapsed >= 0.99
    assert texts(tg, 42) == ["hello"]
    assert message.text == "hello"
    calls = tg.requests_for("sendMessage")
    assert [c.error_code for c in calls] == [429, None]
    (_, first), (_, second) = attempts
    assert second - first >= 0.99
    assert calls[0].params == calls[1].params
    waits = [e for e in logs if e["event"] == "telegram.flood_wait"]
    assert waits == [
        {
            "event": "telegram.flood_wait",
            "log_level": "warning",
            "chat_id": 42,
            "retry_after": 1,
            "attempt": 1,
        }
    ]


@in_virtual_time
async def test_flood_wait_keeps_order_in_chat_and_does_not_block_others(
    tg: FakeTelegramServer, bot: Bot
) -> None:
    flood = FloodControl(FAST)
    tg.fail_next("sendMessage", retry_after=1)  # hits the first request: "a0" to chat 1
    attempts: Attempts = []
    await asyncio.gather(
        send(flood, bot, 1, "a0", attempts),
        send(flood, bot, 1, "a1", attempts),
        send(flood, bot, 2, "b0", attempts),
    )
    assert texts(tg) == ["b0", "a0", "a1"]
    sent_at = dict(attempts)  # the last attempt of each text
    assert sent_at["a0"] - sent_at["b0"] >= 0.9  # chat 2 went through while chat 1 waited


@in_virtual_time
async def test_429_storm_delivers_everything_once_in_order(
    tg: FakeTelegramServer, bot: Bot
) -> None:
    flood = FloodControl(FAST)
    tg.flood_ratio = 0.3
    tg.flood_retry_after = 1
    chats = [101, 102, 103]
    await asyncio.gather(
        *(send(flood, bot, chat, f"{chat}:{i}") for i in range(10) for chat in chats)
    )
    for chat in chats:
        assert texts(tg, chat) == [f"{chat}:{i}" for i in range(10)]
    assert len(tg.sent_messages()) == 30
    assert any(r.error_code == 429 for r in tg.requests)


@in_virtual_time
async def test_unlimited_still_waits_out_429_in_order(tg: FakeTelegramServer, bot: Bot) -> None:
    flood = FloodControl.unlimited()
    tg.fail_next("sendMessage", retry_after=1)
    start = now()
    await asyncio.gather(*(send(flood, bot, 7, f"m{i}") for i in range(5)))
    assert now() - start >= 0.99
    assert texts(tg, 7) == [f"m{i}" for i in range(5)]
    assert flood.tracked_chats == 0  # nothing to drain: dropped as soon as idle


@in_virtual_time
async def test_still_rate_limited_after_max_attempts(tg: FakeTelegramServer, bot: Bot) -> None:
    flood = FloodControl(FAST, max_attempts=1)  # no wait after the last attempt
    tg.fail_next("sendMessage", retry_after=1)
    with pytest.raises(MessengerError, match="rate limited") as info:
        await send(flood, bot, 5, "never")
    assert isinstance(info.value.__cause__, TelegramRetryAfter)
    assert len(tg.requests_for("sendMessage")) == 1
    assert tg.sent_messages() == []


# ---- pacing -----------------------------------------------------------------------------


@in_virtual_time
async def test_chat_pacing(tg: FakeTelegramServer, bot: Bot) -> None:
    limits = FloodLimits(global_per_second=1_000, chat_per_second=5, chat_burst=1)
    flood = FloodControl(limits)
    start = now()
    await asyncio.gather(*(send(flood, bot, 9, f"m{i}") for i in range(5)))
    assert now() - start >= 0.75
    assert texts(tg, 9) == [f"m{i}" for i in range(5)]


@in_virtual_time
async def test_chat_pacing_carries_over_between_sequential_sends(
    tg: FakeTelegramServer, bot: Bot
) -> None:
    limits = FloodLimits(global_per_second=1_000, chat_per_second=10, chat_burst=1)
    flood = FloodControl(limits)
    start = now()
    for i in range(4):
        await send(flood, bot, 9, f"m{i}")
    assert now() - start >= 0.28  # the bucket is kept between sends


@in_virtual_time
async def test_group_pacing(tg: FakeTelegramServer, bot: Bot) -> None:
    limits = FloodLimits(
        global_per_second=1_000, chat_per_second=1_000, chat_burst=1, group_per_minute=600
    )
    flood = FloodControl(limits)
    start = now()
    await asyncio.gather(*(send(flood, bot, -500, f"g{i}") for i in range(5)))
    assert now() - start >= 0.35  # 10 a second after the first
    assert texts(tg, -500) == [f"g{i}" for i in range(5)]


@in_virtual_time
async def test_global_pacing(tg: FakeTelegramServer, bot: Bot) -> None:
    limits = FloodLimits(global_per_second=20, chat_per_second=1_000, chat_burst=10)
    flood = FloodControl(limits)
    start = now()
    await asyncio.gather(*(send(flood, bot, 1_000 + n, f"c{n}") for n in range(40)))
    assert now() - start >= 1.5
    assert len(tg.sent_messages()) == 40


async def test_global_pacing_keeps_its_rate_while_the_event_loop_is_busy() -> None:
    """Senders whose slots came while the event loop was busy go in the same wakeup: 200
    sends at 1,000 a second take about 0.2 s though every loop iteration takes 10 ms (a
    bucket of one let one through per iteration: 2 s), and never faster than the rate."""
    limits = FloodLimits(global_per_second=1_000, chat_per_second=1_000, chat_burst=10)
    flood = FloodControl(limits)
    sent: list[float] = []

    async def call() -> None:
        sent.append(time.monotonic())

    busy = True

    async def hog() -> None:
        while busy:
            time.sleep(0.01)  # noqa: ASYNC251 (a turn's CPU between two looks at the clock)
            await asyncio.sleep(0)

    hogging = asyncio.create_task(hog())
    start = time.monotonic()
    await asyncio.gather(*(flood.send(5_000 + n, call) for n in range(200)))
    busy = False
    await hogging
    took = time.monotonic() - start
    assert 0.19 <= took < 1.0, took
    assert len(sent) == 200


@in_virtual_time
async def test_idle_chats_do_not_accumulate_state(tg: FakeTelegramServer, bot: Bot) -> None:
    limits = FloodLimits(global_per_second=100_000, chat_per_second=1_000, chat_burst=1)
    flood = FloodControl(limits)
    await asyncio.gather(*(send(flood, bot, 10_000 + n, "hi") for n in range(1_000)))
    assert len(tg.sent_messages()) == 1_000
    await asyncio.sleep(0.05)  # the chats' buckets drain in 1 ms
    assert flood.tracked_chats == 0
    assert flood._chats == {}


# ---- failures ---------------------------------------------------------------------------


@in_virtual_time
async def test_permanent_error_raises_at_once(tg: FakeTelegramServer, bot: Bot) -> None:
    flood = FloodControl(FAST)
    tg.fail_next("sendMessage", error_code=400, description="Bad Request: chat not found")
    with pytest.raises(MessengerError, match="chat not found") as info:
        await send(flood, bot, 3, "hello")
    assert isinstance(info.value.__cause__, TelegramBadRequest)
    assert len(tg.requests_for("sendMessage")) == 1

    tg.block_user(4)
    with pytest.raises(MessengerError, match="blocked") as info:
        await send(flood, bot, 4, "hello")
    assert isinstance(info.value.__cause__, TelegramForbiddenError)
    assert len(tg.requests_for("sendMessage")) == 2


@in_virtual_time
async def test_server_errors_are_retried_with_backoff(tg: FakeTelegramServer, bot: Bot) -> None:
    flood = FloodControl(FAST)
    tg.fail_next("sendMessage", error_code=502)
    tg.fail_next("sendMessage", error_code=500)
    attempts: Attempts = []
    with capture_logs() as logs:
        await send(flood, bot, 8, "hello", attempts)
    (_, first), _, (_, last) = attempts
    assert last - first >= 1.45  # 0.5 s, then 1 s
    assert texts(tg, 8) == ["hello"]
    assert [r.error_code for r in tg.requests_for("sendMessage")] == [502, 500, None]
    retries = [e for e in logs if e["event"] == "telegram.send_retry"]
    assert [(e["attempt"], e["delay"]) for e in retries] == [(1, 0.5), (2, 1.0)]


@in_virtual_time
async def test_server_errors_give_up_after_max_attempts(tg: FakeTelegramServer, bot: Bot) -> None:
    flood = FloodControl(FAST, max_attempts=3, max_backoff=0.01)
    tg.fail_next("sendMessage", error_code=500, times=5)
    with pytest.raises(MessengerError, match="after 3 attempts") as info:
        await send(flood, bot, 8, "hello")
    assert isinstance(info.value.__cause__, TelegramServerError)
    assert len(tg.requests_for("sendMessage")) == 3
    assert tg.sent_messages() == []


async def test_unreachable_api_raises_after_retries() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    bot = make_bot(f"http://127.0.0.1:{port}", "123:TEST")
    flood = FloodControl(FAST, max_attempts=3, max_backoff=0.01)
    try:
        with pytest.raises(MessengerError, match="unreachable") as info:
            await send(flood, bot, 8, "hello")
    finally:
        await bot.session.close()
    assert isinstance(info.value.__cause__, TelegramNetworkError)


def test_invalid_limits_are_rejected() -> None:
    with pytest.raises(ValueError, match="chat_per_second"):
        FloodLimits(chat_per_second=0)
    with pytest.raises(ValueError, match="chat_burst"):
        FloodLimits(chat_burst=0)
    with pytest.raises(ValueError, match="max_attempts"):
        FloodControl(max_attempts=0)
