"""botkit's OTLP encoder: the SDK's exporter sends, byte for byte, what the SDK's encoder made."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from botkit.tracing import otel
from botkit.tracing.otlp import OtlpSpanExporter, encode

REMOTE = {
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "tracestate": "vendor=one,other=two",
}


def provider(exporter: InMemorySpanExporter, service: str) -> TracerProvider:
    limits = SpanLimits(max_span_attributes=40, max_events=3, max_links=2)
    made = TracerProvider(resource=Resource.create({"service.name": service}), span_limits=limits)
    made.add_span_processor(SimpleSpanProcessor(exporter))
    return made


def every_kind_of_span() -> Sequence[ReadableSpan]:
    """Spans with every field the encoder writes: two resources, scopes with and without a
    version, schema or attributes, remote and local parents, links, events, statuses, drops."""
    exporter = InMemorySpanExporter()
    first, second = provider(exporter, "one"), provider(exporter, "two")
    botkit = first.get_tracer("botkit", "1.2.3", schema_url="https://opentelemetry.io/schemas/1")
    bare = first.get_tracer("bare")
    scoped = second.get_tracer("other", attributes={"scope.flag": True, "scope.n": 3})
    values: dict[str, Any] = {
        "text": "héllo ✓",
        "empty": "",
        "long": "x" * 300,
        "yes": True,
        "no": False,
        "zero": 0,
        "negative": -42,
        "int64": 2**63 - 1,
        "int64.min": -(2**63),
        "big": 2**40,
        "float": 1.5,
        "nan": math.nan,
        "bytes": b"\x00\xff",
        "strings": ["a", "", "ü"],
        "ints": (1, -2, 3),
        "mixed": [True, 2.5],
        "none.in.list": ["a", None],
        "empty.list": [],
    }
    remote = trace.set_span_in_context(
        trace.get_current_span(TraceContextTextMapPropagator().extract(REMOTE))
    )
    link_context = trace.get_current_span(
        TraceContextTextMapPropagator().extract(REMOTE)
    ).get_span_context()
    with botkit.start_as_current_span("root", kind=SpanKind.SERVER, attributes=values) as root:
        root.add_event("plain")
        root.add_event("dated", {"n": 1, "why": "because"}, timestamp=1_700_000_000_000_000_000)
        with botkit.start_as_current_span("child", kind=SpanKind.CLIENT) as child:
            child.set_status(Status(StatusCode.ERROR, "it broke"))
            child.set_attribute("error.type", "ValueError")
        with bare.start_as_current_span("", kind=SpanKind.PRODUCER) as unnamed:
            unnamed.set_status(StatusCode.OK)
    linked = [Link(link_context, {"why": "scheduled"}), Link(root.get_span_context())]
    with scoped.start_as_current_span(
        "remote child", context=remote, kind=SpanKind.CONSUMER, links=linked
    ) as far:
        for n in range(60):  # beyond the limits: counted as dropped
            far.set_attribute(f"key.{n}", n)
        for n in range(5):
            far.add_event(f"event {n}")
    with botkit.start_as_current_span("many links", links=[*linked, Link(link_context)]):
        pass
    with botkit.start_as_current_span("internal"):
        pass
    return exporter.get_finished_spans()


def test_every_kind_of_span_is_encoded_as_the_sdk_encodes_it() -> None:
    spans = every_kind_of_span()
    assert len(spans) == 6
    assert any(span.dropped_attributes and span.dropped_events for span in spans)
    assert encode(spans) == encode_spans(spans).SerializePartialToString()


def test_what_the_encoder_does_not_expect_goes_through_the_sdks_encoder(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exporter = InMemorySpanExporter()
    tracer = provider(exporter, "one").get_tracer("botkit")
    with tracer.start_as_current_span("odd") as span:
        span.set_attribute("fine", 1)
        span.set_attribute("huge", 2**70)  # beyond int64: the SDK's encoder drops it, and says so
    spans = exporter.get_finished_spans()
    sent = encode(spans)
    assert sent == encode_spans(spans).SerializePartialToString()
    assert b"huge" not in sent
    assert b"fine" in sent


def test_more_keys_than_the_encoder_keeps_are_all_encoded() -> None:
    exporter = InMemorySpanExporter()
    tracer = provider(exporter, "bot").get_tracer("botkit")
    for n in range(2):  # each key twice: once new, once kept (or not: past the keys kept)
        for first in range(0, 1200, 40):
            attributes = {f"key.{k}": k * n for k in range(first, first + 40)}
            with tracer.start_as_current_span("many keys", attributes=attributes):
                pass
    spans = exporter.get_finished_spans()
    assert encode(spans) == encode_spans(spans).SerializePartialToString()


def test_the_exporter_botkit_builds_encodes_with_botkits_encoder() -> None:
    [exporter] = otel._exporters("otlp")  # what OTEL_EXPORTER_OTLP_ENDPOINT gets
    try:
        assert type(exporter) is OtlpSpanExporter
        # The installed SDK still encodes through ``encode_spans``: its export is swapped.
        assert OtlpSpanExporter.export is not OTLPSpanExporter.export
        assert OtlpSpanExporter.export.__code__ is OTLPSpanExporter.export.__code__
        assert OtlpSpanExporter.export.__globals__["encode_spans"] is not encode_spans
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]
