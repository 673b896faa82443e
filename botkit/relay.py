"""Relaying between users: one user's assistant messages another user, whose context is told."""

from __future__ import annotations

from typing import Protocol

import structlog

from botkit.errors import ToolError
from botkit.messengers.base import Messenger
from botkit.tools import Tool, ToolContext, tool
from botkit.types import Message

__all__ = ["RelayHost", "relay", "send_user_message_tool"]

log = structlog.get_logger(__name__)


class RelayHost(Protocol):
    """What relaying needs from the bot."""

    messenger: Messenger | None

    async def can_receive(self, user_id: int) -> bool:
        """Whether ``user_id`` may be sent relayed messages."""
        ...

    async def display_name(self, user_id: int) -> str:
        """How a user is named to others."""
        ...

    async def inject(self, user_id: int, message: Message) -> None:
        """Add ``message`` to the user's context."""
        ...


async def relay(host: RelayHost, sender_id: int, recipient_id: int, text: str) -> str:
    """Send ``text`` from ``sender_id``'s assistant to another user, and tell their context."""
    if host.messenger is None:
        raise ToolError("this bot is not connected to a messenger")
    if recipient_id == sender_id:
        raise ToolError("that is the user you are talking to; just answer them")
    if not await host.can_receive(recipient_id):
        raise ToolError(f"user {recipient_id} is not a user of this bot")
    sender = await host.display_name(sender_id)
    await host.messenger.send_text(recipient_id, f"Message from {sender}:\n{text}")
    # A user-role note, so it also opens a conversation that has no messages yet.
    note = f"[You sent this user a message on behalf of {sender} (id {sender_id}): {text}]"
    await host.inject(recipient_id, Message.user_text(note))
    log.info("relay.sent", sender=sender_id, recipient=recipient_id)
    return f"Delivered to user {recipient_id}."


def send_user_message_tool(host: RelayHost) -> Tool:
    """A ``send_user_message`` tool: message another user; their assistant will know."""

    @tool(name="send_user_message")
    async def send_user_message(ctx: ToolContext, user_id: int, text: str) -> str:
        """Send a Telegram message to another user of this bot and note it in their chat.

        Args:
            user_id: The Telegram user id of the recipient.
            text: The message, written to them directly.
        """
        return await relay(host, ctx.user_id, user_id, text)

    return send_user_message
