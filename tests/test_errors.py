"""Errors at every boundary: one botkit tree, vendor errors converted where botkit meets them."""

from __future__ import annotations

import inspect
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiogram.exceptions import AiogramError, ClientDecodeError, TelegramBadRequest
from structlog.testing import capture_logs

from botkit import errors
from botkit.messengers.flood import FloodControl
from botkit.messengers.telegram import TelegramMessenger
from botkit.stores import SqliteUserStore
from botkit.testing import FakeAnthropicServer, FakeTelegramServer, ask, make_bot, running

NEWCOMER = 1301
PROXY_PAGE = "<html>502 Bad Gateway</html>"
ATTEMPTS = 2
"""Tries of one request in these tests (no pause between them)."""


# --- the tree ------------------------------------------------------------------------------


def test_every_botkit_error_is_drawn_in_the_tree() -> None:
    drawn = errors.__doc__ or ""
    for name in errors.__all__:
        error = getattr(errors, name)
        assert inspect.isclass(error) and issubclass(error, errors.BotkitError), name
        assert f"─ {name} " in drawn or name == "BotkitError", f"{name} is not in the tree"


def test_store_errors_are_botkit_errors_and_exported() -> None:
    import botkit

    assert botkit.StoreError is errors.StoreError
    assert issubclass(errors.StoreError, errors.BotkitError)


# --- the Telegram messenger ----------------------------------------------------------------


@pytest.fixture
async def messenger(telegram: FakeTelegramServer) -> AsyncIterator[TelegramMessenger]:
    flood = FloodControl.unlimited(max_attempts=ATTEMPTS, max_backoff=0)
    opened = TelegramMessenger(
        telegram.token, api_base=telegram.base_url, flood=flood, rich_messages="off"
    )
    yield opened
    await opened.close()


async def test_a_refused_typing_indicator_is_a_messenger_error(
    telegram: FakeTelegramServer, messenger: TelegramMessenger
) -> None:
    telegram.fail_next("sendChatAction", error_code=400, description="Bad Request: chat not found")
    with pytest.raises(errors.MessengerError, match="chat not found") as raised:
        await messenger.send_typing(NEWCOMER)
    assert isinstance(raised.value.__cause__, TelegramBadRequest)


async def test_a_garbled_answer_to_typing_is_a_messenger_error_without_the_token(
    telegram: FakeTelegramServer, messenger: TelegramMessenger
) -> None:
    telegram.garble_next("sendChatAction", body=PROXY_PAGE)
    with pytest.raises(errors.MessengerError, match="sendChatAction") as raised:
        await messenger.send_typing(NEWCOMER)
    assert isinstance(raised.value.__cause__, ClientDecodeError)
    assert telegram.token not in str(raised.value)


async def test_a_garbled_answer_at_start_is_a_messenger_error(
    telegram: FakeTelegramServer, messenger: TelegramMessenger
) -> None:
    telegram.garble_next("getMe", body="{not json", status=200, times=ATTEMPTS)
    with pytest.raises(errors.MessengerError, match="getMe") as raised:
        await messenger.start()
    assert isinstance(raised.value.__cause__, AiogramError)


@pytest.mark.parametrize("method", ["getMyCommands", "setMyCommands"])
async def test_a_garbled_answer_while_setting_the_menu_is_a_messenger_error(
    telegram: FakeTelegramServer, messenger: TelegramMessenger, method: str
) -> None:
    telegram.garble_next(method, body=PROXY_PAGE, times=ATTEMPTS)
    with pytest.raises(errors.MessengerError, match=method) as raised:
        await messenger.sync_commands([("help", "what I can do")])
    assert isinstance(raised.value.__cause__, ClientDecodeError)


async def test_a_garbled_answer_to_a_reply_is_retried_and_the_reply_arrives(
    telegram: FakeTelegramServer, messenger: TelegramMessenger
) -> None:
    page = f"<html>502: upstream failed for /bot{telegram.token}/sendMessage</html>"
    telegram.garble_next("sendMessage", body=page)
    with capture_logs() as logs:
        await messenger.send_text(NEWCOMER, "your answer")
    assert [m.plain_text for m in telegram.sent_messages(NEWCOMER)] == ["your answer"]
    assert [e["event"] for e in logs] == ["telegram.send_retry"]
    assert telegram.token not in str(logs), "a proxy page quoting the URL is never logged"


@pytest.mark.parametrize("method", ["sendMessage", "deleteWebhook"])
async def test_an_answer_garbled_every_time_is_a_messenger_error_without_the_token(
    telegram: FakeTelegramServer, messenger: TelegramMessenger, method: str
) -> None:
    telegram.garble_next(method, body=f"<html>no /bot{telegram.token}/</html>", times=ATTEMPTS)
    with pytest.raises(errors.MessengerError, match=f"{method} .* {ATTEMPTS} attempts") as raised:
        if method == "sendMessage":
            await messenger.send_text(NEWCOMER, "your answer")
        else:
            await messenger.delete_webhook()
    assert isinstance(raised.value.__cause__, ClientDecodeError)
    assert telegram.token not in str(raised.value)


async def test_a_garbled_answer_to_a_draft_still_gets_the_final_reply(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    telegram.garble_next("sendMessageDraft", body=PROXY_PAGE, times=100)
    bot = make_bot(claude, tmp_path, access="open", stream_replies=True)
    async with running(bot, telegram):
        assert "streamed?" in (await ask(telegram, NEWCOMER, "streamed?")).plain_text
    assert telegram.requests_for("sendMessageDraft"), "the drafts were tried"


async def test_a_garbled_menu_answer_at_start_does_not_stop_the_bot(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    telegram.garble_next("getMyCommands", body=PROXY_PAGE)
    bot = make_bot(claude, tmp_path, access="open")
    async with running(bot, telegram):
        assert "still here?" in (await ask(telegram, NEWCOMER, "still here?")).plain_text
    assert telegram.requests_for("getMyCommands")


# --- the user store during a turn ----------------------------------------------------------


async def test_a_store_error_in_a_turn_gets_the_error_text_and_polling_goes_on(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    path = tmp_path / "users.db"
    users = await SqliteUserStore.connect(path, busy_timeout=0.2)
    code = (await users.create_invite("user")).code
    bot = make_bot(claude, tmp_path, access="invite", users=users)
    async with running(bot, telegram):
        with locked(path):  # redeeming the invite needs a write: it fails with a StoreError
            refused = await ask(telegram, NEWCOMER, f"/start {code}")
        welcomed = await ask(telegram, NEWCOMER, f"/start {code}")
        answered = await ask(telegram, NEWCOMER, "and now?")
    assert refused.plain_text == bot.options.error_text
    assert welcomed.plain_text == bot.options.welcome_text
    assert "and now?" in answered.plain_text


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """While inside, another connection holds the SQLite file against every writer."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        db.execute("ROLLBACK")
        db.close()
