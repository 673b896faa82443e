"""Shared plumbing of the benchmarks: the fakes and the driver here, each bot in a child process.

The process running a benchmark script hosts the fakes (``FakeTelegramServer`` and
``FakeAnthropicServer`` from ``botkit.testing``, on loopback) and the driver, which injects
user messages into the fake Bot API and reads the fakes' request records (``time.monotonic``
stamps taken on arrival) to time a round. Every bot under test, botkit or a yardstick, runs
as ``python bench/_common.py child '<spec as JSON>'`` in its own process, so on a 2-core
machine it gets a core of its own and the fakes' CPU never counts against it.

Every contender gets its own pair of fakes. All contenders start together (importing aiogram
and anthropic takes seconds); an idle bot sits in a long poll and costs no CPU, so rounds
can then alternate between contenders, which spreads the machine's noise over all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import itertools
import json
import math
import os
import platform
import pstats
import signal
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from botkit.config import DEFAULT_MODEL
from botkit.testing import FakeAnthropicServer, FakeReply, FakeRequest, FakeTelegramServer
from botkit.testing.anthropic import Responder

if TYPE_CHECKING:
    from botkit import Settings

TOKEN = "123456:BENCH-TOKEN"
API_KEY = "bench-key"
MODEL = DEFAULT_MODEL  # today's model: every answer starts with a thinking block
MAX_TOKENS = 1024
CHILD = Path(__file__).resolve()
STARTUP_TIMEOUT = 180.0  # seconds for a bot process to import and start polling (a loaded machine)
STOP_TIMEOUT = 30.0

BOTKIT = "botkit"
AIOGRAM_ECHO = "aiogram-echo"
AIOGRAM_LLM = "aiogram-llm"
AIOGRAM_STREAM = "aiogram-stream"
KINDS = (BOTKIT, AIOGRAM_ECHO, AIOGRAM_LLM, AIOGRAM_STREAM)
DRAFT_INTERVAL = 0.3
"""Seconds between two drafts of the hand-written streaming bot (botkit's default too)."""

PARAGRAPH = (
    "Here is a short answer, written the way a helpful assistant writes one. **Streaming** "
    "lets you read the first words while the rest is still being written, which matters "
    "most for long answers that take several seconds to generate in full.\n\n"
    "- First, the model reads your message and the conversation so far.\n"
    "- Then it writes the answer a few tokens at a time, and each piece is sent on at once.\n"
    "- Finally the whole answer arrives as one formatted message.\n\n"
    "If you want more detail on any of these steps, just ask and I will explain it with an "
    "example or two. Have a nice day!"
)
"""The body of every benchmark answer: a paragraph and a list, about 600 characters, which the
fake Messages API streams in about 30 text deltas of a few tokens each, as the real API does."""


def paragraph_responder(request: FakeRequest) -> FakeReply:
    """A realistic answer that starts by naming the question (so the reply can be matched)."""
    return FakeReply.text(f"Answering {request.last_user_text()}. {PARAGRAPH}")


# ---------------------------------------------------------------------------- what to run


@dataclass(frozen=True)
class BotSpec:
    """What a child process runs; sent to it as JSON on its command line."""

    kind: str
    telegram_url: str = ""
    anthropic_url: str = ""
    workdir: str = ""
    allowed_users: tuple[int, ...] = ()
    max_concurrent_turns: int = 64
    """botkit: ``Settings.max_concurrent_turns`` (also bounds its LLM calls)."""
    stream_replies: bool = False
    """botkit: ``Settings.stream_replies``."""
    tasks_limit: int | None = None
    """aiogram: ``Dispatcher.start_polling(tasks_concurrency_limit=...)``; ``None``: unbounded."""
    assistant: bool = False
    """botkit: run the default assistant (``python -m botkit``: system prompt and two tools);
    the yardsticks then send the same system prompt and tool definitions."""
    profile: str | None = None
    """A file to write a cProfile of the measured rounds to (SIGUSR1 starts, SIGUSR2 stops)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables the child gets besides this process's (e.g. ``OTEL_*``)."""
    paced: bool = False
    """botkit: pace sends as its settings say (``HIGH_VOLUME``: paid broadcasts at 1,000 a
    second) instead of ``FloodControl.unlimited()``."""


HIGH_VOLUME = {
    "BOTKIT_PAID_BROADCAST": "true",
    "BOTKIT_GLOBAL_RATE": "1000",
    "BOTKIT_OPERATORS_CHAT": "-1009990001",
    "BOTKIT_PLANS": json.dumps(
        [
            {
                "id": "pro",
                "title": "Pro",
                "description": "More a day",
                "stars": 50,
                "daily_tokens": 1_000_000,
            }
        ]
    ),
}
"""#52's configuration: a high-volume bot's paid broadcasts, and handoff (an operators' chat)
and plans configured but idle (approvals and memory are on by default)."""


def botkit_settings(spec: BotSpec) -> Settings:
    """botkit's settings for ``spec``: the defaults, except what the benchmark sets."""
    from botkit import Settings

    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        telegram_bot_token=TOKEN,
        anthropic_api_key=API_KEY,
        telegram_api_base=spec.telegram_url or None,
        anthropic_base_url=spec.anthropic_url or None,
        model=MODEL,
        max_tokens=MAX_TOKENS,
        sessions_dir=Path(spec.workdir or ".") / "sessions",
        allowed_users=frozenset(spec.allowed_users),
        max_concurrent_turns=spec.max_concurrent_turns,
        stream_replies=spec.stream_replies,
    )


def _pacing(spec: BotSpec) -> str:
    if not spec.paced:
        return (
            "exception: flood=FloodControl.unlimited() (paid broadcasts: no pacing to 30 "
            "msg/s, which would measure Telegram's limit, not botkit)"
        )
    env = spec.env  # the child's settings: this process does not read them
    idle = ["approvals", "memory"]
    if "BOTKIT_OPERATORS_CHAT" in env:
        idle.append("handoff (BOTKIT_OPERATORS_CHAT)")
    if "BOTKIT_PLANS" in env:
        idle.append("a plan (BOTKIT_PLANS)")
    return (
        f"BOTKIT_PAID_BROADCAST={env.get('BOTKIT_PAID_BROADCAST', 'false')}, "
        f"BOTKIT_GLOBAL_RATE={env.get('BOTKIT_GLOBAL_RATE', '30')} (sends paced as a "
        f"high-volume bot's); configured but idle: {', '.join(idle)}"
    )


def describe(spec: BotSpec) -> str:
    """One line saying how a contender is configured."""
    if spec.kind == BOTKIT:
        settings = botkit_settings(spec)
        store = "PostgreSQL" if settings.database_url else "SQLite"
        what = "the default assistant (prompt, 2 tools)" if spec.assistant else "a plain Bot"
        return (
            f"botkit: {what}, max_concurrent_turns={settings.max_concurrent_turns}, "
            f"stream_replies={'on' if settings.stream_replies else 'off'}, rich_messages="
            f"{spec.env.get('BOTKIT_RICH_MESSAGES', settings.rich_messages)}, access="
            f"{settings.access} ({store} user store, the benchmark's users allowlisted), "
            f"JSONL sessions and inbox journal on disk, JSON log lines ({settings.log_level}) "
            f"to a file; {_pacing(spec)}"
        )
    limit = "unbounded" if spec.tasks_limit is None else str(spec.tasks_limit)
    what = {
        AIOGRAM_ECHO: "handler answers the text (message.answer)",
        AIOGRAM_LLM: "handler: one AsyncAnthropic.messages.create, then message.answer",
        AIOGRAM_STREAM: (
            "handler: AsyncAnthropic.messages.stream, bot.send_message_draft at most every "
            f"{DRAFT_INTERVAL} s while text arrives, then message.answer"
        ),
    }[spec.kind]
    prompt = "; the default assistant's system prompt and tools" if spec.assistant else ""
    return (
        f"aiogram {version('aiogram')} Dispatcher.start_polling (handle_as_tasks, "
        f"tasks_concurrency_limit={limit}); {what}; SDK on DefaultAioHttpClient{prompt}; "
        "logging.basicConfig(INFO) to a file"
    )


def machine_line() -> str:
    """The machine and the versions, for the header of every report."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"machine: {cpus} CPUs, {platform.system()} {platform.machine()}, Python "
        f"{platform.python_version()}, aiogram {version('aiogram')}, anthropic "
        f"{version('anthropic')}, aiohttp {version('aiohttp')}, load average "
        f"{os.getloadavg()[0]:.2f}"
    )


def disk_probe(folder: Path, files: int = 100) -> float:
    """µs of CPU this process spends creating a file in ``folder`` and appending two lines to
    it, as a new user's session file takes: on a VM's disk it ranges from a few µs to a few
    hundred from one minute to the next, a cost botkit pays a new user and the yardsticks
    never do (they keep nothing)."""
    probe = folder / f"disk-probe-{time.monotonic_ns()}"
    probe.mkdir(parents=True)
    started = time.process_time()
    for number in range(files):
        fd = os.open(probe / f"{number}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, b"x" * 300 + b"\n")
        os.write(fd, b"y" * 600 + b"\n")
        os.close(fd)
    spent = time.process_time() - started
    for path in probe.iterdir():
        path.unlink()
    probe.rmdir()
    return spent / files * 1e6


def paired(ours: Sequence[float], theirs: Sequence[float]) -> list[float]:
    """Round by round, ours over theirs: rounds alternate, so each pair shares the machine's
    mood of that minute, which the ratio of two medians does not."""
    return [a / b for a, b in zip(ours, theirs, strict=True)]


def load_line() -> str:
    """The load average now: other work on the machine skews wall times, less so ratios."""
    one, five, _ = os.getloadavg()
    return f"load average at the end: {one:.2f} (1 min), {five:.2f} (5 min)"


# ---------------------------------------------------------------------------- the driver side


REPLIES = frozenset({"sendmessage", "sendrichmessage"})
"""The methods a reply arrives by (rich replies, botkit's default, or HTML ones)."""
DRAFTS = frozenset({"sendmessagedraft", "sendrichmessagedraft"})


@dataclass
class Round:
    """One measured round: messages in, replies out."""

    expected: int
    replies: int
    started: float
    """``time.monotonic()`` just before the first message was injected."""
    seconds: float
    """From just before the first injection to the arrival of the last reply at the fake."""
    bot_cpu: float
    """CPU seconds the bot process used during the round."""
    fakes_cpu: float
    """CPU seconds this process (fakes and driver) used during the round."""
    bot_kernel: float = 0.0
    """Of ``bot_cpu``, the seconds in the kernel (sockets, files: a new user's session file)."""
    missing: list[str] = field(default_factory=list)
    llm_calls: tuple[float, float] = (math.nan, math.nan)
    """When the first and the last LLM call of the round reached the fake (from ``started``)."""
    replies_at: tuple[float, float] = (math.nan, math.nan)
    """When the first and the last reply reached the fake (from ``started``)."""
    drafts: int = 0
    """``sendMessageDraft`` requests the fake answered during the round."""
    fakes_lag: float = 0.0
    """The longest the fakes' event loop was late during the round (s): when the fakes fall
    behind, streams arrive slower than a real service would send them."""

    @property
    def complete(self) -> bool:
        """Whether every message got its reply."""
        return self.replies >= self.expected and not self.missing

    @property
    def cpu_ms_per_turn(self) -> float:
        """Bot CPU per turn (ms): divided by the messages sent, one turn each, never by the
        replies (a bot that split one answer in two would look half as costly)."""
        return self.bot_cpu / max(self.expected, 1) * 1000

    def timeline(self) -> str:
        """When the LLM calls and the replies happened, relative to the first injection."""
        (c0, c1), (r0, r1) = self.llm_calls, self.replies_at
        drafts = f", {self.drafts / self.expected:.1f} drafts a turn" if self.drafts else ""
        return f"LLM calls at +{c0:.2f}..+{c1:.2f} s, replies at +{r0:.2f}..+{r1:.2f} s{drafts}"

    def cpu_note(self) -> str:
        """Where the CPU went, as shares of the wall time."""
        return (
            f"bot CPU {self.bot_cpu:.2f} s ({self.bot_cpu / self.seconds:.0%} of a core, "
            f"{self.bot_kernel:.2f} s in the kernel), "
            f"fakes CPU {self.fakes_cpu:.2f} s ({self.fakes_cpu / self.seconds:.0%}, "
            f"their loop at most {self.fakes_lag * 1000:.0f} ms late)"
        )


class BotUnderTest:
    """A contender: its own fakes here and its bot in a child process."""

    def __init__(
        self,
        name: str,
        spec: BotSpec,
        workdir: Path,
        *,
        latency: float = 0.0,
        chunk_delay: float = 0.0,
        responder: Responder | None = None,
    ) -> None:
        self.name = name
        self.spec = spec
        self.workdir = workdir
        self.telegram = FakeTelegramServer(token=TOKEN)
        self.claude = FakeAnthropicServer(
            latency=latency, chunk_delay=chunk_delay, responder=responder
        )
        self.process: asyncio.subprocess.Process | None = None
        self.log_path = workdir / f"{name}.log"
        self._log_file: io.BufferedWriter | None = None
        self._profiling = False
        self.sample_to: Path | None = None
        """Where py-spy writes its samples of this bot during the measured rounds (``--sample``)."""
        self.sample_files: list[Path] = []
        self._sampler: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        """Start the fakes and the bot process (waiting for its first poll is :meth:`ready`)."""
        await self.telegram.start()
        await self.claude.start()
        self.workdir.mkdir(parents=True, exist_ok=True)
        spec = BotSpec(
            **{
                **asdict(self.spec),
                "telegram_url": self.telegram.base_url,
                "anthropic_url": self.claude.base_url,
                "workdir": str(self.workdir),
            }
        )
        self._log_file = self._open_log()
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(CHILD),
            "child",
            json.dumps(asdict(spec)),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **spec.env},
        )

    def _open_log(self) -> io.BufferedWriter:
        return open(self.log_path, "wb")

    async def ready(self) -> None:
        """Wait until the bot polls the fake Bot API."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not self.telegram.requests_for("getUpdates"):
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start polling in {STARTUP_TIMEOUT}s")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        """Stop the bot (SIGTERM: running turns finish), then the fakes."""
        process = self.process
        if process is not None and process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
            except TimeoutError:
                process.kill()
                await process.wait()
        if self._log_file is not None:
            self._log_file.close()
        await self.telegram.stop()
        await self.claude.stop()

    def _check_alive(self) -> None:
        if self.process is not None and self.process.returncode is not None:
            raise RuntimeError(
                f"{self.name} exited with status {self.process.returncode}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 30) -> str:
        """The end of the bot's log, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the bot process so far (Linux ``/proc``)."""
        user, kernel = self.cpu_split()
        return user + kernel

    def cpu_split(self) -> tuple[float, float]:
        """User and system CPU seconds of the bot process so far, apart."""
        if self.process is None:
            return math.nan, math.nan
        try:
            stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        except OSError:
            return math.nan, math.nan
        fields = stat.rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick

    def profile(self, on: bool) -> None:
        """Start or stop the child's profiler (only when its spec asks for one)."""
        if self.spec.profile and self.process is not None and on != self._profiling:
            self.process.send_signal(signal.SIGUSR1 if on else signal.SIGUSR2)
            self._profiling = on

    async def sample(self, on: bool) -> None:
        """Start or stop sampling the bot with py-spy (only when ``sample_to`` is set)."""
        if self.sample_to is None or self.process is None:
            return
        if on and self._sampler is None:
            out = self.sample_to.with_suffix(f".{len(self.sample_files)}.txt")
            self.sample_files.append(out)
            self._sampler = await asyncio.create_subprocess_exec(
                *py_spy_command(self.process.pid, out),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            await asyncio.sleep(0.3)  # py-spy attaches before the round starts
        elif not on and self._sampler is not None:
            self._sampler.send_signal(signal.SIGINT)  # py-spy writes its file and exits
            await self._sampler.wait()
            self._sampler = None

    async def run_round(
        self,
        messages: Sequence[tuple[int, str]],
        *,
        timeout: float,  # noqa: ASYNC109
    ) -> Round:
        """Inject ``messages`` (user id, text) at once; wait until each got its reply."""
        telegram = self.telegram
        already = len(telegram.sent_messages())
        first_request = len(telegram.requests)
        first_call = len(self.claude.requests)
        target = already + len(messages)
        with fakes_without_gc_pauses():
            (bot_user, bot_kernel), fakes_cpu = self.cpu_split(), time.process_time()
            started = time.monotonic()
            for user_id, text in messages:
                telegram.send_text(user_id, text)
            deadline = started + timeout
            lag = 0.0
            while len(telegram.sent_messages()) < target and time.monotonic() < deadline:
                self._check_alive()
                asked = time.monotonic()
                await asyncio.sleep(0.002)
                lag = max(lag, time.monotonic() - asked - 0.002)
            noticed = time.monotonic()
            user, kernel = self.cpu_split()
            bot_user, bot_kernel = user - bot_user, kernel - bot_kernel
            fakes_cpu = time.process_time() - fakes_cpu
        sends = [
            request
            for request in telegram.requests[first_request:]
            if request.method.lower() in REPLIES and request.error_code is None
        ]
        drafts = [
            request
            for request in telegram.requests[first_request:]
            if request.method.lower() in DRAFTS and request.error_code is None
        ]
        finished = max((request.at for request in sends), default=noticed)
        calls = [request.at - started for request in self.claude.requests[first_call:]]
        sent = [request.at - started for request in sends]
        return Round(
            expected=len(messages),
            replies=len(telegram.sent_messages()) - already,
            started=started,
            seconds=finished - started,
            bot_cpu=bot_user + bot_kernel,
            bot_kernel=bot_kernel,
            fakes_cpu=fakes_cpu,
            fakes_lag=lag,
            missing=self._unanswered(messages),
            llm_calls=(min(calls), max(calls)) if calls else (math.nan, math.nan),
            replies_at=(min(sent), max(sent)) if sent else (math.nan, math.nan),
            drafts=len(drafts),
        )

    def _unanswered(self, messages: Iterable[tuple[int, str]]) -> list[str]:
        """Messages whose text came back in no reply to their chat (private chats)."""
        missing = []
        for user_id, text in messages:
            replies = self.telegram.sent_messages(user_id)
            if not any(text in reply.plain_text for reply in replies):
                missing.append(f"{user_id}: {text!r}")
        return missing


@contextlib.asynccontextmanager
async def contenders(bots: Sequence[BotUnderTest]) -> AsyncIterator[None]:
    """Start every contender at once, wait until all poll; stop them all on exit."""
    try:
        for bot in bots:
            await bot.start()
        await asyncio.gather(*(bot.ready() for bot in bots))
        yield
    finally:
        await asyncio.gather(*(bot.stop() for bot in bots), return_exceptions=True)


Side = TypeVar("Side")
Result = TypeVar("Result")


async def pair_of_rounds(
    sides: Sequence[Side],
    number: int,
    one_round: Callable[[Side], Awaitable[Result]],
    one_at_a_time: bool,
) -> list[tuple[Side, Result]]:
    """Pair ``number``'s rounds, one a side, in the order they start (the first side first in
    odd pairs, the other first in even ones): all at once, so that they share the machine's
    state, or one after the other."""
    order = list(sides) if number % 2 == 0 else list(sides)[::-1]
    if one_at_a_time:
        return [(side, await one_round(side)) for side in order]
    results = await asyncio.gather(*(one_round(side) for side in order))
    return list(zip(order, results, strict=True))


def user_ids(first: int, count: int) -> list[int]:
    """``count`` consecutive user ids from ``first``."""
    return list(range(first, first + count))


def median(values: Sequence[float]) -> float:
    """The median (NaN when empty)."""
    return statistics.median(values) if values else math.nan


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile: the smallest value with at least ``share`` of them at or below."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    """``--profile`` and ``--profile-file``: run one more botkit, under cProfile."""
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also run botkit under cProfile (measured rounds only) and print its hotspots",
    )
    parser.add_argument(
        "--profile-file", type=Path, help="keep the cProfile data in this file (implies --profile)"
    )


def profile_path(args: argparse.Namespace, workdir: Path) -> Path | None:
    """Where the profiled botkit writes its cProfile data; ``None`` when not profiling."""
    if args.profile_file is not None:
        return Path(args.profile_file).resolve()
    return workdir / "botkit.prof" if args.profile else None


SAMPLE_RATE = 250
"""Samples per second py-spy takes of the sampled bot (``--sample``)."""


def add_sample_argument(parser: argparse.ArgumentParser) -> None:
    """``--sample``: sample the measured botkit with py-spy and print where its CPU goes."""
    parser.add_argument(
        "--sample",
        action="store_true",
        help="sample botkit with py-spy during the measured rounds (one more botkit process) "
        "and print its CPU per turn by component",
    )
    parser.add_argument(
        "--sample-file",
        type=Path,
        help="keep py-spy's raw stacks in PATH.N.txt, one file a round (implies --sample)",
    )


def sample_path(args: argparse.Namespace, workdir: Path) -> Path | None:
    """Where py-spy's stacks go (one file a round); ``None`` when not sampling."""
    if args.sample_file is not None:
        return Path(args.sample_file).resolve()
    return workdir / "py-spy" if args.sample else None


@contextlib.contextmanager
def fakes_without_gc_pauses() -> Iterator[None]:
    """Keep this process's garbage collector (the fakes', the driver's) out of a round.

    The fakes keep a record of every request; a full collection over those records took
    250-600 ms and, landing mid-round, held back every stream and answer of whichever
    contender was being measured, which the real services never do. Collected between rounds.
    """
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def py_spy_command(pid: int, out: Path) -> list[str]:
    """py-spy recording ``pid`` into ``out`` (raw stacks), without pausing it."""
    binary = Path(sys.executable).with_name("py-spy")
    return [
        str(binary) if binary.exists() else "py-spy",
        "record",
        "--pid",
        str(pid),
        "--format",
        "raw",
        "--full-filenames",
        "--nolineno",
        "--nonblocking",
        "--gil",
        "--rate",
        str(SAMPLE_RATE),
        "--output",
        str(out),
    ]


COMPONENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "rendering (Markdown to Telegram HTML)",
        ("/botkit/messengers/markdown.py", "/markdown_it/", "/mdurl/"),
    ),
    ("logging", ("/structlog/", "/botkit/log.py", "/logging/")),
    ("session append (JSONL)", ("/botkit/sessions/",)),
    ("update journal (inbox)", ("/botkit/runtime/inbox.py",)),
    (
        "access (gates, user records)",
        ("/botkit/access.py", "/botkit/stores/", "/aiosqlite/", "/sqlite3/"),
    ),
    ("LLM client (anthropic SDK, httpx2, botkit.llm)", ("/anthropic/", "/httpx2/", "/botkit/llm/")),
    ("Telegram client (aiogram, botkit.messengers)", ("/aiogram/", "/botkit/messengers/")),
    ("turn pipeline, agent loop, context, scheduler", ("/botkit/",)),
)
"""Where a sample's CPU goes: the first component (innermost frame first) a frame's file is in."""
OTHER = "other: event loop, sockets, aiohttp callbacks"


def component_of(stack: str) -> str:
    """The component of one sampled stack (``frame;frame;...`` outermost first)."""
    for frame in reversed(stack.split(";")):
        for name, parts in COMPONENTS:
            if any(part in frame for part in parts):
                return name
    return OTHER


def sample_counts(files: Iterable[Path]) -> dict[str, int]:
    """Samples per component in py-spy's raw files."""
    counts: dict[str, int] = {}
    for path in files:
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if stack and count.isdigit():
                name = component_of(stack)
                counts[name] = counts.get(name, 0) + int(count)
    return counts


def sample_breakdown(columns: dict[str, tuple[Sequence[Path], float]]) -> str:
    """A table of sampled bots' CPU by component, in ms per turn and shares.

    ``columns``: per bot, its py-spy files and its measured CPU per turn (ms), which the
    shares of its samples are scaled to.
    """
    counts = {name: sample_counts(files) for name, (files, _) in columns.items()}
    header = f"  {'component':<52}" + "".join(f"{name:>24}" for name in columns)
    lines = [header]
    for component in [name for name, _ in COMPONENTS] + [OTHER]:
        cells = []
        for name, (_, cpu_ms) in columns.items():
            total = sum(counts[name].values())
            share = counts[name].get(component, 0) / total if total else math.nan
            cells.append(f"{share * cpu_ms:8.2f} ms ({share:6.1%})")
        lines.append(f"  {component[:52]:<52}" + "".join(f"{cell:>24}" for cell in cells))
    totals = [
        f"{sum(counts[n].values()):>6} samples, {cpu:5.2f} ms" for n, (_, cpu) in columns.items()
    ]
    lines.append(
        f"  {'total (samples at ' + str(SAMPLE_RATE) + '/s holding the GIL)':<52}"
        + "".join(f"{t:>24}" for t in totals)
    )
    return "\n".join(lines)


STEPS: tuple[tuple[str, int, tuple[tuple[str, str], ...]], ...] = (
    ("the turn's own task (TurnPipeline.handle)", 0, (("turns.py", "handle"),)),
    ("gates: handle_start, authorize", 1, (("access.py", "authorize"), ("access.py", "redeem"))),
    ("user record", 1, (("access.py", "user_record"),)),
    (
        "handoff checks",
        1,
        (("service.py", "take_operator_message"), ("service.py", "relay_if_handed_off")),
    ),
    ("budget", 1, (("access.py", "over_budget"),)),
    ("files and quotas", 1, (("turns.py", "_read_files"),)),
    ("build_extra, build_tools", 1, (("bot.py", "build_extra"), ("bot.py", "build_tools"))),
    (
        "prompt parts (build_prompt, plugins', notes)",
        1,
        (("turns.py", "named_parts"), ("plugins.py", "turn_notes")),
    ),
    ("context_for", 1, (("turns.py", "context_for"),)),
    ("approvals check", 1, (("service.py", "holds"),)),
    ("the answer, waiting on the loop's task (_answer)", 1, (("turns.py", "_answer"),)),
    ("draft updates", 2, (("telegram.py", "update"), ("telegram.py", "finish"))),
    ("end of turn (_end_turn)", 1, (("turns.py", "_end_turn"),)),
    ("the reply: Markdown to HTML, sendMessage (_reply)", 2, (("turns.py", "_reply"),)),
    ("the tool loop's task (_run_loop)", 0, (("turns.py", "_run_loop"),)),
    ("the LLM call: request, stream (AnthropicLLM.complete)", 1, (("anthropic.py", "complete"),)),
    ("session lines (JsonlSessionStore.append)", 0, (("jsonl.py", "append"),)),
    ("log lines (rendering)", 0, (("log.py", "_json"), ("log.py", "__call__"))),
)
QUEUED_STEPS: tuple[tuple[str, int, tuple[tuple[str, str], ...]], ...] = (
    ("a queued job (Worker.run)", 0, (("worker.py", "run"),)),
    ("the update's claim, if not taken at fetch", 1, (("worker.py", "_own_claim"),)),
    ("burst: the jobs queued behind it", 1, (("worker.py", "_burst"),)),
    ("the turn (Worker._run_turn)", 1, (("worker.py", "_run_turn"),)),
    ("fetch a job, with its claim (procrastinate)", 0, (("queue.py", "fetch_job"),)),
    ("end a job, then fetch the next", 0, (("queue.py", "finish_job"),)),
    ("session lines (PostgreSQL)", 0, (("postgres.py", "append"),)),
)
"""The steps a worker adds in the queued runtime (``scaleout.py --profile``), besides STEPS."""
IDLE = ("select.epoll", "select.poll", "select.select")
"""cProfile entries that are the event loop waiting, not CPU: left out of a process's total."""
"""The steps of a turn as ``step_breakdown`` names them: label, depth, and the functions
(file, name) whose cumulative cProfile time is the step's (coroutines: the time their frames
ran, not the time they waited). The tool loop runs in a task of its own, beside the turn's;
session and log lines are written from both."""


def step_breakdown(
    path: Path,
    turns: int,
    cpu_ms: float,
    steps: Sequence[tuple[str, int, tuple[tuple[str, str], ...]]] = STEPS,
) -> str:
    """A turn's CPU by step, from a cProfile file of ``turns`` turns: µs per turn as profiled,
    and scaled to ``cpu_ms`` (the unprofiled bot's CPU per turn). The process's total leaves
    out the event loop's waits (``IDLE``): cProfile counts wall time."""
    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    total = sum(
        tt
        for (_, _, name), (_, _, tt, _, _) in stats.items()
        if not any(idle in name for idle in IDLE)
    )
    cumulative: dict[tuple[str, str], float] = {}
    for (file, _, name), (_, _, _, ct, _) in stats.items():
        key = (Path(file).name, name)
        cumulative[key] = cumulative.get(key, 0.0) + ct
    scale = cpu_ms * 1000 / (total / turns * 1e6) if total else math.nan
    lines = [f"  {'step':<52}{'profiled µs/turn':>18}{'scaled µs/turn':>16}"]
    for label, depth, functions in steps:
        seconds = sum(cumulative.get(f, 0.0) for f in functions)
        per_turn = seconds / turns * 1e6
        lines.append(f"  {'  ' * depth + label:<52}{per_turn:>18,.0f}{per_turn * scale:>16,.0f}")
    lines.append(
        f"  {'all of the process (profiled)':<52}{total / turns * 1e6:>18,.0f}"
        f"{cpu_ms * 1000:>16,.0f}"
    )
    return "\n".join(lines)


def profile_summary(path: Path, top: int = 25) -> str:
    """Top ``top`` functions of a cProfile file by cumulative and by own time."""
    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out).strip_dirs()
    for key in ("cumulative", "tottime"):
        out.write(f"\n--- top {top} by {key} ---\n")
        stats.sort_stats(key).print_stats(top)
    return out.getvalue()


# ---------------------------------------------------------------------------- the bot side


def _answer_text(message: Any) -> str:
    """The text of an SDK ``Message`` (its text blocks joined)."""
    return "".join(block.text for block in message.content if block.type == "text")


async def _run_botkit(spec: BotSpec, stop: asyncio.Event) -> None:
    from botkit import Bot
    from botkit.assistant import default_bot
    from botkit.log import configure_logging
    from botkit.messengers.flood import FloodControl
    from botkit.runtime.telegram import messenger_for, serve

    settings = botkit_settings(spec)
    configure_logging(settings.log_level, secrets=[TOKEN, API_KEY])
    bot = default_bot(settings) if spec.assistant else Bot(settings=settings)
    messenger = messenger_for(settings, flood=None if spec.paced else FloodControl.unlimited())
    await serve(bot, stop, messenger=messenger, freeze_startup=True)  # as run_bot does


def _assistant_params() -> dict[str, Any]:
    """The default assistant's system prompt and tools, as a hand-written bot would send them."""
    from botkit.assistant import SYSTEM_PROMPT, current_time, roll_dice

    tools = [t.definition.model_dump() for t in (current_time, roll_dice)]
    return {"system": SYSTEM_PROMPT, "tools": tools}


async def _run_aiogram(spec: BotSpec, stop: asyncio.Event) -> None:
    import logging

    import anthropic
    from aiogram import Bot, Dispatcher
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer
    from aiogram.types import Message

    logging.basicConfig(level=logging.INFO)
    session = AiohttpSession(api=TelegramAPIServer.from_base(spec.telegram_url))
    bot = Bot(TOKEN, session=session)
    client = anthropic.AsyncAnthropic(
        api_key=API_KEY, base_url=spec.anthropic_url, http_client=anthropic.DefaultAioHttpClient()
    )
    extra = _assistant_params() if spec.assistant else {}
    dp = Dispatcher()
    draft_ids = itertools.count(1)

    if spec.kind == AIOGRAM_ECHO:

        @dp.message()
        async def echo(message: Message) -> None:
            await message.answer(message.text or "")

    elif spec.kind == AIOGRAM_LLM:

        @dp.message()
        async def ask(message: Message) -> None:
            reply = await client.messages.create(
                model=MODEL,
                max_tokens=MAX_TOKENS,
                messages=[{"role": "user", "content": message.text or ""}],
                **extra,
            )
            await message.answer(_answer_text(reply))

    else:

        @dp.message()
        async def stream(message: Message) -> None:
            draft_id, text, shown_at = next(draft_ids), "", 0.0
            async with client.messages.stream(
                model=MODEL,
                max_tokens=MAX_TOKENS,
                messages=[{"role": "user", "content": message.text or ""}],
                **extra,
            ) as answer:
                async for delta in answer.text_stream:
                    text += delta
                    if time.monotonic() - shown_at >= DRAFT_INTERVAL:
                        shown_at = time.monotonic()
                        await bot.send_message_draft(message.chat.id, draft_id, text=text)
            await message.answer(text)

    polling = asyncio.create_task(
        dp.start_polling(bot, handle_signals=False, tasks_concurrency_limit=spec.tasks_limit)
    )
    await stop.wait()
    await dp.stop_polling()
    await polling
    await client.close()


def child_main(spec: BotSpec) -> None:
    """Run the bot of ``spec`` until SIGTERM; SIGUSR1/SIGUSR2 start/stop the profiler."""
    profiler = cProfile.Profile() if spec.profile else None

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        if profiler is not None:
            loop.add_signal_handler(signal.SIGUSR1, profiler.enable)
            loop.add_signal_handler(signal.SIGUSR2, profiler.disable)
        run = _run_botkit if spec.kind == BOTKIT else _run_aiogram
        await run(spec, stop)

    asyncio.run(main())
    if profiler is not None and spec.profile:
        profiler.disable()
        profiler.dump_stats(spec.profile)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Run one bot under test (used by the benches).")
    parser.add_argument("role", choices=["child"])
    parser.add_argument("spec", help="a BotSpec as JSON")
    raw = json.loads(parser.parse_args().spec)
    raw["allowed_users"] = tuple(raw["allowed_users"])
    if raw.get("kind") not in KINDS:
        parser.error(f"unknown kind {raw.get('kind')!r}; expected one of {', '.join(KINDS)}")
    child_main(BotSpec(**raw))
