"""Golden sessions in pytest: a recorded conversation re-run against the bot, and a check.

A team keeps real conversations under ``tests/golden/`` and tests each in three lines::

    async def test_refund_conversation(claude, tmp_path):
        report = await rerun(make_bot(claude, tmp_path), "tests/golden/refund.jsonl")
        assert_unchanged(report, answers="similar")
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from structlog.testing import capture_logs

from botkit.errors import SessionError
from botkit.llm.base import LLM
from botkit.rerun import LLMMode, RerunReport, TurnReport, rerun_session
from botkit.sessions import SessionFile, read_session_file
from botkit.turns import BotSteps

__all__ = ["AnswerCheck", "assert_unchanged", "rerun"]

AnswerCheck = Literal["similar", "exact", "ignore"]


async def rerun(
    bot: BotSteps,
    session: str | Path | SessionFile,
    *,
    llm: LLMMode | LLM = "live",
    free: bool = False,
    model: str | None = None,
    judge: str | None = None,
) -> RerunReport:
    """Re-run a recorded session (a session file, or one already read) through ``bot``.

    ``llm``: ``live`` asks the bot's own model (the fake one in tests), ``recorded`` plays the
    recorded answers back with no request made, or any ``LLM``. A file that is missing or has
    unreadable lines raises ``SessionError``: a golden session must be whole. ``judge`` (a
    rubric) has the bot's model grade each changed answer (``TurnReport.verdict``).
    """
    if isinstance(session, SessionFile):
        file, source = session, "session"
    else:
        file, source = _read(Path(session)), str(session)
    return await rerun_session(
        bot, file, source=source, llm=llm, free=free, model=model, judge=judge
    )


def _read(path: Path) -> SessionFile:
    if not path.is_file():
        raise SessionError(f"no session file at {path}")
    with capture_logs():
        file = read_session_file(path)
    if file.problems:
        number, reason = file.problems[0]
        raise SessionError(f"{path} line {number}: {reason}")
    return file


def assert_unchanged(
    report: RerunReport, answers: AnswerCheck = "similar", *, similarity: float = 0.8
) -> None:
    """Fail (``AssertionError``, one line per changed turn) unless every turn made the same
    tool calls with the same results; answers must also be ``exact``ly the same, ``similar``
    (at least ``similarity``, 0 to 1), or are not looked at (``ignore``)."""
    failing = [turn for turn in report.turns if _differs(turn, answers, similarity)]
    if failing:
        lines = "\n".join(turn.summary() for turn in failing)
        raise AssertionError(f"{report.session}: {len(failing)} turns changed\n{lines}")


def _differs(turn: TurnReport, answers: AnswerCheck, similarity: float) -> bool:
    if turn.failed or turn.call_changes or turn.changed_results:
        return True
    if answers == "exact":
        return not turn.answer_same
    if answers == "similar":
        return turn.similarity < similarity
    return False
