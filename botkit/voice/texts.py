"""What users are told and hear about voice: limits, failures, ``/voice``, spoken notes."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["VoiceTexts"]


@dataclass(frozen=True)
class VoiceTexts:
    """Voice's user-visible texts; ``{…}`` fields are filled in."""

    spoken: str = "[Voice message, transcribed] {text}"
    """How a transcript reaches the model: marked as spoken (words may be misheard)."""
    too_long: str = (
        "Sorry, {name} is {length} long: I can listen to up to {limit}. Please send a shorter "
        "one, or type it."
    )
    code_note: str = "There is code in the text."
    """Said where a code block was (code is never read aloud)."""
    table_note: str = "There is a table in the text."
    rest_note: str = "The rest is in the text."
    """Ends a spoken answer cut at BOTKIT_SPEECH_MAX_CHARS."""
    voice_on: str = "🔊 I'll answer you with voice notes too (and the text beside them)."
    voice_mirror: str = "🔊 I'll answer your voice notes with voice notes (and the text)."
    voice_off: str = "🔇 I'll answer in text only."
    voice_usage: str = (
        "Voice answers here: {mode}. /voice on (every answer), /voice mirror (when you send a "
        "voice note), /voice off."
    )
    group_admins_only: str = "Only this group's admins can switch voice answers."
    voice_description: str = "Answer with voice notes: on, mirror or off"
