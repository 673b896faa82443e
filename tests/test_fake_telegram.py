"""The fake Telegram Bot API, driven by the real aiogram client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiogram import Bot, Dispatcher
from aiogram.client.default import DefaultBotProperties
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    TelegramBadRequest,
    TelegramConflictError,
    TelegramForbiddenError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramUnauthorizedError,
)
from aiogram.methods import TelegramMethod
from aiogram.types import BotCommand, Message, ReplyParameters

from botkit.testing.telegram import TINY_PNG, FakeTelegramServer, parse_html


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer() as server:
        yield server


def make_bot(
    server: FakeTelegramServer,
    token: str | None = None,
    default: DefaultBotProperties | None = None,
) -> Bot:
    session = AiohttpSession(api=TelegramAPIServer.from_base(server.base_url))
    return Bot(token or server.token, session=session, default=default)


@pytest.fixture
async def bot(tg: FakeTelegramServer) -> AsyncIterator[Bot]:
    bot = make_bot(tg)
    yield bot
    await bot.session.close()


class _UnknownMethod(TelegramMethod[bool]):
    __returning__ = bool
    __api_method__ = "sendTelepathy"


async def test_get_me(bot: Bot, tg: FakeTelegramServer) -> None:
    me = await bot.get_me()
    assert me.id == tg.bot_id
    assert me.is_bot
    assert me.username == "botkit_test_bot"
    assert me.first_name
    assert [r.method for r in tg.requests] == ["getMe"]


async def test_base_url_points_at_a_random_local_port(tg: FakeTelegramServer) -> None:
    assert tg.base_url.startswith("http://127.0.0.1:")
    async with FakeTelegramServer() as other:
        assert other.base_url != tg.base_url


async def test_send_message_is_recorded(bot: Bot, tg: FakeTelegramServer) -> None:
    first = await bot.send_message(42, "hello")
    second = await bot.send_message(42, "<b>bold</b> move", parse_mode="HTML")
    await bot.send_message(7, "elsewhere")

    assert isinstance(first, Message)
    assert first.chat.id == 42 and first.chat.type == "private"
    assert first.from_user is not None and first.from_user.id == tg.bot_id
    assert second.message_id == first.message_id + 1
    assert second.text == "bold move"
    assert second.entities is not None
    assert (second.entities[0].type, second.entities[0].offset, second.entities[0].length) == (
        "bold",
        0,
        4,
    )

    sent = tg.sent_messages(42)
    assert [m.text for m in sent] == ["hello", "<b>bold</b> move"]
    assert sent[1].parse_mode == "HTML" and sent[1].plain_text == "bold move"
    assert sent[0].params["chat_id"] == 42
    assert [m.chat_id for m in tg.sent_messages()] == [42, 42, 7]
    [call] = tg.requests_for("sendmessage")[:1]
    assert call.params == {"chat_id": 42, "text": "hello"}
    assert call.error_code is None


async def test_text_that_looks_like_json_stays_a_string(bot: Bot, tg: FakeTelegramServer) -> None:
    message = await bot.send_message(42, "123")
    assert message.text == "123"
    assert tg.sent_messages(42)[0].text == "123"


async def test_entities_are_echoed(bot: Bot, tg: FakeTelegramServer) -> None:
    from aiogram.types import MessageEntity

    message = await bot.send_message(
        42, "look here", entities=[MessageEntity(type="italic", offset=5, length=4)]
    )
    assert message.entities is not None and message.entities[0].type == "italic"


async def test_send_message_to_a_group_reply_and_keyboard(bot: Bot, tg: FakeTelegramServer) -> None:
    from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup

    tg.send_text(5, "hi all", chat_id=-100500, chat_type="supergroup", chat_title="Chat")
    markup = InlineKeyboardMarkup(
        inline_keyboard=[[InlineKeyboardButton(text="ok", callback_data="ok")]]
    )
    reply = await bot.send_message(
        -100500,
        "hello group",
        reply_parameters=ReplyParameters(message_id=1),
        reply_markup=markup,
    )
    assert reply.chat.type == "supergroup" and reply.chat.title == "Chat"
    assert reply.message_id == 2  # message ids are per chat and shared with users
    assert reply.reply_to_message is not None and reply.reply_to_message.text == "hi all"
    assert isinstance(reply.reply_markup, InlineKeyboardMarkup)
    assert reply.reply_markup.inline_keyboard[0][0].callback_data == "ok"


async def test_a_web_app_button_opens_https_in_a_private_chat_only(
    bot: Bot, tg: FakeTelegramServer
) -> None:
    from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup, WebAppInfo

    def app(url: str) -> InlineKeyboardMarkup:
        button = InlineKeyboardButton(text="open", web_app=WebAppInfo(url=url))
        return InlineKeyboardMarkup(inline_keyboard=[[button]])

    sent = await bot.send_message(5, "console", reply_markup=app("https://ops.example.org/app"))
    assert isinstance(sent.reply_markup, InlineKeyboardMarkup)
    with pytest.raises(TelegramBadRequest, match="Only HTTPS links are allowed"):
        await bot.send_message(5, "console", reply_markup=app("http://127.0.0.1:8080/app"))
    tg.send_text(5, "hi all", chat_id=-100500, chat_type="supergroup", chat_title="Chat")
    with pytest.raises(TelegramBadRequest, match="BUTTON_TYPE_INVALID"):
        await bot.send_message(-100500, "console", reply_markup=app("https://ops.example.org/"))


async def test_get_updates_offset_confirms(bot: Bot, tg: FakeTelegramServer) -> None:
    first = tg.send_text(1, "one")
    second = tg.send_text(2, "two", username="bob")
    assert second == first + 1

    updates = await bot.get_updates()
    assert [u.update_id for u in updates] == [first, second]
    message = updates[1].message
    assert message is not None and message.text == "two"
    assert message.from_user is not None and message.from_user.username == "bob"
    assert message.chat.id == 2 and message.chat.type == "private"
    assert tg.confirmed_offset == 0

    # Not confirmed yet: asking again returns the same updates.
    assert len(await bot.get_updates()) == 2
    # Confirming the first one drops it.
    updates = await bot.get_updates(offset=first + 1)
    assert [u.update_id for u in updates] == [second]
    assert tg.confirmed_offset == first + 1
    assert [u["update_id"] for u in tg.pending_updates] == [second]
    # Confirming everything leaves nothing.
    assert await bot.get_updates(offset=second + 1) == []
    assert tg.pending_updates == []
    assert tg.confirmed_offset == second + 1


async def test_get_updates_limit(bot: Bot, tg: FakeTelegramServer) -> None:
    for index in range(5):
        tg.send_text(1, f"m{index}")
    updates = await bot.get_updates(limit=2)
    assert [u.message.text for u in updates if u.message] == ["m0", "m1"]


async def test_long_poll_returns_early_on_update(bot: Bot, tg: FakeTelegramServer) -> None:
    async def inject_later() -> None:
        await asyncio.sleep(0.2)
        tg.send_text(9, "wake up")

    started = time.monotonic()
    injector = asyncio.create_task(inject_later())
    updates = await bot.get_updates(timeout=5)
    await injector
    assert time.monotonic() - started < 3
    assert [u.message.text for u in updates if u.message] == ["wake up"]


async def test_long_poll_times_out_empty(bot: Bot, tg: FakeTelegramServer) -> None:
    started = time.monotonic()
    assert await bot.get_updates(timeout=1) == []
    assert 0.9 <= time.monotonic() - started < 3


async def test_second_poller_terminates_first_with_conflict(
    bot: Bot, tg: FakeTelegramServer
) -> None:
    first = asyncio.create_task(bot.get_updates(timeout=5))
    await tg.wait_for_requests("getUpdates")
    second = asyncio.create_task(bot.get_updates(timeout=5))
    with pytest.raises(TelegramConflictError):
        await first
    tg.send_text(1, "x")
    assert len(await second) == 1


async def test_stop_answers_pending_long_poll(tg: FakeTelegramServer) -> None:
    bot = make_bot(tg)
    try:
        poll = asyncio.create_task(bot.get_updates(timeout=30))
        await tg.wait_for_requests("getUpdates")
        started = time.monotonic()
        await tg.stop()
        assert await poll == []
        assert time.monotonic() - started < 2
    finally:
        await bot.session.close()


async def test_fail_next_retry_after(bot: Bot, tg: FakeTelegramServer) -> None:
    tg.fail_next("sendMessage", retry_after=2)
    with pytest.raises(TelegramRetryAfter) as caught:
        await bot.send_message(42, "first try")
    assert caught.value.retry_after == 2
    assert "retry after 2" in caught.value.message
    assert tg.sent_messages() == []
    [failed] = tg.requests_for("sendMessage")
    assert failed.error_code == 429

    await bot.send_message(42, "second try")
    assert [m.text for m in tg.sent_messages()] == ["second try"]


async def test_fail_next_times_and_other_codes(bot: Bot, tg: FakeTelegramServer) -> None:
    tg.fail_next("sendMessage", error_code=403, description="Forbidden: nope", times=2)
    for _ in range(2):
        with pytest.raises(TelegramForbiddenError, match="nope"):
            await bot.send_message(42, "x")
    await bot.send_message(42, "x")
    assert len(tg.sent_messages(42)) == 1


async def test_flood_ratio(bot: Bot, tg: FakeTelegramServer) -> None:
    tg.flood_ratio = 1.0
    tg.flood_retry_after = 3
    with pytest.raises(TelegramRetryAfter) as caught:
        await bot.send_chat_action(42, "typing")
    assert caught.value.retry_after == 3
    assert (await bot.get_me()).id == tg.bot_id  # only send* methods are flooded
    tg.flood_ratio = 0.5
    outcomes = []
    for _ in range(40):
        try:
            await bot.send_message(42, "spam")
            outcomes.append(True)
        except TelegramRetryAfter:
            outcomes.append(False)
    assert 0 < sum(outcomes) < 40
    assert len(tg.sent_messages(42)) == sum(outcomes)


async def test_latency(bot: Bot, tg: FakeTelegramServer) -> None:
    tg.latency = 0.3
    started = time.monotonic()
    await bot.send_message(42, "slow")
    assert time.monotonic() - started >= 0.3


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("<div>x</div>", 'Unsupported start tag "div"'),
        ("<b>unclosed", 'Can\'t find end tag corresponding to start tag "b"'),
        ("<b><i>x</b></i>", "Unmatched end tag"),
        ("line<br/>break", 'Unsupported start tag "br"'),
        ("1 < 2", "Unsupported start tag"),
        ("<span>x</span>", 'Unsupported start tag "span"'),
    ],
)
async def test_invalid_html_is_rejected(
    bot: Bot, tg: FakeTelegramServer, text: str, fragment: str
) -> None:
    with pytest.raises(TelegramBadRequest) as caught:
        await bot.send_message(42, text, parse_mode="HTML")
    assert "can't parse entities" in caught.value.message
    assert fragment in caught.value.message
    assert tg.sent_messages() == []


async def test_valid_html_variants_are_accepted(bot: Bot) -> None:
    text = (
        "<b>b</b> <strong>s</strong> <i>i</i> <em>e</em> <u>u</u> <ins>n</ins> <s>s</s> "
        '<strike>k</strike> <del>d</del> <span class="tg-spoiler">p</span> '
        '<tg-spoiler>q</tg-spoiler> <a href="https://example.com">link</a> '
        '<tg-emoji emoji-id="5368324170671202286">👍</tg-emoji> <code>c</code> '
        '<pre><code class="language-python">print(1)</code></pre> '
        "<blockquote>quote</blockquote> <blockquote expandable>more</blockquote> "
        "1 &lt; 2 &amp;&amp; 3 &gt; 2 &quot;q&quot; &#39;"
    )
    message = await bot.send_message(42, text, parse_mode="HTML")
    assert message.text is not None and message.text.endswith('1 < 2 && 3 > 2 "q" \'')
    types = [e.type for e in message.entities or []]
    assert "text_link" in types and "custom_emoji" in types and "expandable_blockquote" in types
    [pre] = [e for e in message.entities or [] if e.type == "pre"]
    assert pre.language == "python"


def test_parse_html_uses_utf16_offsets() -> None:
    plain, entities = parse_html("😀 <b>hi</b>")
    assert plain == "😀 hi"
    assert entities == [{"type": "bold", "offset": 3, "length": 2}]


async def test_default_parse_mode_from_bot_properties(tg: FakeTelegramServer) -> None:
    bot = make_bot(tg, default=DefaultBotProperties(parse_mode="HTML"))
    try:
        with pytest.raises(TelegramBadRequest):
            await bot.send_message(42, "<p>para</p>")
        assert tg.requests_for("sendMessage")[0].params["parse_mode"] == "HTML"
    finally:
        await bot.session.close()


async def test_text_length_and_emptiness(bot: Bot, tg: FakeTelegramServer) -> None:
    with pytest.raises(TelegramBadRequest, match="message is too long"):
        await bot.send_message(42, "x" * 4097)
    await bot.send_message(42, "x" * 4096)
    # The limit is on the text after entity parsing.
    await bot.send_message(42, "<b>" + "x" * 4096 + "</b>", parse_mode="HTML")
    with pytest.raises(TelegramBadRequest, match="message text is empty"):
        await bot.send_message(42, "")
    with pytest.raises(TelegramBadRequest, match="message text is empty"):
        await bot.send_message(42, "<b></b>", parse_mode="HTML")
    assert len(tg.sent_messages(42)) == 2


async def test_edit_and_delete(bot: Bot, tg: FakeTelegramServer) -> None:
    sent = await bot.send_message(42, "draft")
    edited = await bot.edit_message_text(
        text="<i>final</i>", chat_id=42, message_id=sent.message_id, parse_mode="HTML"
    )
    assert isinstance(edited, Message)
    assert edited.text == "final" and edited.edit_date is not None
    assert [m.text for m in tg.edited_messages(42)] == ["<i>final</i>"]
    assert [m.text for m in tg.sent_messages(42)] == ["draft"]
    assert [m.plain_text for m in tg.bot_messages(42)] == ["final"]

    with pytest.raises(TelegramBadRequest, match="message is not modified"):
        await bot.edit_message_text(
            text="<i>final</i>", chat_id=42, message_id=sent.message_id, parse_mode="HTML"
        )
    with pytest.raises(TelegramBadRequest, match="message to edit not found"):
        await bot.edit_message_text(text="x", chat_id=42, message_id=999)

    assert await bot.delete_message(42, sent.message_id) is True
    assert tg.bot_messages(42) == []
    with pytest.raises(TelegramBadRequest, match="message to delete not found"):
        await bot.delete_message(42, sent.message_id)


async def test_cannot_edit_user_messages(bot: Bot, tg: FakeTelegramServer) -> None:
    tg.send_text(42, "mine")
    with pytest.raises(TelegramBadRequest, match="can't be edited"):
        await bot.edit_message_text(text="yours", chat_id=42, message_id=1)


async def test_chat_action_and_drafts(bot: Bot, tg: FakeTelegramServer) -> None:
    assert await bot.send_chat_action(42, "typing") is True
    assert await bot.send_message_draft(chat_id=42, draft_id=7, text="Thin") is True
    assert await bot.send_message_draft(
        chat_id=42, draft_id=7, text="<b>Thinking</b>", parse_mode="HTML"
    )
    await bot.send_message_draft(chat_id=43, draft_id=1, text="other chat")
    drafts = tg.drafts(42)
    assert [d.params["text"] for d in drafts] == ["Thin", "<b>Thinking</b>"]
    assert drafts[0].params["draft_id"] == 7
    assert drafts[1].params["parse_mode"] == "HTML"
    assert tg.requests_for("sendChatAction")[0].params == {"chat_id": 42, "action": "typing"}
    with pytest.raises(TelegramBadRequest):
        await bot.send_message_draft(chat_id=42, draft_id=7, text="<b>oops", parse_mode="HTML")
    assert len(tg.drafts(42)) == 2


async def test_commands(bot: Bot, tg: FakeTelegramServer) -> None:
    assert await bot.get_my_commands() == []
    commands = [
        BotCommand(command="start", description="Start"),
        BotCommand(command="help", description="Help"),
    ]
    assert await bot.set_my_commands(commands) is True
    # aiogram objects parsed from a response carry the bot as private state, so they never
    # compare equal to locally built ones: compare fields instead.
    got = await bot.get_my_commands()
    assert [(c.command, c.description) for c in got] == [("start", "Start"), ("help", "Help")]
    assert tg.commands() == [
        {"command": "start", "description": "Start"},
        {"command": "help", "description": "Help"},
    ]
    with pytest.raises(TelegramBadRequest, match="BOT_COMMAND_INVALID"):
        await bot.set_my_commands([BotCommand(command="Bad Command", description="x")])
    assert await bot.delete_my_commands() is True
    assert await bot.get_my_commands() == []


async def test_misc_true_methods(bot: Bot, tg: FakeTelegramServer) -> None:
    assert await bot.delete_webhook() is True
    assert await bot.close() is True
    assert await bot.log_out() is True
    info = await bot.get_webhook_info()
    assert info.url == ""


async def test_delete_webhook_can_drop_pending_updates(bot: Bot, tg: FakeTelegramServer) -> None:
    update_id = tg.send_text(1, "old")
    await bot.delete_webhook(drop_pending_updates=True)
    assert tg.pending_updates == []
    assert tg.confirmed_offset == update_id + 1
    assert await bot.get_updates() == []


async def test_photo_get_file_and_download(bot: Bot, tg: FakeTelegramServer) -> None:
    tg.send_photo(3, caption="look")
    [update] = await bot.get_updates()
    assert update.message is not None and update.message.photo
    assert update.message.caption == "look"
    largest = update.message.photo[-1]
    file = await bot.get_file(largest.file_id)
    assert file.file_path and file.file_size == len(TINY_PNG)
    downloaded = await bot.download(largest.file_id)
    assert downloaded is not None
    data = downloaded.read()
    assert data == TINY_PNG and data.startswith(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(TelegramBadRequest, match="invalid file_id"):
        await bot.get_file("nope")


async def test_unknown_method_and_wrong_token(bot: Bot, tg: FakeTelegramServer) -> None:
    with pytest.raises(TelegramNotFound, match="method not found"):
        await bot(_UnknownMethod())
    stranger = make_bot(tg, token="999:WRONG")
    try:
        with pytest.raises(TelegramUnauthorizedError, match="Unauthorized"):
            await stranger.get_me()
    finally:
        await stranger.session.close()


async def test_plain_http_shapes(tg: FakeTelegramServer) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{tg.base_url}/bot{tg.token}/getMe") as resp:
            assert resp.status == 200
            body = await resp.json()
        assert body["ok"] is True and body["result"]["is_bot"] is True
        async with http.post(
            f"{tg.base_url}/bot{tg.token}/sendMessage", json={"chat_id": 5, "text": "json body"}
        ) as resp:
            assert resp.status == 200
        async with http.get(f"{tg.base_url}/bot{tg.token}/nope") as resp:
            assert resp.status == 404
            assert await resp.json() == {
                "ok": False,
                "error_code": 404,
                "description": "Not Found: method not found",
            }
        async with http.get(f"{tg.base_url}/botWRONG/getMe") as resp:
            assert resp.status == 401
            assert (await resp.json())["description"] == "Unauthorized"
        tg.fail_next("getMe", retry_after=4)
        async with http.post(f"{tg.base_url}/bot{tg.token}/getMe") as resp:
            assert resp.status == 429
            assert await resp.json() == {
                "ok": False,
                "error_code": 429,
                "description": "Too Many Requests: retry after 4",
                "parameters": {"retry_after": 4},
            }
    assert [m.text for m in tg.sent_messages(5)] == ["json body"]


async def test_group_updates_look_real(bot: Bot, tg: FakeTelegramServer) -> None:
    tg.send_text(11, "/start@botkit_test_bot", chat_id=-555, chat_type="group")
    tg.send_text(11, "reply", chat_id=-555, chat_type="group", reply_to_message_id=1)
    first, second = await bot.get_updates()
    assert first.message is not None and second.message is not None
    assert first.message.chat.id == -555 and first.message.chat.title
    assert first.message.entities is not None
    assert first.message.entities[0].type == "bot_command"
    assert second.message.reply_to_message is not None
    assert second.message.reply_to_message.message_id == 1
    assert isinstance(first.message.date.timestamp(), float)


async def test_inject_raw_update(bot: Bot, tg: FakeTelegramServer) -> None:
    update_id = tg.inject_update(
        {
            "callback_query": {
                "id": "cb1",
                "from": {"id": 4, "is_bot": False, "first_name": "U"},
                "chat_instance": "ci",
                "data": "pressed",
            }
        }
    )
    explicit = tg.inject_update({"update_id": 500, "message": None})
    assert explicit == 500
    assert tg.send_text(4, "after") == 501
    updates = await bot.get_updates()
    assert updates[0].update_id == update_id
    assert updates[0].callback_query is not None and updates[0].callback_query.data == "pressed"


async def test_blocked_user(bot: Bot, tg: FakeTelegramServer) -> None:
    tg.block_user(42)
    with pytest.raises(TelegramForbiddenError, match="blocked"):
        await bot.send_message(42, "hello?")


async def test_wait_for_messages_timeout_explains(tg: FakeTelegramServer) -> None:
    with pytest.raises(AssertionError, match="expected at least 1 message"):
        await tg.wait_for_messages(42, timeout=0.2)


async def test_dispatcher_echo(tg: FakeTelegramServer) -> None:
    bot = make_bot(tg)
    dp = Dispatcher()

    @dp.message()
    async def echo(message: Message) -> None:
        await message.answer(f"echo: {message.text}")

    polling = asyncio.create_task(dp.start_polling(bot, handle_signals=False, polling_timeout=1))
    try:
        tg.send_text(77, "ping", first_name="Ann")
        [reply] = await tg.wait_for_messages(77, timeout=10)
        assert reply.text == "echo: ping"
        tg.send_text(77, "pong")
        replies = await tg.wait_for_messages(77, count=2, timeout=10)
        assert [m.text for m in replies] == ["echo: ping", "echo: pong"]
    finally:
        await dp.stop_polling()
        await polling
        await bot.session.close()
    assert tg.confirmed_offset >= 2
    assert tg.requests_for("getMe")


# --- forum topics and copies (#29) -----------------------------------------------------------

FORUM = -1_000_000_000_555


async def test_forum_topics_are_created_closed_and_reopened(
    bot: Bot, tg: FakeTelegramServer
) -> None:
    tg.make_forum(FORUM)
    topic = await bot.create_forum_topic(FORUM, "Ann (42)")
    assert topic.message_thread_id > 1  # 1 is the General topic
    sent = await bot.send_message(FORUM, "hi", message_thread_id=topic.message_thread_id)
    assert sent.message_thread_id == topic.message_thread_id
    assert tg.topic_messages(FORUM, topic.message_thread_id)[0].plain_text == "hi"
    assert await bot.close_forum_topic(FORUM, topic.message_thread_id)
    assert tg.topics[(FORUM, topic.message_thread_id)].closed
    with pytest.raises(TelegramBadRequest, match="TOPIC_NOT_MODIFIED"):
        await bot.close_forum_topic(FORUM, topic.message_thread_id)
    assert await bot.reopen_forum_topic(FORUM, topic.message_thread_id)
    assert not tg.topics[(FORUM, topic.message_thread_id)].closed
    with pytest.raises(TelegramBadRequest, match="TOPIC_ID_INVALID"):
        await bot.close_forum_topic(FORUM, 999)


async def test_topics_only_in_a_forum(bot: Bot, tg: FakeTelegramServer) -> None:
    with pytest.raises(TelegramBadRequest, match="not a forum"):
        await bot.create_forum_topic(-1_000_000_000_556, "x")


async def test_copy_message_copies_text_and_photos_into_a_topic(
    bot: Bot, tg: FakeTelegramServer
) -> None:
    tg.make_forum(FORUM)
    topic = (await bot.create_forum_topic(FORUM, "Ann (42)")).message_thread_id
    tg.send_text(42, "hello there")
    tg.send_photo(42, caption="look", data=TINY_PNG)
    await bot.copy_message(FORUM, 42, 1, message_thread_id=topic)
    await bot.copy_message(FORUM, 42, 2, message_thread_id=topic)
    [text] = tg.topic_messages(FORUM, topic)
    assert text.plain_text == "hello there"
    [photo] = tg.sent_files(FORUM)
    assert (photo.method, photo.data, photo.caption, photo.thread_id) == (
        "copyMessage",
        TINY_PNG,
        "look",
        topic,
    )
    with pytest.raises(TelegramBadRequest, match="message to copy not found"):
        await bot.copy_message(FORUM, 42, 99)
    with pytest.raises(TelegramBadRequest, match="can't be copied"):
        await bot.copy_message(42, FORUM, topic)  # the topic's creation: a service message
