"""Approval before a tool acts: a call of a tool marked ``approval=True`` waits for Allow,
runs once after it, is refused on Deny or expiry, and holds no turn slot while it waits;
against the fake Telegram and the fake Messages API (#29)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from pydantic import SecretStr

from botkit import Bot, claimnotes, tracing
from botkit.agent.events import ApprovalDecided, ApprovalRequested
from botkit.agent.history import INTERRUPTED_TOOL_TEXT
from botkit.approvals.postgres import PostgresApprovals
from botkit.approvals.request import describe
from botkit.approvals.store import PendingApproval, SqliteApprovals, now
from botkit.messengers.base import Incoming
from botkit.messengers.flood import FloodControl
from botkit.replay import format_transcript, read_session
from botkit.runtime.cluster import serve_queued
from botkit.runtime.queue import _waiting_column
from botkit.runtime.telegram import messenger_for
from botkit.testing import ask, make_bot, running
from botkit.testing.anthropic import FakeAnthropicServer, FakeReply, FakeRequest
from botkit.testing.telegram import FakeTelegramServer, SentMessage
from botkit.tools import Tool, ToolContext, ToolRegistry, tool
from botkit.tools.mcp import connect_mcp, parse_mcp_config
from botkit.types import ToolDef, ToolResultBlock, ToolUseBlock

ALICE, BOB, MANAGER = 1001, 1002, 1003
OTHERS = tuple(range(2001, 2021))


def scripted(request: FakeRequest) -> FakeReply:
    """``DELETE <path>`` (in a group, after the speaker's line and a mention) calls
    ``delete_file``; a tool result is read back; else an echo."""
    results = request.tool_results()
    if results:
        result = results[0]
        flag = " (error)" if result.get("is_error") else ""
        return FakeReply.text(f"tool said{flag}: {_content(result)}")
    text = request.last_user_text()
    _, asked, path = text.splitlines()[-1].partition("DELETE ")
    if asked:
        return FakeReply.tool_use("delete_file", {"path": path})
    return FakeReply.text(f"echo: {text}")


def _content(result: dict[str, Any]) -> str:
    content = result.get("content")
    if isinstance(content, list):
        return " ".join(str(block.get("text", "")) for block in content)
    return str(content)


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer(responder=scripted) as server:
        yield server


def approval_bot(
    claude: FakeAnthropicServer, tmp_path: Path, deleted: list[str], **settings: Any
) -> Bot:
    users = frozenset({ALICE, BOB, MANAGER, *OTHERS})
    bot = make_bot(claude, tmp_path, allowed_users=users, **settings)

    @bot.tool(approval=True)
    async def delete_file(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return f"deleted {path}"

    return bot


def buttons_of(message: SentMessage) -> list[str]:
    markup = message.params.get("reply_markup") or {}
    if isinstance(markup, str):
        markup = json.loads(markup)
    return [button["text"] for row in markup.get("inline_keyboard", []) for button in row]


def press_as_shown(
    telegram: FakeTelegramServer, user_id: int, message: SentMessage, text: str
) -> None:
    """Press a button of ``message`` as it was first sent (a client showing it still), even
    when the bot has removed it since."""
    markup = message.params.get("reply_markup") or {}
    if isinstance(markup, str):
        markup = json.loads(markup)
    (data,) = [
        b["callback_data"] for row in markup["inline_keyboard"] for b in row if b["text"] == text
    ]
    query = {
        "id": f"stale-{message.message_id}",
        "from": {"id": user_id, "is_bot": False, "first_name": "User"},
        "message": {
            "message_id": message.message_id,
            "date": 0,
            "chat": {"id": message.chat_id, "type": "private"},
            "text": message.plain_text,
        },
        "chat_instance": str(message.chat_id),
        "data": data,
    }
    telegram.inject_update({"callback_query": query})


def press_answers(telegram: FakeTelegramServer) -> list[str | None]:
    return [r.params.get("text") for r in telegram.requests_for("answerCallbackQuery")]


async def asking(telegram: FakeTelegramServer, text: str, user: int = ALICE) -> SentMessage:
    """Send ``text`` and return the approval request it brings."""
    before = len(telegram.sent_messages(user))
    telegram.send_text(user, text)
    request = (await telegram.wait_for_messages(user, before + 1))[-1]
    assert buttons_of(request) == ["Allow", "Deny"]
    return request


async def test_the_tool_runs_only_after_allow_and_once(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    deleted: list[str] = []
    bot = approval_bot(claude, tmp_path, deleted)
    events: list[Any] = []
    for kind in ("approval_requested", "approval_decided"):
        bot.hooks.on(kind, lambda event: asyncio.sleep(0, events.append(event)))
    async with running(bot, telegram):
        request = await asking(telegram, "DELETE <b>/tmp/report.pdf</b>")
        assert "delete_file" in request.plain_text
        assert "path: <b>/tmp/report.pdf</b>" in request.plain_text  # escaped, shown as is
        await asyncio.sleep(0.5)
        assert deleted == [], "the tool never runs before Allow"
        assert len(claude.requests) == 1
        telegram.press_button(ALICE, request, "Allow")
        telegram.press_button(ALICE, request, "Allow")  # a double press
        answer = (await telegram.wait_for_messages(ALICE, 2))[-1]
        await telegram.wait_for_requests("answerCallbackQuery", 2)
    assert answer.plain_text == "tool said: deleted <b>/tmp/report.pdf</b>"
    assert deleted == ["<b>/tmp/report.pdf</b>"], "Allow runs it exactly once"
    assert sorted(map(str, press_answers(telegram))) == ["Allowed.", "This was already decided."]
    (edited,) = telegram.edited_messages(ALICE)
    assert edited.message_id == request.message_id and buttons_of(edited) == []
    assert edited.plain_text.endswith("Allowed.")
    assert len(claude.requests) == 2
    assert bot.metrics.approvals.labels("allowed")._value.get() == 1
    requested, decided = events
    assert isinstance(requested, ApprovalRequested)
    assert [call.name for call in requested.calls] == ["delete_file"]
    assert isinstance(decided, ApprovalDecided) and decided.approval_id == requested.approval_id
    assert (decided.decision, decided.decided_by) == ("allowed", ALICE)
    source, session = read_session(str(tmp_path / "sessions" / f"{ALICE}.jsonl"))
    transcript = format_transcript(session, source=source)
    assert "→ delete_file(" in transcript and "waiting for approval" in transcript
    assert "approval: allowed" in transcript


@pytest.mark.parametrize("stream_replies", [False, True], ids=["plain", "drafts"])
async def test_deny_gives_the_model_an_error_result_and_the_user_an_answer(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    stream_replies: bool,
    where: str | None,
) -> None:
    deleted: list[str] = []
    settings: dict[str, Any] = {"stream_replies": stream_replies}
    async with served(claude, telegram, tmp_path, where, deleted, **settings) as bot:
        request = await asking(telegram, "DELETE /etc/passwd")
        telegram.press_button(ALICE, request, "Deny")
        answer = (await telegram.wait_for_messages(ALICE, 2))[-1]
    assert deleted == []
    assert answer.plain_text == f"tool said (error): {bot.options.loop_texts.denied}"
    assert press_answers(telegram) == ["Denied."]
    assert bot.metrics.approvals.labels("denied")._value.get() == 1


async def test_no_press_in_time_is_a_denial_and_a_later_press_is_told_it_expired(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path, where: str | None
) -> None:
    deleted: list[str] = []
    async with served(claude, telegram, tmp_path, where, deleted, approval_timeout=1.0) as bot:
        request = await asking(telegram, "DELETE /tmp/x")
        answer = (await telegram.wait_for_messages(ALICE, 2, timeout=20))[-1]
        assert answer.plain_text == f"tool said (error): {bot.options.loop_texts.expired}"
        (edited,) = telegram.edited_messages(ALICE)
        assert buttons_of(edited) == [], "the buttons are removed"
        assert edited.plain_text.endswith(bot.options.approval_texts.expired)
        press_as_shown(telegram, ALICE, request, "Allow")  # a client not updated yet
        await telegram.wait_for_requests("answerCallbackQuery", 1)
    assert press_answers(telegram) == ["This request has expired."]
    assert deleted == []
    assert bot.metrics.approvals.labels("expired")._value.get() == 1


async def test_someone_elses_press_runs_nothing(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    deleted: list[str] = []
    bot = approval_bot(claude, tmp_path, deleted)
    async with running(bot, telegram):
        request = await asking(telegram, "DELETE /tmp/x")
        telegram.press_button(BOB, request, "Allow")
        await telegram.wait_for_requests("answerCallbackQuery", 1)
        await asyncio.sleep(0.5)
        assert deleted == [] and len(claude.requests) == 1
        telegram.press_button(ALICE, request, "Allow")
        await telegram.wait_for_messages(ALICE, 2)
    assert press_answers(telegram) == ["This is not yours to approve.", "Allowed."]
    assert deleted == ["/tmp/x"]


GROUP = -100_555


async def test_in_a_group_only_the_speaker_or_an_approver_may_press(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    deleted: list[str] = []
    bot = make_bot(
        claude,
        tmp_path,
        bot_class=ManagedBot,
        allowed_users=frozenset({ALICE, BOB, MANAGER}),
        stream_replies=False,
    )

    @bot.tool(approval=True)
    async def delete_file(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return f"deleted {path}"

    async with running(bot, telegram):
        asked = "@botkit_test_bot DELETE /tmp/x"
        telegram.send_text(ALICE, asked, chat_id=GROUP, chat_type="supergroup")
        (request,) = await telegram.wait_for_messages(GROUP, 1)
        assert buttons_of(request) == ["Allow", "Deny"]
        assert request.params.get("reply_parameters") or request.params.get(
            "reply_to_message_id"
        ), "it answers the speaker's message"
        telegram.press_button(BOB, request, "Allow")  # another member of the group
        await telegram.wait_for_requests("answerCallbackQuery", 1)
        await asyncio.sleep(0.5)
        assert deleted == [] and len(claude.requests) == 1
        telegram.press_button(MANAGER, request, "Deny")  # an approver outside the group
        answer = (await telegram.wait_for_messages(GROUP, 2))[-1]
    assert press_answers(telegram) == ["This is not yours to approve.", "Denied."]
    assert answer.plain_text == f"tool said (error): {bot.options.loop_texts.denied}"
    assert deleted == []


async def test_the_speaker_in_a_group_may_allow(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    deleted: list[str] = []
    bot = approval_bot(claude, tmp_path, deleted, stream_replies=False)
    async with running(bot, telegram):
        asked = "@botkit_test_bot DELETE /tmp/x"
        telegram.send_text(ALICE, asked, chat_id=GROUP, chat_type="supergroup")
        (request,) = await telegram.wait_for_messages(GROUP, 1)
        telegram.press_button(ALICE, request, "Allow")
        answer = (await telegram.wait_for_messages(GROUP, 2))[-1]
    assert press_answers(telegram) == ["Allowed."]
    assert answer.plain_text == "tool said: deleted /tmp/x"
    assert deleted == ["/tmp/x"]


async def test_the_request_shows_every_argument_in_full_as_it_will_run(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    """#51: nothing a person approves is hidden: a long value's tail, a 13th argument, a
    right-to-left override that would show a path reversed, a code fence in a value."""
    deleted: list[str] = []
    bot = approval_bot(claude, tmp_path, deleted)
    tail = " and forward all customer records to evil@example.org"
    path = "/" + "a" * 4_000 + tail + "/\u202egpj.exe ```"
    async with running(bot, telegram):
        telegram.send_text(ALICE, f"DELETE {path}")
        messages = await telegram.wait_for_messages(ALICE, 2)
        request = messages[-1]
        assert "reply_markup" in request.params, "the buttons are under the last part"
        telegram.press_button(ALICE, request, "Allow")
        await telegram.wait_for_messages(ALICE, 3)
    shown = "".join(m.plain_text for m in messages)
    assert tail in shown, "the whole value, its end too"
    assert "\u202e" not in shown and "\\u202egpj.exe ```" in shown, "the override shown as such"
    assert deleted == [path], "what ran is what was shown"
    calls = [{"name": "t", "input": {f"arg{n}": n for n in range(13)}}]
    assert "arg12: 12" in describe(calls), "the 13th argument too"


class ManagedBot(Bot):
    async def approvers(self, call: ToolUseBlock, message: Incoming) -> Sequence[int]:
        return [MANAGER] if call.name == "delete_file" else []


async def test_approvers_lets_a_manager_allow(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    deleted: list[str] = []
    bot = make_bot(
        claude, tmp_path, bot_class=ManagedBot, allowed_users=frozenset({ALICE, BOB, MANAGER})
    )

    @bot.tool(approval=True)
    async def delete_file(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return "deleted"

    async with running(bot, telegram):
        request = await asking(telegram, "DELETE /tmp/x")
        telegram.press_button(BOB, request, "Allow")
        await telegram.wait_for_requests("answerCallbackQuery", 1)
        telegram.press_button(MANAGER, request, "Allow")
        answer = (await telegram.wait_for_messages(ALICE, 2))[-1]
    assert press_answers(telegram) == ["This is not yours to approve.", "Allowed."]
    assert answer.plain_text == "tool said: deleted"
    assert deleted == ["/tmp/x"]


async def test_a_waiting_approval_holds_no_slot_and_later_messages_wait_in_order(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    deleted: list[str] = []
    bot = approval_bot(claude, tmp_path, deleted, max_concurrent_turns=1)
    async with running(bot, telegram):
        request = await asking(telegram, "DELETE /tmp/x")
        telegram.send_text(ALICE, "first after")
        telegram.send_text(ALICE, "second after")
        for user in OTHERS:
            telegram.send_text(user, f"hi from {user}")
        for user in OTHERS:
            (reply,) = await telegram.wait_for_messages(user, 1, timeout=30)
            assert reply.plain_text == f"echo: hi from {user}"
        assert len(telegram.sent_messages(ALICE)) == 1, "Alice's messages wait behind it"
        telegram.press_button(ALICE, request, "Allow")
        third = (await telegram.wait_for_messages(ALICE, 3, timeout=30))[2]
        if "second after" not in third.plain_text:
            await telegram.wait_for_messages(ALICE, 4, timeout=30)
        await asyncio.sleep(0.5)  # nothing more comes
        sent = [m.plain_text for m in telegram.sent_messages(ALICE)]
    assert sent[1] == "tool said: deleted /tmp/x"
    # Answered after the decision, in order (two messages in a row may be one turn, as ever).
    assert sent[2:] in (
        ["echo: first after", "echo: second after"],
        ["echo: first after\n\nsecond after"],
    )
    assert deleted == ["/tmp/x"]


async def test_a_conversation_with_nothing_waiting_asks_the_approvals_file_nothing(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deleted: list[str] = []
    bot = approval_bot(claude, tmp_path, deleted)
    asked: list[str] = []
    real_rows = SqliteApprovals._rows

    async def counted(self: SqliteApprovals, sql: str, *params: Any) -> list[Any]:
        asked.append(sql)
        return await real_rows(self, sql, *params)

    monkeypatch.setattr(SqliteApprovals, "_rows", counted)
    async with running(bot, telegram):
        await ask(telegram, BOB, "hello")  # the first turn reads who waits, once
        read_once = len(asked)
        for n in range(5):
            await ask(telegram, BOB, f"hello {n}")
        assert len(asked) == read_once, "idle turns: no round trip to approvals.db"
        request = await asking(telegram, "DELETE /tmp/y")  # Alice now waits
        telegram.send_text(ALICE, "behind it")
        await asyncio.sleep(0.5)
        assert len(telegram.sent_messages(ALICE)) == 1, "held behind the request, as before"
        telegram.press_button(ALICE, request, "Allow")
        await telegram.wait_for_messages(ALICE, 3, timeout=30)
        before = len(asked)
        await ask(telegram, ALICE, "and now")  # finished: one look, then none
        await ask(telegram, ALICE, "again")
    assert deleted == ["/tmp/y"]
    waits = [sql for sql in asked[before:] if "EXISTS" in sql]
    assert len(waits) <= 1, "after its approval finished, the conversation is idle again"


async def test_a_press_after_a_restart_resumes_the_turn_from_the_record(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    deleted: list[str] = []
    first = approval_bot(claude, tmp_path, deleted)
    async with running(first, telegram):
        request = await asking(telegram, "DELETE /tmp/x")
    second = approval_bot(claude, tmp_path, deleted)
    async with running(second, telegram):
        telegram.press_button(ALICE, request, "Allow")
        answer = (await telegram.wait_for_messages(ALICE, 2))[-1]
    assert answer.plain_text == "tool said: deleted /tmp/x"
    assert deleted == ["/tmp/x"]


SKILLS = Path(__file__).resolve().parent.parent / "examples" / "skills"


class ManagersToolsBot(Bot):
    """``delete_file`` is offered to managers only (a stored role)."""

    async def build_tools(self, message: Incoming) -> ToolRegistry | Sequence[Tool]:
        tools = list(await super().build_tools(message))
        if message.user is not None and message.user.role == "manager":
            return tools
        return [t for t in tools if t.name != "delete_file"]


async def test_a_resumed_turn_is_built_like_a_new_one(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    deleted: list[str] = []
    bot = make_bot(
        claude,
        tmp_path,
        bot_class=ManagersToolsBot,
        skills_dir=SKILLS,
        allowed_users=frozenset({ALICE}),
    )

    @bot.tool(approval=True)
    async def delete_file(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return f"deleted {path}"

    await (await bot.access.user_store()).upsert_user(ALICE, "manager")
    async with running(bot, telegram):
        request = await asking(telegram, "DELETE /tmp/x")
        telegram.press_button(ALICE, request, "Allow")
        answer = (await telegram.wait_for_messages(ALICE, 2))[-1]
    first, resumed = claude.requests
    assert "trip-checklist" in first.system_text, "the skills part is in the prompt"
    assert resumed.system_text == first.system_text, "the same prompt (and cache prefix)"
    assert "delete_file" in resumed.tool_names, "the stored role's tools are there"
    assert answer.plain_text == "tool said: deleted /tmp/x"
    assert deleted == ["/tmp/x"]


async def test_a_user_blocked_while_the_request_waited_gets_no_call_run(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    deleted: list[str] = []
    bot = make_bot(
        claude, tmp_path, bot_class=ManagedBot, allowed_users=frozenset({ALICE, MANAGER})
    )

    @bot.tool(approval=True)
    async def delete_file(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return "deleted"

    async with running(bot, telegram):
        request = await asking(telegram, "DELETE /tmp/x")
        await (await bot.access.user_store()).block_user(ALICE)
        bot.access.forget(ALICE)
        telegram.press_button(MANAGER, request, "Allow")  # the manager has not heard
        answer = (await telegram.wait_for_messages(ALICE, 2))[-1]
        await asyncio.sleep(0.5)
    assert deleted == [], "the tool does not run"
    assert len(claude.requests) == 1, "no LLM call for a blocked user"
    assert answer.plain_text == bot.options.rejection_text
    _, session = read_session(str(tmp_path / "sessions" / f"{ALICE}.jsonl"))
    results = [b for b in session.messages[-1].content if isinstance(b, ToolResultBlock)]
    assert [(r.is_error, r.content) for r in results] == [
        (True, bot.options.loop_texts.unauthorized)
    ], "the call has its result: the session stays valid"


APP = '''
from pathlib import Path

from botkit import Bot

bot = Bot()


@bot.tool(approval=True)
async def delete_file(path: str) -> str:
    """Delete a file."""
    with Path("runs.txt").open("a") as runs:
        runs.write(path + "\\n")
    return f"deleted {path}"
'''


class BotProcess:
    """``python -m botkit run approval_app:bot`` against the fakes, in ``home``."""

    def __init__(self, telegram: FakeTelegramServer, claude: FakeAnthropicServer, home: Path):
        (home / "approval_app.py").write_text(APP)
        self.home = home
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))},
            "TELEGRAM_BOT_TOKEN": telegram.token,
            "TELEGRAM_API_BASE": telegram.base_url,
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": claude.base_url,
            "BOTKIT_SESSIONS_DIR": str(home / "sessions"),
            "BOTKIT_ALLOWED_USERS": str(ALICE),
            "BOTKIT_POLL_TIMEOUT": "5",
            "BOTKIT_STREAM_REPLIES": "false",
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "botkit", "run", "approval_app:bot"],
            cwd=self.home,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def end(self, sig: signal.Signals) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        return await asyncio.to_thread(self.process.wait, 30)


async def test_sigkill_between_the_request_and_the_press_then_allow_runs_it_once(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = BotProcess(telegram, claude, tmp_path)
    bot.start()
    try:
        telegram.send_text(ALICE, "DELETE /tmp/x")
        (request,) = await telegram.wait_for_messages(ALICE, 1, timeout=60)
        assert buttons_of(request) == ["Allow", "Deny"]
        await bot.end(signal.SIGKILL)
        assert not (tmp_path / "runs.txt").exists()
        bot.start()
        telegram.press_button(ALICE, request, "Allow")
        _, answer = await telegram.wait_for_messages(ALICE, 2, timeout=60)
        assert answer.plain_text == "tool said: deleted /tmp/x"
        await asyncio.sleep(2)  # nothing more comes: the replayed request is not run again
        assert len(telegram.sent_messages(ALICE)) == 2
        assert (tmp_path / "runs.txt").read_text() == "/tmp/x\n", "it ran once"
        assert await bot.end(signal.SIGTERM) == 0
    finally:
        if bot.process is not None and bot.process.poll() is None:
            await bot.end(signal.SIGKILL)


async def test_mcp_tools_matching_the_configs_approval_patterns_wait_for_allow(
    tmp_path: Path,
) -> None:
    example = Path(__file__).with_name("mcp_server_example.py")
    config = {
        "mcpServers": {
            "example": {
                "command": sys.executable,
                "args": [str(example)],
                "approval": ["sh*", "example__pid"],
            }
        }
    }
    (server,) = parse_mcp_config(json.dumps(config))
    async with connect_mcp([server]) as tools:
        registry = ToolRegistry(tools)
        waiting = [name for name in registry.names if registry.needs_approval(name)]
    assert waiting == ["example__shout", "example__pid"]


def test_tool_and_tool_subclasses_take_approval() -> None:
    @tool(approval=True)
    def wipe(what: str) -> str:
        """Wipe something."""
        return what

    class Pay(Tool):
        approval = True

        @property
        def definition(self) -> ToolDef:
            return ToolDef(name="pay", description="Pay.", input_schema={"type": "object"})

        async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> str:
            return "paid"

    registry = ToolRegistry([wipe, Pay(), tool(lambda: "x", name="look")])
    assert [n for n in registry.names if registry.needs_approval(n)] == ["wipe", "pay"]


# ---- PostgreSQL, and receive/work ------------------------------------------------------------


def queued_approval_bot(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    home: Path,
    db: str,
    deleted: list[str],
    **settings: Any,
) -> Bot:
    values: dict[str, Any] = {
        "database_url": SecretStr(db),
        "telegram_bot_token": SecretStr(telegram.token),
        "telegram_api_base": telegram.base_url,
        "access": "open",
        "stalled_timeout": 2.0,
        "poll_timeout": 1,
    }
    bot = make_bot(claude, home, **values, **settings)

    @bot.tool(approval=True)
    async def delete_file(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return f"deleted {path}"

    return bot


@asynccontextmanager
async def queued(bot: Bot, *, receive: bool = True, work: bool = True) -> AsyncIterator[None]:
    """``serve_queued`` in this loop while the block runs; on exit, stop it and wait."""
    messenger = messenger_for(bot.settings, flood=FloodControl.unlimited(), inbox=False)
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve_queued(
            bot,
            stop,
            receive=receive,
            work=work,
            concurrency=4,
            messenger=messenger,
            grace_period=5,
        )
    )
    try:
        yield
    finally:
        stop.set()
        await task


async def test_on_postgres_with_two_workers_the_press_lands_on_the_other_and_runs_once(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    first_runs: list[str] = []
    second_runs: list[str] = []
    receiver = queued_approval_bot(claude, telegram, tmp_path / "r", db, [])
    first = queued_approval_bot(claude, telegram, tmp_path / "w1", db, first_runs)
    second = queued_approval_bot(claude, telegram, tmp_path / "w2", db, second_runs)
    async with queued(receiver, work=False):
        async with queued(first):
            request = await asking(telegram, "DELETE /tmp/x")
            telegram.send_text(ALICE, "after")  # held behind the request, on the database
            await asyncio.sleep(2)
            assert len(telegram.sent_messages(ALICE)) == 1
        async with queued(second):  # the first worker is gone: the press lands here
            telegram.press_button(ALICE, request, "Allow")
            telegram.press_button(ALICE, request, "Allow")
            await telegram.wait_for_messages(ALICE, 3, timeout=40)
            await asyncio.sleep(1)
    texts = [m.plain_text for m in telegram.sent_messages(ALICE)]
    assert texts[1:] == ["tool said: deleted /tmp/x", "echo: after"]
    assert first_runs == [] and second_runs == ["/tmp/x"], "it ran once, on the other worker"
    assert sorted(map(str, press_answers(telegram))) == ["Allowed.", "This was already decided."]


@pytest.fixture(params=["files", "postgres"])
def where(request: pytest.FixtureRequest) -> str | None:
    """Where approvals are kept: ``None`` for files (``run``), else a migrated PostgreSQL
    database (served by receive/work)."""
    if request.param == "files":
        return None
    db: str = request.getfixturevalue("db")
    return db


@asynccontextmanager
async def served(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    home: Path,
    db: str | None,
    deleted: list[str],
    **settings: Any,
) -> AsyncIterator[Bot]:
    """An approval bot while the block runs: ``run`` on files, or a receiver and a worker on
    PostgreSQL (the worker is yielded: presses and turns are its)."""
    if db is None:
        bot = approval_bot(claude, home, deleted, **settings)
        async with running(bot, telegram):
            yield bot
        return
    receiver = queued_approval_bot(claude, telegram, home / "r", db, [], **settings)
    worker = queued_approval_bot(claude, telegram, home / "w", db, deleted, **settings)
    async with queued(receiver, work=False), queued(worker, receive=False):
        yield worker


async def held(bot: Bot, telegram: FakeTelegramServer, text: str) -> None:
    """Send ``text`` as Alice and wait until it is held behind her waiting request."""
    telegram.send_text(ALICE, text)
    for _ in range(300):
        if await bot.approvals.store.held_conversations():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{text!r} was not held")


async def the_request(bot: Bot) -> PendingApproval:
    (approval,) = await bot.approvals.store.open_approvals()
    return approval


async def request_elsewhere(pool: Any) -> PostgresApprovals:
    """A request for Bob's conversation recorded by another process's store (on ``pool``, with
    no change feed of its own); that store."""

    async def other_pool() -> Any:
        return pool

    other = PostgresApprovals(other_pool)
    await other.add(
        PendingApproval(
            id="from-elsewhere",
            conversation=f"{BOB}:",
            user_id=BOB,
            approvers=(),
            chat_id=BOB,
            turn={},
            calls=[],
            deadline=now() + 600,
        )
    )
    return other


async def test_on_postgres_an_idle_conversations_turns_ask_the_approvals_nothing(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    db: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The job's claim reads whether its conversation waits; a request another process
    records is seen by the next turn's claim, and that message is held."""
    monkeypatch.setattr(claimnotes, "KNOWN_FOR", 60.0)  # a slow machine: still the claim's
    asked: list[str] = []
    real_waiting = PostgresApprovals.waiting

    async def counted(self: PostgresApprovals, conversation: str) -> bool:
        asked.append(conversation)
        return await real_waiting(self, conversation)

    monkeypatch.setattr(PostgresApprovals, "waiting", counted)
    async with served(claude, telegram, tmp_path, db, []) as worker:
        for n in range(3):
            await ask(telegram, BOB, f"hello {n}")
        assert asked == [], "idle turns: no approvals query"
        pool = await asyncpg.create_pool(db, min_size=1, max_size=1)
        other = await request_elsewhere(pool)
        try:
            telegram.send_text(BOB, "while it waits")
            for _ in range(300):
                if await worker.approvals.store.held_conversations():
                    break
                await asyncio.sleep(0.05)
            assert await other.held_conversations() == [f"{BOB}:"], "held behind the request"
            assert asked == [f"{BOB}:"], "the claim said it waits: the turn looked once"
            assert len(telegram.sent_messages(BOB)) == 3, "no answer while it waits"
        finally:
            await pool.close()


async def test_run_on_postgres_asks_an_idle_conversation_once_and_hears_another_process(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    db: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``run`` on PostgreSQL (no job claim): the first turn asks whether the conversation
    waits, later idle turns ask nothing; a request another process records is heard (the
    change feed) and the next message is held behind it."""
    asked: list[str] = []
    real_fetch = PostgresApprovals._fetch

    async def counted(self: PostgresApprovals, sql: str, *params: Any) -> list[Any]:
        if sql.startswith("SELECT EXISTS"):
            asked.append(str(params[0]))
        return await real_fetch(self, sql, *params)

    monkeypatch.setattr(PostgresApprovals, "_fetch", counted)
    bot = approval_bot(claude, tmp_path, [], database_url=SecretStr(db))
    async with running(bot, telegram):
        for n in range(3):
            await ask(telegram, BOB, f"hello {n}")
        assert asked == [f"{BOB}:"], "asked once, then known idle"
        pool = await asyncpg.create_pool(db, min_size=1, max_size=1)
        try:
            await request_elsewhere(pool)
        finally:
            await pool.close()
        kept = bot.approvals.store._idle  # type: ignore[attr-defined]
        for _ in range(100):  # the notification comes a moment after the commit
            if not kept.get(f"{BOB}:")[0]:
                break
            await asyncio.sleep(0.05)
        telegram.send_text(BOB, "while it waits")
        for _ in range(300):
            if await bot.approvals.store.held_conversations():
                break
            await asyncio.sleep(0.05)
        assert await bot.approvals.store.held_conversations() == [f"{BOB}:"]
        assert asked == [f"{BOB}:", f"{BOB}:"], "heard the change: asked again"
        assert len(telegram.sent_messages(BOB)) == 3, "no answer while it waits"


@pytest.mark.parametrize(
    ("key", "conversation"),
    [
        ("1002", "1002:"),
        ("chat_-100777", "-100777:chat_-100777"),
        ("chat_-100777_12", "-100777:chat_-100777_12"),
        ("chat_-100777_12_user_1002", "1002:chat_-100777_12_user_1002"),
    ],
)
async def test_a_claim_reads_the_waiting_of_the_approvals_own_conversation_name(
    db: str, key: str, conversation: str
) -> None:
    """The claim's ``claim_waiting`` names the conversation as ``Approvals.conversation``
    does, for private chats, groups, topics and per-member group contexts."""
    connection = await asyncpg.connect(db)
    try:
        query = f"SELECT {_waiting_column('$1::text')}"
        assert await connection.fetchval(query, key) is False
        await connection.execute(
            "INSERT INTO botkit_held_messages (conversation, update_json) VALUES ($1, '{}')",
            conversation,
        )
        assert await connection.fetchval(query, key) is True
        assert await connection.fetchval(query, f"{key}9") is False, "another conversation"
    finally:
        await connection.close()


async def test_a_resumption_whose_process_died_is_ended_by_the_next_sweep(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    where: str | None,
) -> None:
    deleted: list[str] = []
    async with served(claude, telegram, tmp_path, where, deleted) as bot:
        await asking(telegram, "DELETE /tmp/x")
        await held(bot, telegram, "after")
        approval = await the_request(bot)
        store = bot.approvals.store
        # Another process recorded Allow, took the turn, and died: its lease has run out.
        assert await store.decide(approval.id, "allowed")
        assert await store.claim(approval.id, now() - 1)
        assert bot.messenger is not None
        await bot.approvals.sweep(bot.messenger)  # a periodic sweep, not one at start
        (_, answer) = await telegram.wait_for_messages(ALICE, 2, timeout=30)
        assert answer.plain_text == f"tool said (error): {INTERRUPTED_TOOL_TEXT}"
        await asyncio.sleep(0.5)  # nothing more comes
        ended = await store.get(approval.id)
        assert ended is not None and ended.state == "done"
        assert await store.held_conversations() == [], "the held message ran"
    assert len(telegram.sent_messages(ALICE)) == 2
    assert deleted == [], "never run a second time (it may have run in the dead process)"


async def test_run_ends_at_its_start_a_resumption_its_killed_self_left(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    deleted: list[str] = []
    first = approval_bot(claude, tmp_path, deleted)
    async with running(first, telegram):
        await asking(telegram, "DELETE /tmp/x")
        await held(first, telegram, "after")
        approval = await the_request(first)
        # It was resuming when killed: its lease has not run out yet.
        assert await first.approvals.store.decide(approval.id, "allowed")
        assert await first.approvals.store.claim(approval.id, now() + 60)
    again = approval_bot(claude, tmp_path, deleted)
    async with running(again, telegram):  # files: only one process serves them
        (_, answer) = await telegram.wait_for_messages(ALICE, 2, timeout=20)
    assert answer.plain_text == f"tool said (error): {INTERRUPTED_TOOL_TEXT}"
    assert deleted == []


async def test_on_postgres_a_worker_starting_mid_resume_leaves_the_resumption_alone(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, db: str
) -> None:
    receiver = queued_approval_bot(claude, telegram, tmp_path / "r", db, [])
    first = queued_approval_bot(claude, telegram, tmp_path / "w1", db, [])
    second = queued_approval_bot(claude, telegram, tmp_path / "w2", db, [])
    async with queued(receiver, work=False), queued(first, receive=False):
        await asking(telegram, "DELETE /tmp/x")
        await held(first, telegram, "after")
        approval = await the_request(first)
        store = first.approvals.store
        # The first worker is resuming it now (a long tool call): decided, claimed, leased.
        assert await store.decide(approval.id, "allowed")
        assert await store.claim(approval.id, now() + 60)
        async with queued(second, receive=False):  # a worker starts: its first sweep runs
            await asyncio.sleep(2)
            resuming = await store.get(approval.id)
            assert resuming is not None and resuming.state == "resuming", "not ended"
            assert len(telegram.sent_messages(ALICE)) == 1, "its held message is not run beside it"
            await store.finish(approval.id)  # the turn ended; its worker left the rest
            assert second.messenger is not None
            await second.approvals.sweep(second.messenger)  # any later sweep runs it
            (_, answer) = await telegram.wait_for_messages(ALICE, 2, timeout=30)
    # The held message's turn: the model reads the unfinished call as interrupted.
    assert answer.plain_text == f"tool said (error): {INTERRUPTED_TOOL_TEXT}"


async def test_a_long_call_keeps_its_lease_and_sweeps_meanwhile_change_nothing(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    started, finish = asyncio.Event(), asyncio.Event()
    runs: list[str] = []
    bot = make_bot(claude, tmp_path, allowed_users=frozenset({ALICE}))

    @bot.tool(approval=True)
    async def delete_file(path: str) -> str:
        """Delete a file, slowly."""
        runs.append(path)
        started.set()
        await finish.wait()
        return f"deleted {path}"

    bot.approvals.lease = 0.6  # renewed every 0.2 s while the call runs
    async with running(bot, telegram):
        request = await asking(telegram, "DELETE /tmp/x")
        await held(bot, telegram, "after")
        telegram.press_button(ALICE, request, "Allow")
        await asyncio.wait_for(started.wait(), 20)
        assert bot.messenger is not None
        for _ in range(4):
            await asyncio.sleep(0.5)
            await bot.approvals.sweep(bot.messenger)
        assert (await the_request(bot)).state == "resuming", "a live lease is never taken"
        assert len(telegram.sent_messages(ALICE)) == 1, "the held message waits"
        finish.set()
        await telegram.wait_for_messages(ALICE, 3, timeout=30)
        await asyncio.sleep(0.5)
    texts = [m.plain_text for m in telegram.sent_messages(ALICE)]
    assert texts[1:] == ["tool said: deleted /tmp/x", "echo: after"]
    assert runs == ["/tmp/x"]


OLD_SCHEMA = (
    """CREATE TABLE botkit_approvals (id TEXT PRIMARY KEY, conversation TEXT NOT NULL,
    user_id INTEGER NOT NULL, approvers TEXT NOT NULL, chat_id INTEGER NOT NULL,
    turn TEXT NOT NULL, calls TEXT NOT NULL, deadline REAL NOT NULL, message_id INTEGER,
    state TEXT NOT NULL DEFAULT 'pending', decision TEXT)""",
    """CREATE TABLE botkit_held_messages (seq INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation TEXT NOT NULL, update_json TEXT NOT NULL)""",
    """INSERT INTO botkit_approvals VALUES ('old', '1001:', 1001, '[]', 1001, '{}', '[]', 0,
    NULL, 'resuming', 'allowed')""",
    "INSERT INTO botkit_held_messages (conversation, update_json) VALUES ('1001:', '{}')",
)


async def test_an_approvals_file_of_an_older_botkit_gets_the_lease_columns(
    tmp_path: Path,
) -> None:
    path = tmp_path / "approvals.db"
    with sqlite3.connect(path) as old:
        for statement in OLD_SCHEMA:
            old.execute(statement)
    store = SqliteApprovals(path)
    try:
        (approval,) = await store.open_approvals()
        assert (approval.state, approval.resuming_until) == ("resuming", 0.0)
        assert await store.abandon("old", now()), "a resumption from before leases is taken"
        held = await store.take_held("1001:", now(), now() + 60)
        assert held is not None and held.update == {}
        assert await store.take_held("1001:", now(), now() + 60) is None, "leased: once"
    finally:
        await store.close()


async def test_an_approval_shows_in_the_trace(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    deleted: list[str] = []
    bot = approval_bot(claude, tmp_path, deleted, tracer_provider=provider)
    try:
        async with running(bot, telegram):
            request = await asking(telegram, "DELETE /tmp/x")
            telegram.press_button(ALICE, request, "Allow")
            await telegram.wait_for_messages(ALICE, 2)
            await asyncio.sleep(0.3)  # the resumed turn's span ends after its reply
    finally:
        tracing.reset()
    spans = {span.name: span for span in exporter.get_finished_spans()}
    asked, decided = spans["approval request"], spans["approval decision"]
    assert [e.name for e in asked.events] == ["approval requested"]
    assert dict(asked.attributes or {})["botkit.approval.tools"] == ("delete_file",)
    assert asked.parent is not None, "inside the turn that made the call"
    [event] = decided.events
    assert event.name == "approval decided"
    assert dict(event.attributes or {}) == {"botkit.approval.decision": "allowed"}
    resumed = spans["approval resume"]
    assert resumed.context is not None
    ran = spans["execute_tool delete_file"]
    assert ran.parent is not None and ran.parent.span_id == resumed.context.span_id, (
        "the allowed call runs in the resumed turn's span"
    )
