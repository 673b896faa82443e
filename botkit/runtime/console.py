"""``python -m botkit console``: talk to a bot in the terminal, same loop, tools and sessions.

A person at a terminal gets the rich view: Markdown rendered as it streams in, each tool call
one dim line (name, arguments, result), errors in red. Scripts and pipes get the plain view
(``--plain``, and whenever stdout is not a terminal): ``bot>``/``tool>`` lines, nothing else.
Each line goes through the bot's own ``handle``, so ``/commands`` behave as in Telegram, and
the MCP servers and the key check are the ones serving uses. ``/voice_note PATH`` sends a local
audio file as a voice note (heard as on Telegram, with BOTKIT_TRANSCRIBE_URL); spoken answers
are saved as ``.ogg`` files in the sessions folder's ``spoken/``, and their path shown.
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
import re
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from botkit.agent.events import ToolEnd
from botkit.bot import Bot
from botkit.errors import LLMAuthError
from botkit.messengers.base import (
    Attachment,
    Button,
    ButtonPress,
    Incoming,
    OutgoingFile,
    Reply,
)
from botkit.messengers.markdown import html_to_plain, markdown_to_html
from botkit.runtime.setup import check_llm, mcp_tools
from botkit.types import ToolResultBlock, ToolUseBlock

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live

__all__ = [
    "ConsoleMessenger",
    "ConsoleUpdate",
    "ConsoleView",
    "PlainView",
    "RichView",
    "run_console",
    "tables_as_text",
    "tool_line",
]

PROMPT = "you> "
BOT = "bot> "
TOOL = "tool> "
ERROR = "error> "
MAX_ARGUMENTS = 120
"""Characters of a tool call's arguments shown before cutting with "…"."""
MAX_RESULT = 200
"""Characters of a tool's result shown before cutting with "…"."""
AUTH_FAILURE_TEXT = "Anthropic rejected ANTHROPIC_API_KEY: set a valid key and start again."
VOICE_NOTE = "/voice_note"
"""The console's own command: ``/voice_note PATH`` sends a local audio file as a voice note."""
PRESS = re.compile(r"/press\s+(\d+)\s*$")
"""``/press 2``: press the second button of the last message that has buttons."""
PRESS_HINT = "(/press N presses one)"
NO_BUTTON = "No button {number} here: {count} under the last message with buttons."


def tables_as_text(markdown: str) -> str:
    """``markdown`` with each table drawn as aligned text (as a rich message shows one)."""
    from markdown_it import MarkdownIt

    lines = markdown.split("\n")
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    tables = [t.map for t in tokens if t.type == "table_open" and t.map is not None]
    for start, end in reversed(tables):
        drawn = html_to_plain(markdown_to_html("\n".join(lines[start:end])))
        lines[start:end] = drawn.split("\n")
    return "\n".join(lines)


def tool_line(call: ToolUseBlock, result: ToolResultBlock) -> str:
    """``name(arg=value, …) → result`` on one line, both sides cut to a readable length."""
    arguments = ", ".join(f"{k}={_json(v)}" for k, v in call.input.items())
    outcome = ("error: " if result.is_error else "") + result.content
    return f"{call.name}({_cut(arguments, MAX_ARGUMENTS)}) → {_cut(outcome, MAX_RESULT)}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _cut(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class ConsoleView(Protocol):
    """How the console shows a turn."""

    def text(self, delta: str) -> None:
        """Show a piece of the streamed answer."""
        ...

    def end_text(self) -> None:
        """The streamed answer (or a part of it, before a tool call) is complete."""
        ...

    def reply(self, text: str, *, error: bool) -> None:
        """Show a whole reply; ``error`` when it tells the user something failed."""
        ...

    def tool(self, call: ToolUseBlock, result: ToolResultBlock) -> None:
        """Show one finished tool call."""
        ...

    def notice(self, text: str) -> None:
        """Show an operator's warning."""
        ...

    def prompt(self) -> None:
        """Invite the next line."""
        ...


class PlainView:
    """Plain lines for scripts and pipes: ``bot>``, ``tool>``, ``error>``."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._open = False  # a streamed line is not yet ended

    def text(self, delta: str) -> None:
        """Print ``delta`` at once, after ``bot>`` on a new answer."""
        if not self._open:
            delta = delta.lstrip()  # the blank line between two calls' texts
            if not delta:
                return
            self.out.write(BOT)
            self._open = True
        self._write(delta)

    def end_text(self) -> None:
        """End the streamed line."""
        if self._open:
            self._open = False
            self._write("\n")

    def reply(self, text: str, *, error: bool) -> None:
        """One ``bot>`` line (tables drawn as aligned text)."""
        self.end_text()
        self._write(f"{BOT}{tables_as_text(text)}\n")

    def tool(self, call: ToolUseBlock, result: ToolResultBlock) -> None:
        """One ``tool>`` line."""
        self.end_text()
        self._write(f"{TOOL}{tool_line(call, result)}\n")

    def notice(self, text: str) -> None:
        """One ``error>`` line."""
        self.end_text()
        self._write(f"{ERROR}{text}\n")

    def prompt(self) -> None:
        """``you>``, without a newline."""
        self._write(PROMPT)

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


class RichView:
    """Markdown rendered for the terminal as it streams; tool calls dim, errors red."""

    def __init__(self, console: Console | None = None) -> None:
        from rich.console import Console

        self.console = console or Console(highlight=False)
        self._live: Live | None = None
        self._segment = ""

    def text(self, delta: str) -> None:
        """Re-render the answer so far as Markdown."""
        from rich.live import Live
        from rich.markdown import Markdown

        self._segment = (self._segment + delta).lstrip()
        if not self._segment:
            return
        if self._live is None:
            self._live = Live(
                console=self.console, refresh_per_second=12, vertical_overflow="visible"
            )
            self._live.start()
        self._live.update(Markdown(self._segment))

    def end_text(self) -> None:
        """Leave the rendered answer on the screen."""
        from rich.markdown import Markdown

        live, self._live = self._live, None
        if live is not None:
            live.update(Markdown(self._segment), refresh=True)
            live.stop()
        self._segment = ""

    def reply(self, text: str, *, error: bool) -> None:
        """Markdown, or red text for an error."""
        from rich.markdown import Markdown
        from rich.text import Text

        self.end_text()
        self.console.print(Text(text, style="red") if error else Markdown(text))

    def tool(self, call: ToolUseBlock, result: ToolResultBlock) -> None:
        """One dim line (red when the tool failed)."""
        from rich.text import Text

        self.end_text()
        style = "red" if result.is_error else "dim"
        self.console.print(Text(f"⚙ {tool_line(call, result)}", style=style))

    def notice(self, text: str) -> None:
        """A bold red line."""
        from rich.text import Text

        self.end_text()
        self.console.print(Text(text, style="bold red"))

    def prompt(self) -> None:
        """A bold ``you>``."""
        self.console.print(PROMPT, style="bold", end="")


class ConsoleDraft:
    """Shows the answer as it streams in."""

    def __init__(self, view: ConsoleView, on_finish: Callable[[str], None]) -> None:
        self.view = view
        self.on_finish = on_finish
        self.text = ""
        self.draft_id = 0  # one chat, one turn at a time: nothing to tell apart

    async def start(self) -> None:
        """Nothing to show before the first word."""

    async def update(self, delta: str) -> None:
        """Show ``delta`` at once."""
        self.text += delta
        self.view.text(delta)

    async def status(self, note: str | None) -> None:
        """Nothing: the console shows each tool call itself as it ends."""

    async def finish(self) -> None:
        """End the streamed answer."""
        self.view.end_text()
        self.on_finish(self.text)


@dataclass(frozen=True, slots=True)
class ConsoleUpdate:
    """A line typed at the terminal, as a held message keeps it (``Incoming.raw``)."""

    update_id: int
    user_id: int
    text: str

    def model_dump(self, **_: Any) -> dict[str, Any]:
        """The line as a raw update, read back by ``ConsoleMessenger.read_update``."""
        return {"update_id": self.update_id, "console": {"user": self.user_id, "text": self.text}}


class ConsoleMessenger:
    """A messenger whose chat is this terminal."""

    def __init__(
        self,
        view: ConsoleView,
        error_texts: frozenset[str] = frozenset(),
        spoken_dir: Path | None = None,
    ) -> None:
        self.view = view
        self.error_texts = error_texts
        """Replies shown as errors (the bot's "something went wrong" texts)."""
        self.spoken_dir = spoken_dir
        """Where spoken answers (voice notes) are saved; ``None``: only said."""
        self._streamed: str | None = None
        self._message_ids = 0
        self._shown = ""
        self.buttons: tuple[int, tuple[Button, ...]] | None = None
        """The last message with buttons: its id, and its buttons in the order numbered."""
        self._local_files: dict[str, Path] = {}

    def attach_local(self, path: Path, kind: str = "voice") -> Attachment:
        """A local file as an attachment this messenger can ``download``."""
        file_id = f"local:{len(self._local_files)}"
        self._local_files[file_id] = path
        data = path.read_bytes()
        mime = "audio/ogg" if data.startswith(b"OggS") else mimetypes.guess_type(path.name)[0]
        return Attachment(file_id, kind, path.name, mime, len(data), _seconds(data))

    async def send_text(
        self, chat_id: int, text: str, *, thread_id: int | None = None, reply_to: int | None = None
    ) -> None:
        """Show a reply, unless it was just streamed (it ends what was streamed)."""
        streamed, self._streamed = self._streamed, None
        if streamed is not None and streamed.strip().endswith(text.strip()):
            return
        self.view.reply(text, error=text in self.error_texts)

    async def send_typing(self, chat_id: int, *, thread_id: int | None = None) -> None:
        """Nothing to show: the streamed text is the sign of life."""

    async def send_file(
        self, chat_id: int, file: OutgoingFile, *, thread_id: int | None = None
    ) -> None:
        """A terminal shows no pictures: say what was sent; a voice note is saved too."""
        if file.as_voice and self.spoken_dir is not None:
            self.spoken_dir.mkdir(parents=True, exist_ok=True)
            path = self.spoken_dir / file.filename
            path.write_bytes(file.data)
            self.view.notice(f"spoken answer ({file.duration} s) saved to {path}")
            return
        self.view.notice(f"sent {file.filename} ({file.mime_type}, {len(file.data)} bytes)")

    async def download(self, file_id: str) -> bytes | None:
        """A local file sent with ``/voice_note``; nothing else comes from a terminal."""
        path = self._local_files.get(file_id)
        return path.read_bytes() if path is not None else None

    async def is_chat_admin(self, chat_id: int, user_id: int) -> bool:
        """The console is a private chat: there is no group to administer."""
        return False

    def draft(self, message: Incoming) -> ConsoleDraft:
        """A draft that shows the answer as it goes."""
        return ConsoleDraft(self.view, self._remember_streamed)

    async def send_reply(
        self,
        chat_id: int,
        reply: Reply,
        *,
        thread_id: int | None = None,
        reply_to: int | None = None,
    ) -> int | None:
        """Show the reply's text, its buttons numbered for ``/press N``; the message's id."""
        self._message_ids += 1
        await self._show(self._message_ids, reply)
        return self._message_ids

    async def _show(self, message_id: int, reply: Reply) -> None:
        buttons = tuple(button for row in reply.buttons for button in row)
        if not buttons:
            self._shown = reply.text
            await self.send_text(0, reply.text)
            return
        self.buttons = (message_id, buttons)
        self._shown = reply.text
        labels = "  ".join(f"[{n}] {b.text}" for n, b in enumerate(buttons, start=1))
        await self.send_text(0, f"{reply.text}\n{labels}  {PRESS_HINT}")

    async def edit_reply(self, chat_id: int, message_id: int, reply: Reply) -> None:
        """Show the new text (nothing in a terminal can be edited); buttons it no longer has
        cannot be pressed."""
        if self.buttons is not None and self.buttons[0] == message_id:
            self.buttons = None
        await self._show(message_id, reply)

    async def answer_press(self, press_id: str, text: str | None = None) -> None:
        """Show the press's notice, unless the message it edited says it already."""
        if text and text not in self._shown:
            self.view.reply(text, error=False)

    def press(self, number: int, user_id: int) -> ButtonPress | None:
        """A press of button ``number`` (from 1) of the last message with buttons."""
        if self.buttons is None or not 1 <= number <= len(self.buttons[1]):
            count = 0 if self.buttons is None else len(self.buttons[1])
            self.view.notice(NO_BUTTON.format(number=number, count=count))
            return None
        message_id, buttons = self.buttons
        return ButtonPress(
            press_id=f"console-{time.time_ns()}",
            user_id=user_id,
            chat_id=user_id,
            message_id=message_id,
            data=buttons[number - 1].data,
        )

    async def read_update(self, raw: dict[str, Any]) -> Incoming | None:
        """A held line read back (a message that waited behind an approval)."""
        line = raw.get("console")
        if not isinstance(line, dict):
            return None
        return _incoming(int(raw["update_id"]), int(line["user"]), str(line["text"]))

    def _remember_streamed(self, text: str) -> None:
        self._streamed = text


async def run_console(
    bot: Bot,
    *,
    user_id: int,
    stdin: TextIO | None = None,
    view: ConsoleView | None = None,
) -> None:
    """Read lines from ``stdin`` and answer each as a turn of ``user_id``; EOF ends.

    The MCP servers of BOTKIT_MCP_CONFIG are connected and the Anthropic key is checked
    first, as when serving on Telegram.
    """
    source = stdin or sys.stdin
    view = view or PlainView(sys.stdout)
    messenger = ConsoleMessenger(
        view,
        frozenset({bot.options.error_text, bot.options.overloaded_text}),
        spoken_dir=bot.settings.sessions_dir / "spoken",
    )
    bot.messenger = messenger
    bot.options = replace(bot.options, help_text=bot.options.console_help_text)  # text only
    bot.hooks.on("tool_end", _show_tool(view))
    try:
        async with mcp_tools(bot):
            await bot.on_start()
            await check_llm(bot, _notice(view, AUTH_FAILURE_TEXT))
            await _read_loop(bot, messenger, source, user_id)
    finally:
        view.end_text()
        await bot.aclose()


async def _read_loop(bot: Bot, messenger: ConsoleMessenger, source: TextIO, user_id: int) -> None:
    """One turn per non-empty line until EOF."""
    while True:
        if source.isatty():
            messenger.view.prompt()
        line = await asyncio.to_thread(source.readline)
        if not line:
            return
        text = line.strip()
        if not text:
            continue
        pressed = PRESS.match(text)
        if pressed is not None:
            press = messenger.press(int(pressed[1]), user_id)
            if press is not None:
                await bot.turns.handle_press(press, messenger)
        else:
            # negative and unique: never a Telegram update id
            message = _incoming(-time.time_ns(), user_id, text)
            if text.split(maxsplit=1)[0] == VOICE_NOTE:
                voiced = _voice_note(messenger, message)
                if voiced is None:
                    continue
                message = voiced
            await bot.turns.handle_safely(message, messenger)
        await bot.approvals.settled()  # a decided approval's turn answers before the next line


def _incoming(update_id: int, user_id: int, text: str) -> Incoming:
    """A terminal line as a private message of ``user_id``."""
    return Incoming(
        update_id=update_id,
        user_id=user_id,
        chat_id=user_id,
        text=text,
        date=datetime.now(UTC),
        raw=ConsoleUpdate(update_id, user_id, text),
    )


def _voice_note(messenger: ConsoleMessenger, message: Incoming) -> Incoming | None:
    """``/voice_note PATH`` as the voice note Telegram would deliver; ``None`` (and a notice)
    when the file cannot be read."""
    path = Path(message.command_args).expanduser()
    try:
        attachment = messenger.attach_local(path)
    except OSError as e:
        messenger.view.notice(f"cannot read {path}: {e.strerror or e}")
        return None
    return replace(message, text="", kind="voice", attachments=(attachment,))


def _seconds(data: bytes) -> int | None:
    """An OGG/Opus file's length in whole seconds (``None`` for other audio)."""
    from botkit.voice.audio import ogg_opus_seconds

    seconds = ogg_opus_seconds(data)
    return None if seconds is None else max(1, round(seconds))


def _show_tool(view: ConsoleView) -> Callable[[ToolEnd], Awaitable[None]]:
    async def show(event: ToolEnd) -> None:
        view.tool(event.call, event.result)

    return show


def _notice(view: ConsoleView, text: str) -> Callable[[LLMAuthError], Awaitable[None]]:
    async def notice(error: LLMAuthError) -> None:
        view.notice(text)

    return notice
