"""The tools a bot offers, and running the calls the model makes to them."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import orjson
import structlog
from pydantic import BaseModel, ValidationError

from botkit import tracing
from botkit.errors import ToolError
from botkit.images import ImageDecodeBusy, image_type, scale_image
from botkit.tools.base import Tool, ToolContext
from botkit.tools.decorator import FunctionTool, ToolSet, tool
from botkit.tools.files import ToolFile, ToolImage
from botkit.types import ImageBlock, ImageSource, ToolDef, ToolResultBlock, ToolUseBlock

__all__ = ["MAX_OUTPUT_CHARS", "NO_OUTPUT", "ToolRegistry"]

log = structlog.get_logger(__name__)

MAX_OUTPUT_CHARS = 100_000
"""Tool output longer than this is cut before it reaches the model."""
NO_OUTPUT = "(no output)"
"""What the model sees when a tool returns ``None``."""

_Item = TypeVar("_Item", bound=Tool | ToolSet | Callable[..., Any])


class ToolRegistry:
    """Tools by name, in registration order; runs tool calls and never raises for their failures."""

    def __init__(
        self,
        tools: Iterable[Tool | ToolSet | Callable[..., Any]] = (),
        *,
        max_output_chars: int = MAX_OUTPUT_CHARS,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self.max_output_chars = max_output_chars
        for item in tools:
            self.register(item)

    # ---- registration -----------------------------------------------------------------

    def register_tool(self, tool: Tool) -> None:
        """Add one tool; a name already taken raises ``ValueError``."""
        if isinstance(tool, FunctionTool) and tool.is_unbound_method:
            raise TypeError(f"Tool {tool.name!r} is a method: register the instance's tools")
        if tool.name in self._tools:
            raise ValueError(f"A tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def register_toolset(self, toolset: ToolSet) -> None:
        """Add every tool of ``toolset``, bound to it."""
        for t in toolset.tools():
            self.register_tool(t)

    def register(self, item: _Item) -> _Item:
        """Add a tool, a tool set or a plain function (made a tool); returns ``item``."""
        if isinstance(item, Tool):
            self.register_tool(item)
        elif isinstance(item, ToolSet):
            self.register_toolset(item)
        elif isinstance(item, type):
            raise TypeError(f"Cannot register the class {item.__name__}: pass an instance")
        elif callable(item):
            self.register_tool(tool(item))
        else:
            raise TypeError(f"Cannot register {type(item).__name__} as a tool")
        return item

    # ---- lookup -----------------------------------------------------------------------

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, if any."""
        return self._tools.get(name)

    def needs_approval(self, name: str) -> bool:
        """Whether a call of ``name`` waits for a person's Allow before it runs."""
        found = self._tools.get(name)
        return found is not None and found.approval

    def is_idempotent(self, name: str) -> bool:
        """Whether the tool called ``name`` may run a call twice without harm."""
        found = self._tools.get(name)
        return found is not None and found.idempotent

    @property
    def names(self) -> list[str]:
        """Tool names in registration order."""
        return list(self._tools)

    def definitions(self) -> list[ToolDef]:
        """What the model is shown, in registration order."""
        return [t.definition for t in self._tools.values()]

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """A registry holding only ``names`` (in registration order); unknown names raise."""
        wanted = set(names)
        if unknown := wanted - self._tools.keys():
            raise ValueError(f"Unknown tools: {', '.join(sorted(unknown))}")
        return ToolRegistry(
            [t for n, t in self._tools.items() if n in wanted],
            max_output_chars=self.max_output_chars,
        )

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names})"

    # ---- execution --------------------------------------------------------------------

    async def execute(self, call: ToolUseBlock, ctx: ToolContext) -> ToolResultBlock:
        """Run one call; every failure becomes an ``is_error`` result (cancellation propagates).

        A ``ToolFile`` or ``ToolImage`` result is sent to the chat; the model reads a note
        saying so (and sees the picture, for a ``ToolImage`` with ``show_model``).
        """
        text, is_error = await self._run(call, ctx)
        if isinstance(text, ToolFile):
            return await _deliver(call, text, ctx)
        return ToolResultBlock(tool_use_id=call.id, content=self._cut(text), is_error=is_error)

    async def execute_all(
        self, calls: list[ToolUseBlock], ctx: ToolContext
    ) -> list[ToolResultBlock]:
        """Run calls concurrently; results come back in call order."""
        return list(await asyncio.gather(*(self.execute(c, ctx) for c in calls)))

    async def _run(self, call: ToolUseBlock, ctx: ToolContext) -> tuple[str | ToolFile, bool]:
        """The result text (or file) of ``call`` and whether it is an error."""
        t = self._tools.get(call.name)
        if t is None:
            available = ", ".join(self._tools) or "(none)"
            return f"Unknown tool {call.name!r}. Available tools: {available}", True
        deadline = asyncio.timeout(t.timeout)
        try:
            async with deadline:
                result = await t.execute(ctx, call.input)
            return (result if isinstance(result, ToolFile) else _to_text(result)), False
        except ValidationError as e:
            tracing.tracer.failed(e)
            if _is_input_error(t, e):
                return _describe_invalid(call.name, e), True
            return _crashed(call, e), True
        except ToolError as e:
            tracing.tracer.failed(e)
            return str(e) or type(e).__name__, True
        except TimeoutError as e:
            tracing.tracer.failed(e)
            if deadline.expired():
                log.warning("tool.timeout", tool=call.name, timeout=t.timeout)
                return f"Tool {call.name} timed out after {t.timeout:g} s", True
            return _crashed(call, e), True
        except Exception as e:
            tracing.tracer.failed(e)
            return _crashed(call, e), True

    def _cut(self, text: str) -> str:
        """``text``, cut to ``max_output_chars`` with a note saying how much was dropped."""
        if len(text) <= self.max_output_chars:
            return text
        dropped = len(text) - self.max_output_chars
        return (
            f"{text[: self.max_output_chars]}\n"
            f"[output cut: {dropped} of {len(text)} characters omitted]"
        )


async def _deliver(call: ToolUseBlock, file: ToolFile, ctx: ToolContext) -> ToolResultBlock:
    """Send a tool's file to the chat; the result tells the model whether it arrived."""
    what = f"{file.filename} ({file.mime}, {_size(len(file.data))})"
    if ctx.send_file is None:
        note = f"{what} was made but could not be sent: there is no chat here."
        return ToolResultBlock(tool_use_id=call.id, content=note, is_error=True)
    try:
        await ctx.send_file(file)
    except Exception as e:  # the chat refused it or is gone: the model should know
        log.warning("tool.file_not_sent", tool=call.name, error=f"{type(e).__name__}: {e}")
        note = f"{what} could not be sent to the user ({type(e).__name__})."
        return ToolResultBlock(tool_use_id=call.id, content=note, is_error=True)
    kind = "picture" if file.as_photo else "file"
    note = f"The {kind} {what} was sent to the user"
    note += f" with the caption: {file.caption}" if file.caption else "."
    shown = await _for_the_model(file) if isinstance(file, ToolImage) else None
    return ToolResultBlock(tool_use_id=call.id, content=note, images=shown)


async def _for_the_model(image: ToolImage) -> tuple[ImageBlock, ...] | None:
    """The picture as the model may see it (scaled, its real type), unless it should not."""
    try:
        scaled = await asyncio.to_thread(scale_image, image.data) if image.show_model else None
    except ImageDecodeBusy:  # the chat got it; the model is told it was sent, not shown it
        scaled = None
    media_type = image_type(scaled) if scaled is not None else None
    if scaled is None or media_type is None:
        return None
    data = base64.b64encode(scaled).decode("ascii")
    return (ImageBlock(source=ImageSource(media_type=media_type, data=data)),)


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{round(n / 1024)} KB"


def _crashed(call: ToolUseBlock, e: Exception) -> str:
    """Log an unexpected tool failure and describe it for the model."""
    log.exception("tool.failed", tool=call.name, tool_use_id=call.id, exc_info=e)
    return f"{type(e).__name__}: {e}"


def _is_input_error(t: Tool, e: ValidationError) -> bool:
    """Whether ``e`` is about the call's arguments, not raised by the tool's own code."""
    model = getattr(t, "args_model", None)
    return model is None or e.title == model.__name__


def _describe_invalid(name: str, e: ValidationError) -> str:
    """A short list of what was wrong with the arguments, so the model can fix its call."""
    lines = [f"Invalid arguments for tool {name}:"]
    for err in e.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        line = f"- {where}: {err['msg']}"
        if err["type"] not in ("missing", "extra_forbidden"):
            got = repr(err["input"])
            line += f" (got {got[:60]}{'…' if len(got) > 60 else ''})"
        lines.append(line)
    lines.append("Fix the arguments and call the tool again.")
    return "\n".join(lines)


def _json_default(obj: Any) -> Any:
    """orjson fallback: pydantic models as their JSON data, anything else as ``str``."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    return str(obj)


def _to_text(result: Any) -> str:
    """What the model sees of a tool's return value."""
    if isinstance(result, str):
        return result
    if result is None:
        return NO_OUTPUT
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    try:
        return orjson.dumps(result, default=_json_default, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return str(result)
