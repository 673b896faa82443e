"""Agent as a tool: a sub-agent with its own prompt and tools, called like any tool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botkit.agent.context import ContextManager
from botkit.agent.loop import AgentLoop
from botkit.errors import LLMError, ToolError
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
        llm: LLM,
        system_prompt: str,
        tools: Sequence[Tool] = (),
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
        self.llm = llm
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
        context = ContextManager(ctx.user_id)
        await context.append(Message.user_text(task))
        loop = AgentLoop(self.llm, max_iterations=self.max_iterations)
        try:
            result = await loop.run(
                context, system=self.system_prompt, tools=self.registry, tool_context=ctx
            )
        except LLMError as e:
            raise ToolError(f"the sub-agent could not answer: {e}") from e
        return result.text
