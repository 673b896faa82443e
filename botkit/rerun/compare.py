"""One re-run turn beside its record: tool calls, their results, the answer, tokens and cost."""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from botkit.pricing import estimate
from botkit.rerun.judge import Verdict
from botkit.rerun.recorded import ToolCall
from botkit.types import Usage

__all__ = ["RerunReport", "TurnReport", "call_signature", "similarity"]


@dataclass(frozen=True, slots=True)
class Side:
    """What one run of a turn did: its tool calls (with results), its answer, its cost."""

    calls: list[ToolCall]
    answer: str
    usage: Usage
    model: str = ""

    @property
    def cost(self) -> float:
        """Dollars, at the model's price."""
        return estimate({self.model or "unknown": self.usage})[0]


@dataclass(frozen=True, slots=True)
class TurnReport:
    """A turn as recorded and as re-run, and what differs."""

    number: int
    user_text: str
    recorded: Side
    now: Side
    notes: list[str] = field(default_factory=list)
    """Why the re-run could not follow the record (``--llm recorded``), and what the bot now
    offers differently (tools, prompt) when the record says what it offered then."""
    failed: str | None = None
    """The reason the re-run's turn ended without an answer, if it did."""
    verdict: Verdict | None = None
    """The judge's grade of a changed answer (``--judge``)."""

    @property
    def call_changes(self) -> list[str]:
        """``+ name(args)`` for each call only the re-run made, ``- name(args)`` for each
        call only the record has, in order."""
        before = [call_signature(c) for c in self.recorded.calls]
        after = [call_signature(c) for c in self.now.calls]
        changes: list[str] = []
        matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag != "equal":
                changes += [f"+ {s}" for s in after[j1:j2]]
                changes += [f"- {s}" for s in before[i1:i2]]
        return changes

    @property
    def changed_results(self) -> list[str]:
        """The tools that were called alike but returned something else."""
        before = [call_signature(c) for c in self.recorded.calls]
        after = [call_signature(c) for c in self.now.calls]
        names: list[str] = []
        matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
        for block in matcher.get_matching_blocks():
            for k in range(block.size):
                old, new = self.recorded.calls[block.a + k], self.now.calls[block.b + k]
                if (old.result, old.is_error) != (new.result, new.is_error):
                    names.append(old.name)
        return names

    @property
    def answer_same(self) -> bool:
        """Whether the final answer reads exactly as recorded."""
        return self.recorded.answer.strip() == self.now.answer.strip()

    @property
    def similarity(self) -> float:
        """How alike the two answers are, 0 to 1 (1: the same)."""
        return similarity(self.recorded.answer, self.now.answer)

    @property
    def changed(self) -> bool:
        """Whether anything the comparison looks at differs."""
        return bool(
            self.failed or self.call_changes or self.changed_results or not self.answer_same
        )

    def summary(self) -> str:
        """``turn 3: same``, or ``turn 3: changed — tool calls: …; answer (similarity 0.42)``."""
        if not self.changed:
            return f"turn {self.number}: same"
        parts: list[str] = []
        if self.failed:
            parts.append(self.failed)
        if self.call_changes:
            parts.append("tool calls: " + ", ".join(self.call_changes))
        if self.changed_results:
            parts.append("tool results: " + ", ".join(self.changed_results))
        if not self.answer_same:
            parts.append(f"answer (similarity {self.similarity:.2f})")
        if self.verdict is not None:
            parts.append(self.verdict.line())
        parts += [note for note in self.notes if note != self.failed]
        return f"turn {self.number}: changed — " + "; ".join(parts)

    def as_json(self) -> dict[str, Any]:
        """The turn as one JSON object."""
        return {
            "type": "turn",
            "turn": self.number,
            "changed": self.changed,
            "user": self.user_text,
            "tool_calls": {
                "recorded": [_call_json(c) for c in self.recorded.calls],
                "now": [_call_json(c) for c in self.now.calls],
                "changes": self.call_changes,
            },
            "tool_results_changed": self.changed_results,
            "answer": {
                "recorded": self.recorded.answer,
                "now": self.now.answer,
                "same": self.answer_same,
                "similarity": round(self.similarity, 4),
            },
            "tokens": {"recorded": _tokens(self.recorded.usage), "now": _tokens(self.now.usage)},
            "cost": {"recorded": round(self.recorded.cost, 6), "now": round(self.now.cost, 6)},
            "failed": self.failed,
            "notes": self.notes,
            "judge": (
                {"grade": self.verdict.grade, "why": self.verdict.why} if self.verdict else None
            ),
        }


@dataclass(frozen=True, slots=True)
class RerunReport:
    """A whole session re-run: each turn compared, and the totals."""

    session: str
    turns: list[TurnReport]
    llm: str
    """``live`` or ``recorded``."""
    anchored: bool
    model: str | None = None

    @property
    def changed(self) -> list[TurnReport]:
        """The turns that changed."""
        return [turn for turn in self.turns if turn.changed]

    @property
    def recorded_usage(self) -> Usage:
        """The recorded turns' tokens."""
        return _total(turn.recorded.usage for turn in self.turns)

    @property
    def usage(self) -> Usage:
        """The re-run's tokens."""
        return _total(turn.now.usage for turn in self.turns)

    def summary(self) -> str:
        """``N turns, M changed``."""
        count = len(self.turns)
        return f"{count} {'turn' if count == 1 else 'turns'}, {len(self.changed)} changed"

    def cost_line(self) -> str:
        """Tokens and dollars, recorded against now."""
        before = sum(turn.recorded.cost for turn in self.turns)
        after = sum(turn.now.cost for turn in self.turns)
        recorded = f"recorded {_token_total(self.recorded_usage):,}"
        if self.llm == "recorded":  # played back: no model was called, nothing was spent
            return f"tokens: {recorded}, now none (played back) · cost: recorded ${before:.4f}"
        return (
            f"tokens: {recorded}, now "
            f"{_token_total(self.usage):,} · cost: recorded ${before:.4f}, now ${after:.4f}"
        )

    def as_json(self) -> dict[str, Any]:
        """The summary object of ``--json``."""
        return {
            "type": "summary",
            "session": self.session,
            "llm": self.llm,
            "anchored": self.anchored,
            "model": self.model,
            "turns": len(self.turns),
            "changed": len(self.changed),
            "changed_turns": [turn.number for turn in self.changed],
            "tokens": {"recorded": _tokens(self.recorded_usage), "now": _tokens(self.usage)},
            "cost": {
                "recorded": round(sum(t.recorded.cost for t in self.turns), 6),
                "now": round(sum(t.now.cost for t in self.turns), 6),
            },
        }


def call_signature(call: ToolCall) -> str:
    """``lookup_order(id=7)``: the call's name and arguments, as the output shows them."""
    args = ", ".join(f"{key}={_value(value)}" for key, value in call.input.items())
    return f"{call.name}({args})"


def similarity(a: str, b: str) -> float:
    """How alike two texts are, 0 to 1, by their longest common runs of characters."""
    if a == b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _value(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _call_json(call: ToolCall) -> dict[str, Any]:
    return {
        "name": call.name,
        "input": call.input,
        "result": call.result,
        "is_error": call.is_error,
    }


def _tokens(usage: Usage) -> dict[str, int]:
    return usage.model_dump()


def _token_total(usage: Usage) -> int:
    return (
        usage.input_tokens
        + usage.output_tokens
        + usage.cache_creation_input_tokens
        + usage.cache_read_input_tokens
    )


def _total(usages: Sequence[Usage] | Any) -> Usage:
    total = Usage()
    for usage in usages:
        total += usage
    return total
