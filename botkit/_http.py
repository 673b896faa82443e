"""Serving an aiohttp application within limits: the webhook receiver and the ops endpoint.

aiohttp's server has no timeout of its own for a client that connects and never finishes its
request line or headers (older releases, which aiogram allows, not even for one that sends
nothing), so anyone who reaches the port could hold connections, and the process's file
descriptors with them, for an hour (its keep-alive time). Here each connection passes through
a small protocol wrapper:

- past ``max_connections`` open at once, a new connection is closed as soon as it is accepted
  (requests already running are not touched);
- a connection without a request in its handler must deliver the line and headers of its next
  request within ``read_timeout`` (counted from when it opened, or from its last response,
  however slowly it trickles bytes), else it is closed;
- idle keep-alive and the lingering read of an unread body end after the same time (aiohttp's
  ``keepalive_timeout`` and ``lingering_time``); a handler that reads a body bounds the read
  itself (``read_timeout`` is there for it).

Refused and timed-out connections are logged as one warning line a minute at most, with counts,
so a flood of them does not flood the logs too.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from botkit.config import Settings

__all__ = ["BoundedServer", "HttpLimits", "Throttled"]

log = structlog.get_logger(__name__)

_WARN_EVERY = 60.0
"""Seconds between two warnings of the same kind (refused, timed out)."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """How many connections a server keeps open, and how long it waits for a request."""

    max_connections: int = 256
    """Connections open at once; past it a new one is closed at once."""
    read_timeout: float = 10.0
    """Seconds for a request's line and headers (and a body its handler reads), and for an
    idle keep-alive connection."""

    @classmethod
    def of(cls, settings: Settings) -> HttpLimits:
        """BOTKIT_HTTP_MAX_CONNECTIONS and BOTKIT_HTTP_READ_TIMEOUT."""
        return cls(settings.http_max_connections, settings.http_read_timeout)


class BoundedServer:
    """An aiohttp application served on one TCP address within ``HttpLimits``."""

    def __init__(self, app: web.Application, limits: HttpLimits, *, name: str) -> None:
        self.limits = limits
        self.name = name
        """What the server is, in its log lines (``webhook``, ``ops``)."""
        app.middlewares.append(self._track_request)
        self._app = app
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self._open: dict[RequestHandler, _Connection] = {}
        self._refused = Throttled(f"{name}.connections_full", "refused")
        self._evicted = Throttled(f"{name}.connections_evicted", "evicted")
        self._timed_out = Throttled(f"{name}.request_timeout", "closed")

    @property
    def open_connections(self) -> int:
        """Connections open now."""
        return len(self._open)

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port``; the port bound (``port`` 0 picks a free one)."""
        timeout = self.limits.read_timeout
        self._runner = web.AppRunner(
            self._app, access_log=None, keepalive_timeout=timeout, lingering_time=timeout
        )
        await self._runner.setup()
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(self._connection, host, port)
        except BaseException:
            await self.close()
            raise
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening; requests in flight are answered first, idle connections closed."""
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def _connection(self) -> _Connection:
        """A new connection: aiohttp's handler for it, within the limits."""
        assert self._runner is not None and self._runner.server is not None
        return _Connection(self, self._runner.server())

    def _admit(self, connection: _Connection) -> bool:
        """Take a new connection; at the cap, in place of the oldest one still waiting for a
        whole request (one slow or silent client cannot hold every slot), else refuse it."""
        if len(self._open) >= self.limits.max_connections:
            idle = _to_evict(list(self._open.values()))
            if idle is None:
                self._refused.count(limit=self.limits.max_connections)
                return False
            self._evicted.count(limit=self.limits.max_connections)
            self._forget(idle)
            idle.evict()
        self._open[connection.handler] = connection
        return True

    def _forget(self, connection: _Connection) -> None:
        self._open.pop(connection.handler, None)

    @web.middleware
    async def _track_request(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """A request's headers are in: no deadline while its handler runs, a new one after."""
        connection = self._open.get(request.protocol)
        if connection is None:
            return await handler(request)
        connection.disarm()
        try:
            return await handler(request)
        finally:
            connection.arm()


def _to_evict(connections: list[_Connection]) -> _Connection | None:
    """The connection a newcomer replaces at the cap: the oldest one still waiting for a whole
    request, from the address that holds the most such (a flood from one address makes room
    from its own); ``None`` when every one is being answered."""
    waiting = [c for c in connections if c.waiting]
    if not waiting:
        return None
    held = Counter(c.peer for c in waiting)
    busiest = max(held.values())
    return next(c for c in waiting if held[c.peer] == busiest)


class _Connection(asyncio.Protocol):
    """One client connection, passed through to aiohttp's handler unless over the limits."""

    def __init__(self, server: BoundedServer, handler: RequestHandler) -> None:
        self.server = server
        self.handler = handler
        self._transport: asyncio.Transport | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self.peer = ""
        """The client's address (behind a proxy: the proxy's)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        address = transport.get_extra_info("peername")
        self.peer = str(address[0]) if isinstance(address, tuple) and address else ""
        if not self.server._admit(self):
            transport.abort()
            return
        self._transport = transport
        self.arm()
        self.handler.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is None:
            return  # refused: aiohttp never saw it
        self.disarm()
        self._transport = None
        self.server._forget(self)
        self.handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.handler.data_received(data)

    def eof_received(self) -> None:
        self.handler.eof_received()

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()

    def arm(self) -> None:
        """Close the connection unless a request's headers are in within the read timeout."""
        self.disarm()
        if self._transport is not None:
            loop = asyncio.get_running_loop()
            self._deadline = loop.call_later(self.server.limits.read_timeout, self._expire)

    def disarm(self) -> None:
        """A request is being handled: no deadline."""
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    @property
    def waiting(self) -> bool:
        """Whether it waits for a request's headers (no request of it is being handled)."""
        return self._deadline is not None

    def evict(self) -> None:
        """Close it to make room for a newer connection."""
        self.disarm()
        if self._transport is not None:
            self._transport.abort()

    def _expire(self) -> None:
        self._deadline = None
        if self._transport is not None:
            self.server._timed_out.count(seconds=self.server.limits.read_timeout)
            self._transport.abort()


class Throttled:
    """A warning logged at its first occurrence, then at most once a minute with a count."""

    def __init__(self, event: str, counted: str) -> None:
        self.event = event
        self.counted = counted
        self._since_logged = 0
        self._logged_at = float("-inf")

    def count(self, **details: Any) -> None:
        self._since_logged += 1
        now = time.monotonic()
        if now - self._logged_at >= _WARN_EVERY:
            log.warning(self.event, **{self.counted: self._since_logged}, **details)
            self._since_logged = 0
            self._logged_at = now
