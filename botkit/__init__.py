"""botkit: put a Claude agent in front of many Telegram users at once."""

from typing import TYPE_CHECKING, Any

from botkit.agent import AgentLoop, ContextManager, LoopTexts, TurnResult
from botkit.bot import (
    Authorize,
    Bot,
    BotOptions,
    BuildExtra,
    BuildPrompt,
    BuildTools,
    HandleStart,
)
from botkit.config import Settings
from botkit.errors import (
    BotkitError,
    ConfigError,
    LLMError,
    LLMOverloadedError,
    MessengerError,
    PromptTooLongError,
    SessionError,
    ToolError,
)
from botkit.llm import LLM, LLMRequest, LLMResponse
from botkit.messengers import Incoming, Messenger
from botkit.sessions import JsonlSessionStore, SessionEntry, SessionStore, read_session_file
from botkit.tools import ContextInjector, Tool, ToolContext, ToolRegistry, ToolSet, tool
from botkit.types import (
    ImageBlock,
    Message,
    TextBlock,
    ToolDef,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

if TYPE_CHECKING:
    from botkit.llm.anthropic import AnthropicLLM

__all__ = [
    "LLM",
    "AgentLoop",
    "AnthropicLLM",
    "Authorize",
    "Bot",
    "BotOptions",
    "BotkitError",
    "BuildExtra",
    "BuildPrompt",
    "BuildTools",
    "ConfigError",
    "ContextInjector",
    "ContextManager",
    "HandleStart",
    "ImageBlock",
    "Incoming",
    "JsonlSessionStore",
    "LLMError",
    "LLMOverloadedError",
    "LLMRequest",
    "LLMResponse",
    "LoopTexts",
    "Message",
    "Messenger",
    "MessengerError",
    "PromptTooLongError",
    "SessionEntry",
    "SessionError",
    "SessionStore",
    "Settings",
    "TextBlock",
    "Tool",
    "ToolContext",
    "ToolDef",
    "ToolError",
    "ToolRegistry",
    "ToolResultBlock",
    "ToolSet",
    "ToolUseBlock",
    "TurnResult",
    "Usage",
    "read_session_file",
    "tool",
]


def __getattr__(name: str) -> Any:
    # The Anthropic SDK is slow to import; load it when first asked for.
    if name == "AnthropicLLM":
        from botkit.llm.anthropic import AnthropicLLM

        return AnthropicLLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
