"""Tracing: every turn as OpenTelemetry spans, or nothing at all.

The rest of botkit calls :data:`tracer` (``tracing.tracer.chat(...)``). By default it is a
:class:`Tracer` that records nothing: each call returns a shared no-op context, so without
tracing botkit imports nothing of OpenTelemetry (the anthropic SDK loads opentelemetry-api on
its own) and pays a method call per span. :func:`install`
swaps in the OpenTelemetry tracer (``botkit.tracing.otel``, imported only then) when the
``otel`` extra is installed and a standard ``OTEL_*`` variable asks for export, or when a
tracer provider is given in code.

Spans follow the OpenTelemetry GenAI semantic conventions as of semantic-conventions
v1.41.0 (``docs/gen-ai``), still in development: see ``botkit.tracing.otel``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from botkit.tracing.base import NO_SPAN, AttributeValue, Span, SpanKind, Tracer

if TYPE_CHECKING:
    from botkit.config import Settings

__all__ = [
    "NO_SPAN",
    "AttributeValue",
    "Span",
    "SpanKind",
    "Tracer",
    "add_log_ids",
    "install",
    "installed",
    "reset",
    "tracer",
    "wanted",
]

EXPORT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
"""Either set: spans are exported over OTLP (HTTP/protobuf) to that endpoint."""

tracer: Tracer = Tracer()
"""The tracer botkit calls; the no-op one until :func:`install` finds tracing wanted."""


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the standard ``OTEL_*`` variables ask for traces to be exported."""
    env = os.environ if environ is None else environ
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none" or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(exporter) or any(env.get(name) for name in EXPORT_VARIABLES)


def install(settings: Settings, provider: Any = None) -> Tracer:
    """Turn tracing on (process-wide) when wanted or ``provider`` (a TracerProvider) is given.

    Without OpenTelemetry installed, a wish from the environment is logged and ignored;
    a provider given in code needs it, of course.
    """
    global tracer
    if provider is None and (tracer.enabled or not wanted()):
        return tracer
    try:
        from botkit.tracing.otel import OtelTracer, provider_from_environment
    except ImportError as e:
        if provider is not None:
            raise
        import structlog

        structlog.get_logger(__name__).warning("tracing.unavailable", error=str(e))
        return tracer
    tracer = OtelTracer(settings, provider or provider_from_environment())
    return tracer


def reset() -> None:
    """Turn tracing off again (tests)."""
    global tracer
    tracer = Tracer()


@contextmanager
def installed(settings: Settings, provider: Any) -> Iterator[Tracer]:
    """Tracing with ``provider`` while the block runs (tests, benchmarks)."""
    try:
        yield install(settings, provider)
    finally:
        reset()


def add_log_ids(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> Any:
    """A structlog processor: ``trace_id`` and ``span_id`` of the current span on each line."""
    for key, value in tracer.log_ids().items():
        event.setdefault(key, value)
    return event
