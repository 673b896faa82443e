"""A local fake of an OpenAI-compatible speech API: transcriptions and text-to-speech.

It answers what OpenAI's API reference (read 2026-11-28) documents, and refuses what it
refuses, with its error shape (``{"error": {"message", "type", "param", "code"}}``):

- ``POST /v1/audio/transcriptions``: multipart, ``file`` and ``model`` required (400 without);
  ``response_format`` ``json`` (``{"text"}``), ``text`` (the text alone) or ``verbose_json``
  (adds ``duration`` and ``language``); files over 25 MB are refused (413). What each file
  "says" is scripted: ``transcripts[audio bytes] = "text"``, else ``default_transcript``.
- ``POST /v1/audio/speech``: JSON ``model``, ``input`` (at most 4096 characters, 400 beyond)
  and ``voice`` required; ``response_format`` ``opus`` (the default here is ``mp3``, as
  OpenAI's) gives real OGG/Opus audio, about one second per 15 characters, made with PyAV (the
  ``voice`` extra); ``wav`` a real WAV. ``answer_format`` makes it answer in another format than
  asked, as some providers do, to exercise conversion.
- ``GET /v1/models``: a list, as ``doctor`` asks.

``api_key`` set: a request without ``Authorization: Bearer <key>`` gets 401. ``fail_next``
answers the next calls with an error, ``stall_next`` never answers them (the client's timeout
ends them). ``requests`` records every call.
"""

from __future__ import annotations

import asyncio
import io
import wave
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from botkit.testing._loopback import LoopbackServer, serve_on_loopback

__all__ = ["FakeSpeechServer", "SpeechRequest"]

MAX_INPUT = 4096
MAX_UPLOAD = 25 * 1024 * 1024
CHARS_PER_SECOND = 15.0
TRANSCRIPTION_FORMATS = ("json", "text", "verbose_json", "srt", "vtt")
SPEECH_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")


@dataclass(frozen=True)
class SpeechRequest:
    """One call the fake answered (or refused): its path and fields (a file as its bytes)."""

    path: str
    fields: dict[str, Any]
    status: int = 200


@dataclass
class _Fault:
    status: int
    message: str
    times: int
    stall: bool = False


@dataclass
class FakeSpeechServer(LoopbackServer):
    """An OpenAI-compatible speech API on 127.0.0.1; ``base_url`` ends in ``/v1``."""

    api_key: str | None = None
    default_transcript: str = "hello from a voice note"
    transcripts: dict[bytes, str] = field(default_factory=dict)
    """What each audio file says, by its bytes."""
    answer_format: str | None = None
    """Answer speech in this format whatever was asked (``wav``), as some providers do."""
    requests: list[SpeechRequest] = field(default_factory=list)
    base_url: str = ""
    _faults: list[_Fault] = field(default_factory=list)
    _runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Start listening on a free port of 127.0.0.1 and set :attr:`base_url`."""
        app = web.Application(client_max_size=MAX_UPLOAD + 1024 * 1024)
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        app.router.add_post("/v1/audio/speech", self._speech)
        app.router.add_get("/v1/models", self._models)
        self._runner, root = await serve_on_loopback(app)
        self.base_url = f"{root}/v1"

    async def stop(self) -> None:
        """Stop listening."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    def fail_next(self, status: int = 500, message: str = "server error", times: int = 1) -> None:
        """Answer the next ``times`` calls with HTTP ``status`` and ``message``."""
        self._faults.append(_Fault(status, message, times))

    def stall_next(self, times: int = 1) -> None:
        """Never answer the next ``times`` calls."""
        self._faults.append(_Fault(0, "", times, stall=True))

    def calls(self, path: str) -> list[SpeechRequest]:
        """The calls to ``path`` (``/audio/speech`` or ``/audio/transcriptions``), in order."""
        return [r for r in self.requests if r.path == path]

    # ---- handlers ---------------------------------------------------------------------

    async def _transcriptions(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._refused(request)) is not None:
            return refused
        form = await request.post()
        fields: dict[str, Any] = {}
        for key, value in form.items():
            if isinstance(value, str):
                fields[key] = value
                continue
            with value.file as upload:  # type: ignore[union-attr]
                fields[key] = upload.read()
        self.requests.append(SpeechRequest("/audio/transcriptions", fields))
        if (fault := await self._fault()) is not None:
            return fault
        audio = fields.get("file")
        if not isinstance(audio, bytes):
            return _error(400, "Could not parse multipart form: no file", "file")
        if not fields.get("model"):
            return _error(400, "you must provide a model parameter", "model")
        if len(audio) > MAX_UPLOAD:
            return _error(413, "Maximum content size limit (26214400) exceeded", "file")
        answer_format = str(fields.get("response_format") or "json")
        if answer_format not in TRANSCRIPTION_FORMATS:
            return _error(400, f"Invalid response_format: {answer_format!r}", "response_format")
        text = self.transcripts.get(audio, self.default_transcript)
        if answer_format == "text":
            return web.Response(text=text)
        if answer_format == "verbose_json":
            seconds = _seconds_of(audio)
            return web.json_response({"text": text, "duration": seconds, "language": "english"})
        return web.json_response({"text": text})

    async def _speech(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._refused(request)) is not None:
            return refused
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "We could not parse the JSON body of your request.", None)
        self.requests.append(SpeechRequest("/audio/speech", dict(body)))
        if (fault := await self._fault()) is not None:
            return fault
        for name in ("model", "input", "voice"):
            if not body.get(name):
                return _error(400, f"Missing required parameter: '{name}'.", name)
        text = str(body["input"])
        if len(text) > MAX_INPUT:
            message = f"'input' is too long: {len(text)} characters, the most is {MAX_INPUT}."
            return _error(400, message, "input")
        wanted = str(body.get("response_format") or "mp3")
        if wanted not in SPEECH_FORMATS:
            return _error(400, f"Invalid value: '{wanted}'.", "response_format")
        audio_format = self.answer_format or wanted
        seconds = max(1.0, len(text) / CHARS_PER_SECOND)
        audio = await asyncio.to_thread(_spoken, audio_format, seconds)
        kind = "audio/ogg" if audio_format == "opus" else f"audio/{audio_format}"
        return web.Response(body=audio, content_type=kind)

    async def _models(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._refused(request)) is not None:
            return refused
        self.requests.append(SpeechRequest("/models", {}))
        return web.json_response({"object": "list", "data": [{"id": "whisper-1"}]})

    def _refused(self, request: web.Request) -> web.Response | None:
        if self.api_key is None:
            return None
        if request.headers.get("Authorization") == f"Bearer {self.api_key}":
            return None
        return _error(401, "Incorrect API key provided.", None, "invalid_api_key")

    async def _fault(self) -> web.Response | None:
        if not self._faults:
            return None
        fault = self._faults[0]
        fault.times -= 1
        if fault.times <= 0:
            self._faults.pop(0)
        if fault.stall:
            await asyncio.Event().wait()  # until the client gives up
        return _error(fault.status, fault.message, None)


def _error(status: int, message: str, param: str | None, code: str | None = None) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    error = {"message": message, "type": kind, "param": param, "code": code}
    return web.json_response({"error": error}, status=status)


def _seconds_of(audio: bytes) -> float:
    from botkit.voice.audio import ogg_opus_seconds

    return round(ogg_opus_seconds(audio) or 0.0, 2)


def _spoken(audio_format: str, seconds: float) -> bytes:
    """Real audio of ``seconds``: OGG/Opus, or a WAV for any other format asked."""
    if audio_format == "opus":
        from botkit.voice.audio import tone_ogg_opus

        return tone_ogg_opus(seconds)
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(24_000)
        wav.writeframes(b"\x00\x08" * round(24_000 * seconds))
    return out.getvalue()
