"""One update the client cannot parse, or one bad answer from Telegram, never stops polling."""

from __future__ import annotations

import asyncio
import gc
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from botkit import Bot, ConfigError
from botkit.messengers.flood import FloodControl
from botkit.messengers.telegram import TelegramMessenger
from botkit.messengers.updates import parse_update
from botkit.runtime.inbox import Inbox
from botkit.runtime.telegram import serve
from botkit.testing import FakeAnthropicServer, FakeTelegramServer, make_bot, running

ALICE, BOB, CAROL = 801, 802, 803
ALLOWED = frozenset({ALICE, BOB, CAROL})

FORWARD_FROM_2015 = {"type": "hidden_user", "date": 1422450181}
"""What Telegram sends for a forward of a 2015 message (aiogram issue #1840)."""


def text_message(telegram: FakeTelegramServer, user_id: int, text: str) -> dict[str, Any]:
    """A well-formed private text message from ``user_id``, as Telegram sends it."""
    return {
        "message_id": int(time.monotonic_ns() % 1_000_000),
        "date": int(time.time()),
        "chat": {"id": user_id, "type": "private", "first_name": "U"},
        "from": {"id": user_id, "is_bot": False, "first_name": "U"},
        "text": text,
    }


def messenger_for_test(bot: Bot, telegram: FakeTelegramServer, **kwargs: Any) -> TelegramMessenger:
    return TelegramMessenger(
        telegram.token,
        api_base=telegram.base_url,
        poll_timeout=1,
        flood=FloodControl.unlimited(),
        inbox=Inbox(bot.settings.sessions_dir / "inbox.jsonl"),
        **kwargs,
    )


async def test_forwarded_message_from_2015_gets_a_normal_answer(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    message = text_message(telegram, ALICE, "what is this old thing?")
    message["forward_origin"] = FORWARD_FROM_2015
    message["forward_date"] = 1422450181
    async with running(make_bot(claude, tmp_path, allowed_users=ALLOWED), telegram):
        telegram.inject_update({"message": message})
        [reply] = await telegram.wait_for_messages(ALICE)
    assert "what is this old thing?" in reply.plain_text  # the fake model echoes
    assert telegram.pending_updates == []


async def test_external_reply_with_an_empty_story_gets_a_normal_answer(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    message = text_message(telegram, ALICE, "look at this story")
    message["external_reply"] = {
        "origin": {"type": "channel", "date": 1, "chat": {"id": -100, "type": "channel"}},
        "story": {},
    }
    async with running(make_bot(claude, tmp_path, allowed_users=ALLOWED), telegram):
        telegram.inject_update({"message": message})
        [reply] = await telegram.wait_for_messages(ALICE)
    assert "look at this story" in reply.plain_text


async def test_unparseable_update_is_journaled_confirmed_and_the_batch_answered(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    broken = text_message(telegram, CAROL, "x")
    broken["chat"] = "not a chat"
    telegram.inject_update({"message": text_message(telegram, ALICE, "before")})
    broken_id = telegram.inject_update({"message": broken})
    telegram.inject_update({"message": text_message(telegram, BOB, "after")})
    with capture_logs() as logs:
        async with running(bot, telegram):
            await telegram.wait_for_messages(ALICE)
            await telegram.wait_for_messages(BOB)
    assert telegram.confirmed_offset > broken_id
    assert telegram.sent_messages(CAROL) == []
    [kept] = Inbox(bot.settings.sessions_dir / "inbox.jsonl").unparseable()
    assert kept.update_id == broken_id
    assert kept.payload["message"]["chat"] == "not a chat"
    assert kept.error is not None and "message.chat" in kept.error
    [warning] = [e for e in logs if e["event"] == "telegram.update_unparseable"]
    assert warning["log_level"] == "warning"
    assert warning["update_id"] == broken_id
    assert warning["error"].startswith("message.chat")


async def test_unparseable_updates_survive_inbox_compaction(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.jsonl")
    inbox.reject(7, {"update_id": 7, "message": 5}, "message: not a message")
    inbox.close()
    reopened = Inbox(tmp_path / "inbox.jsonl")  # compacts on open
    assert [item.update_id for item in reopened.unparseable()] == [7]
    assert reopened.seen(7)
    assert reopened.pending() == []
    assert (tmp_path / "inbox.jsonl").stat().st_mode & 0o777 == 0o600


async def test_a_degraded_update_is_replayed_after_a_crash(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    message = text_message(telegram, ALICE, "replay me")
    message["forward_origin"] = FORWARD_FROM_2015
    inbox = Inbox(bot.settings.sessions_dir / "inbox.jsonl")
    inbox.accept(41, {"update_id": 41, "message": message})  # accepted, then the bot died
    inbox.close()
    async with running(bot, telegram):
        [reply] = await telegram.wait_for_messages(ALICE)
    assert "replay me" in reply.plain_text


@pytest.mark.parametrize(
    "fault",
    [
        {"error_code": 500},
        {"error_code": 502},
        {"error_code": 400, "description": "Bad Request: something odd"},
        {"error_code": 429, "retry_after": 1},
        {"error_code": 404},
    ],
)
async def test_polling_survives_error_answers(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    fault: dict[str, Any],
) -> None:
    telegram.fail_next("getUpdates", **fault, times=2)
    async with running(make_bot(claude, tmp_path, allowed_users=ALLOWED), telegram):
        telegram.send_text(ALICE, "still there?")
        [reply] = await telegram.wait_for_messages(ALICE, timeout=15)
    assert "still there?" in reply.plain_text
    failed = [r for r in telegram.requests_for("getUpdates") if r.error_code is not None]
    assert len(failed) == 2


@pytest.mark.parametrize(
    ("body", "status"),
    [("<html>502 Bad Gateway</html>", 502), ("{not json", 200), ('{"ok": true}', 200)],
)
async def test_polling_survives_answers_that_are_not_the_api(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    body: str,
    status: int,
) -> None:
    telegram.garble_next("getUpdates", body=body, status=status)
    async with running(make_bot(claude, tmp_path, allowed_users=ALLOWED), telegram):
        telegram.send_text(ALICE, "hello again")
        [reply] = await telegram.wait_for_messages(ALICE, timeout=15)
    assert "hello again" in reply.plain_text


async def test_a_rejected_token_while_polling_stops_with_one_sentence(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    telegram.fail_next("getUpdates", error_code=401, description="Unauthorized", times=100)
    with pytest.raises(ConfigError, match="TELEGRAM_BOT_TOKEN"):
        await serve(bot, asyncio.Event(), messenger=messenger_for_test(bot, telegram))


async def test_another_instance_polling_stops_the_bot_once_it_persists(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    telegram.fail_next("getUpdates", error_code=409, description="Conflict", times=1000)
    messenger = messenger_for_test(bot, telegram, conflict_timeout=1.5)
    with pytest.raises(ConfigError, match="Another instance"):
        await serve(bot, asyncio.Event(), messenger=messenger)
    assert len(telegram.requests_for("getUpdates")) >= 2  # a short conflict was waited out


async def test_a_brief_conflict_is_waited_out(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    telegram.fail_next("getUpdates", error_code=409, description="Conflict", times=1)
    stop = asyncio.Event()
    messenger = messenger_for_test(bot, telegram, conflict_timeout=60)
    task = asyncio.create_task(serve(bot, stop, messenger=messenger))
    telegram.send_text(ALICE, "after the conflict")
    [reply] = await telegram.wait_for_messages(ALICE, timeout=15)
    stop.set()
    await task
    assert "after the conflict" in reply.plain_text


async def test_run_bots_start_up_objects_are_left_out_of_full_collections(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    stop = asyncio.Event()
    messenger = messenger_for_test(bot, telegram)
    task = asyncio.create_task(serve(bot, stop, messenger=messenger, freeze_startup=True))
    try:
        telegram.send_text(ALICE, "after start-up")
        [reply] = await telegram.wait_for_messages(ALICE, timeout=15)
        assert gc.get_freeze_count() > 10_000  # modules, classes, clients: frozen once started
    finally:
        stop.set()
        await task
        gc.unfreeze()
    assert "after start-up" in reply.plain_text


@pytest.mark.parametrize("failure", ["404", "timeout"])
async def test_a_failed_photo_download_does_not_stop_polling(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    failure: str,
) -> None:
    if failure == "404":
        telegram.fail_downloads(error_code=404)
    else:
        telegram.stall_downloads()
    async with running(make_bot(claude, tmp_path, allowed_users=ALLOWED), telegram) as messenger:
        messenger.download_timeout = 1
        telegram.send_photo(ALICE, caption="what is in it?")
        [answer] = await telegram.wait_for_messages(ALICE, timeout=15)
        telegram.send_text(BOB, "next one")
        [reply] = await telegram.wait_for_messages(BOB)
    assert "next one" in reply.plain_text
    printed = capsys.readouterr()
    assert "download_failed" in printed.out + printed.err, "the failure was logged"
    assert telegram.token not in printed.out + printed.err
    assert telegram.token not in answer.text
    assert "Traceback" not in printed.out + printed.err


# ---- property: any mangled update -------------------------------------------------------


def _valid_updates(user_id: int, chat_id: int) -> list[dict[str, Any]]:
    """One update of each kind botkit may receive, in the shapes Telegram sends."""
    user = {"id": user_id, "is_bot": False, "first_name": "Mallory", "username": "mal"}
    private = {"id": user_id, "type": "private", "first_name": "Mallory"}
    group = {"id": chat_id, "type": "supergroup", "title": "Group", "is_forum": True}
    base = {"message_id": 9, "date": 1700000000, "chat": private, "from": user}
    photo = [{"file_id": "f", "file_unique_id": "u", "width": 9, "height": 9, "file_size": 9}]
    return [
        {
            "message": {
                **base,
                "text": "hello",
                "entities": [{"type": "bold", "offset": 0, "length": 2}],
            }
        },
        {"message": {**base, "caption": "pic", "photo": photo}},
        {"message": {**base, "chat": group, "text": "@botkit_test_bot hi", "message_thread_id": 5}},
        {
            "message": {
                **base,
                "text": "fwd",
                "forward_origin": {"type": "user", "date": 1, "sender_user": user},
            }
        },
        {
            "message": {
                **base,
                "text": "re",
                "reply_to_message": {**base, "message_id": 3, "text": "orig"},
            }
        },
        {"message": {**base, "text": "q", "quote": {"text": "orig", "position": 0}}},
        {"message": {**base, "voice": {"file_id": "v", "file_unique_id": "v", "duration": 1}}},
        {"edited_message": {**base, "edit_date": 1700000001, "text": "edited"}},
        {"callback_query": {"id": "1", "from": user, "chat_instance": "c", "data": "x"}},
        {"stopped_message_generation": {"chat": private, "draft_id": 1}},
    ]


_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path inside ``value``, except the update id."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        items: list[tuple[Any, Any]] = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return found
    for key, child in items:
        if prefix == () and key == "update_id":
            continue
        found.append((*prefix, key))
        found += _paths(child, (*prefix, key))
    return found


@st.composite
def mangled_updates(draw: st.DrawFn) -> dict[str, Any]:
    """A valid update of any kind with a few fields removed or given the wrong type."""
    update = draw(st.sampled_from(_valid_updates(CAROL, -1001)))
    update = _deep_copy(update)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(update)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        holder: Any = update
        for key in path[:-1]:
            holder = holder[key]
        if draw(st.booleans()) and isinstance(holder, dict):
            del holder[path[-1]]
        else:
            holder[path[-1]] = draw(_JUNK)
    return update


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


@given(mangled=st.lists(mangled_updates(), min_size=1, max_size=6))
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_mangled_updates_never_stop_the_bot(
    mangled: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    asyncio.run(_mangled_batch(mangled, tmp_path_factory.mktemp("mangled")))


async def _mangled_batch(mangled: list[dict[str, Any]], tmp_path: Path) -> None:
    async with FakeTelegramServer() as telegram, FakeAnthropicServer() as claude:
        bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
        async with running(bot, telegram) as messenger:
            telegram.send_text(ALICE, "first")
            for update in mangled:
                telegram.inject_update(update)
            last = telegram.send_text(BOB, "last")
            await telegram.wait_for_messages(ALICE)
            await telegram.wait_for_messages(BOB)
            await _confirmed(telegram, last)
            assert messenger.me is not None  # still serving
        assert telegram.pending_updates == []


async def _confirmed(telegram: FakeTelegramServer, update_id: int) -> None:
    """Wait until the bot has told Telegram it received ``update_id`` (its next poll)."""
    polls = len(telegram.requests_for("getUpdates"))
    while telegram.confirmed_offset <= update_id:
        polls += 1
        await telegram.wait_for_requests("getUpdates", polls)


def test_parse_update_keeps_what_it_can() -> None:
    user = {"id": 1, "is_bot": False, "first_name": "A"}
    chat = {"id": 1, "type": "private"}
    message = {"message_id": 1, "date": 1, "chat": chat, "from": user, "text": "hi"}
    replied = {"message_id": 2, "date": 1, "chat": chat, "forward_origin": FORWARD_FROM_2015}
    parsed = parse_update({"update_id": 1, "message": {**message, "reply_to_message": replied}})
    assert parsed.update is not None and parsed.update.message is not None
    assert parsed.update.message.reply_to_message is not None
    assert parsed.dropped == ("message.reply_to_message.forward_origin",)
    broken = parse_update({"update_id": 2, "message": {**message, "text": 5}})
    assert broken.update is None and broken.error is not None
    assert broken.error.startswith("message.text")
