"""Reactions as feedback (#45 point 6): a user's reaction on a reply is recorded in the
conversation's session, tied to the turn it answers, on files and on PostgreSQL, in both
runtimes; replay shows it, ``--rerun --feedback negative`` re-runs only those turns,
``botkit_feedback_total`` counts them, forgetting erases them; ``BOTKIT_REACTIONS=on`` shows
👀 while a message is worked on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from test_privacy import stored  # noqa: F401 (the fixture: files and PostgreSQL)
from test_scaleout import until

from botkit.cli import main
from botkit.messengers.telegram import ALLOWED_UPDATES
from botkit.privacy.groups import erase_turns
from botkit.replay import format_transcript, read_session
from botkit.rerun.recorded import feedback_by_turn
from botkit.rerun.runner import rerun_session
from botkit.sessions import FeedbackEntry, JsonlSessionStore, SessionEntry, session_store_for
from botkit.testing import FakeAnthropicServer, FakeReply, FakeTelegramServer, make_bot, running

USER = 4601
GROUP_CHAT = -4601


def feedback_bot(claude: FakeAnthropicServer, tmp_path: Path, **settings: Any) -> Any:
    return make_bot(claude, tmp_path, **{"access": "open", **settings})


async def test_reactions_on_replies_are_feedback_on_their_turns_in_the_session_file(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    claude.enqueue(FakeReply.text("first answer"), FakeReply.text("second answer"))
    bot = feedback_bot(claude, tmp_path)
    async with running(bot, telegram):
        first_update = telegram.send_text(USER, "one")
        (first,) = await telegram.wait_for_messages(USER)
        second_update = telegram.send_text(USER, "two")
        _, second = await telegram.wait_for_messages(USER, 2)
        telegram.react(USER, first, "👍")
        telegram.react(USER, first, "👎")  # changed its mind: replaces the 👍
        telegram.react(USER, second, "🤔")
        counted = bot.metrics.feedback.labels
        await until(lambda: sum(counted(k)._value.get() for k in ("positive", "negative")) == 2)
        await until(lambda: counted("other")._value.get() == 1)
    assert "message_reaction" in ALLOWED_UPDATES
    polls = [r.params for r in telegram.requests_for("getUpdates") if r.params.get("timeout")]
    assert "message_reaction" in polls[0]["allowed_updates"], "Telegram is asked for reactions"
    source, session = read_session(str(tmp_path / "sessions" / f"{USER}.jsonl"))
    feedback = feedback_by_turn(session.entries)
    assert [(e.kind, e.emoji) for e in feedback[first_update]] == [("negative", ["👎"])]
    assert [(e.kind, e.emoji) for e in feedback[second_update]] == [("other", ["🤔"])]
    assert feedback[first_update][0].message_id == first.message_id
    transcript = format_transcript(session, source=source)
    assert f"feedback 👎 (negative) from {USER} on the reply to update {first_update}" in (
        transcript
    )


async def test_a_reaction_on_no_reply_of_a_turn_records_nothing(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = feedback_bot(claude, tmp_path)
    async with running(bot, telegram):
        telegram.send_text(USER, "/help")
        (menu,) = await telegram.wait_for_messages(USER)
        telegram.react(USER, menu, "👎")
        await asyncio.sleep(0.5)
    assert bot.metrics.feedback.labels("negative")._value.get() == 0


async def test_rerun_with_feedback_negative_runs_only_the_turns_that_got_a_thumbs_down(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    claude.enqueue(*(FakeReply.text(f"answer {n}") for n in range(3)))
    bot = feedback_bot(claude, tmp_path)
    async with running(bot, telegram):
        for n in range(3):
            telegram.send_text(USER, f"question {n}")
            await telegram.wait_for_messages(USER, n + 1)
        replies = telegram.sent_messages(USER)
        telegram.react(USER, replies[1], "👎")
        telegram.react(USER, replies[2], "👍")
        await until(lambda: bot.metrics.feedback.labels("positive")._value.get() == 1)
    _, session = read_session(str(tmp_path / "sessions" / f"{USER}.jsonl"))
    report = await rerun_session(bot, session, llm="recorded", feedback="negative")
    assert [t.user_text for t in report.turns] == ["question 1"]


async def test_feedback_is_recorded_on_postgresql_through_the_queued_runtime(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    from test_scaleout import queued, queued_bot

    from botkit.sessions.postgres import PostgresSessionStore

    claude.enqueue(FakeReply.text("queued answer"))
    bot = queued_bot(claude, telegram, tmp_path, db)
    async with queued(bot):
        asked = telegram.send_text(USER, "hello")
        (reply,) = await telegram.wait_for_messages(USER, timeout=20)
        telegram.react(USER, reply, "👎")
        await until(lambda: bot.metrics.feedback.labels("negative")._value.get() == 1, 20)
    store = await PostgresSessionStore.connect(db)
    try:
        recorded = (await store.load(USER)).entries
    finally:
        await store.close()
    (entry,) = [e for e in recorded if isinstance(e, FeedbackEntry)]
    assert (entry.update_id, entry.kind, entry.by) == (asked, "negative", USER)
    user = next(e for e in recorded if isinstance(e, SessionEntry) and e.role == "user")
    assert user.message_id is not None, "the turn's message id is recorded with it"


async def test_feedback_in_a_group_goes_to_the_group_conversation_and_forget_erases_it(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    claude.enqueue(FakeReply.text("group answer"))
    bot = feedback_bot(claude, tmp_path, answer_groups="all")
    async with running(bot, telegram):
        asked = telegram.send_text(USER, "hi all", chat_id=GROUP_CHAT, chat_type="group")
        (reply,) = await telegram.wait_for_messages(GROUP_CHAT)
        telegram.react(USER + 1, reply, "👍")  # another member liked it
        telegram.react(USER, reply, "👎")
        await until(lambda: bot.metrics.feedback.labels("negative")._value.get() == 1)
    store = JsonlSessionStore(tmp_path / "sessions")
    entries = (await store.load(f"chat_{GROUP_CHAT}")).entries
    by = {e.by: e.kind for e in entries if isinstance(e, FeedbackEntry) and e.update_id == asked}
    assert by == {USER + 1: "positive", USER: "negative"}
    lines = [e.model_dump(mode="json") for e in entries]
    erase_turns(list(lines), USER)
    left = [line for line in lines if line["type"] == "feedback"]
    assert [(line["by"], line["emoji"]) for line in left] == [(USER + 1, ["👍"]), (0, [])]


async def test_processing_reaction_shows_while_the_bot_works_and_goes_once_it_answered(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    claude.enqueue(FakeReply.text("done"))
    bot = feedback_bot(claude, tmp_path, reactions="on")
    async with running(bot, telegram):
        asked = telegram.send_text(USER, "work")
        await telegram.wait_for_messages(USER)
        await telegram.wait_for_requests("setMessageReaction", 2)
    message_id = telegram.injected[asked]["message"]["message_id"]
    calls = [r for r in telegram.requests if r.method in ("setMessageReaction", "sendMessage")]
    assert [(r.method, r.params.get("reaction")) for r in calls] == [
        ("setMessageReaction", [{"type": "emoji", "emoji": "👀"}]),
        ("sendMessage", None),
        ("setMessageReaction", []),
    ]
    assert all(r.error_code is None for r in calls)
    assert telegram.reactions[(USER, message_id)] == [], "taken away once answered"


async def test_export_holds_feedback_and_forget_erases_it_on_both_stores(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    stored: dict[str, Any],  # noqa: F811
) -> None:
    claude.enqueue(FakeReply.text("an answer"))
    bot = feedback_bot(claude, tmp_path, **stored)
    async with running(bot, telegram):
        telegram.send_text(USER, "hi")
        (reply,) = await telegram.wait_for_messages(USER)
        telegram.react(USER, reply, "👎")
        await until(lambda: bot.metrics.feedback.labels("negative")._value.get() == 1)
    await bot.aclose()
    sessions = session_store_for(bot.settings)
    try:
        kinds = [
            e.kind for e in (await sessions.load(USER)).entries if isinstance(e, FeedbackEntry)
        ]
    finally:
        await sessions.close()
    assert kinds == ["negative"], "recorded in the store the bot uses"
    out = tmp_path / "export"
    assert await asyncio.to_thread(main, ["users", "export", str(USER), str(out)]) == 0
    exported = (out / "sessions" / f"{USER}.jsonl").read_text()
    assert '"type":"feedback"' in exported and "👎" in exported
    assert await asyncio.to_thread(main, ["users", "forget", str(USER), "--yes"]) == 0
    sessions = session_store_for(bot.settings)
    try:
        assert (await sessions.load(USER)).entries == [], "erased with the conversation"
    finally:
        await sessions.close()
