"""FloodControl driving the real aiogram Bot against the fake Telegram Bot API."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
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
from botkit.testing.telegram import FakeTelegramServer

FAST = FloodLimits(
    global_per_second=10_000, chat_per_second=1_000, chat_burst=10, group_per_minute=600_000
)
"""Limits high enough that pacing never shows in a test's duration."""


def make_bot(base_url: str, token: str) -> Bot:
    return Bot(token, session=AiohttpSession(api=TelegramAPIServer.from_base(base_url)))


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer() as server:
        yield server


@pytest.fixture
async def bot(tg: FakeTelegramServer) -> AsyncIterator[Bot]:
    bot = make_bot(tg.base_url, tg.token)
    yield bot
    await bot.session.close()


async def send(flood: FloodControl, bot: Bot, chat_id: int, text: str, **kwargs: Any) -> Message:
    return await flood.send(chat_id, lambda: bot.send_message(chat_id, text), **kwargs)


def texts(tg: FakeTelegramServer, chat_id: int | None = None) -> list[str]:
    return [m.text for m in tg.sent_messages(chat_id)]


# ---- flood waits ------------------------------------------------------------------------


async def test_429_waits_retry_after_and_resends_once(tg: FakeTelegramServer, bot: Bot) -> None:
    flood = FloodControl(FAST)
    tg.fail_next("sendMessage", retry_after=1)
    start = time.monotonic()
    with capture_logs() as logs:
        message = await send(flood, bot, 42, "hello")
    elapsed = time.monotonic() - start

    assert elapsed >= 0.99
    assert texts(tg, 42) == ["hello"]
    assert message.text == "hello"
    calls = tg.requests_for("sendMessage")
    assert [c.error_code for c in calls] == [429, None]
    assert calls[1].at - calls[0].at >= 0.99
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


async def test_flood_wait_keeps_order_in_chat_and_does_not_block_others(
    tg: FakeTelegramServer, bot: Bot
) -> None:
    flood = FloodControl(FAST)
    tg.fail_next("sendMessage", retry_after=1)  # hits the first request: "a0" to chat 1
    await asyncio.gather(
        send(flood, bot, 1, "a0"),
        send(flood, bot, 1, "a1"),
        send(flood, bot, 2, "b0"),
    )
    assert texts(tg) == ["b0", "a0", "a1"]
    b0, a0 = tg.requests_for("sendMessage")[1:3]
    assert a0.at - b0.at >= 0.9  # chat 2 went through while chat 1 waited


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


async def test_unlimited_still_waits_out_429_in_order(tg: FakeTelegramServer, bot: Bot) -> None:
    flood = FloodControl.unlimited()
    tg.fail_next("sendMessage", retry_after=1)
    start = time.monotonic()
    await asyncio.gather(*(send(flood, bot, 7, f"m{i}") for i in range(5)))
    assert time.monotonic() - start >= 0.99
    assert texts(tg, 7) == [f"m{i}" for i in range(5)]
    assert flood.tracked_chats == 0  # nothing to drain: dropped as soon as idle


async def test_still_rate_limited_after_max_attempts(tg: FakeTelegramServer, bot: Bot) -> None:
    flood = FloodControl(FAST, max_attempts=1)  # no wait after the last attempt
    tg.fail_next("sendMessage", retry_after=1)
    with pytest.raises(MessengerError, match="rate limited") as info:
        await send(flood, bot, 5, "never")
    assert isinstance(info.value.__cause__, TelegramRetryAfter)
    assert len(tg.requests_for("sendMessage")) == 1
    assert tg.sent_messages() == []


# ---- pacing -----------------------------------------------------------------------------


async def test_chat_pacing(tg: FakeTelegramServer, bot: Bot) -> None:
    limits = FloodLimits(global_per_second=1_000, chat_per_second=5, chat_burst=1)
    flood = FloodControl(limits)
    start = time.monotonic()
    await asyncio.gather(*(send(flood, bot, 9, f"m{i}") for i in range(5)))
    assert time.monotonic() - start >= 0.75
    assert texts(tg, 9) == [f"m{i}" for i in range(5)]


async def test_chat_pacing_carries_over_between_sequential_sends(
    tg: FakeTelegramServer, bot: Bot
) -> None:
    limits = FloodLimits(global_per_second=1_000, chat_per_second=10, chat_burst=1)
    flood = FloodControl(limits)
    start = time.monotonic()
    for i in range(4):
        await send(flood, bot, 9, f"m{i}")
    assert time.monotonic() - start >= 0.28  # the bucket is kept between sends


async def test_group_pacing(tg: FakeTelegramServer, bot: Bot) -> None:
    limits = FloodLimits(
        global_per_second=1_000, chat_per_second=1_000, chat_burst=1, group_per_minute=600
    )
    flood = FloodControl(limits)
    start = time.monotonic()
    await asyncio.gather(*(send(flood, bot, -500, f"g{i}") for i in range(5)))
    assert time.monotonic() - start >= 0.35  # 10 a second after the first
    assert texts(tg, -500) == [f"g{i}" for i in range(5)]


async def test_global_pacing(tg: FakeTelegramServer, bot: Bot) -> None:
    limits = FloodLimits(global_per_second=20, chat_per_second=1_000, chat_burst=10)
    flood = FloodControl(limits)
    start = time.monotonic()
    await asyncio.gather(*(send(flood, bot, 1_000 + n, f"c{n}") for n in range(40)))
    assert time.monotonic() - start >= 1.5
    assert len(tg.sent_messages()) == 40


async def test_idle_chats_do_not_accumulate_state(tg: FakeTelegramServer, bot: Bot) -> None:
    limits = FloodLimits(global_per_second=100_000, chat_per_second=1_000, chat_burst=1)
    flood = FloodControl(limits)
    await asyncio.gather(*(send(flood, bot, 10_000 + n, "hi") for n in range(1_000)))
    assert len(tg.sent_messages()) == 1_000
    await asyncio.sleep(0.05)  # the chats' buckets drain in 1 ms
    assert flood.tracked_chats == 0
    assert flood._chats == {}


# ---- failures ---------------------------------------------------------------------------


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


async def test_server_errors_are_retried_with_backoff(tg: FakeTelegramServer, bot: Bot) -> None:
    flood = FloodControl(FAST)
    tg.fail_next("sendMessage", error_code=502)
    tg.fail_next("sendMessage", error_code=500)
    start = time.monotonic()
    with capture_logs() as logs:
        await send(flood, bot, 8, "hello")
    assert time.monotonic() - start >= 1.45  # 0.5 s, then 1 s
    assert texts(tg, 8) == ["hello"]
    assert [r.error_code for r in tg.requests_for("sendMessage")] == [502, 500, None]
    retries = [e for e in logs if e["event"] == "telegram.send_retry"]
    assert [(e["attempt"], e["delay"]) for e in retries] == [(1, 0.5), (2, 1.0)]


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
