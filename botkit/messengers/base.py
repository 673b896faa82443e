"""What the bot needs from a messenger, in messenger-neutral terms."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from botkit.stores.base import UserRecord

__all__ = ["Draft", "Incoming", "Messenger"]


@dataclass(frozen=True, slots=True)
class Incoming:
    """One user message, as the turn cycle sees it."""

    update_id: int
    """The messenger's id of the update; used to confirm and to deduplicate."""
    user_id: int
    chat_id: int
    text: str
    date: datetime
    chat_type: str = "private"
    username: str | None = None
    first_name: str | None = None
    images: tuple[bytes, ...] = ()
    """Photos attached to the message, as downloaded bytes."""
    kind: str = "text"
    """``text`` or ``photo`` (answered), or what else it carried: ``voice``, ``sticker``, …"""
    raw: Any = field(default=None, compare=False, repr=False)
    """The messenger's own update object, for bots that need more."""
    user: UserRecord | None = field(default=None, compare=False)
    """Who sent it, as the user store knows them; filled in once ``authorize`` admitted it."""

    @property
    def command(self) -> str | None:
        """``start`` for ``/start payload``; ``None`` when the text is not a command."""
        if not self.text.startswith("/"):
            return None
        head = self.text.split(maxsplit=1)[0][1:]
        return head.split("@", 1)[0].lower() or None

    @property
    def command_args(self) -> str:
        """The text after the command word, e.g. the ``/start`` payload."""
        parts = self.text.split(maxsplit=1)
        return parts[1].strip() if len(parts) > 1 else ""


class Draft(Protocol):
    """A reply shown to the user while it is being written."""

    text: str
    """Everything streamed into the draft so far."""

    async def update(self, delta: str) -> None:
        """Add ``delta`` to the draft (the messenger decides how often to show it)."""
        ...

    async def finish(self) -> None:
        """Stop showing updates; after this, the final message may be sent."""
        ...


class Messenger(Protocol):
    """Sends the bot's output to a chat."""

    async def send_text(self, chat_id: int, text: str) -> None:
        """Deliver ``text`` to ``chat_id`` (splitting or retrying as the messenger needs)."""
        ...

    async def send_typing(self, chat_id: int) -> None:
        """Show that the bot is working on an answer."""
        ...

    def draft(self, message: Incoming) -> Draft | None:
        """A live draft for the reply to ``message``, or ``None`` where drafts are unavailable."""
        ...
