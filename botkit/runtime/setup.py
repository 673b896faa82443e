"""What every runtime does before it takes messages, so they all offer the same bot.

The MCP servers of BOTKIT_MCP_CONFIG are connected and their tools registered, and the
Anthropic key and model are checked at no token cost; serving on Telegram and the console
(and later queue workers) call these same functions.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from botkit.errors import LLMAuthError
from botkit.extras import require_extra
from botkit.runtime.base import ServedBot

__all__ = ["check_llm", "mcp_tools"]


@asynccontextmanager
async def mcp_tools(bot: ServedBot) -> AsyncIterator[None]:
    """Connect the MCP servers of BOTKIT_MCP_CONFIG and offer their tools inside the block."""
    if not bot.settings.mcp_config:
        yield
        return
    require_extra("mcp", "mcp", "BOTKIT_MCP_CONFIG")
    from botkit.tools.mcp import connect_mcp, parse_mcp_config

    async with connect_mcp(parse_mcp_config(bot.settings.mcp_config)) as tools:
        for tool in tools:
            bot.tools.register_tool(tool)
        yield


async def check_llm(
    bot: ServedBot, on_auth_failure: Callable[[LLMAuthError], Awaitable[None]] | None = None
) -> None:
    """Check the Anthropic key and model at no token cost (retried while unreachable), and
    have ``on_auth_failure`` told once if the key is rejected later.

    A rejected key or model raises ``ConfigError``; an LLM of another kind is left alone.
    """
    llm = bot.llm
    # Only an AnthropicLLM is checked: if its module was never loaded, this is none (and the
    # SDK is not loaded for nothing: ``try``'s scripted model starts in half a second).
    if "botkit.llm.anthropic" not in sys.modules:
        return
    from botkit.llm.anthropic import AnthropicLLM

    if not isinstance(llm, AnthropicLLM):
        return
    if llm.on_auth_failure is None:
        llm.on_auth_failure = on_auth_failure
    await llm.verify()
