"""Files users send, made into what Claude reads: PDFs as documents, text files as text,
pictures scaled down, voice notes and audio through the bot's transcriber.

Sizes are checked against the limits from the size the update announced, before anything is
downloaded: an oversized file costs neither a download nor an LLM call, and the user is told
which limit it broke. Whatever cannot be read (not UTF-8, a damaged PDF or picture) is refused
the same way, so nothing the API would reject ever enters a conversation and poisons its later
turns.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Protocol

import structlog

from botkit.agent.fitting import remember_pages
from botkit.errors import ConfigError
from botkit.extras import require_extra
from botkit.images import (
    DEFAULT_MAX_PIXELS,
    MAX_IMAGE_SIDE,
    ImageDecodeBusy,
    ImageTooLargeToDecode,
    image_size,
    scale_image,
)
from botkit.messengers.base import Attachment, Incoming, Messenger
from botkit.pdfpages import count_pages
from botkit.types import ContentBlock, DocumentBlock, DocumentSource

__all__ = [
    "CLAUDE_PDF_BYTES",
    "CLAUDE_PDF_PAGES",
    "MAX_IMAGE_SIDE",
    "MB",
    "TELEGRAM_DOWNLOAD_BYTES",
    "FileLimits",
    "FileReader",
    "FileTexts",
    "Hearing",
    "Transcribe",
    "is_text_file",
    "megabytes",
    "scale_image",
]

log = structlog.get_logger(__name__)

MB = 1024 * 1024
TELEGRAM_DOWNLOAD_BYTES = 20 * MB
"""The cloud Bot API hands bots files of at most 20 MB."""
CLAUDE_PDF_BYTES = 32 * MB
CLAUDE_PDF_PAGES = 100
"""Claude reads PDFs of up to 100 pages with full visual understanding."""

TEXT_SUFFIXES = frozenset(
    (  # noqa: SIM905 (a list of 70 suffixes reads better as words)
        ".txt .md .markdown .rst .org .tex .csv .tsv .json .jsonl .ndjson .yaml .yml .toml "
        ".ini .cfg .conf .log .xml .html .htm .css .scss .js .mjs .cjs .ts .tsx .jsx .vue "
        ".svelte .py .pyi .rb .go .rs .java .kt .kts .scala .c .h .cc .cpp .hpp .cs .m .swift "
        ".php .pl .lua .r .jl .dart .sh .bash .zsh .fish .ps1 .bat .sql .graphql .proto .diff "
        ".patch .srt .vtt .gitignore .dockerfile"
    ).split()
)
TEXT_MIME_TYPES = frozenset(
    {
        "application/json",
        "application/x-ndjson",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/x-javascript",
        "application/x-sh",
        "application/x-python",
        "application/x-python-code",
        "application/sql",
        "application/csv",
        "application/x-subrip",
    }
)

Transcribe = Callable[[bytes, str], Awaitable[str | None]]
"""Audio bytes and their MIME type → what was said (``None``: nothing understood)."""
Notify = Callable[[str], Awaitable[None]]
HEARD_KINDS = frozenset({"voice", "audio", "video_note"})
"""Attachments read by listening: voice notes, audio files, round video notes."""
QUOTE_CHARS = 300
"""The most of a transcript quoted back to the user (the model gets all of it)."""


class Hearing(Protocol):
    """Built-in transcription (``botkit.voice``), used when the bot has no ``transcribe``."""

    def refusal(self, attachment: Attachment) -> str | None:
        """The text refusing ``attachment`` before download (too long), or ``None``."""
        ...

    async def listen(self, message: Incoming, attachment: Attachment, audio: bytes) -> str:
        """What ``audio`` says (raises when it cannot be heard)."""
        ...

    def mark(self, text: str) -> str:
        """``text`` marked as spoken, as the model reads it."""
        ...


@dataclass(frozen=True)
class FileTexts:
    """What users are told about their files; ``{name}``, ``{size}``, ``{limit}`` are filled in."""

    too_big: str = "Sorry, {name} is {size}: I can only take files up to {limit} ({why})."
    telegram_limit: str = "Telegram's limit for bots"
    bot_limit: str = "this bot's limit"
    pdf_too_big: str = "Sorry, {name} is {size}: I can read PDFs of up to {limit}."
    too_many_pages: str = "Sorry, {name} has {pages} pages: I can read PDFs of up to {limit} pages."
    bad_pdf: str = "Sorry, I couldn't open {name} as a PDF: is it damaged or password-protected?"
    pdf_too_slow: str = (
        "Sorry, {name} took too long to open as a PDF. Please send a smaller or simpler one."
    )
    bad_image: str = "Sorry, I couldn't open {name} as a picture. Please send it as a photo."
    too_large_to_decode: str = (
        "Sorry, {name} would take {size} of memory to read (a large PNG, GIF or WebP is read "
        "whole): send it as a JPEG, or smaller."
    )
    images_busy: str = (
        "Sorry, I'm reading other large pictures right now and {name} does not fit beside "
        "them: send it again in a minute."
    )
    too_many_pixels: str = (
        "Sorry, {name} is {width:,} by {height:,} pixels: I can take pictures of up to {limit} "
        "million pixels."
    )
    not_utf8: str = (
        "Sorry, I couldn't read {name}: it isn't UTF-8 text. Please save it as UTF-8 (or as a "
        "PDF) and send it again."
    )
    text_too_long: str = (
        "Sorry, {name} has {chars:,} characters: I can read text files of up to {limit:,}."
    )
    unsupported: str = (
        "Sorry, I can't read {name}. I can read PDFs, text files (.txt, .md, .csv, .json, "
        "source code) and pictures."
    )
    download_failed: str = "Sorry, I couldn't fetch {name}. Please send it again."
    over_media_quota: str = (
        "Sorry, I can't take more files from you: those you've sent me take {stored}, and I "
        "keep at most {limit} per person."
    )
    not_installed: str = "Sorry, I can't read {name} yet: this bot can't open pictures or PDFs."
    heard: str = "🎤 I understood: “{text}”"
    not_heard: str = "Sorry, I couldn't make out that voice message. Please write it instead."


@dataclass(frozen=True)
class FileLimits:
    """How large a file may be before it is refused (without a download or an LLM call)."""

    max_file_bytes: int = TELEGRAM_DOWNLOAD_BYTES
    """Any file; the smaller of Telegram's 20 MB and BOTKIT_MAX_FILE_MB."""
    max_pdf_bytes: int = CLAUDE_PDF_BYTES
    max_pdf_pages: int = CLAUDE_PDF_PAGES
    pdf_seconds: float = 10.0
    """How long counting a PDF's pages may take (in a child process) before it is refused."""
    max_text_chars: int = 100_000
    """A text file's characters (a long file would crowd the whole conversation out)."""
    max_image_pixels: int = DEFAULT_MAX_PIXELS
    """A picture's width times height (BOTKIT_MAX_IMAGE_PIXELS), read from its header."""

    @classmethod
    def from_megabytes(cls, max_file_mb: float, **others: int) -> FileLimits:
        """Limits for BOTKIT_MAX_FILE_MB, never above what Telegram lets bots download."""
        return cls(max_file_bytes=min(int(max_file_mb * MB), TELEGRAM_DOWNLOAD_BYTES), **others)


class _Refused(Exception):
    """A file the user is told about instead of a turn (never leaves this module)."""


class _NotAddressed(Exception):
    """A group voice note that did not say the bot's name: no turn, no reply."""


class FileReader:
    """Fetches an admitted message's files and turns them into content blocks, or refuses."""

    def __init__(
        self,
        limits: FileLimits | None = None,
        texts: FileTexts | None = None,
        transcribe: Transcribe | None = None,
        hearing: Hearing | None = None,
        show_heard: bool = True,
    ) -> None:
        self.limits = limits or FileLimits()
        self.texts = texts or FileTexts()
        self.transcribe = transcribe
        """Voice and audio become text through it; ``None``: they are not understood."""
        self.hearing = hearing
        """Built-in transcription, when ``transcribe`` is ``None`` (the bot's own wins)."""
        self.show_heard = show_heard
        """Quote what was heard to the user (BOTKIT_SHOW_TRANSCRIPT)."""

    def answers(self, kind: str) -> bool:
        """Whether a message of ``kind`` can be read at all (voice only with a transcriber)."""
        if kind in HEARD_KINDS:
            return self.transcribe is not None or self.hearing is not None
        return kind in ("text", "photo", "document")

    def readable(self, message: Incoming) -> bool:
        """Whether ``message`` holds anything to read (text, or files of a kind that is read),
        judged before anything is fetched."""
        if not self.answers(message.kind):
            return False
        files = message.photo_ids or any(self.answers(a.kind) for a in message.attachments)
        return bool(message.text or message.images or message.content or files)

    async def read(
        self, message: Incoming, messenger: Messenger, notify: Notify
    ) -> Incoming | str | None:
        """``message`` with its files fetched and read, or the text telling the user why not;
        ``None`` for a group voice note that did not say the bot's name (``listen_for``).

        ``notify`` tells the user what a voice note was understood as.
        """
        if not (message.attachments or message.photo_ids or message.images or message.content):
            return message  # text alone: nothing to fetch or read (most turns)
        try:
            self._check_sizes(message.attachments)
            images = await self._photos(message, messenger)
            content: list[ContentBlock] = []
            said: list[str] = []
            for attachment in message.attachments:
                if attachment.kind in HEARD_KINDS:
                    said += await self._transcribed(message, attachment, messenger, notify)
                    continue
                data = await self._download(attachment, messenger)
                if _is_pdf(attachment) or data.startswith(b"%PDF-"):
                    content.append(await self._pdf(_name(attachment), data))
                    continue
                block, image = await asyncio.to_thread(self._document, attachment, data)
                content += [block] if block is not None else []
                images += [image] if image is not None else []
        except _Refused as refusal:
            if message.listen_for:  # not known to be for the bot: refused in silence
                log.info("files.voice_not_addressed", chat_id=message.chat_id, refused=True)
                return None
            return str(refusal)
        except _NotAddressed:
            log.info("files.voice_not_addressed", chat_id=message.chat_id)
            return None
        text = "\n\n".join([*said, message.text] if message.text else said)
        return replace(message, images=tuple(images), content=tuple(content), text=text)

    def _check_sizes(self, attachments: tuple[Attachment, ...]) -> None:
        """Refuse an attachment whose announced size is over a limit, before downloading it."""
        for attachment in attachments:
            if not self.answers(attachment.kind):
                continue  # never fetched (voice without a transcriber)
            if self.hearing is not None and self._heard_by_voice():
                refusal = self.hearing.refusal(attachment)  # longer than it listens to
                if refusal is not None:
                    raise _Refused(refusal)
            size = attachment.file_size
            if size is None:
                continue  # unknown: checked once downloaded
            if size > self.limits.max_file_bytes:
                self._refuse_size(attachment, size)
            if _is_pdf(attachment) and size > self.limits.max_pdf_bytes:
                self._refuse_pdf_size(attachment, size)

    def _refuse_size(self, attachment: Attachment, size: int) -> None:
        cap = self.limits.max_file_bytes
        why = self.texts.telegram_limit if cap >= TELEGRAM_DOWNLOAD_BYTES else self.texts.bot_limit
        log.info("files.too_big", kind=attachment.kind, size=size, limit=cap)
        name = _name(attachment)
        raise _Refused(
            self.texts.too_big.format(name=name, size=_mb(size), limit=_mb(cap), why=why)
        )

    def _refuse_pdf_size(self, attachment: Attachment, size: int) -> None:
        log.info("files.pdf_too_big", size=size, limit=self.limits.max_pdf_bytes)
        limit = _mb(self.limits.max_pdf_bytes)
        raise _Refused(
            self.texts.pdf_too_big.format(name=_name(attachment), size=_mb(size), limit=limit)
        )

    async def _photos(self, message: Incoming, messenger: Messenger) -> list[bytes]:
        """The message's photos, fetched and scaled; a photo that cannot be fetched is left out."""
        images = list(message.images)
        for file_id in message.photo_ids if not message.images else ():
            data = await messenger.download(file_id)
            if data is not None:
                images.append(await asyncio.to_thread(self._image, data, "the photo"))
        return images

    async def _download(self, attachment: Attachment, messenger: Messenger) -> bytes:
        data = await messenger.download(attachment.file_id)
        if data is None:
            raise _Refused(self.texts.download_failed.format(name=_name(attachment)))
        if len(data) > self.limits.max_file_bytes:  # the update did not say, or said wrong
            self._refuse_size(attachment, len(data))
        return data

    def _heard_by_voice(self) -> bool:
        return self.transcribe is None and self.hearing is not None

    async def _transcribed(
        self, message: Incoming, attachment: Attachment, messenger: Messenger, notify: Notify
    ) -> list[str]:
        """What a voice note, audio file or video note says, quoted to the user; nothing
        without a transcriber. The bot's own ``transcribe`` wins over built-in hearing."""
        if self.transcribe is None and self.hearing is None:
            return []
        data = await self._download(attachment, messenger)
        mime = attachment.mime_type or _AUDIO_TYPES.get(attachment.kind, "audio/mpeg")
        try:
            if self.transcribe is not None:
                text = ((await self.transcribe(data, mime)) or "").strip()
            else:
                assert self.hearing is not None
                text = (await self.hearing.listen(message, attachment, data)).strip()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the backend failed: the user is asked to type instead
            if self.transcribe is not None:
                log.exception("files.transcribe_failed", mime=mime, size=len(data))
            else:  # the speech API's failure, already said in one line
                log.warning("files.transcribe_failed", mime=mime, size=len(data), error=str(e))
            text = ""
        if message.listen_for and not names_said(text, message.listen_for):
            raise _NotAddressed
        if not text:
            raise _Refused(self.texts.not_heard)
        if self.show_heard:
            await notify(self.texts.heard.format(text=_quoted(text)))
        if self.hearing is not None and self._heard_by_voice():
            text = self.hearing.mark(text)
        return [text]

    def _document(
        self, attachment: Attachment, data: bytes
    ) -> tuple[ContentBlock | None, bytes | None]:
        """A sent file as a document block, or as a picture (screenshots sent as files)."""
        name = _name(attachment)
        if (attachment.mime_type or "").startswith("image/"):
            return None, self._image(data, name)
        if is_text_file(attachment.file_name, attachment.mime_type):
            return self._text(name, data), None
        raise _Refused(self.texts.unsupported.format(name=name))

    async def _pdf(self, name: str, data: bytes) -> DocumentBlock:
        """A PDF as a document block, its pages counted off this process (with a time limit)."""
        self._require_files_extra("pypdf", name)
        if len(data) > self.limits.max_pdf_bytes:
            limit = _mb(self.limits.max_pdf_bytes)
            size = _mb(len(data))
            raise _Refused(self.texts.pdf_too_big.format(name=name, size=size, limit=limit))
        counted = await count_pages(data, self.limits.max_pdf_pages, self.limits.pdf_seconds)
        if counted.timed_out:
            log.warning("files.pdf_too_slow", size=len(data), seconds=self.limits.pdf_seconds)
            raise _Refused(self.texts.pdf_too_slow.format(name=name))
        pages = counted.pages
        if pages is None:
            log.info("files.pdf_unreadable", size=len(data))
            raise _Refused(self.texts.bad_pdf.format(name=name))
        if pages > self.limits.max_pdf_pages:
            log.info("files.too_many_pages", pages=pages, limit=self.limits.max_pdf_pages)
            most = self.limits.max_pdf_pages
            raise _Refused(self.texts.too_many_pages.format(name=name, pages=pages, limit=most))
        source = DocumentSource(type="base64", media_type="application/pdf", data=_b64(data))
        remember_pages(source.data or "", pages)  # for fitting later requests to 100 pages
        return DocumentBlock(source=source, title=name)

    def _text(self, name: str, data: bytes) -> DocumentBlock:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise _Refused(self.texts.not_utf8.format(name=name)) from None
        if len(text) > self.limits.max_text_chars:
            limit = self.limits.max_text_chars
            raise _Refused(self.texts.text_too_long.format(name=name, chars=len(text), limit=limit))
        source = DocumentSource(type="text", media_type="text/plain", data=text)
        return DocumentBlock(source=source, title=name)

    def _require_files_extra(self, module: str, name: str) -> None:
        """Refuse ``name`` politely (and tell the operator) when the files extra is missing."""
        try:
            require_extra(module, "files", "Reading pictures and PDFs")
        except ConfigError as e:
            log.error("files.extra_missing", file=name, error=str(e))
            raise _Refused(self.texts.not_installed.format(name=name)) from None

    def _image(self, data: bytes, name: str) -> bytes:
        self._require_files_extra("PIL", name)
        size = image_size(data)
        most = self.limits.max_image_pixels
        if size is not None and size[0] * size[1] > most:
            log.info("files.too_many_pixels", width=size[0], height=size[1], limit=most)
            width, height = size
            limit = f"{most / 1_000_000:g}"
            text = self.texts.too_many_pixels
            raise _Refused(text.format(name=name, width=width, height=height, limit=limit))
        try:
            scaled = scale_image(data, max_pixels=most)
        except ImageTooLargeToDecode as e:
            log.info("files.image_too_large_to_decode", file=name, need=e.need)
            text = self.texts.too_large_to_decode
            raise _Refused(text.format(name=name, size=megabytes(e.need))) from None
        except ImageDecodeBusy as e:
            log.warning("files.image_decode_busy", file=name, reason=str(e))
            raise _Refused(self.texts.images_busy.format(name=name)) from None
        if scaled is None:
            raise _Refused(self.texts.bad_image.format(name=name))
        return scaled


def names_said(text: str, names: tuple[str, ...]) -> bool:
    """Whether ``text`` (a transcript) says one of ``names`` as words, in any case."""
    spoken = f" {_words(text)} "
    return any(f" {_words(name)} " in spoken for name in names if _words(name))


_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> str:
    """``text``'s words, lower case, one space apart (punctuation and ``_`` dropped)."""
    return " ".join(_WORD.findall(text.lower()))


def is_text_file(file_name: str | None, mime_type: str | None) -> bool:
    """Whether a file is read as text: ``text/*``, JSON, YAML…, or a known text suffix."""
    mime = (mime_type or "").split(";")[0].strip().lower()
    if mime.startswith("text/") or mime in TEXT_MIME_TYPES:
        return True
    suffix = PurePosixPath((file_name or "").lower()).suffix
    return suffix in TEXT_SUFFIXES or (file_name or "").lower() in TEXT_SUFFIXES


def _is_pdf(attachment: Attachment) -> bool:
    return attachment.mime_type == "application/pdf" or (
        attachment.file_name or ""
    ).lower().endswith(".pdf")


_AUDIO_TYPES = {"voice": "audio/ogg", "audio": "audio/mpeg", "video_note": "video/mp4"}


def _quoted(text: str) -> str:
    """``text`` as quoted back to the user: at most QUOTE_CHARS, cut at a word."""
    if len(text) <= QUOTE_CHARS:
        return text
    return text[:QUOTE_CHARS].rsplit(" ", 1)[0] + "…"


def _name(attachment: Attachment) -> str:
    if attachment.file_name:
        return attachment.file_name
    names = {
        "voice": "the voice message",
        "audio": "the audio file",
        "video_note": "the video message",
    }
    return names.get(attachment.kind, "the file")


def megabytes(size: int) -> str:
    """``size`` bytes as users read it: ``20 MB``, ``7.4 MB``."""
    return f"{size / MB:.1f} MB" if size % MB else f"{size // MB} MB"


_mb = megabytes


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
