"""How much memory do pictures just under the pixel limit take when users send them at once?
(issue #51: 8 at once ≤ 400 MB above idle)

The pictures: a 7745 x 7745 RGBA PNG (59.98 million pixels, under BOTKIT_MAX_IMAGE_PIXELS'
60 million), a few hundred KB on the wire, 240 MB of pixels once decoded; and a 4096 x 4096
one, the largest the default budget reads whole. For each and each concurrency level
(1, 2, 4, 8), a fresh process reads it that many times at once, each on its own thread as a
bot's turns do, and its peak resident memory above what it held before is printed.

- ``botkit``: ``botkit.images.scale_image`` (what a user's photo or document goes through),
  with the default decode budget (BOTKIT_IMAGE_MEMORY_MB=320);
- ``pillow``: the yardstick, what a hand-written bot does: ``Image.open``, ``thumbnail`` to
  1568 px, save as PNG, on as many threads.

    python bench/images.py [--levels 1,2,4,8]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET_MB = 400
SIDES = (7745, 4096)
"""Just under the 60-megapixel limit (refused: too large to decode whole), and the largest
RGBA PNG side the default budget reads (16.8 megapixels)."""

CHILD = r"""
import io, resource, sys, time, threading
from concurrent.futures import ThreadPoolExecutor
data = open(sys.argv[1], "rb").read()
copies, who = int(sys.argv[2]), sys.argv[3]
if who == "botkit":
    from botkit.images import ImageDecodeBusy, scale_image
    def one(_):
        try:
            return scale_image(data) is not None
        except ImageDecodeBusy:  # refused with a clear reply, undecoded
            return False
else:
    from PIL import Image
    Image.MAX_IMAGE_PIXELS = None
    def one(_):
        with Image.open(io.BytesIO(data)) as image:
            image.thumbnail((1568, 1568))
            out = io.BytesIO()
            image.save(out, "PNG")
        return True
def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0
before = rss_kb()
started = time.monotonic()
with ThreadPoolExecutor(copies) as pool:
    done = list(pool.map(one, range(copies)))
seconds = time.monotonic() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(before, peak, sum(done), f"{seconds:.2f}")
"""


def picture(folder: Path, side: int) -> Path:
    """The PNG, made once (in a child: building it takes the memory it measures)."""
    path = folder / f"big{side}.png"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom PIL import Image\n"
            f"Image.new('RGBA', ({side}, {side}), (120, 30, 200, 255)).save(sys.argv[1], 'PNG')",
            str(path),
        ],
        check=True,
    )
    return path


def measure(path: Path, copies: int, who: str) -> tuple[float, int, float]:
    """Peak MB above idle, pictures read, seconds."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(copies), who],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    before, peak, done, seconds = int(out[0]), int(out[1]), int(out[2]), float(out[3])
    return (peak - before) / 1024, done, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,2,4,8")
    args = parser.parse_args()
    levels = [int(n) for n in args.levels.split(",")]
    peaks: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        for side in SIDES:
            path = picture(Path(folder), side)
            size_kb = path.stat().st_size / 1024
            print(f"picture: {side} x {side} RGBA PNG, {size_kb:.0f} KB; budget 400 MB (default)")
            for copies in levels:
                botkit_mb, done, seconds = measure(path, copies, "botkit")
                pillow_mb, _, pillow_seconds = measure(path, copies, "pillow")
                peaks.append(botkit_mb)
                print(
                    f"  {copies} at once: botkit +{botkit_mb:.0f} MB ({done}/{copies} read, "
                    f"{seconds:.1f} s), pillow +{pillow_mb:.0f} MB ({pillow_seconds:.1f} s), "
                    f"ratio {botkit_mb / pillow_mb:.2f}"
                )
    top = max(peaks)
    verdict = "PASS" if top <= TARGET_MB else "FAIL"
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (1 min)")
    print(f"RESULT images peak={top:.0f}MB (any size, any level) target<={TARGET_MB}MB {verdict}")


if __name__ == "__main__":
    main()
