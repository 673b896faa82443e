"""What does re-running a recorded turn cost (``replay --rerun --llm recorded``), beside serving it?

``--sessions`` users (100) each hold a conversation of ``--turns`` turns (20) with botkit's
default assistant, served as ``python -m botkit`` serves it with streaming off (the cheaper
served turn, so the stricter comparison) and, for reference, on: each of the ``--turns`` rounds,
every user sends one message at once, and the CPU the bot process used is measured per turn.
Then the 100 recorded sessions of the streaming-off bot are re-run in recorded mode
(``replay SESSIONS/ --rerun --llm recorded``: the default assistant's own steps and tools, the
recorded answers played back, no request made) in a child process of their own, which times
only the re-run (imports and the bot's loading excluded); a short warm-up pass first, then
``--passes`` (3) measured passes.

Target: CPU per re-run turn <= 2.0x a served turn (streaming off).

    python bench/rerun.py [--sessions 100] [--turns 20] [--passes 3] [--chunk-delay 0.02]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

from _common import (
    API_KEY,
    BOTKIT,
    MODEL,
    BotSpec,
    BotUnderTest,
    Round,
    describe,
    load_line,
    machine_line,
    median,
    paragraph_responder,
    user_ids,
)

FIRST_USER = 20_000
WARMUP_USERS = 20
WARMUP_SESSIONS = 5
TARGET = 2.0
HERE = Path(__file__).resolve()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100, help="recorded conversations")
    parser.add_argument("--turns", type=int, default=20, help="turns in each conversation")
    parser.add_argument("--passes", type=int, default=3, help="measured re-run passes")
    parser.add_argument(
        "--chunk-delay", type=float, default=0.02, help="seconds between two text deltas"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="give up a round after (s)")
    return parser.parse_args()


def messages(turn: int, users: list[int]) -> list[tuple[int, str]]:
    """Turn ``turn`` of each user's conversation."""
    return [(user, f"question {turn} from {user}") for user in users]


async def serve_and_record(args: argparse.Namespace, work: Path) -> tuple[dict[str, float], Path]:
    """Serve every conversation with both botkit variants; their CPU per served turn (ms, the
    median of the rounds) and the sessions folder of the streaming-off bot."""
    users = user_ids(FIRST_USER, args.sessions)
    warmup = user_ids(1, WARMUP_USERS)
    ours = BotSpec(BOTKIT, allowed_users=tuple(warmup + users), assistant=True)
    specs = {"botkit-nostream": ours, "botkit": replace(ours, stream_replies=True)}
    bots = [
        BotUnderTest(
            name, spec, work / name, chunk_delay=args.chunk_delay, responder=paragraph_responder
        )
        for name, spec in specs.items()
    ]
    for bot in bots:
        print(f"{bot.name + ':':<17}{describe(bot.spec)}")
    results: dict[str, list[Round]] = {bot.name: [] for bot in bots}
    async with started_one_by_one(bots):
        for bot in bots:
            await bot.run_round(messages(0, warmup), timeout=args.timeout)
        for turn in range(1, args.turns + 1):
            for bot in bots:
                result = await bot.run_round(messages(turn, users), timeout=args.timeout)
                if not result.complete:
                    print(f"  {bot.name} missed replies: {result.missing[:5]}")
                    print(bot.log_tail())
                    raise SystemExit(1)
                results[bot.name].append(result)
        for name, rounds in results.items():
            per_turn = [r.cpu_ms_per_turn for r in rounds]
            print(
                f"  served {name:<16} {len(rounds)} rounds of {args.sessions} turns, bot CPU "
                f"{min(per_turn):.2f}-{max(per_turn):.2f} ms/turn"
            )
    cpu = {n: median([r.cpu_ms_per_turn for r in rs]) for n, rs in results.items()}
    return cpu, work / "botkit-nostream" / "sessions"


@contextlib.asynccontextmanager
async def started_one_by_one(bots: list[BotUnderTest]) -> AsyncIterator[None]:
    """As ``contenders``, but each bot imports and starts polling before the next one starts
    (on a loaded machine, two importing at once may miss the start-up timeout)."""
    try:
        for bot in bots:
            await bot.start()
            try:
                await bot.ready()
            except RuntimeError:
                print(bot.log_tail())
                raise
        yield
    finally:
        await asyncio.gather(*(bot.stop() for bot in bots), return_exceptions=True)


async def rerun_cpu(args: argparse.Namespace, sessions: Path) -> list[float]:
    """Each measured pass's CPU per re-run turn (ms), from a child process of its own."""
    env = {
        **os.environ,
        "ANTHROPIC_API_KEY": API_KEY,
        "BOTKIT_MODEL": MODEL,
        "BOTKIT_SESSIONS_DIR": str(sessions),
    }
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE),
        "child",
        str(sessions),
        str(args.passes),
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await child.communicate()
    if child.returncode != 0:
        raise SystemExit(f"the re-run child failed ({child.returncode})")
    passes = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    for number, measured in enumerate(passes, start=1):
        print(
            f"  re-run pass {number}: {measured['turns']} turns ({measured['changed']} changed, "
            f"status {measured['status']}) in {measured['cpu']:.2f} s CPU, "
            f"{measured['cpu'] / measured['turns'] * 1000:.2f} ms/turn"
        )
    return [p["cpu"] / p["turns"] * 1000 for p in passes]


def child(sessions: Path, passes: int) -> None:
    """Re-run the folder as ``replay SESSIONS/ --rerun --llm recorded`` does, ``passes`` times
    after a warm-up on a few sessions; one JSON line per measured pass."""
    import shutil

    from botkit.rerun.command import RerunOptions, rerun_command
    from botkit.sessions import read_session_file

    warm = sessions.parent / "warmup-sessions"
    warm.mkdir(exist_ok=True)
    files = sorted(sessions.glob("*.jsonl"))
    for path in [p for p in files if p.stem.isdigit()][:WARMUP_SESSIONS]:
        shutil.copy(path, warm / path.name)
    options = RerunOptions(llm="recorded")
    rerun_command(str(warm), options, out=io.StringIO())
    turns = sum(
        1
        for path in files
        if path.stem.isdigit() and int(path.stem) >= FIRST_USER
        for entry in read_session_file(path).entries
        if getattr(entry, "role", None) == "user" and getattr(entry, "update_id", None)
    )
    for _ in range(passes):
        out = io.StringIO()
        started = time.process_time()
        status = rerun_command(str(sessions), options, out=out)
        cpu = time.process_time() - started
        changed = int(out.getvalue().splitlines()[-1].split()[-2])
        print(json.dumps({"cpu": cpu, "turns": turns, "changed": changed, "status": status}))


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="botkit-bench-") as tmp:
        print(
            f"bench/rerun.py: {args.sessions} conversations of {args.turns} turns served, then "
            "re-run with --llm recorded"
        )
        print(machine_line())
        served, sessions = await serve_and_record(args, Path(tmp))
        rerun = await rerun_cpu(args, sessions)
    again = median(rerun)
    ratio = again / served["botkit-nostream"]
    print(
        f"served turn: {served['botkit-nostream']:.2f} ms CPU streaming off, "
        f"{served['botkit']:.2f} ms streaming on (median of {args.turns} rounds)"
    )
    print(f"re-run turn (recorded): {again:.2f} ms CPU (median of {len(rerun)} passes)")
    print(load_line())
    verdict = "PASS" if ratio <= TARGET else "FAIL"
    print(
        f"RESULT rerun recorded={ratio:.2f}x served-nostream ({again:.2f} / "
        f"{served['botkit-nostream']:.2f} ms; {again / served['botkit']:.2f}x streaming on) "
        f"target<={TARGET:.1f}x {verdict}"
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(Path(sys.argv[2]), int(sys.argv[3]))
        sys.exit(0)
    sys.exit(asyncio.run(main(parse_args())))
