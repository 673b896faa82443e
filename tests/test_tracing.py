"""Traces of turns in OpenTelemetry's GenAI conventions: the real aiogram and anthropic clients
against the fakes, spans caught by the SDK's in-memory exporter (or sent over OTLP/HTTP)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiohttp import web
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import StatusCode
from test_handoff import (
    ANN,
    BOB,
    OPS,
    TEXTS,
    Setup,
    hand_over,
    in_topic,
    operator_says,
    said_to,
)
from test_scaleout import queued, queued_bot

from botkit import Bot, Message, tool, tracing
from botkit.llm import internals
from botkit.llm.anthropic import AnthropicLLM
from botkit.llm.base import LLMRequest
from botkit.log import configure_logging
from botkit.messengers.base import Incoming
from botkit.testing import FakeAnthropicServer, FakeReply, FakeTelegramServer, make_bot
from botkit.testing.anthropic import FakeError, FakeRequest
from botkit.testing.harness import running
from botkit.testing.kit import ask, fake_llm, make_settings

USER = 4242


class Spans:
    """What the in-memory exporter caught, by name."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    @property
    def all(self) -> Sequence[ReadableSpan]:
        """Every finished span, in the order they ended."""
        return self.exporter.get_finished_spans()

    def named(self, prefix: str) -> list[ReadableSpan]:
        """The finished spans whose name starts with ``prefix``."""
        return [s for s in self.all if s.name.startswith(prefix)]

    def one(self, prefix: str) -> ReadableSpan:
        """The one finished span named ``prefix…``."""
        [span] = self.named(prefix)
        return span

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        """The spans whose parent is ``parent``."""
        assert parent.context is not None
        return [s for s in self.all if s.parent and s.parent.span_id == parent.context.span_id]


@pytest.fixture
def spans() -> Iterator[Spans]:
    """An in-memory exporter; pass ``tracer_provider=spans.provider`` to the bot."""
    caught = Spans()
    yield caught
    tracing.reset()


@tool
async def forecast(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@tool
async def broken(city: str) -> str:
    """A tool that always fails."""
    raise ValueError(f"no data for {city}")


def traced_bot(claude: FakeAnthropicServer, tmp_path: Path, spans: Spans, **more: Any) -> Bot:
    values: dict[str, Any] = {"access": "open", "stream_replies": False}
    return make_bot(claude, tmp_path, tracer_provider=spans.provider, **{**values, **more})


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def everything_recorded(spans: Spans) -> str:
    """Every attribute and event of every span, as one text to search."""
    parts = []
    for span in spans.all:
        parts.append(json.dumps(attributes(span), default=str))
        parts += [json.dumps(dict(e.attributes or {}), default=str) for e in span.events]
        parts.append(span.name)
    return "\n".join(parts)


async def test_a_tool_turn_is_one_trace_of_genai_spans(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, spans: Spans
) -> None:
    claude.enqueue(
        FakeReply.tool_use("forecast", {"city": "Oslo"}, id="toolu_01abc"),
        FakeReply.text("It is sunny in Oslo."),
    )
    bot = traced_bot(claude, tmp_path, spans, tools=[forecast])
    async with running(bot, telegram):
        reply = await ask(telegram, USER, "Weather in Oslo?")
    assert reply.text == "It is sunny in Oslo."

    turn = spans.one("invoke_agent ")
    assert turn.name == f"invoke_agent {telegram.bot_username}"
    turn_attributes = attributes(turn)
    assert turn_attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn_attributes["gen_ai.provider.name"] == "anthropic"
    assert turn_attributes["gen_ai.agent.name"] == telegram.bot_username
    assert turn_attributes["botkit.turn.outcome"] == "answered"
    # The user is a keyed hash, in the conversation id too.
    assert "user.id" not in turn_attributes
    assert len(turn_attributes["user.hash"]) == 16
    conversation = turn_attributes["gen_ai.conversation.id"]
    assert conversation.startswith("user_") and str(USER) not in conversation
    # Passed gates are one attribute (an event each would cost CPU for nothing to see).
    assert list(turn_attributes["botkit.gates.passed"]) == ["authorize", "budget"]
    assert [e.name for e in turn.events] == []

    chats = sorted(spans.named("chat "), key=lambda s: s.start_time or 0)
    assert [c.name for c in chats] == [f"chat {bot.settings.model}"] * 2
    assert all(c.parent is not None and c.parent.span_id == turn.context.span_id for c in chats)
    first, second = (attributes(c) for c in chats)
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == bot.settings.model
    assert first["gen_ai.response.model"] == bot.settings.model
    assert first["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert second["gen_ai.response.finish_reasons"] == ("end_turn",)
    for call in (first, second):
        assert call["gen_ai.usage.input_tokens"] > 0
        assert call["gen_ai.usage.output_tokens"] > 0
        assert "gen_ai.usage.cache_read.input_tokens" in call
        assert "gen_ai.usage.cache_creation.input_tokens" in call

    executed = spans.one("execute_tool ")
    assert executed.name == "execute_tool forecast"
    assert executed.parent is not None and executed.parent.span_id == turn.context.span_id
    assert attributes(executed) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.tool.name": "forecast",
        "gen_ai.tool.call.id": "toolu_01abc",
        "gen_ai.tool.type": "function",
    }
    assert executed.status.status_code != StatusCode.ERROR

    # Each call to the API carried its chat span's context (W3C traceparent).
    sent_parents = [r.headers["traceparent"].split("-")[2] for r in claude.requests]
    assert sent_parents == [f"{c.context.span_id:016x}" for c in chats]
    # The reply went out as a client span of the same trace, named by its method.
    [sent] = [s for s in spans.children(turn) if s.name == "sendMessage"]
    assert attributes(sent)["rpc.method"] == "sendMessage"
    assert {s.context.trace_id for s in [turn, *chats, executed, sent]} == {turn.context.trace_id}
    assert telegram.token not in everything_recorded(spans)
    assert telegram.token.split(":")[1] not in everything_recorded(spans)


async def test_a_failed_tool_call_carries_its_error_type(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, spans: Spans
) -> None:
    claude.enqueue(FakeReply.tool_use("broken", {"city": "Rome"}), FakeReply.text("Sorry."))
    bot = traced_bot(claude, tmp_path, spans, tools=[broken])
    async with running(bot, telegram):
        await ask(telegram, USER, "Weather in Rome?")
    executed = spans.one("execute_tool broken")
    assert attributes(executed)["error.type"] == "ValueError"
    assert executed.status.status_code == StatusCode.ERROR
    assert attributes(spans.one("invoke_agent"))["botkit.turn.outcome"] == "answered"


async def test_a_rejected_stranger_has_no_chat_span(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, spans: Spans
) -> None:
    bot = traced_bot(claude, tmp_path, spans, access="invite")
    async with running(bot, telegram):
        await ask(telegram, USER, "let me in")
    turn = spans.one("invoke_agent")
    assert attributes(turn)["botkit.turn.outcome"] == "rejected"
    # The gate that stopped the turn is an event (when it stopped it); none passed.
    gates = {e.name: dict(e.attributes or {}) for e in turn.events}
    assert gates == {"botkit.gate.authorize": {"botkit.gate.passed": False}}
    assert "botkit.gates.passed" not in attributes(turn)
    assert spans.named("chat") == []
    assert claude.requests == []


async def test_a_retried_call_and_a_photo_download_are_in_the_trace(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, spans: Spans
) -> None:
    claude.enqueue(FakeError.overloaded(), FakeReply.text("A nice picture."))
    settings = make_settings(tmp_path, access="open", stream_replies=False)
    llm = fake_llm(claude, model=settings.model, max_retries=1)  # the SDK's retry, once
    bot = Bot(settings=settings, llm=llm, tracer_provider=spans.provider)
    async with running(bot, telegram):
        telegram.send_photo(USER, caption="look")
        [reply] = await telegram.wait_for_messages(USER, 1, timeout=20)
    assert reply.text == "A nice picture."
    turn = spans.one("invoke_agent")
    chat = spans.one("chat")
    assert attributes(chat)["botkit.llm.retries"] == 1
    [retry] = [e for e in chat.events if e.name == "botkit.llm.retry"]
    assert dict(retry.attributes or {})["http.response.status_code"] == 529
    assert chat.status.status_code != StatusCode.ERROR
    download = spans.one("download file")
    assert download.parent is not None and download.parent.span_id == turn.context.span_id
    [get_file] = spans.named("getFile")
    assert get_file.parent is not None and get_file.parent.span_id == download.context.span_id


def scheduling(request: FakeRequest) -> FakeReply:
    """Schedules a task in a second; the task, once run, is answered."""
    if request.tool_results():
        return FakeReply.text("Scheduled.")
    if "[Scheduled task" in request.last_user_text():
        return FakeReply.text("Here is your report.")
    return FakeReply.tool_use("schedule_task", {"when": "1s", "instruction": "report"})


async def test_a_scheduled_tasks_turn_links_to_the_turn_that_scheduled_it(
    telegram: FakeTelegramServer, tmp_path: Path, spans: Spans
) -> None:
    async with FakeAnthropicServer(responder=scheduling) as claude:
        bot = traced_bot(claude, tmp_path, spans)
        async with running(bot, telegram):
            telegram.send_text(USER, "Send me a report in a second")
            await telegram.wait_for_messages(USER, 2, timeout=20)
            await asyncio.sleep(0.2)  # the task turn's span ends just after its reply
    scheduling_turn, task_turn = sorted(
        spans.named("invoke_agent"), key=lambda s: s.start_time or 0
    )
    scheduled = spans.one("execute_tool schedule_task")
    assert scheduled.context.trace_id == scheduling_turn.context.trace_id
    assert scheduling_turn.links == ()
    # The task's turn is a trace of its own, linked to the tool call (in the turn) that set it.
    assert task_turn.parent is None and task_turn.context.trace_id != scheduled.context.trace_id
    [link] = task_turn.links
    assert (link.context.trace_id, link.context.span_id) == (
        scheduled.context.trace_id,
        scheduled.context.span_id,
    )


async def test_a_handoff_is_traced_opened_relayed_each_way_and_done(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, spans: Spans
) -> None:
    telegram.make_forum(OPS)
    telegram.make_chat_admin(OPS, BOB)
    setup = Setup(claude, telegram, tmp_path, None)
    async with setup.serving(setup.bot(tracer_provider=spans.provider)):
        topic = await hand_over(setup)
        telegram.send_text(ANN, "order 5521", first_name="Ann")
        await in_topic(telegram, topic, "order 5521")
        operator_says(setup, topic, "It ships today")
        await said_to(telegram, ANN, "It ships today")
        operator_says(setup, topic, "/done")
        await said_to(telegram, ANN, TEXTS.handoff_closed_text)
        await asyncio.sleep(0.2)  # the last turn's span ends just after its reply
    turns = {s.context.span_id: s for s in spans.named("invoke_agent")}

    def turn_of(span: ReadableSpan) -> ReadableSpan:
        assert span.parent is not None
        return turns[span.parent.span_id]

    opened = spans.one("handoff open")
    assert turn_of(opened).attributes["botkit.turn.outcome"] == "command"  # /human
    assert [e.name for e in opened.events] == ["botkit.handoff.opened"]
    assert [s.name for s in spans.children(opened) if s.name.startswith("chat ")] == [
        spans.named("chat ")[0].name  # the summary for the operators: a call of the handoff
    ]
    relays = {attributes(s)["botkit.handoff.direction"]: s for s in spans.named("handoff relay")}
    assert set(relays) == {"to_operators", "to_user"}
    for relay in relays.values():
        assert attributes(relay)["botkit.handoff.topic_id"] == topic
        assert turn_of(relay).attributes["botkit.turn.outcome"] == "handoff"
    done = spans.one("handoff done")
    assert attributes(done) == {"botkit.handoff.topic_id": topic, "botkit.handoff.refused": False}
    assert "order 5521" not in everything_recorded(spans)  # what was said stays out


@pytest.mark.parametrize("sdk_spans", ["true", "false"])
async def test_the_sdk_path_sends_the_chat_spans_context_too(
    claude: FakeAnthropicServer,
    tmp_path: Path,
    spans: Spans,
    monkeypatch: pytest.MonkeyPatch,
    sdk_spans: str,
) -> None:
    # The SDK's own instrumentation sends the current context when its spans are on; with
    # them off (ANTHROPIC_OPEN_TELEMETRY=false) it sends nothing, and botkit's header goes.
    monkeypatch.setenv("ANTHROPIC_OPEN_TELEMETRY", sdk_spans)
    renamed = (*internals.SDK_CLIENT_METHODS, "_renamed_in_a_later_release")
    monkeypatch.setattr(internals, "SDK_CLIENT_METHODS", renamed)
    found = internals.check.__wrapped__()
    monkeypatch.setattr(internals, "check", lambda: found)  # the SDK's public API, not ours
    claude.enqueue(FakeReply.text("streamed"), FakeReply.text("whole"))
    request = LLMRequest(system="s", messages=[Message.user_text("hi")])
    with tracing.installed(make_settings(tmp_path), spans.provider):
        llm = AnthropicLLM(api_key="k", model="claude-sonnet-5-5", base_url=claude.base_url)
        try:
            assert llm.transport is None

            async def ignore(_delta: str) -> None:
                pass

            await llm.complete(request, ignore)
            await llm.complete(request)
        finally:
            await llm.close()
    chats = sorted(spans.named("chat "), key=lambda s: s.start_time or 0)
    sent = [r.headers["traceparent"].split("-")[2] for r in claude.requests]
    assert sent == [f"{c.context.span_id:016x}" for c in chats] and len(sent) == 2


async def test_content_stays_out_of_traces_by_default(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, spans: Spans
) -> None:
    claude.enqueue(FakeReply.tool_use("forecast", {"city": "Lisbon"}), FakeReply.text("Warm."))
    bot = traced_bot(claude, tmp_path, spans, tools=[forecast], system_prompt="SECRET-PROMPT")
    async with running(bot, telegram):
        await ask(telegram, USER, "PRIVATE-QUESTION about Lisbon")
    recorded = everything_recorded(spans)
    assert spans.named("chat") and spans.named("execute_tool")
    for private in ("PRIVATE-QUESTION", "SECRET-PROMPT", "Lisbon", "Warm."):
        assert private not in recorded
    for key in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.result"):
        assert key not in recorded


async def test_content_is_traced_with_the_setting(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, spans: Spans
) -> None:
    claude.enqueue(FakeReply.tool_use("forecast", {"city": "Lisbon"}), FakeReply.text("Warm."))
    bot = traced_bot(
        claude, tmp_path, spans, tools=[forecast], system_prompt="THE-PROMPT", trace_content=True
    )
    async with running(bot, telegram):
        await ask(telegram, USER, "How is Lisbon?")
    first, second = sorted(spans.named("chat"), key=lambda s: s.start_time or 0)
    asked = json.loads(attributes(first)["gen_ai.input.messages"])
    assert asked[-1]["role"] == "user"
    assert any("How is Lisbon?" in p.get("content", "") for p in asked[-1]["parts"])
    assert "THE-PROMPT" in attributes(first)["gen_ai.system_instructions"]
    [called] = json.loads(attributes(first)["gen_ai.output.messages"])
    assert called["finish_reason"] == "tool_use"
    assert called["parts"][-1]["name"] == "forecast"
    [answered] = json.loads(attributes(second)["gen_ai.output.messages"])
    assert answered["parts"] == [{"type": "reasoning"}, {"type": "text", "content": "Warm."}]
    executed = attributes(spans.one("execute_tool"))
    assert json.loads(executed["gen_ai.tool.call.arguments"]) == {"city": "Lisbon"}
    assert executed["gen_ai.tool.call.result"] == "sunny in Lisbon"


async def test_user_ids_are_traced_as_they_are_with_the_setting(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, spans: Spans
) -> None:
    bot = traced_bot(claude, tmp_path, spans, trace_user_ids=True)
    async with running(bot, telegram):
        await ask(telegram, USER, "hi")
    turn = attributes(spans.one("invoke_agent"))
    assert turn["user.id"] == str(USER)
    assert turn["gen_ai.conversation.id"] == f"user_{USER}"


async def test_a_sampled_out_turn_says_it_records_nothing(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)  # a ratio sampler leaves most turns out
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    bot = make_bot(claude, tmp_path, tracer_provider=provider, access="open", trace_content=True)
    try:
        async with running(bot, telegram):
            reply = await ask(telegram, USER, "hi")
        assert reply.text
        now = datetime.now(UTC)
        message = Incoming(update_id=1, user_id=USER, chat_id=USER, text="hi", date=now)
        with tracing.tracer.turn(message, None, "shared") as turn:
            request = LLMRequest(system="s", messages=[Message.user_text("hi")])
            with tracing.tracer.chat(request, "m") as chat:
                pass
    finally:
        tracing.reset()
    assert not turn.recording and not chat.recording  # so the content is not even encoded
    assert exporter.get_finished_spans() == ()


async def test_log_lines_carry_the_trace_and_span_ids(
    claude: FakeAnthropicServer,
    tmp_path: Path,
    spans: Spans,
    capsys: pytest.CaptureFixture[str],
) -> None:
    traced_bot(claude, tmp_path, spans)  # turns tracing on
    configure_logging("INFO")
    try:
        with tracing.tracer.span("work") as span:
            structlog.get_logger("t").info("inside")
        structlog.get_logger("t").info("outside")
    finally:
        structlog.reset_defaults()
    assert span.recording
    inside, outside = (json.loads(line) for line in capsys.readouterr().err.splitlines())
    [work] = spans.named("work")
    assert work.context is not None
    assert inside["trace_id"] == f"{work.context.trace_id:032x}"
    assert inside["span_id"] == f"{work.context.span_id:016x}"
    assert "trace_id" not in outside


def test_tracing_is_wanted_only_when_an_otel_variable_asks() -> None:
    assert not tracing.wanted({})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing.wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"})
    assert not tracing.wanted({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"})


NO_OTEL_TURN = textwrap.dedent(
    """
    import asyncio, builtins, sys
    from pathlib import Path
    from tempfile import mkdtemp

    importers = set()
    plain_import = builtins.__import__

    def watched_import(name, globals=None, locals=None, fromlist=(), level=0):
        if name.startswith("opentelemetry"):
            importers.add(sys._getframe(1).f_code.co_filename)
        return plain_import(name, globals, locals, fromlist, level)

    builtins.__import__ = watched_import

    import botkit
    from botkit.testing import FakeAnthropicServer, FakeTelegramServer, make_bot
    from botkit.testing.harness import running
    from botkit.testing.kit import ask, fake_llm, make_settings

    async def main():
        async with FakeAnthropicServer() as claude, FakeTelegramServer() as telegram:
            bot = make_bot(claude, Path(mkdtemp()), access="open")
            async with running(bot, telegram):
                reply = await ask(telegram, 5, "hello")
        print(reply.text)
        package = str(Path(botkit.__file__).parent)
        print(sorted(f for f in importers if f.startswith(package)))
        loaded = ("opentelemetry.sdk", "opentelemetry.exporter", "botkit.tracing.otel")
        print(sorted(m for m in sys.modules if m.startswith(loaded)))

    asyncio.run(main())
    """
)


def test_without_otel_variables_botkit_imports_nothing_of_opentelemetry() -> None:
    # The anthropic SDK imports opentelemetry-api itself (a dependency of its own): botkit
    # adds no import of it, and the SDK, the exporters and botkit's tracer stay unloaded.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", NO_OTEL_TURN],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # a loaded machine takes most of a minute to import it all
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-3:] == ["echo: hello", "[]", "[]"]


# --- OTLP over HTTP to a local receiver ------------------------------------------------------


class OtlpReceiver:
    """A local OTLP/HTTP endpoint: keeps each ``ExportTraceServiceRequest`` decoded."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.content_types: list[str] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        self.content_types.append(request.content_type)
        self.requests.append(ExportTraceServiceRequest.FromString(await request.read()))
        answer = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type="application/x-protobuf")

    def span_names(self) -> list[str]:
        return [
            span.name
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]


@pytest.fixture
async def otlp() -> AsyncIterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver.handle)
    receiver.runner = web.AppRunner(app)
    await receiver.runner.setup()
    site = web.TCPSite(receiver.runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    receiver.url = f"http://127.0.0.1:{port}"
    yield receiver
    await receiver.runner.cleanup()


async def test_spans_are_exported_over_otlp_http_when_the_variables_say_so(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    otlp: OtlpReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "weather-bot")
    claude.enqueue(FakeReply.tool_use("forecast", {"city": "Oslo"}), FakeReply.text("Sunny."))
    try:
        bot = make_bot(claude, tmp_path, access="open", tools=[forecast])
        assert tracing.tracer.enabled
        async with running(bot, telegram):
            await ask(telegram, USER, "Oslo?")
        provider = tracing.tracer.provider  # type: ignore[attr-defined]
        # The exporter posts from its own thread, to a server in this loop: flush off the loop.
        assert await asyncio.to_thread(provider.force_flush, 10_000)
        await asyncio.to_thread(provider.shutdown)
    finally:
        tracing.reset()
    names = otlp.span_names()
    assert f"invoke_agent {telegram.bot_username}" in names
    assert names.count(f"chat {bot.settings.model}") == 2
    assert "execute_tool forecast" in names
    assert set(otlp.content_types) == {"application/x-protobuf"}
    [resource] = {
        attribute.value.string_value
        for request in otlp.requests
        for spans in request.resource_spans
        for attribute in spans.resource.attributes
        if attribute.key == "service.name"
    }
    assert resource == "weather-bot"


# --- across processes: receive and work on PostgreSQL ----------------------------------------


async def test_a_queued_turn_is_a_child_of_the_span_that_received_its_update(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    db: str,
    spans: Spans,
) -> None:
    receiver = queued_bot(claude, telegram, tmp_path, db, tracer_provider=spans.provider)
    worker = queued_bot(claude, telegram, tmp_path / "worker", db)
    async with queued(receiver, work=False), queued(worker, receive=False):
        telegram.send_text(USER, "through the queue")
        await telegram.wait_for_messages(USER, 1, timeout=30)
        await asyncio.sleep(0.2)  # the turn's span ends just after its reply
    received = spans.one("receive update")
    turn = spans.one("invoke_agent")
    assert received.context is not None and turn.context is not None
    assert attributes(received)["botkit.update_id"] == attributes(turn)["botkit.update_id"]
    assert turn.parent is not None and turn.parent.span_id == received.context.span_id
    [chat] = spans.named("chat")
    same_trace = {s.context.trace_id for s in (received, turn, chat) if s.context is not None}
    assert same_trace == {received.context.trace_id}
