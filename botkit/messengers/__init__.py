"""Messengers: where messages come from and replies go (Telegram through aiogram)."""

from botkit.messengers.base import Incoming, Messenger

__all__ = ["Incoming", "Messenger"]
