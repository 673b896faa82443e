"""The messenger's hot sends (messages, drafts, typing) posted as JSON past aiogram's models:
the same requests on the wire, aiogram's exceptions and flood control when they fail."""

from __future__ import annotations

import asyncio
import socket
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiogram.exceptions import TelegramForbiddenError, TelegramNetworkError
from aiogram.methods import TelegramMethod
from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup, ReplyParameters
from aiohttp import web

from botkit.errors import MessengerError
from botkit.messengers.base import Button, Reply
from botkit.messengers.flood import FloodControl
from botkit.messengers.telegram import TelegramDraft, TelegramMessenger, draft_html
from botkit.metrics import Metrics
from botkit.testing import FakeTelegramServer, run_in_virtual_time
from botkit.testing._loopback import serve_on_loopback

CHAT = 4201
TOPIC = 7
ATTEMPTS = 2
SECRET_TOKEN = "987654:SECRET-TOKEN-NEVER-SHOWN"


def open_messenger(
    base_url: str, token: str, *, paid_broadcast: bool = False, attempts: int = ATTEMPTS
) -> TelegramMessenger:
    flood = FloodControl.unlimited(max_attempts=attempts, max_backoff=0)
    return TelegramMessenger(
        token, api_base=base_url, flood=flood, paid_broadcast=paid_broadcast, rich_messages="off"
    )


@pytest.fixture
async def messenger(telegram: FakeTelegramServer) -> AsyncIterator[TelegramMessenger]:
    opened = open_messenger(telegram.base_url, telegram.token)
    yield opened
    await opened.close()


def in_virtual_time(
    test: Callable[[FakeTelegramServer, TelegramMessenger], Awaitable[None]],
) -> Callable[[], None]:
    """``test`` against a fresh fake and messenger, on a loop whose waits take no real time."""

    async def main() -> None:
        async with FakeTelegramServer() as telegram:
            messenger = open_messenger(telegram.base_url, telegram.token, attempts=3)
            try:
                await test(telegram, messenger)
            finally:
                await messenger.close()

    def run() -> None:
        run_in_virtual_time(main)

    return run


def last_params(telegram: FakeTelegramServer, method: str) -> dict[str, Any]:
    return telegram.requests_for(method)[-1].params


async def both_ways(
    telegram: FakeTelegramServer,
    method: str,
    ours: Callable[[], Awaitable[object]],
    aiogram: Callable[[], Awaitable[object]],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parameters the fake recorded for ``ours`` and for the same call made by aiogram."""
    await ours()
    sent = last_params(telegram, method)
    await aiogram()
    return sent, last_params(telegram, method)


# --- the same requests as aiogram's ------------------------------------------------------------


async def test_a_reply_with_everything_is_the_request_aiogram_sends(
    telegram: FakeTelegramServer,
) -> None:
    messenger = open_messenger(telegram.base_url, telegram.token, paid_broadcast=True)
    reply = Reply("**Pick** one", ((Button("Yes", "y"), Button("No", "n")), (Button("?", "h"),)))
    keyboard = InlineKeyboardMarkup(
        inline_keyboard=[
            [
                InlineKeyboardButton(text="Yes", callback_data="y"),
                InlineKeyboardButton(text="No", callback_data="n"),
            ],
            [InlineKeyboardButton(text="?", callback_data="h")],
        ]
    )
    try:
        ours, theirs = await both_ways(
            telegram,
            "sendMessage",
            lambda: messenger.send_reply(CHAT, reply, thread_id=TOPIC, reply_to=3),
            lambda: messenger.api.send_message(
                CHAT,
                "<b>Pick</b> one",
                parse_mode="HTML",
                message_thread_id=TOPIC,
                reply_parameters=ReplyParameters(message_id=3, allow_sending_without_reply=True),
                allow_paid_broadcast=True,
                reply_markup=keyboard,
            ),
        )
    finally:
        await messenger.close()
    assert ours == theirs
    assert ours["reply_markup"]["inline_keyboard"][1] == [{"text": "?", "callback_data": "h"}]


async def test_a_plain_message_is_the_request_aiogram_sends(
    telegram: FakeTelegramServer, messenger: TelegramMessenger
) -> None:
    ours, theirs = await both_ways(
        telegram,
        "sendMessage",
        lambda: messenger.send_text(CHAT, "just `words`", thread_id=1),  # General: no thread
        lambda: messenger.api.send_message(CHAT, "just <code>words</code>", parse_mode="HTML"),
    )
    assert (
        ours == theirs == {"chat_id": CHAT, "text": "just <code>words</code>", "parse_mode": "HTML"}
    )


@pytest.mark.parametrize("thread_id", [None, TOPIC])
async def test_typing_is_the_request_aiogram_sends(
    telegram: FakeTelegramServer, messenger: TelegramMessenger, thread_id: int | None
) -> None:
    ours, theirs = await both_ways(
        telegram,
        "sendChatAction",
        lambda: messenger.send_typing(CHAT, thread_id=thread_id),
        lambda: messenger.api.send_chat_action(CHAT, "typing", message_thread_id=thread_id),
    )
    assert ours == theirs


@pytest.mark.parametrize("text", ["", "Hello **world**\nand mo"])
async def test_a_draft_is_the_request_aiogram_sends(
    telegram: FakeTelegramServer, messenger: TelegramMessenger, text: str
) -> None:
    draft = TelegramDraft(messenger.sender, CHAT, interval=0, thread_id=TOPIC)
    draft.text = text  # what has streamed in when the placeholder goes

    async def show() -> None:
        await draft.start()
        await telegram.wait_for_requests("sendMessageDraft")
        await draft.finish()

    ours, theirs = await both_ways(
        telegram,
        "sendMessageDraft",
        show,
        lambda: messenger.api.send_message_draft(
            CHAT,
            draft.draft_id,
            text=draft_html(text),
            parse_mode="HTML",
            message_thread_id=TOPIC,
            can_stop=True,
            keep_on_stop=True,
        ),
    )
    assert ours == theirs
    assert ("text" in ours) == bool(text)  # aiogram leaves an empty text out


async def test_the_hot_sends_go_around_aiogrammed_requests(
    telegram: FakeTelegramServer, messenger: TelegramMessenger, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("sent through aiogram's request path")

    monkeypatch.setattr(messenger.api.session, "make_request", refuse)
    telegram.fail_next("sendMessage", error_code=502)  # failures are read without it too
    await messenger.send_text(CHAT, "hi")
    await messenger.send_typing(CHAT)
    draft = TelegramDraft(messenger.sender, CHAT, interval=0)
    await draft.start()
    await telegram.wait_for_requests("sendMessageDraft")
    await draft.finish()
    assert [m.text for m in telegram.sent_messages(CHAT)] == ["hi"]
    assert len(telegram.drafts(CHAT)) == 1


# --- failures, as aiogram raised them ----------------------------------------------------------


@in_virtual_time
async def test_a_flood_wait_is_waited_out_and_the_message_arrives_once(
    telegram: FakeTelegramServer, messenger: TelegramMessenger
) -> None:
    telegram.fail_next("sendMessage", error_code=429, retry_after=5)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await messenger.send_text(CHAT, "hello")
    assert loop.time() - started >= 5
    assert [m.text for m in telegram.sent_messages(CHAT)] == ["hello"]
    assert [r.error_code for r in telegram.requests_for("sendMessage")] == [429, None]


async def test_html_telegram_cannot_parse_is_sent_again_as_plain_text(
    telegram: FakeTelegramServer, messenger: TelegramMessenger
) -> None:
    telegram.fail_next(
        "sendMessage",
        error_code=400,
        description="Bad Request: can't parse entities: Unsupported start tag at byte offset 0",
    )
    await messenger.send_text(CHAT, "**bold** move")
    [message] = telegram.sent_messages(CHAT)
    assert (message.text, message.parse_mode) == ("bold move", None)
    assert "parse_mode" not in message.params


async def test_a_user_who_blocked_the_bot_is_a_refusal_with_aiograms_error(
    telegram: FakeTelegramServer, messenger: TelegramMessenger
) -> None:
    telegram.block_user(CHAT)
    with pytest.raises(MessengerError, match="bot was blocked by the user") as raised:
        await messenger.send_text(CHAT, "hello")
    cause = raised.value.__cause__
    assert isinstance(cause, TelegramForbiddenError)
    assert isinstance(cause.method, TelegramMethod) and cause.method.__api_method__ == "sendMessage"
    assert len(telegram.requests_for("sendMessage")) == 1  # refused: not retried


async def test_an_unreachable_api_is_a_network_error_that_names_the_method() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    messenger = open_messenger(f"http://127.0.0.1:{port}", SECRET_TOKEN)
    try:
        with pytest.raises(MessengerError, match=r"sendMessage.*unreachable") as raised:
            await messenger.send_text(CHAT, "hello")
        with pytest.raises(MessengerError, match="sendChatAction") as typing:
            await messenger.send_typing(CHAT)
        draft = TelegramDraft(messenger.sender, CHAT)
        await draft.start()
        await draft.finish()  # a draft that cannot go is let go
    finally:
        await messenger.close()
    for error in (raised.value, typing.value):
        assert isinstance(error.__cause__, TelegramNetworkError)
        assert SECRET_TOKEN not in str(error) and SECRET_TOKEN not in str(error.__cause__)


async def test_an_answer_slower_than_the_session_timeout_is_a_network_error(
    telegram: FakeTelegramServer, messenger: TelegramMessenger
) -> None:
    messenger.api.session.timeout = 0.05
    telegram.latency = 1.0
    with pytest.raises(MessengerError, match="Request timeout error") as raised:
        await messenger.send_typing(CHAT)
    assert isinstance(raised.value.__cause__, TelegramNetworkError)


SENDS: dict[str, Callable[[TelegramMessenger], Awaitable[object]]] = {
    "sendMessage": lambda messenger: messenger.send_text(CHAT, "hello"),  # posted as JSON
    "editMessageText": lambda messenger: messenger.edit_reply(CHAT, 1, Reply("hi")),  # aiogram
}


@pytest.mark.parametrize("method", list(SENDS))
async def test_a_network_error_quoting_the_url_does_not_show_the_token(method: str) -> None:
    async def loop_forever(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(request.path)  # until aiohttp gives up

    app = web.Application()
    app.router.add_route("*", "/bot{token}/{method}", loop_forever)
    runner, base_url = await serve_on_loopback(app)
    messenger = open_messenger(base_url, SECRET_TOKEN, attempts=1)
    try:
        with pytest.raises(MessengerError, match="TooManyRedirects") as raised:
            await SENDS[method](messenger)
    finally:
        await messenger.close()
        await runner.cleanup()
    assert isinstance(raised.value.__cause__, TelegramNetworkError)
    assert f"bot***/{method}" in str(raised.value.__cause__)
    shown = "".join(traceback.format_exception(raised.value))  # what a log would print
    assert SECRET_TOKEN not in shown


# --- metrics -------------------------------------------------------------------------------


@in_virtual_time
async def test_the_hot_sends_are_counted_by_method_and_outcome(
    telegram: FakeTelegramServer, messenger: TelegramMessenger
) -> None:
    metrics = Metrics()
    messenger.observe(metrics)
    telegram.fail_next("sendMessage", error_code=502)
    await messenger.send_text(CHAT, "one")  # server, then ok
    telegram.fail_next("sendMessage", error_code=429, retry_after=3)
    await messenger.send_text(CHAT, "two")  # flood, then ok
    telegram.fail_next("sendChatAction", error_code=400, description="Bad Request: no")
    with pytest.raises(MessengerError):
        await messenger.send_typing(CHAT)  # refused
    await messenger.send_typing(CHAT)
    draft = TelegramDraft(messenger.sender, CHAT)
    await draft.start()
    await telegram.wait_for_requests("sendMessageDraft")
    await draft.finish()
    await messenger.api.get_me()  # everything else still counted by aiogram's middleware

    def count(method: str, outcome: str) -> float | None:
        labels = {"method": method, "outcome": outcome}
        return metrics.registry.get_sample_value("botkit_telegram_requests_total", labels)

    assert count("sendMessage", "ok") == 2
    assert count("sendMessage", "server") == 1
    assert count("sendMessage", "flood") == 1
    assert count("sendChatAction", "refused") == 1
    assert count("sendChatAction", "ok") == 1
    assert count("sendMessageDraft", "ok") == 1
    assert count("getMe", "ok") == 1
