"""Plugins: objects that add system-prompt parts and tools to every turn, composed in order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from botkit.messengers.base import Incoming
from botkit.tools import Tool, ToolRegistry, ToolSet

__all__ = [
    "Plugin",
    "PromptPlugin",
    "ToolPlugin",
    "compose_prompt",
    "prompt_parts",
    "turn_notes",
]

PromptSource = str | Callable[[Incoming], Awaitable[str | None]]


class Plugin:
    """Contributes a part of the system prompt and/or tools; override what you need."""

    async def prompt(self, message: Incoming) -> str | None:
        """A part of the system prompt for this turn, or ``None``."""
        return None

    def tools(self, message: Incoming) -> Sequence[Tool]:
        """Tools to offer the model this turn."""
        return ()

    async def turn_note(self, message: Incoming) -> str | None:
        """A line put before the user's message this turn (kept out of the cached prompt)."""
        return None


class PromptPlugin(Plugin):
    """A prompt part from a plain string or an async callable of the message."""

    def __init__(self, source: PromptSource) -> None:
        self.source = source

    async def prompt(self, message: Incoming) -> str | None:
        """The string, or what the callable returns for ``message``."""
        if isinstance(self.source, str):
            return self.source
        return await self.source(message)


class ToolPlugin(Plugin):
    """Tools from a list, a ``ToolSet`` or a ``ToolRegistry``."""

    def __init__(self, *sources: Tool | ToolSet | ToolRegistry) -> None:
        self._tools: list[Tool] = []
        for source in sources:
            if isinstance(source, ToolRegistry):
                self._tools.extend(source)
            elif isinstance(source, ToolSet):
                self._tools.extend(source.tools())
            else:
                self._tools.append(source)

    def tools(self, message: Incoming) -> Sequence[Tool]:
        """The same tools every turn."""
        return self._tools


async def compose_prompt(prompt: str, plugins: Sequence[Plugin], message: Incoming) -> str:
    """``prompt`` (the bot's ``build_prompt``) followed by each plugin's part, blank-line apart."""
    return join_parts(await prompt_parts(prompt, plugins, message))


async def prompt_parts(
    prompt: str, plugins: Sequence[Plugin], message: Incoming
) -> list[tuple[str, str]]:
    """The system prompt's parts, named: ``build_prompt``, then each plugin's (by its class)."""
    parts = [("build_prompt", prompt)] if prompt else []
    for plugin in plugins:
        if part := await plugin.prompt(message):
            parts.append((type(plugin).__name__, part))
    return parts


def join_parts(parts: Sequence[tuple[str, str]]) -> str:
    """The system prompt made of its parts, blank-line apart."""
    return "\n\n".join(text for _, text in parts)


async def turn_notes(plugins: Sequence[Plugin], message: Incoming) -> str | None:
    """The line the model reads before the user's message: the plugins' notes (by default the
    sender's local date and time), kept out of the system prompt so its cache holds."""
    notes = [note for plugin in plugins if (note := await plugin.turn_note(message))]
    return " ".join(notes) or None
