"""A Messages API call through the SDK's public API, for installs whose SDK lacks a private
name the fast path needs (``botkit.llm.internals``): slower (the SDK's models and snapshots on
every event), with the same results, errors and usage reports; traced, each call carries its
``chat`` span's context (W3C ``traceparent``), as on the fast path."""

from __future__ import annotations

from typing import Any

import anthropic

from botkit import tracing
from botkit.llm.base import TextSink, report_usage
from botkit.types import Usage

__all__ = ["create", "stream"]


async def create(client: anthropic.AsyncAnthropic, params: dict[str, Any]) -> dict[str, Any]:
    """One non-streamed call with ``messages.create``; the message as the API's dict."""
    message = await client.messages.create(**_traced(params))
    report_usage(message.model, _usage(message.usage))
    raw: dict[str, Any] = message.to_dict()
    return raw


async def stream(
    client: anthropic.AsyncAnthropic, params: dict[str, Any], on_text: TextSink
) -> dict[str, Any]:
    """One streamed call with ``messages.stream``: text deltas go to ``on_text``, usage is
    reported as it is counted; the whole message as the API's dict."""
    async with client.messages.stream(**_traced(params)) as answer:
        async for event in answer:
            if event.type == "text":
                await on_text(event.text)
            elif event.type in ("message_start", "message_delta"):
                snapshot = answer.current_message_snapshot
                report_usage(snapshot.model, _usage(snapshot.usage))
        message = await answer.get_final_message()
    raw: dict[str, Any] = message.to_dict()
    return raw


def _traced(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the current span's context as extra headers, when tracing."""
    if not tracing.tracer.enabled:
        return params
    carrier = tracing.tracer.carrier()
    if not carrier:
        return params
    return {**params, "extra_headers": {**params.get("extra_headers", {}), **carrier}}


def _usage(usage: anthropic.types.Usage) -> Usage:
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
        cache_read_input_tokens=usage.cache_read_input_tokens or 0,
        cache_write_1h_tokens=getattr(usage.cache_creation, "ephemeral_1h_input_tokens", 0) or 0,
    )
