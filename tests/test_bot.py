"""The turn cycle of ``Bot``: gates, builders, replies, failures — in-process, real clients."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from botkit import Bot, Incoming, Settings, ToolContext, tool
from botkit.testing.anthropic import FakeAnthropicServer, FakeError, FakeReply, FakeRequest, is_note
from botkit.testing.harness import running
from botkit.testing.kit import fake_llm, make_settings
from botkit.testing.telegram import FakeTelegramServer

USER, OTHER, STRANGER = 501, 502, 666


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, allowed_users=frozenset({USER, OTHER}), stream_replies=True)


async def test_unauthorized_user_is_rejected_without_an_llm_call(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, settings: Settings
) -> None:
    bot = Bot(settings=settings, llm=fake_llm(claude), rejection_text="Members only.")
    async with running(bot, telegram):
        telegram.send_text(STRANGER, "hello?")
        replies = await telegram.wait_for_messages(STRANGER)
    assert replies[0].text == "Members only."
    assert claude.requests == []
    assert not (settings.sessions_dir / f"{STRANGER}.jsonl").exists()


async def test_handle_start_reply_ends_the_update_before_authorize(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, settings: Settings
) -> None:
    seen: list[tuple[int, str]] = []

    async def handle_start(message: Incoming, payload: str) -> str | None:
        seen.append((message.user_id, payload))
        return "Welcome aboard!" if payload == "invite-42" else None

    bot = Bot(settings=settings, llm=fake_llm(claude), handle_start=handle_start)
    async with running(bot, telegram):
        telegram.send_text(STRANGER, "/start invite-42")
        welcome = await telegram.wait_for_messages(STRANGER)
        telegram.send_text(USER, "/start")
        started = await telegram.wait_for_messages(USER)
    assert welcome[0].text == "Welcome aboard!", "the stranger was greeted before authorize"
    assert seen == [(STRANGER, "invite-42"), (USER, "")]
    assert started[0].plain_text.startswith(bot.options.help_text), (
        "no reply from handle_start: /start alone gets the help text"
    )
    assert "/help" in started[0].plain_text
    assert claude.requests == [], "/start alone costs no LLM call"


class TeamBot(Bot):
    """A subclass that shapes prompt, tools and extra per user."""

    async def build_prompt(self, message: Incoming) -> str:
        return f"You serve {message.first_name}."

    async def build_tools(self, message: Incoming) -> Any:
        return [whoami] if message.user_id == USER else []

    async def build_extra(self, message: Incoming) -> Any:
        return {"team": "blue"}


@tool
async def whoami(ctx: ToolContext) -> str:
    """Tell who is asking."""
    return f"user {ctx.user_id} of team {ctx.extra['team']}"


async def test_subclass_builds_prompt_tools_and_extra_per_user(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, settings: Settings
) -> None:
    def model(request: FakeRequest) -> FakeReply:
        if request.tool_results():
            return FakeReply.text(request.tool_results()[0]["content"])
        if request.tool_names == ["whoami"]:
            return FakeReply.tool_use("whoami", {})
        return FakeReply.text("no tools for you")

    claude.responder = model
    bot = TeamBot(settings=settings, llm=fake_llm(claude))
    async with running(bot, telegram):
        telegram.send_text(USER, "who am I?", first_name="Ann")
        mine = await telegram.wait_for_messages(USER)
        telegram.send_text(OTHER, "who am I?", first_name="Bo")
        theirs = await telegram.wait_for_messages(OTHER)
    assert mine[0].text == f"user {USER} of team blue"
    assert theirs[0].text == "no tools for you"
    # The subclass's prompt comes first; the features' parts (reminders) follow it.
    assert claude.requests[0].system_text.split("\n\n")[0] == "You serve Ann."
    assert claude.requests[-1].system_text.split("\n\n")[0] == "You serve Bo."


async def test_callbacks_work_without_subclassing(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, settings: Settings
) -> None:
    async def authorize(message: Incoming) -> str | None:
        return None if message.text != "forbidden" else "Not that."

    async def build_prompt(message: Incoming) -> str:
        return "callback prompt"

    bot = Bot(
        settings=settings, llm=fake_llm(claude), authorize=authorize, build_prompt=build_prompt
    )
    async with running(bot, telegram):
        telegram.send_text(STRANGER, "forbidden")
        telegram.send_text(STRANGER, "fine")
        replies = await telegram.wait_for_messages(STRANGER, 2)
    assert [r.text for r in replies] == ["Not that.", "echo: fine"]
    assert [r.system_text.split("\n\n")[0] for r in claude.requests] == ["callback prompt"]


async def test_overloaded_model_gets_a_polite_reply_and_the_next_turn_works(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, settings: Settings
) -> None:
    claude.enqueue(FakeError.overloaded())
    bot = Bot(settings=settings, llm=fake_llm(claude))
    async with running(bot, telegram):
        telegram.send_text(USER, "first")
        await telegram.wait_for_messages(USER)
        telegram.send_text(USER, "second")
        replies = await telegram.wait_for_messages(USER, 2)
    assert replies[0].text == bot.options.overloaded_text
    assert replies[1].text == "echo: first\nsecond", "the model saw both messages"
    sent = claude.requests[-1].messages
    assert [m["role"] for m in sent] == ["user"], "the unanswered message merged into the next"
    texts = [b["text"] for b in sent[0]["content"]]
    assert texts[1::2] == ["first", "second"]
    assert all(note.startswith("[") for note in texts[::2]), "each after its local time"


async def test_one_users_messages_are_answered_in_order(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, settings: Settings
) -> None:
    claude.latency = 0.1
    bot = Bot(settings=settings, llm=fake_llm(claude))
    async with running(bot, telegram):
        for n in range(4):
            telegram.send_text(USER, f"m{n}")
        replies = await telegram.wait_for_messages(USER, 4)
    assert [r.text for r in replies] == [f"echo: m{n}" for n in range(4)]
    assert [r.last_user_text() for r in claude.requests] == [f"m{n}" for n in range(4)]


async def test_photo_reaches_the_model_as_an_image_block(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, settings: Settings
) -> None:
    bot = Bot(settings=settings, llm=fake_llm(claude))
    async with running(bot, telegram):
        telegram.send_photo(USER, caption="what is this?")
        await telegram.wait_for_messages(USER)
    content = claude.requests[0].messages[0]["content"]
    assert [block["type"] for block in content] == ["image", "text", "text"]
    assert content[0]["source"]["media_type"] == "image/png"
    assert is_note(content[1]["text"]), "the local time, between the picture and the words"
    assert content[2]["text"] == "what is this?"


async def test_long_reply_is_split_into_messages_telegram_accepts(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, settings: Settings
) -> None:
    paragraphs = [f"Paragraph {n}: " + "word " * 300 for n in range(8)]
    claude.enqueue(FakeReply.text("\n\n".join(paragraphs)))
    bot = Bot(settings=settings, llm=fake_llm(claude))
    async with running(bot, telegram):
        telegram.send_text(USER, "tell me a lot")
        await telegram.wait_for_messages(USER)
    parts = telegram.sent_messages(USER)
    assert len(parts) >= 3
    assert all(len(p.text) <= 4096 for p in parts)
    assert all(p.text.startswith("Paragraph") for p in parts), "cut at paragraph ends"
    assert "".join(p.text for p in parts).count("word") == 8 * 300
