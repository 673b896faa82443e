"""How soon does ``python -m botkit try`` answer? (issue #50: within 2 s on an idle machine)

Each round starts ``python -m botkit try`` without keys in a fresh folder, writes ``hello``
and times its banner and its first answer (``bot> echo: hello``); ``python -m botkit --help``
is timed beside it. The yardstick is the simplest thing a user could write instead: a script
that imports aiogram and the Anthropic SDK, as any hand-written Telegram bot on Claude must,
and exits (``yardstick``: its start-up alone, before it could answer anything).

    python bench/try_start.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET = 2.0
"""Seconds to the first answer, on an idle machine."""


def first_answer() -> tuple[float, float]:
    """Seconds to the banner and to the first answer of one ``try``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "TELEGRAM_"))}
    with tempfile.TemporaryDirectory() as folder:
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "botkit", "try", "--sessions", folder],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=folder,
            env=env,
        )
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write("hello\n")
        process.stdin.flush()
        banner = answer = float("nan")
        for line in process.stdout:
            if line.startswith("botkit try") and banner != banner:
                banner = time.monotonic() - started
            if line.startswith("bot> "):
                answer = time.monotonic() - started
                break
        process.stdin.close()
        process.wait(timeout=60)
    return banner, answer


def timed(argv: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, capture_output=True, check=True)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    banners, answers, helps, yardsticks = [], [], [], []
    for n in range(1, args.rounds + 1):
        banner, answer = first_answer()
        helps.append(timed([sys.executable, "-m", "botkit", "--help"]))
        yardsticks.append(timed([sys.executable, "-c", "import aiogram, anthropic"]))
        banners.append(banner)
        answers.append(answer)
        print(
            f"  round {n}: banner {banner:.2f} s, first answer {answer:.2f} s, --help "
            f"{helps[-1]:.2f} s, yardstick {yardsticks[-1]:.2f} s"
        )
    answer, yardstick = statistics.median(answers), statistics.median(yardsticks)
    print(f"try: banner {statistics.median(banners):.2f} s, first answer {answer:.2f} s (median)")
    print(f"--help: {statistics.median(helps):.2f} s")
    print(f"yardstick (import aiogram, anthropic and exit): {yardstick:.2f} s")
    print(f"ratio try first answer / yardstick {answer / yardstick:.2f}")
    load = os.getloadavg()[0]
    verdict = "PASS" if answer <= TARGET else "FAIL"
    print(f"load average at the end: {load:.2f} (1 min)")
    print(f"RESULT try_start first_answer={answer:.2f}s target<={TARGET:.0f}s {verdict}")


if __name__ == "__main__":
    main()
