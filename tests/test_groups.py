"""Groups, topics and replies: the right context, the right place, nothing leaked between chats."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from botkit import Bot, Settings, Usage, tool
from botkit.llm.anthropic import AnthropicLLM
from botkit.messengers.telegram import draft_html
from botkit.sessions import read_session_file
from botkit.testing import FakeAnthropicServer, FakeReply, FakeRequest, FakeTelegramServer, running

ALICE, BOB, STRANGER = 901, 902, 999
GROUP = -100_777
BOT = "botkit_test_bot"


def make_bot(claude: FakeAnthropicServer, tmp_path: Path, **settings: Any) -> Bot:
    values: dict[str, Any] = {
        "allowed_users": frozenset({ALICE, BOB}),
        "sessions_dir": tmp_path / "sessions",
        "stream_replies": False,
        **settings,
    }
    llm = AnthropicLLM(
        api_key="k", model="claude-sonnet-5-5", base_url=claude.base_url, max_retries=0
    )
    return Bot(settings=Settings(_env_file=None, **values), llm=llm)


def in_group(telegram: FakeTelegramServer, user: int, text: str, **kwargs: Any) -> int:
    return telegram.send_text(
        user, text, chat_id=GROUP, chat_type="supergroup", chat_title="Flatmates", **kwargs
    )


def request_text(request: FakeRequest) -> str:
    """Everything the model was sent in one call: system prompt and messages."""
    return orjson.dumps({"system": request.system, "messages": request.messages}).decode()


async def test_a_secret_told_in_private_never_reaches_a_group_call(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "my PIN is 4711, keep it safe")
        await telegram.wait_for_messages(ALICE)
        in_group(telegram, ALICE, f"@{BOT} what is my PIN?")
        await telegram.wait_for_messages(GROUP)
        in_group(telegram, BOB, f"@{BOT} we need milk")
        await telegram.wait_for_messages(GROUP, 2)
        telegram.send_text(ALICE, "what did we talk about?")
        await telegram.wait_for_messages(ALICE, 2)
    private_1, group_1, group_2, private_2 = claude.requests
    assert "4711" in request_text(private_1)
    assert "4711" not in request_text(group_1) and "4711" not in request_text(group_2)
    assert "milk" not in request_text(private_2), "nor the group's talk in a private chat"
    assert "Flatmates" in request_text(group_1), "the model knows it is in a group"
    assert f"(id {ALICE})" in request_text(group_2) and f"(id {BOB})" in request_text(group_2)
    recorded = read_session_file(tmp_path / "sessions" / f"chat_{GROUP}.jsonl").entries
    speakers = [e.user_id for e in recorded if getattr(e, "role", None) == "user"]
    assert speakers == [ALICE, BOB], "the group's file names who spoke"


async def test_per_user_group_context_keeps_members_apart(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, group_context="per_user")
    async with running(bot, telegram):
        in_group(telegram, ALICE, f"@{BOT} alpha")
        await telegram.wait_for_messages(GROUP)
        in_group(telegram, BOB, f"@{BOT} beta")
        await telegram.wait_for_messages(GROUP, 2)
    assert "alpha" not in request_text(claude.requests[1])


async def test_a_topic_message_is_answered_in_its_topic_as_a_reply(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path)
    async with running(bot, telegram):
        asked = in_group(telegram, ALICE, f"@{BOT} topic question", thread_id=77)
        [answer] = await telegram.wait_for_messages(GROUP)
        in_group(telegram, ALICE, f"@{BOT} general question")
        answers = await telegram.wait_for_messages(GROUP, 2)
    message_id = telegram.injected[asked]["message"]["message_id"]
    assert answer.params["message_thread_id"] == 77
    assert answer.params["reply_parameters"]["message_id"] == message_id
    assert answer.params["reply_parameters"]["allow_sending_without_reply"] is True
    assert "message_thread_id" not in answers[1].params, "General gets no thread id"
    assert (tmp_path / "sessions" / f"chat_{GROUP}_77.jsonl").exists(), "a topic is its own chat"


async def test_other_bots_mentions_and_commands_are_ignored(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path)
    async with running(bot, telegram):
        in_group(telegram, ALICE, f"@{BOT}_two please answer")
        in_group(telegram, ALICE, "/help@otherbot")
        in_group(telegram, ALICE, "/weather")  # a bare command this bot does not have
        in_group(telegram, ALICE, f"/help@{BOT}")
        [help_reply] = await telegram.wait_for_messages(GROUP)
    assert "/clear" in help_reply.plain_text, "only /help@thisbot was answered"
    assert claude.requests == []
    assert len(telegram.sent_messages(GROUP)) == 1


async def test_a_stranger_in_a_group_gets_one_rejection_and_no_download(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path)
    async with running(bot, telegram):
        for n in range(4):
            in_group(telegram, STRANGER, f"@{BOT} let me in {n}")
        telegram.send_photo(STRANGER, caption=f"@{BOT} look", chat_id=GROUP, chat_type="supergroup")
        telegram.send_text(ALICE, "are you there?")
        await telegram.wait_for_messages(ALICE)
        await telegram.wait_for_messages(GROUP)
    assert len(telegram.sent_messages(GROUP)) == 1, "one rejection per stranger per chat"
    assert telegram.requests_for("getFile") == [], "nothing downloaded for a stranger"
    assert len(claude.requests) == 1


async def test_a_reply_and_a_quote_reach_the_model(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path)
    async with running(bot, telegram):
        original = telegram.send_text(BOB, "the rent is due on the 3rd", chat_id=ALICE)
        await telegram.wait_for_messages(ALICE)
        replied = telegram.injected[original]["message"]["message_id"]
        telegram.send_text(
            ALICE, "is that right?", reply_to_message_id=replied, quote="due on the 3rd"
        )
        await telegram.wait_for_messages(ALICE, 2)
    last = claude.requests[-1].last_user_text()
    assert "the rent is due on the 3rd" in last
    assert "Quoting: «due on the 3rd»" in last
    assert last.endswith("is that right?")


async def test_quick_messages_during_a_slow_turn_get_one_answer(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    async def model(request: FakeRequest) -> FakeReply:
        if request.last_user_text() == "slow":
            started.set()
            await release.wait()
        return FakeReply.text(f"answer to: {request.last_user_text()}")

    claude.responder = model
    async with running(make_bot(claude, tmp_path), telegram):
        telegram.send_text(ALICE, "slow")
        await asyncio.wait_for(started.wait(), 10)
        last = [telegram.send_text(ALICE, text) for text in ("one", "two", "three")][-1]
        while telegram.confirmed_offset <= last:  # the poller has taken all three
            await telegram.wait_for_requests(
                "getUpdates", len(telegram.requests_for("getUpdates")) + 1
            )
        release.set()
        await telegram.wait_for_messages(ALICE, 2)
    # leaving the block waited for every turn to finish: a third answer would be here now
    assert [r.plain_text for r in telegram.sent_messages(ALICE)] == [
        "answer to: slow",
        "answer to: one\n\ntwo\n\nthree",
    ]
    assert len(claude.requests) == 2


async def test_a_stale_stop_press_does_not_cancel_the_next_turn(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    release = asyncio.Event()

    @tool
    async def slow_lookup() -> str:
        """Looks something up, slowly."""
        await release.wait()
        return "found"

    def model(request: FakeRequest) -> FakeReply:
        if request.tool_results():
            return FakeReply.text("done")
        if request.last_user_text() == "second":
            return FakeReply.tool_use("slow_lookup", {})
        return FakeReply.text("first answer")

    claude.responder = model
    bot = make_bot(claude, tmp_path, stream_replies=True)
    bot.tools.register(slow_lookup)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "first")
        await telegram.wait_for_messages(ALICE)
        first_draft = telegram.drafts(ALICE)[0].params["draft_id"]
        telegram.send_text(ALICE, "second")
        await telegram.wait_for_requests("sendMessageDraft", len(telegram.drafts(ALICE)) + 1)
        telegram.inject_update(
            {
                "stopped_message_generation": {
                    "chat": {"id": ALICE, "type": "private", "first_name": "U"},
                    "draft_id": first_draft,
                }
            }
        )
        await telegram.wait_for_requests("getUpdates", len(telegram.requests_for("getUpdates")) + 2)
        release.set()
        replies = await telegram.wait_for_messages(ALICE, 2)
    assert replies[1].plain_text == "done", "the stale press named another draft"


async def test_a_tool_only_stretch_shows_a_stoppable_draft_and_all_text_is_kept(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    @tool
    async def look() -> str:
        """Looks."""
        return "seen"

    def model(request: FakeRequest) -> FakeReply:
        if request.tool_results():
            return FakeReply.text("Here it is.")
        return FakeReply.tool_use("look", {}, text="Let me look.")

    claude.responder = model
    bot = make_bot(claude, tmp_path, stream_replies=True)
    bot.tools.register(look)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "find it")
        [reply] = await telegram.wait_for_messages(ALICE)
    first = telegram.drafts(ALICE)[0].params
    assert first.get("text", "") == "" and first["can_stop"] is True, "Thinking… at once"
    assert first["keep_on_stop"] is True
    assert reply.plain_text == "Let me look.\n\nHere it is.", "text before the tool call kept"


def test_a_long_draft_shows_its_tail() -> None:
    text = "".join(f"line {n}: " + "x" * 60 + "\n" for n in range(200)) + "the end"
    html = draft_html(text)
    assert html.startswith("…") and html.endswith("the end")
    assert len(html) <= 4096


async def test_start_alone_and_unknown_commands_cost_no_llm_call(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "/start")
        telegram.send_text(ALICE, "/frobnicate now")
        replies = await telegram.wait_for_messages(ALICE, 2)
    assert replies[0].plain_text.startswith(bot.options.help_text)
    assert replies[1].plain_text.startswith("I don't know /frobnicate")
    assert "/help" in replies[1].plain_text
    assert claude.requests == []


async def test_clear_in_a_group_is_for_its_admins_and_clears_the_group_only(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path)
    telegram.make_chat_admin(GROUP, BOB)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "private note")
        await telegram.wait_for_messages(ALICE)
        in_group(telegram, ALICE, f"/clear@{BOT}")
        [refused] = await telegram.wait_for_messages(GROUP)
        in_group(telegram, BOB, "/clear")
        cleared = await telegram.wait_for_messages(GROUP, 2)
    assert refused.plain_text == bot.options.group_admin_only_text
    assert cleared[1].plain_text == bot.options.group_clear_text
    private = read_session_file(tmp_path / "sessions" / f"{ALICE}.jsonl").entries
    assert all(e.type != "reset" for e in private), "Alice's private chat was not touched"
    group = read_session_file(tmp_path / "sessions" / f"chat_{GROUP}.jsonl").entries
    assert [e.type for e in group] == ["reset"]


async def test_paid_broadcast_is_sent_only_when_asked_for(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    free = Settings(_env_file=None, global_rate=100)
    assert free.send_rate == 30, "without paid broadcasts the limiter never exceeds 30/s"
    bot = make_bot(claude, tmp_path, global_rate=100, paid_broadcast=True)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "hi")
        [reply] = await telegram.wait_for_messages(ALICE)
    assert reply.params["allow_paid_broadcast"] is True
    assert bot.settings.send_rate == 100


async def test_budgets_in_a_group_count_for_the_speaker(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, daily_token_budget=1_000_000)
    async with running(bot, telegram):
        in_group(telegram, ALICE, f"@{BOT} count this for me")
        await telegram.wait_for_messages(GROUP)
        await bot.access.ledger.flush()  # budget tokens are written in batches
        store = await bot.access.user_store()
        today = datetime.now(UTC).date()
        assert await store.usage_on(ALICE, today) > 0
        assert await store.usage_on(GROUP, today) == 0


async def test_usage_in_a_group_reports_the_groups_conversation_never_a_private_one(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path)
    async with running(bot, telegram):
        telegram.send_text(ALICE, "a long private question " * 40)
        await telegram.wait_for_messages(ALICE)
        in_group(telegram, BOB, f"@{BOT} hi all")
        await telegram.wait_for_messages(GROUP)
        in_group(telegram, ALICE, "/usage")
        [_, report] = await telegram.wait_for_messages(GROUP, 2)
        private = sum((await bot.context_for(ALICE)).usage_by_model.values(), Usage())
        group_context = await bot.context_for(GROUP, f"chat_{GROUP}")
        group = sum(group_context.usage_by_model.values(), Usage())
    assert private.output_tokens != group.output_tokens
    assert report.plain_text.startswith("This group's conversation:")
    assert f" {group.output_tokens:,} output tokens" in report.plain_text
    assert f" {private.output_tokens:,} output tokens" not in report.plain_text, "Alice's own"
