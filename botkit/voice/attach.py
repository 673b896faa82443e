"""Giving a bot voice: built from its settings, ``/voice`` registered when it can speak."""

from __future__ import annotations

from typing import Protocol

from botkit.config import Settings
from botkit.options import BotOptions
from botkit.voice.command import VoiceCommandHost, register_voice_command
from botkit.voice.service import Voice, VoiceConfig, VoiceModes

__all__ = ["VoiceHost", "attach_voice"]


class VoiceHost(VoiceCommandHost, Protocol):
    """A bot voice attaches to: its settings and texts, and the user store for ``/voice``."""

    settings: Settings
    options: BotOptions


def attach_voice(bot: VoiceHost) -> Voice | None:
    """The bot's voice, when BOTKIT_TRANSCRIBE_URL or BOTKIT_SPEECH_URL is set (``/voice``
    registered when it can speak); else ``None``."""
    config = VoiceConfig.from_settings(bot.settings)
    if not config.configured:
        return None
    voice = Voice(config, bot.options.voice_texts, VoiceModes(bot.access.user_store))
    if voice.speaks:
        register_voice_command(bot, voice)
    return voice
