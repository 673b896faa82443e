"""``AnthropicLLM``: the Messages API with the official SDK's rules, streamed.

Each request is posted by ``MessagesTransport`` (aiohttp, with the SDK's headers, retries,
timeouts, exception classes and ``request-id``); the answer is read here. Its bytes are parsed
with orjson into botkit's own types, once: the SDK's per-event pydantic models and its snapshot
of the whole message rebuilt on every delta cost more CPU than the rest of a turn together.
The request body is serialized once, with orjson. When this install's SDK lacks a private name
the transport needs (``botkit.llm.internals``), calls go through the SDK's public API instead
(``botkit.llm.sdk_path``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, get_args

import aiohttp
import anthropic
import httpx2
import orjson
import structlog

import botkit.llm.internals as internals
import botkit.llm.sdk_path as sdk_path
from botkit import tracing
from botkit.config import Settings
from botkit.errors import (
    ConfigError,
    LLMAuthError,
    LLMError,
    LLMOverloadedError,
    MediaTooLargeError,
    PromptTooLongError,
)
from botkit.llm.base import LLMRequest, LLMResponse, StopReason, TextSink, report_usage
from botkit.llm.caching import CacheTTL, Lifetime, conversation_lifetime, mark_cache_points
from botkit.llm.keepwarm import CacheKeeper
from botkit.llm.thinking import (
    BINDING_BETA,
    ThinkingSettings,
    block_prefixes,
    feed_message,
    least_thinking,
    problems,
    stale_thinking,
    top_hasher,
    traits_for,
)
from botkit.llm.transport import MessagesTransport
from botkit.types import (
    ContentBlock,
    Message,
    RedactedThinkingBlock,
    ServerBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)

__all__ = ["AnthropicLLM", "AuthFailureHandler"]

log = structlog.get_logger(__name__)

_KNOWN_STOP_REASONS: frozenset[str] = frozenset(get_args(StopReason))
_FIRST_BACKOFF = 0.5
_UNREACHABLE = (
    anthropic.APIConnectionError,
    anthropic.InternalServerError,
    anthropic.RateLimitError,
)
"""What a start-up check retries: the API may come back; a rejected key or model will not."""

AuthFailureHandler = Callable[[LLMAuthError], Awaitable[None]]
"""Told once when the key is rejected while running (e.g. to tell the admins)."""


class AnthropicLLM:
    """Calls Claude with ``AsyncAnthropic``, streaming when someone listens for text."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        model: str,
        max_tokens: int = 4096,
        base_url: str | None = None,
        max_retries: int = 2,
        max_concurrency: int | None = 64,
        prompt_caching: bool = True,
        cache_ttl: CacheTTL = "auto",
        client: anthropic.AsyncAnthropic | None = None,
        on_auth_failure: AuthFailureHandler | None = None,
        thinking: ThinkingSettings | None = None,
        keep_cache_warm: bool = True,
    ) -> None:
        self.model = model
        self.thinking = thinking or ThinkingSettings()
        """Thinking mode, effort and display, sent where the call's model takes them."""
        self.on_auth_failure = on_auth_failure
        """Called once when the key is rejected, and again only after a success in between."""
        self._auth_reported = False
        self.max_tokens = max_tokens
        self.prompt_caching = prompt_caching
        self.cache_ttl: CacheTTL = cache_ttl
        """How long the conversation's cache entries live: ``auto`` picks by its pace."""
        self.client = client or anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=max_retries
        )
        """Holds the configuration (key, URL, timeouts, retries) and answers the start-up check."""
        self.transport = MessagesTransport(self.client) if internals.check().fast_path else None
        """Posts calls itself; ``None`` when they go through the SDK's public API."""
        self._slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self.keeper = (
            CacheKeeper(self._ping, thinking_off=least_thinking)
            if prompt_caching and keep_cache_warm
            else None
        )
        """Reads paused conversations' tools-and-system cache entry before it expires."""

    @classmethod
    def from_settings(cls, settings: Settings) -> AnthropicLLM:
        """The model a bot talks to unless it was given one: key, model, token cap, URL and
        concurrency from ``settings`` (``ConfigError`` without a key)."""
        return cls(
            api_key=settings.require_anthropic_key(),
            model=settings.model,
            max_tokens=settings.max_tokens,
            base_url=settings.anthropic_base_url,
            max_concurrency=settings.max_concurrent_turns,
            thinking=settings.thinking_settings(),
            cache_ttl=settings.cache_ttl,
            keep_cache_warm=settings.cache_keep_warm,
        )

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        """Send ``request``; text deltas go to ``on_text`` as they arrive.

        A request whose thinking blocks the API would refuse as bound to another prefix asks
        the API to drop them (``drop_block``); one refused all the same is sent once more so.
        """
        with tracing.tracer.chat(request, self.model) as span:
            call = _Call(self, request)
            try:
                try:
                    raw = await self._send(call, on_text)
                except ThinkingRefusedError as e:
                    log.warning("llm.thinking_refused", error=str(e))
                    call = _Call(self, request, repair=e)
                    raw = await self._send(call, on_text)
            except LLMAuthError as e:
                await self._report_auth_failure(e)
                raise
            self._auth_reported = False
            response = call.response(raw)
            tracing.tracer.chat_answered(span, response)
        if self.keeper is not None and call.lifetime is not None:
            self.keeper.note(call.params, response.usage, call.lifetime)
        return response

    async def _ping(self, body: dict[str, Any]) -> Usage:
        """Send a request body (not streamed) and return its usage: the keeper's reads."""
        async with self._slot(), _mapped_errors():
            raw = await self._call(dict(body), None, {})
        return _usage(raw.get("usage"))

    async def _send(self, call: _Call, on_text: TextSink | None) -> dict[str, Any]:
        async with self._slot(), _mapped_errors():
            return await self._call(call.params, on_text, call.headers)

    async def _call(
        self, params: dict[str, Any], on_text: TextSink | None, headers: dict[str, str]
    ) -> dict[str, Any]:
        """The answer to ``params`` as the API's dict, by the fast path or the SDK's."""
        if self.transport is None:
            if headers:
                params = {**params, "extra_headers": headers}
            if on_text is None:
                return await sdk_path.create(self.client, params)
            return await sdk_path.stream(self.client, params, on_text)
        if on_text is None:
            return await _create(self.transport, orjson.dumps(params), headers)
        params["stream"] = True
        return await _stream(self.transport, orjson.dumps(params), on_text, headers)

    async def verify(self, *, attempts: int = 10, max_backoff: float = 30.0) -> None:
        """Check the key and the model with a call that costs no tokens, retrying while the
        API is unreachable.

        Raises ``ConfigError`` when the key or the model name is rejected, and ``LLMError``
        when the API is still unreachable after ``attempts``.
        """
        for attempt in range(1, attempts + 1):
            try:
                await self._probe()
                return
            except _UNREACHABLE as e:
                if attempt == attempts:
                    raise LLMError(
                        f"could not reach the Messages API after {attempts} attempts: {e}"
                    ) from e
                delay = min(_FIRST_BACKOFF * 2 ** (attempt - 1), max_backoff)
                log.warning("anthropic.check_retry", error=str(e), attempt=attempt, delay=delay)
                await asyncio.sleep(delay)

    async def _probe(self) -> None:
        """Count the tokens of a one-word message with the default model: free, and it
        fails the way a real call would on a wrong key or an unknown model."""
        client = self.client.with_options(max_retries=0)
        try:
            await client.messages.count_tokens(
                model=self.model, messages=[{"role": "user", "content": "hi"}]
            )
        except anthropic.AuthenticationError as e:
            raise ConfigError(
                f"Anthropic rejected ANTHROPIC_API_KEY ({_detail(e)}): set a valid key from "
                "console.anthropic.com."
            ) from e
        except anthropic.NotFoundError as e:
            raise ConfigError(
                f"Anthropic does not know the model {self.model!r} ({_detail(e)}): set "
                "BOTKIT_MODEL to a current model name."
            ) from e
        except _UNREACHABLE:
            raise
        except anthropic.AnthropicError as e:
            raise _mapped(e) from e
        self._auth_reported = False
        await self._check_settings(client)

    async def unknown_models(self, models: Iterable[str]) -> list[str]:
        """Which of ``models`` the Models API does not know (``GET /v1/models/{id}``: 404),
        and the thinking settings any of them would refuse, one line each."""
        client = self.client.with_options(max_retries=0)
        found: list[str] = []
        for model in dict.fromkeys(models):
            try:
                info = (await client.models.retrieve(model)).to_dict()
            except anthropic.NotFoundError:
                found.append(f"{model} is not a model Anthropic knows")
                continue
            except anthropic.AnthropicError as e:
                raise _mapped(e) from e
            refused = problems(self.thinking, model)
            refused += _capability_problems(self.thinking, model, info.get("capabilities"))
            found += list(dict.fromkeys(refused))
        return found

    async def _check_settings(self, client: anthropic.AsyncAnthropic) -> None:
        """Refuse, in one line, thinking settings the model would refuse at every call: as
        botkit's table knows the model, and as the Models API's ``capabilities`` say."""
        found = problems(self.thinking, self.model)
        try:
            info = (await client.models.retrieve(self.model)).to_dict()
        except anthropic.NotFoundError as e:
            raise ConfigError(
                f"Anthropic does not know the model {self.model!r} ({_detail(e)}): set "
                "BOTKIT_MODEL to a current model name."
            ) from e
        except anthropic.APIStatusError as e:  # a gateway without the Models API
            log.warning("anthropic.capabilities_unread", model=self.model, error=_detail(e))
            info = {}
        found += _capability_problems(self.thinking, self.model, info.get("capabilities"))
        if found:
            raise ConfigError(f"{'; '.join(dict.fromkeys(found))}.")

    async def _report_auth_failure(self, error: LLMAuthError) -> None:
        """Log the first rejection as an error and tell ``on_auth_failure``; then stay quiet."""
        if self._auth_reported:
            return
        self._auth_reported = True
        log.error("llm.auth_failed", error=str(error))
        if self.on_auth_failure is None:
            return
        try:
            await self.on_auth_failure(error)
        except Exception:
            log.exception("llm.auth_failure_handler_failed")

    async def close(self) -> None:
        """Close the HTTP connections."""
        if self.keeper is not None:
            await self.keeper.close()
        if self.transport is not None:
            await self.transport.close()
        await self.client.close()

    @asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        if self._slots is None:
            yield
            return
        async with self._slots:
            yield


def _capability_problems(settings: ThinkingSettings, model: str, capabilities: Any) -> list[str]:
    """What the Models API's ``capabilities`` of ``model`` say it would refuse of
    ``settings``."""
    if not isinstance(capabilities, dict):
        return []
    found: list[str] = []
    effort = capabilities.get("effort") or {}
    if settings.effort is not None and not (effort.get(settings.effort) or {}).get("supported"):
        found.append(f"{model} does not take BOTKIT_EFFORT={settings.effort}")
    types = (capabilities.get("thinking") or {}).get("types") or {}
    wants_adaptive = settings.mode == "adaptive" or settings.display is not None
    if wants_adaptive and not (types.get("adaptive") or {}).get("supported"):
        found.append(f"{model} has no adaptive thinking (BOTKIT_THINKING, BOTKIT_THINKING_DISPLAY)")
    return found


class ThinkingRefusedError(LLMError):
    """The API refused the request's thinking blocks: bound to another prefix, or missing from
    a tool cycle that had them (a session written before botkit kept them)."""

    def __init__(self, message: str, *, missing_at: int | None = None) -> None:
        super().__init__(message)
        self.missing_at = missing_at
        """The index of the message whose thinking is missing, when that was the refusal."""


class _Call:
    """One request as sent: its body and headers, and what is needed to read its answer
    (the prefix that the answer's thinking blocks are bound to)."""

    def __init__(
        self, llm: AnthropicLLM, request: LLMRequest, repair: ThinkingRefusedError | None = None
    ) -> None:
        self.model = model = request.model or llm.model
        messages = _readable(request.messages, model)
        if repair is not None and repair.missing_at is not None:
            messages = _without_tool_cycle(messages, repair.missing_at)
        self.system = request.system
        self.messages = messages
        self.tool_defs = request.tools
        self.tools = [t.to_api() for t in request.tools]
        self.api_messages = [m.to_api() for m in messages]
        self._hashed: Any = None
        """The prefix hash of the whole request, when checking its thinking computed it."""
        params: dict[str, Any] = {
            "model": model,
            "max_tokens": request.max_tokens or llm.max_tokens,
            "messages": self.api_messages,
        }
        if request.system:
            params["system"] = request.system
        if self.tools:
            params["tools"] = [*self.tools]  # marked for the cache; self.tools stay as given
        params.update(llm.thinking.fields(model))
        self.headers: dict[str, str] = {}
        self.params = params
        self._bind(force=repair is not None and repair.missing_at is None)
        self.lifetime: Lifetime | None = None
        """How long the conversation's cache entries live (``None``: caching off)."""
        if llm.prompt_caching:
            self.lifetime = conversation_lifetime(llm.cache_ttl, request.pauses)
            mark_cache_points(params, self.lifetime)

    def _bind(self, *, force: bool) -> None:
        """Ask the API to drop blocks bound to a prefix that changed (an operator edited the
        prompt, a tool was added, history was compacted mid-cycle), instead of failing."""
        if not any(m.role == "assistant" and m.thinking for m in self.messages):
            return
        traits = traits_for(self.model)
        if not traits.binds_prefix:
            return
        hasher = self._top()
        stale = stale_thinking(hasher, self.messages, self.model)
        if not stale and not force:
            self._hashed = hasher
            return
        log.warning("llm.thinking_prefix_changed", model=self.model, blocks=stale or "refused")
        thinking = self.params.get("thinking") or {"type": "adaptive"}
        if thinking.get("type") not in ("adaptive", "enabled"):
            # between_tools takes no block_binding: leave every thinking block out (allowed)
            self.messages = [m.without_thinking() for m in self.messages]
            self.params["messages"] = self.api_messages = [m.to_api() for m in self.messages]
            return
        binding = {"prefix_mismatch_behavior": "drop_block"}
        self.params["thinking"] = {**thinking, "block_binding": binding}
        self.headers["anthropic-beta"] = BINDING_BETA

    def response(self, raw: dict[str, Any]) -> LLMResponse:
        """botkit's response to this call, its thinking blocks bound to this call's prefix."""
        changes = raw.get("input_transformations")
        if changes:
            log.info("llm.input_transformed", model=self.model, transformations=changes)
        return _to_response(raw, self._prefix)

    def _prefix(self) -> Any:
        """The hash of everything this call sent before its answer."""
        if self._hashed is not None:
            return self._hashed
        hasher = self._top()
        for message in self.messages:
            feed_message(hasher, message)
        return hasher

    def _top(self) -> Any:
        return top_hasher(self.system, self.tools, self.tool_defs)


def _readable(messages: list[Message], model: str) -> list[Message]:
    """``messages`` without the thinking blocks another model wrote, for a model that has no
    adaptive thinking (models that have it drop what they cannot read, without an error)."""
    traits = traits_for(model)
    if traits.thinks_by_default or "adaptive" in traits.thinking:
        return messages
    return [
        _without_thinking(m, keep=model)
        if m.role == "assistant" and any(b.model not in (None, model) for b in m.thinking)
        else m
        for m in messages
    ]


def _without_thinking(message: Message, keep: str) -> Message:
    """``message`` without its thinking blocks but those of the model ``keep``."""
    content = [
        b
        for b in message.content
        if not isinstance(b, ThinkingBlock | RedactedThinkingBlock) or b.model == keep
    ]
    return message.model_copy(update={"content": content})


def _without_tool_cycle(messages: list[Message], index: int) -> list[Message]:
    """``messages`` with the tool calls of message ``index`` and their results written out as
    text: a cycle whose thinking was lost (a session written before botkit kept it) can no
    longer be continued as one, but what it did stays in the conversation."""
    if not 0 <= index < len(messages) - 1:
        return messages
    calls, results = messages[index], messages[index + 1]
    said: list[ContentBlock] = [b for b in calls.content if isinstance(b, TextBlock)]
    said += [
        TextBlock(text=f"[called {b.name} {orjson.dumps(b.input).decode()}]")
        for b in calls.content
        if isinstance(b, ToolUseBlock)
    ]
    answered: list[ContentBlock] = []
    for block in results.content:
        if block.type == "tool_result":
            answered.append(TextBlock(text=f"[tool result] {getattr(block, 'content', '')}"))
        else:
            answered.append(block)
    log.warning("llm.tool_cycle_written_out", message=index)
    return [
        *messages[:index],
        calls.model_copy(update={"content": said or [TextBlock(text="[tool calls]")]}),
        results.model_copy(update={"content": answered}),
        *messages[index + 2 :],
    ]


@asynccontextmanager
async def _mapped_errors() -> AsyncIterator[None]:
    """Turn the SDK's exceptions into botkit's, once, here."""
    try:
        yield
    except anthropic.AnthropicError as e:
        error = _mapped(e)
        error.request_id = getattr(e, "request_id", None)
        raise error from e
    except (aiohttp.ClientError, TimeoutError, httpx2.TransportError) as e:
        # a stream cut (or stalled) mid-answer
        raise LLMError(f"the connection to the Messages API broke: {e!r}") from e


def _mapped(e: anthropic.AnthropicError) -> LLMError:
    """botkit's exception for one of the SDK's."""
    if isinstance(e, anthropic.RateLimitError):
        return LLMOverloadedError(f"rate limited by the Messages API: {_quoted(e)}")
    if isinstance(e, anthropic.APIStatusError):
        return _status_error(e)
    if isinstance(e, anthropic.APIConnectionError):
        return LLMError(f"could not reach the Messages API: {e}")
    return LLMError(str(e))


_MISSING_THINKING = re.compile(r"messages\.(\d+)\.content\.0\.type: Expected `thinking`")


def _status_error(e: anthropic.APIStatusError) -> LLMError:
    detail = _quoted(e)
    if e.status_code == 400 and "bound to a different conversation" in detail:
        return ThinkingRefusedError(f"Messages API error 400: {detail}")
    if e.status_code == 400 and (missing := _MISSING_THINKING.search(detail)):
        return ThinkingRefusedError(
            f"Messages API error 400: {detail}", missing_at=int(missing.group(1))
        )
    if e.status_code == 401:
        return LLMAuthError(f"the Messages API rejected ANTHROPIC_API_KEY: {detail}")
    # An overload in the middle of a stream arrives as an error event on a 200 response.
    if e.status_code == 529 or getattr(e, "type", None) == "overloaded_error":
        return LLMOverloadedError(f"the Messages API is overloaded: {detail}")
    if e.status_code in (400, 413) and "prompt is too long" in detail.lower():
        return PromptTooLongError(detail)
    if e.status_code == 413 or (e.status_code == 400 and _about_media(detail)):
        return MediaTooLargeError(f"the Messages API refused the request's media: {detail}")
    return LLMError(f"Messages API error {e.status_code}: {detail}")


_MEDIA_REFUSALS = (
    "exceeds 5 mb maximum",
    "image dimensions exceed",
    "pdf pages may be provided",
    "pdf exceeds",
    "too many images",
    "maximum allowed number of bytes",
)
"""How the API's 400s about a request's pictures and PDFs begin or end (lowercased)."""


def _about_media(detail: str) -> bool:
    lowered = detail.lower()
    return any(phrase in lowered for phrase in _MEDIA_REFUSALS)


def _detail(e: anthropic.APIStatusError) -> str:
    """The API's own message about a failed call."""
    body, detail = e.body, str(e)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            detail = str(error["message"])
    return detail


def _quoted(e: anthropic.APIStatusError) -> str:
    """The API's message with the request id operators can quote to Anthropic."""
    detail = _detail(e)
    return f"{detail} (request {e.request_id})" if e.request_id else detail


async def _create(
    transport: MessagesTransport, body: bytes, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """One non-streamed call: the transport sends it (retrying, raising the SDK's errors),
    orjson reads it."""
    async with transport.post(body, headers) as response:
        message = orjson.loads(await response.read())
    if not isinstance(message, dict) or message.get("type") != "message":
        raise LLMError(f"the Messages API answered something else than a message: {message!r:.200}")
    report_usage(message.get("model") or "", _usage(message.get("usage")))
    return message


async def _stream(
    transport: MessagesTransport,
    body: bytes,
    on_text: TextSink,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One streamed call: text deltas go to ``on_text``; returns the whole message as a dict.

    The first text goes to ``on_text`` as soon as it comes; after it, what arrives within
    :data:`STREAM_GATHER` goes together (a draft shows text at most every 0.3 s anyway), so a
    stream of tens of small events wakes the turn a few times instead of once an event. The
    end of the stream is not waited for: it wakes the turn at once.
    """
    async with transport.post(body, headers) as response:
        message = _Accumulator(transport, response)
        events = _SseEvents()
        content = response.content
        read = content.readany  # called directly: a stream is tens of chunks
        gathering = False
        with transport.read_timer(response):
            while True:
                if gathering:
                    await _gather(content)
                chunk = await read()
                if not chunk:
                    break
                if await _take(message, events.feed(chunk), on_text):
                    gathering = True
        await _take(message, events.end(), on_text)
        return message.finish()


async def _take(message: _Accumulator, events: list[bytes], on_text: TextSink) -> bool:
    """Add ``events`` to ``message``, their text to ``on_text`` in one piece (also the text
    before an event that fails the stream); whether there was any."""
    text = ""
    try:
        for data in events:
            text += message.add(orjson.loads(data))
    finally:
        if text:
            await on_text(text)
    return bool(text)


STREAM_GATHER = 0.1
"""Seconds a streamed answer's text is gathered for once its first text is out."""


async def _gather(content: aiohttp.StreamReader) -> None:
    """Let ``content`` fill for :data:`STREAM_GATHER` seconds, or until it ends."""
    try:
        async with asyncio.timeout(STREAM_GATHER):
            await content.wait_eof()
    except TimeoutError:
        pass


class _SseEvents:
    """The ``data`` of each server-sent event in a stream's chunks (events without data are
    skipped).

    The Messages API sends ``event:`` and ``data:`` lines, an event ending with a blank line;
    each event's data is one line of JSON, which also names the event in its ``type``.
    """

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of the events ``chunk`` completes."""
        buffer, held = self.buffer + chunk, b""
        if b"\r" in buffer:  # tolerate CRLF and CR line ends too, as SSE allows
            if buffer.endswith(b"\r"):
                buffer, held = buffer[:-1], b"\r"  # maybe the first half of a CRLF
            buffer = _lf(buffer)
        *events, rest = buffer.split(b"\n\n")
        self.buffer = rest + held
        return [data for event in events if (data := _data_of(event))]

    def end(self) -> list[bytes]:
        """The data of the events the stream's last bytes complete (a blank line or not)."""
        rest, self.buffer = _lf(self.buffer), b""
        return [data for event in rest.split(b"\n\n") if (data := _data_of(event))]


def _lf(data: bytes) -> bytes:
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def _data_of(event: bytes) -> bytes:
    """The data lines of one event, joined (SSE allows several)."""
    lines = [line for line in event.split(b"\n") if line.startswith(b"data:")]
    if len(lines) == 1:
        return lines[0][5:]
    return b"\n".join(line[5:].removeprefix(b" ") for line in lines)


class _Accumulator:
    """The message a stream builds, event by event, as plain dicts (the wire shape)."""

    def __init__(self, transport: MessagesTransport, response: aiohttp.ClientResponse) -> None:
        self.transport = transport
        self.response = response
        self.message: dict[str, Any] | None = None
        self.usage: dict[str, Any] = {}
        self.blocks: list[dict[str, Any]] = []
        self.json_parts: dict[int, list[str]] = {}
        self.stopped = False

    def add(self, event: Any) -> str:
        """Take one event in; the text it adds to the answer ("" if none)."""
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "content_block_delta":
            return self._delta(event["index"], event["delta"])
        if kind == "message_start":
            self.message = event["message"]
            self.usage = dict(self.message.get("usage") or {})
            self.blocks = self.message["content"] = list(self.message.get("content") or [])
            self._report()
        elif kind == "content_block_start":
            self.blocks.append(dict(event["content_block"]))
        elif kind == "content_block_stop":
            self._close_block(event["index"])
        elif kind == "message_delta":
            self._message_delta(event)
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            raise self._error(event)
        return ""  # ping, and event types added to the API later

    def _delta(self, index: int, delta: dict[str, Any]) -> str:
        block = self.blocks[index]
        kind = delta.get("type")
        if kind == "text_delta":
            text: str = delta["text"]
            if block.get("type") == "text":
                block["text"] = block.get("text", "") + text
                return text
        elif kind == "input_json_delta":
            self.json_parts.setdefault(index, []).append(delta["partial_json"])
        elif kind == "citations_delta" and block.get("type") == "text":
            block["citations"] = [*(block.get("citations") or ()), delta["citation"]]
        elif kind == "thinking_delta" and block.get("type") == "thinking":
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
        elif kind == "signature_delta" and block.get("type") == "thinking":
            block["signature"] = delta["signature"]
        return ""

    def _close_block(self, index: int) -> None:
        parts = self.json_parts.pop(index, None)
        if parts is not None and "".join(parts).strip():
            try:
                self.blocks[index]["input"] = orjson.loads("".join(parts))
            except orjson.JSONDecodeError as e:
                raise LLMError(f"the model's tool input is not valid JSON: {e}") from e

    def _message_delta(self, event: dict[str, Any]) -> None:
        if self.message is None:
            raise LLMError("the answer stream sent message_delta before message_start")
        delta = event.get("delta") or {}
        self.message["stop_reason"] = delta.get("stop_reason")
        self.message["stop_sequence"] = delta.get("stop_sequence")
        self.message["stop_details"] = delta.get("stop_details")
        if delta.get("container") is not None:
            self.message["container"] = delta["container"]
        # after a server-side fallback mid-stream, the dropped thinking is reported again
        changes = event.get("input_transformations", delta.get("input_transformations"))
        if changes is not None:
            self.message["input_transformations"] = changes
        # Counts on a message_delta are running totals: they replace, and absent ones keep
        # what message_start said (as the SDK does).
        for key, value in (event.get("usage") or {}).items():
            if value is not None:
                self.usage[key] = value
        self._report()

    def _report(self) -> None:
        if self.message is not None:
            report_usage(self.message.get("model") or "", _usage(self.usage))

    def _error(self, event: dict[str, Any]) -> anthropic.APIStatusError:
        """An error event in a 200 stream, as the SDK's exception for it."""
        response = self.transport.as_httpx(self.response)
        return self.transport.client._make_status_error(f"{event}", body=event, response=response)

    def finish(self) -> dict[str, Any]:
        """The whole message, once the stream ended with ``message_stop``."""
        if self.message is None or not self.stopped:
            raise LLMError("the answer stream ended before the message was complete")
        self.message["usage"] = self.usage
        return self.message


def _usage(raw: Any) -> Usage:
    """botkit's usage from the API's ``usage`` object (absent counts are zero)."""
    raw = raw if isinstance(raw, dict) else {}
    by_ttl = raw.get("cache_creation")
    server = raw.get("server_tool_use") if isinstance(raw.get("server_tool_use"), dict) else None
    return Usage(
        input_tokens=raw.get("input_tokens") or 0,
        output_tokens=raw.get("output_tokens") or 0,
        cache_creation_input_tokens=raw.get("cache_creation_input_tokens") or 0,
        cache_read_input_tokens=raw.get("cache_read_input_tokens") or 0,
        cache_write_1h_tokens=(by_ttl.get("ephemeral_1h_input_tokens") or 0)
        if isinstance(by_ttl, dict)
        else 0,
        web_search_requests=(server.get("web_search_requests") or 0) if server else 0,
        web_fetch_requests=(server.get("web_fetch_requests") or 0) if server else 0,
    )


def _to_response(raw: dict[str, Any], prefix: Callable[[], Any] | None = None) -> LLMResponse:
    """botkit's response from the API's message (as a dict): every block kept, in order;
    thinking blocks bound to the hash of ``prefix`` (what the request sent before them)."""
    model = raw.get("model") or ""
    blocks = [_block(block) for block in raw.get("content") or []]
    if prefix is not None and any(b.type in ("thinking", "redacted_thinking") for b in blocks):
        digests = block_prefixes(
            prefix(), "assistant", Message(role="assistant", content=blocks).to_api()["content"]
        )
        blocks = [
            b.model_copy(update={"model": model, "prefix_sha256": digests[i]})
            if isinstance(b, ThinkingBlock | RedactedThinkingBlock)
            else b
            for i, b in enumerate(blocks)
        ]
    stop = raw.get("stop_reason")
    stop_reason: StopReason = stop if stop in _KNOWN_STOP_REASONS else "end_turn"
    usage = _usage(raw.get("usage"))
    message = Message(role="assistant", content=blocks, usage=usage, model=model or None)
    return LLMResponse(message=message, stop_reason=stop_reason, model=model)


def _block(block: dict[str, Any]) -> ContentBlock:
    """One content block of an answer, as botkit keeps it."""
    kind = block.get("type")
    if kind == "text":
        citations = block.get("citations")
        return TextBlock(text=block.get("text", ""), citations=citations or None)
    if kind == "tool_use":
        tool_input = block.get("input")
        return ToolUseBlock(
            id=block["id"],
            name=block["name"],
            input=tool_input if isinstance(tool_input, dict) else {},
        )
    if kind == "thinking":
        return ThinkingBlock(
            thinking=block.get("thinking") or "", signature=block.get("signature") or ""
        )
    if kind == "redacted_thinking":
        return RedactedThinkingBlock(data=block.get("data") or "")
    return ServerBlock.model_validate(block)
