"""What does one turn cost the bot process, with the defaults a new user gets?

Each round, ``--users`` users (400) each send one message at once. The fake Messages API
answers every call with a paragraph and a short list (about 600 characters) streamed in about
30 text deltas of a few tokens, ``--chunk-delay`` (20 ms) apart, as the real API streams; a
non-streamed call waits as long as its stream would have taken. The fake Bot API answers
like Telegram (no pacing). What is measured is the CPU the bot process used per turn and the
wall time until the last reply arrived.

Contenders, every one in its own process with its own fakes, rounds alternating:

- ``botkit``: the default assistant as ``python -m botkit`` runs it (streamed drafts on,
  invite access with the SQLite store, JSONL sessions, JSON log lines, 64 turns at once);
  the one exception: ``FloodControl.unlimited()`` (Telegram's paid broadcasts) instead of
  pacing replies to 30 per second, which would measure Telegram's limit, not botkit;
- ``botkit-html``: the same with ``BOTKIT_RICH_MESSAGES=off`` (HTML drafts and messages, as
  before rich messages; the default sends rich drafts and rich messages);
- ``botkit-nostream``: the same with ``BOTKIT_STREAM_REPLIES=false``;
- ``create``: hand-written aiogram + ``AsyncAnthropic(http_client=DefaultAioHttpClient())``,
  one ``messages.create`` per message, then ``message.answer`` (at most 64 handlers at once);
- ``stream``: the same streaming with ``messages.stream`` into ``send_message_draft``,
  at most one draft per 0.3 s (botkit's interval), then ``message.answer``.

The yardsticks send the default assistant's system prompt and tool definitions too.
Targets (medians of the rounds): botkit CPU per turn <= 1.0x the ``stream`` bot, and
botkit-nostream CPU per turn <= 1.0x the ``create`` bot.

    python bench/turn_cost.py [--users 400] [--rounds 3] [--chunk-delay 0.02]
        [--profile] [--sample] [--profile-variant botkit-nostream] [--profile-file PATH]

``--profile`` runs one more botkit under cProfile (slowed about 2x: its figure is printed apart
and never used for a ratio); ``--sample`` runs one more botkit sampled by py-spy (``pip install
py-spy``; without pausing it) and prints its CPU per turn by component.
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
    disk_probe,
    load_line,
    machine_line,
    median,
    paired,
    paragraph_responder,
    profile_path,
    profile_summary,
    sample_breakdown,
    sample_path,
    step_breakdown,
    user_ids,
)

FIRST_USER = 10_000
WARMUP_USERS = 40
TARGET = 1.0
TARGETS_52 = {"streaming": 0.4, "nostream": 0.6}
"""Issue #52's targets (CPU per turn against the yardstick), printed beside #12's ``TARGET``."""
YARDSTICK = {"botkit": "stream", "botkit-html": "stream", "botkit-nostream": "create"}
"""The hand-written bot each botkit variant is measured against."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=400, help="users (one message each) a round")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per bot")
    parser.add_argument(
        "--chunk-delay", type=float, default=0.02, help="seconds between two text deltas"
    )
    parser.add_argument(
        "--concurrency", type=int, default=64, help="turns at once (botkit's default: 64)"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="give up a round after (s)")
    parser.add_argument(
        "--profile-variant",
        choices=["botkit", "botkit-html", "botkit-nostream"],
        default="botkit",
        help="which botkit --profile and --sample look at (default: streaming on)",
    )
    parser.add_argument(
        "--history",
        type=int,
        default=0,
        metavar="N",
        help="the same users every round, each having written N times before the first "
        "measured round (N exchanges of history, up to botkit's 40-message window, still in "
        "memory) instead of new users' first messages",
    )
    parser.add_argument(
        "--returning",
        action="store_const",
        const=1,
        dest="history",
        help="the same as --history 1",
    )
    add_profile_arguments(parser)
    add_sample_argument(parser)
    return parser.parse_args()


def greetings(first_user: int, users: int, again: int = 0) -> list[tuple[int, str]]:
    """One message from each of ``users`` users (``again``: their how-manieth return)."""
    if again:
        return [(u, f"hello again from {u} ({again})") for u in user_ids(first_user, users)]
    return [(user, f"hello from {user}") for user in user_ids(first_user, users)]


def round_of(args: argparse.Namespace, number: int) -> list[tuple[int, str]]:
    """The messages of measured round ``number`` (from 0): new users, or the same returning."""
    if args.history:
        return greetings(FIRST_USER, args.users, again=number + args.history)
    return greetings(FIRST_USER + number * args.users, args.users)


def per_round(results: dict[str, list[Round]], name: str) -> list[float]:
    """``name``'s CPU per turn in each round, in order."""
    return [r.cpu_ms_per_turn for r in results[name]]


def contenders_for(args: argparse.Namespace, work: Path) -> list[BotUnderTest]:
    """botkit (streaming on and off) and the two hand-written bots, with the same fakes."""
    allowed = tuple(user_ids(1, WARMUP_USERS)) + tuple(
        user_ids(FIRST_USER, args.rounds * args.users)
    )
    ours = BotSpec(
        BOTKIT,
        allowed_users=allowed,
        max_concurrent_turns=args.concurrency,
        stream_replies=True,
        assistant=True,
        env=HIGH_VOLUME,
        paced=True,
    )
    specs = {
        "botkit": ours,
        "botkit-html": replace(ours, env={**HIGH_VOLUME, "BOTKIT_RICH_MESSAGES": "off"}),
        "botkit-nostream": replace(ours, stream_replies=False),
        "create": BotSpec(AIOGRAM_LLM, tasks_limit=args.concurrency, assistant=True),
        "stream": BotSpec(AIOGRAM_STREAM, tasks_limit=args.concurrency, assistant=True),
    }
    profile_file = profile_path(args, work)
    if profile_file is not None:
        specs["botkit-prof"] = replace(specs[args.profile_variant], profile=str(profile_file))
    samples = sample_path(args, work)
    if samples is not None:  # botkit and its yardstick, each once more, sampled by py-spy
        specs["botkit-sampled"] = specs[args.profile_variant]
        specs["yardstick-sampled"] = specs[YARDSTICK[args.profile_variant]]
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
    return bots


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="botkit-bench-") as tmp:
        work = Path(tmp)
        bots = contenders_for(args, work)
        print(
            f"bench/turn_cost.py: {args.users} users send one message each at once; every "
            f"answer streams in about 30 text deltas {args.chunk_delay * 1000:.0f} ms apart"
        )
        print(machine_line())
        print("fakes: Bot API + Messages API in this process; each bot in its own process")
        for bot in bots:
            print(f"{bot.name + ':':<17}{describe(bot.spec)}")
        print(f"rounds: {args.rounds} per bot, alternating, after a {WARMUP_USERS}-user warm-up")
        if args.history:
            print(
                f"users: the same {args.users} every round, returning (each wrote "
                f"{args.history} times before, unmeasured): botkit sends their history, the "
                "yardsticks keep none"
            )

        results: dict[str, list[Round]] = {bot.name: [] for bot in bots}
        async with contenders(bots):
            for bot in bots:
                await bot.run_round(greetings(1, WARMUP_USERS), timeout=args.timeout)
                for again in range(args.history):  # their earlier messages, unmeasured
                    earlier = greetings(FIRST_USER, args.users, again=again)
                    await bot.run_round(earlier, timeout=args.timeout)
            for number in range(args.rounds):
                # beside the bots' folders, where botkit creates a session file a new user
                print(f"  disk: a new file and two lines {disk_probe(work):.0f} µs of CPU")
                for bot in bots:
                    bot.profile(True)
                    await bot.sample(True)
                    result = await bot.run_round(round_of(args, number), timeout=args.timeout)
                    bot.profile(False)
                    await bot.sample(False)
                    results[bot.name].append(result)
                    print(
                        f"  round {number + 1} {bot.name:<16} {result.replies}/{result.expected} "
                        f"in {result.seconds:.2f} s, bot CPU "
                        f"{result.cpu_ms_per_turn:.2f} ms/turn; "
                        f"{result.cpu_note()}"
                    )
                    if not result.complete:
                        print(f"  {bot.name} missed replies: {result.missing[:5]}")
                        print(bot.log_tail())
                        return 1
            drafts = {
                bot.name: len(bot.telegram.requests_for("sendMessageDraft"))
                + len(bot.telegram.requests_for("sendRichMessageDraft"))
                for bot in bots
            }

        cpu = {n: median([r.cpu_ms_per_turn for r in rs]) for n, rs in results.items()}
        wall = {n: median([r.seconds for r in rs]) for n, rs in results.items()}
        turns = {n: sum(r.expected for r in rs) + WARMUP_USERS for n, rs in results.items()}
        kernel = {
            n: median([r.bot_kernel / max(r.expected, 1) * 1000 for r in rs])
            for n, rs in results.items()
        }
        for name in results:
            print(
                f"{name:<16} bot CPU {cpu[name]:.2f} ms per turn (median; in the kernel "
                f"{kernel[name]:.2f}), wall {wall[name]:.2f} s, "
                f"{drafts[name] / turns[name]:.1f} drafts per turn"
            )
        streaming = cpu["botkit"] / cpu["stream"]
        plain = cpu["botkit-nostream"] / cpu["create"]
        print(
            f"ratio botkit/stream (CPU per turn) {streaming:.2f}; wall "
            f"{wall['botkit'] / wall['stream']:.2f}"
        )
        print(
            f"ratio botkit-nostream/create (CPU per turn) {plain:.2f}; wall "
            f"{wall['botkit-nostream'] / wall['create']:.2f}"
        )
        print(f"ratio botkit/create (CPU per turn) {cpu['botkit'] / cpu['create']:.2f}")
        by_round = {
            "botkit/stream": paired(per_round(results, "botkit"), per_round(results, "stream")),
            "botkit-nostream/create": paired(
                per_round(results, "botkit-nostream"), per_round(results, "create")
            ),
        }
        for label, ratios in by_round.items():
            shown = ", ".join(f"{ratio:.2f}" for ratio in ratios)
            print(f"ratio {label} round by round {shown}: median {median(ratios):.2f}")
        html = cpu["botkit-html"] / cpu["stream"]
        print(
            f"ratio botkit-html/stream (CPU per turn) {html:.2f}; rich drafts on / off "
            f"{cpu['botkit'] / cpu['botkit-html']:.2f}"
        )
        if "botkit-prof" in results:
            print(f"botkit under cProfile: {cpu['botkit-prof']:.2f} ms per turn (slowed)")
            profile_file = profile_path(args, work)
            if profile_file is not None and profile_file.exists():
                measured = args.rounds * args.users
                print(f"a turn by step ({args.profile_variant}, {measured} profiled turns):")
                print(step_breakdown(profile_file, measured, cpu[args.profile_variant]))
            assert profile_file is not None
            print(profile_summary(profile_file))
        if "botkit-sampled" in results:
            sampled = {bot.name: bot for bot in bots if bot.sample_files}
            yardstick = YARDSTICK[args.profile_variant]
            print(
                f"where the CPU goes: {args.profile_variant} and the {yardstick} bot, each run "
                "once more and sampled by py-spy (shares of samples scaled to that process's "
                "own median CPU per turn):"
            )
            columns = {
                args.profile_variant: (
                    sampled["botkit-sampled"].sample_files,
                    cpu["botkit-sampled"],
                ),
                yardstick: (
                    sampled["yardstick-sampled"].sample_files,
                    cpu["yardstick-sampled"],
                ),
            }
            print(sample_breakdown(columns))
    verdict = "PASS" if streaming <= TARGET and plain <= TARGET else "FAIL"
    met = streaming <= TARGETS_52["streaming"] and plain <= TARGETS_52["nostream"]
    print(load_line())
    print(
        f"issue #52's targets: streaming<={TARGETS_52['streaming']}x "
        f"nostream<={TARGETS_52['nostream']}x {'PASS' if met else 'FAIL'}"
    )
    print(
        f"RESULT turn_cost streaming={streaming:.2f}x html={html:.2f}x nostream={plain:.2f}x "
        f"(botkit {cpu['botkit']:.2f} / botkit-html {cpu['botkit-html']:.2f} / stream "
        f"{cpu['stream']:.2f} ms; botkit-nostream "
        f"{cpu['botkit-nostream']:.2f} / create {cpu['create']:.2f} ms) target<={TARGET:.1f}x "
        f"{verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
