"""What does botkit cost per turn? Turns per second with an LLM that answers at once.

``--messages`` (2,000) messages from ``--users`` (500) users are injected at once; the fake
Messages API answers every call immediately (an echo), so what is measured is the work of
the bot process itself: polling, parsing, journaling, the session files, the LLM call through
the SDK, rendering and sending the reply. botkit runs with its default settings except for
a high-volume flood configuration (``FloodControl.unlimited()``, paid broadcasts) and
``max_concurrent_turns=64`` (the default).

The yardstick is the cheapest bot there is: a bare aiogram echo bot (``Dispatcher``, the
handler answers the text) on the same fake. For context the run also measures an aiogram bot
that makes one ``AsyncAnthropic.messages.create`` call per message (at most 64 at once, like
botkit). Target: botkit at least 0.4x the echo bot and at least 300 turns/s.

``--profile`` adds a run of botkit under cProfile (the measured rounds only) and prints the
top functions by cumulative and by own time.

    python bench/overhead.py [--messages 2000] [--users 500] [--rounds 2] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from _common import (
    AIOGRAM_ECHO,
    AIOGRAM_LLM,
    BOTKIT,
    BotSpec,
    BotUnderTest,
    Round,
    add_profile_arguments,
    contenders,
    describe,
    load_line,
    machine_line,
    median,
    profile_path,
    profile_summary,
    user_ids,
)

FIRST_USER = 10_000
TARGET_RATIO = 0.4
TARGET_RATE = 300.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000, help="messages per round")
    parser.add_argument("--users", type=int, default=500, help="distinct users per round")
    parser.add_argument("--warmup", type=int, default=300, help="warm-up messages per bot")
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds per bot")
    parser.add_argument(
        "--max-concurrent-turns", type=int, default=64, help="botkit's max_concurrent_turns"
    )
    parser.add_argument(
        "--llm-concurrency",
        type=int,
        default=64,
        help="tasks_concurrency_limit of the aiogram + messages.create bot (0: unbounded)",
    )
    add_profile_arguments(parser)
    parser.add_argument("--timeout", type=float, default=60.0, help="give up a round after (s)")
    return parser.parse_args()


def batch(first_user: int, users: int, count: int, tag: str) -> list[tuple[int, str]]:
    """``count`` messages spread over ``users`` users, each text unique."""
    ids = user_ids(first_user, users)
    return [(ids[i % users], f"{tag} message {i} from {ids[i % users]}") for i in range(count)]


async def main(args: argparse.Namespace) -> int:
    rounds, users, count = args.rounds, args.users, args.messages
    warmup_users = min(users, args.warmup)
    allowed = tuple(user_ids(1, warmup_users)) + tuple(user_ids(FIRST_USER, rounds * users))
    llm_limit = args.llm_concurrency or None
    with tempfile.TemporaryDirectory(prefix="botkit-bench-") as tmp:
        work = Path(tmp)
        botkit_spec = BotSpec(
            BOTKIT, allowed_users=allowed, max_concurrent_turns=args.max_concurrent_turns
        )
        botkit = BotUnderTest("botkit", botkit_spec, work / "botkit")
        echo = BotUnderTest("echo", BotSpec(AIOGRAM_ECHO), work / "echo")
        llm = BotUnderTest("aiogram+llm", BotSpec(AIOGRAM_LLM, tasks_limit=llm_limit), work / "llm")
        bots = [botkit, echo, llm]
        profile_file = profile_path(args, work)
        if profile_file is not None:
            spec = replace(botkit_spec, profile=str(profile_file))
            bots.append(BotUnderTest("botkit-prof", spec, work / "profiled"))

        print(
            f"bench/overhead.py: {count} messages from {users} users injected at once, "
            "fake LLM with zero latency"
        )
        print(machine_line())
        print("fakes: Bot API + Messages API in this process; each bot in its own process")
        print(f"botkit:      {describe(botkit.spec)}")
        print(f"yardstick:   {describe(echo.spec)}")
        print(f"context:     {describe(llm.spec)}")
        print(f"rounds: {rounds} per bot, alternating, after a {args.warmup}-message warm-up")

        results: dict[str, list[Round]] = {bot.name: [] for bot in bots}
        async with contenders(bots):
            for bot in bots:
                await bot.run_round(batch(1, warmup_users, args.warmup, "warm-up"), timeout=60)
            for number in range(rounds):
                first = FIRST_USER + number * users
                for bot in bots:
                    bot.profile(True)
                    result = await bot.run_round(
                        batch(first, users, count, f"round {number}"), timeout=args.timeout
                    )
                    bot.profile(False)
                    results[bot.name].append(result)
                    print(
                        f"  round {number + 1} {bot.name:<11} {result.replies}/{result.expected} "
                        f"in {result.seconds:.2f} s = {result.per_second:.0f} turns/s; "
                        f"{result.cpu_note()}"
                    )
                    if not result.complete:
                        print(f"  {bot.name} missed replies: {result.missing[:5]}")
                        print(bot.log_tail())
                        return 1

        rate = {name: median([r.per_second for r in rs]) for name, rs in results.items()}
        cpu = {name: median([r.bot_cpu / r.replies for r in rs]) for name, rs in results.items()}
        ratio = rate["botkit"] / rate["echo"]
        for name, label in (("botkit", ""), ("echo", "yardstick: "), ("aiogram+llm", "context: ")):
            print(
                f"{label + name:<21} {rate[name]:5.0f} turns/s (median), "
                f"bot CPU {cpu[name] * 1000:.2f} ms per turn"
            )
        print(f"ratio botkit/echo {ratio:.2f} (target >= {TARGET_RATIO})")
        print(f"ratio botkit/(aiogram+llm) {rate['botkit'] / rate['aiogram+llm']:.2f}")
        if profile_file is not None:
            print(f"botkit under cProfile: {rate['botkit-prof']:.0f} turns/s (slowed by profiling)")
            print(profile_summary(profile_file))
    passed = ratio >= TARGET_RATIO and rate["botkit"] >= TARGET_RATE
    print(load_line())
    print(
        f"RESULT overhead botkit={rate['botkit']:.0f}/s yardstick={rate['echo']:.0f}/s "
        f"ratio={ratio:.2f} target>={TARGET_RATIO}x,>={TARGET_RATE:.0f}/s "
        f"{'PASS' if passed else 'MISS'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
