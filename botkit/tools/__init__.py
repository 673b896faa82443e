"""Tools the model can call: definitions, the ``@tool`` decorator and the registry."""

from botkit.tools.base import ContextInjector, Tool, ToolContext
from botkit.tools.decorator import FunctionTool, ToolSet, tool
from botkit.tools.files import ToolFile, ToolImage
from botkit.tools.registry import ToolRegistry

__all__ = [
    "ContextInjector",
    "FunctionTool",
    "Tool",
    "ToolContext",
    "ToolFile",
    "ToolImage",
    "ToolRegistry",
    "ToolSet",
    "tool",
]
