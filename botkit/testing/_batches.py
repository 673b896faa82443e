"""The Message Batches API of the fake Messages API (``botkit.testing.anthropic``).

As documented (read 2026-11-29): ``POST /v1/messages/batches`` takes ``requests``, each a
``custom_id`` (1-64 letters, digits, ``-`` and ``_``, unique within the batch) and the
``params`` of a Messages request, and answers the batch (``processing_status``
``in_progress``); ``GET /v1/messages/batches/{id}`` answers it again (idempotent: to poll);
``GET /v1/messages/batches/{id}/results`` streams one JSON line per request once the batch
``ended`` (``result.type``: ``succeeded`` with the ``message``, ``errored`` with the
``error``, ``canceled`` or ``expired``), in no particular order; ``POST .../cancel`` puts a
running batch in ``canceling``. The shape of the batch is checked at creation (a 400); each
request's params are checked as a Messages request when it is processed, a refusal becoming
its ``errored`` result. ``stream`` is not allowed in a batch's params, nor ``max_tokens`` 0.

A test decides when a batch ends: :meth:`FakeBatches.end` processes its requests (answered
from the same script and cache as ``POST /v1/messages``) or makes them ``errored``,
``expired`` or ``canceled``.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import orjson
from aiohttp import web

__all__ = ["BatchEnd", "FakeBatch", "FakeBatches"]

MAX_BATCH_REQUESTS = 100_000
"""The most requests one batch may hold."""
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_BATCH_LIFETIME = timedelta(hours=24)

BatchEnd = Literal["succeeded", "errored", "expired", "canceled"]
"""How :meth:`FakeBatches.end` ends a batch's requests (``succeeded``: answer them)."""

Answerer = Callable[[dict[str, Any], dict[str, str]], Awaitable[Any]]
Refuse = Callable[[int, str, str], web.Response]
KeyCheck = Callable[[dict[str, str]], web.Response | None]


@dataclass
class FakeBatch:
    """One batch the fake took: its requests (``custom_id`` to params) and their results."""

    id: str
    requests: dict[str, dict[str, Any]]
    headers: dict[str, str]
    created_at: datetime
    status: Literal["in_progress", "canceling", "ended"] = "in_progress"
    ended_at: datetime | None = None
    cancel_initiated_at: datetime | None = None
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each request's ``result`` once ended."""

    def as_object(self, base_url: str) -> dict[str, Any]:
        """The batch as the API answers it."""
        counts = dict.fromkeys(("processing", "succeeded", "errored", "canceled", "expired"), 0)
        if self.status == "ended":
            for result in self.results.values():
                counts[result["type"]] += 1
        else:
            counts["processing"] = len(self.requests)
        ended = self.status == "ended"
        return {
            "id": self.id,
            "type": "message_batch",
            "processing_status": self.status,
            "request_counts": counts,
            "ended_at": _stamp(self.ended_at),
            "created_at": _stamp(self.created_at),
            "expires_at": _stamp(self.created_at + _BATCH_LIFETIME),
            "archived_at": None,
            "cancel_initiated_at": _stamp(self.cancel_initiated_at),
            "results_url": f"{base_url}/v1/messages/batches/{self.id}/results" if ended else None,
        }


def _stamp(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def _shape_problem(body: dict[str, Any]) -> str | None:
    """What makes a create-batch body invalid as a whole (a 400), or ``None``."""
    requests = body.get("requests")
    if not isinstance(requests, list):
        return (
            "requests: Field required" if requests is None else "requests: Input should be a list"
        )
    if not requests:
        return "requests: List should have at least 1 item after validation, not 0"
    if len(requests) > MAX_BATCH_REQUESTS:
        return f"requests: List should have at most {MAX_BATCH_REQUESTS} items"
    seen: set[str] = set()
    for k, item in enumerate(requests):
        if not isinstance(item, dict):
            return f"requests.{k}: Input should be a valid dictionary"
        custom_id = item.get("custom_id")
        if not isinstance(custom_id, str) or not _CUSTOM_ID.match(custom_id):
            return f"requests.{k}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
        if custom_id in seen:
            return f"requests.{k}.custom_id: Duplicate custom_id '{custom_id}' in the batch"
        seen.add(custom_id)
        params = item.get("params")
        if not isinstance(params, dict):
            return f"requests.{k}.params: Input should be a valid dictionary"
        if "stream" in params:
            return f"requests.{k}.params.stream: streaming is not supported in Message Batches"
        if params.get("max_tokens") == 0:
            return f"requests.{k}.params.max_tokens: max_tokens 0 is not supported in batches"
    return None


class FakeBatches:
    """The batches one fake server took, and its four endpoints."""

    def __init__(
        self, answer: Answerer, refuse: Refuse, new_id: Callable[[str], str], key_check: KeyCheck
    ) -> None:
        self._answer = answer
        self._refuse = refuse
        self._new_id = new_id
        self._refuse_key = key_check
        self.base_url = ""
        self.batches: dict[str, FakeBatch] = {}
        """Every batch taken, by id, in order."""

    def routes(self, app: web.Application) -> None:
        """Serve the Message Batches endpoints on ``app``."""
        app.router.add_post("/v1/messages/batches", self._create)
        app.router.add_get("/v1/messages/batches/{batch_id}", self._retrieve)
        app.router.add_get("/v1/messages/batches/{batch_id}/results", self._results)
        app.router.add_post("/v1/messages/batches/{batch_id}/cancel", self._cancel)

    @property
    def running(self) -> list[FakeBatch]:
        """Batches not ended yet, oldest first."""
        return [b for b in self.batches.values() if b.status != "ended"]

    async def end(self, batch_id: str | None = None, *, result: BatchEnd = "succeeded") -> None:
        """End a batch (``None``: every running one): answer its requests, or give each the
        ``result`` named; a canceling batch's requests are ``canceled``."""
        targets = self.running if batch_id is None else [self.batches[batch_id]]
        for batch in targets:
            if batch.status == "ended":
                raise ValueError(f"batch {batch.id} has already ended")
            for custom_id, params in batch.requests.items():
                kind = "canceled" if batch.status == "canceling" else result
                batch.results[custom_id] = await self._result(kind, params, batch.headers)
            batch.status = "ended"
            batch.ended_at = datetime.now(UTC)

    async def _result(
        self, kind: BatchEnd, params: dict[str, Any], headers: dict[str, str]
    ) -> dict[str, Any]:
        if kind == "errored":
            return _errored("api_error", "Internal server error")
        if kind in ("canceled", "expired"):
            return {"type": kind}
        answered = await self._answer(params, headers)
        if isinstance(answered, dict):
            return {"type": "succeeded", "message": answered}
        body = answered.body()
        return _errored(body["error"]["type"], body["error"]["message"])

    def _headers(self, request: web.Request) -> dict[str, str]:
        return {key.lower(): value for key, value in request.headers.items()}

    async def _create(self, request: web.Request) -> web.Response:
        headers = self._headers(request)
        if (refusal := self._refuse_key(headers)) is not None:
            return refusal
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            return self._refuse(400, "invalid_request_error", "The body is not valid JSON.")
        problem = _shape_problem(body)
        if problem is not None:
            return self._refuse(400, "invalid_request_error", problem)
        batch = FakeBatch(
            id=self._new_id("msgbatch_01"),
            requests={item["custom_id"]: item["params"] for item in body["requests"]},
            headers=headers,
            created_at=datetime.now(UTC),
        )
        self.batches[batch.id] = batch
        return web.json_response(batch.as_object(self.base_url))

    def _find(self, request: web.Request) -> FakeBatch | web.Response:
        if (refusal := self._refuse_key(self._headers(request))) is not None:
            return refusal
        batch = self.batches.get(request.match_info["batch_id"])
        if batch is None:
            return self._refuse(404, "not_found_error", "Message Batch not found.")
        return batch

    async def _retrieve(self, request: web.Request) -> web.Response:
        batch = self._find(request)
        if isinstance(batch, web.Response):
            return batch
        return web.json_response(batch.as_object(self.base_url))

    async def _results(self, request: web.Request) -> web.Response:
        batch = self._find(request)
        if isinstance(batch, web.Response):
            return batch
        if batch.status != "ended":
            message = f"Message Batch {batch.id} has not finished processing."
            return self._refuse(400, "invalid_request_error", message)
        lines = [
            orjson.dumps({"custom_id": custom_id, "result": result})
            for custom_id, result in reversed(batch.results.items())  # in no particular order
        ]
        return web.Response(body=b"\n".join(lines) + b"\n", content_type="application/binary")

    async def _cancel(self, request: web.Request) -> web.Response:
        batch = self._find(request)
        if isinstance(batch, web.Response):
            return batch
        if batch.status == "in_progress":
            batch.status = "canceling"
            batch.cancel_initiated_at = datetime.now(UTC)
        return web.json_response(batch.as_object(self.base_url))


def _errored(kind: str, message: str) -> dict[str, Any]:
    return {
        "type": "errored",
        "error": {"type": "error", "error": {"type": kind, "message": message}},
    }
