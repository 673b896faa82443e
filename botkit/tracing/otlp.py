"""The OTLP/HTTP span exporter botkit builds from the ``OTEL_*`` variables: the SDK's, with a
cheaper encoder (imported only with tracing on).

The SDK's ``encode_spans`` builds a protobuf object for every span, attribute and value, then
serialises them: about 35 µs of the exporter thread's CPU per span of botkit's (about 0.1 ms a
turn). :func:`encode` writes the same bytes straight from the spans in about 10 µs. Anything it
does not expect (a value of another type, an integer beyond 64 bits, a string that is not valid
UTF-8) sends the whole batch through the SDK's encoder instead, which decides what becomes of it.
Everything else (endpoint, headers, compression, retries, the exporter's own metrics) is the
SDK's exporter, unchanged.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from types import FunctionType
from typing import TYPE_CHECKING, Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.trace import SpanKind, StatusCode

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["OtlpSpanExporter", "encode"]

_SMALL = [bytes((n,)) for n in range(128)]
_FIXED32 = struct.Struct("<I").pack
_FIXED64 = struct.Struct("<Q").pack
_DOUBLE = struct.Struct("<d").pack
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64 = 2**64
_TIMES = struct.Struct("<BQBQ").pack
"""A span's start and end times, each with its field's tag."""
_REMOTE_KNOWN, _REMOTE = 0x100, 0x200
"""``SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK`` and ``SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK``."""
_LOCAL_PARENT = b"\x85\x01" + _FIXED32(_REMOTE_KNOWN)
_REMOTE_PARENT = b"\x85\x01" + _FIXED32(_REMOTE_KNOWN | _REMOTE)
"""A span's ``flags`` field (16), as the SDK's encoder sets it: whether its parent is remote."""
_KINDS = {kind.value: b"\x30" + _SMALL[kind.value + 1] for kind in SpanKind}
"""A span's ``kind`` field: the SDK's ``SpanKind`` is the protocol's, less one."""
_KEYS_KEPT = 1024
_keys: dict[str, bytes] = {}
"""An attribute key's encoded start of a ``KeyValue`` (its field 1), for the first 1,024 keys seen
(botkit's spans use a few dozen)."""


def encode(spans: Sequence[ReadableSpan]) -> bytes:
    """``spans`` as a serialised ``ExportTraceServiceRequest``, as the SDK's encoder makes it."""
    try:
        return _request(spans)
    except (TypeError, ValueError, OverflowError, UnicodeError, AttributeError):
        sent: bytes = encode_spans(spans).SerializePartialToString()
        return sent


class _Encoded:
    """What the exporter's ``encode_spans`` returns here: a request already serialised."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def SerializePartialToString(self) -> bytes:
        """The serialised request."""
        return self.data

    SerializeToString = SerializePartialToString


def _encode_spans(spans: Sequence[ReadableSpan]) -> _Encoded:
    return _Encoded(encode(spans))


def _with_encoder(export: Callable[..., Any]) -> Callable[..., Any]:
    """The SDK exporter's own ``export``, its global ``encode_spans`` resolved to botkit's.

    The function is the SDK's code with another globals dict: nothing of the SDK's module is
    changed, and every other step of an export stays the SDK's. If a version of the SDK no
    longer calls ``encode_spans``, its ``export`` is kept as it is.
    """
    code = getattr(export, "__code__", None)
    if not isinstance(export, FunctionType) or code is None or "encode_spans" not in code.co_names:
        return export
    names = {**export.__globals__, "encode_spans": _encode_spans}
    copy = FunctionType(code, names, export.__name__, export.__defaults__, export.__closure__)
    copy.__kwdefaults__ = export.__kwdefaults__
    copy.__qualname__ = export.__qualname__
    copy.__doc__ = export.__doc__
    return copy


class OtlpSpanExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP span exporter, encoding with :func:`encode`."""

    export = _with_encoder(OTLPSpanExporter.export)


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    if n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: ``tag`` (already encoded), the length, ``payload``."""
    n = len(payload)
    return tag + (_SMALL[n] if n < 0x80 else _varint(n)) + payload


def _request(spans: Sequence[ReadableSpan]) -> bytes:
    """Spans grouped by resource, then instrumentation scope, as the SDK's encoder does (by
    equality, each found once per distinct pair of objects: a resource's hash is not cheap)."""
    groups: dict[Any, dict[Any, list[bytes]]] = {}
    buckets: dict[tuple[int, int], list[bytes]] = {}
    for span in spans:
        resource, scope = span.resource, span.instrumentation_scope or None
        bucket = buckets.get((id(resource), id(scope)))
        if bucket is None:
            bucket = groups.setdefault(resource, {}).setdefault(scope, [])
            buckets[id(resource), id(scope)] = bucket
        bucket.append(_field(b"\x12", _span(span)))  # ScopeSpans.spans
    out = []
    for resource, scopes in groups.items():
        parts = [_field(b"\x0a", _attributes(b"\x0a", resource.attributes))]  # .resource
        for scope, encoded in scopes.items():
            scope_spans = [_field(b"\x0a", _scope(scope)), *encoded]
            if scope is not None and scope.schema_url:
                scope_spans.append(_field(b"\x1a", scope.schema_url.encode()))
            parts.append(_field(b"\x12", b"".join(scope_spans)))  # .scope_spans
        if resource.schema_url:
            parts.append(_field(b"\x1a", resource.schema_url.encode()))
        out.append(_field(b"\x0a", b"".join(parts)))  # ExportTraceServiceRequest.resource_spans
    return b"".join(out)


def _scope(scope: Any) -> bytes:
    """An ``InstrumentationScope``: name, version, attributes."""
    if scope is None:
        return b""
    parts = []
    if scope.name:
        parts.append(_field(b"\x0a", scope.name.encode()))
    if scope.version:
        parts.append(_field(b"\x12", scope.version.encode()))
    if scope.attributes:
        parts.append(_attributes(b"\x1a", scope.attributes))
    return b"".join(parts)


def _span(span: ReadableSpan) -> bytes:
    """One ``Span`` message, its fields in the order the SDK's encoder writes them."""
    context = span.get_span_context()
    assert context is not None
    parts = [b"\x0a\x10" + context.trace_id.to_bytes(16, "big") + b"\x12\x08"]
    parts.append(context.span_id.to_bytes(8, "big"))
    trace_state = context.trace_state
    if trace_state:
        parts.append(_field(b"\x1a", ",".join(f"{k}={v}" for k, v in trace_state.items()).encode()))
    parent = span.parent
    if parent:
        parts.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))
    if span.name:
        parts.append(_field(b"\x2a", span.name.encode()))
    parts.append(_KINDS[span.kind.value])
    start, end = span.start_time, span.end_time
    if start and end:
        parts.append(_TIMES(0x39, start, 0x41, end))
    else:
        if start:
            parts.append(b"\x39" + _FIXED64(start))
        if end:
            parts.append(b"\x41" + _FIXED64(end))
    attributes = span.attributes
    if attributes:
        parts.append(_attributes(b"\x4a", attributes))
    if span.dropped_attributes:
        parts.append(b"\x50" + _varint(span.dropped_attributes))
    for event in span.events:
        parts.append(_field(b"\x5a", _event(event)))
    if span.dropped_events:
        parts.append(b"\x60" + _varint(span.dropped_events))
    for link in span.links:
        parts.append(_field(b"\x6a", _link(link)))
    if span.dropped_links:
        parts.append(b"\x70" + _varint(span.dropped_links))
    status = span.status
    if status is not None:
        unset = status.status_code is StatusCode.UNSET and not status.description
        parts.append(b"\x7a\x00" if unset else _field(b"\x7a", _status(status)))
    parts.append(_REMOTE_PARENT if parent is not None and parent.is_remote else _LOCAL_PARENT)
    return b"".join(parts)


def _event(event: Any) -> bytes:
    parts = []
    if event.timestamp:
        parts.append(b"\x09" + _FIXED64(event.timestamp))
    if event.name:
        parts.append(_field(b"\x12", event.name.encode()))
    if event.attributes:
        parts.append(_attributes(b"\x1a", event.attributes))
    if event.dropped_attributes:
        parts.append(b"\x20" + _varint(event.dropped_attributes))
    return b"".join(parts)


def _link(link: Any) -> bytes:
    context = link.context
    parts = [
        b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),
        b"\x12\x08" + context.span_id.to_bytes(8, "big"),
    ]
    if link.attributes:
        parts.append(_attributes(b"\x22", link.attributes))
    if link.dropped_attributes:
        parts.append(b"\x28" + _varint(link.dropped_attributes))
    parts.append(b"\x35" + _FIXED32(_REMOTE_KNOWN | (_REMOTE if context.is_remote else 0)))
    return b"".join(parts)


def _status(status: Any) -> bytes:
    parts = []
    if status.description:
        parts.append(_field(b"\x12", status.description.encode()))
    code = status.status_code.value
    if code:
        parts.append(b"\x18" + _varint(code))
    return b"".join(parts)


def _attributes(tag: bytes, attributes: Mapping[str, Any]) -> bytes:
    """Each attribute as a ``KeyValue`` field ``tag`` (the common types inline: this is most of
    the work)."""
    copy = getattr(attributes, "copy", None)  # the SDK's mappings: a dict, not a lookup a key
    out = []
    for key, value in (copy() if copy is not None else attributes).items():
        kind = type(value)
        if kind is str:
            raw = value.encode()
            n = len(raw)
            encoded = b"\x0a" + (_SMALL[n] if n < 0x80 else _varint(n)) + raw
        elif kind is int and 0 <= value <= _INT64_MAX:
            encoded = b"\x18" + _varint(value)
        else:
            encoded = _value(value)
        n = len(encoded)
        pair = (_keys.get(key) or _key(key)) + b"\x12" + (_SMALL[n] if n < 0x80 else _varint(n))
        pair += encoded
        n = len(pair)
        out.append(tag + (_SMALL[n] if n < 0x80 else _varint(n)) + pair)
    return b"".join(out)


def _key(key: str) -> bytes:
    encoded = _keys.get(key)
    if encoded is None:
        encoded = _field(b"\x0a", key.encode()) if key else b""
        if len(_keys) < _KEYS_KEPT:
            _keys[key] = encoded
    return encoded


def _value(value: Any) -> bytes:
    """An ``AnyValue``, chosen by the value's type in the order the SDK's encoder tries them."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(b"\x0a", value.encode())
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise OverflowError(value)
        return b"\x18" + _varint(value % _UINT64)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, Sequence):
        return _field(b"\x2a", b"".join(_field(b"\x0a", _value(v)) for v in value))
    if isinstance(value, Mapping):
        pairs = (_key(str(k)) + _field(b"\x12", _value(v)) for k, v in value.items())
        return _field(b"\x32", b"".join(_field(b"\x0a", pair) for pair in pairs))
    raise TypeError(f"not an attribute value: {type(value)}")
