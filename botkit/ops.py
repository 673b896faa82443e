"""The operations endpoint of a long-running process: ``/metrics``, ``/healthz``, ``/readyz``.

Every runtime that runs for long (``run``, and the receiver and worker of a scaled-out bot)
wraps its work in :func:`ops_server`; with BOTKIT_METRICS_PORT unset it does nothing. The
server is a small aiohttp application (aiohttp comes with aiogram), bound to
BOTKIT_METRICS_HOST (loopback by default: metrics tell a lot about a bot's users' activity),
within BOTKIT_HTTP_MAX_CONNECTIONS and BOTKIT_HTTP_READ_TIMEOUT like the webhook (``botkit._http``).

``/healthz`` answers 200 while the event loop runs. ``/readyz`` runs the runtime's readiness
checks (each an async function returning ``None`` when fine, or one line saying what is
wrong) and answers 200 ``ready`` or 503 with the first failure's line, so a load balancer or
an orchestrator can tell a bot that cannot reach Telegram or its database from a healthy one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from botkit._http import BoundedServer, HttpLimits
from botkit.config import Settings
from botkit.errors import ConfigError
from botkit.metrics import Metrics

__all__ = ["CHECK_TIMEOUT", "ReadinessCheck", "ops_server", "stores_check"]

log = structlog.get_logger(__name__)

CHECK_TIMEOUT = 5.0
"""Seconds a readiness check may take before it counts as failed."""

ReadinessCheck = Callable[[], Awaitable[str | None]]
"""A readiness check: ``None`` when fine, else one line saying what is wrong."""


@asynccontextmanager
async def ops_server(
    settings: Settings,
    metrics: Metrics,
    checks: Sequence[ReadinessCheck] = (),
    *,
    check_timeout: float = CHECK_TIMEOUT,
) -> AsyncIterator[str | None]:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` while the block runs.

    Yields the server's base URL (also kept in ``metrics.served_at``), or ``None`` when
    BOTKIT_METRICS_PORT is not set and nothing is served.
    """
    if settings.metrics_port is None:
        yield None
        return
    app = web.Application()
    app.router.add_get("/metrics", _metrics_handler(metrics))
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz_handler(list(checks), check_timeout))
    server = BoundedServer(app, HttpLimits.of(settings), name="ops")
    try:
        try:
            port = await server.start(settings.metrics_host, settings.metrics_port)
        except OSError as e:
            raise ConfigError(
                f"cannot serve metrics on {settings.metrics_host}:{settings.metrics_port} "
                f"({e.strerror or e}): set BOTKIT_METRICS_PORT to a free port, or unset it."
            ) from e
        url = _url_of(settings.metrics_host, port)
        metrics.served_at = url
        log.info("ops.listening", url=url)
        yield url
    finally:
        metrics.served_at = None
        await server.close()


def stores_check(*stores: Callable[[], Awaitable[Any]]) -> ReadinessCheck:
    """A check that each of ``stores`` (a cheap read, e.g. one user's record) answers."""

    async def check() -> str | None:
        for read in stores:
            try:
                await read()
            except Exception as e:
                return f"a store does not answer: {type(e).__name__}: {e}".splitlines()[0]
        return None

    return check


def _metrics_handler(metrics: Metrics) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        response = web.Response(body=await metrics.scrape())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    return handle


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def _readyz_handler(
    checks: list[ReadinessCheck], timeout: float
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        reason = await _first_failure(checks, timeout)
        if reason is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=reason + "\n")

    return handle


async def _first_failure(checks: list[ReadinessCheck], seconds: float) -> str | None:
    """The line of the first check that fails (or takes over ``seconds``), or ``None``."""
    for check in checks:
        try:
            async with asyncio.timeout(seconds):
                reason = await check()
        except TimeoutError:
            reason = f"a readiness check took more than {seconds:g} s"
        if reason:
            return reason
    return None


def _url_of(host: str, port: int) -> str:
    """The base URL of a server listening on ``host:port``."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
