"""Voice: voice notes heard through an OpenAI-compatible speech API, answers spoken back.

Configured by BOTKIT_TRANSCRIBE_URL (hearing) and BOTKIT_SPEECH_URL (speaking):
``botkit.voice.service.Voice`` does both, ``botkit.voice.attach.attach_voice`` gives a bot its
voice (and ``/voice``). Converting audio to OGG/Opus needs the ``voice`` extra (PyAV), imported
only when a provider answers in another format. This module stays light, as
``botkit.options`` imports its texts.
"""

from botkit.voice.texts import VoiceTexts

__all__ = ["VoiceTexts"]
