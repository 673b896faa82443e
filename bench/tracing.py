"""What does tracing cost? The default assistant with tracing off, and on (#32).

Two botkit processes, each with its own fakes, run the same rounds in pairs: ``--users``
users (200) each send one message at once; the fake Messages API streams its answers as in
``turn_cost.py``. ``off``: no ``OTEL_*`` variable (botkit loads nothing of OpenTelemetry);
``on``: ``OTEL_EXPORTER_OTLP_ENDPOINT`` points at an OTLP/HTTP receiver in this process, so
the bot builds every span, batches it and exports it as protobuf over HTTP, as it would to a
collector (the receiver decodes and counts them here, on this process's CPU). The SDK's
defaults apply, as a user gets them: a batch leaves every 5 s (``OTEL_BSP_SCHEDULE_DELAY``) or
at 512 spans, so each round is followed by ``--settle`` seconds (6) for both bots, and the CPU
of a round is counted from its first message to the end of that wait: the export of its last
spans included.

This machine's speed drifts by as much as tracing costs (the same bot's CPU per turn moves by
a third from one minute to the next), so one "off" round after one "on" round measures the
drift. Instead ``--pairs`` pairs (8) of rounds run, and in each pair **both bots get their 200
messages at the same moment**: they share whatever state the machine is in, and each pair
gives a ratio. The bot whose messages leave first is slower in wall time, so "off" goes first in
odd pairs and "on" in even ones. Both bots run on the machine's last CPU and this process (the
fakes and the driver) on the others, so that neither bot shares a CPU with the fakes more than
the other does: unpinned, a whole run could sit a few per cent to one side (two tracing-off bots
gave pairs from 0.87 to 1.07 unpinned, 0.976 to 1.006 pinned). The verdict is the **median of
the pairs' ratios**, which a burst of load in one pair cannot move much. ``--one-at-a-time``
runs a pair's rounds one after the other instead (in alternating order, unpinned), as this
bench did before: with it, two tracing-off bots gave pairs from 0.80 to 1.27. Every round is
printed, with its bot CPU split between the event loop's thread and the others (the span
exporter's, in "on").

Printed: each process's start-up (CPU and wall time from its start to its first poll), every
round, the median bot CPU per turn of each side (divided by the messages sent, one turn each),
the spans received per turn, the "on" bot's Bot API requests a turn by method (polls, drafts
and "typing…" are not spans: ``botkit.tracing.otel.UNTRACED_METHODS``), and
``RESULT tracing ... PASS|FAIL``: PASS when the median ratio is <= 1.10 (target: CPU per turn
with tracing on <= 1.10x off). ``--control`` runs two "off" bots instead (no PASS or FAIL): the
ratio it prints is the noise floor of the method on this machine.

    python bench/tracing.py [--users 200] [--pairs 8] [--chunk-delay 0.02] [--settle 6]
                            [--control] [--one-at-a-time]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import _common
from _common import (
    BOTKIT,
    BotSpec,
    BotUnderTest,
    Round,
    load_line,
    machine_line,
    median,
    pair_of_rounds,
    paragraph_responder,
    user_ids,
)
from aiohttp import web

from botkit.testing.telegram import RecordedRequest

TARGET = 1.10
"""CPU per turn with tracing on, at most this times the CPU with it off."""
WARMUP_USERS = 50
SCHEDULE_DELAY = 5.0
"""The SDK's default ``OTEL_BSP_SCHEDULE_DELAY`` (s): a round's last spans leave this late."""
FIRST_USER = 10_000


class OtlpReceiver:
    """An OTLP/HTTP traces endpoint counting the spans it is sent."""

    def __init__(self) -> None:
        self.spans = 0
        self.requests = 0
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        export = ExportTraceServiceRequest.FromString(await request.read())
        self.requests += 1
        self.spans += sum(
            len(scope.spans) for spans in export.resource_spans for scope in spans.scope_spans
        )
        answer = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type="application/x-protobuf")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=200, help="users (one message each) a round")
    parser.add_argument(
        "--pairs",
        "--rounds",
        type=int,
        default=8,
        help="pairs of rounds (one off, one on) to take ratios of",
    )
    parser.add_argument(
        "--chunk-delay", type=float, default=0.02, help="seconds between streamed deltas"
    )
    parser.add_argument("--timeout", type=float, default=180.0, help="give up a round after (s)")
    parser.add_argument(
        "--settle",
        type=float,
        default=SCHEDULE_DELAY + 1,
        help="seconds after each round, counted in its CPU (the last batch's export)",
    )
    parser.add_argument(
        "--startup-timeout", type=float, default=300.0, help="give up a start-up after (s)"
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="both bots with tracing off: the ratio is the method's noise floor (no verdict)",
    )
    parser.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="run a pair's rounds one after the other (alternating order) instead of together",
    )
    return parser.parse_args()


def greetings(first_user: int, users: int) -> list[tuple[int, str]]:
    """One message from each of ``users`` users."""
    return [(user, f"hello from {user}") for user in user_ids(first_user, users)]


async def started(bot: BotUnderTest) -> tuple[float, float]:
    """Start ``bot``; wall and CPU seconds until it polls (imports, settings, getMe, first
    getUpdates). On a loaded machine the wall time is mostly waiting: compare the CPU."""
    began = time.monotonic()
    await bot.start()
    await bot.ready()
    return time.monotonic() - began, bot.cpu_seconds()


@dataclass
class Measured:
    """One bot's round: its replies, and its CPU per turn (ms) in all and in its event loop's
    thread, from its first message to ``--settle`` seconds after its last reply."""

    result: Round
    cpu_ms: float
    loop_ms: float

    @property
    def others_ms(self) -> float:
        """CPU per turn of the process's other threads (the span exporter's, when tracing)."""
        return self.cpu_ms - self.loop_ms


async def measured(
    bot: BotUnderTest, messages: list[tuple[int, str]], args: argparse.Namespace
) -> Measured:
    """One round of ``bot``, its last spans' export included."""
    before, loop_before = bot.cpu_seconds(), main_thread_cpu(bot)
    result = await bot.run_round(messages, timeout=args.timeout)
    await asyncio.sleep(args.settle)
    per_turn = 1000 / len(messages)
    return Measured(
        result,
        (bot.cpu_seconds() - before) * per_turn,
        (main_thread_cpu(bot) - loop_before) * per_turn,
    )


def thread_cpu(bot: BotUnderTest) -> list[tuple[int, float]]:
    """User + system CPU seconds of each thread of the bot process, by thread id."""
    assert bot.process is not None
    tick = os.sysconf("SC_CLK_TCK")
    seconds = []
    for task in Path(f"/proc/{bot.process.pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        seconds.append((int(task.name), (int(fields[11]) + int(fields[12])) / tick))
    return sorted(seconds)


def main_thread_cpu(bot: BotUnderTest) -> float:
    """CPU seconds of the bot's main thread (its event loop) so far."""
    assert bot.process is not None
    return dict(thread_cpu(bot)).get(bot.process.pid, 0.0)


def threads_line(bot: BotUnderTest) -> str:
    """User + system CPU seconds of each busy thread (main thread first), start-up included."""
    return ", ".join(f"{s:.2f}" for _, s in thread_cpu(bot) if s > 0)


def requests_line(requests: list[RecordedRequest], turns: int) -> str:
    """How many requests of each Bot API method the rounds made, per turn."""
    counts = Counter(request.method for request in requests)
    return ", ".join(f"{method} {count / turns:.1f}" for method, count in counts.most_common())


def placement(bots: list[BotUnderTest], args: argparse.Namespace) -> str:
    """Pin both bots to the last CPU and this process (the fakes) to the others, so that
    neither bot shares a CPU with the fakes more than the other does (together only)."""
    if args.one_at_a_time or not hasattr(os, "sched_setaffinity"):  # Linux only
        return "CPUs: as the system places them"
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return "CPUs: as the system places them"
    for bot in bots:
        assert bot.process is not None
        for task in Path(f"/proc/{bot.process.pid}/task").iterdir():  # threads started so far
            os.sched_setaffinity(int(task.name), cpus[-1:])
    os.sched_setaffinity(0, cpus[:-1])
    return f"CPUs: both bots on CPU {cpus[-1]}, the fakes and the driver on {cpus[:-1]}"


async def main(args: argparse.Namespace) -> int:
    _common.STARTUP_TIMEOUT = args.startup_timeout
    receiver = OtlpReceiver()
    await receiver.start()
    with tempfile.TemporaryDirectory(prefix="botkit-bench-") as tmp:
        work = Path(tmp)
        allowed = tuple(user_ids(1, WARMUP_USERS)) + tuple(
            user_ids(FIRST_USER, args.pairs * args.users)
        )
        spec = BotSpec(BOTKIT, allowed_users=allowed, stream_replies=True, assistant=True)
        traced = BotSpec(
            BOTKIT,
            allowed_users=allowed,
            stream_replies=True,
            assistant=True,
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": "bench"},
        )
        second = ("off2", spec) if args.control else ("on", traced)
        bots = [
            BotUnderTest(
                name, s, work / name, chunk_delay=args.chunk_delay, responder=paragraph_responder
            )
            for name, s in (("off", spec), second)
        ]
        off, on = (bot.name for bot in bots)
        against = "off (control)" if args.control else "on"
        print(
            f"bench/tracing.py: {args.users} users send one message each at once; the default "
            f"assistant (streamed drafts), tracing off vs {against}"
            f" (OTLP/HTTP to a local receiver); {args.pairs} pairs of rounds, "
            + ("one after the other, alternating" if args.one_at_a_time else "both bots at once")
        )
        print(machine_line())
        results: dict[str, list[Round]] = {bot.name: [] for bot in bots}
        per_turn: dict[str, list[float]] = {bot.name: [] for bot in bots}
        ratios: list[float] = []
        startup: dict[str, float] = {}
        startup_wall: dict[str, float] = {}
        try:
            for bot in bots:  # one at a time: start-up is measured alone
                startup_wall[bot.name], startup[bot.name] = await started(bot)
                print(
                    f"  start-up {bot.name:<4} {startup[bot.name]:.2f} s CPU "
                    f"({startup_wall[bot.name]:.2f} s wall) to the first poll"
                )
            print(f"  {placement(bots, args)}")
            for bot in bots:
                await measured(bot, greetings(1, WARMUP_USERS), args)
            first_request = len(bots[1].telegram.requests)
            for number in range(args.pairs):
                first = FIRST_USER + number * args.users
                pair: dict[str, float] = {}
                one_round = partial(measured, messages=greetings(first, args.users), args=args)
                rounds = await pair_of_rounds(bots, number, one_round, args.one_at_a_time)
                for bot, m in rounds:
                    results[bot.name].append(m.result)
                    per_turn[bot.name].append(m.cpu_ms)
                    pair[bot.name] = m.cpu_ms
                    print(
                        f"  pair {number + 1} {bot.name:<4} {m.result.replies}/{m.result.expected} "
                        f"in {m.result.seconds:.2f} s, bot CPU {m.cpu_ms:.2f} ms/turn (event loop "
                        f"{m.loop_ms:.2f}, other threads {m.others_ms:.2f}; "
                        f"{m.result.cpu_ms_per_turn:.2f} until the last reply)"
                    )
                    if not m.result.complete:
                        print(f"  {bot.name} missed replies: {m.result.missing[:5]}")
                        print(bot.log_tail())
                        return 1
                ratios.append(pair[on] / pair[off])
                print(f"  pair {number + 1} ratio {on}/{off} {ratios[-1]:.2f}x")
            for bot in bots:
                print(f"  {bot.name:<4} CPU by thread (s, start-up included): {threads_line(bot)}")
            sent = bots[1].telegram.requests[first_request:]
            print(f"  {on} Bot API requests a turn: {requests_line(sent, args.pairs * args.users)}")
        finally:
            await asyncio.gather(*(bot.stop() for bot in bots), return_exceptions=True)
            await receiver.stop()
    cpu = {name: median(values) for name, values in per_turn.items()}
    turns = WARMUP_USERS + sum(r.expected for r in results[on])
    spans_per_turn = receiver.spans / turns  # all flushed: the bot stopped before the receiver
    ratio = median(ratios)
    for name in results:
        print(
            f"{name:<4} bot CPU {cpu[name]:.2f} ms per turn (median), "
            f"start-up {startup[name]:.2f} s CPU"
        )
    print(
        f"ratios {on}/{off} by pair: {', '.join(f'{r:.3f}' for r in ratios)}; median {ratio:.3f}x "
        f"(the medians' ratio: {cpu[on] / cpu[off]:.2f}x)"
    )
    print(f"spans received: {spans_per_turn:.1f} per turn ({receiver.requests} exports)")
    print(load_line())
    if args.control:
        verdict = "CONTROL (both off: the noise floor, no verdict)"
    else:
        verdict = "PASS" if ratio <= TARGET and spans_per_turn > 0 else "FAIL"
    print(
        f"RESULT tracing cpu_{on}/{off}={ratio:.3f}x (median of {len(ratios)} pairs' ratios; "
        f"medians {on} {cpu[on]:.2f} / {off} {cpu[off]:.2f} ms per turn; start-up CPU "
        f"{on} {startup[on]:.2f} s / {off} {startup[off]:.2f} s; {spans_per_turn:.1f} spans per "
        f"turn) target<={TARGET:.2f}x {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
