"""Tests of the ``@tool`` decorator, tool sets and the tool registry."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import orjson
import pytest
from pydantic import BaseModel, Field, ValidationError
from structlog.testing import capture_logs

from botkit.errors import ToolError
from botkit.tools import FunctionTool, Tool, ToolContext, ToolRegistry, ToolSet, tool
from botkit.tools.decorator import bound_tools
from botkit.tools.registry import MAX_OUTPUT_CHARS, NO_OUTPUT
from botkit.types import ToolDef, ToolResultBlock, ToolUseBlock

CTX = ToolContext(user_id=7, chat_id=70, timestamp=datetime(2024, 1, 1, tzinfo=UTC))


class Place(BaseModel):
    """A point on the map."""

    lat: float
    lon: float


def call(name: str, **args: Any) -> ToolUseBlock:
    """A tool call as the model would make it."""
    return ToolUseBlock(id=f"id-{name}", name=name, input=args)


async def run(registry: ToolRegistry, name: str, **args: Any) -> ToolResultBlock:
    """Execute one call against ``registry``."""
    return await registry.execute(call(name, **args), CTX)


def has_key(node: Any, key: str) -> bool:
    """Whether ``key`` appears as a key anywhere in a JSON-like structure."""
    if isinstance(node, dict):
        return key in node or any(has_key(v, key) for v in node.values())
    if isinstance(node, list):
        return any(has_key(v, key) for v in node)
    return False


# ---- schema ---------------------------------------------------------------------------


@tool
async def forecast(
    ctx: ToolContext,
    city: str,
    days: int = 3,
    unit: Literal["c", "f"] = "c",
    place: Place | None = None,
) -> str:
    """Get the weather forecast for a city.

    This second paragraph is not part of the description.

    Args:
        city: Name of the city,
            in English.
        days (int): How many days ahead.
        ctx: Not shown to the model.
    """
    return f"{ctx.user_id}:{city}:{days}:{unit}:{place}"


def test_schema_from_signature_and_docstring() -> None:
    d = forecast.definition
    assert d.name == "forecast"
    assert d.description == "Get the weather forecast for a city."
    schema = d.input_schema
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["city"]
    props = schema["properties"]
    assert list(props) == ["city", "days", "unit", "place"]
    assert props["city"] == {"type": "string", "description": "Name of the city, in English."}
    assert props["days"] == {"type": "integer", "default": 3, "description": "How many days ahead."}
    assert props["unit"] == {"type": "string", "enum": ["c", "f"], "default": "c"}
    assert props["place"]["default"] is None
    assert schema["$defs"]["Place"]["required"] == ["lat", "lon"]
    assert not has_key(schema, "title")
    orjson.dumps(schema)  # JSON-serializable as the API needs


def test_context_parameter_is_hidden_whatever_its_name() -> None:
    @tool
    async def who(c: ToolContext, x: int) -> int:
        """Echo."""
        return c.user_id + x

    assert list(who.definition.input_schema["properties"]) == ["x"]


def test_annotated_field_description_wins_over_docstring() -> None:
    @tool
    async def search(
        query: Annotated[str, Field(description="From Field.")],
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
        title: str = "",
    ) -> list[str]:
        """Search.

        Args:
            query: From the docstring.
            limit: Max results.
            title: A parameter named like the noise key pydantic adds.
        """
        return []

    props = search.definition.input_schema["properties"]
    assert props["query"]["description"] == "From Field."
    assert props["limit"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 50,
        "default": 10,
        "description": "Max results.",
    }
    assert props["title"]["description"] == "A parameter named like the noise key pydantic adds."


def test_decorator_forms_and_overrides() -> None:
    async def f(x: int) -> int:
        """Doc."""
        return x

    assert tool(f).definition.name == "f"
    assert tool()(f).definition.description == "Doc."
    t = tool(name="renamed", description="Custom.", timeout=None)(f)
    assert isinstance(t, FunctionTool)
    assert (t.name, t.definition.description, t.timeout) == ("renamed", "Custom.", None)
    assert tool(f).timeout == Tool.timeout


def test_no_parameters_no_docstring() -> None:
    @tool
    async def ping() -> str:
        return "pong"

    assert ping.definition == ToolDef(
        name="ping",
        description="",
        input_schema={"additionalProperties": False, "properties": {}, "type": "object"},
    )


def test_names_that_shadow_pydantic_attributes_are_fine() -> None:
    @tool
    async def query(json: str, schema: str = "public", model_config: int = 0) -> str:
        """Run a query."""
        return f"{json}/{schema}/{model_config}"

    assert list(query.definition.input_schema["properties"]) == ["json", "schema", "model_config"]


def test_bad_definitions_are_rejected_at_decoration() -> None:
    with pytest.raises(ValueError, match="Invalid tool name"):
        tool(lambda: None)

    async def varargs(*names: str) -> None: ...

    with pytest.raises(TypeError, match=r"\*args"):
        tool(varargs)
    with pytest.raises(TypeError, match="needs a function"):
        tool(42)  # type: ignore[call-overload]


def test_direct_call_reaches_the_function() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    assert add(2, 3) == 5


# ---- validation and execution ----------------------------------------------------------


async def test_valid_call_injects_context_and_keeps_defaults() -> None:
    reg = ToolRegistry([forecast])
    result = await run(reg, "forecast", city="Oslo", place={"lat": "59.9", "lon": 10.7})
    assert result == ToolResultBlock(
        tool_use_id="id-forecast", content="7:Oslo:3:c:lat=59.9 lon=10.7"
    )


async def test_omitted_arguments_use_the_functions_own_defaults() -> None:
    seen: list[Any] = []

    @tool
    async def f(items: list[int] | None = None, /, flag: bool = True) -> None:
        """F."""
        seen.append((items, flag))

    reg = ToolRegistry([f])
    await run(reg, "f")
    await run(reg, "f", items=["1", 2], flag=False)
    assert seen == [(None, True), ([1, 2], False)]


async def test_invalid_arguments_give_a_useful_error_and_skip_the_call() -> None:
    calls: list[Any] = []

    @tool
    async def book(room: int, nights: int, guest: str) -> None:
        """Book."""
        calls.append(room)

    with pytest.raises(ValidationError):
        await book.execute(CTX, {"room": "x"})

    result = await run(ToolRegistry([book]), "book", room="twelve", nights=2, extra=1)
    assert result.is_error
    assert result.content.splitlines() == [
        "Invalid arguments for tool book:",
        "- room: Input should be a valid integer, unable to parse string as an integer "
        "(got 'twelve')",
        "- guest: Field required",
        "- extra: Extra inputs are not permitted",
        "Fix the arguments and call the tool again.",
    ]
    assert calls == []


async def test_nested_validation_errors_name_the_path() -> None:
    result = await run(ToolRegistry([forecast]), "forecast", city="X", place={"lat": 1})
    assert result.is_error
    assert "- place.lon: Field required" in result.content


async def test_validation_error_raised_inside_the_tool_is_a_crash_not_bad_input() -> None:
    @tool
    async def parse() -> Place:
        """Parse a remote answer."""
        return Place.model_validate({"lat": 1})

    with capture_logs() as logs:
        result = await run(ToolRegistry([parse]), "parse")
    assert result.is_error
    assert result.content.startswith("ValidationError: 1 validation error for Place")
    assert "Invalid arguments" not in result.content
    assert logs[0]["event"] == "tool.failed"


async def test_unknown_tool_lists_the_available_ones() -> None:
    result = await run(ToolRegistry([forecast, ToolSetExample()]), "forcast")
    assert result.is_error
    assert result.content == (
        "Unknown tool 'forcast'. Available tools: forecast, increment, total, reset"
    )


async def test_tool_error_message_reaches_the_model() -> None:
    @tool
    async def withdraw(amount: int) -> None:
        """Withdraw."""
        raise ToolError(f"Balance too low for {amount}")

    with capture_logs() as logs:
        result = await run(ToolRegistry([withdraw]), "withdraw", amount=5)
    assert (result.content, result.is_error) == ("Balance too low for 5", True)
    assert logs == []


async def test_crash_becomes_an_error_result_and_is_logged() -> None:
    @tool
    async def divide(a: int, b: int) -> float:
        """Divide."""
        return a / b

    with capture_logs() as logs:
        result = await run(ToolRegistry([divide]), "divide", a=1, b=0)
    assert (result.content, result.is_error) == ("ZeroDivisionError: division by zero", True)
    [entry] = logs
    assert entry["event"] == "tool.failed"
    assert entry["tool"] == "divide"
    assert entry["log_level"] == "error"
    assert isinstance(entry["exc_info"], ZeroDivisionError)


async def test_timeout_becomes_an_error_result() -> None:
    cancelled = asyncio.Event()

    @tool(timeout=0.05)
    async def slow() -> str:
        """Never answers."""
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return "never"

    result = await asyncio.wait_for(run(ToolRegistry([slow]), "slow"), timeout=10)
    assert cancelled.is_set(), "the tool was stopped, not left running"
    assert (result.content, result.is_error) == ("Tool slow timed out after 0.05 s", True)


async def test_timeout_error_raised_by_the_tool_itself_is_a_crash() -> None:
    @tool(timeout=None)
    async def fetch() -> None:
        """Fetch."""
        raise TimeoutError("upstream too slow")

    result = await run(ToolRegistry([fetch]), "fetch")
    assert (result.content, result.is_error) == ("TimeoutError: upstream too slow", True)


async def test_cancellation_of_the_caller_propagates() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @tool
    async def wait() -> None:
        """Wait."""
        started.set()
        try:
            await asyncio.sleep(10)
        finally:
            cancelled.set()

    task = asyncio.create_task(run(ToolRegistry([wait]), "wait"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()


async def test_cancelled_error_from_the_tool_is_not_swallowed() -> None:
    @tool
    async def give_up() -> None:
        """Give up."""
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await run(ToolRegistry([give_up]), "give_up")


async def test_sync_function_runs_in_a_worker_thread() -> None:
    loop_thread = threading.get_ident()

    def where(ctx: ToolContext, label: str) -> str:
        """Where it ran."""
        return f"{label}:{ctx.chat_id}:{threading.get_ident() != loop_thread}"

    reg = ToolRegistry()
    assert reg.register(where) is where
    result = await run(reg, "where", label="sync")
    assert (result.content, result.is_error) == ("sync:70:True", False)


# ---- result conversion -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain text", "plain text"),
        (None, NO_OUTPUT),
        (Place(lat=1, lon=2), '{"lat":1.0,"lon":2.0}'),
        ({"n": 1, "ok": True, 2: [1.5]}, '{"n":1,"ok":true,"2":[1.5]}'),
        ([Place(lat=0, lon=0)], '[{"lat":0.0,"lon":0.0}]'),
        (datetime(2024, 5, 1, 12, tzinfo=UTC), '"2024-05-01T12:00:00+00:00"'),
        ({"when": {1, 2} - {1, 2}}, '{"when":"set()"}'),
        (42, "42"),
    ],
)
async def test_results_are_converted_to_text(value: Any, expected: str) -> None:
    @tool
    async def give() -> Any:
        """Give a value."""
        return value

    result = await run(ToolRegistry([give]), "give")
    assert (result.content, result.is_error) == (expected, False)


async def test_long_output_is_cut_with_a_note() -> None:
    @tool
    async def dump() -> str:
        """Dump."""
        return "x" * (MAX_OUTPUT_CHARS + 500)

    result = await run(ToolRegistry([dump]), "dump")
    kept, note = result.content.rsplit("\n", 1)
    assert kept == "x" * MAX_OUTPUT_CHARS
    assert note == f"[output cut: 500 of {MAX_OUTPUT_CHARS + 500} characters omitted]"

    small = await run(ToolRegistry([dump], max_output_chars=10), "dump")
    assert small.content.startswith("x" * 10 + "\n[output cut: ")


# ---- tool sets --------------------------------------------------------------------------


class ToolSetExample(ToolSet):
    """A counter shared by its tools."""

    def __init__(self) -> None:
        self.count = 0

    @tool
    async def increment(self, ctx: ToolContext, by: int = 1) -> int:
        """Add to the counter.

        Args:
            by: How much to add.
        """
        self.count += by
        return self.count

    @tool(name="total")
    def current(self) -> int:
        """The counter's value."""
        return self.count

    def not_a_tool(self) -> None:
        """A plain method."""

    @tool
    async def reset(self) -> None:
        """Reset the counter."""
        self.count = 0


class ExtendedExample(ToolSetExample):
    """Overrides one tool, hides another, adds one."""

    @tool
    async def increment(self, ctx: ToolContext, by: int = 2) -> int:
        """Add twice."""
        self.count += 2 * by
        return self.count

    reset = None  # type: ignore[assignment]

    @tool
    async def double(self) -> int:
        """Double the counter."""
        self.count *= 2
        return self.count


async def test_toolset_methods_share_instance_state() -> None:
    a, b = ToolSetExample(), ToolSetExample()
    reg = ToolRegistry()
    reg.register_toolset(a)
    assert reg.names == ["increment", "total", "reset"]
    assert (await run(reg, "increment", by=5)).content == "5"
    assert (await run(reg, "increment")).content == "6"
    assert (await run(reg, "total")).content == "6"
    assert (a.count, b.count) == (6, 0)
    schema = reg.definitions()[0].input_schema
    assert schema["properties"] == {
        "by": {"type": "integer", "default": 1, "description": "How much to add."}
    }


async def test_bound_tools_follow_definition_order_and_overrides() -> None:
    ext = ExtendedExample()
    tools = bound_tools(ext)
    assert [t.name for t in tools] == ["increment", "total", "double"]
    assert [t.name for t in ext.tools()] == ["increment", "total", "double"]
    await tools[0].execute(CTX, {"by": 1})
    assert ext.count == 2


async def test_instance_attribute_is_a_usable_bound_tool() -> None:
    counter = ToolSetExample()
    assert isinstance(counter.increment, FunctionTool)
    assert counter.current() == 0  # direct call, self filled in
    assert await counter.increment.execute(CTX, {"by": 3}) == 3
    assert await counter.increment(CTX, 1) == 4
    unbound = ToolSetExample.increment
    assert isinstance(unbound, FunctionTool)
    with pytest.raises(TypeError, match="through an instance"):
        await unbound.execute(CTX, {})


def test_registering_a_toolset_through_register() -> None:
    reg = ToolRegistry()
    counter = ToolSetExample()
    assert reg.register(counter) is counter
    assert len(reg) == 3


def test_unbound_methods_and_classes_are_refused() -> None:
    reg = ToolRegistry()
    with pytest.raises(TypeError, match="'increment' is a method"):
        reg.register(ToolSetExample.increment)
    with pytest.raises(TypeError, match="class ToolSetExample: pass an instance"):
        reg.register(ToolSetExample)
    assert len(reg) == 0


# ---- the registry -----------------------------------------------------------------------


async def _noop() -> None:
    """Nothing."""


def test_duplicate_names_are_rejected() -> None:
    reg = ToolRegistry([forecast])
    with pytest.raises(ValueError, match="'forecast' is already registered"):
        reg.register(tool(name="forecast")(_noop))
    with pytest.raises(TypeError, match="Cannot register int"):
        reg.register(3)  # type: ignore[type-var]


def test_lookup_order_and_subset() -> None:
    noop = tool(_noop)
    reg = ToolRegistry([forecast, noop], max_output_chars=50)
    assert reg.names == ["forecast", "_noop"]
    assert [d.name for d in reg.definitions()] == ["forecast", "_noop"]
    assert reg.get("forecast") is forecast
    assert reg.get("missing") is None
    assert "forecast" in reg
    assert "missing" not in reg
    assert len(reg) == 2
    assert list(reg) == [forecast, noop]

    sub = reg.subset(["_noop", "forecast"])
    assert sub.names == ["forecast", "_noop"]
    assert reg.subset(["_noop"]).names == ["_noop"]
    assert sub.max_output_chars == 50
    with pytest.raises(ValueError, match="Unknown tools: nope"):
        reg.subset(["forecast", "nope"])


async def test_execute_all_keeps_call_order_and_runs_concurrently() -> None:
    finished: dict[str, asyncio.Event] = {"first": asyncio.Event(), "second": asyncio.Event()}

    @tool
    async def slow(label: str, after: str) -> str:
        """Answer once ``after`` has finished (or at once if it is empty)."""
        if after:
            await finished[after].wait()  # possible only while the other call runs too
        finished[label].set()
        return label

    reg = ToolRegistry([slow])
    calls = [
        ToolUseBlock(id="a", name="slow", input={"label": "first", "after": "second"}),
        ToolUseBlock(id="b", name="slow", input={"label": "second", "after": ""}),
        ToolUseBlock(id="c", name="nope", input={}),
    ]
    results = await asyncio.wait_for(reg.execute_all(calls, CTX), timeout=10)
    assert [(r.tool_use_id, r.content) for r in results[:2]] == [("a", "first"), ("b", "second")]
    assert results[2].tool_use_id == "c"
    assert results[2].is_error
    assert await reg.execute_all([], CTX) == []


async def test_execute_all_runs_two_slow_tools_in_parallel() -> None:
    napping = 0
    both_napping = asyncio.Event()

    @tool
    async def nap() -> str:
        """Nap until the other nap has started too."""
        nonlocal napping
        napping += 1
        if napping == 2:
            both_napping.set()
        await both_napping.wait()  # run one after the other, the first would never wake
        return "rested"

    reg = ToolRegistry([nap])
    results = await asyncio.wait_for(reg.execute_all([call("nap"), call("nap")], CTX), timeout=10)
    assert [r.content for r in results] == ["rested", "rested"]


class EchoTool(Tool):
    """A hand-written tool with its own validation."""

    timeout = None

    @property
    def definition(self) -> ToolDef:
        """Echo definition."""
        return ToolDef(name="echo", description="Echo.", input_schema={"type": "object"})

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        """Echo the validated place."""
        return Place.model_validate(args)


async def test_hand_written_tools_get_the_same_treatment() -> None:
    reg = ToolRegistry([EchoTool()])
    ok = await run(reg, "echo", lat=1, lon=2)
    assert ok.content == '{"lat":1.0,"lon":2.0}'
    bad = await run(reg, "echo", lat=1)
    assert bad.is_error
    assert "- lon: Field required" in bad.content
