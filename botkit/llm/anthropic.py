"""``AnthropicLLM``: the Messages API through the official SDK, streamed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, get_args

import anthropic
import httpx2
import structlog

from botkit.errors import (
    ConfigError,
    LLMAuthError,
    LLMError,
    LLMOverloadedError,
    PromptTooLongError,
)
from botkit.llm.base import LLMRequest, LLMResponse, StopReason, TextSink
from botkit.types import ContentBlock, Message, TextBlock, ToolUseBlock, Usage

__all__ = ["AnthropicLLM", "AuthFailureHandler"]

log = structlog.get_logger(__name__)

CALLS_PER_CLIENT = 64
"""Calls in flight per HTTP client before another client is used."""

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
        client: anthropic.AsyncAnthropic | None = None,
        calls_per_client: int = CALLS_PER_CLIENT,
        on_auth_failure: AuthFailureHandler | None = None,
    ) -> None:
        self.model = model
        self.on_auth_failure = on_auth_failure
        """Called once when the key is rejected, and again only after a success in between."""
        self._auth_reported = False
        self.max_tokens = max_tokens
        self.prompt_caching = prompt_caching
        # The HTTP pool's bookkeeping grows with (open connections x waiting requests), so
        # hundreds of calls in flight are spread over several clients of ~64 calls each.
        shards = 1 if client or not max_concurrency else -(-max_concurrency // calls_per_client)
        self.clients = (
            [client]
            if client
            else [
                anthropic.AsyncAnthropic(
                    api_key=api_key,
                    base_url=base_url,
                    max_retries=max_retries,
                    # aiohttp (already here for aiogram) moves the bytes with far less CPU per
                    # call than the SDK's default transport.
                    http_client=anthropic.DefaultAioHttpClient(),
                )
                for _ in range(shards)
            ]
        )
        self._in_flight = [0] * len(self.clients)
        self._slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        """Send ``request``; text deltas go to ``on_text`` as they arrive."""
        params = self._params(request)
        try:
            async with self._slot(), self._least_busy() as client, _mapped_errors():
                if on_text is None:
                    raw = await client.messages.create(**params)
                else:
                    raw = await self._stream(client, params, on_text)
        except LLMAuthError as e:
            await self._report_auth_failure(e)
            raise
        self._auth_reported = False
        return _to_response(raw)

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
        client = self.clients[0].with_options(max_retries=0)
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
        """Close the HTTP clients."""
        for client in self.clients:
            await client.close()

    @asynccontextmanager
    async def _least_busy(self) -> AsyncIterator[anthropic.AsyncAnthropic]:
        index = min(range(len(self.clients)), key=self._in_flight.__getitem__)
        self._in_flight[index] += 1
        try:
            yield self.clients[index]
        finally:
            self._in_flight[index] -= 1

    async def _stream(
        self, client: anthropic.AsyncAnthropic, params: dict[str, Any], on_text: TextSink
    ) -> Any:
        async with client.messages.stream(**params) as stream:
            async for delta in stream.text_stream:
                await on_text(delta)
            return await stream.get_final_message()

    def _params(self, request: LLMRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": request.model or self.model,
            "max_tokens": request.max_tokens or self.max_tokens,
            "messages": [m.to_api() for m in request.messages],
        }
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = [t.model_dump() for t in request.tools]
        if self.prompt_caching:
            _mark_cache_points(params)
        return params

    @asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        if self._slots is None:
            yield
            return
        async with self._slots:
            yield


@asynccontextmanager
async def _mapped_errors() -> AsyncIterator[None]:
    """Turn the SDK's exceptions into botkit's, once, here."""
    try:
        yield
    except anthropic.AnthropicError as e:
        raise _mapped(e) from e
    except httpx2.TransportError as e:  # a stream cut mid-answer is not wrapped by the SDK
        raise LLMError(f"the connection to the Messages API broke: {e!r}") from e


def _mapped(e: anthropic.AnthropicError) -> LLMError:
    """botkit's exception for one of the SDK's."""
    if isinstance(e, anthropic.RateLimitError):
        return LLMOverloadedError(f"rate limited by the Messages API: {_detail(e)}")
    if isinstance(e, anthropic.APIStatusError):
        return _status_error(e)
    if isinstance(e, anthropic.APIConnectionError):
        return LLMError(f"could not reach the Messages API: {e}")
    return LLMError(str(e))


def _status_error(e: anthropic.APIStatusError) -> LLMError:
    detail = _detail(e)
    if e.status_code == 401:
        return LLMAuthError(f"the Messages API rejected ANTHROPIC_API_KEY: {detail}")
    # An overload in the middle of a stream arrives as an error event on a 200 response.
    if e.status_code == 529 or getattr(e, "type", None) == "overloaded_error":
        return LLMOverloadedError(f"the Messages API is overloaded: {detail}")
    if e.status_code in (400, 413) and "prompt is too long" in detail.lower():
        return PromptTooLongError(detail)
    return LLMError(f"Messages API error {e.status_code}: {detail}")


def _detail(e: anthropic.APIStatusError) -> str:
    body = e.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    return str(e)


_EPHEMERAL = {"type": "ephemeral"}


def _mark_cache_points(params: dict[str, Any]) -> None:
    """Cache breakpoints after the tools, the system prompt and the conversation so far.

    The next call of the same user starts with this whole prefix, so it is read from the
    cache (0.1x the price) instead of billed again; only the new messages are full price.
    """
    if params.get("tools"):
        params["tools"][-1] = {**params["tools"][-1], "cache_control": _EPHEMERAL}
    system = params.get("system")
    if isinstance(system, str):
        params["system"] = [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]
    elif isinstance(system, list) and system:
        system[-1] = {**system[-1], "cache_control": _EPHEMERAL}
    messages = params["messages"]
    if messages and messages[-1]["content"]:
        last = messages[-1]["content"]
        last[-1] = {**last[-1], "cache_control": _EPHEMERAL}


def _to_response(raw: Any) -> LLMResponse:
    blocks: list[ContentBlock] = []
    for block in raw.content:
        if block.type == "text":
            blocks.append(TextBlock(text=block.text))
        elif block.type == "tool_use":
            blocks.append(ToolUseBlock(id=block.id, name=block.name, input=dict(block.input)))
        else:
            log.warning("llm.block_ignored", block_type=block.type)
    stop_reason: StopReason = (
        raw.stop_reason if raw.stop_reason in _KNOWN_STOP_REASONS else "end_turn"
    )
    usage = Usage(
        input_tokens=raw.usage.input_tokens or 0,
        output_tokens=raw.usage.output_tokens or 0,
        cache_creation_input_tokens=raw.usage.cache_creation_input_tokens or 0,
        cache_read_input_tokens=raw.usage.cache_read_input_tokens or 0,
    )
    message = Message(role="assistant", content=blocks, usage=usage)
    return LLMResponse(message=message, stop_reason=stop_reason, model=raw.model)
