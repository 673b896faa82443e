"""``--llm recorded``: the recorded model answers played back in order, no request sent."""

from __future__ import annotations

from botkit.agent.compaction import SUMMARY_PROMPT
from botkit.errors import LLMError
from botkit.llm.base import LLMRequest, LLMResponse, StopReason, TextSink
from botkit.rerun.recorded import RecordedTurn
from botkit.types import Message, TextBlock, Usage

__all__ = ["PlaybackMismatch", "RecordedLLM"]

_STOP_REASONS: frozenset[str] = frozenset(
    {
        "end_turn",
        "tool_use",
        "max_tokens",
        "stop_sequence",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
    }
)


class PlaybackMismatch(LLMError):
    """The recorded answer no longer fits the request the bot makes now."""


class RecordedLLM:
    """An ``LLM`` answering one turn's calls with what the model answered then, at 0 tokens.

    A call the recording has no answer for, or whose recorded answer calls a tool the bot no
    longer offers, raises ``PlaybackMismatch`` (the turn ends as a failed call would); the
    reason is kept in ``mismatch``.
    """

    def __init__(self, turn: RecordedTurn) -> None:
        self._answers = [entry.to_message() for entry in turn.responses]
        self._models = [entry.model or "recorded" for entry in turn.responses]
        self._stops = [entry.stop_reason or "end_turn" for entry in turn.responses]
        self._summaries = [entry.summary for entry in turn.summaries]
        self.calls = 0
        """Answers played so far."""
        self.mismatch: str | None = None
        """Why the recording stopped fitting, if it did."""

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        """The next recorded answer, if it fits ``request``."""
        if request.system == SUMMARY_PROMPT:
            summary = self._summaries.pop(0) if self._summaries else "(no summary was recorded)"
            return self._response(Message(role="assistant", content=[TextBlock(text=summary)]))
        if self.calls >= len(self._answers):
            raise self._fail(f"the recording has no answer for model call {self.calls + 1}")
        answer = self._answers[self.calls]
        offered = {tool.name for tool in request.tools}
        for call in answer.tool_uses:
            if call.name not in offered:
                raise self._fail(f"the bot no longer offers tool {call.name}")
        stop, model = self._stops[self.calls], self._models[self.calls]
        self.calls += 1
        if on_text is not None and answer.text:
            await on_text(answer.text)
        return self._response(answer, stop, model)

    def _fail(self, reason: str) -> PlaybackMismatch:
        self.mismatch = reason
        return PlaybackMismatch(reason)

    @staticmethod
    def _response(message: Message, stop: str = "end_turn", model: str = "recorded") -> LLMResponse:
        stop_reason: StopReason = stop if stop in _STOP_REASONS else "end_turn"  # type: ignore[assignment]
        played = Message(role="assistant", content=message.content, usage=Usage())
        return LLMResponse(message=played, stop_reason=stop_reason, model=model)

    async def close(self) -> None:
        """Nothing to release."""
