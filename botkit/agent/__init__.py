"""The agent: per-user contexts and the tool loop. Knows nothing of any messenger."""

from botkit.agent.context import ContextManager, ConvertToLLM, OnAppend, TransformContext
from botkit.agent.loop import AgentLoop, LoopTexts, TurnResult

__all__ = [
    "AgentLoop",
    "ContextManager",
    "ConvertToLLM",
    "LoopTexts",
    "OnAppend",
    "TransformContext",
    "TurnResult",
]
