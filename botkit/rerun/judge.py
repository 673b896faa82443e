"""``--judge RUBRIC``: the model grades a changed answer against the recorded one."""

from __future__ import annotations

from dataclasses import dataclass

from botkit.errors import LLMError
from botkit.llm.base import LLM, LLMRequest
from botkit.types import Message, TextBlock

__all__ = ["GRADES", "JUDGE_PROMPT", "Verdict", "judge_answer"]

GRADES = ("better", "same", "worse")

JUDGE_PROMPT = (
    "You compare two answers a chat assistant gave to the same user message: the RECORDED one "
    "and the NEW one. Judge the NEW answer against the RECORDED one by this rubric:\n"
    "{rubric}\n\n"
    "Reply with exactly one line: the word better, same or worse, a colon, and one short "
    "sentence saying why."
)


@dataclass(frozen=True, slots=True)
class Verdict:
    """How the new answer compares with the recorded one, and why (one line)."""

    grade: str
    """``better``, ``same`` or ``worse``; ``unclear`` when the judge's reply said neither."""
    why: str

    def line(self) -> str:
        """``judged worse: it drops the order number``."""
        return f"judged {self.grade}: {self.why}" if self.why else f"judged {self.grade}"


async def judge_answer(
    llm: LLM, rubric: str, question: str, recorded: str, new: str, *, model: str | None = None
) -> Verdict:
    """Ask ``llm`` to grade ``new`` against ``recorded`` (answers to ``question``) by ``rubric``;
    a failed call is a verdict of ``unclear`` saying so."""
    text = f"USER MESSAGE:\n{question}\n\nRECORDED ANSWER:\n{recorded}\n\nNEW ANSWER:\n{new}"
    request = LLMRequest(
        system=JUDGE_PROMPT.format(rubric=rubric),
        messages=[Message(role="user", content=[TextBlock(text=text)])],
        model=model,
    )
    try:
        response = await llm.complete(request)
    except LLMError as e:
        return Verdict("unclear", f"the judge could not be asked: {e}")
    return parse_verdict(response.message.text)


def parse_verdict(reply: str) -> Verdict:
    """``worse: it is rude`` → Verdict("worse", "it is rude")."""
    line = next((line.strip() for line in reply.splitlines() if line.strip()), "")
    head, _, why = line.partition(":")
    grade = head.strip().strip("*").lower()
    if grade not in GRADES:
        return Verdict("unclear", line[:200])
    return Verdict(grade, why.strip()[:200])
