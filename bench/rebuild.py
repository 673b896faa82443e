"""How long does rebuilding a context take, and how much memory, as the history behind it grows?

A user sent PDFs of ``--pdf-mb`` MB (8 by default: each a distinct file), each answered, then
``/clear`` and one short exchange, as ``JsonlSessionStore`` writes them (the PDFs once each in
``media/``). For histories of 10, 20 and 40 PDFs (``--pdfs``), a fresh process rebuilds the
user's context once, as a restart, an eviction or another worker's append makes botkit do:

- ``botkit``: ``ContextPool.get`` (``load_stored``, ``ContextManager.restore``, then the media
  of the window the model is sent: none from before the ``/clear``);
- ``before``: what botkit did before #27.5, ``load`` (every media of the history read back)
  then ``restore``;
- ``orjson``, the yardstick: the simplest rebuild a user would write, the file read line by
  line with ``orjson.loads``, keeping the messages after the last reset (no validation, no
  objects, no media).

Measured in each fresh process: the wall time of the first (cold in-process, page-cached)
rebuild and the median of 5 more, and the peak memory it added: ``VmHWM`` after it minus
``VmRSS`` before it (``/proc/self/status``). Target (#27.5): after ``/clear``, the 40-PDF
history rebuilds in <= 50 ms and <= 20 MB, and neither grows with the history.

    python bench/rebuild.py [--pdfs 10,20,40] [--pdf-mb 8] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

USER = 42
TARGET_MS = 50.0
TARGET_MB = 20.0
KINDS = ("botkit", "before", "orjson")
REPEATS = 5


def proc_status_mb(field: str) -> float:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status (Linux only)")


# ---------------------------------------------------------------------------- the history


async def write_history(directory: Path, pdfs: int, pdf_bytes: int) -> None:
    """``pdfs`` answered PDFs, ``/clear``, and one short exchange, through the JSONL store."""
    from botkit.agent import ContextManager
    from botkit.sessions import JsonlSessionStore
    from botkit.types import DocumentBlock, DocumentSource, Message, TextBlock

    store = JsonlSessionStore(directory)
    context = ContextManager(USER, on_append=store.append)
    for n in range(pdfs):
        data = base64.b64encode(b"%PDF-1.4\n" + os.urandom(pdf_bytes)).decode()
        document = DocumentBlock(source=DocumentSource(data=data), title=f"report-{n}.pdf")
        await context.append(
            Message(role="user", content=[document, TextBlock(text=f"summarise report {n}")]),
            update_id=n,
        )
        answer = TextBlock(text=f"Report {n} says the numbers went up. " * 8)
        await context.append(Message(role="assistant", content=[answer]))
    await context.reset("/clear")
    await context.append(Message.user_text("a fresh start"), update_id=pdfs)
    await context.append(Message(role="assistant", content=[TextBlock(text="Hello again.")]))
    await store.close()


# ---------------------------------------------------------------------------- the child


def rebuild_once(kind: str, directory: Path) -> int:
    """Rebuild the user's context one way; the number of messages it holds."""
    if kind == "orjson":
        return len(orjson_rebuild(directory / f"{USER}.jsonl"))
    from botkit.agent import ContextManager
    from botkit.agent.pool import ContextPool
    from botkit.sessions import JsonlSessionStore

    store = JsonlSessionStore(directory)
    if kind == "botkit":
        context = asyncio.run(ContextPool(store).get(USER))
    else:
        entries = asyncio.run(store.load(USER)).entries
        context = ContextManager.restore(USER, entries)
    return len(context.messages)


def orjson_rebuild(path: Path) -> list[dict[str, Any]]:
    """The yardstick: every line parsed with orjson; the messages after the last reset."""
    import orjson

    messages: list[dict[str, Any]] = []
    with path.open("rb") as f:
        for line in f:
            entry = orjson.loads(line)
            if entry.get("type") == "reset":
                messages.clear()
            elif entry.get("type") == "message":
                messages.append({"role": entry["role"], "content": entry["content"]})
    return messages


def child(kind: str, directory: Path) -> None:
    """Measure one kind of rebuild in this fresh process; print the figures as JSON."""
    import orjson  # noqa: F401 - imported before the baseline, like botkit's modules below

    if kind != "orjson":
        import botkit.agent.pool
        import botkit.sessions  # noqa: F401 - their imports are not the rebuild's memory
    before = proc_status_mb("VmRSS")
    started = time.perf_counter()
    held = rebuild_once(kind, directory)
    first = time.perf_counter() - started
    peak = proc_status_mb("VmHWM") - before
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        rebuild_once(kind, directory)
        times.append(time.perf_counter() - started)
    print(
        json.dumps(
            {
                "first_ms": first * 1e3,
                "median_ms": statistics.median(times) * 1e3,
                "peak_mb": peak,
                "messages": held,
            }
        )
    )


def measure(kind: str, directory: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "child", kind, str(directory)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


# ---------------------------------------------------------------------------- the driver


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pdfs", default="10,20,40", help="history sizes, comma-separated")
    parser.add_argument("--pdf-mb", type=float, default=8.0, help="size of each PDF in MB")
    parser.add_argument("--keep", type=Path, help="write the histories here and keep them")
    args = parser.parse_args()
    sizes = [int(n) for n in args.pdfs.split(",")]
    root = args.keep or Path(tempfile.mkdtemp(prefix="botkit-rebuild-"))
    print(
        f"rebuild: histories of {sizes} PDFs of {args.pdf_mb:g} MB, then /clear and one "
        f"exchange; JSONL store in {root}; python {platform.python_version()}, "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}"
    )
    results: dict[int, dict[str, dict[str, Any]]] = {}
    try:
        for size in sizes:
            directory = root / f"{size}-pdfs"
            if not (directory / f"{USER}.jsonl").exists():
                asyncio.run(write_history(directory, size, int(args.pdf_mb * 1_000_000)))
            results[size] = {kind: measure(kind, directory) for kind in KINDS}
            for kind, f in results[size].items():
                print(
                    f"{size:>4} PDFs  {kind:<7} first {f['first_ms']:8.1f} ms  median "
                    f"{f['median_ms']:8.1f} ms  peak +{f['peak_mb']:7.1f} MB  "
                    f"({f['messages']} messages)"
                )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    largest = results[max(sizes)]
    botkit, yardstick = largest["botkit"], largest["orjson"]
    ok = botkit["first_ms"] <= TARGET_MS and botkit["peak_mb"] <= TARGET_MB
    print(
        f"RESULT rebuild {max(sizes)} PDFs after /clear: botkit {botkit['first_ms']:.1f} ms "
        f"+{botkit['peak_mb']:.1f} MB (orjson {yardstick['first_ms']:.1f} ms "
        f"+{yardstick['peak_mb']:.1f} MB, {botkit['first_ms'] / yardstick['first_ms']:.1f}x; "
        f"before {largest['before']['first_ms']:.0f} ms +{largest['before']['peak_mb']:.0f} MB) "
        f"target<={TARGET_MS:g} ms and <={TARGET_MB:g} MB {'PASS' if ok else 'FAIL'}"
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "child":
        child(sys.argv[2], Path(sys.argv[3]))
    else:
        sys.exit(main())
