"""Prometheus metrics of one bot: turns, LLM calls and spend, tools, Telegram requests, load.

Each bot owns a :class:`Metrics` with its own ``CollectorRegistry`` (never the global one),
so several bots in one process, and the tests, never share a counter. The numbers are fed
through the seams that already exist, never from inside the steps: the turn pipeline reports
how each turn ended, the charged LLM wrapper each call, the ``tool_start``/``tool_end`` hooks
each tool call, the Telegram messenger's request middleware and flood control each request,
retry and flood wait; the gauges are read from the dispatcher, the context pool and the inbox
when Prometheus scrapes. Label values are bounded: outcomes are fixed lists, a tool name that is
none of the turn's tools (the model made it up: it may hold any text) is ``unknown``, and
models, tools and API methods past :data:`MAX_LABEL_VALUES` distinct values are ``other``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from botkit.agent.events import Hooks, ToolEnd, ToolStart
from botkit.pricing import FALLBACK, Price, price_for
from botkit.types import Usage

__all__ = [
    "LAST_FAILURES",
    "LLM_OUTCOMES",
    "MAX_LABEL_VALUES",
    "REFRESH_TIMEOUT",
    "SCHEDULE_OUTCOMES",
    "TURN_OUTCOMES",
    "Metrics",
    "TurnFailure",
    "TurnOutcome",
]

TurnOutcome = Literal[
    "answered",
    "rejected",
    "command",
    "unsupported",
    "budget",
    "error",
    "overloaded",
    "stopped",
    "cancelled",
    "handoff",
    "waiting",
    "held",
    "payment",
    "unaddressed",
]
"""How a turn ended; ``cancelled``: cut off when the process stopped; ``handoff``: relayed
between a handed-over user and the operators (no LLM call); ``waiting``: a call waits for a
person's Allow; ``held``: its conversation waits, the message runs after; ``payment``: a
``successful_payment`` recorded (no LLM call); ``unaddressed``: a group voice note that did
not name the bot (heard, not answered)."""
TURN_OUTCOMES: tuple[TurnOutcome, ...] = TurnOutcome.__args__  # type: ignore[attr-defined]

SCHEDULE_OUTCOMES = ("delivered", "late", "failed", "paused", "put_off")
"""How a fired reminder or scheduled task ended (``paused``: its owner is not admitted now;
``put_off``: a task past its user's runs for the day)."""

LLM_OUTCOMES = ("ok", "overloaded", "auth", "too_long", "error")
"""How one LLM call ended."""

MAX_LABEL_VALUES = 50
"""Distinct models, tools or API methods tracked; any more share the label value ``other``."""

REFRESH_TIMEOUT = 2.0
"""Seconds a gauge's refresh before a scrape may take; a slower one leaves its last value."""

_TOOLS_TIMED = 10_000
"""Tool calls timed at once at most; more means some never ended (cancelled turns)."""
_SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
_HANDOFF_SECONDS = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 14400.0, 86400.0)
_TOOL_SECONDS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class _Bounded:
    """Passes label values through until ``limit`` distinct ones were seen, then ``other``."""

    def __init__(self, limit: int = MAX_LABEL_VALUES) -> None:
        self.limit = limit
        self.seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self.seen:
            return value
        if len(self.seen) >= self.limit:
            return "other"
        self.seen.add(value)
        return value


@dataclass(frozen=True, slots=True)
class _ModelChildren:
    """One model's labelled counters, looked up once (a label lookup takes a lock)."""

    ok: Any
    input: Any
    output: Any
    cache_read: Any
    cache_creation: Any
    cache_read_any: Any
    cache_written_5m: Any
    cache_written_1h: Any
    cost: Any
    price: Price


LAST_FAILURES = 20
"""How many of the last failed turns a process remembers (shown on the console's health)."""


@dataclass(frozen=True, slots=True)
class TurnFailure:
    """A turn that ended in an error: when, its outcome, and what failed (no user data)."""

    at: datetime
    outcome: str
    error: str


class Metrics:
    """The metrics of one bot, in a registry of its own; ``render`` gives the scrape text."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        """Where the metrics are registered: this bot's own."""
        self.served_at: str | None = None
        """The URL the metrics are served at, once a server listens (see ``botkit.ops``)."""
        self.last_failures: deque[TurnFailure] = deque(maxlen=LAST_FAILURES)
        """The last turns of this process that ended ``error`` or ``overloaded``, oldest first."""
        r = self.registry
        self.turns = Counter("botkit_turns", "Turns by how they ended", ["outcome"], registry=r)
        self.turn_seconds = Histogram(
            "botkit_turn_seconds",
            "From a message received to its reply sent",
            buckets=_SECONDS,
            registry=r,
        )
        self.llm_calls = Counter(
            "botkit_llm_calls", "LLM calls by model and outcome", ["model", "outcome"], registry=r
        )
        self.llm_seconds = Histogram(
            "botkit_llm_seconds", "Duration of one LLM call", buckets=_SECONDS, registry=r
        )
        self.llm_tokens = Counter(
            "botkit_llm_tokens", "Tokens billed, by model and kind", ["model", "kind"], registry=r
        )
        self.llm_cache_tokens = Counter(
            "botkit_llm_cache_tokens",
            "Prompt cache tokens by model, operation (read, write) and lifetime (5m, 1h; any for "
            "reads, which the API does not split)",
            ["model", "op", "ttl"],
            registry=r,
        )
        self.llm_cost = Counter(
            "botkit_llm_cost_usd", "Estimated spend from the price table", ["model"], registry=r
        )
        self.voice_calls = Counter(
            "botkit_voice_calls",
            "Speech API calls by operation (transcribe, speak), model and outcome",
            ["operation", "model", "outcome"],
            registry=r,
        )
        self.voice_seconds = Histogram(
            "botkit_voice_call_seconds",
            "Duration of one speech API call",
            ["operation"],
            registry=r,
        )
        self.audio_seconds = Counter(
            "botkit_voice_audio_seconds", "Seconds of audio transcribed", ["model"], registry=r
        )
        self.spoken_chars = Counter(
            "botkit_voice_spoken_chars", "Characters of answers spoken", ["model"], registry=r
        )
        self.tool_calls = Counter(
            "botkit_tool_calls", "Tool calls by tool and outcome", ["tool", "outcome"], registry=r
        )
        self.tool_seconds = Histogram(
            "botkit_tool_seconds", "Duration of one tool call", buckets=_TOOL_SECONDS, registry=r
        )
        self.telegram_requests = Counter(
            "botkit_telegram_requests",
            "Bot API requests by method and outcome",
            ["method", "outcome"],
            registry=r,
        )
        self.telegram_retries = Counter(
            "botkit_telegram_retries", "Bot API requests sent again", ["reason"], registry=r
        )
        self.flood_wait = Counter(
            "botkit_telegram_flood_wait_seconds", "Seconds waited on Telegram's 429s", registry=r
        )
        self.schedules_fired = Counter(
            "botkit_schedules_fired",
            "Reminders and scheduled tasks fired, by kind and outcome (a task's turn is also "
            "counted in botkit_turns_total)",
            ["kind", "outcome"],
            registry=r,
        )
        for kind in ("reminder", "task"):
            for fired in SCHEDULE_OUTCOMES:
                self.schedules_fired.labels(kind, fired)
        self.turns_running = Gauge("botkit_turns_running", "Turns running now", registry=r)
        self.turns_waiting = Gauge(
            "botkit_turns_waiting", "Messages accepted, their turn not started", registry=r
        )
        self.contexts = Gauge("botkit_contexts_in_memory", "Contexts held in memory", registry=r)
        self.inbox_unfinished = Gauge(
            "botkit_inbox_unfinished", "Inbox entries whose turn has not finished", registry=r
        )
        self.handoffs_open = Gauge(
            "botkit_handoffs_open", "Conversations handed to people now", registry=r
        )
        self.handoff_first_reply_seconds = Histogram(
            "botkit_handoff_first_reply_seconds",
            "From a handoff opened to the operators' first answer",
            buckets=_HANDOFF_SECONDS,
            registry=r,
        )
        self._turn_children = {o: self.turns.labels(o) for o in TURN_OUTCOMES}
        self.approvals = Counter(
            "botkit_approvals", "Approval requests by decision", ["decision"], registry=r
        )
        for decision in ("allowed", "denied", "expired"):
            self.approvals.labels(decision)
        self.feedback = Counter(
            "botkit_feedback",
            "Users' reactions to the bot's replies recorded as feedback, by kind",
            ["kind"],
            registry=r,
        )
        for kind in ("positive", "negative", "other", "removed"):
            self.feedback.labels(kind)
        self.updates_given_up = Counter(
            "botkit_updates_given_up",
            "Updates given up after their process died during them BOTKIT_MAX_JOB_ATTEMPTS times",
            registry=r,
        )
        for reason in ("429", "network"):
            self.telegram_retries.labels(reason)
        self._models = _Bounded()
        self._tools = _Bounded()
        self._methods = _Bounded()
        self._models_seen: dict[str, _ModelChildren] = {}
        self._requests_seen: dict[tuple[str, str], Any] = {}
        self._tools_started: dict[str, float] = {}
        self._refreshers: list[Callable[[], Awaitable[None]]] = []

    # ---- turns and LLM calls ----------------------------------------------------------

    def turn_done(self, outcome: TurnOutcome, seconds: float) -> None:
        """Count a finished turn and how long it took."""
        self._turn_children[outcome].inc()
        self.turn_seconds.observe(seconds)

    def turn_failed(self, outcome: TurnOutcome, error: str) -> None:
        """Remember a turn that failed (``error``: what failed, e.g. the exception's class)
        among the last ``LAST_FAILURES``; ``turn_done`` counts it."""
        self.last_failures.append(TurnFailure(datetime.now(UTC), outcome, error))

    def approval_decided(self, decision: str) -> None:
        """Count one approval decision: ``allowed``, ``denied`` or ``expired``."""
        self.approvals.labels(decision).inc()

    def feedback_recorded(self, kind: str) -> None:
        """Count one reaction recorded as feedback: ``positive`` (👍), ``negative`` (👎),
        ``other`` or ``removed``."""
        self.feedback.labels(kind).inc()

    def update_given_up(self) -> None:
        """Count an update given up because its turn killed its process again and again."""
        self.updates_given_up.inc()

    def schedule_fired(self, kind: str, outcome: str) -> None:
        """Count one fired reminder or task: ``delivered``, ``late`` (delivered more than
        five minutes after its time), ``failed``, ``paused`` or ``put_off``."""
        self.schedules_fired.labels(kind, outcome).inc()

    def llm_call(self, model: str, outcome: str, seconds: float, usage: Usage | None) -> None:
        """Count one LLM call, its duration and, when it answered, its tokens and cost."""
        self.llm_seconds.observe(seconds)
        if usage is None:
            self.llm_calls.labels(self._models(model), outcome).inc()
            return
        children = self._models_seen.get(model)
        if children is None:
            children = self._models_seen[model] = self._model_children(self._models(model))
        children.ok.inc()
        if usage.input_tokens:
            children.input.inc(usage.input_tokens)
        if usage.output_tokens:
            children.output.inc(usage.output_tokens)
        if usage.cache_read_input_tokens:
            children.cache_read.inc(usage.cache_read_input_tokens)
            children.cache_read_any.inc(usage.cache_read_input_tokens)
        if usage.cache_creation_input_tokens:
            children.cache_creation.inc(usage.cache_creation_input_tokens)
            written_1h = min(usage.cache_write_1h_tokens, usage.cache_creation_input_tokens)
            if written_1h:
                children.cache_written_1h.inc(written_1h)
            if usage.cache_creation_input_tokens > written_1h:
                children.cache_written_5m.inc(usage.cache_creation_input_tokens - written_1h)
        children.cost.inc(children.price.cost(usage))

    def voice_call(
        self, operation: str, model: str, outcome: str, seconds: float, amount: int
    ) -> None:
        """Count one speech API call: its duration, and the seconds heard (``transcribe``) or
        characters spoken (``speak``) with their cost."""
        label = self._models(model)
        self.voice_calls.labels(operation, label, outcome).inc()
        self.voice_seconds.labels(operation).observe(seconds)
        if not amount:
            return
        counter = self.audio_seconds if operation == "transcribe" else self.spoken_chars
        counter.labels(label).inc(amount)
        field = "audio_seconds" if operation == "transcribe" else "spoken_chars"
        usage = Usage(**{field: amount})
        self.llm_cost.labels(label).inc((price_for(model) or FALLBACK).voice_cost(usage))

    def _model_children(self, model: str) -> _ModelChildren:
        tokens = self.llm_tokens
        return _ModelChildren(
            ok=self.llm_calls.labels(model, "ok"),
            input=tokens.labels(model, "input"),
            output=tokens.labels(model, "output"),
            cache_read=tokens.labels(model, "cache_read"),
            cache_creation=tokens.labels(model, "cache_creation"),
            cache_read_any=self.llm_cache_tokens.labels(model, "read", "any"),
            cache_written_5m=self.llm_cache_tokens.labels(model, "write", "5m"),
            cache_written_1h=self.llm_cache_tokens.labels(model, "write", "1h"),
            cost=self.llm_cost.labels(model),
            price=price_for(model) or FALLBACK,
        )

    # ---- tools ------------------------------------------------------------------------

    def watch_tools(self, hooks: Hooks) -> None:
        """Count tool calls and time them through the ``tool_start``/``tool_end`` hooks."""
        hooks.on("tool_start", self._tool_started)
        hooks.on("tool_end", self._tool_ended)

    async def _tool_started(self, event: ToolStart) -> None:
        if len(self._tools_started) >= _TOOLS_TIMED:  # calls cut off without a tool_end
            self._tools_started.clear()
        self._tools_started[event.call.id] = time.perf_counter()

    async def _tool_ended(self, event: ToolEnd) -> None:
        started = self._tools_started.pop(event.call.id, None)
        if started is not None:
            self.tool_seconds.observe(time.perf_counter() - started)
        outcome = "error" if event.result.is_error else "ok"
        tool = self._tools(event.call.name) if event.known else "unknown"
        self.tool_calls.labels(tool, outcome).inc()

    # ---- Telegram ---------------------------------------------------------------------

    def telegram_request(self, method: str, outcome: str) -> None:
        """Count one Bot API request (``ok``, ``flood``, ``network``, ``server``, ``refused``)."""
        child = self._requests_seen.get((method, outcome))
        if child is None:
            child = self.telegram_requests.labels(self._methods(method), outcome)
            if len(self._requests_seen) < MAX_LABEL_VALUES * 5:
                self._requests_seen[(method, outcome)] = child
        child.inc()

    def telegram_retry(self, reason: Literal["429", "network"], waited: float = 0.0) -> None:
        """Count one request sent again; a 429's wait adds to the flood-wait seconds."""
        self.telegram_retries.labels(reason).inc()
        if reason == "429":
            self.flood_wait.inc(waited)

    # ---- load -------------------------------------------------------------------------

    def watch_load(
        self,
        *,
        running: Callable[[], float] | None = None,
        waiting: Callable[[], float] | None = None,
        contexts: Callable[[], float] | None = None,
        inbox: Callable[[], float] | None = None,
    ) -> None:
        """Read the gauges from these functions when scraped (nothing on the hot path)."""
        for gauge, read in (
            (self.turns_running, running),
            (self.turns_waiting, waiting),
            (self.contexts, contexts),
            (self.inbox_unfinished, inbox),
        ):
            if read is not None:
                gauge.set_function(read)

    def refresh_on_scrape(self, refresh: Callable[[], Awaitable[None]]) -> None:
        """Run ``refresh`` (e.g. a count read from a database) before each ``scrape``."""
        self._refreshers.append(refresh)

    async def scrape(self) -> bytes:
        """``render`` after the refreshes; one failing or slow leaves its gauge as it was
        (``/readyz`` is where an unreachable database is reported)."""
        for refresh in self._refreshers:
            with suppress(Exception):
                async with asyncio.timeout(REFRESH_TIMEOUT):
                    await refresh()
        return self.render()

    def render(self) -> bytes:
        """The metrics in Prometheus' text format."""
        return generate_latest(self.registry)
