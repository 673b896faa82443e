"""Language models behind the ``LLM`` protocol."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botkit.llm.base import LLM, LLMRequest, LLMResponse, StopReason, TextSink

if TYPE_CHECKING:
    from botkit.llm.anthropic import AnthropicLLM

__all__ = ["LLM", "AnthropicLLM", "LLMRequest", "LLMResponse", "StopReason", "TextSink"]


def __getattr__(name: str) -> Any:
    # The SDK is slow to import; ``python -m botkit --help`` should not wait for it.
    if name == "AnthropicLLM":
        from botkit.llm.anthropic import AnthropicLLM

        return AnthropicLLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
