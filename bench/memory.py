"""How much memory do 10,000 users' conversations take, and how fast is a context rebuilt?

10,000 users each have a 40-message session file, as ``JsonlSessionStore`` writes them (user
texts and answers of 200-600 characters, some tool_use/tool_result pairs, usage on every
answer). Then, in a fresh process (so its memory figures are its own), a ``Bot`` with
``max_contexts`` (default: ``BotOptions().max_contexts``) gets ``await bot.context_for(uid)``
for every user once, as the first message of each user would: each call is a cold rebuild
from the user's file (read, parse, ``ContextManager.restore``), and the least recently used
contexts beyond ``max_contexts`` are dropped.

Measured: the resident set (``VmRSS`` of ``/proc/self/status``) after botkit's imports and
the ``Bot`` (baseline) and after all users were touched, the peak (``VmHWM``), and the time
of each cold ``context_for`` (median, p99). Target: RSS after all users <= 150 MB with the
default eviction. For comparison, the same without eviction (``max_contexts=20,000``: every
context stays), which may exceed the target: it shows what eviction saves.

The yardstick for the rebuild time is the simplest loader a user would write: read the file
and ``json.loads`` each line into a dict (no validation, no objects), in the same process on
the same (page-cached) files.

    python bench/memory.py [--users 10000] [--messages 40] [--max-contexts 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import random
import statistics
import string
import subprocess
import sys
import tempfile
import time
import types
from collections import Counter
from collections.abc import Callable, Iterable
from importlib.metadata import version
from pathlib import Path
from typing import Any

TARGET_MB = 150.0
NO_EVICTION = 20_000
SEED = 11
MODEL = "claude-sonnet-5"
CHILD_TIMEOUT = 110.0
SAMPLE = 500
"""Users whose rebuild is broken down into its steps, and contexts whose size is measured."""

SAMPLE_TEXT = (
    "the order arrived yesterday but one of the books has a torn cover and I would like to "
    "know whether you can send a replacement before the weekend because it is a present for "
    "my father who reads every evening after dinner and prefers hardcovers with large print "
    "could you also check if the second volume of the series is in stock in the Hamburg "
    "branch since I will be there on Friday afternoon and want to pick it up myself thanks "
    "a lot for your help last time the delivery was very quick and the packaging excellent "
    "shipping to Austria costs more than I expected is there a cheaper option for paperbacks "
    "your loyalty points expire after two years and every hundred points become a voucher "
    "tracking shows the parcel in transit since Tuesday with no further scan which is normal "
    "for the first hours after the carrier receives it from the warehouse in Berlin"
)
WORDS = SAMPLE_TEXT.split()


# ---------------------------------------------------------------------------- memory figures


def proc_status_mb(field: str) -> float:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status (Linux only)")


def deep_size(root: object) -> Counter[str]:
    """Bytes of ``root`` and all it references (not classes, functions, modules), by type."""
    skip = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)
    seen: set[int] = set()
    stack = [root]
    sizes: Counter[str] = Counter()
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        sizes[type(obj).__name__] += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return sizes


class GcPauses:
    """Records how long each cyclic garbage collection stopped the process."""

    def __init__(self) -> None:
        self.pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._started = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses[info["generation"]].append(time.perf_counter() - self._started)

    def stop(self) -> dict[str, float]:
        """Stop recording; the counts, total and longest pause."""
        gc.callbacks.remove(self._on_gc)
        every = [p for pauses in self.pauses.values() for p in pauses]
        return {
            "collections": len(every),
            "full": len(self.pauses[2]),
            "total": sum(every),
            "longest": max(every, default=0.0),
        }


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, int(share * len(ordered) + 0.999999) - 1)]


# ---------------------------------------------------------------------------- the session files


class Writer:
    """Makes realistic conversations and records them through ``JsonlSessionStore``."""

    def __init__(self, directory: Path, messages: int, seed: int = SEED) -> None:
        from botkit.sessions import JsonlSessionStore

        self.store = JsonlSessionStore(directory)
        self.messages = messages
        self.rng = random.Random(seed)
        words = [self.rng.choice(WORDS) for _ in range(400_000)]
        self.corpus = " ".join(words)
        self.tool_pairs = 0

    def text(self, low: int = 200, high: int = 600) -> str:
        """A slice of the corpus, ``low``-``high`` characters, trimmed to whole words."""
        size = self.rng.randint(low, high)
        start = self.corpus.index(" ", self.rng.randrange(len(self.corpus) - high - 50)) + 1
        return self.corpus[start : start + size].strip()

    def tool_id(self) -> str:
        """An id shaped like the API's."""
        return "toolu_01" + "".join(self.rng.choices(string.ascii_letters + string.digits, k=22))

    async def write_user(self, user_id: int) -> None:
        """Record ``self.messages`` messages for ``user_id``: exchanges, some with a tool call."""
        from botkit.sessions import SessionEntry
        from botkit.types import Message, TextBlock, ToolResultBlock, ToolUseBlock, Usage

        rng = self.rng
        update_id = user_id * 1_000
        written = 0

        async def record(message: Message, **meta: Any) -> None:
            nonlocal written
            await self.store.append(SessionEntry.of(user_id, message, **meta))
            written += 1

        def usage() -> Usage:
            return Usage(
                input_tokens=rng.randint(20, 400),
                output_tokens=rng.randint(60, 250),
                cache_creation_input_tokens=rng.randint(100, 600),
                cache_read_input_tokens=rng.randint(3_000, 9_000),
            )

        def answer() -> Message:
            return Message(role="assistant", content=[TextBlock(text=self.text())], usage=usage())

        while written < self.messages:
            update_id += 1
            await record(Message.user_text(self.text()), update_id=update_id)
            if self.messages - written >= 3 and rng.random() < 0.3:
                call = ToolUseBlock(
                    id=self.tool_id(),
                    name=rng.choice(["lookup_order", "search_catalog", "check_shipping"]),
                    input={"query": self.text(20, 60), "max_results": rng.randint(1, 5)},
                )
                preface = TextBlock(text=self.text(30, 90))
                asked = Message(role="assistant", content=[preface, call], usage=usage())
                await record(asked, model=MODEL, stop_reason="tool_use")
                result = ToolResultBlock(tool_use_id=call.id, content=self.text(200, 800))
                await record(Message(role="user", content=[result]))
                self.tool_pairs += 1
            await record(answer(), model=MODEL, stop_reason="end_turn")


async def write_sessions(directory: Path, users: int, messages: int) -> tuple[int, float]:
    """Write every user's file; the number of tool call/result pairs and the seconds taken."""
    started = time.perf_counter()
    writer = Writer(directory, messages)
    for user_id in range(1, users + 1):
        await writer.write_user(user_id)
    return writer.tool_pairs, time.perf_counter() - started


# ---------------------------------------------------------------------------- the child process


def plain_load(path: Path) -> list[dict[str, Any]]:
    """The yardstick: what a user would write to load a JSONL file."""
    with path.open("rb") as f:
        return [json.loads(line) for line in f if line.strip()]


async def child(directory: Path, users: int, max_contexts: int, messages: int) -> dict[str, Any]:
    """Touch every user's context in a fresh process; memory and timing figures."""
    gc.collect()
    bare_rss = proc_status_mb("VmRSS")
    from botkit import Bot, Settings
    from botkit.agent.context import ContextManager
    from botkit.sessions import JsonlSessionStore, read_session_file

    sessions = JsonlSessionStore(directory)
    settings = Settings(_env_file=None, sessions_dir=directory)
    bot = Bot(settings=settings, sessions=sessions, max_contexts=max_contexts)
    gc.collect()
    baseline = proc_status_mb("VmRSS")

    rebuild: list[float] = []
    collector = GcPauses()
    for user_id in range(1, users + 1):
        started = time.perf_counter()
        context = await bot.context_for(user_id)
        rebuild.append(time.perf_counter() - started)
        if len(context) != messages:
            raise RuntimeError(f"user {user_id}: {len(context)} messages, not {messages}")
    del context
    pauses = collector.stop()
    gc.collect()
    after, peak = proc_status_mb("VmRSS"), proc_status_mb("VmHWM")
    resident = len(bot.contexts)

    # What one resident context holds (the most recent users are all resident).
    recent = range(users - min(SAMPLE, resident) + 1, users + 1)
    contexts = [await bot.context_for(u) for u in recent]
    sizes: Counter[str] = Counter()
    for c in contexts:
        sizes.update(deep_size([c._messages, c._turn_starts, c.usage_by_model]))
    chars = [_content_chars(c.messages) for c in contexts]
    objects = [_objects(c.messages) for c in contexts]
    sampled = len(contexts)
    del contexts

    # The yardstick, then botkit's rebuild broken into its steps, on the same files.
    plain = _timed(plain_load, (sessions.path_for(u) for u in range(1, users + 1)))
    sample = range(1, min(SAMPLE, users) + 1)
    read = _timed(read_session_file, (sessions.path_for(u) for u in sample))
    files = [read_session_file(sessions.path_for(u)) for u in sample]
    restore = _timed(
        lambda f: ContextManager.restore(0, f.entries, on_append=sessions.append), files
    )
    del files
    return {
        "bare_rss": bare_rss,
        "baseline": baseline,
        "after": after,
        "peak": peak,
        "resident": resident,
        "rebuild": rebuild,
        "plain": plain,
        "read": read,
        "restore": restore,
        "gc": pauses,
        "context_bytes": {kind: size / sampled for kind, size in sizes.items()},
        "sampled": sampled,
        "content_chars": statistics.mean(chars),
        "objects": statistics.mean(objects),
    }


def _timed(fn: Callable[[Any], object], items: Iterable[Any]) -> list[float]:
    """Seconds each ``fn(item)`` took."""
    times = []
    for item in items:
        started = time.perf_counter()
        fn(item)
        times.append(time.perf_counter() - started)
    return times


def _content_chars(messages: list[Any]) -> int:
    """Characters of text and tool results in ``messages``."""
    from botkit.types import TextBlock, ToolResultBlock

    total = 0
    for message in messages:
        for block in message.content:
            if isinstance(block, TextBlock):
                total += len(block.text)
            elif isinstance(block, ToolResultBlock):
                total += len(block.content)
    return total


def _objects(messages: list[Any]) -> int:
    """Python objects with a ``__dict__`` (pydantic models) per context: messages, blocks, usage."""
    count = 0
    for message in messages:
        count += 1 + len(message.content) + (message.usage is not None)
    return count


def run_child(directory: Path, users: int, max_contexts: int, messages: int) -> dict[str, Any]:
    """Run :func:`child` in a fresh interpreter and return its figures."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        str(directory),
        "--users",
        str(users),
        "--messages",
        str(messages),
        "--max-contexts",
        str(max_contexts),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


# ---------------------------------------------------------------------------- the report


def ms(values: list[float]) -> str:
    """Median and p99 in milliseconds."""
    middle, tail = statistics.median(values) * 1e3, percentile(values, 0.99) * 1e3
    return f"median {middle:.3f} ms, p99 {tail:.3f} ms"


def report_run(label: str, figures: dict[str, Any], users: int) -> None:
    """Print one child's memory, rebuild-time and garbage-collection figures."""
    delta = figures["after"] - figures["baseline"]
    resident = figures["resident"]
    pauses = figures["gc"]
    print(f"{label}:")
    print(
        f"  RSS: {figures['baseline']:.1f} MB baseline (botkit imported, Bot built; the bare "
        f"interpreter {figures['bare_rss']:.1f} MB), {figures['after']:.1f} MB after touching "
        f"{users:,} users (delta {delta:+.1f} MB); peak (VmHWM) {figures['peak']:.1f} MB"
    )
    print(
        f"  resident contexts: {resident:,} ({delta * 1024 / max(resident, 1):.1f} KB of RSS "
        "delta per resident context)"
    )
    print(f"  cold context_for (rebuild from the file): {ms(figures['rebuild'])}")
    print(
        f"  garbage collection while touching: {pauses['collections']:,} collections "
        f"({pauses['full']} full), {pauses['total']:.2f} s in all, longest pause "
        f"{pauses['longest'] * 1e3:.0f} ms"
    )


def report_context(figures: dict[str, Any], messages: int, file_kb: float) -> None:
    """Print what one resident context is made of."""
    sizes: dict[str, float] = figures["context_bytes"]
    total = sum(sizes.values())
    chars = figures["content_chars"]
    print(
        f"one context in memory (deep size, mean of {figures['sampled']} resident ones): "
        f"{total / 1024:.1f} KB, {total / messages:.0f} B per message, "
        f"{figures['objects']:.0f} pydantic objects; its content is {chars / 1024:.1f} K "
        f"characters (memory = {total / chars:.1f}x the content), its file {file_kb:.1f} KB"
    )
    parts = sorted(sizes.items(), key=lambda item: -item[1])
    if len(parts) > 7:
        parts = [*parts[:6], ("other", sum(size for _, size in parts[6:]))]
    shown = ", ".join(f"{kind} {size / 1024:.1f} KB ({size / total:.0%})" for kind, size in parts)
    print(f"  by type: {shown}")
    print(
        "  (set: each pydantic model's __pydantic_fields_set__; dict: each model's __dict__; "
        "str: texts, ids, names)"
    )


def main(args: argparse.Namespace) -> int:
    from botkit import BotOptions

    max_contexts = args.max_contexts or BotOptions().max_contexts
    cpus = len(os.sched_getaffinity(0))
    print(f"bench/memory.py: {args.users:,} users x {args.messages}-message contexts")
    print(
        f"machine: {cpus} CPUs, {platform.system()} {platform.machine()}, Python "
        f"{platform.python_version()}, pydantic {version('pydantic')}, orjson "
        f"{version('orjson')}, load average {os.getloadavg()[0]:.2f}"
    )
    with tempfile.TemporaryDirectory(prefix="botkit-bench-memory-") as tmp:
        directory = Path(tmp) / "sessions"
        tool_pairs, seconds = asyncio.run(write_sessions(directory, args.users, args.messages))
        os.sync()  # no write-back of the new files while the children read them
        disk = sum(p.stat().st_size for p in directory.glob("*.jsonl"))
        file_kb = disk / args.users / 1024
        print(
            f"session files: written with JsonlSessionStore in {seconds:.1f} s (not timed); "
            f"{disk / 2**20:.0f} MB, {file_kb:.1f} KB per user; texts 200-600 chars, "
            f"{tool_pairs / args.users:.1f} tool_use/tool_result pairs per user, usage on "
            "every answer"
        )
        evicting = run_child(directory, args.users, max_contexts, args.messages)
        keeping = run_child(directory, args.users, NO_EVICTION, args.messages)

    print(
        "each run: a fresh process, Bot(max_contexts=N) with JsonlSessionStore, then "
        "await bot.context_for(uid) once per user, every call a cold rebuild"
    )
    report_run(f"with eviction (max_contexts={max_contexts:,})", evicting, args.users)
    report_run(f"without eviction (max_contexts={NO_EVICTION:,})", keeping, args.users)
    print(f"eviction saves {keeping['after'] - evicting['after']:.1f} MB of RSS")
    report_context(evicting, args.messages, file_kb)

    plain, rebuild = evicting["plain"], evicting["rebuild"]
    ratio = statistics.median(rebuild) / statistics.median(plain)
    print(
        f"yardstick: open the file, json.loads each line into a dict (same process, same "
        f"page-cached files): {ms(plain)}"
    )
    print(f"botkit cold context_for / yardstick (medians): {ratio:.1f}x")
    print(
        f"botkit's rebuild in steps (first {min(SAMPLE, args.users)} users, medians): "
        f"read_session_file (read, orjson, pydantic validation) "
        f"{statistics.median(evicting['read']) * 1e3:.3f} ms, ContextManager.restore "
        f"(Messages from the entries) {statistics.median(evicting['restore']) * 1e3:.3f} ms"
    )
    ok = evicting["after"] <= args.target_mb
    print(
        f"RESULT memory: RSS {evicting['after']:.1f} MB after {args.users:,} users with "
        f"max_contexts={max_contexts:,} (target <= {args.target_mb:.0f} MB) "
        f"{'PASS' if ok else 'FAIL'}; cold rebuild median {statistics.median(rebuild) * 1e3:.2f}"
        f" ms = {ratio:.1f}x plain json.loads"
    )
    return 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=10_000, help="users with a session file")
    parser.add_argument("--messages", type=int, default=40, help="messages per user")
    parser.add_argument(
        "--max-contexts", type=int, default=0, help="Bot max_contexts (default: BotOptions')"
    )
    parser.add_argument("--target-mb", type=float, default=TARGET_MB, help="RSS target (MB)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.child is not None:
        result = asyncio.run(
            child(arguments.child, arguments.users, arguments.max_contexts, arguments.messages)
        )
        print(json.dumps(result))
        sys.exit(0)
    sys.exit(main(arguments))
