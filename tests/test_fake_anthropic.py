"""The fake Anthropic Messages API, driven by the real ``anthropic`` SDK."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import httpx2
import pytest
from anthropic.types import Message, TextBlock, ToolUseBlock

from botkit.testing.anthropic import (
    FakeAnthropicServer,
    FakeError,
    FakeReply,
    FakeRequest,
)
from botkit.testing.telegram import TINY_PNG

MODEL = "claude-test-1"
LONG_TEXT = (
    "The quick brown fox jumps over the lazy dog, then it naps in the sun "
    "while the dog wonders what just happened to its afternoon."
)
WEATHER_TOOL: Any = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer() as server:
        yield server


@pytest.fixture
async def client(fake: FakeAnthropicServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    client = anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="test", max_retries=0)
    yield client
    await client.close()


def user(text: str) -> Any:
    """A one-message conversation (typed ``Any``: the SDK wants its TypedDicts)."""
    return [{"role": "user", "content": text}]


async def ask(client: anthropic.AsyncAnthropic, text: str = "hi", **kwargs: Any) -> Message:
    message = await client.messages.create(
        model=MODEL, max_tokens=256, messages=kwargs.pop("messages", user(text)), **kwargs
    )
    assert isinstance(message, Message)
    return message


def text_of(message: Message) -> str:
    return "".join(block.text for block in message.content if isinstance(block, TextBlock))


# ------------------------------------------------------------------ answers


async def test_create_text(fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic) -> None:
    fake.enqueue(FakeReply.text("Hello there!"))
    message = await ask(client)
    assert isinstance(message, Message)
    assert message.id.startswith("msg_")
    assert message.type == "message" and message.role == "assistant"
    assert message.model == MODEL
    assert [type(b) for b in message.content] == [TextBlock]
    assert text_of(message) == "Hello there!"
    assert message.stop_reason == "end_turn"
    assert message.stop_sequence is None
    assert message.usage.input_tokens >= 1
    assert message.usage.output_tokens == len("Hello there!") // 4
    assert message.usage.cache_read_input_tokens == 0
    assert message.usage.cache_creation_input_tokens == 0


async def test_stream_text_arrives_in_several_deltas(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    fake.enqueue(FakeReply.text(LONG_TEXT))
    deltas: list[str] = []
    async with client.messages.stream(model=MODEL, max_tokens=256, messages=user("hi")) as s:
        async for text in s.text_stream:
            deltas.append(text)
        final = await s.get_final_message()
    assert len(deltas) > 3
    assert "".join(deltas) == LONG_TEXT
    assert text_of(final) == LONG_TEXT
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == len(LONG_TEXT) // 4
    assert final.usage.input_tokens >= 1
    assert fake.requests[0].stream


async def test_create_stream_true_sends_events_in_the_real_order(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    fake.enqueue(FakeReply.tool_use("get_weather", {"city": "Paris"}, text=LONG_TEXT))
    stream = await client.messages.create(
        model=MODEL, max_tokens=256, messages=user("weather?"), stream=True
    )
    events: list[Any] = [event async for event in stream]
    kinds = [event.type for event in events]
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert "ping" not in kinds  # the SDK drops pings
    starts = [e for e in events if e.type == "content_block_start"]
    assert [e.content_block.type for e in starts] == ["text", "tool_use"]
    assert [e.index for e in events if e.type == "content_block_stop"] == [0, 1]
    text = "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert text == LONG_TEXT
    assert any(
        e.type == "content_block_delta" and e.delta.type == "input_json_delta" for e in events
    )
    start, delta = events[0], events[-2]
    assert start.type == "message_start" and delta.type == "message_delta"
    assert start.message.stop_reason is None and start.message.content == []
    assert delta.delta.stop_reason == "tool_use"
    assert delta.usage.output_tokens > 1


async def test_raw_wire_format(fake: FakeAnthropicServer) -> None:
    fake.enqueue(FakeReply.text("Hi"))
    body = {"model": MODEL, "max_tokens": 10, "messages": user("x"), "stream": True}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{fake.base_url}/v1/messages", json=body) as response,
    ):
        assert response.status == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["request-id"].startswith("req_")
        raw = await response.text()
    events = [chunk.split("\n")[0] for chunk in raw.strip().split("\n\n")]
    assert events == [
        "event: message_start",
        "event: ping",
        "event: content_block_start",
        "event: content_block_delta",
        "event: content_block_stop",
        "event: message_delta",
        "event: message_stop",
    ]


async def test_tool_use_not_streaming(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    fake.enqueue(FakeReply.tool_use("get_weather", {"city": "Paris"}, id="toolu_1", text="Sure."))
    message = await ask(client, "weather in Paris?", tools=[WEATHER_TOOL])
    assert message.stop_reason == "tool_use"
    text, call = message.content
    assert isinstance(text, TextBlock) and text.text == "Sure."
    assert isinstance(call, ToolUseBlock)
    assert (call.id, call.name, call.input) == ("toolu_1", "get_weather", {"city": "Paris"})


async def test_tool_use_streaming(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    tool_input = {
        "city": 'Zürich "old town"\n\\ 東京',
        "days": [1, 2, 3],
        "options": {"units": "metric", "alerts": True, "radius": 2.5, "note": None},
    }
    fake.enqueue(FakeReply.tool_use("get_weather", tool_input))
    async with client.messages.stream(
        model=MODEL, max_tokens=256, messages=user("weather?"), tools=[WEATHER_TOOL]
    ) as s:
        final = await s.get_final_message()
    assert final.stop_reason == "tool_use"
    [call] = final.content
    assert isinstance(call, ToolUseBlock)
    assert call.id.startswith("toolu_")
    assert call.name == "get_weather"
    assert call.input == tool_input


async def test_parallel_tool_uses(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    fake.enqueue(
        FakeReply.tool_uses([("get_weather", {"city": "A"}), ("get_weather", {"city": "B"})])
    )
    message = await ask(client, tools=[WEATHER_TOOL])
    calls = [b for b in message.content if isinstance(b, ToolUseBlock)]
    assert [c.input for c in calls] == [{"city": "A"}, {"city": "B"}]
    assert len({c.id for c in calls}) == 2
    assert message.stop_reason == "tool_use"


def test_reply_stop_reason_defaults() -> None:
    tool = {"type": "tool_use", "name": "t", "input": {}}
    assert FakeReply([{"type": "text", "text": "x"}]).stop_reason == "end_turn"
    auto = FakeReply([tool])
    assert auto.stop_reason == "tool_use"
    assert auto.content[0]["id"].startswith("toolu_")
    assert FakeReply([tool], "pause_turn").stop_reason == "pause_turn"
    assert FakeReply.text("x", stop_reason="max_tokens").stop_reason == "max_tokens"


# ------------------------------------------------------------------ scripting and recording


async def test_queue_then_responder(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    fake.enqueue(FakeReply.text("one"), FakeReply.text("two"))
    assert fake.queued == 2
    assert text_of(await ask(client, "a")) == "one"
    assert text_of(await ask(client, "b")) == "two"
    assert text_of(await ask(client, "c")) == "echo: c"

    async def shout(request: FakeRequest) -> FakeReply:
        return FakeReply.text(request.last_user_text().upper())

    fake.responder = shout
    assert text_of(await ask(client, "loud")) == "LOUD"
    fake.enqueue(FakeReply.text("scripted"))
    assert text_of(await ask(client, "d")) == "scripted"
    assert text_of(await ask(client, "e")) == "E"


async def test_request_is_recorded(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    fake.enqueue(FakeReply.tool_use("get_weather", {"city": "Oslo"}, id="toolu_a"))
    await ask(client, "weather?", system="Be brief.", tools=[WEATHER_TOOL])
    messages: list[Any] = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_a",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                }
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "-3°C"}],
        },
    ]
    system = [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use metric."}]
    await ask(client, messages=messages, system=system, tools=[WEATHER_TOOL])

    first, second = fake.requests
    assert first.model == MODEL
    assert first.system == "Be brief." and first.system_text == "Be brief."
    assert first.tools == [WEATHER_TOOL] and first.tool_names == ["get_weather"]
    assert first.messages == user("weather?")
    assert first.last_user_text() == "weather?"
    assert first.tool_results() == []
    assert not first.stream
    assert first.max_tokens == 256
    assert first.api_key == "test"  # this SDK sends it as "Authorization: Bearer test"
    assert "anthropic-version" in first.headers
    assert second.system == system
    assert second.system_text == "Be brief.\n\nUse metric."
    assert second.messages == messages
    assert second.last_user_text() == ""
    assert second.tool_results() == [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "-3°C"}
    ]
    assert first.at <= second.at
    assert text_of(await ask(client, messages=[*messages[:2], _mixed_user_turn()])) == (
        "echo: looks cold\nthanks"
    )


def _mixed_user_turn() -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "-3°C"},
            {"type": "text", "text": "looks cold"},
            {"type": "text", "text": "thanks"},
        ],
    }


# ------------------------------------------------------------------ errors


async def test_overloaded(fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic) -> None:
    fake.enqueue(FakeError.overloaded())
    with pytest.raises(anthropic.APIStatusError) as caught:
        await ask(client)
    error = caught.value
    assert isinstance(error, anthropic.OverloadedError)
    assert isinstance(error, anthropic.InternalServerError)
    assert error.status_code == 529
    assert error.type == "overloaded_error"
    assert error.api_message == "Overloaded"
    assert error.request_id is not None and error.request_id.startswith("req_")
    assert error.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": error.request_id,
    }


async def test_overloaded_when_streaming(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    fake.enqueue(FakeError.overloaded())
    with pytest.raises(anthropic.OverloadedError):
        async with client.messages.stream(model=MODEL, max_tokens=10, messages=user("x")) as s:
            await s.get_final_message()


async def test_overloaded_mid_stream(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    fake.enqueue(FakeError.overloaded(mid_stream=True))
    with pytest.raises(anthropic.APIStatusError) as caught:
        async with client.messages.stream(model=MODEL, max_tokens=10, messages=user("x")) as s:
            await s.get_final_message()
    # The HTTP status was already 200: the SDK raises the base class, with the error's type.
    assert type(caught.value) is anthropic.APIStatusError
    assert caught.value.status_code == 200
    assert caught.value.type == "overloaded_error"
    # a non-streaming request gets the plain 529
    fake.enqueue(FakeError.overloaded(mid_stream=True))
    with pytest.raises(anthropic.OverloadedError):
        await ask(client)


async def test_rate_limited(fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic) -> None:
    fake.enqueue(FakeError.rate_limited())
    with pytest.raises(anthropic.RateLimitError) as caught:
        await ask(client)
    assert caught.value.status_code == 429
    assert caught.value.type == "rate_limit_error"


async def test_prompt_too_long(fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic) -> None:
    fake.enqueue(FakeError.prompt_too_long())
    with pytest.raises(anthropic.BadRequestError) as caught:
        await ask(client)
    assert caught.value.status_code == 400
    assert caught.value.type == "invalid_request_error"
    assert caught.value.api_message == "prompt is too long: 250000 tokens > 200000 maximum"
    assert "prompt is too long: 250000 tokens > 200000 maximum" in str(caught.value)


async def test_prompt_over_the_context_window(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    fake.context_window = 50
    fake.enqueue(FakeReply.text("kept"))
    with pytest.raises(anthropic.BadRequestError) as caught:
        await ask(client, "x" * 400)
    assert caught.value.api_message is not None
    assert caught.value.api_message.startswith("prompt is too long: 10")
    assert caught.value.api_message.endswith(" tokens > 50 maximum")
    assert fake.queued == 1  # a rejected request does not use up the script
    assert text_of(await ask(client, "short")) == "kept"


async def test_server_error(fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic) -> None:
    fake.enqueue(FakeError.server_error())
    with pytest.raises(anthropic.InternalServerError) as caught:
        await ask(client)
    assert caught.value.status_code == 500
    assert caught.value.type == "api_error"


async def test_sdk_retries_overload_and_rate_limit(
    fake: FakeAnthropicServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake.enqueue(FakeError.overloaded(), FakeError.rate_limited(), FakeReply.text("finally"))
    client = anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="test", max_retries=2)
    caplog.set_level(logging.INFO, logger="anthropic")
    try:
        message = await ask(client)
    finally:
        await client.close()
    assert text_of(message) == "finally"
    assert len(fake.requests) == 3
    assert fake.requests[1].headers["x-stainless-retry-count"] == "1"
    waits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Retrying")]
    assert waits == ["Retrying request to /v1/messages in 0.001000 seconds"] * 2, (
        "retry-after-ms overrides the SDK's 0.5 s+ backoff"
    )


async def test_responder_crash_is_a_500_not_retried(fake: FakeAnthropicServer) -> None:
    def broken(request: FakeRequest) -> FakeReply:
        raise ValueError("boom")

    fake.responder = broken
    client = anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="test", max_retries=2)
    try:
        with pytest.raises(anthropic.InternalServerError, match="boom"):
            await ask(client)
    finally:
        await client.close()
    assert len(fake.requests) == 1
    assert [str(e) for e in fake.responder_errors] == ["boom"]


def _image(media_type: str, data: bytes) -> dict[str, Any]:
    source = {"type": "base64", "media_type": media_type, "data": base64.b64encode(data).decode()}
    return {"type": "image", "source": source}


def _pdf(data: bytes) -> dict[str, Any]:
    source = {"type": "base64", "media_type": "application/pdf"}
    return {"type": "document", "source": {**source, "data": base64.b64encode(data).decode()}}


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([], "at least one message"),
        ([{"role": "user", "content": ""}], "non-empty content"),
        ([{"role": "user", "content": [{"type": "text", "text": ""}]}], "must be non-empty"),
        ([{"role": "tool", "content": "x"}], "Input should be 'user', 'assistant' or 'system'"),
        ([{"role": "system", "content": [{"type": "image"}]}], "Input should be 'text'"),
        (
            [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x"}]}],
            "unexpected `tool_use_id`",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "toolu_x", "name": "t", "input": {}}],
                },
                {"role": "user", "content": "y"},
            ],
            "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_x",
        ),
        (
            [{"role": "user", "content": "x"}, {"role": "assistant", "content": "ok "}],
            "trailing whitespace",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": str(i), "cache_control": {"type": "ephemeral"}}
                        for i in range(5)
                    ],
                }
            ],
            "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        ),
        (
            [{"role": "user", "content": [_image("image/jpeg", TINY_PNG)]}],
            "specified using the image/jpeg media type, but the image appears to be a image/png",
        ),
        (
            [{"role": "user", "content": [_image("image/bmp", b"BM")]}],
            "media_type: Input should be 'image/jpeg', 'image/png', 'image/gif', 'image/webp'",
        ),
        (
            [{"role": "user", "content": [_pdf(b"not a pdf")]}],
            "The PDF specified was not valid.",
        ),
    ],
)
async def test_invalid_requests_are_rejected_like_the_real_api(
    fake: FakeAnthropicServer,
    client: anthropic.AsyncAnthropic,
    messages: list[Any],
    expected: str,
) -> None:
    fake.enqueue(FakeReply.text("unused"))
    with pytest.raises(anthropic.BadRequestError, match=expected):
        await ask(client, messages=messages)
    assert fake.queued == 1


async def test_valid_tool_round_trip_and_prefill_are_accepted(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    messages: list[Any] = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "let me check"},
                {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}},
                {"type": "tool_use", "id": "toolu_2", "name": "t", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "b"},
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a", "is_error": True},
            ],
        },
        {"role": "assistant", "content": "The answer is"},
    ]
    assert text_of(await ask(client, messages=messages)) == "echo: "


async def test_unknown_route_is_a_404_in_the_error_shape(fake: FakeAnthropicServer) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{fake.base_url}/v1/nope") as response,
    ):
        assert response.status == 404
        body = await response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"


async def test_unknown_route_through_the_sdk(client: anthropic.AsyncAnthropic) -> None:
    with pytest.raises(anthropic.NotFoundError):
        await client.models.list()


async def test_the_models_api_answers_capabilities(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    opus = (await client.models.retrieve("claude-opus-5-5")).to_dict()
    assert opus["max_input_tokens"] == 1_000_000
    thinking = opus["capabilities"]["thinking"]["types"]
    assert thinking["adaptive"]["supported"] and not thinking["enabled"]["supported"]
    haiku = (await client.models.retrieve("claude-haiku-4-5")).to_dict()
    assert not haiku["capabilities"]["effort"]["supported"]
    fake.models = frozenset({"claude-opus-5-5"})
    with pytest.raises(anthropic.NotFoundError):
        await client.models.retrieve("claude-haiku-4-5")


# ------------------------------------------------------------------ credentials and models


async def test_a_wrong_key_is_answered_401_on_both_endpoints(fake: FakeAnthropicServer) -> None:
    fake.api_key = "right"
    wrong = anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="wrong", max_retries=0)
    right = anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="right", max_retries=0)
    try:
        with pytest.raises(anthropic.AuthenticationError) as caught:
            await ask(wrong)
        assert caught.value.body == {
            "type": "error",
            "error": {"type": "authentication_error", "message": "invalid x-api-key"},
            "request_id": caught.value.request_id,
        }
        with pytest.raises(anthropic.AuthenticationError):
            await wrong.messages.count_tokens(model=MODEL, messages=user("hi"))
        assert (await ask(right)).content
        assert (await right.messages.count_tokens(model=MODEL, messages=user("hi"))).input_tokens
        fake.api_key = "rotated"  # revoked mid-test
        with pytest.raises(anthropic.AuthenticationError):
            await ask(right)
    finally:
        await wrong.close()
        await right.close()
    assert fake.queued == 0


async def test_an_unknown_model_is_answered_404_naming_it() -> None:
    async with FakeAnthropicServer(models=[MODEL]) as strict:
        client = anthropic.AsyncAnthropic(base_url=strict.base_url, api_key="k", max_retries=0)
        try:
            with pytest.raises(anthropic.NotFoundError) as caught:
                await client.messages.count_tokens(model="claude-nope", messages=user("hi"))
            assert isinstance(caught.value.body, dict)
            assert caught.value.body["error"] == {
                "type": "not_found_error",
                "message": "model: claude-nope",
            }
            with pytest.raises(anthropic.NotFoundError):
                await client.messages.create(
                    model="claude-nope", max_tokens=16, messages=user("hi")
                )
            assert (await ask(client)).content
        finally:
            await client.close()


# ------------------------------------------------------------------ usage and caching


async def test_usage_is_deterministic_and_matches_count_tokens(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    first = await ask(client, "same question", system="sys", tools=[WEATHER_TOOL])
    second = await ask(client, "same question", system="sys", tools=[WEATHER_TOOL])
    assert first.usage.input_tokens == second.usage.input_tokens > 10
    assert second.usage.cache_read_input_tokens == 0  # no cache_control, no caching
    counted = await client.messages.count_tokens(
        model=MODEL, messages=user("same question"), system="sys", tools=[WEATHER_TOOL]
    )
    assert counted.input_tokens == first.usage.input_tokens
    assert len(fake.count_token_requests) == 1
    assert len(fake.requests) == 2
    longer = await ask(client, "same question" * 10, system="sys", tools=[WEATHER_TOOL])
    assert longer.usage.input_tokens > first.usage.input_tokens


async def test_prompt_caching(fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic) -> None:
    system = [
        {
            "type": "text",
            "text": "You are a helpful bot. " * 40,
            "cache_control": {"type": "ephemeral"},
        }
    ]
    first = (await ask(client, "ask 1", system=system, tools=[WEATHER_TOOL])).usage
    assert first.cache_read_input_tokens == 0
    assert first.cache_creation_input_tokens is not None and first.cache_creation_input_tokens > 200
    total = first.input_tokens + first.cache_creation_input_tokens

    second = (await ask(client, "ask 2", system=system, tools=[WEATHER_TOOL])).usage
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens == 0
    assert second.input_tokens < first.input_tokens + first.cache_creation_input_tokens
    assert second.input_tokens + second.cache_read_input_tokens == total

    # a different prefix (other tools) misses the cache
    third = (await ask(client, "third", system=system)).usage
    assert third.cache_read_input_tokens == 0
    assert third.cache_creation_input_tokens

    fake.clear_cache()
    again = (await ask(client, "second", system=system, tools=[WEATHER_TOOL])).usage
    assert again.cache_read_input_tokens == 0


async def test_conversation_caching_with_a_moving_breakpoint(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    def turn(role: str, text: str, cached: bool = False) -> dict[str, Any]:
        block: dict[str, Any] = {"type": "text", "text": text}
        if cached:
            block["cache_control"] = {"type": "ephemeral"}
        return {"role": role, "content": [block]}

    history = [turn("user", "tell me a long story " * 20, cached=True)]
    first = (await ask(client, messages=history)).usage
    assert first.cache_creation_input_tokens and not first.cache_read_input_tokens

    history = [
        turn("user", "tell me a long story " * 20),
        turn("assistant", "once upon a time " * 20),
        turn("user", "and then?", cached=True),
    ]
    second = (await ask(client, messages=history)).usage
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens and second.cache_creation_input_tokens > 0
    assert second.input_tokens == 0  # everything up to the last breakpoint is cached


async def test_streaming_reports_cache_usage(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    system: Any = [
        {"type": "text", "text": "Rules. " * 100, "cache_control": {"type": "ephemeral"}}
    ]
    await ask(client, system=system)
    async with client.messages.stream(
        model=MODEL, max_tokens=10, system=system, messages=user("again")
    ) as s:
        final = await s.get_final_message()
    assert final.usage.cache_read_input_tokens and final.usage.cache_read_input_tokens > 100


async def test_top_level_cache_control_caches_the_whole_prompt(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    messages = user("a fairly long question " * 10)
    first = (await ask(client, messages=messages, cache_control={"type": "ephemeral"})).usage
    second = (await ask(client, messages=messages, cache_control={"type": "ephemeral"})).usage
    assert first.cache_creation_input_tokens and first.cache_creation_input_tokens > 0
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens


async def test_cache_entries_live_for_their_ttl_and_reads_refresh_them(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    def system(ttl: str) -> Any:
        control = {"type": "ephemeral", "ttl": ttl}
        return [{"type": "text", "text": f"Rules for {ttl}. " * 100, "cache_control": control}]

    first = (await ask(client, system=system("5m"))).usage
    assert first.cache_creation is not None
    assert first.cache_creation.ephemeral_5m_input_tokens == first.cache_creation_input_tokens
    fake.advance(4 * 60)
    assert (await ask(client, system=system("5m"))).usage.cache_read_input_tokens  # refreshed
    fake.advance(4 * 60)  # 8 minutes after the write, 4 after the read
    assert (await ask(client, system=system("5m"))).usage.cache_read_input_tokens
    fake.advance(6 * 60)
    assert not (await ask(client, system=system("5m"))).usage.cache_read_input_tokens

    hour = (await ask(client, system=system("1h"))).usage
    assert hour.cache_creation is not None
    assert hour.cache_creation.ephemeral_1h_input_tokens == hour.cache_creation_input_tokens
    fake.advance(50 * 60)
    assert (await ask(client, system=system("1h"))).usage.cache_read_input_tokens
    fake.advance(61 * 60)
    assert not (await ask(client, system=system("1h"))).usage.cache_read_input_tokens


async def test_a_one_hour_breakpoint_after_a_five_minute_one_is_refused(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    system: Any = [{"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}}]
    messages: Any = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ],
        }
    ]
    with pytest.raises(anthropic.BadRequestError, match="1-hour entries must appear before"):
        await ask(client, system=system, messages=messages)


async def test_a_cached_prefix_is_found_only_20_blocks_before_a_breakpoint(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    def history(turns: int) -> Any:
        messages: list[dict[str, Any]] = []
        for n in range(turns):
            role = "user" if n % 2 == 0 else "assistant"
            messages.append({"role": role, "content": [{"type": "text", "text": f"m{n} " * 50}]})
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        return messages

    await ask(client, messages=history(3))
    near = (await ask(client, messages=history(21))).usage  # the old breakpoint 18 blocks back
    assert near.cache_read_input_tokens
    fake.clear_cache()
    await ask(client, messages=history(3))
    far = (await ask(client, messages=history(25))).usage  # 22 blocks back: not looked at
    assert not far.cache_read_input_tokens


# ------------------------------------------------------------------ timing


async def test_latency_and_chunk_delay(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    fake.latency = 0.1
    fake.chunk_delay = 0.02
    fake.enqueue(FakeReply.text(LONG_TEXT))
    started = time.monotonic()
    arrivals: list[float] = []
    async with client.messages.stream(model=MODEL, max_tokens=256, messages=user("x")) as s:
        async for _ in s.text_stream:
            arrivals.append(time.monotonic() - started)
    assert arrivals[0] >= 0.1
    assert arrivals[-1] - arrivals[0] >= 0.02 * (len(arrivals) - 1) * 0.9


async def test_client_leaving_mid_stream_and_stop_with_streams_in_flight(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    fake.chunk_delay = 0.01
    fake.enqueue(FakeReply.text(LONG_TEXT * 5))
    async with client.messages.stream(model=MODEL, max_tokens=256, messages=user("x")) as s:
        async for _ in s.text_stream:
            break  # leave early: the connection is closed under the server's feet
    assert text_of(await ask(client, "still fine")) == "echo: still fine"

    fake.enqueue(FakeReply.text(LONG_TEXT * 50))
    # A stream cut mid-body is NOT mapped to anthropic.APIConnectionError by this SDK:
    # the transport's own exception escapes.
    with pytest.raises(httpx2.RemoteProtocolError):
        async with client.messages.stream(model=MODEL, max_tokens=256, messages=user("x")) as s:
            async for _ in s.text_stream:
                await fake.stop()


async def test_many_concurrent_streams(fake: FakeAnthropicServer) -> None:
    client = anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="test", max_retries=0)

    async def one(i: int) -> str:
        async with client.messages.stream(model=MODEL, max_tokens=64, messages=user(f"n{i}")) as s:
            return await s.get_final_text()

    try:
        results = await asyncio.gather(*(one(i) for i in range(100)))
    finally:
        await client.close()
    assert results == [f"echo: n{i}" for i in range(100)]
    assert len(fake.requests) == 100


async def test_thinking_blocks_stream_too(
    fake: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    thinking = {"type": "thinking", "thinking": "Let me think about this. " * 3, "signature": "sig"}
    fake.enqueue(FakeReply([thinking, {"type": "text", "text": "42"}]))
    async with client.messages.stream(model=MODEL, max_tokens=256, messages=user("x")) as s:
        final = await s.get_final_message()
    block = final.content[0]
    assert block.type == "thinking"
    assert block.thinking == thinking["thinking"]
    assert block.signature == "sig"
    assert text_of(final) == "42"


async def test_first_text_delta_of_each_stream_is_timed(fake: FakeAnthropicServer) -> None:
    fake.chunk_delay = 0.05
    fake.enqueue(FakeReply.text("plain answer, not streamed"))
    fake.enqueue(FakeReply.text("a streamed answer in several pieces of text"))
    client = anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="k", max_retries=0)
    try:
        await client.messages.create(
            model="claude-test-1", max_tokens=10, messages=[{"role": "user", "content": "a"}]
        )
        before = time.monotonic()
        async with client.messages.stream(
            model="claude-test-1", max_tokens=10, messages=[{"role": "user", "content": "b"}]
        ) as stream:
            await stream.get_final_message()
        after = time.monotonic()
    finally:
        await client.close()
    assert list(fake.first_delta_at) == [1], "only the streamed request is timed"
    assert before <= fake.first_delta_at[1] <= after - 0.05, "the first delta, not the last"
