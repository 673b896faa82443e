"""Tools from MCP servers: connect over stdio or streamable HTTP and offer their tools, namespaced.

Each server runs behind an :class:`MCPConnection`; every tool it lists becomes an
:class:`MCPTool` called ``<server>__<tool>`` for a :class:`~botkit.tools.ToolRegistry`::

    async with connect_mcp(parse_mcp_config("mcp.json")) as tools:
        registry = ToolRegistry([*my_tools, *tools])
        ...

The configuration is the ``{"mcpServers": {...}}`` JSON that other MCP clients read. A
connection's client runs in a task of its own, so it may be opened and closed from any task;
a server that dies is started again on the next call of one of its tools.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from fnmatch import fnmatchcase
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import anyio
import httpx2
import mcp.types as mcp_types
import orjson
import structlog
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from botkit.errors import ConfigError, MCPConnectError, ToolError
from botkit.tools.base import Tool, ToolContext
from botkit.types import ToolDef

__all__ = [
    "MCPConnectError",
    "MCPConnection",
    "MCPServerConfig",
    "MCPTool",
    "connect_mcp",
    "parse_mcp_config",
]

log = structlog.get_logger(__name__)

_SERVER_NAME = re.compile(r"^[a-z0-9_-]{1,32}$")
"""What a server name (the tools' namespace) may look like."""
_MAX_TOOL_NAME = 64
"""Anthropic tool names are at most this long."""
_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_HTTP_TYPES = frozenset({"http", "streamable-http", "streamable_http", "streamableHttp"})
_CONFIG_KEYS = (
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "timeout",
    "startup_timeout",
    "approval",
)
_MAX_TOOL_PAGES = 100
_TRANSPORT_ERRORS = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
    httpx2.TransportError,
    OSError,
)
_HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


class MCPServerConfig(BaseModel):
    """One MCP server: a command to run (stdio) or a URL (streamable HTTP)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """The namespace of the server's tools: lower-case letters, digits, ``_`` and ``-``."""
    command: str | None = None
    """The executable that runs a stdio server."""
    args: list[str] = Field(default_factory=list)
    """Arguments of ``command``."""
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    """Extra environment of a stdio server (it inherits only PATH, HOME and a few more)."""
    cwd: Path | None = None
    """The working directory of a stdio server."""
    url: str | None = None
    """The endpoint of a streamable HTTP server, e.g. ``https://example.com/mcp``."""
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    """HTTP headers sent to ``url``, e.g. ``Authorization``."""
    timeout: float = Field(60.0, gt=0)
    """Seconds one tool call may take before the model is told it timed out."""
    startup_timeout: float = Field(30.0, gt=0)
    """Seconds the server may take to start and list its tools."""
    approval: list[str] = Field(default_factory=list)
    """Name patterns (``fnmatch``: ``delete_*``) of the server's tools whose calls wait for a
    person's Allow; matched against the server's name of the tool and ``<server>__<tool>``."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        if not _SERVER_NAME.fullmatch(self.name) or "__" in self.name:
            raise ValueError(
                f"server name {self.name!r} must be 1-32 characters of a-z, 0-9, '_' and '-', "
                "without '__'"
            )
        if (self.command is None) == (self.url is None):
            raise ValueError("give either 'command' (a stdio server) or 'url' (an HTTP server)")
        if self.command is not None and self.headers:
            raise ValueError("'headers' only apply to an HTTP server ('url')")
        if self.url is not None:
            if self.args or self.env or self.cwd is not None:
                raise ValueError("'args', 'env' and 'cwd' only apply to a stdio server ('command')")
            if not self.url.startswith(("http://", "https://")):
                raise ValueError(f"url {self.url!r} must start with http:// or https://")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        """``stdio`` for a command, ``http`` for a URL."""
        return "stdio" if self.command is not None else "http"


# ---- configuration files ----------------------------------------------------------------


def parse_mcp_config(source: str | os.PathLike[str]) -> list[MCPServerConfig]:
    """Servers from ``{"mcpServers": {...}}`` JSON, given as text or as a file path.

    Each entry is ``{"command": ..., "args": [...], "env": {...}}`` or ``{"url": ...,
    "headers": {...}}``, optionally with ``timeout`` (seconds per call) and ``approval``
    (patterns of the tools a person must allow, e.g. ``["delete_*"]``). ``${VAR}`` and
    ``${VAR:-default}`` in strings are taken from the environment; entries with
    ``"disabled": true`` are skipped and keys other clients use are ignored. A bad file
    raises :class:`~botkit.errors.ConfigError`.
    """
    text, where = _read_source(source)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"MCP config {where}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f'MCP config {where}: expected an object like {{"mcpServers": {{...}}}}')
    servers = data.get("mcpServers", data.get("servers"))
    if not isinstance(servers, dict):
        raise ConfigError(
            f'MCP config {where}: expected an object "mcpServers" mapping names to servers'
        )
    configs = []
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"MCP config {where}: server {name!r}: expected an object")
        if entry.get("disabled") is True:
            log.info("mcp.server_disabled", server=name)
            continue
        configs.append(_server_config(name, entry, where))
    return configs


def _read_source(source: str | os.PathLike[str]) -> tuple[str, str]:
    """The JSON text of ``source`` and how to name it in messages."""
    if isinstance(source, str) and source.lstrip().startswith(("{", "[")):
        return source, "(inline JSON)"
    path = Path(source).expanduser()
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except FileNotFoundError:
        raise ConfigError(f"MCP config {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"MCP config {path}: cannot read it: {e}") from None


def _server_config(name: str, entry: dict[str, Any], where: str) -> MCPServerConfig:
    """One ``mcpServers`` entry as a config, or a ConfigError naming the server."""
    prefix = f"MCP config {where}: server {name!r}"
    kind = entry.get("type", entry.get("transport"))
    if kind == "sse":
        raise ConfigError(f"{prefix}: the SSE transport is not supported, use streamable HTTP")
    if kind is not None and kind != "stdio" and kind not in _HTTP_TYPES:
        raise ConfigError(f"{prefix}: unknown type {kind!r} (use 'stdio' or 'http')")
    fields = {key: entry[key] for key in _CONFIG_KEYS if key in entry}
    if kind == "stdio" and "url" in fields:
        raise ConfigError(f"{prefix}: type 'stdio' needs 'command', not 'url'")
    if kind in _HTTP_TYPES and "command" in fields:
        raise ConfigError(f"{prefix}: type {kind!r} needs 'url', not 'command'")
    try:
        fields = _expand(fields, prefix)
        return MCPServerConfig(name=name, **fields)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) + ': ' if err['loc'] else ''}"
            f"{err['msg'].removeprefix('Value error, ')}"
            for err in e.errors(include_url=False)
        )
        raise ConfigError(f"{prefix}: {problems}") from None


def _expand(value: Any, prefix: str) -> Any:
    """``value`` with ``${VAR}`` / ``${VAR:-default}`` in its strings replaced from os.environ."""
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            var, default = match.group(1), match.group(2)
            found = os.environ.get(var, default)
            if found is None:
                raise ConfigError(f"{prefix}: environment variable {var} is not set")
            return found

        return _ENV_REF.sub(substitute, value)
    if isinstance(value, list):
        return [_expand(item, prefix) for item in value]
    if isinstance(value, dict):
        return {key: _expand(item, prefix) for key, item in value.items()}
    return value


# ---- tools ------------------------------------------------------------------------------


class MCPTool(Tool):
    """One tool of an MCP server, offered to the model as ``<server>__<tool>``."""

    def __init__(self, connection: MCPConnection, remote: mcp_types.Tool, name: str) -> None:
        self.connection = connection
        self.remote_name = remote.name
        """The tool's name on the server."""
        self.timeout = connection.config.timeout
        self.approval = any(
            fnmatchcase(remote.name, pattern) or fnmatchcase(name, pattern)
            for pattern in connection.config.approval
        )
        schema = dict(remote.input_schema)
        schema.setdefault("type", "object")
        description = remote.description or f"Tool {remote.name} of MCP server {connection.name}."
        self._definition = ToolDef(name=name, description=description, input_schema=schema)

    @property
    def definition(self) -> ToolDef:
        """The server's description and input schema under the namespaced name."""
        return self._definition

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> str | None:
        """Call the tool on the server; its text content is the result."""
        return await self.connection.call(self.remote_name, args)

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r})"


def _tool_name(server: str, remote: str, taken: set[str]) -> str:
    """``<server>__<remote>`` made a valid Anthropic tool name not in ``taken`` (then added)."""
    base = f"{server}__{_INVALID_NAME_CHARS.sub('_', remote)}"[:_MAX_TOOL_NAME]
    name, n = base, 2
    while name in taken:
        suffix = f"_{n}"
        name = base[: _MAX_TOOL_NAME - len(suffix)] + suffix
        n += 1
    taken.add(name)
    return name


def _result_text(result: mcp_types.CallToolResult) -> str | None:
    """What the model sees of a tool result: the text parts, other content summarised."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent):
            parts.append(f"[image {block.mime_type}]")
        elif isinstance(block, mcp_types.AudioContent):
            parts.append(f"[audio {block.mime_type}]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource {block.uri}]")
        elif isinstance(block.resource, mcp_types.TextResourceContents):
            parts.append(block.resource.text)
        else:
            mime = f" {block.resource.mime_type}" if block.resource.mime_type else ""
            parts.append(f"[resource {block.resource.uri}{mime}]")
    if not parts and result.structured_content is not None:
        return orjson.dumps(result.structured_content).decode()
    return "\n".join(parts) if parts else None


# ---- connections ------------------------------------------------------------------------


class MCPConnection:
    """A client session with one MCP server, owned by a task of its own.

    ``connect`` starts the server (or reaches it) and lists its tools; ``close`` ends the
    session and stops a stdio server. Both may be called from any task, and the connection
    is an async context manager doing the two.
    """

    def __init__(self, config: MCPServerConfig) -> None:
        self.config = config
        self._client: Client | None = None
        self._task: asyncio.Task[BaseException | None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._generation = 0
        self._lost = False
        self._closed = False
        self._remote_tools: list[mcp_types.Tool] | None = None
        self._tools: list[Tool] | None = None

    @property
    def name(self) -> str:
        """The server's name, the namespace of its tools."""
        return self.config.name

    @property
    def connected(self) -> bool:
        """Whether the session is open and was not seen to break."""
        return self._client is not None and not self._lost

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "connected" if self.connected else "closed" if self._closed else "not connected"
        return f"MCPConnection({self.name!r}, {state})"

    async def connect(self) -> None:
        """Start or reach the server, initialise the session and list the tools.

        Raises :class:`MCPConnectError` when the server cannot be started or does not answer
        within ``startup_timeout``.
        """
        async with self._lock:
            if self._task is not None and not self._task.done():
                raise RuntimeError(f"MCP connection {self.name!r} is already connected")
            await self._stop_task()  # the remains of a session that ended by itself
            self._closed = False
            await self._start()
        log.info(
            "mcp.connected",
            server=self.name,
            transport=self.config.transport,
            tools=[t.name for t in self._remote_tools or ()],
        )

    async def close(self) -> None:
        """End the session (stopping a stdio server); safe to call more than once."""
        self._closed = True
        async with self._lock:
            await self._stop_task()

    def tools(self) -> list[Tool]:
        """The server's tools, named ``<server>__<tool>``, in the order the server lists them."""
        if self._tools is None:
            if self._remote_tools is None:
                raise RuntimeError(f"MCP connection {self.name!r} is not connected")
            taken: set[str] = set()
            self._tools = [
                MCPTool(self, remote, _tool_name(self.name, remote.name, taken))
                for remote in self._remote_tools
            ]
        return list(self._tools)

    async def call(self, tool: str, args: dict[str, Any]) -> str | None:
        """Call ``tool`` (its name on the server); every failure raises :class:`ToolError`."""
        client = await self._usable_client()
        generation = self._generation
        try:
            result = await client.call_tool(tool, args)
        except MCPError as e:
            if e.code != mcp_types.CONNECTION_CLOSED:
                raise ToolError(
                    f"MCP server {self.name!r} answered {tool} with an error: {e}"
                ) from e
            self._mark_lost(generation, e)
            raise ToolError(
                f"MCP server {self.name!r} closed the connection ({e}); it is reconnected on "
                "the next call"
            ) from e
        except _TRANSPORT_ERRORS as e:
            self._mark_lost(generation, e)
            raise ToolError(
                f"MCP server {self.name!r} cannot be reached ({_describe(e)}); it is "
                "reconnected on the next call"
            ) from e
        except Exception as e:
            raise ToolError(f"MCP server {self.name!r} failed to run {tool}: {_describe(e)}") from e
        text = _result_text(result)
        if result.is_error:
            raise ToolError(text or f"MCP tool {tool} failed without saying why")
        return text

    # ---- lifecycle ----------------------------------------------------------------------

    async def _usable_client(self) -> Client:
        """The open client, reconnecting first if the server was lost; else ToolError."""
        client = self._client
        if client is not None and not self._lost:
            return client
        if self._closed or self._remote_tools is None:
            raise ToolError(f"MCP server {self.name!r} is not connected")
        generation = self._generation
        async with self._lock:
            if self._closed:
                raise ToolError(f"MCP server {self.name!r} is not connected")
            if self._generation == generation or self._client is None or self._lost:
                log.info("mcp.reconnecting", server=self.name)
                await self._stop_task()
                try:
                    await self._start()
                except MCPConnectError as e:
                    log.error("mcp.reconnect_failed", server=self.name, error=str(e))
                    raise ToolError(f"{e}; try again later") from None
                log.info("mcp.reconnected", server=self.name)
            if self._client is None:  # pragma: no cover - _start sets it or raises
                raise ToolError(f"MCP server {self.name!r} is not connected")
            return self._client

    def _mark_lost(self, generation: int, error: BaseException) -> None:
        """Note that the session of ``generation`` broke, so the next call reconnects."""
        if generation == self._generation and not self._lost:
            self._lost = True
            log.warning("mcp.connection_lost", server=self.name, error=_describe(error))

    async def _start(self) -> None:
        """Run a new owner task and wait until it is ready (call with the lock held)."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._stop = asyncio.Event()
        task = loop.create_task(self._own(ready, self._stop), name=f"mcp:{self.name}")
        self._task = task
        try:
            done, _ = await asyncio.wait(
                (ready, task),
                timeout=self.config.startup_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        except BaseException:
            await self._stop_task()
            raise
        if ready in done:
            self._generation += 1
            self._lost = False
            return
        if task in done:
            self._task = None
            error = asyncio.CancelledError() if task.cancelled() else task.result()
            verb = "started" if self.config.transport == "stdio" else "reached"
            raise MCPConnectError(
                f"MCP server {self.name!r} could not be {verb}: {_describe(error)}"
                if error is not None
                else f"MCP server {self.name!r} ended its session while starting"
            ) from error
        await self._stop_task()
        raise MCPConnectError(
            f"MCP server {self.name!r} did not start within {self.config.startup_timeout:g} s"
        )

    async def _stop_task(self) -> None:
        """End the owner task, if any, and wait for it (call with the lock held)."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        if self._client is None:
            task.cancel()  # still starting, or already over: nothing to close gracefully
        await asyncio.wait((task,))

    async def _own(self, ready: asyncio.Future[None], stop: asyncio.Event) -> BaseException | None:
        """The owner task: open the session, publish it, hold it until ``stop``, close it.

        Returns the error that ended the session, if any. anyio requires the transport's
        task groups to be entered and left in one task: this one.
        """
        client: Client | None = None
        try:
            async with AsyncExitStack() as stack:
                client = await self._open_client(stack)
                self._remote_tools = await _list_tools(client)
                self._tools = None
                self._client = client
                ready.set_result(None)
                await stop.wait()
        except Exception as e:
            if ready.done():
                log.error("mcp.disconnected", server=self.name, error=_describe(e))
            return e
        finally:
            if self._client is client:
                self._client = None
        return None

    async def _open_client(self, stack: AsyncExitStack) -> Client:
        """An MCP client for the configured transport, open and initialised, on ``stack``."""
        cfg = self.config
        info = mcp_types.Implementation(name="botkit", version=_version())
        if cfg.command is not None:
            params = StdioServerParameters(
                command=cfg.command, args=cfg.args, env=cfg.env or None, cwd=cfg.cwd
            )
            return await stack.enter_async_context(Client(params, client_info=info))
        assert cfg.url is not None
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=cfg.headers, timeout=_HTTP_TIMEOUT)
        )
        transport = streamable_http_client(cfg.url, http_client=http)
        return await stack.enter_async_context(Client(transport, client_info=info))


async def _list_tools(client: Client) -> list[mcp_types.Tool]:
    """Every tool the server lists, following pagination."""
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


@asynccontextmanager
async def connect_mcp(configs: Iterable[MCPServerConfig]) -> AsyncIterator[list[Tool]]:
    """Connect every server at once and yield all their tools; close them all on exit.

    A server that cannot be started is logged (``mcp.connect_failed``) and left out, so one
    broken server does not take the bot down; its tools are simply missing.
    """
    connections = [MCPConnection(config) for config in configs]
    names = [c.name for c in connections]
    if duplicates := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError(f"MCP server names must be unique: {', '.join(duplicates)}")
    try:
        results = await asyncio.gather(*(c.connect() for c in connections), return_exceptions=True)
        live: list[MCPConnection] = []
        for connection, result in zip(connections, results, strict=True):
            if isinstance(result, MCPConnectError):
                log.error("mcp.connect_failed", server=connection.name, error=str(result))
            elif isinstance(result, BaseException):
                raise result
            else:
                live.append(connection)
        yield [t for connection in live for t in connection.tools()]
    finally:
        await asyncio.gather(*(c.close() for c in connections))


def _describe(error: BaseException) -> str:
    """A one-line account of ``error``, looking inside exception groups."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in error.exceptions)
    if isinstance(error, MCPError):
        return error.message
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _version() -> str:
    """botkit's installed version, for the MCP client info."""
    try:
        return metadata.version("botkit")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a checkout
        return "0"
