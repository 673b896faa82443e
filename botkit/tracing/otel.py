"""botkit's tracer on OpenTelemetry, in the GenAI semantic conventions (imported only when on).

Pinned: OpenTelemetry semantic conventions **v1.41.0**, ``docs/gen-ai`` (development status):
``invoke_agent {agent}`` (internal) per turn, ``chat {model}`` (client) per LLM call,
``execute_tool {tool}`` (internal) per tool call, with the ``gen_ai.*`` attributes of that
version. Token counts follow it too: ``gen_ai.usage.input_tokens`` includes the cache reads and
writes, which are also given apart. Content (``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.system_instructions``, ``gen_ai.tool.call.arguments`` and
``gen_ai.tool.call.result``) is recorded only with BOTKIT_TRACE_CONTENT=true, as the JSON the
conventions describe. Telegram Bot API requests are client spans named by their method, with
``rpc.system`` = ``telegram_bot_api``: never a URL, which would hold the token.

The gates a turn passes are one attribute of its ``invoke_agent`` span
(``botkit.gates.passed``, in order); the gate that stops a turn is also an event
(``botkit.gate.<name>``, ``botkit.gate.passed`` false), which dates it. Spans cost CPU on the
event loop and in the exporter's thread (each attribute and event is encoded): this keeps a
turn to few of them.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Link, Status, StatusCode
from opentelemetry.trace import SpanKind as OtelKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from botkit.chats import conversation_of
from botkit.tracing.base import NO_SPAN, AttributeValue, Span, SpanKind, Tracer

if TYPE_CHECKING:
    from botkit.config import Settings
    from botkit.llm.base import LLMRequest, LLMResponse
    from botkit.messengers.base import Incoming
    from botkit.types import Message, ToolResultBlock, ToolUseBlock

__all__ = ["SEMCONV_VERSION", "OtelTracer", "provider_from_environment"]

SEMCONV_VERSION = "1.41.0"
"""The version of the OpenTelemetry semantic conventions (gen-ai) these spans follow."""
PROVIDER = "anthropic"
FAILING_OUTCOMES = frozenset({"error", "overloaded"})
"""Turn outcomes that mark the ``invoke_agent`` span failed."""

UNTRACED_METHODS = frozenset({"getUpdates", "sendMessageDraft", "sendChatAction"})
"""Bot API methods sent many times a turn (or between turns), left out of traces."""
_NOTHING: AbstractContextManager[Span] = nullcontext(NO_SPAN)

_KINDS = {
    "internal": OtelKind.INTERNAL,
    "client": OtelKind.CLIENT,
    "server": OtelKind.SERVER,
    "producer": OtelKind.PRODUCER,
    "consumer": OtelKind.CONSUMER,
}
_W3C = TraceContextTextMapPropagator()
_HASHES_KEPT = 1024
"""Users whose hashed id is kept (an HMAC a turn is not free; a busy bot sees the same users)."""


class _OtelSpan:
    """A botkit ``Span`` on an OpenTelemetry span."""

    __slots__ = ("failed", "gates", "recording", "span")

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self.recording = span.is_recording()
        """``False`` when the sampler left this span out: nothing set on it is kept."""
        self.failed = False
        self.gates: list[str] | None = None
        """The gates a turn passed, set on its span when it ends."""

    def set(self, key: str, value: AttributeValue) -> None:
        """Set one attribute."""
        self.span.set_attribute(key, value)

    def set_all(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Set several attributes at once (one lock, not one each)."""
        self.span.set_attributes(attributes)

    def event(self, name: str, attributes: Mapping[str, AttributeValue] | None = None) -> None:
        """Add a timestamped event."""
        self.span.add_event(name, attributes)

    def fail(self, error_type: str) -> None:
        """Status error with ``error.type``."""
        self.failed = True
        self.span.set_attribute("error.type", error_type)
        self.span.set_status(Status(StatusCode.ERROR, error_type))


_SPAN_KEY = otel_context.create_key("botkit-span")
"""botkit's own wrapper of the current span, kept in OpenTelemetry's context beside it (one
context for both: other instrumentation nests under botkit's spans, and botkit finds its own)."""


def _current() -> _OtelSpan | None:
    """botkit's current span, if a botkit span is current."""
    return otel_context.get_value(_SPAN_KEY)  # type: ignore[return-value]


class _Active:
    """Makes a started span current for a block, and ends it there (a class, not a
    generator: this runs for every span)."""

    __slots__ = ("span", "token")

    def __init__(self, otel_span: trace.Span) -> None:
        self.span = _OtelSpan(otel_span)
        self.token: Any = None

    def __enter__(self) -> Span:
        span = self.span
        context = otel_context.set_value(_SPAN_KEY, span, trace.set_span_in_context(span.span))
        self.token = otel_context.attach(context)
        return span

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> None:
        span = self.span
        if isinstance(error, asyncio.CancelledError):
            span.event("botkit.cancelled")
        elif error is not None and not span.failed:
            span.fail(type(error).__qualname__)
        if self.token is not None:
            otel_context.detach(self.token)
        span.span.end()


class OtelTracer(Tracer):
    """Records botkit's spans with an OpenTelemetry tracer provider."""

    enabled = True

    def __init__(self, settings: Settings, provider: Any) -> None:
        self.provider = provider
        self.otel = provider.get_tracer("botkit", _botkit_version(), schema_url=_schema_url())
        self.content = settings.trace_content
        """Whether prompts, answers, tool arguments and results are recorded."""
        self.user_ids = settings.trace_user_ids
        self._key = _hash_key(settings)
        self._hashes: OrderedDict[int, str] = OrderedDict()
        self._api_host = _host(settings.telegram_api_base) or "api.telegram.org"

    # ---- spans -----------------------------------------------------------------------------

    def span(
        self,
        name: str,
        kind: SpanKind = "internal",
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> AbstractContextManager[Span]:
        """A span current while the block runs; an exception escaping it marks it failed."""
        return self._started(name, kind, attributes)

    def _started(
        self, name: str, kind: SpanKind, attributes: Mapping[str, AttributeValue] | None
    ) -> _Active:
        otel_span = self.otel.start_span(
            name, kind=_KINDS[kind], attributes=attributes, record_exception=False
        )
        return _Active(otel_span)

    def turn(
        self, message: Incoming, agent: object, group_context: str
    ) -> AbstractContextManager[Span]:
        """``invoke_agent {agent}``: one message's turn, gates to reply."""
        name = _agent_name(agent)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.agent.name": name,
            "gen_ai.conversation.id": self._conversation_id(message, group_context),
            "botkit.update_id": message.update_id,
            "botkit.chat.type": message.chat_type,
        }
        if self.user_ids:
            attributes["user.id"] = str(message.user_id)
        else:
            attributes["user.hash"] = self._hashed(message.user_id)
        links = _links(message.trace_link) if message.trace_link else None
        otel_span = self.otel.start_span(
            f"invoke_agent {name}", attributes=attributes, links=links, record_exception=False
        )
        return _Active(otel_span)

    def turn_ended(self, span: Span, outcome: str) -> None:
        """``botkit.turn.outcome`` and the gates passed; an error or overload marks it failed."""
        if not isinstance(span, _OtelSpan) or not span.recording:
            return
        attributes: dict[str, AttributeValue] = {"botkit.turn.outcome": outcome}
        if span.gates:
            attributes["botkit.gates.passed"] = span.gates
        span.set_all(attributes)
        if outcome in FAILING_OUTCOMES and not span.failed:
            span.fail(outcome)

    def gate(self, name: str, passed: bool) -> None:
        """A passed gate joins ``botkit.gates.passed`` of the turn's span; the gate that stops
        the turn is an event, ``botkit.gate.<name>`` (``botkit.gate.passed`` false)."""
        span = _current()
        if span is None or not span.recording:
            return
        if passed:
            if span.gates is None:
                span.gates = []
            span.gates.append(name)
        else:
            span.event(f"botkit.gate.{name}", {"botkit.gate.passed": False})

    def event(self, name: str, **attributes: AttributeValue) -> None:
        """An event on botkit's current span (``name``, e.g. ``botkit.approval.asked``)."""
        span = _current()
        if span is not None:
            span.event(name, attributes or None)

    def chat(self, request: LLMRequest, model: str) -> AbstractContextManager[Span]:
        """``chat {model}``: one call to the Messages API."""
        requested = request.model or model
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": requested,
        }
        if request.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = request.max_tokens
        active = self._started(f"chat {requested}", "client", attributes)
        if self.content and active.span.recording:  # a sampled-out call's prompt is not encoded
            active.span.set_all(
                {
                    "gen_ai.input.messages": _json([_message(m) for m in request.messages]),
                    "gen_ai.system_instructions": _json(_system(request.system)),
                }
            )
        return active

    def chat_answered(self, span: Span, response: LLMResponse) -> None:
        """The answer's model, finish reason and tokens (and, traced, its content)."""
        if not isinstance(span, _OtelSpan) or not span.recording:
            return  # sampled out: the answer is not even serialised
        usage = response.usage
        cache_read, cache_written = usage.cache_read_input_tokens, usage.cache_creation_input_tokens
        attributes: dict[str, AttributeValue] = {
            "gen_ai.response.model": response.model,
            "gen_ai.response.finish_reasons": [response.stop_reason],
            "gen_ai.usage.input_tokens": usage.input_tokens + cache_read + cache_written,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": cache_read,
            "gen_ai.usage.cache_creation.input_tokens": cache_written,
        }
        if self.content:
            output = {**_message(response.message), "finish_reason": response.stop_reason}
            attributes["gen_ai.output.messages"] = _json([output])
        span.set_all(attributes)

    def retried(self, attempt: int, status: int | None) -> None:
        """A retry of the running call: an event, and ``botkit.llm.retries`` so far."""
        span = _current()
        if span is None:
            return
        attributes: dict[str, AttributeValue] = {"botkit.llm.retry": attempt}
        if status is not None:
            attributes["http.response.status_code"] = status
        span.event("botkit.llm.retry", attributes)
        span.set("botkit.llm.retries", attempt)

    def tool(self, call: ToolUseBlock) -> AbstractContextManager[Span]:
        """``execute_tool {name}``: one tool call."""
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        active = self._started(f"execute_tool {call.name}", "internal", attributes)
        if self.content and active.span.recording:
            active.span.set("gen_ai.tool.call.arguments", _json(call.input))
        return active

    def tool_done(self, span: Span, result: ToolResultBlock) -> None:
        """An error result marks the span failed (``tool_error`` unless the cause is known)."""
        if result.is_error and isinstance(span, _OtelSpan) and not span.failed:
            span.fail("tool_error")
        if self.content and span.recording:
            span.set("gen_ai.tool.call.result", result.content)

    def failed(self, error: BaseException) -> None:
        """Mark botkit's current span failed with the type of ``error``."""
        span = _current()
        if span is not None:
            span.fail(type(error).__qualname__)

    def telegram(self, method: str) -> AbstractContextManager[Span]:
        """A Bot API request, named by its method (the URL is never recorded: it holds the
        token); polls, drafts and "typing…" are too many to be worth their spans."""
        if method in UNTRACED_METHODS:
            return _NOTHING
        attributes: dict[str, AttributeValue] = {
            "rpc.system": "telegram_bot_api",
            "rpc.method": method,
            "server.address": self._api_host,
        }
        return self.span(method, "client", attributes)

    # ---- across processes, and logs --------------------------------------------------------

    def carrier(self) -> dict[str, str]:
        """The current span context as ``traceparent`` (and ``tracestate``)."""
        headers: dict[str, str] = {}
        _W3C.inject(headers)
        return headers

    @contextmanager
    def resumed(self, carrier: Mapping[str, str] | None) -> Iterator[None]:
        """The block runs under the span context another process sent."""
        if not carrier:
            yield
            return
        token = otel_context.attach(_W3C.extract(dict(carrier)))
        try:
            yield
        finally:
            otel_context.detach(token)

    def log_ids(self) -> dict[str, str]:
        """The current span's ids, as hex, for log lines."""
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return {}
        return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}

    # ---- identities --------------------------------------------------------------------------

    def _hashed(self, user_id: int) -> str:
        """A keyed hash of a user id: the same in every process, not reversible without the
        key (a plain hash of a number is, by trying them all). The last users' are kept."""
        hashes = self._hashes
        digest = hashes.get(user_id)
        if digest is not None:
            hashes.move_to_end(user_id)
            return digest
        digest = hmac.new(self._key, str(user_id).encode(), hashlib.sha256).hexdigest()[:16]
        hashes[user_id] = digest
        if len(hashes) > _HASHES_KEPT:
            hashes.popitem(last=False)
        return digest

    def _conversation_id(self, message: Incoming, group_context: str) -> str:
        """The conversation's key; a private (or per-member) one names its user: hashed."""
        conversation = conversation_of(message, group_context)
        key = conversation.key
        if key is not None and "_user_" not in key:
            return key
        if self.user_ids:
            return key or f"user_{conversation.owner_id}"
        prefix = key.rsplit("_user_", 1)[0] + "_" if key else ""
        return f"{prefix}user_{self._hashed(message.user_id)}"


def provider_from_environment() -> TracerProvider:
    """A tracer provider exporting as the ``OTEL_*`` variables say (OTLP over HTTP by
    default; ``OTEL_TRACES_EXPORTER=console`` prints spans), batched off the event loop."""
    service = os.environ.get("OTEL_SERVICE_NAME") or "botkit"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    for exporter in _exporters(os.environ.get("OTEL_TRACES_EXPORTER", "otlp")):
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _exporters(names: str) -> list[SpanExporter]:
    exporters: list[SpanExporter] = []
    for name in (n.strip().lower() for n in names.split(",")):
        if name in ("otlp", "otlp_proto_http", ""):
            from botkit.tracing.otlp import OtlpSpanExporter

            exporters.append(OtlpSpanExporter())
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
        elif name != "none":
            from botkit.errors import ConfigError

            raise ConfigError(
                f"OTEL_TRACES_EXPORTER={name!r} is not supported: use otlp, console or none"
            )
    return exporters


def _links(traceparent: str) -> list[Link] | None:
    """A link to the span a ``traceparent`` names (none if it names nothing valid)."""
    context = trace.get_current_span(_W3C.extract({"traceparent": traceparent}))
    span_context = context.get_span_context()
    return [Link(span_context)] if span_context.is_valid else None


def _agent_name(agent: Any) -> str:
    """The bot's Telegram username once known (``agent`` is its messenger), else botkit."""
    me = getattr(agent, "me", None)
    return str(getattr(me, "username", None) or "botkit")


def _hash_key(settings: Settings) -> bytes:
    """The key user ids are hashed with: derived from the bot token, so every process of
    a bot agrees (and a backend holding traces cannot recompute it)."""
    token = settings.telegram_bot_token
    secret = token.get_secret_value() if token is not None else "botkit"
    return hashlib.sha256(f"botkit trace user ids\n{secret}".encode()).digest()


def _host(url: str | None) -> str | None:
    if not url:
        return None
    from urllib.parse import urlsplit

    return urlsplit(url).hostname


def _botkit_version() -> str:
    try:
        return version("botkit")
    except PackageNotFoundError:
        return "0"


def _schema_url() -> str:
    return f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


def _system(system: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``gen_ai.system_instructions``: the system prompt as text parts."""
    if isinstance(system, str):
        return [{"type": "text", "content": system}]
    return [{"type": "text", "content": part.get("text", "")} for part in system]


def _message(message: Message) -> dict[str, Any]:
    """One message in the conventions' shape: a role and its parts."""
    return {"role": message.role, "parts": [_part(block) for block in message.content]}


def _part(block: Any) -> dict[str, Any]:
    kind = block.type
    if kind == "text":
        return {"type": "text", "content": block.text}
    if kind == "tool_use":
        return {"type": "tool_call", "id": block.id, "name": block.name, "arguments": block.input}
    if kind == "tool_result":
        return {"type": "tool_call_response", "id": block.tool_use_id, "response": block.content}
    if kind in ("image", "document"):  # the bytes stay out of traces
        return {"type": "blob", "modality": kind, "mime_type": _mime(block)}
    if kind in ("thinking", "redacted_thinking"):  # the conventions' reasoning part
        summary = getattr(block, "thinking", "")
        return {"type": "reasoning", "content": summary} if summary else {"type": "reasoning"}
    return {"type": kind}


def _mime(block: Any) -> str | None:
    source = getattr(block, "source", None)
    return getattr(source, "media_type", None)
