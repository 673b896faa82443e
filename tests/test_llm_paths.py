"""The fast LLM path never breaks an install, and reads every stream as the SDK reads it.

``MessagesTransport`` leans on private names of the anthropic SDK and aiohttp: a release that
renames one must send calls through the SDK's public API, with one warning line. And botkit's
own stream reader must build the very message the SDK's accumulator builds from the same
bytes, for any sequence of events (hypothesis writes them): text, tool input as partial JSON,
thinking with its signature, server tool blocks, citations, ``pause_turn``, an error mid-stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from botkit import LLMError, Message
from botkit.llm import internals
from botkit.llm.anthropic import AnthropicLLM, _stream
from botkit.llm.base import LLMRequest
from botkit.testing.anthropic import FakeAnthropicServer, FakeReply

MODEL = "claude-test"


# ------------------------------------------------------------------ the check and the fallback


def test_this_install_has_every_private_name_the_fast_path_uses() -> None:
    found = internals.check.__wrapped__()
    assert found.missing == (), "the pinned SDK and aiohttp have them all"
    assert found.fast_path and found.own_read_timer and found.own_proxy_lookup


async def test_a_renamed_sdk_name_sends_calls_through_the_sdk_with_one_warning(
    claude: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    renamed = (*internals.SDK_CLIENT_METHODS, "_renamed_in_a_later_release")
    monkeypatch.setattr(internals, "SDK_CLIENT_METHODS", renamed)
    with capture_logs() as logs:
        found = internals.check.__wrapped__()
    assert found.missing_sdk == ("anthropic.AsyncAnthropic._renamed_in_a_later_release",)
    assert not found.fast_path
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1 and warnings[0]["event"] == "llm.fast_path_degraded"
    assert warnings[0]["missing"] == list(found.missing_sdk)
    assert "public messages API" in warnings[0]["effect"]

    monkeypatch.setattr(internals, "check", lambda: found)
    llm = AnthropicLLM(api_key="k", model=MODEL, base_url=claude.base_url)
    deltas: list[str] = []

    async def collect(delta: str) -> None:
        deltas.append(delta)

    try:
        assert llm.transport is None
        claude.enqueue(FakeReply.text("still **answered**"), FakeReply.tool_use("lookup", {"q": 1}))
        streamed = await llm.complete(_request(), collect)
        whole = await llm.complete(_request())
    finally:
        await llm.close()
    assert streamed.message.text == "".join(deltas) == "still **answered**"
    assert whole.stop_reason == "tool_use" and whole.message.tool_uses[0].input == {"q": 1}
    assert [r.headers.get("x-stainless-retry-count") for r in claude.requests] == ["0", "0"]


async def test_renamed_aiohttp_internals_leave_aiohttp_its_own_timer_and_proxy_lookup(
    claude: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        internals, "AIOHTTP_TIMER_NAMES", ("aiohttp.client_proto.ResponseHandler.renamed",)
    )
    monkeypatch.setattr(internals, "AIOHTTP_PROXY_NAMES", ("aiohttp.helpers.renamed",))
    with capture_logs() as logs:
        found = internals.check.__wrapped__()
    assert found.fast_path and not found.own_read_timer and not found.own_proxy_lookup
    assert [e["event"] for e in logs] == ["llm.fast_path_degraded"]
    monkeypatch.setattr(internals, "check", lambda: found)
    claude.chunk_delay = 5.0  # a stall after the first delta: aiohttp's own timer must see it
    claude.enqueue(FakeReply.text("many words " * 50))
    sdk = anthropic.AsyncAnthropic(api_key="k", base_url=claude.base_url, timeout=0.3)
    llm = AnthropicLLM(model=MODEL, client=sdk)

    deltas: list[str] = []

    async def collect(delta: str) -> None:
        deltas.append(delta)

    try:
        assert llm.transport is not None and llm.transport._proxy is None
        started = asyncio.get_running_loop().time()
        with pytest.raises(LLMError, match="broke") as caught:
            await asyncio.wait_for(llm.complete(_request(), collect), 4)
        waited = asyncio.get_running_loop().time() - started
    finally:
        await llm.close()
    assert deltas, "the stall came after the answer had started"
    assert isinstance(caught.value.__cause__, TimeoutError)
    assert 0.3 <= waited < 1.5, waited


# ------------------------------------------------------------------ the differential test

_TEXT = st.text(max_size=12)
_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_TOOL_INPUTS = st.dictionaries(_TEXT, _JSON_VALUES, max_size=4)
_USAGE_COUNTS = st.integers(min_value=0, max_value=100_000)


def _pieces(text: str, cuts: list[int]) -> list[str]:
    """``text`` cut at the given offsets (the API sends an empty first piece sometimes)."""
    bounds = sorted({min(c, len(text)) for c in cuts})
    out, start = [], 0
    for bound in [*bounds, len(text)]:
        out.append(text[start:bound])
        start = bound
    return out


@st.composite
def _text_block(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    deltas: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            deltas.append({"type": "text_delta", "text": draw(st.text(min_size=1, max_size=10))})
        else:
            citation = {
                "type": "web_search_result_location",
                "cited_text": draw(_TEXT),
                "url": "https://example.com/" + draw(st.text("abc", max_size=4)),
                "title": draw(_TEXT),
                "encrypted_index": "ix",
            }
            deltas.append({"type": "citations_delta", "citation": citation})
    start: dict[str, Any] = {"type": "text", "text": ""}
    if draw(st.booleans()):
        start["citations"] = None
    return start, deltas


@st.composite
def _tool_block(draw: st.DrawFn, kind: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    name = "lookup" if kind == "tool_use" else "web_search"
    prefix = "toolu_" if kind == "tool_use" else "srvtoolu_"
    start = {
        "type": kind,
        "id": prefix + draw(st.text("abc123", min_size=1, max_size=6)),
        "name": name,
        "input": {},
    }
    tool_input = draw(_TOOL_INPUTS)
    if not tool_input and draw(st.booleans()):
        return start, []  # no input at all: the block's own {} stays
    encoded = json.dumps(tool_input, ensure_ascii=draw(st.booleans()))
    cuts = draw(st.lists(st.integers(0, len(encoded)), max_size=5))
    pieces = _pieces(encoded, [0, *cuts] if draw(st.booleans()) else cuts)
    return start, [{"type": "input_json_delta", "partial_json": p} for p in pieces]


@st.composite
def _thinking_block(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    thoughts = draw(st.lists(st.text(min_size=1, max_size=10), max_size=3))
    deltas: list[dict[str, Any]] = [{"type": "thinking_delta", "thinking": t} for t in thoughts]
    deltas.append({"type": "signature_delta", "signature": draw(st.text("xyz=", min_size=1))})
    return {"type": "thinking", "thinking": "", "signature": ""}, deltas


@st.composite
def _search_result_block(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    results = [
        {
            "type": "web_search_result",
            "url": f"https://example.com/{i}",
            "title": draw(_TEXT),
            "encrypted_content": "enc",
            "page_age": draw(st.none() | st.just("2 days")),
        }
        for i in range(draw(st.integers(0, 2)))
    ]
    return {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": results}, []


_BLOCKS = st.one_of(
    _text_block(),
    _tool_block("tool_use"),
    _tool_block("server_tool_use"),
    _thinking_block(),
    _search_result_block(),
)


@st.composite
def _streams(draw: st.DrawFn) -> list[dict[str, Any]]:
    """One answer's events in the API's order, pings anywhere, maybe an error event."""
    usage = {
        "input_tokens": draw(_USAGE_COUNTS),
        "output_tokens": 1,
        "cache_creation_input_tokens": draw(st.none() | _USAGE_COUNTS),
        "cache_read_input_tokens": draw(st.none() | _USAGE_COUNTS),
    }
    start_message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start_message}]
    for index, (start, deltas) in enumerate(draw(st.lists(_BLOCKS, max_size=4))):
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    stop = draw(st.sampled_from(["end_turn", "tool_use", "max_tokens", "pause_turn", "refusal"]))
    final_usage: dict[str, Any] = {"output_tokens": draw(_USAGE_COUNTS)}
    if draw(st.booleans()):
        final_usage["input_tokens"] = draw(_USAGE_COUNTS)
        final_usage["cache_read_input_tokens"] = draw(_USAGE_COUNTS)
    if draw(st.booleans()):
        final_usage["server_tool_use"] = {
            "web_search_requests": draw(st.integers(0, 3)),
            "web_fetch_requests": 0,
        }
    delta = {"stop_reason": stop, "stop_sequence": None}
    events += [{"type": "message_delta", "delta": delta, "usage": final_usage}]
    events.append({"type": "message_stop"})
    for _ in range(draw(st.integers(0, 2))):
        events.insert(draw(st.integers(1, len(events) - 1)), {"type": "ping"})
    if draw(st.integers(0, 4)) == 0:
        error = draw(st.sampled_from(["overloaded_error", "api_error", "invalid_request_error"]))
        at = draw(st.integers(1, len(events) - 1))
        events.insert(at, {"type": "error", "error": {"type": error, "message": "it broke"}})
    return events


def _sse(events: list[dict[str, Any]], end: str = "\n") -> bytes:
    """The events as the API streams them, each line ended with ``end`` (SSE allows LF, CRLF
    and CR)."""
    return b"".join(
        f"event: {e['type']}{end}data: {json.dumps(e)}{end}{end}".encode() for e in events
    )


class _Replay:
    """An HTTP server that answers every ``POST /v1/messages`` with the bytes it holds, in the
    chunks it is given."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/messages", self._answer)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"content-type": "text/event-stream", "request-id": "req_replay"}
        )
        await response.prepare(request)
        for chunk in self.chunks:
            await response.write(chunk)
        await response.write_eof()
        return response


@pytest.fixture(scope="module")
def replay_loop() -> Iterator[tuple[asyncio.Runner, _Replay, AnthropicLLM]]:
    """One event loop, replay server and client for all of hypothesis's examples."""
    with asyncio.Runner() as runner:
        replay = _Replay()
        runner.run(replay.start())
        sdk = anthropic.AsyncAnthropic(api_key="k", base_url=replay.base_url, max_retries=0)
        llm = AnthropicLLM(model=MODEL, client=sdk)
        yield runner, replay, llm
        runner.run(llm.close())
        runner.run(replay.stop())


def _request() -> LLMRequest:
    return LLMRequest(system="Be brief.", messages=[Message.user_text("hi")])


async def _botkit_reads(llm: AnthropicLLM) -> tuple[Any, list[str]]:
    deltas: list[str] = []

    async def collect(delta: str) -> None:
        deltas.append(delta)

    try:
        body = json.dumps({"model": MODEL, "max_tokens": 10, "messages": [], "stream": True})
        return await _stream(_transport(llm), body.encode(), collect), deltas
    except anthropic.APIStatusError as e:
        return e, deltas


async def _sdk_reads(sdk: anthropic.AsyncAnthropic) -> tuple[Any, list[str]]:
    deltas: list[str] = []
    try:
        async with sdk.messages.stream(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        ) as answer:
            async for event in answer:
                if event.type == "text":
                    deltas.append(event.text)
            return await answer.get_final_message(), deltas
    except anthropic.APIStatusError as e:
        return e, deltas


def _transport(llm: AnthropicLLM) -> Any:
    assert llm.transport is not None, "the fast path"
    return llm.transport


def _same_message(ours: dict[str, Any], theirs: anthropic.types.Message) -> None:
    """Both as the SDK's ``Message`` with every field, so an absent field and its default
    compare equal but every value must agree."""
    normal = anthropic.types.Message.model_validate
    assert normal(ours).to_dict(exclude_unset=False) == normal(theirs.to_dict()).to_dict(
        exclude_unset=False
    )


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    events=_streams(),
    cuts=st.lists(st.integers(min_value=0), max_size=6),
    end=st.sampled_from(["\n", "\r\n", "\r"]),
)
def test_botkit_builds_the_message_the_sdk_builds_from_the_same_stream(
    replay_loop: tuple[asyncio.Runner, _Replay, AnthropicLLM],
    events: list[dict[str, Any]],
    cuts: list[int],
    end: str,
) -> None:
    runner, replay, llm = replay_loop
    body = _sse(events, end)
    # the bytes arrive cut anywhere: mid-line, mid-character, between events
    replay.chunks = [
        piece.encode("latin-1")
        for piece in _pieces(body.decode("latin-1"), [c % (len(body) + 1) for c in cuts])
        if piece
    ]
    ours, our_deltas = runner.run(_botkit_reads(llm))
    theirs, their_deltas = runner.run(_sdk_reads(llm.client))
    if isinstance(theirs, Exception):
        assert type(ours) is type(theirs), (ours, theirs)
        assert ours.body == theirs.body and str(ours) == str(theirs)
    else:
        assert isinstance(ours, dict), ours
        _same_message(ours, theirs)
    # the text as the SDK streams it, neighbouring deltas gathered together, none split
    assert "".join(our_deltas) == "".join(their_deltas)
    assert set(_ends(our_deltas)) <= set(_ends(their_deltas))


def _ends(deltas: list[str]) -> list[int]:
    """Where each delta ends in the text they make."""
    ends, at = [], 0
    for delta in deltas:
        at += len(delta)
        ends.append(at)
    return ends
