"""End to end: ``python -m botkit`` as a process, the real aiogram and anthropic clients,
both talking to the loopback fakes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import orjson
import pytest

from botkit.testing.anthropic import FakeAnthropicServer, FakeReply, FakeRequest
from botkit.testing.telegram import FakeTelegramServer

ALICE, BOB, MALLORY = 1001, 1002, 1003


def scripted_model(request: FakeRequest) -> FakeReply:
    """Asks for the clock when the user asks the time; otherwise echoes."""
    results = request.tool_results()
    if results:
        return FakeReply.text(f"The clock says: {results[0]['content']}")
    text = request.last_user_text()
    if "time" in text:
        return FakeReply.tool_use("current_time", {"timezone": "UTC"})
    return FakeReply.text(f"echo: {text}")


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer(responder=scripted_model, latency=0.3) as server:
        yield server


class BotProcess:
    """``python -m botkit`` running against the fakes."""

    def __init__(self, telegram: FakeTelegramServer, claude: FakeAnthropicServer, home: Path):
        self.home = home
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))},
            "TELEGRAM_BOT_TOKEN": telegram.token,
            "TELEGRAM_API_BASE": telegram.base_url,
            "ANTHROPIC_API_KEY": "test-key",
            "ANTHROPIC_BASE_URL": claude.base_url,
            "BOTKIT_SESSIONS_DIR": str(home / "sessions"),
            "BOTKIT_ALLOWED_USERS": f"{ALICE},{BOB}",
            "BOTKIT_POLL_TIMEOUT": "5",
        }
        self.process: subprocess.Popen[bytes] | None = None
        self.stderr = b""

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "botkit"],
            cwd=self.home,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    async def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        _, err = await asyncio.to_thread(self.process.communicate, timeout=30)
        self.stderr += err
        return self.process.returncode

    async def kill(self) -> None:
        """SIGKILL: no goodbye, no cleanup."""
        assert self.process is not None
        self.process.kill()
        _, err = await asyncio.to_thread(self.process.communicate, timeout=30)
        self.stderr += err

    def session(self, user_id: int) -> list[dict[str, object]]:
        path = self.home / "sessions" / f"{user_id}.jsonl"
        return [orjson.loads(line) for line in path.read_bytes().splitlines()]


@pytest.fixture
async def bot_process(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> AsyncIterator[BotProcess]:
    bot = BotProcess(telegram, claude, tmp_path)
    bot.start()
    yield bot
    if bot.process is not None and bot.process.poll() is None:
        await bot.kill()


async def until(condition: Callable[[], bool]) -> None:
    """Wait until ``condition()`` holds (checked every 50 ms), or fail after 30 s."""
    async with asyncio.timeout(30):
        while True:
            if condition():
                return
            await asyncio.sleep(0.05)


def texts_from(claude: FakeAnthropicServer, user_text: str) -> Callable[[], int]:
    return lambda: sum(1 for r in claude.requests if user_text in orjson.dumps(r.body).decode())


async def test_two_users_at_once_with_a_tool_and_a_stranger(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, bot_process: BotProcess
) -> None:
    alice_update = telegram.send_text(ALICE, "what time is it?")
    bob_update = telegram.send_text(BOB, "hello there")
    telegram.send_text(MALLORY, "let me in")

    alice, bob, mallory = await asyncio.gather(
        telegram.wait_for_messages(ALICE, timeout=30),
        telegram.wait_for_messages(BOB, timeout=30),
        telegram.wait_for_messages(MALLORY, timeout=30),
    )
    assert alice[0].text.startswith("The clock says: ")
    assert "UTC" in alice[0].text, "the tool's real result reached the model and the user"
    assert bob[0].text == "echo: hello there"
    assert mallory[0].text == "Sorry, this bot is private."

    assert len(claude.requests) == 3, "two calls for Alice's tool turn, one for Bob"
    assert texts_from(claude, "let me in")() == 0, "the stranger cost no LLM request"
    assert await bot_process.stop() == 0

    alice_log = bot_process.session(ALICE)
    assert [(e["role"], [b["type"] for b in e["content"]]) for e in alice_log] == [
        ("user", ["text", "text"]),  # the local time's note, then the words
        ("assistant", ["thinking", "tool_use"]),  # today's models think first, unasked
        ("user", ["tool_result"]),
        ("assistant", ["thinking", "text"]),
    ]
    assert alice_log[1]["content"][0]["signature"], "the thinking block is kept as it came"
    assert alice_log[0]["update_id"] == alice_update
    assert all(e["user_id"] == ALICE for e in alice_log)
    assert sum(alice_log[1]["usage"].values()) > 0
    bob_log = bot_process.session(BOB)
    assert [e["role"] for e in bob_log] == ["user", "assistant"]
    assert bob_log[0]["update_id"] == bob_update
    assert bob_log[1]["content"][-1] == {"type": "text", "text": "echo: hello there"}
    assert not (bot_process.home / "sessions" / f"{MALLORY}.jsonl").exists()
    assert telegram.token.encode() not in bot_process.stderr, "the token never reaches a log"


async def test_conversation_continues_after_a_restart(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, bot_process: BotProcess
) -> None:
    telegram.send_text(BOB, "my name is Bob")
    await telegram.wait_for_messages(BOB, 1, timeout=30)
    assert await bot_process.stop() == 0

    bot_process.start()
    telegram.send_text(BOB, "what is my name?")
    replies = await telegram.wait_for_messages(BOB, 2, timeout=30)
    assert replies[1].text == "echo: what is my name?"
    assert len(replies) == 2, "the first message was not answered again"

    replayed = claude.requests[-1].messages
    assert [m["role"] for m in replayed] == ["user", "assistant", "user"]
    assert "my name is Bob" in orjson.dumps(replayed[0]).decode()
    assert await bot_process.stop() == 0


async def test_no_message_is_lost_or_answered_twice_across_a_sigkill(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, bot_process: BotProcess
) -> None:
    users = list(range(2001, 2011))
    stalled: set[str] = set()

    async def model(request: FakeRequest) -> FakeReply:
        text = request.last_user_text()
        if text.endswith("message 1") and text not in stalled:
            stalled.add(text)
            await asyncio.sleep(30)  # the first process dies while waiting here
        return FakeReply.text(f"echo: {text}")

    claude.responder = model
    bot_process.env["BOTKIT_ALLOWED_USERS"] = ",".join(map(str, users))
    await bot_process.stop()
    bot_process.start()
    for n in range(3):
        for user in users:
            telegram.send_text(user, f"{user} message {n}")
    for user in users:
        await telegram.wait_for_messages(user, 1, timeout=30)
    await until(lambda: len(stalled) == len(users))  # every second turn is inside its LLM call
    await bot_process.kill()
    for user in users:  # these arrive while the bot is down
        telegram.send_text(user, f"{user} message 3")

    bot_process.start()
    for user in users:
        replies = await telegram.wait_for_messages(user, 4, timeout=60)
        expected = [f"echo: {user} message {n}" for n in range(4)]
        assert [r.text for r in replies] == expected, "each message once, in order"
    await asyncio.sleep(1.0)  # give a duplicate time to show up
    assert sum(len(telegram.sent_messages(user)) for user in users) == 40
    assert await bot_process.stop() == 0


async def test_sigterm_lets_running_turns_finish(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, bot_process: BotProcess
) -> None:
    claude.latency = 2.0
    telegram.send_text(ALICE, "slow question")
    await until(lambda: bool(claude.requests))
    assert await bot_process.stop() == 0
    replies = telegram.sent_messages(ALICE)
    assert [r.text for r in replies] == ["echo: slow question"], "answered before exiting"


async def test_a_second_signal_stops_at_once(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, bot_process: BotProcess
) -> None:
    claude.latency = 30.0
    telegram.send_text(ALICE, "very slow question")
    await until(lambda: bool(claude.requests))
    assert bot_process.process is not None
    bot_process.process.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.5)
    bot_process.process.send_signal(signal.SIGTERM)
    _, err = await asyncio.to_thread(bot_process.process.communicate, timeout=10)
    bot_process.stderr += err
    assert bot_process.process.returncode == 0
    assert telegram.sent_messages(ALICE) == []


ADMIN = 1009


def log_lines(stderr: bytes) -> list[dict[str, object]]:
    """The JSON log lines of a run (stderr is not a terminal, so every line is JSON)."""
    return [orjson.loads(line) for line in stderr.splitlines() if line.startswith(b"{")]


async def test_a_rejected_key_stops_the_start_with_one_sentence_and_no_polling(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    claude.api_key = "the-right-key"
    bot = BotProcess(telegram, claude, tmp_path)
    bot.start()
    assert bot.process is not None
    _, err = await asyncio.to_thread(bot.process.communicate, timeout=60)
    assert bot.process.returncode == 2
    assert err.decode().strip().splitlines() == [
        "botkit: Anthropic rejected ANTHROPIC_API_KEY (invalid x-api-key): set a valid key "
        "from console.anthropic.com."
    ]
    assert telegram.requests_for("getMe"), "the token was checked too"
    assert not telegram.requests_for("getUpdates"), "no update was taken"
    assert len(claude.count_token_requests) == 1 and not claude.requests, "no token was spent"


async def test_a_key_revoked_while_running_is_one_error_line_and_one_admin_message(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, bot_process: BotProcess
) -> None:
    bot_process.env["BOTKIT_ADMINS"] = str(ADMIN)
    await bot_process.stop()
    bot_process.start()
    telegram.send_text(ALICE, "before")
    assert (await telegram.wait_for_messages(ALICE, timeout=30))[0].text == "echo: before"
    claude.api_key = "rotated-key"  # the bot's key is revoked
    for n in range(3):
        telegram.send_text(ALICE, f"after {n}")
        await telegram.wait_for_messages(ALICE, 2 + n)
    telegram.send_text(BOB, "me too")
    await telegram.wait_for_messages(BOB)
    told = await telegram.wait_for_messages(ADMIN)
    assert await bot_process.stop() == 0
    assert len(claude.requests) == 5, "every turn tried; none was retried by the SDK"
    assert [m.text for m in telegram.sent_messages(ADMIN)] == [told[0].text]
    assert "ANTHROPIC_API_KEY" in told[0].text
    failures = [e for e in log_lines(bot_process.stderr) if e.get("event") == "llm.auth_failed"]
    assert len(failures) == 1, "four failed turns, one error line"
    assert failures[0]["level"] == "error"
    assert b"test-key" not in bot_process.stderr


async def test_users_are_told_unavailable_and_errors_are_not_repeated_when_the_key_is_revoked(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, bot_process: BotProcess
) -> None:
    telegram.send_text(ALICE, "before")
    await telegram.wait_for_messages(ALICE, timeout=30)  # the process may still be starting
    claude.api_key = "rotated-key"
    for n in range(3):
        telegram.send_text(ALICE, f"after {n}")
        await telegram.wait_for_messages(ALICE, 2 + n)
    assert await bot_process.stop() == 0
    overloaded = "I'm overloaded right now and couldn't answer. Please try again in a minute."
    assert [m.text for m in telegram.sent_messages(ALICE)[1:]] == [overloaded] * 3
    errors = [e for e in log_lines(bot_process.stderr) if e.get("level") == "error"]
    assert [e["event"] for e in errors] == ["llm.auth_failed"]
