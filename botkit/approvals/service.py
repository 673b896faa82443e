"""Approvals: a call of a tool marked ``approval=True`` waits for a person's Allow.

The turn that made the call ends at once (it holds no turn slot and no worker): the answer
with the call is in the session, the request in the approval store, and the chat shows the
call with Allow and Deny. Later messages of that conversation are held, in order. A press
(in any process) records the decision once, then resumes the turn from the record: the
call runs (or gets an error result), the model answers, and the held messages follow.
Resuming and draining are leased (renewed while they run): a process that dies doing either
is taken over by the next sweep anywhere once its lease runs out, and never before.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from botkit import tracing
from botkit.agent.context import ContextManager
from botkit.agent.events import ApprovalDecided, ApprovalRequested, Hooks
from botkit.approvals.request import decided_text, request_reply
from botkit.approvals.store import ApprovalStore, Decision, PendingApproval, SqliteApprovals, now
from botkit.chats import conversation_of
from botkit.claimnotes import ClaimNote
from botkit.commands import PressAnswer
from botkit.messengers.base import ButtonPress, Incoming, Messenger
from botkit.metrics import Metrics
from botkit.tools import ToolRegistry
from botkit.types import ToolUseBlock

if TYPE_CHECKING:
    from botkit.access import Access
    from botkit.config import Settings
    from botkit.options import BotOptions
    from botkit.tracing import AttributeValue

__all__ = ["ApprovalHost", "Approvals", "TurnResumer", "known_waiting"]

log = structlog.get_logger(__name__)

LEASE_SECONDS = 60.0
"""How long a resumption or a held message's turn is held without a renewal (renewed every
third of it): a process that died is taken over that long after, at the latest."""


class TurnResumer(Protocol):
    """What approvals need of the turn pipeline."""

    async def resume(
        self,
        message: Incoming,
        decided: dict[str, str | None],
        messenger: Messenger,
        decision: str | None = None,
    ) -> None:
        """Go on with the turn of ``message`` whose last answer's calls were decided."""
        ...

    async def handle_safely(self, message: Incoming, messenger: Messenger) -> None:
        """Run one message through the pipeline."""
        ...

    async def context_for(self, message: Incoming) -> ContextManager:
        """The context of the conversation ``message`` was written in."""
        ...


_WAITING: ClaimNote[bool] = ClaimNote("botkit_known_waiting")
"""Whether the running job's conversation waited, as its claim read it."""


def known_waiting(conversation: str, waiting: bool) -> None:
    """Note, for the turn running in this task, whether its conversation (session key) waits
    for a decision or holds messages, as the job's claim just read it: the turn's approvals
    check then takes it instead of a query. Only a conversation's own turns make it wait, and
    a claim is read once its earlier turns ended, so a "no" stays true until the turn's check;
    a "yes" is asked again (a decision may have ended it meanwhile)."""
    _WAITING.note(conversation, waiting)


def _known_idle(conversation: str) -> bool:
    """Whether a claim just read ``conversation`` as not waiting (taken once)."""
    read, waiting = _WAITING.take(conversation)
    return read and waiting is False


class ApprovalHost(Protocol):
    """What approvals need of a bot."""

    settings: Settings
    options: BotOptions
    hooks: Hooks
    metrics: Metrics
    messenger: Messenger | None

    async def approvers(self, call: ToolUseBlock, message: Incoming) -> Sequence[int]:
        """Who else than the sender may allow ``call``."""
        ...

    @property
    def access(self) -> Access:
        """The gates and the users store (its PostgreSQL pool keeps approvals in a scale-out)."""
        ...


class Approvals:
    """The approvals of one bot: requests, presses, resuming, the held messages, expiry."""

    def __init__(self, bot: ApprovalHost, store: ApprovalStore | None = None) -> None:
        self.bot = bot
        self.store: ApprovalStore = store or _store_for(bot)
        self.turns: TurnResumer | None = None
        """Set by the pipeline that resumes turns."""
        self.lease = LEASE_SECONDS
        """Seconds a resumption or a held message's turn is leased for (renewed meanwhile)."""
        self._draining: set[int] = set()
        """Update ids of held messages running now (they pass the hold)."""
        self._drains: set[str] = set()
        """Conversations this process drains now (a sweep starts no second drain)."""
        self._tasks: set[asyncio.Task[None]] = set()

    def conversation(self, message: Incoming) -> str:
        """The key of the conversation ``message`` belongs to."""
        conversation = conversation_of(message, self.bot.settings.group_context)
        return f"{conversation.owner_id}:{conversation.key or ''}"

    # ---- in the turn ------------------------------------------------------------------

    async def holds(self, message: Incoming, context: ContextManager) -> bool:
        """Keep ``message`` for later when its conversation waits for a decision (call with
        the context's lock held); whether it was kept (or is the waiting turn's own)."""
        if message.update_id in self._draining:
            return False
        conversation = self.conversation(message)
        if self.store.shared and _known_idle(context.key):
            return False  # read with the job's claim: no round trip
        if not await self.store.waiting(conversation):
            return False
        if context.has_turn(message.update_id):  # the waiting turn's, read again after a crash
            return True
        update = _raw_update(message)
        if update is None:  # e.g. a scheduled task: nothing to read again later
            log.warning("approval.not_held", update_id=message.update_id, kind=message.kind)
            return False
        # A burst gathered into one message: its first update, with what the others added.
        gathered: dict[str, Any] = {"text": message.text, "photo_ids": list(message.photo_ids)}
        gathered["update_ids"] = list(message.all_update_ids)
        await self.store.hold(conversation, {"update": update, "gathered": gathered})
        log.info("approval.message_held", user_id=message.user_id, update_id=message.update_id)
        return True

    async def request(
        self,
        message: Incoming,
        context: ContextManager,
        tools: ToolRegistry,
        messenger: Messenger,
    ) -> None:
        """Ask the chat to allow the waiting calls of the context's last answer."""
        calls = context.messages[-1].tool_uses
        waiting = [call for call in calls if tools.needs_approval(call.name)]
        approvers: set[int] = set()
        for call in waiting:
            approvers.update(await self.bot.approvers(call, message))
        approval = PendingApproval(
            id=uuid.uuid4().hex[:16],
            conversation=self.conversation(message),
            user_id=message.user_id,
            approvers=tuple(sorted(approvers - {message.user_id})),
            chat_id=message.chat_id,
            turn=_turn_of(message),
            calls=[{"id": c.id, "name": c.name, "input": c.input} for c in waiting],
            deadline=now() + self.bot.settings.approval_timeout,
        )
        traced: dict[str, AttributeValue] = {
            "botkit.approval.id": approval.id,
            "botkit.approval.tools": [c.name for c in waiting],
        }
        with tracing.tracer.span("approval request", attributes=traced) as span:
            await self.store.add(approval)
            reply = request_reply(approval.id, approval.calls, self.bot.options.approval_texts)
            reply_to = message.message_id if message.in_group else None
            sent = await messenger.send_reply(
                message.chat_id, reply, thread_id=message.thread_id, reply_to=reply_to
            )
            await self.store.set_message(approval.id, sent)
            span.event("approval requested", traced)
        log.info("approval.requested", approval_id=approval.id, tools=[c.name for c in waiting])
        event = ApprovalRequested(
            context_id=context.user_id,
            task_id=approval.id,
            approval_id=approval.id,
            calls=tuple(waiting),
        )
        await self.bot.hooks.run(event)

    # ---- presses ------------------------------------------------------------------------

    async def on_press(self, press: ButtonPress, payload: str) -> PressAnswer:
        """Allow or Deny pressed: record the decision once, then resume the turn."""
        approval_id, _, choice = payload.partition(":")
        return PressAnswer(await self.press(approval_id, choice, press.user_id))

    async def press(self, approval_id: str, choice: str, user_id: int) -> str:
        """Allow (``choice`` ``"a"``) or Deny (``"d"``) by ``user_id``, whether pressed under
        the request or on the console: the decision recorded once (by one who may), then the
        turn resumed; the notice for the presser."""
        texts = self.bot.options.approval_texts
        approval = await self.store.get(approval_id)
        if approval is None or choice not in ("a", "d"):
            return texts.too_late
        if not approval.may_press(user_id):
            log.info("approval.not_theirs", approval_id=approval_id, user_id=user_id)
            return texts.not_yours
        if approval.state != "pending":
            expired = approval.decision == "expired"
            return texts.too_late if expired else texts.already_decided
        if approval.deadline <= now():
            await self._decide(approval, "expired", None)
            return texts.too_late
        decision: Decision = "allowed" if choice == "a" else "denied"
        if not await self._decide(approval, decision, user_id):
            return texts.already_decided
        return texts.allowed if decision == "allowed" else texts.denied

    async def _decide(self, approval: PendingApproval, decision: Decision, by: int | None) -> bool:
        """Record ``decision`` (if no other was), show it, and resume the turn in the
        background; whether this decision was the one recorded."""
        if not await self.store.decide(approval.id, decision):
            return False
        log.info("approval.decided", approval_id=approval.id, decision=decision, by=by)
        self.bot.metrics.approval_decided(decision)
        traced = {"botkit.approval.id": approval.id, "botkit.approval.decision": decision}
        with tracing.tracer.span("approval decision", attributes=traced) as span:
            span.event("approval decided", {"botkit.approval.decision": decision})
            messenger = await self._show_decision(approval, decision, by)
        if messenger is not None:  # after the span: the resumed turn traces on its own
            self._spawn(self.resume(approval.id, messenger))
        return True

    async def _show_decision(
        self, approval: PendingApproval, decision: Decision, by: int | None
    ) -> Messenger | None:
        """Tell the hooks, and edit the request to show the decision (its buttons go); the
        messenger to resume the turn through, if the bot has one."""
        owner = int(approval.conversation.split(":", 1)[0])
        event = ApprovalDecided(
            context_id=owner,
            task_id=approval.id,
            approval_id=approval.id,
            decision=decision,
            decided_by=by,
        )
        await self.bot.hooks.run(event)
        messenger = self.bot.messenger
        if messenger is None:
            log.warning("approval.no_messenger", approval_id=approval.id)
            return None
        texts = self.bot.options.approval_texts
        outcome = {"allowed": texts.allowed, "denied": texts.denied, "expired": texts.expired}
        if approval.message_id is not None:
            with suppress(Exception):  # the buttons go in any case with the decision
                shown = decided_text(approval.calls, texts, outcome[decision])
                await messenger.edit_reply(approval.chat_id, approval.message_id, shown)
        return messenger

    async def settled(self) -> None:
        """Wait until the decided requests' turns (and the messages held behind them) ran."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- resuming -----------------------------------------------------------------------

    async def resume(self, approval_id: str, messenger: Messenger) -> None:
        """Go on with the turn of a decided request (once, in whichever process claims it),
        then run the messages held behind it."""
        if self.turns is None or not await self.store.claim(approval_id, now() + self.lease):
            return
        approval = await self.store.get(approval_id)
        assert approval is not None and approval.decision is not None
        message = _message_of(approval)
        texts = self.bot.options.loop_texts
        refusal = {"allowed": None, "denied": texts.denied, "expired": texts.expired}
        decided = {call["id"]: refusal[approval.decision] for call in approval.calls}
        traced = {"botkit.approval.id": approval_id, "botkit.approval.decision": approval.decision}
        try:
            with tracing.tracer.span("approval resume", attributes=traced):
                async with self._leased(self.store.renew, approval_id):
                    await self.turns.resume(message, decided, messenger, approval.decision)
        except Exception:
            log.exception("approval.resume_failed", approval_id=approval_id)
        finally:
            await self.store.finish(approval_id)
        await self.drain(approval.conversation, messenger)

    async def drain(self, conversation: str, messenger: Messenger) -> None:
        """Run the conversation's held messages, oldest first, until one waits again (or
        another process runs them: each is leased while its turn runs)."""
        if conversation in self._drains:
            return
        self._drains.add(conversation)
        try:
            await self._drain(conversation, messenger)
        finally:
            self._drains.discard(conversation)

    async def _drain(self, conversation: str, messenger: Messenger) -> None:
        assert self.turns is not None
        reader = getattr(messenger, "read_update", None)
        first = await self.store.next_held(conversation)
        incoming = await _read_held(reader, first.update) if first is not None else None
        if not isinstance(incoming, Incoming):
            if first is not None:  # nothing to find the conversation by: drop it
                log.warning("approval.held_unreadable", conversation=conversation)
                await self.store.release(first.seq)
            return
        context = await self.turns.context_for(incoming)
        while True:
            async with context.lock:  # as ``holds`` decides under it: nothing is left behind
                taking = now()
                held = await self.store.take_held(conversation, taking, taking + self.lease)
            if held is None:
                return  # none left, a held message asked for approval, or another drains
            incoming = await _read_held(reader, held.update)
            if isinstance(incoming, Incoming):
                self._draining.add(incoming.update_id)
                try:
                    async with self._leased(self.store.renew_held, held.seq):
                        await self.turns.handle_safely(incoming, messenger)
                finally:
                    self._draining.discard(incoming.update_id)
            else:
                log.warning("approval.held_unreadable", conversation=conversation)
            await self.store.release(held.seq)

    @asynccontextmanager
    async def _leased(
        self, renew: Callable[[Any, float], Awaitable[bool]], key: Any
    ) -> AsyncIterator[None]:
        """Renew the lease of ``key`` (with ``renew``) every third of it while the block runs."""

        async def renewing() -> None:
            while True:
                await asyncio.sleep(self.lease / 3)
                if not await renew(key, now() + self.lease):
                    log.warning("approval.lease_lost", key=key)

        renewal = asyncio.create_task(renewing())
        try:
            yield
        finally:
            renewal.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await renewal

    # ---- expiry and restarts ----------------------------------------------------------------

    async def sweep(self, messenger: Messenger, *, starting: bool = False) -> None:
        """Expire requests past their deadline, resume decided ones not resumed yet, end
        resumptions whose process died (their lease ran out; at the start of the only
        process using the store, all of them), and run what is held in conversations that
        wait for nothing any more."""
        for approval in await self.store.open_approvals():
            if approval.state == "pending" and approval.deadline <= now():
                await self._decide(approval, "expired", None)
            elif approval.state == "decided":
                self._spawn(self.resume(approval.id, messenger))
            elif approval.state == "resuming" and await self._abandoned(approval, starting):
                log.warning("approval.resume_interrupted", approval_id=approval.id)
        for conversation in await self.store.held_conversations():
            if conversation in self._drains or await self.store.unfinished(conversation):
                continue  # drained here now, or behind a request still
            self._spawn(self.drain(conversation, messenger))

    async def _abandoned(self, approval: PendingApproval, starting: bool) -> bool:
        """End a resumption whose process died (its lease ran out): the call never runs twice,
        its result reads "interrupted"; whether this sweep ended it."""
        at = math.inf if starting and not self.store.shared else now()
        return approval.resuming_until <= at and await self.store.abandon(approval.id, at)

    async def serve(self, messenger: Messenger, stop: asyncio.Event) -> None:
        """Sweep at start, then every few seconds (a quarter of the timeout, at most 30 s)."""
        interval = min(self.bot.settings.approval_timeout / 4, 30.0)
        starting = True
        while not stop.is_set():
            try:
                await self.sweep(messenger, starting=starting)
                starting = False
            except Exception:
                log.exception("approval.sweep_failed")
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)

    async def aclose(self) -> None:
        """Wait a moment for resumptions under way, then close the store."""
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.store.close()


def _store_for(bot: ApprovalHost) -> ApprovalStore:
    """The bot's PostgreSQL database with BOTKIT_DATABASE_URL (shared by all workers), else
    ``<sessions_dir>/approvals.db``."""
    if bot.settings.database_url is None:
        return SqliteApprovals(bot.settings.sessions_dir / "approvals.db")
    from botkit.approvals.postgres import PostgresApprovals

    async def pool() -> Any:
        return getattr(await bot.access.user_store(), "pool")  # noqa: B009

    async def changes() -> Any:
        return getattr(await bot.access.user_store(), "changes", None)

    return PostgresApprovals(pool, changes)


async def _read_held(reader: Any, held: dict[str, Any]) -> Incoming | None:
    """A held message read again (``reader``: the messenger's ``read_update``)."""
    incoming = await reader(held["update"]) if reader is not None else None
    if not isinstance(incoming, Incoming):
        return None
    gathered = held.get("gathered") or {}
    if len(gathered.get("update_ids", ())) <= 1:
        return incoming
    return replace(
        incoming,
        text=gathered["text"],
        photo_ids=tuple(gathered["photo_ids"]),
        update_ids=tuple(gathered["update_ids"]),
    )


def _raw_update(message: Incoming) -> dict[str, Any] | None:
    dump = getattr(message.raw, "model_dump", None)
    if dump is None:
        return None
    update: dict[str, Any] = dump(mode="json", exclude_none=True, by_alias=True)
    return update


def _turn_of(message: Incoming) -> dict[str, Any]:
    return {
        "update_id": message.update_id,
        "user_id": message.user_id,
        "chat_id": message.chat_id,
        "chat_type": message.chat_type,
        "thread_id": message.thread_id,
        "message_id": message.message_id,
        "username": message.username,
        "first_name": message.first_name,
        "chat_title": message.chat_title,
        "date": message.date.isoformat(),
    }


def _message_of(approval: PendingApproval) -> Incoming:
    turn = dict(approval.turn)
    turn["date"] = datetime.fromisoformat(turn["date"])
    return Incoming(text="", **turn)


def sweeping(bot: object, messenger: Messenger, stop: asyncio.Event) -> asyncio.Task[None] | None:
    """Start ``bot``'s approval sweeper (expiry, and what a restart left) until ``stop``."""
    approvals = getattr(bot, "approvals", None)
    if not isinstance(approvals, Approvals):
        return None
    return asyncio.create_task(approvals.serve(messenger, stop), name="approvals")
