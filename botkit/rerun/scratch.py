"""What a re-run runs on instead of the served bot's: a scratch session store in memory, a
messenger that sends nothing, the bot's steps with another model, and no charging."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from botkit.access import Access
from botkit.choices.turn import ModelFixed, TurnChoices
from botkit.commands import ButtonHandler, Command
from botkit.config import Settings
from botkit.llm.base import LLM
from botkit.messengers.base import Draft, Incoming, OutgoingFile, Reply
from botkit.options import BotOptions
from botkit.plugins import Plugin
from botkit.rerun.recorded import Entry
from botkit.sessions import SessionFile
from botkit.tools import Tool, ToolRegistry
from botkit.turns import BotSteps
from botkit.types import Usage
from botkit.voice.service import Voice

__all__ = [
    "QuietMessenger",
    "RerunSteps",
    "ScratchStore",
    "UnchargedAccess",
    "scratch_environment",
]

_STORES = ("BOTKIT_SESSIONS_DIR", "BOTKIT_DATABASE_PATH", "BOTKIT_DATABASE_URL")


@contextmanager
def scratch_environment(folder: Path) -> Iterator[None]:
    """While the block runs, ``Settings()`` (the environment and ``.env``) puts every store in
    ``folder``: the sessions, the SQLite file, memory, media; no PostgreSQL."""
    saved = {name: os.environ.get(name) for name in _STORES}
    os.environ.update(
        BOTKIT_SESSIONS_DIR=str(folder), BOTKIT_DATABASE_PATH=str(folder / "botkit.db")
    )
    os.environ["BOTKIT_DATABASE_URL"] = ""  # set (to nothing), so .env's value is not read
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class ScratchStore:
    """A session store in memory: the history a re-run starts from, then what it appends."""

    def __init__(self, entries: Sequence[Entry] = ()) -> None:
        self.entries: list[Entry] = list(entries)

    async def append(self, entry: Entry) -> None:
        """Keep ``entry`` after the others."""
        self.entries.append(entry)

    async def load(self, key: int | str) -> SessionFile:
        """Everything held (a re-run has one conversation)."""
        return SessionFile(entries=list(self.entries))

    async def close(self) -> None:
        """Nothing to release."""


class QuietMessenger:
    """A messenger that delivers nothing: what a re-run's turn would send is kept here."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.files: list[OutgoingFile] = []

    async def send_text(
        self, chat_id: int, text: str, *, thread_id: int | None = None, reply_to: int | None = None
    ) -> None:
        """Keep ``text``."""
        self.texts.append(text)

    async def send_typing(self, chat_id: int, *, thread_id: int | None = None) -> None:
        """Nothing to show."""

    async def send_file(
        self, chat_id: int, file: OutgoingFile, *, thread_id: int | None = None
    ) -> None:
        """Keep ``file``."""
        self.files.append(file)

    async def download(self, file_id: str) -> bytes | None:
        """Nothing can be fetched: a recorded turn's files are already in its message."""
        return None

    async def is_chat_admin(self, chat_id: int, user_id: int) -> bool:
        """Nobody is, here."""
        return False

    def draft(self, message: Incoming) -> Draft | None:
        """No drafts."""
        return None

    async def send_reply(
        self,
        chat_id: int,
        reply: Reply,
        *,
        thread_id: int | None = None,
        reply_to: int | None = None,
    ) -> int | None:
        """Keep the reply's text."""
        self.texts.append(reply.text)
        return None

    async def edit_reply(self, chat_id: int, message_id: int, reply: Reply) -> None:
        """Nothing to edit."""

    async def answer_press(self, press_id: str, text: str | None = None) -> None:
        """No presses."""


class UnchargedAccess(Access):
    """The bot's gates, but a re-run's calls are charged to nobody's budget or usage."""

    async def charge(self, user_id: int, usage: Usage, model: str = "") -> None:
        """Charge nothing: a re-run is not the user's spending."""


class RerunSteps:
    """A bot's own steps and configuration, answered by another ``LLM`` (and model)."""

    def __init__(self, bot: BotSteps, llm: LLM, model: str | None) -> None:
        self._bot = bot
        self._llm = llm
        self.settings: Settings = bot.settings
        self.options: BotOptions = bot.options
        self.commands: dict[str, Command] = bot.commands
        self.buttons: dict[str, ButtonHandler] = bot.buttons
        self.hooks = bot.hooks
        self.payments = bot.payments
        self.choices: TurnChoices = ModelFixed(bot.choices, model) if model else bot.choices
        """The conversation's choices; a re-run's ``model`` wins over its chosen one."""
        self.plugins: list[Plugin] = bot.plugins
        self.model_override: str | None = model or bot.model_override
        self.approvals = bot.approvals
        """The bot's: a re-run turn whose call waits for approval ends without a reply."""
        self.voice: Voice | None = None
        """A re-run neither listens nor speaks (nothing is sent, nothing should be billed)."""

    @property
    def llm(self) -> LLM:
        """The re-run's model: the bot's own, or the recorded answers."""
        return self._llm

    async def handle_start(self, message: Incoming, payload: str) -> str | None:
        """As the bot says."""
        return await self._bot.handle_start(message, payload)

    async def authorize(self, message: Incoming) -> str | None:
        """As the bot says."""
        return await self._bot.authorize(message)

    async def build_extra(self, message: Incoming) -> Any:
        """The bot's own step."""
        return await self._bot.build_extra(message)

    async def build_tools(self, message: Incoming) -> ToolRegistry | Sequence[Tool]:
        """The bot's own step."""
        return await self._bot.build_tools(message)

    async def build_prompt(self, message: Incoming) -> str:
        """The bot's own step."""
        return await self._bot.build_prompt(message)

    async def transcribe(self, audio: bytes, mime: str) -> str | None:
        """As the bot says."""
        return await self._bot.transcribe(audio, mime)

    @property
    def can_transcribe(self) -> bool:
        """As the bot says."""
        return self._bot.can_transcribe
