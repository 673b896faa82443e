"""The Message Batches API for one call at a time: sent as a batch of one (50 % off), its
answer read back once the batch ended, and used in place of the same call made at once.

:class:`MessageBatches` sends the request an ``AnthropicLLM`` would send (the same body, the
same thinking and cache settings), minus ``stream``, which a batch refuses. Its answer is read
the way ``AnthropicLLM`` reads one, its thinking blocks bound to the request's prefix, so it
stands in the conversation like any answer (``botkit.llm.prepared`` puts it in place of the
call).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from botkit.errors import LLMError
from botkit.llm.anthropic import AnthropicLLM, _Call, _mapped_errors, _usage
from botkit.llm.base import LLM, LLMRequest, LLMResponse
from botkit.pricing import batch_model
from botkit.types import Usage

__all__ = ["BatchOutcome", "BatchStatus", "MessageBatches", "batches_for"]

BatchStatus = Literal["in_progress", "succeeded", "errored", "canceled", "expired"]
"""Where one request of a batch stands: still running, or how it ended (the result's type)."""


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """One batched request: still running, or ended with its answer or why not."""

    status: BatchStatus
    message: dict[str, Any] | None = None
    """The answer (the API's message, as a dict) when ``succeeded``."""
    error: str | None = None
    """What went wrong when ``errored``."""


class MessageBatches:
    """Sends one call as a Message Batch and reads its outcome, with ``llm``'s client."""

    def __init__(self, llm: AnthropicLLM) -> None:
        self.llm = llm

    async def submit(self, custom_id: str, request: LLMRequest) -> str:
        """Send ``request`` as a batch of one named ``custom_id``; the batch's id."""
        call = _Call(self.llm, request)
        params = {key: value for key, value in call.params.items() if key != "stream"}
        headers = dict(call.headers) or None
        async with _mapped_errors():
            batch = await self.llm.client.messages.batches.create(
                requests=[{"custom_id": custom_id, "params": params}],  # type: ignore[typeddict-item]
                extra_headers=headers,
            )
        return batch.id

    async def ended(self, batch_id: str) -> bool:
        """Whether batch ``batch_id`` has ended (its results can be read)."""
        async with _mapped_errors():
            batch = await self.llm.client.messages.batches.retrieve(batch_id)
        return batch.processing_status == "ended"

    async def outcome(self, batch_id: str, custom_id: str) -> BatchOutcome:
        """Where the request ``custom_id`` of batch ``batch_id`` stands."""
        batches = self.llm.client.messages.batches
        async with _mapped_errors():
            batch = await batches.retrieve(batch_id)
            if batch.processing_status != "ended":
                return BatchOutcome("in_progress")
            async for item in await batches.results(batch_id):
                if item.custom_id == custom_id:
                    return _outcome(item.result)
        raise LLMError(f"the Message Batch {batch_id} has no result for {custom_id}")

    async def cancel(self, batch_id: str) -> None:
        """Ask the API to stop the batch (what already ran is still billed)."""
        async with _mapped_errors():
            await self.llm.client.messages.batches.cancel(batch_id)

    def response(self, request: LLMRequest, message: dict[str, Any]) -> LLMResponse:
        """botkit's response from a batch's answer to ``request``, as a call at once reads it
        (thinking blocks bound to its prefix), under the model's batched name for billing."""
        response = _Call(self.llm, request).response(message)
        return replace(response, model=batch_model(response.model))

    def billed(self, message: dict[str, Any]) -> tuple[str, Usage]:
        """The model (its batched name) and usage a batch's answer is billed under."""
        return batch_model(str(message.get("model") or self.llm.model)), _usage(
            message.get("usage")
        )


def _outcome(result: Any) -> BatchOutcome:
    kind = result.type
    if kind == "succeeded":
        return BatchOutcome("succeeded", message=result.message.to_dict())
    if kind == "errored":
        error = getattr(result, "error", None)
        detail = getattr(getattr(error, "error", None), "message", None) or str(error)
        return BatchOutcome("errored", error=detail)
    if kind in ("canceled", "expired"):
        return BatchOutcome(kind)
    return BatchOutcome("errored", error=f"unknown result type {kind!r}")


def batches_for(llm: LLM) -> MessageBatches | None:
    """Message Batches through ``llm``'s client, or ``None`` when it is not ``AnthropicLLM``."""
    return MessageBatches(llm) if isinstance(llm, AnthropicLLM) else None
