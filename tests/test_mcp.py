"""Tools of MCP servers through the ToolRegistry: stdio and streamable HTTP, failures, config.

The server is ``tests/mcp_server_example.py``, run as a subprocess of the test.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import mcp.types as mcp_types
import pytest
from structlog.testing import capture_logs

from botkit import AgentLoop, ContextManager, Message, ToolContext, ToolRegistry, errors
from botkit.errors import ConfigError
from botkit.testing import fake_llm
from botkit.testing.anthropic import FakeAnthropicServer, FakeReply
from botkit.tools.mcp import (
    MCPConnectError,
    MCPConnection,
    MCPServerConfig,
    _result_text,
    _tool_name,
    connect_mcp,
    parse_mcp_config,
)
from botkit.types import ToolResultBlock, ToolUseBlock

EXAMPLE = Path(__file__).with_name("mcp_server_example.py")
EXAMPLE_TOOLS = ["add", "shout", "fail", "pid", "sleep", "header"]
CTX = ToolContext(user_id=1, chat_id=1, timestamp=datetime(2024, 1, 1, tzinfo=UTC))
ANTHROPIC_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
STARTUP_DEADLINE = 20.0


def stdio_config(name: str = "example", **options: float) -> MCPServerConfig:
    """The example server, run over stdio by this Python."""
    return MCPServerConfig(name=name, command=sys.executable, args=[str(EXAMPLE)], **options)


def python_config(name: str, code: str, **options: float) -> MCPServerConfig:
    """A "server" that runs ``code`` and never speaks MCP."""
    return MCPServerConfig(name=name, command=sys.executable, args=["-c", code], **options)


async def call(registry: ToolRegistry, tool: str, /, **args: object) -> ToolResultBlock:
    """Run one tool call the way the agent loop does."""
    return await registry.execute(ToolUseBlock(id="toolu_1", name=tool, input=args), CTX)


# ---- stdio ------------------------------------------------------------------------------


async def test_stdio_tools_reach_the_registry_namespaced_and_run() -> None:
    async with connect_mcp([stdio_config()]) as tools:
        registry = ToolRegistry(tools)
        assert registry.names == [f"example__{name}" for name in EXAMPLE_TOOLS]
        add = registry.definitions()[0]
        assert add.description == "Add two integers."
        assert add.input_schema["type"] == "object"
        assert add.input_schema["required"] == ["a", "b"]
        assert {k: v["type"] for k, v in add.input_schema["properties"].items()} == {
            "a": "integer",
            "b": "integer",
        }

        assert await call(registry, "example__add", a=2, b=3) == ToolResultBlock(
            tool_use_id="toolu_1", content="5"
        )
        assert (await call(registry, "example__shout", text="hey")).content == "HEY!"
        assert (await call(registry, "example__header", name="x-anything")).content == "(none)"

        failed = await call(registry, "example__fail", reason="no luck")
        assert failed.is_error
        assert "failed on purpose: no luck" in failed.content

        invalid = await call(registry, "example__add", a="many")
        assert invalid.is_error
        assert "validation error" in invalid.content

        calls = [
            ToolUseBlock(id=f"toolu_{n}", name="example__add", input={"a": n, "b": n})
            for n in range(1, 4)
        ]
        results = await registry.execute_all(calls, CTX)
        assert [(r.tool_use_id, r.content) for r in results] == [
            ("toolu_1", "2"),
            ("toolu_2", "4"),
            ("toolu_3", "6"),
        ]

    after_close = await call(registry, "example__add", a=1, b=1)
    assert after_close.is_error
    assert after_close.content == "MCP server 'example' is not connected"


async def test_a_killed_stdio_server_is_an_error_result_then_restarted() -> None:
    async with MCPConnection(stdio_config()) as connection:
        registry = ToolRegistry(connection.tools())
        first_pid = int((await call(registry, "example__pid")).content)
        os.kill(first_pid, signal.SIGKILL)

        with capture_logs() as logs:
            died = await call(registry, "example__add", a=1, b=2)
        assert died.is_error
        assert died.content.startswith("MCP server 'example' ")
        assert died.content.endswith("; it is reconnected on the next call")
        assert not connection.connected
        assert any(e["event"] == "mcp.connection_lost" for e in logs)

        assert (await call(registry, "example__add", a=1, b=2)).content == "3"
        assert connection.connected
        assert int((await call(registry, "example__pid")).content) != first_pid
    assert not connection.connected


async def test_a_connection_opened_and_closed_in_other_tasks_survives_a_timeout() -> None:
    connection = MCPConnection(stdio_config(timeout=1.0))
    await asyncio.create_task(connection.connect())
    registry = ToolRegistry(connection.tools())

    slow = await call(registry, "example__sleep", seconds=30)
    assert slow.is_error
    assert slow.content == "Tool example__sleep timed out after 1 s"
    assert (await asyncio.create_task(call(registry, "example__add", a=4, b=5))).content == "9"
    assert connection.connected

    await asyncio.create_task(connection.close())
    assert not connection.connected
    await connection.close()  # again: harmless


async def test_servers_that_fail_to_start_are_logged_and_skipped() -> None:
    configs = [
        MCPServerConfig(name="missing", command="/nonexistent/botkit-mcp-server"),
        python_config("silent", "import sys; sys.stdin.read()", startup_timeout=0.5),
        python_config("quitter", "pass"),
        stdio_config(),
    ]
    with capture_logs() as logs:
        async with connect_mcp(configs) as tools:
            assert [t.name for t in tools] == [f"example__{name}" for name in EXAMPLE_TOOLS]
    failed = {e["server"]: e["error"] for e in logs if e["event"] == "mcp.connect_failed"}
    assert set(failed) == {"missing", "silent", "quitter"}
    assert "could not be started: FileNotFoundError" in failed["missing"]
    assert "did not start within 0.5 s" in failed["silent"]
    assert "could not be started" in failed["quitter"]


async def test_connect_raises_a_clear_error_for_a_server_that_does_not_start() -> None:
    connection = MCPConnection(python_config("quitter", "pass"))
    with pytest.raises(MCPConnectError, match="MCP server 'quitter' could not be started"):
        await connection.connect()
    with pytest.raises(RuntimeError, match="not connected"):
        connection.tools()


async def test_a_server_that_does_not_start_raises_the_error_from_botkit_errors() -> None:
    connection = MCPConnection(python_config("quitter", "pass"))
    with pytest.raises(errors.MCPConnectError) as raised:
        await connection.connect()
    assert isinstance(raised.value, errors.BotkitError)
    assert MCPConnectError is errors.MCPConnectError  # the old import keeps working


async def test_duplicate_server_names_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unique: twin"):
        async with connect_mcp([stdio_config("twin"), stdio_config("twin")]):
            pass  # pragma: no cover


# ---- streamable HTTP --------------------------------------------------------------------


@dataclass
class HttpServer:
    url: str
    process: subprocess.Popen[bytes]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_for_port(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Poll until the server accepts connections; fail with its log if it dies or is slow."""
    deadline = time.monotonic() + STARTUP_DEADLINE
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the MCP server exited early:\n{log.read_text(errors='replace')}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"the MCP server did not listen within {STARTUP_DEADLINE:g} s")


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[HttpServer]:
    """The example server over streamable HTTP on a free loopback port."""
    port = _free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--http", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_for_port(process, port, log)
            yield HttpServer(url=f"http://127.0.0.1:{port}/mcp", process=process)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                process.kill()
                process.wait()


async def test_http_tools_run_with_headers_and_survive_the_server_dying(
    http_server: HttpServer,
) -> None:
    config = MCPServerConfig(
        name="web", url=http_server.url, headers={"X-Botkit-Test": "open sesame"}
    )
    async with connect_mcp([config]) as tools:
        registry = ToolRegistry(tools)
        assert registry.names == [f"web__{name}" for name in EXAMPLE_TOOLS]
        shout = registry.get("web__shout")
        assert shout is not None
        assert shout.definition.input_schema["properties"]["text"]["type"] == "string"

        assert (await call(registry, "web__add", a=20, b=22)).content == "42"
        assert (await call(registry, "web__header", name="X-Botkit-Test")).content == "open sesame"
        failed = await call(registry, "web__fail")
        assert failed.is_error and "failed on purpose: it went wrong" in failed.content

        http_server.process.kill()
        http_server.process.wait()
        died = await call(registry, "web__add", a=1, b=1)
        assert died.is_error
        assert died.content.startswith("MCP server 'web' ")
        assert died.content.endswith("; it is reconnected on the next call")

        still_dead = await call(registry, "web__add", a=1, b=1)
        assert still_dead.is_error
        assert "MCP server 'web' could not be reached" in still_dead.content
        assert "try again later" in still_dead.content


# ---- through the agent loop -------------------------------------------------------------


async def test_the_model_calls_an_mcp_tool_through_the_agent_loop() -> None:
    async with FakeAnthropicServer() as claude, connect_mcp([stdio_config()]) as tools:
        llm = fake_llm(claude)
        try:
            claude.enqueue(
                FakeReply.tool_use("example__add", {"a": 20, "b": 22}), FakeReply.text("It is 42.")
            )
            context = ContextManager(1)
            await context.append(Message.user_text("What is 20 + 22?"))
            result = await AgentLoop(llm).run(
                context, system="sys", tools=ToolRegistry(tools), tool_context=CTX
            )
        finally:
            await llm.close()
    assert result.text == "It is 42."
    offered = {t["name"]: t for t in claude.requests[0].tools}
    assert set(offered) == {f"example__{name}" for name in EXAMPLE_TOOLS}
    assert offered["example__add"]["input_schema"]["required"] == ["a", "b"]
    answer = claude.requests[1].tool_results()[0]
    assert answer["content"] == "42"
    assert not answer.get("is_error")


# ---- names and results ------------------------------------------------------------------


def test_tool_names_are_sanitised_cut_and_unique() -> None:
    taken: set[str] = set()
    names = [
        _tool_name("srv", "get.weather/now", taken),
        _tool_name("srv", "get_weather_now", taken),
        _tool_name("srv", "x" * 100, taken),
        _tool_name("srv", "x" * 101, taken),
        _tool_name("srv", "ünïcode tool", taken),
    ]
    assert names[0] == "srv__get_weather_now"
    assert names[1] == "srv__get_weather_now_2"
    assert names[2] == "srv__" + "x" * 59
    assert names[3] == "srv__" + "x" * 57 + "_2"
    assert names[4] == "srv___n_code_tool"
    assert len(set(names)) == len(names)
    assert all(ANTHROPIC_NAME.fullmatch(n) for n in names)


def test_result_content_becomes_text_with_other_parts_summarised() -> None:
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(text="first"),
            mcp_types.ImageContent(data="", mime_type="image/png"),
            mcp_types.AudioContent(data="", mime_type="audio/wav"),
            mcp_types.ResourceLink(uri="file:///notes.md", name="notes"),
            mcp_types.EmbeddedResource(
                resource=mcp_types.TextResourceContents(uri="file:///a.txt", text="inside")
            ),
            mcp_types.EmbeddedResource(
                resource=mcp_types.BlobResourceContents(
                    uri="file:///b.pdf", blob="", mime_type="application/pdf"
                )
            ),
        ]
    )
    assert _result_text(result) == (
        "first\n[image image/png]\n[audio audio/wav]\n[resource file:///notes.md]\n"
        "inside\n[resource file:///b.pdf application/pdf]"
    )
    structured = mcp_types.CallToolResult(content=[], structured_content={"n": 1})
    assert _result_text(structured) == '{"n":1}'
    assert _result_text(mcp_types.CallToolResult(content=[])) is None


# ---- configuration ----------------------------------------------------------------------

GOOD_CONFIG = """
{
  "mcpServers": {
    "files": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "${BOTKIT_TEST_DIR}"],
      "env": {"LOG": "${BOTKIT_TEST_UNSET:-quiet}"},
      "autoApprove": ["read_file"]
    },
    "search": {
      "type": "http",
      "url": "https://mcp.example.com/mcp",
      "headers": {"Authorization": "Bearer ${BOTKIT_TEST_TOKEN}"},
      "timeout": 15
    },
    "old": {"command": "old-server", "disabled": true}
  }
}
"""


def test_config_in_the_common_mcp_servers_shape_is_parsed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("BOTKIT_TEST_DIR", "/srv/files")
    monkeypatch.setenv("BOTKIT_TEST_TOKEN", "s3cret")
    monkeypatch.delenv("BOTKIT_TEST_UNSET", raising=False)
    files, search = parse_mcp_config(GOOD_CONFIG)
    assert files == MCPServerConfig(
        name="files",
        command="npx",
        args=["-y", "@modelcontextprotocol/server-filesystem", "/srv/files"],
        env={"LOG": "quiet"},
    )
    assert files.transport == "stdio"
    assert search == MCPServerConfig(
        name="search",
        url="https://mcp.example.com/mcp",
        headers={"Authorization": "Bearer s3cret"},
        timeout=15,
    )
    assert search.transport == "http"
    assert "s3cret" not in repr(search)

    path = tmp_path / "mcp.json"
    path.write_text(GOOD_CONFIG)
    assert parse_mcp_config(path) == parse_mcp_config(str(path)) == [files, search]
    assert parse_mcp_config('{"mcpServers": {}}') == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", r"not valid JSON: .* \(line 1, column 2\)"),
        ("[]", "expected an object like"),
        ('{"servers": 1}', 'expected an object "mcpServers"'),
        ('{"mcpServers": {"x": "npx"}}', "server 'x': expected an object"),
        ('{"mcpServers": {"Big Name": {"command": "x"}}}', "server name 'Big Name' must be"),
        ('{"mcpServers": {"a__b": {"command": "x"}}}', "without '__'"),
        ('{"mcpServers": {"x": {}}}', "give either 'command'"),
        ('{"mcpServers": {"x": {"command": "c", "url": "http://h"}}}', "give either 'command'"),
        ('{"mcpServers": {"x": {"url": "ftp://h"}}}', "must start with http"),
        ('{"mcpServers": {"x": {"url": "http://h", "args": ["a"]}}}', "only apply to a stdio"),
        ('{"mcpServers": {"x": {"command": "c", "headers": {"a": "b"}}}}', "only apply to an HTTP"),
        ('{"mcpServers": {"x": {"command": "c", "args": "a b"}}}', "args: Input should be"),
        ('{"mcpServers": {"x": {"command": "c", "timeout": 0}}}', "timeout: Input should be"),
        ('{"mcpServers": {"x": {"type": "sse", "url": "http://h"}}}', "SSE transport"),
        ('{"mcpServers": {"x": {"type": "ws", "url": "ws://h"}}}', "unknown type 'ws'"),
        ('{"mcpServers": {"x": {"type": "stdio", "url": "http://h"}}}', "needs 'command'"),
        ('{"mcpServers": {"x": {"type": "http", "command": "c"}}}', "needs 'url'"),
        (
            '{"mcpServers": {"x": {"command": "c", "args": ["${BOTKIT_TEST_UNSET}"]}}}',
            "environment variable BOTKIT_TEST_UNSET is not set",
        ),
    ],
)
def test_bad_config_is_a_clear_config_error(
    text: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BOTKIT_TEST_UNSET", raising=False)
    with pytest.raises(ConfigError, match=message) as raised:
        parse_mcp_config(text)
    assert str(raised.value).startswith("MCP config (inline JSON)")


def test_missing_or_unreadable_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        parse_mcp_config(tmp_path / "absent.json")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(ConfigError, match="cannot read it"):
        parse_mcp_config(str(tmp_path / "binary.json"))
