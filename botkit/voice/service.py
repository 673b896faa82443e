"""Voice for a bot: voice notes heard through the speech API, answers spoken back.

The turn pipeline calls it at two named points: ``listen`` while a message's files are read
(after every gate, so nothing is downloaded or transcribed for a user who would be turned away),
and ``speak_reply`` once the text reply was sent (so a speech API that is down, slow or refusing
costs the user nothing: they have the text, the operator gets one log line).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

import structlog

from botkit import tracing
from botkit.chats import Conversation, conversation_of
from botkit.errors import VoiceError
from botkit.messengers.base import Attachment, Incoming, Messenger, OutgoingFile
from botkit.tracing.base import AttributeValue
from botkit.types import Usage
from botkit.voice.audio import is_ogg_opus, ogg_opus_seconds
from botkit.voice.spoken import speakable, spoken_parts
from botkit.voice.texts import VoiceTexts

if TYPE_CHECKING:
    from botkit.config import Settings
    from botkit.metrics import Metrics
    from botkit.voice.api import SpeechAPI

__all__ = ["VOICE_KINDS", "Voice", "VoiceConfig", "VoiceMode", "VoiceModes"]

log = structlog.get_logger(__name__)

VoiceMode = Literal["off", "mirror", "always"]
PRIVATE = "private"
"""The key a private conversation's choice is kept under (a group's is its context key)."""
MODE_CACHE_SECONDS = 30.0
"""How long a conversation's ``/voice`` choice is trusted from memory."""
MODES_CACHED = 10_000
VOICE_KINDS = frozenset({"voice", "audio", "video_note"})
"""What is heard: voice notes, audio files and round video notes."""
Charge = Callable[[int, str, Usage], Awaitable[None]]
"""Counts usage for a user: their id, the model, what it used."""


@dataclass(frozen=True)
class VoiceConfig:
    """Voice's own settings (BOTKIT_TRANSCRIBE_*, BOTKIT_SPEECH_*, BOTKIT_VOICE_REPLIES)."""

    transcribe_url: str | None = None
    transcribe_model: str = "whisper-1"
    transcribe_key: str | None = None
    speech_url: str | None = None
    speech_model: str = "gpt-4o-mini-tts"
    speech_voice: str = "alloy"
    speech_key: str | None = None
    replies: VoiceMode = "off"
    max_spoken_chars: int = 1500
    max_seconds: int = 300
    """The longest voice note, audio file or video note transcribed."""
    show_transcript: bool = True
    timeout: float = 30.0
    group_context: str = "shared"

    @classmethod
    def from_settings(cls, settings: Settings) -> VoiceConfig:
        """The voice part of ``settings``."""
        return cls(
            transcribe_url=settings.transcribe_url,
            transcribe_model=settings.transcribe_model,
            transcribe_key=_secret(settings.transcribe_api_key),
            speech_url=settings.speech_url,
            speech_model=settings.speech_model,
            speech_voice=settings.speech_voice,
            speech_key=_secret(settings.speech_api_key),
            replies=settings.voice_replies,
            max_spoken_chars=settings.speech_max_chars,
            max_seconds=settings.max_voice_seconds,
            show_transcript=settings.show_transcript,
            timeout=settings.speech_timeout,
            group_context=settings.group_context,
        )

    @property
    def configured(self) -> bool:
        """Whether either half of voice is on."""
        return bool(self.transcribe_url or self.speech_url)


class ModeStore(Protocol):
    """Where a conversation's ``/voice`` choice is kept (the user store, when it can)."""

    async def get_voice_mode(self, owner_id: int, conversation: str) -> str | None:
        """The mode chosen for ``owner_id``'s ``conversation``, or ``None``."""
        ...

    async def set_voice_mode(self, owner_id: int, conversation: str, mode: str) -> None:
        """Remember ``mode`` for ``owner_id``'s ``conversation``."""
        ...


class VoiceModes:
    """Each conversation's ``/voice`` choice: in the store when it keeps them, else in memory."""

    def __init__(self, store: Callable[[], Awaitable[Any]] | None = None) -> None:
        self._store = store
        self._known: dict[Conversation, tuple[VoiceMode | None, float]] = {}

    async def get(self, conversation: Conversation) -> VoiceMode | None:
        """The mode chosen for ``conversation``, or ``None`` (the bot's default applies)."""
        known = self._known.get(conversation)
        if known is not None and known[1] > time.monotonic():
            return known[0]
        store = await self._kept()
        key = conversation.key or PRIVATE
        stored = await store.get_voice_mode(conversation.owner_id, key) if store else None
        mode = cast(VoiceMode, stored) if stored in ("off", "mirror", "always") else None
        self._remember(conversation, mode)
        return mode

    async def set(self, conversation: Conversation, mode: VoiceMode) -> None:
        """Remember ``mode`` for ``conversation``."""
        store = await self._kept()
        if store is not None:
            await store.set_voice_mode(conversation.owner_id, conversation.key or PRIVATE, mode)
        self._remember(conversation, mode)

    def _remember(self, conversation: Conversation, mode: VoiceMode | None) -> None:
        """Cache a choice for a while (another process may change it, as a worker's ``/voice``
        does); with no store to read it back from, for good."""
        self._known.pop(conversation, None)
        while len(self._known) >= MODES_CACHED and self._store is not None:
            del self._known[next(iter(self._known))]
        lasts = MODE_CACHE_SECONDS if self._store is not None else float("inf")
        self._known[conversation] = (mode, time.monotonic() + lasts)

    async def _kept(self) -> ModeStore | None:
        if self._store is None:
            return None
        store = await self._store()
        return store if hasattr(store, "set_voice_mode") else None


class Voice:
    """Transcription and spoken answers over OpenAI-compatible speech APIs."""

    def __init__(
        self,
        config: VoiceConfig,
        texts: VoiceTexts | None = None,
        modes: VoiceModes | None = None,
    ) -> None:
        self.config = config
        self.texts = texts or VoiceTexts()
        self.modes = modes or VoiceModes()
        self.charge: Charge | None = None
        """Set by the turn pipeline: where the seconds heard and characters spoken count."""
        self.metrics: Metrics | None = None
        self.listener = _api(config.transcribe_url, config.transcribe_key, config.timeout)
        self.speaker = _api(config.speech_url, config.speech_key, config.timeout)

    @property
    def hears(self) -> bool:
        """Whether voice notes are transcribed (BOTKIT_TRANSCRIBE_URL)."""
        return self.listener is not None

    @property
    def speaks(self) -> bool:
        """Whether answers can be spoken (BOTKIT_SPEECH_URL)."""
        return self.speaker is not None

    # ---- hearing ----------------------------------------------------------------------

    def refusal(self, attachment: Attachment) -> str | None:
        """The reply refusing a recording longer than BOTKIT_MAX_VOICE_SECONDS (its length as
        Telegram announced it, before anything is downloaded), else ``None``."""
        seconds = attachment.duration
        if attachment.kind not in VOICE_KINDS or seconds is None:
            return None
        if seconds <= self.config.max_seconds:
            return None
        log.info("voice.too_long", seconds=seconds, limit=self.config.max_seconds)
        name = _NAMES.get(attachment.kind, "that recording")
        length, limit = _minutes(seconds), _minutes(self.config.max_seconds)
        return self.texts.too_long.format(name=name, length=length, limit=limit)

    def mark(self, text: str) -> str:
        """A transcript as the model reads it: marked as spoken."""
        return self.texts.spoken.format(text=text)

    async def listen(self, message: Incoming, attachment: Attachment, audio: bytes) -> str:
        """What ``audio`` (of ``attachment``, in ``message``) says, counted against the sender;
        ``VoiceError`` when the API cannot say."""
        if self.listener is None:
            raise VoiceError("BOTKIT_TRANSCRIBE_URL is not set")
        model = self.config.transcribe_model
        mime = attachment.mime_type or _default_mime(attachment.kind)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.request.model": model,
            "botkit.audio.bytes": len(audio),
        }
        started = time.perf_counter()
        with tracing.tracer.span("transcribe", "client", attributes) as span:
            try:
                heard = await self.listener.transcribe(audio, _file_name(attachment), mime, model)
            except VoiceError as e:
                span.fail(type(e).__name__)
                self._measure("transcribe", model, "error", started, 0)
                raise
            seconds = _seconds(heard.seconds, attachment, audio)
            span.set("botkit.audio.seconds", seconds)
        self._measure("transcribe", model, "ok", started, seconds)
        log.info(
            "voice.transcribed", user_id=message.user_id, seconds=seconds, chars=len(heard.text)
        )
        if self.charge is not None:
            await self.charge(message.user_id, model, Usage(audio_seconds=seconds))
        return heard.text

    # ---- speaking ---------------------------------------------------------------------

    async def mode_for(self, message: Incoming) -> VoiceMode:
        """How ``message``'s conversation is answered: its ``/voice`` choice, else the bot's."""
        chosen = await self.modes.get(self.conversation(message))
        return chosen or self.config.replies

    def conversation(self, message: Incoming) -> Conversation:
        """The conversation ``message`` belongs to, whose ``/voice`` choice applies."""
        return conversation_of(message, self.config.group_context)

    async def wants_spoken(self, message: Incoming) -> bool:
        """Whether the reply to ``message`` is spoken too (``always``, or ``mirror`` and it was
        a voice note, audio file or video note)."""
        if self.speaker is None:
            return False
        mode = await self.mode_for(message)
        return mode == "always" or (mode == "mirror" and message.kind in VOICE_KINDS)

    async def speak_reply(self, message: Incoming, text: str, messenger: Messenger) -> bool:
        """Send ``text`` (the reply already sent as text) spoken, as voice notes in the chat;
        whether it was. A failure is logged once and the text stands alone."""
        if self.speaker is None:
            return False
        said = speakable(text, code_note=self.texts.code_note, table_note=self.texts.table_note)
        if not said:
            return False
        parts, cut = spoken_parts(said, self.config.max_spoken_chars, self.texts.rest_note)
        try:
            notes = [await self._spoken(message, part) for part in parts]
        except VoiceError as e:
            log.warning("voice.speech_failed", user_id=message.user_id, error=str(e))
            return False
        for index, (audio, seconds) in enumerate(notes, 1):
            name = f"answer-{message.update_id}-{index}.ogg"
            note = OutgoingFile(audio, name, "audio/ogg", as_voice=True, duration=round(seconds))
            await messenger.send_file(message.chat_id, note, thread_id=message.thread_id)
        log.info("voice.spoken", user_id=message.user_id, parts=len(parts), cut=cut)
        return True

    async def _spoken(self, message: Incoming, text: str) -> tuple[bytes, float]:
        """``text`` as OGG/Opus and its length in seconds (converted if the API answered in
        another format), counted against the sender."""
        assert self.speaker is not None
        model = self.config.speech_model
        started = time.perf_counter()
        attributes: dict[str, AttributeValue] = {
            "gen_ai.request.model": model,
            "botkit.speech.chars": len(text),
        }
        with tracing.tracer.span("speak", "client", attributes) as span:
            try:
                audio = await self.speaker.speak(text, model, self.config.speech_voice)
                audio = await _as_ogg_opus(audio)
            except VoiceError as e:
                span.fail(type(e).__name__)
                self._measure("speak", model, "error", started, 0)
                raise
        self._measure("speak", model, "ok", started, len(text))
        if self.charge is not None:
            await self.charge(message.user_id, model, Usage(spoken_chars=len(text)))
        return audio, ogg_opus_seconds(audio) or 0.0

    def _measure(
        self, operation: str, model: str, outcome: str, started: float, amount: int
    ) -> None:
        if self.metrics is not None:
            seconds = time.perf_counter() - started
            self.metrics.voice_call(operation, model, outcome, seconds, amount)

    async def close(self) -> None:
        """Close the speech APIs' HTTP sessions."""
        for api in (self.listener, self.speaker):
            if api is not None:
                await api.close()


async def _as_ogg_opus(audio: bytes) -> bytes:
    """``audio`` as OGG/Opus: as it came when the API obliged, else converted (off the loop)."""
    if is_ogg_opus(audio):
        return audio
    import asyncio

    from botkit.voice.audio import to_ogg_opus

    try:
        return await asyncio.to_thread(to_ogg_opus, audio)
    except Exception as e:  # PyAV's errors (not audio at all, no extra): text alone then
        raise VoiceError(f"the speech API's audio could not be made OGG/Opus: {e}") from e


def _seconds(reported: float | None, attachment: Attachment, audio: bytes) -> int:
    """Seconds to count: what the API reported, else what Telegram announced, else measured."""
    if reported is not None:
        return max(1, round(reported))
    if attachment.duration is not None:
        return max(1, attachment.duration)
    return max(1, round(ogg_opus_seconds(audio) or 0))


_NAMES = {"voice": "that voice message", "audio": "that audio file", "video_note": "that video"}


def _minutes(seconds: int) -> str:
    """``seconds`` as users read a length: ``10:00``, ``0:45``."""
    return f"{seconds // 60}:{seconds % 60:02d}"


def _default_mime(kind: str) -> str:
    return {"voice": "audio/ogg", "video_note": "video/mp4"}.get(kind, "audio/mpeg")


def _file_name(attachment: Attachment) -> str:
    """A name whose suffix tells the API the format (it goes by the name, as OpenAI's does)."""
    if attachment.file_name:
        return attachment.file_name
    return {"voice": "voice.ogg", "video_note": "video_note.mp4"}.get(attachment.kind, "audio.mp3")


def _api(url: str | None, key: str | None, timeout: float) -> SpeechAPI | None:
    """The speech API at ``url`` (its HTTP client loaded only then), or ``None``."""
    if not url:
        return None
    from botkit.voice.api import SpeechAPI

    return SpeechAPI(url, key, timeout)


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None
