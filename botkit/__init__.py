"""botkit: put a Claude agent in front of many Telegram users at once."""

from typing import TYPE_CHECKING, Any

from botkit.agent import AgentLoop, ContextManager, LoopTexts, TurnResult
from botkit.agent.events import (
    AgentEnd,
    ApprovalDecided,
    ApprovalRequested,
    ErrorEvent,
    Event,
    Hooks,
    TextDelta,
    ToolCall,
    ToolResult,
    ToolStart,
    UsageEvent,
)
from botkit.agent.subagent import AgentTool
from botkit.approvals import ApprovalTexts
from botkit.bot import (
    Authorize,
    Bot,
    BotOptions,
    BuildExtra,
    BuildPrompt,
    BuildTools,
    HandleStart,
)
from botkit.choices import Persona
from botkit.commands import Command
from botkit.config import Settings
from botkit.errors import (
    BotkitError,
    ConfigError,
    LLMAuthError,
    LLMError,
    LLMOverloadedError,
    MessengerError,
    PromptTooLongError,
    SessionError,
    StoreError,
    ToolError,
)
from botkit.llm import LLM, LLMRequest, LLMResponse
from botkit.messengers import Incoming, Messenger
from botkit.payments import Plan
from botkit.plugins import Plugin, PromptPlugin, ToolPlugin
from botkit.sessions import JsonlSessionStore, SessionEntry, SessionStore, read_session_file
from botkit.skills import Skill, SkillLibrary, load_skills
from botkit.stores.base import Invite, UserRecord, UserStore
from botkit.tools import (
    ContextInjector,
    Tool,
    ToolContext,
    ToolFile,
    ToolImage,
    ToolRegistry,
    ToolSet,
    tool,
)
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
    "AgentEnd",
    "AgentLoop",
    "AgentTool",
    "AnthropicLLM",
    "ApprovalDecided",
    "ApprovalRequested",
    "ApprovalTexts",
    "Authorize",
    "Bot",
    "BotOptions",
    "BotkitError",
    "BuildExtra",
    "BuildPrompt",
    "BuildTools",
    "Command",
    "ConfigError",
    "ContextInjector",
    "ContextManager",
    "ErrorEvent",
    "Event",
    "HandleStart",
    "Hooks",
    "ImageBlock",
    "Incoming",
    "Invite",
    "JsonlSessionStore",
    "LLMAuthError",
    "LLMError",
    "LLMOverloadedError",
    "LLMRequest",
    "LLMResponse",
    "LoopTexts",
    "Message",
    "Messenger",
    "MessengerError",
    "Persona",
    "Plan",
    "Plugin",
    "PromptPlugin",
    "PromptTooLongError",
    "SessionEntry",
    "SessionError",
    "SessionStore",
    "Settings",
    "Skill",
    "SkillLibrary",
    "StoreError",
    "TextBlock",
    "TextDelta",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDef",
    "ToolError",
    "ToolFile",
    "ToolImage",
    "ToolPlugin",
    "ToolRegistry",
    "ToolResult",
    "ToolResultBlock",
    "ToolSet",
    "ToolStart",
    "ToolUseBlock",
    "TurnResult",
    "Usage",
    "UsageEvent",
    "UserRecord",
    "UserStore",
    "load_skills",
    "read_session_file",
    "tool",
]


def __getattr__(name: str) -> Any:
    # The Anthropic SDK is slow to import; load it when first asked for.
    if name == "AnthropicLLM":
        from botkit.llm.anthropic import AnthropicLLM

        return AnthropicLLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
