"""Serving an aiohttp application on 127.0.0.1, on a free port."""

from __future__ import annotations

import socket
from types import TracebackType
from typing import Self

from aiohttp import web

__all__ = ["LoopbackServer", "serve_on_loopback"]

BACKLOG = 4096
"""Connections waiting to be accepted. aiohttp's default (128) drops the connects of a burst
of users (the client retries a dropped one only after a second), which real services do not."""


class LoopbackServer:
    """``async with`` support for a fake server with ``start`` and ``stop``."""

    async def start(self) -> None:
        """Start listening."""
        raise NotImplementedError

    async def stop(self) -> None:
        """Stop listening."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        """Start the server."""
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop the server."""
        await self.stop()


async def serve_on_loopback(app: web.Application) -> tuple[web.AppRunner, str]:
    """Start ``app`` on a free loopback port; the runner (to clean up) and the base URL."""
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock, backlog=BACKLOG).start()
    except BaseException:
        sock.close()
        await runner.cleanup()
        raise
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}"
