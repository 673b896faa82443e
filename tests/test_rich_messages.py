"""Rich replies (#45): with BOTKIT_RICH_MESSAGES=auto the model's Markdown goes out through
``sendRichMessage`` (Bot API 10.1) in private chats, groups and forum topics, split between
blocks; private chats stream rich drafts with a thinking block while tools run; a server
without rich messages (404) or a refused message (400) gets HTML, once, nothing lost. The
real aiogram and anthropic clients against the fakes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from aiogram import Bot as AiogramBot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import TelegramBadRequest, TelegramNotFound
from aiogram.methods import SendRichMessage, SendRichMessageDraft
from aiogram.types import InputRichMessage
from structlog.testing import capture_logs

from botkit import tool
from botkit.messengers.rich import RICH_TEXT_LIMIT, split_rich
from botkit.options import PLAIN_FORMAT_NOTE, RICH_FORMAT_NOTE
from botkit.testing import (
    FakeAnthropicServer,
    FakeReply,
    FakeRequest,
    FakeTelegramServer,
    make_bot,
    running,
)
from botkit.testing.telegram import SentMessage

USER = 4501
GROUP_CHAT = -1_000_000_004_501
TOPIC = 77
TABLE = "| Planet | Moons |\n|---|---|\n| Earth | 1 |\n| Mars | 2 |"
FORMULA = "$$\nE = mc^2\n$$"
ANSWER = f"## Moons\n\n{TABLE}\n\nEnergy:\n\n{FORMULA}"


def rich_bot(claude: FakeAnthropicServer, tmp_path: Path, **settings: Any) -> Any:
    values: dict[str, Any] = {"access": "open", "rich_messages": "auto"}
    return make_bot(claude, tmp_path, **{**values, **settings})


@pytest.mark.parametrize("where", ["private", "group", "topic"])
async def test_an_answer_with_a_table_and_a_formula_is_one_rich_message(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path, where: str
) -> None:
    claude.enqueue(FakeReply.text(ANSWER))
    bot = rich_bot(claude, tmp_path, answer_groups="all")
    chat = USER if where == "private" else GROUP_CHAT
    async with running(bot, telegram):
        if where == "private":
            asked = telegram.send_text(USER, "moons?")
        else:
            thread = TOPIC if where == "topic" else None
            asked = telegram.send_text(
                USER, "moons?", chat_id=chat, chat_type="supergroup", thread_id=thread
            )
        (reply,) = await telegram.wait_for_messages(chat)
    assert reply.rich == {"markdown": ANSWER}, "the Markdown passed through as it was written"
    assert telegram.requests_for("sendMessage") == [], "no HTML message besides"
    assert "Earth" in reply.plain_text and "E = mc^2" in reply.plain_text
    if where != "private":
        message_id = telegram.injected[asked]["message"]["message_id"]
        assert reply.params["reply_parameters"]["message_id"] == message_id
    assert reply.thread_id == (TOPIC if where == "topic" else None)


async def test_a_long_answer_splits_between_blocks_never_inside_a_table_or_formula(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    paragraph = " ".join(["A sentence that fills the answer up."] * 40)
    big_table = "| n | square |\n|---|---|\n" + "\n".join(f"| {n} | {n * n} |" for n in range(60))
    blocks = [paragraph] * 18 + [big_table, FORMULA] + [paragraph] * 12 + [big_table, FORMULA]
    answer = "\n\n".join(blocks)
    assert len(answer) > RICH_TEXT_LIMIT, "more than one rich message holds"
    claude.enqueue(FakeReply.text(answer))
    async with running(rich_bot(claude, tmp_path), telegram):
        telegram.send_text(USER, "a long one")
        await telegram.wait_for_messages(USER, 2)
        await asyncio.sleep(0.3)
    parts = [m.rich["markdown"] for m in telegram.rich_messages(USER) if m.rich]
    assert len(parts) == 2 and all(len(p) <= RICH_TEXT_LIMIT for p in parts)
    assert "\n\n".join(parts) == answer, "nothing lost, nothing repeated, in order"
    for part in parts:
        assert part.count("$$") % 2 == 0, "no formula cut"
        if "| n | square |" in part:
            assert big_table in part, "no table cut"
    assert telegram.requests_for("sendMessage") == []


async def test_buttons_under_a_rich_message_can_be_pressed(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    def model(request: FakeRequest) -> FakeReply:
        if request.tool_results():
            return FakeReply.text("| note | state |\n|---|---|\n| n1 | deleted |")
        return FakeReply.tool_use("delete_note", {"name": "n1"})

    claude.responder = model
    bot = rich_bot(claude, tmp_path)
    deleted: list[str] = []

    @bot.tool(approval=True)
    async def delete_note(name: str) -> str:
        """Delete a note."""
        deleted.append(name)
        return "deleted"

    async with running(bot, telegram):
        telegram.send_text(USER, "delete n1")
        (request,) = await telegram.wait_for_messages(USER)
        assert request.rich is not None, "the approval request is a rich message"
        telegram.press_button(USER, request, "Allow")
        answer = (await telegram.wait_for_messages(USER, 2))[-1]
    assert deleted == ["n1"]
    assert answer.rich == {"markdown": "| note | state |\n|---|---|\n| n1 | deleted |"}
    (edited,) = telegram.edited_messages(USER)
    assert edited.message_id == request.message_id and edited.rich is not None


async def test_a_rich_draft_streams_and_one_rich_message_replaces_it(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    slow = " ".join(f"word{i}" for i in range(40))
    answer = f"Intro line.\nA line with **bold** and {slow}.\n\n{TABLE}"
    claude.enqueue(FakeReply.text(answer))
    claude.chunk_delay = 0.05
    async with running(rich_bot(claude, tmp_path, stream_replies=True), telegram):
        telegram.send_text(USER, "stream")
        await telegram.wait_for_messages(USER)
        await asyncio.sleep(0.5)  # a late draft would land here
    drafts = telegram.rich_drafts(USER)
    assert drafts, "the answer streamed as rich drafts"
    assert all(d.params["can_stop"] is True for d in drafts), "with the stop button"
    shown = [d.params["rich_message"]["markdown"] for d in drafts]
    assert all(s.count("**") % 2 == 0 for s in shown), "no half-typed markup shows"
    (final,) = telegram.sent_messages(USER)
    assert final.rich == {"markdown": answer}
    methods = [r.method for r in telegram.requests if r.method.startswith("send")]
    assert methods[-1] == "sendRichMessage", "no draft after the final message"


async def test_a_running_tool_shows_as_a_timed_thinking_block_never_in_the_reply(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    @tool
    async def slow_lookup() -> str:
        """Looks something up slowly."""
        await asyncio.sleep(3.5)
        return "found"

    def model(request: FakeRequest) -> FakeReply:
        if request.tool_results():
            return FakeReply.text("It was found.")
        return FakeReply.tool_use("slow_lookup", {})

    claude.responder = model
    bot = rich_bot(claude, tmp_path, stream_replies=True, tools=[slow_lookup])
    async with running(bot, telegram):
        telegram.send_text(USER, "look it up")
        await telegram.wait_for_messages(USER, timeout=15)
    thinking = [
        d.params["rich_message"]["html"]
        for d in telegram.rich_drafts(USER)
        if "html" in d.params["rich_message"]
    ]
    assert thinking and all("<tg-thinking>" in t and "slow_lookup" in t for t in thinking)
    assert any(" s</tg-thinking>" in t for t in thinking), "how long the tool has run"
    (final,) = telegram.sent_messages(USER)
    assert final.rich == {"markdown": "It was found."}, "the thinking block stays in the draft"


async def test_a_rich_draft_stopped_by_the_user_keeps_what_was_shown_as_a_rich_message(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    claude.enqueue(FakeReply.text("Partial **answer**\n" + " ".join(["more"] * 400)))
    claude.chunk_delay = 0.05
    async with running(rich_bot(claude, tmp_path, stream_replies=True), telegram):
        telegram.send_text(USER, "long")
        await telegram.wait_for_requests("sendRichMessageDraft", 2)
        draft_id = telegram.rich_drafts(USER)[-1].params["draft_id"]
        stop = {"chat": {"id": USER, "type": "private", "first_name": "U"}, "draft_id": draft_id}
        telegram.inject_update({"stopped_message_generation": stop})
        (kept,) = await telegram.wait_for_messages(USER)
        await asyncio.sleep(0.5)
    assert kept.rich is not None and kept.rich["markdown"].startswith("Partial **answer**")
    assert len(telegram.sent_messages(USER)) == 1, "one message, no duplicate"
    after = [r for r in telegram.requests if r.at > kept_at(telegram, kept)]
    assert not [r for r in after if "Draft" in r.method], "no draft after it"


def kept_at(telegram: FakeTelegramServer, message: SentMessage) -> float:
    (request,) = [
        r
        for r in telegram.requests_for("sendRichMessage")
        if r.error_code is None and r.params.get("rich_message") == message.rich
    ]
    return request.at


async def test_a_server_without_rich_messages_gets_html_once_and_then_only_html(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    telegram.rich_unsupported = True
    claude.enqueue(FakeReply.text(f"First:\n\n{TABLE}"), FakeReply.text("Second **one**."))
    with capture_logs() as logs:
        async with running(rich_bot(claude, tmp_path, stream_replies=True), telegram):
            telegram.send_text(USER, "one")
            await telegram.wait_for_messages(USER)
            telegram.send_text(USER, "two")
            first, second = await telegram.wait_for_messages(USER, 2)
            await asyncio.sleep(0.3)
    assert "Earth" in first.plain_text and "<b>one</b>" in second.text, "both came, as HTML"
    assert len(telegram.sent_messages(USER)) == 2, "each once"
    rich_tries = telegram.requests_for("sendRichMessage") + telegram.requests_for(
        "sendRichMessageDraft"
    )
    assert len(rich_tries) == 1 and rich_tries[0].error_code == 404, "tried once, never again"
    said = [e for e in logs if e["event"] == "telegram.rich_unavailable"]
    assert len(said) == 1, "one log line says why"


async def test_a_refused_rich_message_goes_as_html_once_and_the_next_is_rich_again(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    telegram.fail_next(
        "sendRichMessage", error_code=400, description="Bad Request: can't parse rich message"
    )
    claude.enqueue(FakeReply.text("One with **bold**."), FakeReply.text("Two."))
    with capture_logs() as logs:
        async with running(rich_bot(claude, tmp_path), telegram):
            telegram.send_text(USER, "one")
            (first,) = await telegram.wait_for_messages(USER)
            telegram.send_text(USER, "two")
            _, second = await telegram.wait_for_messages(USER, 2)
    assert first.rich is None and first.text == "One with <b>bold</b>.", "HTML, once"
    assert second.rich == {"markdown": "Two."}, "a 400 refuses one message, not the server"
    assert [e["error"] for e in logs if e["event"] == "telegram.rich_refused"] == [
        "Bad Request: can't parse rich message"
    ]


@pytest.mark.parametrize(("mode", "note"), [("auto", RICH_FORMAT_NOTE), ("off", PLAIN_FORMAT_NOTE)])
async def test_the_default_prompt_says_what_renders(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    mode: str,
    note: str,
) -> None:
    claude.enqueue(FakeReply.text("ok"))
    async with running(rich_bot(claude, tmp_path, rich_messages=mode), telegram):
        telegram.send_text(USER, "hi")
        (reply,) = await telegram.wait_for_messages(USER)
    assert note in claude.requests[0].system_text
    assert (reply.rich is not None) == (mode == "auto")


async def test_the_queued_runtime_sends_rich_replies(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    from test_scaleout import queued, queued_bot

    claude.enqueue(FakeReply.text(ANSWER))
    bot = queued_bot(claude, telegram, tmp_path, db, rich_messages="auto")
    async with queued(bot):
        telegram.send_text(USER, "moons?")
        (reply,) = await telegram.wait_for_messages(USER, timeout=20)
    assert reply.rich == {"markdown": ANSWER}


def test_splitting_keeps_every_block_whole_and_in_order() -> None:
    answer = "\n\n".join(
        [("Intro " * 30).strip(), TABLE, FORMULA, "```py\nx = 1\n\ny = 2\n```", "End."]
    )
    parts = split_rich(answer, max_chars=200)
    assert "\n\n".join(parts) == answer
    assert any(TABLE in p for p in parts) and any(FORMULA in p for p in parts)
    assert any("```py\nx = 1\n\ny = 2\n```" in p for p in parts), "a code block stays whole"


# ---- the fake Bot API, as the real one answers ----------------------------------------


async def test_the_fake_checks_rich_messages_as_the_bot_api_does(
    telegram: FakeTelegramServer,
) -> None:
    session = AiohttpSession(api=TelegramAPIServer.from_base(telegram.base_url))
    api = AiogramBot(telegram.token, session=session)
    try:
        both = InputRichMessage(markdown="*a*", html="<b>a</b>")
        with pytest.raises(TelegramBadRequest, match="exactly one"):
            await api(SendRichMessage(chat_id=USER, rich_message=both))
        too_long = InputRichMessage(markdown="x" * (RICH_TEXT_LIMIT + 1))
        with pytest.raises(TelegramBadRequest, match="too long"):
            await api(SendRichMessage(chat_id=USER, rich_message=too_long))
        rows = "| a |\n|---|\n" + "\n".join(f"| {n} |" for n in range(500))
        with pytest.raises(TelegramBadRequest, match="too many blocks"):
            await api(SendRichMessage(chat_id=USER, rich_message=InputRichMessage(markdown=rows)))
        thinking = InputRichMessage(html="<tg-thinking>hm</tg-thinking>")
        with pytest.raises(TelegramBadRequest, match="only in drafts"):
            await api(SendRichMessage(chat_id=USER, rich_message=thinking))
        assert await api(SendRichMessageDraft(chat_id=USER, draft_id=1, rich_message=thinking))
        with pytest.raises(TelegramBadRequest, match="private chats"):
            await api(SendRichMessageDraft(chat_id=GROUP_CHAT, draft_id=1, rich_message=thinking))
        sent = await api(
            SendRichMessage(chat_id=USER, rich_message=InputRichMessage(markdown=TABLE))
        )
        assert sent.rich_message is not None, "aiogram reads the fake's answer"
        telegram.rich_unsupported = True
        with pytest.raises(TelegramNotFound):
            await api(SendRichMessage(chat_id=USER, rich_message=InputRichMessage(markdown="a")))
    finally:
        await api.session.close()
    (message,) = telegram.rich_messages(USER)
    assert message.rich == {"markdown": TABLE} and "Earth" in message.plain_text
    assert json.dumps(message.rich)
