"""``MessagesTransport``: posts Messages API requests with aiohttp, the SDK deciding the rest.

The SDK's own path for one request (options, an ``httpx2.Request``, header layers, its
aiohttp adapter, an ``httpx2.Response``) costs ~0.4 ms of CPU, more than the rest of a short
turn's LLM work together. This posts the body with aiohttp directly, and leaves to the SDK
what it is best at: the headers (auth, version, retry count) come from the client's own
``_build_headers``, whether and how long to wait before a retry from its ``_should_retry`` and
``_calculate_retry_timeout``, and a failed answer becomes the SDK's exception for it (with
``request_id``) through ``_make_status_error_from_response``. Connection failures and
timeouts are the SDK's ``APIConnectionError`` and ``APITimeoutError``, retried as it retries
them. tests/test_anthropic_llm.py holds all of this against the SDK sending the same calls.

Those SDK methods and the aiohttp internals below are private: ``botkit.llm.internals`` checks
them once, and this transport is used only when the SDK's are all there.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING

import aiohttp
import anthropic
import httpx2
from yarl import URL

import botkit.llm.internals as internals
from botkit import tracing

if TYPE_CHECKING:
    from aiohttp.client_proto import ResponseHandler

__all__ = ["MessagesTransport"]

_LARGE_BODY = 1 << 20
"""aiohttp warns that raw bytes above this may hold up the event loop; a stream it is."""

MESSAGES = "/v1/messages"
MAX_CONNECTIONS = 1000
"""Connections open at once to the API (the SDK's own default limit)."""
KEEPALIVE_SECONDS = 5.0
"""How long an idle connection is kept for the next call (the SDK's default too)."""


class MessagesTransport:
    """Sends ``POST /v1/messages`` for one SDK client: its URL, headers, timeouts, retries."""

    def __init__(self, client: anthropic.AsyncAnthropic) -> None:
        self.client = client
        from anthropic._models import FinalRequestOptions  # private: see botkit.llm.internals

        self.url = str(client._prepare_url(MESSAGES))
        self._options = FinalRequestOptions.construct(
            method="post", url=MESSAGES, timeout=client.timeout
        )
        self._timeout = _aiohttp_timeout(client.timeout)
        self._headers: dict[int, dict[str, str]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._proxy: tuple[URL, aiohttp.BasicAuth | None] | None = None
        self._own_read_timer = internals.check().own_read_timer
        self._own_proxy_lookup = internals.check().own_proxy_lookup

    @asynccontextmanager
    async def post(
        self, body: bytes, headers: dict[str, str] | None = None
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The API's successful answer to ``body`` (sent with the SDK's headers and
        ``headers``), its content still to read; failed answers and connection failures are
        retried and raised as the SDK would."""
        max_retries = self.client.max_retries
        for retries_taken in range(max_retries + 1):
            remaining = max_retries - retries_taken
            try:
                response = await self._send(body, retries_taken, headers)
            except anthropic.APIConnectionError:
                if remaining <= 0:
                    raise
                tracing.tracer.retried(retries_taken + 1, None)
                await self._wait_before_retry(remaining, None)
                continue
            if response.status < 300:
                try:
                    yield response
                finally:
                    response.release()
                return
            failed = self.as_httpx(response, content=await _read_failed(response))
            if remaining > 0 and self.client._should_retry(failed):
                tracing.tracer.retried(retries_taken + 1, response.status)
                await self._wait_before_retry(remaining, failed.headers)
                continue
            raise self.client._make_status_error_from_response(failed)

    @contextmanager
    def read_timer(self, response: aiohttp.ClientResponse) -> Iterator[None]:
        """While a streamed answer's body is read within: its read timeout (no byte for that
        long) kept by one timer of ours that looks at the bytes received, not by aiohttp's,
        which is cancelled and set again for every chunk: a few dozen timers a turn, about a
        tenth of the CPU of reading a stream."""
        watch = _ReadTimeout.take_over(response) if self._own_read_timer else None
        try:
            yield
        finally:
            if watch is not None:
                watch.stop()

    def as_httpx(
        self, response: aiohttp.ClientResponse, *, content: bytes = b""
    ) -> httpx2.Response:
        """``response`` as the SDK's exceptions expect it (status, headers, content)."""
        return httpx2.Response(
            response.status,
            headers=list(response.raw_headers),
            content=content,
            request=self._request(),
        )

    async def close(self) -> None:
        """Close the connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _send(
        self, body: bytes, retries_taken: int, extra: dict[str, str] | None = None
    ) -> aiohttp.ClientResponse:
        session = self._session or self._open()
        headers = self._headers_for(retries_taken)
        if extra:
            headers = {**headers, **extra}
        if tracing.tracer.enabled:  # the API joins the trace (W3C traceparent)
            headers = {**headers, **tracing.tracer.carrier()}
        try:
            # A body with pictures or PDFs (over 1 MB) goes as a stream, written in chunks.
            data = io.BytesIO(body) if len(body) > _LARGE_BODY else body
            return await session.post(
                self.url,
                data=data,
                headers=headers,
                timeout=self._timeout,
                allow_redirects=False,
                proxy=self._proxy[0] if self._proxy else None,
                proxy_auth=self._proxy[1] if self._proxy else None,
            )
        except TimeoutError as e:
            raise anthropic.APITimeoutError(request=self._request()) from e
        except (aiohttp.ClientError, OSError) as e:
            raise anthropic.APIConnectionError(request=self._request()) from e

    def _open(self) -> aiohttp.ClientSession:
        """The HTTP session, made on first use (it needs the running loop).

        A proxy from the environment (``HTTPS_PROXY``, ``NO_PROXY``...) is looked up here,
        once: aiohttp's ``trust_env`` would look it up, and netrc, in a thread on every call.
        """
        connector = aiohttp.TCPConnector(
            limit=MAX_CONNECTIONS,
            keepalive_timeout=KEEPALIVE_SECONDS,
            ssl=httpx2.create_ssl_context(trust_env=True),
        )
        self._proxy = _env_proxy(self.url) if self._own_proxy_lookup else None
        self._session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=not self._own_proxy_lookup,
        )
        return self._session

    def _headers_for(self, retries_taken: int) -> dict[str, str]:
        """The SDK's headers for an attempt (they differ only in the retry count)."""
        headers = self._headers.get(retries_taken)
        if headers is None:
            built = self.client._build_headers(self._options, retries_taken=retries_taken)
            headers = self._headers[retries_taken] = dict(built)
        return headers

    async def _wait_before_retry(self, remaining: int, headers: httpx2.Headers | None) -> None:
        await asyncio.sleep(self.client._calculate_retry_timeout(remaining, self._options, headers))

    def _request(self) -> httpx2.Request:
        return httpx2.Request("POST", self.url)


class _ReadTimeout:
    """A response fails as aiohttp fails it (``SocketTimeoutError``) once no byte has come
    for its read timeout; checked every tenth of that timeout, so a stall is noticed between
    1.0 and 1.1 timeouts after the last byte."""

    def __init__(
        self, protocol: ResponseHandler, content: aiohttp.StreamReader, seconds: float
    ) -> None:
        self.protocol = protocol
        self.content = content
        self.seconds = seconds
        self.loop = asyncio.get_running_loop()
        self.seen = self.content.total_bytes
        self.quiet_since = self.loop.time()
        self.handle = self.loop.call_later(seconds / 10, self._check)

    @classmethod
    def take_over(cls, response: aiohttp.ClientResponse) -> _ReadTimeout | None:
        """Stop aiohttp's timer for ``response``, which still has bytes to come; ours
        instead (``None`` when there is no read timeout or nothing more to read)."""
        connection = response.connection
        protocol = connection.protocol if connection is not None else None
        seconds = protocol.read_timeout if protocol is not None else None
        if protocol is None or not seconds:
            return None
        protocol.read_timeout = None
        protocol.start_timeout()  # with no timeout, this cancels aiohttp's timer
        return cls(protocol, response.content, seconds)

    def stop(self) -> None:
        """The response is read (or given up): no more checks."""
        self.handle.cancel()

    def _check(self) -> None:
        now = self.loop.time()
        if self.content.total_bytes != self.seen:
            self.seen, self.quiet_since = self.content.total_bytes, now
        elif now - self.quiet_since >= self.seconds:
            error = aiohttp.SocketTimeoutError("Timeout on reading data from socket")
            self.protocol.set_exception(error)  # as aiohttp's own timer does: the
            self.content.set_exception(error)  # connection is closed, the reader raises
            return
        self.handle = self.loop.call_later(self.seconds / 10, self._check)


async def _read_failed(response: aiohttp.ClientResponse) -> bytes:
    """The body of a failed answer (empty if the connection broke while reading it)."""
    try:
        return await response.read()
    except (aiohttp.ClientError, TimeoutError):
        return b""
    finally:
        response.release()


def _env_proxy(url: str) -> tuple[URL, aiohttp.BasicAuth | None] | None:
    """The proxy (and its credentials) the environment names for ``url``, if any."""
    from aiohttp.helpers import get_env_proxy_for_url  # private: see botkit.llm.internals

    try:
        return get_env_proxy_for_url(URL(url))
    except LookupError:
        return None


def _aiohttp_timeout(timeout: float | httpx2.Timeout | None) -> aiohttp.ClientTimeout:
    """The SDK's timeout as aiohttp's, mapped as the SDK's own aiohttp transport maps it."""
    if not isinstance(timeout, httpx2.Timeout):
        return aiohttp.ClientTimeout(sock_connect=timeout, sock_read=timeout)
    return aiohttp.ClientTimeout(
        sock_connect=timeout.connect, sock_read=timeout.read, connect=timeout.pool
    )
