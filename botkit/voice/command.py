"""``/voice``: how a conversation is answered (on, mirror, off), chosen by its users."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from botkit.access import Access
from botkit.commands import CommandHandler
from botkit.messengers.base import Incoming, Messenger
from botkit.voice.service import Voice, VoiceMode

__all__ = ["VoiceCommandHost", "register_voice_command"]

_MODES: dict[str, VoiceMode] = {
    "on": "always",
    "always": "always",
    "mirror": "mirror",
    "off": "off",
}


class VoiceCommandHost(Protocol):
    """What ``/voice`` needs of a bot: registering it, and what says who manages a group."""

    access: Access
    messenger: Messenger | None

    def command(
        self, name: str, description: str, *, admin_only: bool = False
    ) -> Callable[[CommandHandler], CommandHandler]:
        """Register a command."""
        ...


def register_voice_command(bot: VoiceCommandHost, voice: Voice) -> None:
    """``/voice [on|mirror|off]``; in a group only its admins switch it (as for ``/clear``)."""
    texts = voice.texts

    @bot.command("voice", texts.voice_description)
    async def voice_command(message: Incoming, args: str) -> str:
        wanted = _MODES.get(args.strip().lower())
        if wanted is None:
            shown = {"always": "on", "mirror": "mirror", "off": "off"}[
                await voice.mode_for(message)
            ]
            return texts.voice_usage.format(mode=shown)
        if message.in_group and not await bot.access.is_group_admin(message, bot.messenger):
            return texts.group_admins_only
        await voice.modes.set(voice.conversation(message), wanted)
        return {"always": texts.voice_on, "mirror": texts.voice_mirror, "off": texts.voice_off}[
            wanted
        ]
