"""Agent as a tool: a sub-agent with its own prompt and tools, called like any tool.

Inside a turn the sub-agent runs on the calling loop's LLM and hooks (both reach it through
``ToolContext``): its calls are charged to the user like the main loop's, and a ``tool_start``
hook that blocks a tool blocks it in the sub-agent too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botkit.agent.context import ContextManager
from botkit.agent.events import Hooks
from botkit.agent.loop import AgentLoop
from botkit.errors import ConfigError, LLMError, ToolError
from botkit.llm.base import LLM
from botkit.tools import Tool, ToolContext, ToolRegistry
from botkit.types import Message, ToolDef

__all__ = ["AgentTool"]


class AgentTool(Tool):
    """Runs a task through its own tool loop (fresh context each call) and returns the answer."""

    def __init__(
        self,
        name: str,
        description: str,
        *,
        system_prompt: str,
        tools: Sequence[Tool] = (),
        model: str | None = None,
        llm: LLM | None = None,
        max_iterations: int = 6,
        timeout: float | None = 300.0,
    ) -> None:
        self._definition = ToolDef(
            name=name,
            description=description,
            input_schema={
                "type": "object",
                "properties": {
                    "task": {
                        "type": "string",
                        "description": "What to do, with everything needed to do it.",
                    }
                },
                "required": ["task"],
                "additionalProperties": False,
            },
        )
        self.model = model
        """The model the sub-agent asks (e.g. a cheaper one); ``None``: the LLM's default."""
        self.llm = llm
        """Used only where the caller's tool context has no LLM (outside a turn); in a turn
        the turn's own LLM is used, so the sub-agent's calls are charged to the user."""
        self.system_prompt = system_prompt
        self.registry = ToolRegistry(list(tools))
        self.max_iterations = max_iterations
        self.timeout = timeout

    @property
    def definition(self) -> ToolDef:
        """A single ``task`` string in, the sub-agent's answer out."""
        return self._definition

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        """Run the sub-agent on ``args["task"]`` with the caller's tool context."""
        task = str(args.get("task", "")).strip()
        if not task:
            raise ToolError("give the sub-agent a task")
        llm = ctx.llm or self.llm
        if llm is None:
            raise ConfigError(f"sub-agent {self.name!r} needs llm= when run outside a turn")
        hooks = ctx.hooks if isinstance(ctx.hooks, Hooks) else None
        context = ContextManager(ctx.user_id)
        await context.append(Message.user_text(task))
        loop = AgentLoop(llm, max_iterations=self.max_iterations, model=self.model, hooks=hooks)
        try:
            result = await loop.run(
                context, system=self.system_prompt, tools=self.registry, tool_context=ctx
            )
        except LLMError as e:
            raise ToolError(f"the sub-agent could not answer: {e}") from e
        return result.text
