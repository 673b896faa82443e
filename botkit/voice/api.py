"""The OpenAI-compatible speech API, over aiohttp: transcription and text-to-speech.

OpenAI, Groq and the local whisper servers speak the same two calls (OpenAI's API reference,
read 2026-11-28):

- ``POST {base}/audio/transcriptions``, multipart ``file`` and ``model`` (and
  ``response_format``: ``json`` is taken by every model; ``verbose_json``, which adds the
  ``duration``, only by the whisper ones) → ``{"text": ...}``, sometimes with a
  ``duration`` or a ``usage.seconds``;
- ``POST {base}/audio/speech``, JSON ``model``, ``input`` (at most 4096 characters), ``voice``
  and ``response_format`` (``mp3`` by default; ``opus`` is OGG/Opus) → the audio bytes.

Every failure (refused, unreachable, slower than the timeout, an answer of the wrong shape)
becomes a :class:`~botkit.errors.VoiceError` here, once; callers never see aiohttp.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import aiohttp

from botkit.errors import VoiceError

__all__ = ["SpeechAPI", "Transcript"]


@dataclass(frozen=True, slots=True)
class Transcript:
    """What the transcription API heard, and the seconds it reported (``None``: not said)."""

    text: str
    seconds: float | None = None


class SpeechAPI:
    """One OpenAI-compatible speech endpoint: its base URL, key and time limit."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    async def transcribe(self, audio: bytes, filename: str, mime: str, model: str) -> Transcript:
        """What ``audio`` says (``POST /audio/transcriptions``)."""
        form = aiohttp.FormData()
        form.add_field("file", audio, filename=filename, content_type=mime)
        form.add_field("model", model)
        form.add_field("response_format", "json")
        body = await self._post("/audio/transcriptions", data=form)
        try:
            answer = _json_object(body)
            text = answer["text"]
        except (ValueError, KeyError) as e:
            raise VoiceError(
                f"the transcription API answered without a text: {body[:200]!r}"
            ) from e
        if not isinstance(text, str):
            raise VoiceError("the transcription API's text is not a string")
        return Transcript(text.strip(), _reported_seconds(answer))

    async def speak(self, text: str, model: str, voice: str, audio_format: str = "opus") -> bytes:
        """``text`` spoken (``POST /audio/speech``), in ``audio_format`` if the server obliges."""
        payload = {"model": model, "input": text, "voice": voice, "response_format": audio_format}
        audio = await self._post("/audio/speech", json=payload)
        if not audio:
            raise VoiceError("the speech API answered with no audio")
        return audio

    async def check(self) -> str | None:
        """``None`` when the server answers at all (any HTTP status but a 5xx), else why not;
        for ``doctor``. A ``GET {base}/models`` costs nothing on any of these servers."""
        try:
            async with self._client().get(f"{self.base_url}/models") as response:
                if response.status >= 500:
                    return f"HTTP {response.status}"
                if response.status in (401, 403):
                    return f"HTTP {response.status}: the API key was refused"
                return None
        except (aiohttp.ClientError, TimeoutError) as e:
            return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__

    async def close(self) -> None:
        """Close the HTTP session (if one was opened)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _post(self, path: str, **kwargs: Any) -> bytes:
        url = f"{self.base_url}{path}"
        try:
            async with self._client().post(url, **kwargs) as response:
                body = await response.read()
                if response.status >= 400:
                    raise VoiceError(f"{path} answered HTTP {response.status}: {_error(body)}")
                return body
        except asyncio.CancelledError:
            raise
        except TimeoutError as e:
            raise VoiceError(f"{path} took longer than {self.timeout:g} s") from e
        except aiohttp.ClientError as e:
            raise VoiceError(f"{path} could not be reached: {type(e).__name__}: {e}") from e

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            timeout = aiohttp.ClientTimeout(total=self.timeout)
            self._session = aiohttp.ClientSession(headers=headers, timeout=timeout)
        return self._session


def _json_object(body: bytes) -> dict[str, Any]:
    import orjson

    answer = orjson.loads(body)
    if not isinstance(answer, dict):
        raise ValueError("not a JSON object")
    return answer


def _reported_seconds(answer: dict[str, Any]) -> float | None:
    """``duration`` (verbose_json) or ``usage.seconds`` (billed by duration), if either."""
    usage = answer.get("usage")
    for value in (
        answer.get("duration"),
        usage.get("seconds") if isinstance(usage, dict) else None,
    ):
        if isinstance(value, int | float) and value >= 0:
            return float(value)
    return None


def _error(body: bytes) -> str:
    """The API's own error message (``{"error": {"message": ...}}``), or the body's start."""
    try:
        error = _json_object(body).get("error")
    except ValueError:
        return body[:200].decode("utf-8", "replace")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return str(error)[:200]
