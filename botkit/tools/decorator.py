"""The ``@tool`` decorator: typed Python functions and ``ToolSet`` methods become tools.

The input schema comes from the signature (through a pydantic model), the description from
the docstring's first paragraph, and parameter descriptions from its Google-style ``Args:``
section or from ``Annotated[T, Field(description=...)]`` (which wins when both are given).
A parameter annotated :class:`ToolContext` (any name) is injected and hidden from the model.

Plain (sync) functions are accepted and run in a worker thread with ``asyncio.to_thread`` so
they do not block the event loop; a thread cannot be interrupted, so on timeout the model
gets its error at once while the thread finishes in the background.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, overload

import structlog
from pydantic import BaseModel, ConfigDict, Field, create_model

from botkit.errors import ConfigError
from botkit.tools.base import Tool, ToolContext
from botkit.types import ToolDef

__all__ = ["FunctionTool", "ToolSet", "bound_tools", "tool"]

log = structlog.get_logger(__name__)

_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_SECTION_RE = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ARGS_HEADER_RE = re.compile(r"^(\s*)(Args|Arguments|Parameters):\s*$")
_ARG_LINE_RE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_OPAQUE_SCHEMA_KEYS = frozenset({"default", "examples", "const", "enum"})


@dataclass(frozen=True, slots=True)
class _Param:
    """One parameter of the wrapped function and how it gets its value."""

    name: str
    field: str | None
    """Its field in the arguments model; ``None`` for the injected ``ToolContext``."""
    positional: bool


# ---- docstrings -----------------------------------------------------------------------


def _summary(doc: str) -> str:
    """The first paragraph of a docstring, joined into one line."""
    lines: list[str] = []
    for line in doc.splitlines():
        if not line.strip() or _SECTION_RE.match(line):
            break
        lines.append(line.strip())
    return " ".join(lines)


def _arg_descriptions(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section."""
    found: dict[str, list[str]] = {}
    header_indent: int | None = None
    entry_indent: int | None = None
    current: list[str] | None = None
    for line in doc.splitlines():
        indent = len(line) - len(line.lstrip())
        if header_indent is None:
            if m := _ARGS_HEADER_RE.match(line):
                header_indent = len(m.group(1))
            continue
        if not line.strip():
            continue
        if indent <= header_indent:
            break
        if entry_indent is None:
            entry_indent = indent
        if indent == entry_indent and (m := _ARG_LINE_RE.match(line.strip())):
            current = found.setdefault(m.group(1), [])
            current.append(m.group(2).strip())
        elif current is not None:
            current.append(line.strip())
    return {name: " ".join(p for p in parts if p) for name, parts in found.items()}


# ---- schema ---------------------------------------------------------------------------


def _strip_titles(node: Any) -> Any:
    """The schema without pydantic's ``title`` entries (property names are left alone)."""
    if isinstance(node, list):
        return [_strip_titles(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: value if key in _OPAQUE_SCHEMA_KEYS else _strip_titles(value)
        for key, value in node.items()
        if not (key == "title" and isinstance(value, str))
    }


def _schema(model: type[BaseModel], docs: dict[str, str]) -> dict[str, Any]:
    """The cleaned JSON schema of ``model``, with docstring descriptions filled in."""
    schema: dict[str, Any] = _strip_titles(model.model_json_schema())
    for name, prop in schema.get("properties", {}).items():
        if docs.get(name):
            prop.setdefault("description", docs[name])
    return schema


def _is_method(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` was defined in a class body (so its first parameter is the instance)."""
    parts = getattr(fn, "__qualname__", "").split(".")
    return len(parts) > 1 and parts[-2] != "<locals>"


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """The resolved type hints of ``fn``, ``Annotated`` metadata kept."""
    try:
        return inspect.get_annotations(fn, eval_str=True)
    except Exception as e:
        raise TypeError(f"Cannot resolve the type hints of {fn.__qualname__}: {e}") from e


def _where(fn: Callable[..., Any]) -> str:
    """``module.qualname``: where a tool's function is defined, for error messages."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _check_documented(
    fn: Callable[..., Any], name: str, doc: str, docs: dict[str, str], *, described: bool
) -> None:
    """``Args:`` entries must name parameters (ConfigError); no docstring is logged once."""
    parameters = set(inspect.signature(fn).parameters)
    unknown = sorted(set(docs) - parameters)
    if unknown:
        raise ConfigError(
            f"tool {name!r} ({_where(fn)}): its docstring's Args: names "
            f"{', '.join(repr(u) for u in unknown)}, which is no parameter of it; "
            f"the parameters are {', '.join(sorted(parameters)) or 'none'}"
        )
    if not doc.strip() and not described:
        log.warning("tools.missing_docstring", tool=name, function=_where(fn))


# ---- the tool -------------------------------------------------------------------------


class FunctionTool(Tool):
    """A tool backed by a typed function; arguments are validated by pydantic before the call.

    Used on a method (of a ``ToolSet`` or any class), it is a descriptor: reading it from an
    instance gives a copy bound to that instance, whose ``self`` is not part of the schema.
    Calling a ``FunctionTool`` directly calls the wrapped function unchanged.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = Tool.timeout,
        approval: bool = False,
        idempotent: bool = False,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"@tool needs a function, got {type(fn).__name__}")
        self.fn = fn
        self.timeout = timeout
        self.approval = approval
        self.idempotent = idempotent
        self._instance: object | None = None
        self._is_method = _is_method(fn)
        tool_name: str = name or str(getattr(fn, "__name__", ""))
        if not _NAME_RE.match(tool_name):
            raise ValueError(
                f"Invalid tool name {tool_name!r}: use 1-64 letters, digits, '_' or '-' "
                "(pass name=... to @tool)"
            )
        doc = inspect.getdoc(fn) or ""
        self._params, self.args_model = self._inspect(fn, tool_name)
        docs = _arg_descriptions(doc)
        _check_documented(fn, tool_name, doc, docs, described=description is not None)
        self._definition = ToolDef(
            name=tool_name,
            description=description if description is not None else _summary(doc),
            input_schema=_schema(self.args_model, docs),
        )

    def _inspect(self, fn: Callable[..., Any], name: str) -> tuple[list[_Param], type[BaseModel]]:
        """The parameters of ``fn`` and the pydantic model validating its arguments."""
        hints = _hints(fn)
        params = list(inspect.signature(fn).parameters.values())
        if self._is_method:
            if not params:
                raise TypeError(f"Method {fn.__qualname__} has no 'self' parameter")
            params = params[1:]
        fields: dict[str, Any] = {}
        out: list[_Param] = []
        for i, p in enumerate(params):
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"Tool {name!r}: *args and **kwargs are not supported")
            if p.name not in hints:
                raise ConfigError(
                    f"tool {name!r} ({_where(fn)}): parameter {p.name!r} has no type; "
                    "annotate it (e.g. 'city: str'), the model is told the types"
                )
            hint = hints[p.name]
            positional = p.kind is p.POSITIONAL_ONLY
            if hint is ToolContext:
                out.append(_Param(p.name, None, positional))
                continue
            default = ... if p.default is p.empty else p.default
            fields[f"a{i}"] = (hint, Field(default, alias=p.name))
            out.append(_Param(p.name, f"a{i}", positional))
        model = create_model(
            f"{name} arguments",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
        return out, model

    @property
    def definition(self) -> ToolDef:
        """Name, description and input schema shown to the model."""
        return self._definition

    @property
    def is_unbound_method(self) -> bool:
        """Whether this is a method read from its class, which needs an instance to run."""
        return self._is_method and self._instance is None

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """Validate ``args`` (raising ``pydantic.ValidationError``), then call the function."""
        if self.is_unbound_method:
            raise TypeError(f"Tool {self.name!r} is a method: use it through an instance")
        values = self.args_model.model_validate(args)
        positional, keywords = self._arguments(ctx, values)
        if inspect.iscoroutinefunction(self.fn):
            result = await self.fn(*positional, **keywords)
        else:
            result = await asyncio.to_thread(self.fn, *positional, **keywords)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _arguments(self, ctx: ToolContext, values: BaseModel) -> tuple[list[Any], dict[str, Any]]:
        """Positional and keyword arguments for the call; omitted ones keep their defaults."""
        positional: list[Any] = [] if self._instance is None else [self._instance]
        keywords: dict[str, Any] = {}
        for p in self._params:
            if p.field is None:
                value: Any = ctx
            elif p.field in values.model_fields_set or p.positional:
                value = getattr(values, p.field)
            else:
                continue
            if p.positional:
                positional.append(value)
            else:
                keywords[p.name] = value
        return positional, keywords

    def bind(self, instance: object) -> FunctionTool:
        """A copy of this method tool bound to ``instance``."""
        bound = copy.copy(self)
        bound._instance = instance
        return bound

    def __get__(self, instance: object | None, owner: type | None = None) -> FunctionTool:
        """Bound to ``instance`` when read from one (methods only)."""
        if instance is None or not self._is_method or self._instance is not None:
            return self
        return self.bind(instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly, without validation."""
        if self._instance is not None:
            return self.fn(self._instance, *args, **kwargs)
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<FunctionTool {self.name}>"


# ---- the decorator --------------------------------------------------------------------


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = Tool.timeout,
    approval: bool = False,
    idempotent: bool = False,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = Tool.timeout,
    approval: bool = False,
    idempotent: bool = False,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a typed function (async or sync) a tool: ``@tool``, ``@tool()`` or ``@tool(...)``;
    ``approval=True``: a person presses Allow before each call runs; ``idempotent=True``: a
    second run of a call does no more than the first (a call cut off by a crash may be made
    again)."""

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f,
            name=name,
            description=description,
            timeout=timeout,
            approval=approval,
            idempotent=idempotent,
        )

    return wrap if fn is None else wrap(fn)


def bound_tools(obj: ToolSet | object) -> list[Tool]:
    """The ``@tool`` methods of ``obj``'s class, bound to ``obj``, in definition order."""
    names: list[str] = []
    for cls in reversed(type(obj).__mro__):
        names.extend(n for n in vars(cls) if n not in names)
    tools: list[Tool] = []
    for n in names:
        attr = next(vars(c)[n] for c in type(obj).__mro__ if n in vars(c))
        if isinstance(attr, FunctionTool):
            tools.append(attr.__get__(obj, type(obj)))
    return tools


class ToolSet:
    """A group of tools sharing state: methods decorated with ``@tool`` become bound tools."""

    def tools(self) -> list[Tool]:
        """The tools of this set, bound to this instance."""
        return bound_tools(self)
