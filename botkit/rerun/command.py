"""``python -m botkit replay SESSION --rerun``: the command line around ``rerun_session``."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from structlog.testing import capture_logs

from botkit.errors import BotkitError, SessionError
from botkit.rerun.compare import RerunReport
from botkit.rerun.output import as_html, as_json_lines, as_lines, summary_table
from botkit.rerun.runner import LLMMode, rerun_session
from botkit.sessions import SessionFile
from botkit.terminal import printable

if TYPE_CHECKING:
    from botkit.bot import Bot

__all__ = ["RerunOptions", "rerun_command"]

EXIT_SAME = 0
EXIT_CHANGED = 1
EXIT_UNREADABLE = 2

SESSIONS_AT_ONCE = 4
"""Sessions re-run at the same time when a folder (or ``--all``) is given."""


@dataclass(frozen=True, slots=True)
class RerunOptions:
    """What the command line asked for."""

    target: str | None = None
    llm: LLMMode = "live"
    free: bool = False
    model: str | None = None
    as_json: bool = False
    report: Path | None = None
    all_sessions: bool = False
    judge: str | None = None
    feedback: str | None = None
    """Only the turns whose replies got this reaction (``negative``: 👎)."""


def rerun_command(session: str | None, options: RerunOptions, out: TextIO | None = None) -> int:
    """Re-run one session, a folder of them, or all; print the comparison; the exit status:
    0 nothing changed, 1 something did, 2 a session or the bot could not be loaded."""
    out = out or sys.stdout
    try:
        names = _session_names(session, options.all_sessions)
        loaded = [_read(name) for name in names] if len(names) > 1 else [_read_one(names[0])]
    except BotkitError as e:
        print(f"botkit: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    # The bot re-runs on a scratch folder: its tools (memory, reminders, invites, payments,
    # handoffs, files) write there, never into the stores the served bot reads.
    with tempfile.TemporaryDirectory(prefix="botkit-rerun-") as scratch:
        try:
            bot = _scratch_bot(options, Path(scratch))
        except BotkitError as e:
            print(f"botkit: {e}", file=sys.stderr)
            return EXIT_UNREADABLE
        with capture_logs():  # the pipeline's log lines would mix into the comparison
            results = asyncio.run(_rerun_all(bot, loaded, options))
    if len(names) == 1:
        return _print_one(results[0][1], options, SafeOut(out))
    return _print_many(results, options, SafeOut(out))


def _scratch_bot(options: RerunOptions, scratch: Path) -> Bot:
    """The bot to re-run, its every store in ``scratch``; a ConfigError when it sets its own
    sessions folder or database (a re-run would write into them)."""
    from botkit.errors import ConfigError
    from botkit.rerun.scratch import scratch_environment
    from botkit.targets import load_bot

    with scratch_environment(scratch):
        bot = load_bot(options.target)
    settings = bot.settings
    if settings.database_url is not None or settings.sessions_dir.resolve() != scratch.resolve():
        raise ConfigError(
            "the bot sets its own sessions folder or database, so a re-run would write into "
            "the stores it serves from: build its Settings from the environment to re-run it"
        )
    if options.llm == "live" or options.judge:
        bot.llm  # noqa: B018 - a missing API key is a ConfigError now, not in every turn
    return bot


class SafeOut:
    """An output whose text has its control characters escaped (it holds what users wrote)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, text: str) -> int:
        """Write ``text`` made printable."""
        return self.out.write(printable(text))


def _session_names(session: str | None, everything: bool) -> list[str]:
    from botkit.replay import all_sessions, session_files

    if everything:
        names = all_sessions()
    elif session is None:
        raise SessionError("name a session (a file, a user id or a folder), or pass --all")
    elif Path(session).is_dir():
        names = [str(path) for path in session_files(Path(session))]
    else:
        return [session]
    if not names:
        raise SessionError(f"no sessions in {session or 'the sessions store'}")
    return names


def _read_one(name: str) -> tuple[str, SessionFile | str]:
    """The session, or a SessionError: a single session that cannot be read stops the command."""
    from botkit.replay import read_session

    source, file = read_session(name)
    _report_problems(file)
    return source, file


def _read(name: str) -> tuple[str, SessionFile | str]:
    """The session, or why it cannot be read (one of many: the others still run)."""
    try:
        return _read_one(name)
    except SessionError as e:
        return name, str(e)


def _report_problems(file: SessionFile) -> None:
    for number, reason in file.problems:
        print(f"line {number}: {reason} (skipped)", file=sys.stderr)


async def _rerun_all(
    bot: Bot, loaded: Sequence[tuple[str, SessionFile | str]], options: RerunOptions
) -> list[tuple[str, RerunReport | str]]:
    """Each session re-run (a few at once), in the order given, with a progress bar."""
    from botkit.rerun.scratch import QuietMessenger
    from botkit.runtime.setup import mcp_tools

    bot.messenger = QuietMessenger()  # a tool that sends through the bot sends nowhere
    gate = asyncio.Semaphore(SESSIONS_AT_ONCE)
    progress = _Progress(len(loaded)) if len(loaded) > 1 else None

    async def one(source: str, file: SessionFile | str) -> tuple[str, RerunReport | str]:
        if isinstance(file, str):
            result: RerunReport | str = file
        else:
            async with gate:
                result = await rerun_session(
                    bot,
                    file,
                    source=source,
                    llm=options.llm,
                    free=options.free,
                    model=options.model,
                    judge=options.judge,
                    feedback=options.feedback,
                )
        if progress is not None:
            progress.step()
        return source, result

    try:
        async with mcp_tools(bot):
            await bot.on_start()
            return list(await asyncio.gather(*(one(s, f) for s, f in loaded)))
    finally:
        if progress is not None:
            progress.end()
        await bot.aclose()


def _print_one(report: RerunReport | str, options: RerunOptions, out: SafeOut) -> int:
    assert not isinstance(report, str)
    lines = as_json_lines(report) if options.as_json else as_lines(report)
    out.write("".join(line + "\n" for line in lines))
    if options.report is not None:
        options.report.write_text(as_html([report]), encoding="utf-8")
    return EXIT_CHANGED if report.changed else EXIT_SAME


def _print_many(
    results: list[tuple[str, RerunReport | str]], options: RerunOptions, out: SafeOut
) -> int:
    reports = [report for _, report in results if not isinstance(report, str)]
    for source, report in results:
        if isinstance(report, str):
            if options.as_json:
                out.write(_json_problem(source, report) + "\n")
        elif options.as_json:
            out.write("".join(line + "\n" for line in as_json_lines(report)))
        else:
            out.write("".join(f"{source}: {turn.summary()}\n" for turn in report.changed))
    if not options.as_json:
        out.write("".join(line + "\n" for line in summary_table(results)))
        turns = sum(len(r.turns) for r in reports)
        changed = sum(len(r.changed) for r in reports)
        out.write(f"{len(results)} sessions, {turns} turns, {changed} changed\n")
    if options.report is not None:
        options.report.write_text(as_html(reports), encoding="utf-8")
    if len(reports) < len(results):
        return EXIT_UNREADABLE
    return EXIT_CHANGED if any(r.changed for r in reports) else EXIT_SAME


def _json_problem(source: str, reason: str) -> str:
    import orjson

    return orjson.dumps({"type": "unreadable", "session": source, "reason": reason}).decode()


class _Progress:
    """``[#####     ] 5/10 sessions`` on stderr, redrawn in place (only on a terminal)."""

    WIDTH = 30

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.shown = sys.stderr.isatty()

    def step(self) -> None:
        """One more session done."""
        self.done += 1
        if self.shown:
            filled = self.WIDTH * self.done // self.total
            bar = "#" * filled + " " * (self.WIDTH - filled)
            sys.stderr.write(f"\r[{bar}] {self.done}/{self.total} sessions")
            sys.stderr.flush()

    def end(self) -> None:
        """Leave the bar's line."""
        if self.shown:
            sys.stderr.write("\n")
