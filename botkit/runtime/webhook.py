"""Webhook mode of the receiver: Telegram POSTs updates to an aiohttp server, into the queue.

Every request must carry ``X-Telegram-Bot-Api-Secret-Token`` equal to BOTKIT_WEBHOOK_SECRET
(compared in constant time), else 401 and nothing is read. A body over 1 MB is 413, one not
received within BOTKIT_HTTP_READ_TIMEOUT 408; one that is not a JSON object with an integer
``update_id`` (or is nested deeper than ``MAX_DEPTH``) is 400. An update aiogram cannot read is
journaled and answered 200, so Telegram does not send it again. An update that could not be
queued (PostgreSQL away) is 503: Telegram keeps it and retries later. Any number of receivers
may stand behind a load balancer: the queue deduplicates. The server keeps to
BOTKIT_HTTP_MAX_CONNECTIONS and BOTKIT_HTTP_READ_TIMEOUT (see ``botkit._http``), and listens on
loopback unless BOTKIT_WEBHOOK_LISTEN says otherwise: a TLS reverse proxy goes in front.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson
import structlog
from aiohttp import web

from botkit._http import BoundedServer, HttpLimits, Throttled
from botkit.config import Settings
from botkit.errors import ConfigError, StoreError
from botkit.runtime.queue import TurnQueue
from botkit.runtime.receiver import AnswerCheckout, Receiver

if TYPE_CHECKING:
    from botkit.messengers.telegram import TelegramMessenger

__all__ = ["MAX_BODY", "MAX_DEPTH", "SECRET_HEADER", "WebhookServer", "serve_webhook"]

log = structlog.get_logger(__name__)

MAX_BODY = 1024 * 1024
"""Largest update body accepted (Telegram's are a few kilobytes)."""
MAX_DEPTH = 64
"""Deepest nesting of arrays and objects accepted (Telegram's updates nest about ten deep; the
queue's JSON encoder, like the parsers, gives up near a thousand)."""
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


class WebhookServer:
    """The HTTP side of webhook mode: checks each request, hands updates to a ``Receiver``."""

    def __init__(
        self, receiver: Receiver, *, path: str, secret: str, limits: HttpLimits | None = None
    ) -> None:
        self.receiver = receiver
        self.path = path
        self.secret = secret.encode()
        self.limits = limits or HttpLimits()
        # Repeated refusals are counted, not each logged: a flood of them is no log flood.
        self._bad_secret = Throttled("webhook.bad_secret", "refused")
        self._body_timeout = Throttled("webhook.body_timeout", "closed")
        self._not_an_update = Throttled("webhook.not_an_update", "refused")
        self._server: BoundedServer | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port``; the port bound (``port`` 0 picks a free one)."""
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(self.path, self.handle)
        self._server = BoundedServer(app, self.limits, name="webhook")
        return await self._server.start(host, port)

    async def close(self) -> None:
        """Stop listening (requests in flight are answered first)."""
        if self._server is not None:
            await self._server.close()
            self._server = None

    async def handle(self, request: web.Request) -> web.Response:
        """One POST from Telegram: 200 once the update is queued (or journaled)."""
        # Bytes that are not UTF-8 (aiohttp keeps them as surrogates) are just a wrong secret.
        given = request.headers.get(SECRET_HEADER, "").encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(given, self.secret):
            self._bad_secret.count(remote=request.remote)
            return web.Response(status=401, text="wrong or missing secret token")
        if (request.content_length or 0) > MAX_BODY:
            return web.Response(status=413, text="body over 1 MB")
        try:
            async with asyncio.timeout(self.limits.read_timeout):
                body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return web.Response(status=413, text="body over 1 MB")
        except TimeoutError:
            self._body_timeout.count(seconds=self.limits.read_timeout)
            response = web.Response(status=408, text="body not received in time")
            response.force_close()
            return response
        update = _update_of(body)
        if update is None:
            self._not_an_update.count(size=len(body))
            return web.Response(status=400, text="not a Telegram update")
        try:
            await self.receiver.take_once(update["update_id"], update)
        except StoreError as e:
            self.receiver.outage.failed(e)
            return web.Response(status=503, text="cannot queue the update now; retry later")
        self.receiver.outage.ok()
        return web.Response(text="ok")


def _update_of(body: bytes) -> dict[str, Any] | None:
    """The body as an update object, or ``None`` when it is not one."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        try:  # orjson refuses integers past 64 bits; json does not
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
    if not isinstance(data, dict) or not _nested_within(data, MAX_DEPTH):
        return None
    update_id = data.get("update_id")
    if not isinstance(update_id, int) or isinstance(update_id, bool):
        return None
    return data


def _nested_within(data: Any, depth: int) -> bool:
    """Whether ``data``'s arrays and objects nest at most ``depth`` deep."""
    level: list[Any] = [data]
    for _ in range(depth):
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
        if not level:
            return True
    return False


def listen_address(listen: str) -> tuple[str, int]:
    """``host:port`` (BOTKIT_WEBHOOK_LISTEN) split; ``ConfigError`` when it is not one."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"BOTKIT_WEBHOOK_LISTEN must be host:port, got {listen!r}")
    return host.strip("[]"), int(port)


async def serve_webhook(
    messenger: TelegramMessenger,
    queue: TurnQueue,
    settings: Settings,
    stop: asyncio.Event,
    checkouts: AnswerCheckout | None = None,
) -> None:
    """Serve the webhook until ``stop`` is set, after telling Telegram where it is."""
    url = settings.webhook_url or ""
    secret = settings.webhook_secret.get_secret_value() if settings.webhook_secret else ""
    host, port = listen_address(settings.webhook_listen)
    server = WebhookServer(
        Receiver(messenger, queue, settings, checkouts),
        path=urlsplit(url).path or "/",
        secret=secret,
        limits=HttpLimits.of(settings),
    )
    bound = await server.start(host, port)
    try:
        await messenger.set_webhook(url, secret)
        log.info("receiver.started", mode="webhook", listen=f"{host}:{bound}")
        await stop.wait()
    finally:
        await server.close()
