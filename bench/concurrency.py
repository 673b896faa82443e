"""How long until 500 users who wrote at the same moment all have their answer?

Every user sends one message at once; the fake Messages API takes ``--latency`` seconds
(1.0 by default) to answer each call. A bot answering one message after the other would
need 500 s; one that runs every turn at once needs little more than the latency.

botkit runs the default assistant with the defaults of ``python -m botkit`` (streamed drafts
on, invite access with the SQLite store, JSONL sessions, JSON log lines) except
``max_concurrent_turns`` above the burst (``--max-concurrent-turns``, 512) and
``FloodControl.unlimited()`` (Telegram's paid broadcasts: no pacing to 30 replies a second);
``botkit-nostream`` is the same with streaming off. Every answer is a paragraph and a list
streamed in about 30 deltas ``--chunk-delay`` apart. The yardsticks are what a user could write
instead: an aiogram ``Dispatcher`` (each update handled as its own task) whose handler makes
one ``AsyncAnthropic(http_client=DefaultAioHttpClient()).messages.create`` call and answers
with ``message.answer`` (``create``, the one the target is set against), and the same with
``messages.stream`` into ``send_message_draft`` at most every 0.3 s (``stream``). Fakes and
driver run in this process, each bot in its own.

    python bench/concurrency.py [--users 500] [--latency 1.0] [--rounds 3] [--chunk-delay 0.01]
        [--profile] [--sample]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from _common import (
    AIOGRAM_LLM,
    AIOGRAM_STREAM,
    BOTKIT,
    HIGH_VOLUME,
    BotSpec,
    BotUnderTest,
    Round,
    add_profile_arguments,
    add_sample_argument,
    contenders,
    describe,
    load_line,
    machine_line,
    median,
    paragraph_responder,
    profile_path,
    profile_summary,
    sample_breakdown,
    sample_path,
    user_ids,
)

FIRST_USER = 10_000
WARMUP_USERS = 20


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=500, help="users writing at once")
    parser.add_argument("--latency", type=float, default=1.0, help="fake LLM latency (s)")
    parser.add_argument(
        "--max-concurrent-turns", type=int, default=512, help="botkit's max_concurrent_turns"
    )
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per bot")
    parser.add_argument(
        "--chunk-delay", type=float, default=0.01, help="seconds between two text deltas"
    )
    parser.add_argument(
        "--target", type=float, default=1.0, help="botkit's target: wall time / the create bot's"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="give up a round after (s)")
    add_profile_arguments(parser)
    add_sample_argument(parser)
    return parser.parse_args()


def greetings(first_user: int, users: int) -> list[tuple[int, str]]:
    """One message from each of ``users`` users."""
    return [(user, f"hello from {user}") for user in user_ids(first_user, users)]


async def main(args: argparse.Namespace) -> int:
    rounds, users = args.rounds, args.users
    allowed = tuple(user_ids(1, WARMUP_USERS)) + tuple(user_ids(FIRST_USER, rounds * users))
    with tempfile.TemporaryDirectory(prefix="botkit-bench-") as tmp:
        work = Path(tmp)
        botkit_spec = BotSpec(
            BOTKIT,
            allowed_users=allowed,
            max_concurrent_turns=args.max_concurrent_turns,
            stream_replies=True,
            assistant=True,
            env=HIGH_VOLUME,
            paced=True,
        )
        specs = {
            "botkit": botkit_spec,
            "botkit-nostream": replace(botkit_spec, stream_replies=False),
            "create": BotSpec(AIOGRAM_LLM, assistant=True),
            "stream": BotSpec(AIOGRAM_STREAM, assistant=True),
        }
        profile_file = profile_path(args, work)
        if profile_file is not None:
            specs["botkit-prof"] = replace(botkit_spec, profile=str(profile_file))
        samples = sample_path(args, work)
        if samples is not None:  # botkit and the create bot, each once more, sampled by py-spy
            specs["botkit-sampled"] = botkit_spec
            specs["create-sampled"] = specs["create"]
        bots = [
            BotUnderTest(
                name,
                spec,
                work / name,
                chunk_delay=args.chunk_delay,
                responder=paragraph_responder,
            )
            for name, spec in specs.items()
        ]
        for bot in bots:
            if samples is not None and bot.name.endswith("-sampled"):
                bot.sample_to = samples.with_name(f"{samples.name}-{bot.name}")

        print(f"bench/concurrency.py: {users} users send one message each at the same moment;")
        print(f"  the fake Messages API answers every call after {args.latency:.1f} s")
        print(f"  (a sequential loop would take {users * args.latency:.0f} s)")
        print(machine_line())
        print("fakes: Bot API + Messages API in this process; each bot in its own process")
        for bot in bots:
            print(f"{bot.name + ':':<17}{describe(bot.spec)}")
        print(f"rounds: {rounds} per bot, alternating, after a {WARMUP_USERS}-message warm-up")

        results: dict[str, list[Round]] = {bot.name: [] for bot in bots}
        async with contenders(bots):
            for bot in bots:  # warm-up without latency: imports, pools, caches
                await bot.run_round(greetings(1, WARMUP_USERS), timeout=args.timeout)
                bot.claude.latency = args.latency
            for number in range(rounds):
                for bot in bots:
                    bot.profile(True)
                    await bot.sample(True)
                    result = await bot.run_round(
                        greetings(FIRST_USER + number * users, users), timeout=args.timeout
                    )
                    bot.profile(False)
                    await bot.sample(False)
                    results[bot.name].append(result)
                    print(
                        f"  round {number + 1} {bot.name:<16} {result.replies}/{result.expected} "
                        f"replies in {result.seconds:.2f} s; {result.cpu_note()}"
                    )
                    print(f"    {result.timeline()}")
                    if not result.complete:
                        print(f"  {bot.name} missed replies: {result.missing[:5]}")
                        print(bot.log_tail())
                        return 1

        wall = {n: median([r.seconds for r in rs]) for n, rs in results.items()}
        cpu = {n: median([r.cpu_ms_per_turn for r in rs]) for n, rs in results.items()}
        for name in results:
            print(
                f"{name:<16} median wall time {wall[name]:.2f} s for {users} concurrent turns, "
                f"bot CPU {cpu[name]:.2f} ms per turn"
            )
        ratio = wall["botkit"] / wall["create"]
        print(f"ratio botkit/create (wall) {ratio:.2f} (lower is better; 1.00 = as fast)")
        print(f"ratio botkit/stream (wall) {wall['botkit'] / wall['stream']:.2f}")
        print(f"ratio botkit-nostream/create (wall) {wall['botkit-nostream'] / wall['create']:.2f}")
        if profile_file is not None:
            print(f"botkit under cProfile: {wall['botkit-prof']:.2f} s (slowed by profiling)")
            print(profile_summary(profile_file))
        if samples is not None:
            print(
                "where the CPU goes: botkit and the create bot, each run once more and sampled "
                "by py-spy (shares of samples scaled to that process's own median CPU per turn):"
            )
            columns = {
                name.removesuffix("-sampled"): (bot.sample_files, cpu[name])
                for bot in bots
                if (name := bot.name).endswith("-sampled")
            }
            print(sample_breakdown(columns))
    verdict = "PASS" if ratio <= args.target else "FAIL"
    print(load_line())
    print(
        f"RESULT concurrency botkit={wall['botkit']:.2f}s create={wall['create']:.2f}s "
        f"ratio={ratio:.2f} target<={args.target:.1f}x {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
