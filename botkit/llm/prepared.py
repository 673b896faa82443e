"""Answers prepared ahead of their call (a Message Batch's), put in place of that call.

:class:`PreparedAnswers` holds each answer by the digest of the request it answers. An LLM
wrapped by it (:meth:`PreparedAnswers.wrap`, a no-op while none waits) answers a call whose
request has that digest from the prepared answer, once, and every other call as before: when
the conversation moved meanwhile (the user wrote), the request differs and goes to the model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
import structlog

from botkit.llm.base import LLM, LLMRequest, LLMResponse, TextSink
from botkit.types import Usage

__all__ = ["PreparedAnswer", "PreparedAnswers", "request_digest"]

log = structlog.get_logger(__name__)


def request_digest(request: LLMRequest) -> str:
    """The SHA-256 of what a request asks (system, messages, tools, model, output limit; not
    its pace, which only picks cache lifetimes): equal digests, the same answer fits both."""
    body = orjson.dumps(
        [
            request.system,
            [m.to_api() for m in request.messages],
            [t.to_api() for t in request.tools],
            request.model,
            request.max_tokens,
        ],
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(body).hexdigest()


@dataclass(frozen=True, slots=True)
class PreparedAnswer:
    """An answer waiting for its call: ``respond`` reads it as the response to that request."""

    respond: Callable[[LLMRequest], LLMResponse]
    model: str = ""
    """The model it is billed under."""
    usage: Usage = field(default_factory=Usage)
    """What it cost (counted even when no call takes it)."""


class PreparedAnswers:
    """Answers prepared ahead, each for the call whose request has its digest."""

    def __init__(self) -> None:
        self._waiting: dict[str, PreparedAnswer] = {}
        self._taken: set[str] = set()

    def put(self, digest: str, answer: PreparedAnswer) -> None:
        """Hold ``answer`` for the call whose request has ``digest``."""
        self._waiting[digest] = answer

    def forget(self, digest: str) -> bool:
        """Drop the answer for ``digest``; whether a call took it meanwhile."""
        self._waiting.pop(digest, None)
        taken = digest in self._taken
        self._taken.discard(digest)
        return taken

    def wrap(self, llm: LLM) -> LLM:
        """``llm``, answering from the prepared answers while any wait."""
        return _Prepared(llm, self) if self._waiting else llm

    def take(self, request: LLMRequest) -> LLMResponse | None:
        """The prepared response to ``request``, if one waits for it (taken once)."""
        if not self._waiting:
            return None
        digest = request_digest(request)
        answer = self._waiting.pop(digest, None)
        if answer is None:
            return None
        self._taken.add(digest)
        return answer.respond(request)


class _Prepared:
    """An LLM whose calls are answered from prepared answers when one fits."""

    def __init__(self, llm: LLM, answers: PreparedAnswers) -> None:
        self.llm = llm
        self.answers = answers

    async def complete(self, request: LLMRequest, on_text: TextSink | None = None) -> LLMResponse:
        """The prepared answer to ``request`` (its text to ``on_text`` at once), else the
        wrapped LLM's."""
        response = self.answers.take(request)
        if response is None:
            return await self.llm.complete(request, on_text)
        log.info("llm.answered_ahead", model=response.model)
        if on_text is not None and response.message.text:
            await on_text(response.message.text)
        return response

    async def close(self) -> None:
        """Nothing of its own: the wrapped LLM is the bot's."""
