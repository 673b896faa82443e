"""How soon does a streamed answer show up in the chat?

Measures the time from the first text delta leaving the fake Messages API to the first
``sendMessageDraft`` showing text reaching the fake Bot API (botkit's "Thinking…" draft, sent
with the LLM call before any text exists, does not count there; it does in "message in ->
first draft"), over ``--turns`` private-chat turns (one
after the other) whose answer streams in deltas ``--chunk-delay`` apart. Both fakes run in
this process, so both stamps come from the same ``time.monotonic`` clock: the fake Messages
API records when it wrote the first text delta of each answer (``first_delta_at``), the fake
Bot API when each request arrived.

botkit runs with ``stream_replies`` on (its drafts are throttled to one per 0.3 s, the first
one goes out at once), as ``python -m botkit`` does: rich drafts (``sendRichMessageDraft``)
and rich messages; ``botkit-html`` is the same with ``BOTKIT_RICH_MESSAGES=off`` (HTML
drafts, as before rich messages). The yardstick is a hand-written aiogram handler that streams with
``AsyncAnthropic.messages.stream`` and calls ``send_message_draft`` at most every 0.3 s
(``DRAFT_INTERVAL``), its first draft with the first delta.

    python bench/streaming.py [--turns 20] [--chunk-delay 0.05]

``--users N`` (issue #52) measures N turns at once instead, ``--rounds`` times per bot
(alternating): N users write at the same moment, the fake Messages API answers each after
``--latency`` s (1.0), about 30 deltas ``--chunk-delay`` apart, and each turn's first delta
-> first text shown is taken (a draft with text, else the reply itself: a turn whose drafts
all came too late is not left out); p50 and p95 of them, for botkit
(``--max-concurrent-turns``, 512, as ``concurrency.py`` runs it) and the hand-written
streaming bot (unbounded, aiogram's default) in the same run. Target: p95 <= 100 ms.

    python bench/streaming.py --users 500 [--rounds 2] [--latency 1.0] [--chunk-delay 0.01]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import (
    AIOGRAM_STREAM,
    BOTKIT,
    DRAFTS,
    REPLIES,
    BotSpec,
    BotUnderTest,
    contenders,
    describe,
    load_line,
    machine_line,
    median,
    percentile,
    user_ids,
)

from botkit.testing import FakeReply, FakeRequest

FIRST_USER = 10_000
WARMUP_TURNS = 3
FILLER = (
    "Streaming lets the user read the first words while the rest is still being written, "
    "which matters most for long answers that take several seconds to generate in full."
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20, help="measured turns per bot")
    parser.add_argument(
        "--chunk-delay", type=float, default=0.05, help="seconds between two deltas"
    )
    parser.add_argument("--target-ms", type=float, default=150.0, help="botkit's target (ms)")
    parser.add_argument(
        "--users", type=int, default=1, help="turns at once (1: one after the other, as before)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="with --users: rounds per bot")
    parser.add_argument("--latency", type=float, default=1.0, help="with --users: LLM latency (s)")
    parser.add_argument(
        "--max-concurrent-turns", type=int, default=512, help="with --users: botkit's bound"
    )
    parser.add_argument(
        "--p95-target-ms", type=float, default=100.0, help="with --users: botkit's p95 target"
    )
    return parser.parse_args()


def answer(request: FakeRequest) -> FakeReply:
    """A few sentences that start by naming the question (so the reply can be matched)."""
    return FakeReply.text(f"Answering {request.last_user_text()}. {FILLER}")


def long_answer(request: FakeRequest) -> FakeReply:
    """``answer`` three times as long (about 30 deltas), for ``--users``."""
    return FakeReply.text(f"Answering {request.last_user_text()}. {FILLER} {FILLER} {FILLER}")


@dataclass
class Turn:
    """One streamed turn: its first delta and what reached the Bot API when."""

    injected: float
    first_delta: float | None
    first_draft: float | None
    """The first draft of any kind (botkit's "Thinking…" goes out with the LLM call)."""
    first_text_draft: float | None
    """The first draft showing some of the answer."""
    drafts: int

    @property
    def delay_ms(self) -> float | None:
        """First text delta out of the Messages API → first draft showing text into the Bot API."""
        if self.first_delta is None or self.first_text_draft is None:
            return None
        return (self.first_text_draft - self.first_delta) * 1000


async def one_turn(bot: BotUnderTest, user_id: int, number: int) -> Turn:
    """Send one message, wait for the final reply, then read the fakes' records."""
    text = f"question {number} from {user_id}"
    first_request = len(bot.claude.requests)
    result = await bot.run_round([(user_id, text)], timeout=30)
    if not result.complete:
        raise RuntimeError(f"{bot.name}: no reply to {text!r}\n{bot.log_tail()}")
    first_delta = next(
        (
            bot.claude.first_delta_at.get(index)
            for index in range(first_request, len(bot.claude.requests))
            if text in bot.claude.requests[index].last_user_text()
        ),
        None,
    )
    drafts = sorted(
        bot.telegram.drafts(user_id) + bot.telegram.rich_drafts(user_id), key=lambda d: d.at
    )
    shown = (d.at for d in drafts if d.params.get("text") or d.params.get("rich_message"))
    return Turn(
        injected=result.started,
        first_delta=first_delta,
        first_draft=drafts[0].at if drafts else None,
        first_text_draft=next(shown, None),
        drafts=len(drafts),
    )


_ASKER = re.compile(r"question \d+ from (\d+)")


async def at_once(
    bot: BotUnderTest,
    first_user: int,
    users: int,
    timeout: float,  # noqa: ASYNC109
) -> list[Turn]:
    """``users`` users write at the same moment; each one's turn, read from the fakes."""
    ids = user_ids(first_user, users)
    first_request, first_draft = len(bot.claude.requests), len(bot.telegram.requests)
    messages = [(user, f"question 0 from {user}") for user in ids]
    result = await bot.run_round(messages, timeout=timeout)
    if not result.complete:
        raise RuntimeError(f"{bot.name}: {len(result.missing)} unanswered\n{bot.log_tail()}")
    deltas: dict[int, float] = {}
    for index in range(first_request, len(bot.claude.requests)):
        asker = _ASKER.search(bot.claude.requests[index].last_user_text())
        at = bot.claude.first_delta_at.get(index)
        if asker is not None and at is not None:
            deltas.setdefault(int(asker[1]), at)
    drafts: dict[int, list[Any]] = {user: [] for user in ids}
    replies: dict[int, float] = {}
    for request in bot.telegram.requests[first_draft:]:
        if request.error_code is not None:
            continue
        chat = int(request.params.get("chat_id", 0))
        if request.method.lower() in DRAFTS and chat in drafts:
            drafts[chat].append(request)
        elif request.method.lower() in REPLIES:
            replies.setdefault(chat, request.at)
    turns: list[Turn] = []
    for user in ids:
        sent = sorted(drafts[user], key=lambda d: d.at)
        shown = [d.at for d in sent if d.params.get("text") or d.params.get("rich_message")]
        # What the user first saw of the answer: a draft with text, else the reply itself (a
        # turn whose drafts all came too late counts by its reply, not left out).
        seen = min([*shown[:1], *([replies[user]] if user in replies else [])], default=None)
        turns.append(
            Turn(
                injected=result.started,
                first_delta=deltas.get(user),
                first_draft=sent[0].at if sent else None,
                first_text_draft=seen,
                drafts=len(sent),
            )
        )
    return turns


async def main_at_once(args: argparse.Namespace) -> int:
    """``--users N``: N streamed turns at once, p50 and p95 of first delta -> first draft."""
    users, rounds = args.users, args.rounds
    allowed = tuple(user_ids(1, WARMUP_TURNS)) + tuple(user_ids(FIRST_USER, rounds * users))
    with tempfile.TemporaryDirectory(prefix="botkit-bench-") as tmp:
        options = {"chunk_delay": args.chunk_delay, "responder": long_answer}
        spec = BotSpec(
            BOTKIT,
            allowed_users=allowed,
            stream_replies=True,
            max_concurrent_turns=args.max_concurrent_turns,
        )
        botkit = BotUnderTest("botkit", spec, Path(tmp) / "botkit", **options)
        yardstick = BotUnderTest(
            "yardstick", BotSpec(AIOGRAM_STREAM), Path(tmp) / "yardstick", **options
        )
        bots = [botkit, yardstick]
        print(
            f"bench/streaming.py --users {users}: {users} private-chat turns at the same moment, "
            f"{rounds} rounds per bot; the fake Messages API answers after {args.latency:.1f} s, "
            f"deltas {args.chunk_delay * 1000:.0f} ms apart"
        )
        print(machine_line())
        print("fakes: Bot API + Messages API in this process (one clock); each bot in its own")
        print(f"botkit:    {describe(botkit.spec)}")
        print(f"yardstick: {describe(yardstick.spec)}")
        results: dict[str, list[Turn]] = {bot.name: [] for bot in bots}
        async with contenders(bots):
            for bot in bots:
                for number in range(WARMUP_TURNS):
                    await one_turn(bot, 1 + number, number)
                bot.claude.latency = args.latency
            for number in range(rounds):
                for bot in bots:
                    turns = await at_once(bot, FIRST_USER + number * users, users, timeout=120)
                    delays = [t.delay_ms for t in turns if t.delay_ms is not None]
                    print(
                        f"  round {number + 1} {bot.name:<10} p50 {percentile(delays, 0.5):.0f} "
                        f"ms, p95 {percentile(delays, 0.95):.0f} ms, max {max(delays):.0f} ms "
                        f"({sum(t.drafts > 0 for t in turns)}/{users} turns with a draft)"
                    )
                    results[bot.name].extend(turns)
    figures: dict[str, tuple[float, float]] = {}
    for name, measured in results.items():
        delays = [t.delay_ms for t in measured if t.delay_ms is not None]
        if not delays:
            print(f"RESULT streaming-at-once {name} sent no drafts FAIL")
            return 1
        figures[name] = (percentile(delays, 0.5), percentile(delays, 0.95))
        drafts = sum(t.drafts for t in measured) / len(measured)
        print(
            f"{name:<11} first delta -> first text shown (draft, else reply), "
            f"{len(delays)} turns: p50 "
            f"{figures[name][0]:.0f} ms, p95 {figures[name][1]:.0f} ms, max {max(delays):.0f} "
            f"ms; {drafts:.1f} drafts per turn"
        )
    ours, theirs = figures["botkit"], figures["yardstick"]
    verdict = "PASS" if ours[1] <= args.p95_target_ms else "FAIL"
    print(load_line())
    print(
        f"RESULT streaming-at-once users={users} botkit p50={ours[0]:.0f}ms p95={ours[1]:.0f}ms "
        f"yardstick p50={theirs[0]:.0f}ms p95={theirs[1]:.0f}ms "
        f"target p95<={args.p95_target_ms:.0f}ms {verdict}"
    )
    return 0


async def main(args: argparse.Namespace) -> int:
    if args.users > 1:
        return await main_at_once(args)
    turns = args.turns
    allowed = tuple(user_ids(1, WARMUP_TURNS)) + tuple(user_ids(FIRST_USER, turns))
    with tempfile.TemporaryDirectory(prefix="botkit-bench-") as tmp:
        options = {"chunk_delay": args.chunk_delay, "responder": answer}
        botkit = BotUnderTest(
            "botkit",
            BotSpec(BOTKIT, allowed_users=allowed, stream_replies=True),
            Path(tmp) / "botkit",
            **options,
        )
        html = BotUnderTest(
            "botkit-html",
            BotSpec(
                BOTKIT,
                allowed_users=allowed,
                stream_replies=True,
                env={"BOTKIT_RICH_MESSAGES": "off"},
            ),
            Path(tmp) / "botkit-html",
            **options,
        )
        yardstick = BotUnderTest(
            "yardstick", BotSpec(AIOGRAM_STREAM), Path(tmp) / "yardstick", **options
        )
        bots = [botkit, html, yardstick]
        deltas = len(FILLER) // 20 + 1
        print(
            f"bench/streaming.py: {turns} private-chat turns one after the other; each answer "
            f"streams in about {deltas} text deltas {args.chunk_delay * 1000:.0f} ms apart"
        )
        print(machine_line())
        print("fakes: Bot API + Messages API in this process (one clock); each bot in its own")
        print(f"botkit:    {describe(botkit.spec)}")
        print(f"botkit-html: {describe(html.spec)}")
        print(f"yardstick: {describe(yardstick.spec)}")

        results: dict[str, list[Turn]] = {bot.name: [] for bot in bots}
        async with contenders(bots):
            for bot in bots:
                for number in range(WARMUP_TURNS):
                    await one_turn(bot, 1 + number, number)
            for number in range(turns):  # alternate, so noise hits both alike
                for bot in bots:
                    turn = await one_turn(bot, FIRST_USER + number, number)
                    results[bot.name].append(turn)

    figures: dict[str, tuple[float, float]] = {}
    for name, measured in results.items():
        delays = [t.delay_ms for t in measured if t.delay_ms is not None]
        shown = [(t.first_draft - t.injected) * 1000 for t in measured if t.first_draft is not None]
        drafts = sum(t.drafts for t in measured) / len(measured)
        if len(delays) < len(measured):
            print(f"{name}: {len(measured) - len(delays)} turn(s) without a draft showing text")
        if not delays:
            print(f"RESULT streaming {name} sent no drafts FAIL")
            return 1
        figures[name] = (median(delays), percentile(delays, 0.9))
        print(
            f"{name:<11} first delta -> first draft with text: median {figures[name][0]:.1f} ms, "
            f"p90 {figures[name][1]:.1f} ms, max {max(delays):.1f} ms; message in -> first "
            f"draft: median {median(shown):.0f} ms; {drafts:.1f} drafts per turn"
        )
    ours, theirs = figures["botkit"][0], figures["yardstick"][0]
    ratio = ours / theirs
    verdict = "PASS" if ours <= args.target_ms else "FAIL"
    print(f"ratio botkit/yardstick (median) {ratio:.2f} (lower is better)")
    print(f"ratio botkit-html/yardstick (median) {figures['botkit-html'][0] / theirs:.2f}")
    print(load_line())
    print(
        f"RESULT streaming botkit={ours:.1f}ms (p90 {figures['botkit'][1]:.1f}ms) "
        f"yardstick={theirs:.1f}ms (p90 {figures['yardstick'][1]:.1f}ms) ratio={ratio:.2f} "
        f"target<={args.target_ms:.0f}ms {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
