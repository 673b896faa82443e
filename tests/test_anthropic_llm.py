"""AnthropicLLM posts and reads answers itself (aiohttp, orjson): it must agree with the SDK.

The SDK still decides the headers (auth), the retries, the exceptions and ``request-id``;
these tests hold what botkit sends and parses against what the SDK sends and makes of the same
bytes from the fake Messages API, and the errors against the SDK's own exceptions.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2
import pytest

import botkit.llm.anthropic as anthropic_module
from botkit import LLMAuthError, LLMError, LLMOverloadedError, Message, PromptTooLongError
from botkit.config import DEFAULT_MODEL
from botkit.llm.anthropic import AnthropicLLM, _to_response
from botkit.llm.base import LLMRequest, LLMResponse, metered
from botkit.testing.anthropic import FakeAnthropicServer, FakeError, FakeReply
from botkit.types import ToolDef

pytestmark = pytest.mark.usefixtures("llm_path")

MODEL = "claude-test"
SYSTEM = "You are terse."
TOOL = ToolDef(
    name="lookup",
    description="Looks a thing up.",
    input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
)
REPLIES = {
    "text": FakeReply.text("Hello **there**, ünïcödé 🎉 and a much longer sentence " * 5),
    "tool_use": FakeReply.tool_use("lookup", {"q": "x", "nested": {"list": [1, 2.5, None]}}),
    "text_then_tool": FakeReply.tool_use("lookup", {"q": "y"}, text="Let me look."),
    "empty_input": FakeReply.tool_use("lookup", {}),
    "thinking": FakeReply(
        [
            {"type": "thinking", "thinking": "hmm " * 30, "signature": "sig"},
            {"type": "text", "text": "Done."},
        ]
    ),
    "max_tokens": FakeReply.text("cut off here", stop_reason="max_tokens"),
}


@pytest.fixture
async def sdk(claude: FakeAnthropicServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    client = anthropic.AsyncAnthropic(api_key="k", base_url=claude.base_url, max_retries=0)
    yield client
    await client.close()


@pytest.fixture
async def llm(claude: FakeAnthropicServer) -> AsyncIterator[AnthropicLLM]:
    client = AnthropicLLM(
        api_key="k", model=MODEL, base_url=claude.base_url, max_retries=0, prompt_caching=False
    )
    yield client
    await client.close()


def request(text: str = "hi") -> LLMRequest:
    return LLMRequest(system=SYSTEM, messages=[Message.user_text(text)], tools=[TOOL])


def sdk_params(text: str = "hi") -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 4096,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
        "tools": [TOOL.model_dump()],
    }


async def ours(llm: AnthropicLLM, *, stream: bool) -> tuple[LLMResponse, list[str]]:
    deltas: list[str] = []

    async def collect(delta: str) -> None:
        deltas.append(delta)

    return await llm.complete(request(), collect if stream else None), deltas


async def theirs(sdk: anthropic.AsyncAnthropic, *, stream: bool) -> tuple[LLMResponse, list[str]]:
    if not stream:
        message = await sdk.messages.create(**sdk_params())
        return _to_response(message.model_dump()), []
    async with sdk.messages.stream(**sdk_params()) as answer:
        deltas = [delta async for delta in answer.text_stream]
        final = await answer.get_final_message()
    return _to_response(final.model_dump()), deltas


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("name", list(REPLIES))
async def test_answers_read_like_the_sdk_reads_them(
    claude: FakeAnthropicServer,
    llm: AnthropicLLM,
    sdk: anthropic.AsyncAnthropic,
    name: str,
    stream: bool,
) -> None:
    claude.enqueue(REPLIES[name], REPLIES[name])
    got, got_deltas = await ours(llm, stream=stream)
    expected, expected_deltas = await theirs(sdk, stream=stream)
    # as sent back: botkit's own records on thinking blocks (model, prefix hash) never go out
    assert got.message.to_api() == expected.message.to_api()
    assert all(block.model == MODEL for block in got.message.thinking)
    assert got.stop_reason == expected.stop_reason
    assert got.usage == expected.usage and got.usage.output_tokens > 0
    assert got.model == expected.model == MODEL
    assert grouped(got_deltas, expected_deltas)


def grouped(got: list[str], deltas: list[str]) -> bool:
    """Whether ``got`` is ``deltas`` in order, neighbours gathered together, none split."""
    rest = list(deltas)
    for piece in got:
        taken = ""
        while rest and len(taken) < len(piece):
            taken += rest.pop(0)
        if taken != piece:
            return False
    return not rest


async def test_a_slow_streams_first_text_comes_alone_the_rest_gathered_and_its_end_at_once(
    claude: FakeAnthropicServer,
    sdk: anthropic.AsyncAnthropic,
    llm_path: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if llm_path == "sdk":
        pytest.skip("the SDK's public API hands over every delta as it comes")
    monkeypatch.setattr(anthropic_module, "STREAM_GATHER", 5.0)
    claude.chunk_delay = 0.02
    reply = FakeReply.text("A paragraph that streams in many small deltas, as Claude's do. " * 4)
    claude.enqueue(reply, reply)
    # today's default model: every answer starts with a thinking block, then the text
    params = {**sdk_params(), "model": DEFAULT_MODEL, "tools": []}
    async with sdk.messages.stream(**params) as answer:
        sdk_deltas = [delta async for delta in answer.text_stream]
        assert (await answer.get_final_message()).content[0].type == "thinking"
    llm = AnthropicLLM(api_key="k", model=DEFAULT_MODEL, base_url=claude.base_url, max_retries=0)
    deltas: list[str] = []

    async def collect(delta: str) -> None:
        deltas.append(delta)

    started = asyncio.get_running_loop().time()
    try:
        got = await llm.complete(request(), collect)
    finally:
        await llm.close()
    took = asyncio.get_running_loop().time() - started
    assert len(sdk_deltas) > 10
    # the first text at once, the rest gathered
    assert deltas == [sdk_deltas[0], "".join(sdk_deltas[1:])]
    assert got.message.text == "".join(sdk_deltas) and got.message.thinking
    assert took < 2.5  # the end of the stream wakes the reader: the 5 s are not waited out


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_the_request_body_is_the_one_the_sdk_would_send(
    claude: FakeAnthropicServer, llm: AnthropicLLM, sdk: anthropic.AsyncAnthropic, stream: bool
) -> None:
    await ours(llm, stream=stream)
    await theirs(sdk, stream=stream)
    mine, sdks = claude.requests
    assert mine.body == sdks.body
    assert mine.api_key == sdks.api_key == "k"
    assert mine.headers["content-type"] == "application/json"
    # Set by the HTTP client; telemetry of the SDK's stream helper (botkit does not use it);
    # the timeout, which the SDK's create() sends as "NOT_GIVEN" (botkit: the real 600).
    unlike = {"content-length", "connection", "host", "accept-encoding"}
    unlike |= {"x-stainless-helper-method", "x-stainless-stream-helper", "x-stainless-timeout"}
    assert {k: v for k, v in mine.headers.items() if k not in unlike} == {
        k: v for k, v in sdks.headers.items() if k not in unlike
    }, "every header the SDK sends (auth, version, retry count, platform) and no other"


ERRORS = {
    "auth": (FakeError.authentication(), anthropic.AuthenticationError, LLMAuthError),
    "rate_limited": (FakeError.rate_limited(), anthropic.RateLimitError, LLMOverloadedError),
    "overloaded": (FakeError.overloaded(), anthropic.OverloadedError, LLMOverloadedError),
    "overloaded_mid_stream": (
        FakeError.overloaded(mid_stream=True),
        anthropic.APIStatusError,  # in a 200 stream: the SDK's base class, with the error type
        LLMOverloadedError,
    ),
    "server_mid_stream": (
        FakeError.server_error(mid_stream=True),
        anthropic.APIStatusError,
        LLMError,
    ),
    "prompt_too_long": (FakeError.prompt_too_long(), anthropic.BadRequestError, PromptTooLongError),
    "unknown_model": (FakeError.model_not_found(MODEL), anthropic.NotFoundError, LLMError),
}


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("name", list(ERRORS))
async def test_errors_map_as_the_sdk_raises_them_with_the_request_id(
    claude: FakeAnthropicServer,
    llm: AnthropicLLM,
    sdk: anthropic.AsyncAnthropic,
    name: str,
    stream: bool,
) -> None:
    fake, sdk_error, botkit_error = ERRORS[name]
    claude.enqueue(fake, fake)
    with pytest.raises(sdk_error):
        await theirs(sdk, stream=stream)
    with pytest.raises(botkit_error) as caught:
        await ours(llm, stream=stream)
    error = caught.value
    assert type(error) is botkit_error
    assert error.request_id is not None and error.request_id.startswith("req_")
    assert error.request_id in str(error), "operators can quote the request id to Anthropic"
    assert isinstance(error.__cause__, sdk_error)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_the_sdk_still_retries_overloads_and_rate_limits(
    claude: FakeAnthropicServer, stream: bool
) -> None:
    llm = AnthropicLLM(api_key="k", model=MODEL, base_url=claude.base_url, max_retries=2)
    try:
        claude.enqueue(FakeError.overloaded(), FakeError.rate_limited(), FakeReply.text("ok now"))
        response, _ = await ours(llm, stream=stream)
    finally:
        await llm.close()
    assert response.message.text == "ok now"
    retries = [r.headers.get("x-stainless-retry-count") for r in claude.requests]
    assert retries == ["0", "1", "2"]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_a_retry_waits_as_long_as_the_api_asks(
    claude: FakeAnthropicServer, stream: bool
) -> None:
    llm = AnthropicLLM(api_key="k", model=MODEL, base_url=claude.base_url, max_retries=1)
    try:
        claude.enqueue(FakeError.rate_limited(retry_after=1.0), FakeReply.text("ok now"))
        response, _ = await ours(llm, stream=stream)
    finally:
        await llm.close()
    assert response.message.text == "ok now"
    first, second = claude.requests
    assert second.at - first.at >= 1.0, "retry-after-ms is honoured, as the SDK honours it"


async def test_an_answer_the_api_says_not_to_retry_is_not_retried(
    claude: FakeAnthropicServer,
) -> None:
    def broken(request: object) -> FakeReply:
        raise RuntimeError("a bug in the responder")  # the fake answers 500, x-should-retry: false

    claude.responder = broken
    llm = AnthropicLLM(api_key="k", model=MODEL, base_url=claude.base_url, max_retries=2)
    try:
        with pytest.raises(LLMError) as caught:
            await ours(llm, stream=True)
    finally:
        await llm.close()
    assert len(claude.requests) == 1
    assert isinstance(caught.value.__cause__, anthropic.InternalServerError)


async def test_an_unreachable_api_is_the_sdks_connection_error_after_its_retries(
    unused_tcp_port: int,
) -> None:
    url = f"http://127.0.0.1:{unused_tcp_port}"
    sdk = anthropic.AsyncAnthropic(api_key="k", base_url=url, max_retries=1)
    llm = AnthropicLLM(api_key="k", model=MODEL, base_url=url, max_retries=1)
    try:
        with pytest.raises(anthropic.APIConnectionError) as sdk_caught:
            await sdk.messages.create(**sdk_params())
        started = asyncio.get_running_loop().time()
        with pytest.raises(LLMError, match="could not reach the Messages API") as caught:
            await ours(llm, stream=True)
        waited = asyncio.get_running_loop().time() - started
    finally:
        await llm.close()
        await sdk.close()
    assert type(caught.value.__cause__) is type(sdk_caught.value)
    assert waited >= 0.3, "one retry, after the SDK's back-off (0.5 s less jitter)"


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_a_call_slower_than_the_timeout_is_the_sdks_timeout_error(
    claude: FakeAnthropicServer, stream: bool
) -> None:
    claude.latency = 1.0
    sdk = anthropic.AsyncAnthropic(
        api_key="k", base_url=claude.base_url, max_retries=0, timeout=0.2
    )
    llm = AnthropicLLM(model=MODEL, client=sdk)
    try:
        with pytest.raises(anthropic.APITimeoutError):
            await theirs(sdk, stream=stream)
        with pytest.raises(LLMError) as caught:
            await ours(llm, stream=stream)
    finally:
        await llm.close()
    assert isinstance(caught.value.__cause__, anthropic.APITimeoutError)


async def test_a_stream_stalled_longer_than_the_read_timeout_fails_soon_after(
    claude: FakeAnthropicServer, llm_path: str
) -> None:
    claude.chunk_delay = 5.0  # the first delta comes, then nothing for 5 s
    claude.enqueue(FakeReply.text("many words " * 50))
    sdk = anthropic.AsyncAnthropic(api_key="k", base_url=claude.base_url, timeout=0.3)
    llm = AnthropicLLM(model=MODEL, client=sdk)
    try:
        deltas: list[str] = []

        async def collect(delta: str) -> None:
            deltas.append(delta)

        started = asyncio.get_running_loop().time()
        with pytest.raises(LLMError, match="broke") as caught:
            await asyncio.wait_for(llm.complete(request(), collect), 4)
        waited = asyncio.get_running_loop().time() - started
    finally:
        await llm.close()
    assert deltas, "the stall came after the answer had started"
    # aiohttp's timeout on the fast path, httpx's through the SDK
    timeout_error = TimeoutError if llm_path == "fast" else httpx2.ReadTimeout
    assert isinstance(caught.value.__cause__, timeout_error)
    assert 0.3 <= waited < 1.5, waited


async def test_a_slow_stream_is_not_cut_by_the_read_timeout(claude: FakeAnthropicServer) -> None:
    claude.chunk_delay = 0.1  # each pause under the 0.3 s timeout, the whole answer ~1 s
    claude.enqueue(FakeReply.text("many words " * 30))
    sdk = anthropic.AsyncAnthropic(api_key="k", base_url=claude.base_url, timeout=0.3)
    llm = AnthropicLLM(model=MODEL, client=sdk)
    try:
        started = asyncio.get_running_loop().time()
        answer, deltas = await ours(llm, stream=True)
        took = asyncio.get_running_loop().time() - started
    finally:
        await llm.close()
    assert took > 0.6, "the answer took longer than the timeout in all"
    assert "".join(deltas) == answer.message.text == "many words " * 30


async def test_a_stream_cut_mid_answer_is_an_llm_error(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    claude.chunk_delay = 0.2
    claude.enqueue(FakeReply.text("many words " * 50))
    deltas: list[str] = []

    async def collect(delta: str) -> None:
        deltas.append(delta)
        if len(deltas) == 2:
            asyncio.get_running_loop().call_soon(asyncio.ensure_future, claude.stop())

    with metered() as meter, pytest.raises(LLMError):
        await llm.complete(request(), collect)
    assert meter.usage.input_tokens > 0, "what the cut call used is known"


async def test_a_cancelled_stream_reports_the_usage_seen_so_far(
    claude: FakeAnthropicServer, llm: AnthropicLLM
) -> None:
    claude.chunk_delay = 0.2
    claude.enqueue(FakeReply.text("many words " * 50))
    started = asyncio.Event()

    async def collect(delta: str) -> None:
        started.set()

    with metered() as meter:
        call = asyncio.create_task(llm.complete(request("a long question " * 10), collect))
        await asyncio.wait_for(started.wait(), 10)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    assert meter.model == MODEL
    assert meter.usage.input_tokens >= len("a long question " * 10) // 4
    assert meter.usage.output_tokens >= 1


async def test_calls_go_through_the_proxy_the_environment_names(
    claude: FakeAnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fake stands in for the proxy: a proxied request names the real host in its
    # request line, which the fake's router reads like any other path.
    monkeypatch.setenv("HTTP_PROXY", claude.base_url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    llm = AnthropicLLM(api_key="k", model=MODEL, base_url="http://api.example.invalid")
    try:
        claude.enqueue(FakeReply.text("through the proxy"))
        response, _ = await ours(llm, stream=True)
    finally:
        await llm.close()
    assert response.message.text == "through the proxy"
    assert claude.requests[0].headers["host"] == "api.example.invalid"
