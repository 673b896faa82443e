"""An assistant that understands voice messages, with a pluggable transcription backend.

botkit hands every voice note and audio file to ``Bot.transcribe(audio, mime)``; what it
returns becomes the user's message (and the user is shown what was understood). Pick a backend
with ``TRANSCRIBE_BACKEND``:

- ``http`` (default): an OpenAI-compatible ``/v1/audio/transcriptions`` endpoint, e.g. OpenAI
  itself or a local faster-whisper server. ``TRANSCRIBE_URL``, ``TRANSCRIBE_API_KEY``,
  ``TRANSCRIBE_MODEL`` (default ``whisper-1``).
- ``command``: any local program that prints the text, e.g. whisper.cpp:
  ``TRANSCRIBE_COMMAND="whisper-cli -nt -f {file}"`` (``{file}`` is the audio, saved for it).

Run it with ``python -m botkit run examples/voice_bot.py:bot``.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import tempfile
from pathlib import Path
from typing import Protocol

import aiohttp
import structlog

from botkit import Bot

log = structlog.get_logger(__name__)

SUFFIXES = {"audio/ogg": ".ogg", "audio/mpeg": ".mp3", "audio/mp4": ".m4a", "audio/wav": ".wav"}


class Transcriber(Protocol):
    """Audio in, text out (``None`` when nothing was understood)."""

    async def __call__(self, audio: bytes, mime: str) -> str | None: ...


class HttpTranscriber:
    """An OpenAI-compatible ``POST /v1/audio/transcriptions`` (multipart, answers ``{"text"}``)."""

    def __init__(self, url: str, *, api_key: str | None = None, model: str = "whisper-1") -> None:
        self.url = url
        self.api_key = api_key
        self.model = model

    async def __call__(self, audio: bytes, mime: str) -> str | None:
        form = aiohttp.FormData()
        form.add_field("model", self.model)
        form.add_field("file", audio, filename=f"voice{SUFFIXES.get(mime, '')}", content_type=mime)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        timeout = aiohttp.ClientTimeout(total=120)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(self.url, data=form, headers=headers) as response,
            ):
                response.raise_for_status()
                text = (await response.json()).get("text")
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            log.warning("transcribe.failed", backend="http", error=type(e).__name__)
            return None
        return text if isinstance(text, str) else None


class CommandTranscriber:
    """A local program given the audio as ``{file}``; what it prints is the text."""

    def __init__(self, command: list[str], *, timeout: float = 120.0) -> None:
        self.command = command
        self.timeout = timeout

    async def __call__(self, audio: bytes, mime: str) -> str | None:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"voice{SUFFIXES.get(mime, '')}"
            path.write_bytes(audio)
            argv = [part.replace("{file}", str(path)) for part in self.command]
            process = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
            )
            try:
                async with asyncio.timeout(self.timeout):
                    out, _ = await process.communicate()
            except TimeoutError:
                process.kill()
                await process.wait()
                log.warning("transcribe.failed", backend="command", error="timeout")
                return None
        if process.returncode != 0:
            log.warning("transcribe.failed", backend="command", exit_code=process.returncode)
            return None
        return out.decode(errors="replace").strip() or None


def transcriber_from_env() -> Transcriber:
    """The backend ``TRANSCRIBE_BACKEND`` names, configured from the environment."""
    if os.environ.get("TRANSCRIBE_BACKEND", "http") == "command":
        return CommandTranscriber(shlex.split(os.environ["TRANSCRIBE_COMMAND"]))
    return HttpTranscriber(
        os.environ.get("TRANSCRIBE_URL", "https://api.openai.com/v1/audio/transcriptions"),
        api_key=os.environ.get("TRANSCRIBE_API_KEY"),
        model=os.environ.get("TRANSCRIBE_MODEL", "whisper-1"),
    )


class VoiceBot(Bot):
    """A bot whose ``transcribe`` step asks the configured backend."""

    transcriber: Transcriber | None = None
    """The backend; read from the environment on first use unless set."""

    async def transcribe(self, audio: bytes, mime: str) -> str | None:
        if self.transcriber is None:
            self.transcriber = transcriber_from_env()
        return await self.transcriber(audio, mime)


bot = VoiceBot()
