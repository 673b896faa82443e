"""Re-running a recorded session through a bot's own turn pipeline, turn by turn."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from botkit.agent.compaction import SUMMARY_PROMPT
from botkit.agent.pool import ContextPool
from botkit.llm.base import LLM, LLMRequest, LLMResponse, TextSink
from botkit.metrics import Metrics
from botkit.rerun.compare import RerunReport, Side, TurnReport
from botkit.rerun.judge import Verdict, judge_answer
from botkit.rerun.playback import RecordedLLM
from botkit.rerun.recorded import (
    Entry,
    RecordedTurn,
    answer_text,
    feedback_by_turn,
    incoming_for,
    recorded_turns,
    sum_usage,
    tool_calls,
)
from botkit.rerun.scratch import QuietMessenger, RerunSteps, ScratchStore, UnchargedAccess
from botkit.sessions import FeedbackEntry, SessionEntry, SessionFile
from botkit.turns import BotSteps, TurnPipeline
from botkit.types import Message, TextBlock

__all__ = ["LLMMode", "rerun_session"]

LLMMode = Literal["live", "recorded"]


async def rerun_session(
    bot: BotSteps,
    session: SessionFile,
    *,
    source: str = "",
    llm: LLMMode | LLM = "live",
    free: bool = False,
    model: str | None = None,
    judge: str | None = None,
    feedback: str | None = None,
) -> RerunReport:
    """Run each recorded user turn of ``session`` again through ``bot``'s pipeline and compare.

    ``llm``: ``live`` asks the bot's model (``model`` overrides which), ``recorded`` plays the
    recorded answers back (no request sent), or any ``LLM``. Anchored (the default), each turn
    starts from the recorded history before it; ``free`` carries the re-run's own answers on.
    Nothing is sent anywhere and nothing is written but to a scratch store in memory. With
    ``judge`` (a rubric), the bot's model grades each changed answer against the recorded one.
    With ``feedback`` (``negative``, ``positive``, ``other``), only the turns someone reacted
    to so are re-run.
    """
    entries = list(session.entries)
    turns = recorded_turns(entries)
    if feedback is not None:
        reacted = feedback_by_turn(entries)
        turns = [t for t in turns if _got(reacted.get(t.user.update_id or 0, []), feedback)]
    metrics = Metrics()
    reports: list[TurnReport] = []
    carried: list[Entry] = []
    previous = 0
    for turn in turns:
        if free:
            history = [*carried, *_inputs(entries[previous : turn.start], first=previous == 0)]
        else:
            history = entries[: turn.start]
        report, carried = await _rerun_turn(bot, turn, history, llm, model, metrics)
        if judge and report.changed and not report.answer_same:
            report = replace(report, verdict=await _judged(bot, judge, report, model))
        reports.append(report)
        previous = turn.start + 1
    mode = llm if isinstance(llm, str) else type(llm).__name__
    return RerunReport(source, reports, mode, anchored=not free, model=model)


async def _judged(bot: BotSteps, rubric: str, report: TurnReport, model: str | None) -> Verdict:
    """The bot's model grades the re-run's answer against the recorded one."""
    recorded, now = report.recorded.answer, report.now.answer
    return await judge_answer(bot.llm, rubric, report.user_text, recorded, now, model=model)


def _got(feedback: Sequence[FeedbackEntry], kind: str) -> bool:
    """Whether someone's latest reaction on a turn is of ``kind``."""
    return any(entry.kind == kind for entry in feedback)


def _inputs(entries: Sequence[Entry], *, first: bool) -> list[Entry]:
    """What a free re-run takes from the record between two turns: relayed notes and resets
    (before the first turn, everything recorded)."""
    if first:
        return list(entries)
    return [e for e in entries if not isinstance(e, SessionEntry) or e.deferred]


async def _rerun_turn(
    bot: BotSteps,
    turn: RecordedTurn,
    history: list[Entry],
    llm: LLMMode | LLM,
    model: str | None,
    metrics: Metrics,
) -> tuple[TurnReport, list[Entry]]:
    """One turn again on a scratch store holding ``history``; its report and the store after."""
    store = ScratchStore(history)
    played = RecordedLLM(turn) if llm == "recorded" else None
    answering = _Watched(played or (bot.llm if isinstance(llm, str) else llm))
    steps = RerunSteps(bot, answering, model)
    contexts = ContextPool(store, max_contexts=1, max_messages=bot.options.max_messages)
    pipeline = TurnPipeline(steps, UnchargedAccess(bot.settings, bot.options), contexts, metrics)
    message = incoming_for(turn)
    failed: str | None = None
    try:
        reply = await pipeline.rerun_turn(message, turn.user.to_message(), QuietMessenger())
    except Exception as e:  # the bot's own steps failed: that is what the re-run found
        failed = f"the turn failed: {type(e).__name__}: {e}"
        reply = ""
    new = [e for e in store.entries[len(history) + 1 :] if _is_output(e)]
    if played is not None and played.mismatch:
        failed = played.mismatch
    elif failed is None and not answer_text(_messages(new)) and _is_error_text(bot, reply):
        failed = "the model call failed"
    report = TurnReport(
        number=turn.number,
        user_text=_user_text(turn.user.to_message()),
        recorded=_side(turn.outputs),
        now=_side(new),
        notes=_offer_notes(turn.outputs, answering.first),
        failed=failed,
    )
    return report, store.entries


def _is_output(entry: Entry) -> bool:
    return not (isinstance(entry, SessionEntry) and entry.deferred)


def _is_error_text(bot: BotSteps, reply: str) -> bool:
    return reply in (bot.options.error_text, bot.options.overloaded_text)


def _messages(entries: Sequence[Entry]) -> list[Message]:
    return [e.to_message() for e in entries if isinstance(e, SessionEntry)]


def _side(entries: Sequence[Entry]) -> Side:
    messages = _messages(entries)
    models = [e.model for e in entries if isinstance(e, SessionEntry) and e.model]
    return Side(
        calls=tool_calls(messages),
        answer=answer_text(messages),
        usage=sum_usage(list(entries)),
        model=models[-1] if models else "",
    )


def _user_text(message: Message) -> str:
    texts = [b.text for b in message.content if isinstance(b, TextBlock)]
    return texts[-1] if texts else ""


def _offer_notes(recorded: Sequence[Entry], request: LLMRequest | None) -> list[str]:
    """What the bot offered the model differently, where the record says what it offered."""
    before = _first_answer(recorded)
    if before is None or request is None:
        return []
    notes: list[str] = []
    now = [tool.name for tool in request.tools]
    if before.tools is not None and before.tools != now:
        added = [f"+ {name}" for name in now if name not in before.tools]
        gone = [f"- {name}" for name in before.tools if name not in now]
        notes.append("tools offered: " + ", ".join([*added, *gone] or ["reordered"]))
    system = request.system if isinstance(request.system, str) else str(request.system)
    if before.system_sha256 and before.system_sha256 != _sha256(system):
        notes.append("system prompt changed")
    return notes


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _first_answer(entries: Sequence[Entry]) -> SessionEntry | None:
    for entry in entries:
        if isinstance(entry, SessionEntry) and entry.role == "assistant":
            return entry
    return None


class _Watched:
    """An LLM that keeps the turn's first request (what the bot offered), whatever follows."""

    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self.first: LLMRequest | None = None

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        """Keep the first request that is not a summary, then answer as the wrapped LLM."""
        if self.first is None and request.system != SUMMARY_PROMPT:
            self.first = request
        return await self.llm.complete(request, on_text)

    async def close(self) -> None:
        """The wrapped LLM is the bot's (or the turn's): nothing of its own to release."""
