"""``python -m botkit console``: tool calls and their results, MCP tools, /commands, views."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from rich.console import Console

from botkit.runtime.console import PlainView, RichView, tool_line
from botkit.testing.anthropic import FakeAnthropicServer, FakeReply, FakeRequest
from botkit.types import ToolResultBlock, ToolUseBlock

KEY = "sk-ant-console-key"
MCP_SERVER = Path(__file__).with_name("mcp_server_example.py")


def scripted_model(request: FakeRequest) -> FakeReply:
    """Asks for the clock, the MCP adder or the failing MCP tool, then reports the result."""
    results = request.tool_results()
    if results:
        return FakeReply.text(f"The tool said: {results[0]['content']}")
    text = request.last_user_text()
    if "time" in text:
        return FakeReply.tool_use("current_time", {"timezone": "UTC"}, text="Let me look.")
    if "add" in text:
        return FakeReply.tool_use("example__add", {"a": 2, "b": 40})
    if "fail" in text:
        return FakeReply.tool_use("example__fail", {"reason": "just because"})
    return FakeReply.text(f"echo: {text}")


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer(responder=scripted_model, api_key=KEY) as server:
        yield server


async def run_console(
    home: Path, claude: FakeAnthropicServer, lines: list[str], *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """``python -m botkit console`` with ``lines`` on stdin and a pipe as stdout."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))}
    clean = {k: v for k, v in clean.items() if not k.startswith("BOTKIT_")}
    config = {"mcpServers": {"example": {"command": sys.executable, "args": [str(MCP_SERVER)]}}}
    clean.update(
        ANTHROPIC_API_KEY=KEY,
        ANTHROPIC_BASE_URL=claude.base_url,
        BOTKIT_MODEL="claude-sonnet-5-5",
        BOTKIT_SESSIONS_DIR=str(home / "sessions"),
        BOTKIT_MCP_CONFIG=orjson.dumps(config).decode(),
    )
    clean.update(env)
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "botkit", "console", *args],
        cwd=home,
        env=clean,
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_console_shows_each_tool_call_with_its_result(
    claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    result = await run_console(tmp_path, claude, ["what time is it?", "add them", "/model"])
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    clock = out.index("bot> Let me look.") + 1
    assert out[clock].startswith('tool> current_time(timezone="UTC") → '), result.stdout
    assert "UTC" in out[clock].split("→")[1]
    assert out[clock + 1].startswith("bot> The tool said: "), "no blank bot> line in between"
    assert sum(line.startswith("bot> The tool said: ") for line in out) == 2, "none repeated"
    assert "tool> example__add(a=2, b=40) → 42" in out, "the MCP server's tool, as when serving"
    assert "bot> The tool said: 42" in out
    assert "bot> Model: claude-sonnet-5-5" in out, "/commands work as in Telegram"
    assert "example__add" in claude.requests[0].tool_names
    assert not any("\x1b[" in line for line in out), "plain by default when stdout is a pipe"


async def test_console_shows_a_failing_tool_as_an_error(
    claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    result = await run_console(tmp_path, claude, ["please fail"], "--plain")
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("tool> ")]
    assert line.startswith('tool> example__fail(reason="just because") → error: ')
    assert line.endswith("failed on purpose: just because")


async def test_console_with_a_wrong_key_stops_with_one_sentence(
    claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    result = await run_console(tmp_path, claude, ["hello"], ANTHROPIC_API_KEY="sk-ant-wrong")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "botkit: Anthropic rejected ANTHROPIC_API_KEY (invalid x-api-key): set a valid key "
        "from console.anthropic.com."
    ]
    assert not claude.requests, "no turn was attempted"


def test_tool_line_cuts_long_arguments_and_results_to_one_line() -> None:
    call = ToolUseBlock(id="t1", name="search", input={"query": "x" * 500})
    result = ToolResultBlock(tool_use_id="t1", content="line one\nline two " + "y" * 500)
    line = tool_line(call, result)
    assert "\n" not in line
    assert line.startswith('search(query="xxx') and line.endswith("…")
    assert "line one line two" in line
    assert len(line) < 400


def test_plain_view_ends_a_streamed_line_before_a_tool_line() -> None:
    out = io.StringIO()
    view = PlainView(out)
    view.text("Let me ")
    view.text("check.")
    call = ToolUseBlock(id="t1", name="roll_dice", input={"sides": 6})
    view.tool(call, ToolResultBlock(tool_use_id="t1", content="[4]"))
    view.text("You rolled 4.")
    view.end_text()
    assert out.getvalue().splitlines() == [
        "bot> Let me check.",
        "tool> roll_dice(sides=6) → [4]",
        "bot> You rolled 4.",
    ]


def test_rich_view_renders_markdown_and_colours_tools_and_errors() -> None:
    screen = io.StringIO()
    view = RichView(Console(file=screen, force_terminal=True, color_system="standard", width=80))
    for delta in ["# Plan\n\n", "- **first** step\n", "- second step\n"]:
        view.text(delta)
    view.end_text()
    call = ToolUseBlock(id="t1", name="roll_dice", input={"sides": 6})
    view.tool(call, ToolResultBlock(tool_use_id="t1", content="[4]"))
    view.tool(call, ToolResultBlock(tool_use_id="t1", content="no dice", is_error=True))
    view.reply("Sorry, something went wrong on my side.", error=True)
    text = screen.getvalue()
    assert "# Plan" not in text and "**first**" not in text, "Markdown is rendered, not shown"
    assert "Plan" in text and "• " in text
    assert "\x1b[2m⚙ roll_dice(sides=6) → [4]" in text, "a tool call is one dim line"
    assert "\x1b[31m⚙ roll_dice(sides=6) → error: no dice" in text, "a failed tool is red"
    assert "\x1b[31mSorry, something went wrong on my side." in text
