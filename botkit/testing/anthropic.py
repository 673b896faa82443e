"""A local fake of the Anthropic Messages API that the real ``anthropic`` SDK can talk to.

Start it, point ``AsyncAnthropic`` at it and script what "Claude" answers::

    async with FakeAnthropicServer() as fake:
        client = AsyncAnthropic(base_url=fake.base_url, api_key="test")
        fake.enqueue(FakeReply.tool_use("get_weather", {"city": "Paris"}), FakeReply.text("Sunny."))
        ...  # run your agent
        assert fake.requests[1].tool_results()[0]["tool_use_id"] == ...
        await client.close()

It speaks the wire protocol of ``POST /v1/messages`` (JSON, or server-sent events with
``event:`` lines in the real order when ``stream`` is true), ``POST /v1/messages/count_tokens``,
the Message Batches endpoints (``botkit.testing._batches``: a test ends a batch with
:meth:`FakeAnthropicServer.end_batch`) and the real error shape and statuses, so the SDK's own
parsing, retries and exception classes (``OverloadedError``, ``RateLimitError``,
``BadRequestError``, ...) are exercised unchanged.

Requests are held to today's thinking contract, model by model (``botkit.testing._thinking``
holds the catalogue: ``claude-sonnet-5-5``, ``claude-opus-5-5``, ``claude-fable-5-1``,
``claude-haiku-5-5``, ``claude-sonnet-5``, ``claude-opus-5``, ``claude-haiku-4-5``; any other
name speaks the contract of Haiku 4.5): a model that thinks by default starts every answer with
a signed ``thinking`` block (empty unless ``display`` is ``summarized``; notes before a tool
call move into thinking where the model does that), checks the blocks sent back (an edited or
missing block, a block bound to a changed prefix: the real 400s; ``drop_block`` with the beta
header drops them and lists them in ``input_transformations``; another model's block is dropped
unread), and refuses what each model refuses (thinking types, effort levels, sampling
parameters, forced ``tool_choice``, prefill). ``GET /v1/models/{id}`` answers ``capabilities``.

Credentials and model names are checked only when asked: with ``api_key`` set, any other key
is answered 401 ``authentication_error`` (set :attr:`FakeAnthropicServer.api_key` mid-test to
revoke a key); with ``models`` set, any other model is answered 404 ``not_found_error``. Both
apply to ``/v1/messages`` and ``/v1/messages/count_tokens``, before any other check.

Replies come from a FIFO filled with :meth:`FakeAnthropicServer.enqueue`, then from
:attr:`FakeAnthropicServer.responder` (by default an echo). Requests are checked like the real
API checks them (missing fields, empty text blocks, ``tool_use``/``tool_result`` pairing, more
than four cache breakpoints, prompts over the context window) and answered 400 if invalid; such
requests do not consume a scripted reply. The documented media limits are enforced the same way:
a picture over 5 MB (decoded) or 8000 px a side (2000 px when a request holds more than 20), more
than 100 pictures or 100 PDF pages in one request are answered 400 ``invalid_request_error``,
a request body over 32 MB 413 ``request_too_large``.

Token usage is deterministic: one token per four characters of the JSON of the tools, the
system prompt and the messages (at least one), and of the output; a picture counts width
times height / 750 tokens and a PDF 1,500 tokens a page instead of its base64. Prompt caching
is simulated as the API documents it: each ``cache_control`` breakpoint stores the prefix
(tools, then system, then messages) up to it for its TTL (``"ttl": "5m"``, the default, or
``"1h"``; a 1-hour breakpoint after a 5-minute one is a 400), and a read refreshes the entry
for its TTL. A later request that repeats a stored prefix, found at a block at most 20 blocks
before one of its breakpoints, reports it as ``cache_read_input_tokens``, what it adds up to
its last breakpoint as ``cache_creation_input_tokens`` (split by TTL in ``cache_creation``:
1-hour writes cost 2x the input price, 5-minute ones 1.25x, reads 0.1x), the rest as
``input_tokens``. :meth:`FakeAnthropicServer.advance` moves the cache's clock (a user's pause).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import itertools
import json
import math
import random
import re
import string
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import orjson
from aiohttp import web

from botkit.testing._batches import BatchEnd, FakeBatch, FakeBatches
from botkit.testing._loopback import LoopbackServer, serve_on_loopback
from botkit.testing._thinking import (
    BINDING_BETA,
    FakeModel,
    ThinkingContract,
    model_object,
    model_of,
)

__all__ = [
    "FakeAnthropicServer",
    "FakeError",
    "FakeReply",
    "FakeRequest",
    "Responder",
    "echo_responder",
    "is_note",
]

DEFAULT_CONTEXT_WINDOW = 200_000
"""Largest prompt, in (fake) tokens, accepted before answering "prompt is too long"."""

MAX_CACHE_BREAKPOINTS = 4
"""Most blocks with ``cache_control`` one request may carry, like the real API."""

_CHARS_PER_TOKEN = 4
_TEXT_CHUNK = 20
_JSON_CHUNK = 16
_BASE62 = string.ascii_letters + string.digits
_MAX_BODY = 64 * 1024 * 1024
MAX_REQUEST_BYTES = 32 * 1024 * 1024
"""The largest request body the Messages API takes: a larger one is answered 413."""
MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_IMAGE_SIDE = 8000
MAX_IMAGE_SIDE_MANY = 2000
"""The longest side of each picture when a request holds more than 20 of them."""
MAX_IMAGES = 100
MAX_PDF_PAGES = 100
_TOKENS_PER_PDF_PAGE = 1500
_PIXELS_PER_TOKEN = 750
_AUTO = ""  # FakeReply.stop_reason placeholder: derive it from the content


def _random_id(prefix: str) -> str:
    return prefix + "".join(random.choices(_BASE62, k=22))


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _tokens(chars: int) -> int:
    return chars // _CHARS_PER_TOKEN


# ---------------------------------------------------------------------------------- public types


@dataclass(frozen=True)
class FakeReply:
    """One scripted model answer: content blocks in API shape and a stop reason.

    ``stop_reason`` defaults to ``"tool_use"`` when the content holds a ``tool_use`` block
    and to ``"end_turn"`` otherwise. ``tool_use`` blocks without an ``id`` get a fresh one.
    """

    content: list[dict[str, Any]]
    stop_reason: str = _AUTO
    hidden_chars: int = 0
    """Characters of reasoning the answer does not show (omitted thinking): billed as output."""

    def __post_init__(self) -> None:
        """Fill in tool ids and the automatic stop reason."""
        content: list[dict[str, Any]] = []
        for block in self.content:
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise TypeError(f"content blocks must be dicts with a 'type', got {block!r}")
            if block["type"] == "tool_use":
                block = {"id": _random_id("toolu_01"), "input": {}, **block}
            content.append(block)
        object.__setattr__(self, "content", content)
        if self.stop_reason == _AUTO:
            has_tool = any(block["type"] == "tool_use" for block in content)
            object.__setattr__(self, "stop_reason", "tool_use" if has_tool else "end_turn")

    @classmethod
    def text(cls, text: str, *, stop_reason: str = "end_turn") -> FakeReply:
        """A plain text answer."""
        return cls([{"type": "text", "text": text}], stop_reason)

    @classmethod
    def tool_use(
        cls,
        name: str,
        input: dict[str, Any],
        *,
        id: str | None = None,
        text: str | None = None,
    ) -> FakeReply:
        """One tool call, optionally preceded by a text block; ``id`` defaults to a fresh one."""
        content: list[dict[str, Any]] = []
        if text is not None:
            content.append({"type": "text", "text": text})
        content.append(
            {"type": "tool_use", "id": id or _random_id("toolu_01"), "name": name, "input": input}
        )
        return cls(content, "tool_use")

    @classmethod
    def tool_uses(cls, calls: list[tuple[str, dict[str, Any]]]) -> FakeReply:
        """Several parallel tool calls ``(name, input)``, each with a fresh id."""
        return cls(
            [
                {"type": "tool_use", "id": _random_id("toolu_01"), "name": name, "input": input}
                for name, input in calls
            ],
            "tool_use",
        )

    def output_chars(self) -> int:
        """Characters of generated output, the base of ``output_tokens``."""
        total = self.hidden_chars
        for block in self.content:
            if block["type"] == "text":
                total += len(str(block.get("text", "")))
            elif block["type"] == "tool_use":
                total += len(str(block.get("name", ""))) + len(_dumps(block.get("input", {})))
            elif block["type"] == "thinking":
                total += len(str(block.get("thinking", "")))
            else:
                total += len(_dumps(block))
        return total


@dataclass(frozen=True)
class FakeError:
    """One scripted API error, answered with the real error shape and HTTP status.

    ``retry_after`` (seconds) is sent as ``retry-after-ms``/``retry-after`` headers on
    retryable statuses (408, 409, 429, 5xx); the SDK ignores a zero, so zero is sent as 1 ms
    (an immediate retry). ``None`` sends no header: the SDK then backs off on its own
    (about 0.5 s, 1 s, ...). With ``mid_stream`` a streaming request gets a 200 whose event
    stream starts and then carries an ``error`` event, as the real API does when it overloads
    mid-answer; non-streaming requests get the plain HTTP error either way.
    """

    status: int
    type: str
    message: str
    retry_after: float | None = 0.0
    mid_stream: bool = False

    @classmethod
    def overloaded(cls, *, mid_stream: bool = False) -> FakeError:
        """HTTP 529 ``overloaded_error`` (the SDK raises ``OverloadedError``)."""
        return cls(529, "overloaded_error", "Overloaded", mid_stream=mid_stream)

    @classmethod
    def rate_limited(cls, *, retry_after: float | None = 0.0) -> FakeError:
        """HTTP 429 ``rate_limit_error`` (the SDK raises ``RateLimitError``)."""
        return cls(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
            retry_after=retry_after,
        )

    @classmethod
    def prompt_too_long(
        cls, tokens: int = 250_000, maximum: int = DEFAULT_CONTEXT_WINDOW
    ) -> FakeError:
        """HTTP 400 ``invalid_request_error`` "prompt is too long: N tokens > M maximum"."""
        return cls(
            400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {maximum} maximum"
        )

    @classmethod
    def invalid_request(cls, message: str) -> FakeError:
        """HTTP 400 ``invalid_request_error`` with the given message."""
        return cls(400, "invalid_request_error", message)

    @classmethod
    def authentication(cls) -> FakeError:
        """HTTP 401 ``authentication_error`` (the SDK raises ``AuthenticationError``)."""
        return cls(401, "authentication_error", "invalid x-api-key")

    @classmethod
    def model_not_found(cls, model: str) -> FakeError:
        """HTTP 404 ``not_found_error`` naming ``model`` (the SDK raises ``NotFoundError``)."""
        return cls(404, "not_found_error", f"model: {model}")

    @classmethod
    def server_error(cls, *, mid_stream: bool = False) -> FakeError:
        """HTTP 500 ``api_error`` (the SDK raises ``InternalServerError``)."""
        return cls(500, "api_error", "Internal server error", mid_stream=mid_stream)

    def body(self, request_id: str | None = None) -> dict[str, Any]:
        """The JSON error body the API sends."""
        body: dict[str, Any] = {
            "type": "error",
            "error": {"type": self.type, "message": self.message},
        }
        if request_id is not None:
            body["request_id"] = request_id
        return body


@dataclass(frozen=True)
class FakeRequest:
    """One request the fake received: the JSON body, lower-cased headers, monotonic time."""

    body: dict[str, Any]
    headers: dict[str, str]
    at: float

    @property
    def model(self) -> str:
        """The requested model name."""
        model = self.body.get("model")
        return model if isinstance(model, str) else ""

    @property
    def system(self) -> str | list[dict[str, Any]] | None:
        """The system prompt: a string, a list of text blocks, or ``None``."""
        system = self.body.get("system")
        return system if isinstance(system, str | list) else None

    @property
    def system_text(self) -> str:
        """The system prompt as plain text (text blocks joined by blank lines)."""
        system = self.system
        if isinstance(system, str):
            return system
        return "\n\n".join(_texts(system or []))

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation, in API shape."""
        messages = self.body.get("messages")
        return messages if isinstance(messages, list) else []

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tool definitions (empty if none)."""
        tools = self.body.get("tools")
        return tools if isinstance(tools, list) else []

    @property
    def tool_names(self) -> list[str]:
        """Names of the offered tools, in order."""
        return [str(tool.get("name")) for tool in self.tools if isinstance(tool, dict)]

    @property
    def stream(self) -> bool:
        """Whether a streamed answer was asked for."""
        return self.body.get("stream") is True

    @property
    def max_tokens(self) -> int | None:
        """The requested ``max_tokens``."""
        max_tokens = self.body.get("max_tokens")
        return max_tokens if isinstance(max_tokens, int) else None

    @property
    def api_key(self) -> str | None:
        """The credential sent: ``x-api-key``, or the ``Authorization: Bearer`` token."""
        if "x-api-key" in self.headers:
            return self.headers["x-api-key"]
        scheme, _, token = self.headers.get("authorization", "").partition(" ")
        return token if scheme.lower() == "bearer" and token else None

    def _last_user_blocks(self) -> list[dict[str, Any]] | str | None:
        for message in reversed(self.messages):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, str | list):
                    return content
                return None
        return None

    def last_user_text(self) -> str:
        """What the user wrote: the text of the last user message without botkit's notes (text
        blocks wholly in square brackets, such as the local time before each message); "" if
        it holds only tool results."""
        content = self._last_user_blocks()
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        texts = _texts(content)
        words = [text for text in texts if not is_note(text)]
        return "\n".join(words if words else texts)

    def tool_results(self) -> list[dict[str, Any]]:
        """The ``tool_result`` blocks of the last user message."""
        content = self._last_user_blocks()
        if not isinstance(content, list):
            return []
        return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def is_note(text: str) -> bool:
    """Whether a text block is a note botkit adds to the user's words (one bracketed line,
    such as the local time ``[Tue 24 Nov 2026 09:00 CET (Europe/Berlin)]``)."""
    return text.startswith("[") and text.endswith("]") and "\n" not in text


def _texts(blocks: list[Any]) -> list[str]:
    return [
        str(block.get("text", ""))
        for block in blocks
        if isinstance(block, dict) and block.get("type") == "text"
    ]


Answer: TypeAlias = FakeReply | FakeError
Responder: TypeAlias = Callable[[FakeRequest], Answer | Awaitable[Answer]]
"""Decides the answer to a request when no scripted reply is queued (may be async)."""


def echo_responder(request: FakeRequest) -> FakeReply:
    """The default responder: answers ``"echo: <last user text>"``."""
    return FakeReply.text(f"echo: {request.last_user_text()}")


@dataclass(frozen=True)
class _ResponderCrash(FakeError):
    """The 500 answered when the responder raised: not retried, since it would fail again."""


# ---------------------------------------------------------------------------------- accounting


@dataclass(frozen=True)
class _Segment:
    """One cacheable unit of a prompt: a tool, a system block or a message content block."""

    digest: str  # identity of the whole prefix ending with this segment
    chars: int  # characters up to and including this segment
    breakpoint: bool
    ttl: float = 0.0  # seconds a breakpoint's entry lives (300 or 3,600)


CACHE_LOOKBACK = 20
"""Blocks before a breakpoint at which the API looks for a cached prefix."""
_TTLS = {"5m": 300.0, "1h": 3600.0}


@dataclass(frozen=True)
class _Usage:
    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    new_entries: tuple[tuple[str, float], ...] = field(default=())
    """(digest, ttl) of the prefixes this request stores."""
    hit: str | None = None
    """The digest of the prefix read, whose entry the read refreshes."""
    hit_ttl: float = 0.0
    created_1h: int = 0
    """Of ``cache_creation_input_tokens``, those written for an hour."""

    def as_dict(self, output_tokens: int, server: dict[str, int] | None = None) -> dict[str, Any]:
        usage = self._as_dict(output_tokens)
        if server:
            usage["server_tool_use"] = server
        return usage

    def _as_dict(self, output_tokens: int) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.cache_creation_input_tokens - self.created_1h,
                "ephemeral_1h_input_tokens": self.created_1h,
            },
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }


def _segments(body: dict[str, Any]) -> list[_Segment]:
    """Split the prompt into tools, system blocks and message blocks, in cache-prefix order."""
    units: list[tuple[str, Any]] = []
    for tool in body.get("tools") or []:
        units.append(("tool", tool))
    system = body.get("system")
    if isinstance(system, str):
        units.append(("system", system))
    elif isinstance(system, list):
        units.extend(("system", block) for block in system)
    for index, message in enumerate(body.get("messages") or []):
        if not isinstance(message, dict):
            continue
        tag = f"message {index} {message.get('role')}"
        content = message.get("content")
        if isinstance(content, list):
            units.extend((tag, block) for block in content)
        else:
            units.append((tag, content))
    hasher = hashlib.sha256(str(body.get("model")).encode())
    segments: list[_Segment] = []
    chars = 0
    for tag, unit in units:
        control = unit.get("cache_control") if isinstance(unit, dict) else None
        if isinstance(unit, dict) and "cache_control" in unit:
            unit = {key: value for key, value in unit.items() if key != "cache_control"}
        text = _dumps(unit)
        chars += _media_chars(unit) or len(text)
        piece = f"{tag}\0{text}".encode()
        hasher.update(len(piece).to_bytes(8, "big") + piece)
        segments.append(
            _Segment(hasher.copy().hexdigest(), chars, control is not None, _ttl_of(control))
        )
    top = body.get("cache_control")
    if segments and top is not None:
        # top-level cache_control: a breakpoint on the last cacheable block
        last = segments[-1]
        segments[-1] = _Segment(last.digest, last.chars, True, _ttl_of(top))
    return segments


def _ttl_problem(body: dict[str, Any], segments: list[_Segment]) -> str | None:
    """The API's complaint about the request's cache TTLs (an unknown one, or a 1-hour
    breakpoint after a 5-minute one), or ``None``."""
    system = body.get("system")
    units: list[Any] = [*(body.get("tools") or []), *(system if isinstance(system, list) else [])]
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        units += content if isinstance(content, list) else []
    controls = [body.get("cache_control")]
    controls += [unit.get("cache_control") for unit in units if isinstance(unit, dict)]
    for control in controls:
        ttl = control.get("ttl") if isinstance(control, dict) else None
        if ttl is not None and ttl not in _TTLS:
            return f"cache_control.ttl: Input should be '5m' or '1h' (got {ttl!r})"
    ttls = [s.ttl for s in segments if s.breakpoint]
    if any(a < b for a, b in itertools.pairwise(ttls)):
        return (
            "a cache_control block with ttl='1h' cannot come after one with ttl='5m': "
            "1-hour entries must appear before 5-minute entries"
        )
    return None


def _ttl_of(control: Any) -> float:
    """A ``cache_control``'s TTL in seconds (5 minutes unless it says ``"1h"``)."""
    ttl = control.get("ttl") if isinstance(control, dict) else None
    return _TTLS.get(ttl, _TTLS["5m"]) if isinstance(ttl, str) else _TTLS["5m"]


def _media_chars(unit: Any) -> int:
    """What a picture or PDF block counts, in characters (tokens x 4), instead of its base64;
    0 for anything else."""
    if not isinstance(unit, dict):
        return 0
    if unit.get("type") == "tool_result" and isinstance(unit.get("content"), list):
        parts = unit["content"]
        media = sum(_media_chars(part) for part in parts)
        rest = [part for part in parts if not _media_chars(part)]
        return media + len(_dumps({**unit, "content": rest})) if media else 0
    data = _base64_of(unit)
    if data is None:
        return 0
    if unit["type"] == "image":
        width, height = _image_size(data) or (0, 0)
        return max(1, width * height // _PIXELS_PER_TOKEN) * _CHARS_PER_TOKEN
    return _pdf_pages(data) * _TOKENS_PER_PDF_PAGE * _CHARS_PER_TOKEN


def _base64_of(block: dict[str, Any]) -> bytes | None:
    """The decoded bytes of an image or PDF block's base64 source (``None`` if it has none)."""
    source = block.get("source")
    if block.get("type") not in ("image", "document") or not isinstance(source, dict):
        return None
    if source.get("type") != "base64":
        return None
    try:
        return base64.b64decode(str(source.get("data")), validate=True)
    except ValueError:
        return None


def _image_size(data: bytes) -> tuple[int, int] | None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size
    except Exception:
        return None


def _pdf_pages(data: bytes) -> int:
    from pypdf import PdfReader

    try:
        return len(PdfReader(io.BytesIO(data)).pages)
    except Exception:
        return 1


def _request_media_problem(body: dict[str, Any]) -> str | None:
    """The real API's complaint about the media of the request as a whole, or ``None``."""
    images: list[tuple[str, bytes]] = []
    pages = 0
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else []):
            nested = block.get("content") if isinstance(block, dict) else None
            parts = [(f"messages.{i}.content.{j}", block)]
            parts += [
                (f"messages.{i}.content.{j}.content.{k}", part)
                for k, part in enumerate(nested if isinstance(nested, list) else [])
            ]
            for where, part in parts:
                data = _base64_of(part) if isinstance(part, dict) else None
                if data is None:
                    continue
                if part["type"] == "image":
                    images.append((where, data))
                else:
                    pages += _pdf_pages(data)
    if len(images) > MAX_IMAGES:
        return f"Too many images: {len(images)} > {MAX_IMAGES} maximum images per request"
    if pages > MAX_PDF_PAGES:
        return f"A maximum of {MAX_PDF_PAGES} PDF pages may be provided."
    side = MAX_IMAGE_SIDE_MANY if len(images) > 20 else MAX_IMAGE_SIDE
    for where, data in images:
        if len(data) > MAX_IMAGE_BYTES:
            return (
                f"{where}.image.source.base64: image exceeds 5 MB maximum: {len(data)} bytes > "
                f"{MAX_IMAGE_BYTES} bytes"
            )
        size = _image_size(data)
        if size is not None and max(size) > side:
            return (
                f"{where}.image.source.base64.data: At least one of the image dimensions exceed "
                f"max allowed size: {side} pixels"
            )
    return None


def _input_tokens(segments: list[_Segment]) -> int:
    return max(1, _tokens(segments[-1].chars if segments else 0))


def _account(segments: list[_Segment], cache: dict[str, tuple[float, float]], now: float) -> _Usage:
    """Split the prompt's tokens into cache reads, cache writes and plain input.

    ``cache`` maps each stored prefix to when it expires and its TTL. A prefix is found only
    at a block within ``CACHE_LOOKBACK`` blocks before a breakpoint, as the API looks for it.
    """
    total = _input_tokens(segments)
    breakpoints = [i for i, segment in enumerate(segments) if segment.breakpoint]
    if not breakpoints:
        return _Usage(total, 0, 0)
    last = breakpoints[-1]
    looked_at = {i for b in breakpoints for i in range(max(0, b - CACHE_LOOKBACK), b + 1)}
    hit = max(
        (i for i in looked_at if cache.get(segments[i].digest, (-1.0, 0.0))[0] > now),
        default=-1,
    )
    read = _tokens(segments[hit].chars) if hit >= 0 else 0
    hit_digest = segments[hit].digest if hit >= 0 else None
    hit_ttl = cache[hit_digest][1] if hit_digest is not None else 0.0
    if last <= hit:
        return _Usage(total - read, 0, read, hit=hit_digest, hit_ttl=hit_ttl)
    created = _tokens(segments[last].chars) - read
    created_1h, start = 0, read
    for b in (b for b in breakpoints if b > hit):
        if segments[b].ttl >= _TTLS["1h"]:
            created_1h += _tokens(segments[b].chars) - start
        start = _tokens(segments[b].chars)
    entries = tuple((segments[i].digest, segments[i].ttl) for i in breakpoints if i > hit)
    return _Usage(total - read - created, created, read, entries, hit_digest, hit_ttl, created_1h)


# ---------------------------------------------------------------------------------- validation


_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
_MAGIC = {
    "image/png": (b"\x89PNG",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/jpeg": (b"\xff\xd8\xff",),
}
MAX_PDF_BYTES = 32 * 1024 * 1024


def _sniffed_image_type(data: bytes) -> str | None:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((t for t, magic in _MAGIC.items() if data.startswith(magic)), None)


def _media_problem(where: str, block: dict[str, Any]) -> str | None:
    """The real API's complaint about an image or document block, or ``None``."""
    kind = block["type"]
    source = block.get("source")
    if not isinstance(source, dict):
        return f"{where}.{kind}.source: Field required"
    source_type = source.get("type")
    if source_type == "url" or (kind == "document" and source_type == "text"):
        ok = isinstance(source.get("url" if source_type == "url" else "data"), str)
        return None if ok else f"{where}.{kind}.source.{source_type}: Field required"
    if source_type != "base64":
        return f"{where}.{kind}.source: Input tag {source_type!r} does not match any expected tag"
    media_type = source.get("media_type")
    allowed = _IMAGE_TYPES if kind == "image" else ("application/pdf",)
    if media_type not in allowed:
        expected = ", ".join(repr(t) for t in allowed)
        return f"{where}.{kind}.source.base64.media_type: Input should be {expected}"
    try:
        data = base64.b64decode(str(source.get("data")), validate=True)
    except ValueError:
        return f"{where}.{kind}.source.base64.data: invalid base64 data"
    if kind == "document":
        if not data.startswith(b"%PDF-"):
            return f"{where}.document.source.base64.data: The PDF specified was not valid."
        if len(data) > MAX_PDF_BYTES:
            return f"{where}.document.source.base64.data: PDF exceeds the maximum size of 32 MB"
        return None
    actual = _sniffed_image_type(data)
    if actual is None:
        return f"{where}.image.source.base64.data: Could not process image"
    if actual != media_type:
        return (
            f"{where}.image.source.base64.data: The image was specified using the {media_type} "
            f"media type, but the image appears to be a {actual} image"
        )
    return None


_API_TOOLS = {
    "memory_20250818": "memory",
    "web_search_20250305": "web_search",
    "web_search_20260209": "web_search",
    "web_search_20260318": "web_search",
    "web_fetch_20250910": "web_fetch",
    "web_fetch_20260209": "web_fetch",
    "web_fetch_20260318": "web_fetch",
}
"""Tool types the API defines itself, and the name each must have."""
_WEB_FIELDS = frozenset({"max_uses", "allowed_domains", "blocked_domains"})
_API_TOOL_FIELDS = {
    "memory": frozenset(),
    "web_search": _WEB_FIELDS | {"user_location"},
    "web_fetch": _WEB_FIELDS | {"citations", "max_content_tokens"},
}
"""What each of them takes besides its type and name."""


def _tool_problem(k: int, tool: dict[str, Any]) -> str | None:
    """The API's complaint about one tool definition: a custom tool needs its input schema;
    a tool the API defines (such as ``memory_20250818``) needs its own name and nothing else."""
    kind = tool.get("type")
    if kind in (None, "custom"):
        if not isinstance(tool.get("input_schema"), dict):
            return f"tools.{k}.custom.input_schema: Field required"
        return None
    if kind not in _API_TOOLS:
        return f"tools.{k}: Input tag '{kind}' found using 'type' does not match the expected tags"
    if tool["name"] != _API_TOOLS[kind]:
        return f"tools.{k}.{kind}.name: Input should be '{_API_TOOLS[kind]}'"
    allowed = {"type", "name", "cache_control"} | _API_TOOL_FIELDS[tool["name"]]
    extra = sorted(set(tool) - allowed)
    if extra:
        return f"tools.{k}.{kind}.{extra[0]}: Extra inputs are not permitted"
    if "allowed_domains" in tool and "blocked_domains" in tool:
        return f"tools.{k}.{kind}: use either allowed_domains or blocked_domains, not both"
    return None


def _validate(body: dict[str, Any], *, create: bool) -> str | None:
    """Return the real API's complaint about ``body``, or ``None`` if it is acceptable."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return "model: Field required"
    if create:
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
            return "max_tokens: Field required"
        if max_tokens < 1:
            return "max_tokens: Input should be greater than or equal to 1"
    breakpoints = 0

    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return "tools: Input should be a valid list"
        names: set[str] = set()
        for k, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                return f"tools.{k}.name: Field required"
            if tool["name"] in names:
                return "tools: Tool names must be unique."
            problem = _tool_problem(k, tool)
            if problem is not None:
                return problem
            names.add(tool["name"])
            breakpoints += tool.get("cache_control") is not None

    system = body.get("system")
    if isinstance(system, list):
        for k, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text":
                return f"system.{k}.type: Input should be 'text'"
            if not isinstance(block.get("text"), str) or not block["text"]:
                return "system: text content blocks must be non-empty"
            breakpoints += block.get("cache_control") is not None
    elif system is not None and not isinstance(system, str):
        return "system: Input should be a valid string or a valid list"

    messages = body.get("messages")
    if not isinstance(messages, list):
        return "messages: Field required"
    if not messages:
        return "messages: at least one message is required"
    pending: list[str] = []  # tool_use ids of the previous assistant message
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"messages.{i}: Input should be a valid dictionary"
        role = message.get("role")
        if role not in ("user", "assistant", "system"):
            return f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'"
        final_assistant = role == "assistant" and i == len(messages) - 1
        content = message.get("content")
        if isinstance(content, str):
            blocks: list[Any] = [{"type": "text", "text": content}] if content else []
        elif isinstance(content, list):
            blocks = content
        else:
            return f"messages.{i}.content: Input should be a valid string or a valid list"
        if not blocks and not final_assistant:
            return (
                f"messages.{i}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        if role == "system":  # the SDK's MessageParam allows text-only system messages
            for j, block in enumerate(blocks):
                if not isinstance(block, dict) or block.get("type") != "text":
                    return f"messages.{i}.content.{j}.type: Input should be 'text'"
                if not isinstance(block.get("text"), str) or not block["text"]:
                    return "messages: text content blocks must be non-empty"
                breakpoints += block.get("cache_control") is not None
            continue
        results: list[str] = []
        uses: list[str] = []
        for j, block in enumerate(blocks):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                return f"messages.{i}.content.{j}: Input should be a valid dictionary"
            kind = block["type"]
            breakpoints += block.get("cache_control") is not None
            if kind == "text":
                if not isinstance(block.get("text"), str):
                    return f"messages.{i}.content.{j}.text: Field required"
                if not block["text"]:
                    return "messages: text content blocks must be non-empty"
            elif kind == "tool_use":
                if role != "assistant":
                    return (
                        f"messages.{i}.content.{j}: tool_use blocks must be in assistant messages"
                    )
                uses.append(str(block.get("id")))
            elif kind == "tool_result":
                if role != "user":
                    return f"messages.{i}.content.{j}: tool_result blocks must be in user messages"
                tool_use_id = str(block.get("tool_use_id"))
                if tool_use_id not in pending:
                    return (
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                        f"`tool_result` blocks: {tool_use_id}. Each `tool_result` block must "
                        "have a corresponding `tool_use` block in the previous message."
                    )
                results.append(tool_use_id)
                nested = block.get("content")
                for k, part in enumerate(nested if isinstance(nested, list) else []):
                    if isinstance(part, dict) and part.get("type") == "image":
                        where = f"messages.{i}.content.{j}.content.{k}"
                        if problem := _media_problem(where, part):
                            return problem
            elif kind in ("image", "document") and (
                problem := _media_problem(f"messages.{i}.content.{j}", block)
            ):
                return problem
        missing = [tool_id for tool_id in pending if tool_id not in results]
        if missing:
            return (
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        if final_assistant and blocks:
            last = blocks[-1]
            if (
                last.get("type") == "text"
                and str(last.get("text")) != str(last.get("text")).rstrip()
            ):
                return "messages: final assistant content cannot end with trailing whitespace"
        pending = uses
    if breakpoints > MAX_CACHE_BREAKPOINTS:
        return (
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {breakpoints}."
        )
    return _request_media_problem(body)


# ---------------------------------------------------------------------------------- streaming


def _split_text(text: str, size: int = _TEXT_CHUNK) -> list[str]:
    """Cut ``text`` at word boundaries into chunks of about ``size`` characters."""
    chunks: list[str] = []
    current = ""
    for piece in re.findall(r"\S+\s*|\s+", text):
        current += piece
        if len(current) >= size:
            chunks.append(current)
            current = ""
    if current:
        chunks.append(current)
    return chunks


def _split_every(text: str, size: int = _JSON_CHUNK) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _stream_plan(
    content: list[dict[str, Any]],
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """For each block: its ``content_block_start`` payload and its deltas."""
    plan: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for block in content:
        kind = block["type"]
        if kind == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": c} for c in _split_text(str(block["text"]))]
        elif kind in ("tool_use", "server_tool_use"):
            start = {**block, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": c}
                for c in _split_every(json.dumps(block.get("input", {}), ensure_ascii=False))
            ]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": c}
                for c in _split_text(str(block.get("thinking", "")))
            ]
            deltas.append({"type": "signature_delta", "signature": str(block.get("signature", ""))})
        else:
            start, deltas = block, []
        plan.append((start, deltas))
    return plan


def _server_uses(reply: FakeReply | None) -> dict[str, int]:
    """``usage.server_tool_use`` of an answer: the searches and fetches the API ran for it."""
    names = [
        b.get("name")
        for b in (reply.content if reply is not None else [])
        if b.get("type") == "server_tool_use"
    ]
    if not names:
        return {}
    return {
        "web_search_requests": names.count("web_search"),
        "web_fetch_requests": names.count("web_fetch"),
    }


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


# ---------------------------------------------------------------------------------- the server


class FakeAnthropicServer(LoopbackServer):
    """A fake Anthropic Messages API on 127.0.0.1 for tests and benchmarks of Claude agents."""

    def __init__(
        self,
        *,
        responder: Responder | None = None,
        latency: float = 0.0,
        chunk_delay: float = 0.0,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        api_key: str | None = None,
        models: Collection[str] | None = None,
        enforce_prefix_check: bool = True,
    ) -> None:
        """Configure the fake; nothing listens until :meth:`start`.

        ``api_key`` is the only key accepted (``None``: any key); ``models`` the only model
        names known (``None``: any name).

        ``latency`` is waited before any answer starts; ``chunk_delay`` between two deltas of
        a streamed answer (a non-streamed answer waits as long as its stream would have
        taken, like the real API which answers once generation ends).

        ``first_delta_at`` maps the index of a streamed request in :attr:`requests` to the
        ``time.monotonic()`` at which the first text delta of its answer was written (for
        measuring time to first token downstream, e.g. in benchmarks).
        """
        self.responder: Responder = responder or echo_responder
        self.thinking = ThinkingContract(enforce_prefix_check=enforce_prefix_check)
        """Today's thinking contract: models that think unasked, signed blocks bound to their
        prefix, the refusals of each model (``enforce_prefix_check=False``: an account created
        before 2026-08-31, where a changed prefix passes unless the request opts in)."""
        self.latency = latency
        self.chunk_delay = chunk_delay
        self.context_window = context_window
        self.api_key = api_key
        """The one key accepted, or ``None`` for any; change it to revoke a key mid-test."""
        self.models: frozenset[str] | None = None if models is None else frozenset(models)
        """The model names known, or ``None`` for any."""
        self.base_url = ""
        self.requests: list[FakeRequest] = []
        self.count_token_requests: list[FakeRequest] = []
        self.batch_requests: list[FakeRequest] = []
        """The requests of Message Batches, as each was processed (:meth:`end_batch`)."""
        self.batches = FakeBatches(
            self.answer_batched, self._refused, _random_id, self._key_refusal
        )
        """The Message Batches taken (``batches.batches`` by id, ``batches.running``)."""
        self.responder_errors: list[Exception] = []
        self.first_delta_at: dict[int, float] = {}
        self._queue: deque[Answer] = deque()
        self._cache: dict[str, tuple[float, float]] = {}
        """Each stored prefix: when it expires (on :meth:`now`'s clock) and its TTL."""
        self.skew = 0.0
        """Seconds :meth:`advance` moved the cache's clock ahead of ``time.monotonic()``."""
        self.usages: list[dict[str, Any]] = []
        """The prompt's usage (input, cache writes by TTL, reads) of every answered request."""
        self._transformations: dict[int, list[dict[str, str]]] = {}
        self._runner: web.AppRunner | None = None
        self._in_flight: set[asyncio.Transport] = set()  # connections of running answers

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start listening on a random free port of 127.0.0.1 and set :attr:`base_url`."""
        if self._runner is not None:
            raise RuntimeError("FakeAnthropicServer is already running")
        app = web.Application(client_max_size=_MAX_BODY)
        app.router.add_post("/v1/messages", self._handle_messages)
        app.router.add_post("/v1/messages/count_tokens", self._handle_count_tokens)
        app.router.add_get("/v1/models/{model_id}", self._handle_model)
        self.batches.routes(app)
        app.router.add_route("*", "/{tail:.*}", self._handle_unknown)
        self._runner, self.base_url = await serve_on_loopback(app)
        self.batches.base_url = self.base_url

    async def stop(self) -> None:
        """Stop listening (cutting streams still in flight) and free the port."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        for transport in list(self._in_flight):  # hang up, as a crashing server would
            transport.close()
        await runner.cleanup()

    # ------------------------------------------------------------------ scripting

    def enqueue(self, *replies: FakeReply | FakeError) -> None:
        """Queue scripted answers; they are used in order, before the responder."""
        for reply in replies:
            if not isinstance(reply, FakeReply | FakeError):
                raise TypeError(f"expected FakeReply or FakeError, got {reply!r}")
        self._queue.extend(replies)

    @property
    def queued(self) -> int:
        """How many scripted answers are still waiting."""
        return len(self._queue)

    async def end_batch(
        self, batch_id: str | None = None, *, result: BatchEnd = "succeeded"
    ) -> None:
        """End a Message Batch (``None``: every running one): its requests answered as
        ``POST /v1/messages`` answers (``succeeded``, or ``errored`` when refused), or all
        ``errored``, ``expired`` or ``canceled`` as ``result`` says."""
        await self.batches.end(batch_id, result=result)

    @property
    def running_batches(self) -> list[FakeBatch]:
        """The Message Batches not ended yet, oldest first."""
        return self.batches.running

    def _refused(self, status: int, kind: str, message: str) -> web.Response:
        return self._error_response(FakeError(status, kind, message))

    def _key_refusal(self, headers: dict[str, str]) -> web.Response | None:
        if self.api_key is not None and FakeRequest({}, headers, 0.0).api_key != self.api_key:
            return self._error_response(FakeError.authentication())
        return None

    def clear_cache(self) -> None:
        """Forget every cached prompt prefix (as if the cache had expired)."""
        self._cache.clear()

    def now(self) -> float:
        """The cache's clock: ``time.monotonic()`` plus what :meth:`advance` added."""
        return time.monotonic() + self.skew

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass for the cache (a user's pause), without waiting."""
        self.skew += seconds

    def _store(self, usage: _Usage) -> None:
        """Keep the prefixes a request wrote, and refresh the one it read, for their TTL."""
        now = self.now()
        if usage.hit is not None:
            self._cache[usage.hit] = (now + usage.hit_ttl, usage.hit_ttl)
        for digest, ttl in usage.new_entries:
            self._cache[digest] = (now + ttl, ttl)
        self.usages.append(usage.as_dict(0))

    # ------------------------------------------------------------------ handlers

    async def _handle_unknown(self, request: web.Request) -> web.Response:
        return self._error_response(FakeError(404, "not_found_error", "Not Found"))

    async def _read_body(self, request: web.Request) -> dict[str, Any] | web.Response:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if len(raw) > MAX_REQUEST_BYTES:
            if isinstance(body, dict) and request.path == "/v1/messages":
                headers = {key.lower(): value for key, value in request.headers.items()}
                self.requests.append(FakeRequest(body, headers, time.monotonic()))
            message = "Request exceeds the maximum allowed number of bytes."
            return self._error_response(FakeError(413, "request_too_large", message))
        if not isinstance(body, dict):
            return self._error_response(
                FakeError.invalid_request(
                    "There was an error parsing the body of your request. "
                    "Please make sure that your request body is valid JSON."
                )
            )
        return body

    async def _handle_model(self, request: web.Request) -> web.Response:
        """``GET /v1/models/{id}``: the model with its ``capabilities`` (as documented for
        today's models; a name it does not know has the contract of Claude Haiku 4.5); 404 for
        a name not in :attr:`models` when that is set."""
        model_id = request.match_info["model_id"]
        headers = {key.lower(): value for key, value in request.headers.items()}
        recorded = FakeRequest({"model": model_id}, headers, time.monotonic())
        if self.api_key is not None and recorded.api_key != self.api_key:
            return self._error_response(FakeError.authentication())
        known = model_of(model_id)
        if self.models is not None and model_id not in self.models:
            return self._error_response(FakeError.model_not_found(model_id))
        body = model_object(known if known.id else FakeModel(model_id, frozenset(), False))
        body["id"] = model_id
        return web.json_response(body, headers=self._headers())

    async def _handle_count_tokens(self, request: web.Request) -> web.Response:
        body = await self._read_body(request)
        if isinstance(body, web.Response):
            return body
        headers = {key.lower(): value for key, value in request.headers.items()}
        recorded = FakeRequest(body, headers, time.monotonic())
        self.count_token_requests.append(recorded)
        if (refusal := self._refusal(recorded)) is not None:
            return self._error_response(refusal)
        problem = _validate(body, create=False) or self.thinking.check(body, headers).problem
        if problem is not None:
            return self._error_response(FakeError.invalid_request(problem))
        tokens = _input_tokens(_segments(body))
        return web.json_response({"input_tokens": tokens}, headers=self._headers())

    async def _handle_messages(self, request: web.Request) -> web.StreamResponse:
        transport = request.transport
        if transport is None:  # the client already left
            return web.Response(status=499)
        self._in_flight.add(transport)
        try:
            return await self._answer_messages(request)
        finally:
            self._in_flight.discard(transport)

    async def _answer_messages(self, request: web.Request) -> web.StreamResponse:
        body = await self._read_body(request)
        if isinstance(body, web.Response):
            return body
        headers = {key.lower(): value for key, value in request.headers.items()}
        recorded = FakeRequest(body, headers, time.monotonic())
        index = len(self.requests)
        self.requests.append(recorded)
        if (refusal := self._refusal(recorded)) is not None:
            return self._error_response(refusal)
        if self.latency > 0:
            await asyncio.sleep(self.latency)

        problem, segments = self._problem(body, headers, recorded)
        if problem is not None:
            return self._error_response(FakeError.invalid_request(problem))
        answer = await self._thought_answer(recorded)
        if isinstance(answer, FakeError):
            if recorded.stream and answer.mid_stream:
                usage = _account(segments, self._cache, self.now())
                return await self._stream_error(request, recorded, usage, answer)
            return self._error_response(answer)
        usage = _account(segments, self._cache, self.now())
        self._store(usage)
        if recorded.stream:
            return await self._stream_reply(request, recorded, usage, answer, index)
        plan = _stream_plan(answer.content)
        deltas = sum(len(deltas) for _, deltas in plan)
        if self.chunk_delay > 0 and deltas > 1:
            await asyncio.sleep(self.chunk_delay * (deltas - 1))
        return web.json_response(
            self._message(recorded, usage, answer, final=True), headers=self._headers()
        )

    def _problem(
        self, body: dict[str, Any], headers: dict[str, str], recorded: FakeRequest
    ) -> tuple[str | None, list[_Segment]]:
        """What the API would refuse in a create request (``None``: nothing), and its
        segments; the thinking check's transformations are kept for the answer."""
        problem = _validate(body, create=True)
        segments = _segments(body)
        if problem is None:
            problem = _ttl_problem(body, segments)
        if problem is None and _input_tokens(segments) > self.context_window:
            problem = (
                f"prompt is too long: {_input_tokens(segments)} tokens > "
                f"{self.context_window} maximum"
            )
        checked = self.thinking.check(body, headers) if problem is None else None
        if checked is not None:
            problem = checked.problem
        if problem is not None or checked is None:
            return problem or "", segments
        self._transformations[id(recorded)] = checked.transformations
        return None, segments

    async def _thought_answer(self, recorded: FakeRequest) -> Answer:
        """The next scripted answer, its thinking as the request's model writes it."""
        answer = await self._next_answer(recorded)
        if isinstance(answer, FakeReply):
            content, hidden = self.thinking.answer(recorded.body, answer.content)
            answer = FakeReply(content, answer.stop_reason, answer.hidden_chars + hidden)
        return answer

    async def answer_batched(
        self, body: dict[str, Any], headers: dict[str, str]
    ) -> dict[str, Any] | FakeError:
        """One request of a Message Batch, answered as ``POST /v1/messages`` would answer it
        (not streamed): the message, or the error its result carries."""
        recorded = FakeRequest(body, headers, time.monotonic())
        self.batch_requests.append(recorded)
        if (refusal := self._refusal(recorded)) is not None:
            return refusal
        problem, segments = self._problem(body, headers, recorded)
        if problem is not None:
            return FakeError.invalid_request(problem)
        answer = await self._thought_answer(recorded)
        if isinstance(answer, FakeError):
            return answer
        usage = _account(segments, self._cache, self.now())
        self._store(usage)
        return self._message(recorded, usage, answer, final=True)

    def _refusal(self, request: FakeRequest) -> FakeError | None:
        """A 401 for a key other than :attr:`api_key`, a 404 for a model not in :attr:`models`."""
        if self.api_key is not None and request.api_key != self.api_key:
            return FakeError.authentication()
        if self.models is not None and request.model not in self.models:
            return FakeError.model_not_found(request.model)
        return None

    async def _next_answer(self, request: FakeRequest) -> Answer:
        if self._queue:
            return self._queue.popleft()
        try:
            result = self.responder(request)
            answer = result if isinstance(result, FakeReply | FakeError) else await result
            if not isinstance(answer, FakeReply | FakeError):
                raise TypeError(f"responder returned {answer!r}, not a FakeReply or FakeError")
        except Exception as exc:
            self.responder_errors.append(exc)
            return _ResponderCrash(500, "api_error", f"the fake's responder raised {exc!r}")
        return answer

    # ------------------------------------------------------------------ answers

    def _headers(self) -> dict[str, str]:
        return {"request-id": _random_id("req_011")}

    def _error_response(self, error: FakeError) -> web.Response:
        headers = self._headers()
        retryable = error.status in (408, 409, 429) or error.status >= 500
        if isinstance(error, _ResponderCrash):
            headers["x-should-retry"] = "false"  # a bug in the test, retrying will not help
        elif retryable and error.retry_after is not None:
            millis = max(1, round(error.retry_after * 1000))
            headers["retry-after-ms"] = str(millis)
            headers["retry-after"] = str(math.ceil(error.retry_after))
        return web.json_response(
            error.body(headers["request-id"]), status=error.status, headers=headers
        )

    def _message(
        self, request: FakeRequest, usage: _Usage, reply: FakeReply | None, *, final: bool
    ) -> dict[str, Any]:
        output_tokens = max(1, _tokens(reply.output_chars())) if reply is not None else 1
        message: dict[str, Any] = {
            "id": _random_id("msg_01"),
            "type": "message",
            "role": "assistant",
            "model": request.model,
            "content": reply.content if final and reply is not None else [],
            "stop_reason": reply.stop_reason if final and reply is not None else None,
            "stop_sequence": None,
            "usage": usage.as_dict(
                output_tokens if final else 1, _server_uses(reply) if final else None
            ),
        }
        if BINDING_BETA in request.headers.get("anthropic-beta", ""):
            message["input_transformations"] = self._transformations.get(id(request), [])
        return message

    async def _start_stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                **self._headers(),
            }
        )
        await response.prepare(request)
        return response

    async def _stream_reply(
        self,
        request: web.Request,
        recorded: FakeRequest,
        usage: _Usage,
        reply: FakeReply,
        request_index: int,
    ) -> web.StreamResponse:
        response = await self._start_stream(request)
        try:
            first = True
            for data, delta in self._reply_events(recorded, usage, reply):
                if delta is not None:
                    if not first and self.chunk_delay > 0:
                        await asyncio.sleep(self.chunk_delay)
                    first = False
                await response.write(data)
                if delta == "text_delta":
                    self.first_delta_at.setdefault(request_index, time.monotonic())
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client went away mid-stream
        return response

    def _reply_events(
        self, recorded: FakeRequest, usage: _Usage, reply: FakeReply
    ) -> list[tuple[bytes, str | None]]:
        """Every event of a streamed answer, encoded once before the first is sent (so hundreds
        of streams at once cost the fake little), each with the type of delta it carries."""
        message = self._message(recorded, usage, reply, final=False)
        events: list[tuple[bytes, str | None]] = [
            (_sse("message_start", {"type": "message_start", "message": message}), None),
            (_sse("ping", {"type": "ping"}), None),
        ]
        for index, (start, deltas) in enumerate(_stream_plan(reply.content)):
            block_start = {"type": "content_block_start", "index": index, "content_block": start}
            events.append((_sse("content_block_start", block_start), None))
            events += [
                (
                    _sse(
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": delta},
                    ),
                    str(delta["type"]),
                )
                for delta in deltas
            ]
            block_stop = {"type": "content_block_stop", "index": index}
            events.append((_sse("content_block_stop", block_stop), None))
        message_delta = {
            "type": "message_delta",
            "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
            "usage": {
                "output_tokens": max(1, _tokens(reply.output_chars())),
                **({"server_tool_use": uses} if (uses := _server_uses(reply)) else {}),
            },
        }
        events.append((_sse("message_delta", message_delta), None))
        events.append((_sse("message_stop", {"type": "message_stop"}), None))
        return events

    async def _stream_error(
        self, request: web.Request, recorded: FakeRequest, usage: _Usage, error: FakeError
    ) -> web.StreamResponse:
        response = await self._start_stream(request)
        try:
            message = self._message(recorded, usage, None, final=False)
            await response.write(
                _sse("message_start", {"type": "message_start", "message": message})
            )
            await response.write(_sse("ping", {"type": "ping"}))
            await response.write(_sse("error", error.body()))
            await response.write_eof()
        except ConnectionResetError:
            pass
        return response
