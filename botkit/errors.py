"""Exceptions raised by botkit.

All of them derive from :class:`BotkitError`::

    BotkitError
    ├── ConfigError            misconfiguration; the message says what to set
    ├── LLMError               the model could not answer
    │   ├── LLMAuthError           the API rejected the key (wrong or revoked)
    │   ├── LLMOverloadedError     overloaded / rate limited after the SDK's retries
    │   ├── PromptTooLongError     the request does not fit the context window
    │   └── MediaTooLargeError     the API refused the request's media (size, pages, pixels)
    ├── ToolError              raised by a tool to report a failure to the model
    ├── MessengerError         the messenger could not deliver or receive
    ├── MCPConnectError        an MCP server could not be started or connected to
    ├── SessionError           a session could not be read or written (file or database)
    ├── StoreError             the user store's database failed: unreachable, locked, cut off
    └── VoiceError             the speech API could not transcribe or speak (down, slow, refusing)

Vendor exceptions (anthropic, aiogram, asyncpg, sqlite3) are converted once, in the module that
talks to the vendor, with ``raise ... from e``: the original stays in ``__cause__``.
"""

from __future__ import annotations

__all__ = [
    "BotkitError",
    "ConfigError",
    "LLMAuthError",
    "LLMError",
    "LLMOverloadedError",
    "MCPConnectError",
    "MediaTooLargeError",
    "MessengerError",
    "PromptTooLongError",
    "SessionError",
    "StoreError",
    "ToolError",
    "VoiceError",
]


class BotkitError(Exception):
    """Root of every error botkit raises."""


class ConfigError(BotkitError):
    """The bot is misconfigured; the message says how to fix it."""


class LLMError(BotkitError):
    """The language model could not produce an answer."""

    request_id: str | None = None
    """The Messages API's ``request-id`` of the failed call, when it answered at all."""


class LLMAuthError(LLMError):
    """The Messages API rejected ANTHROPIC_API_KEY (HTTP 401)."""


class LLMOverloadedError(LLMError):
    """The model is overloaded or rate limited, even after retries."""


class PromptTooLongError(LLMError):
    """The request is larger than the model's context window."""


class MediaTooLargeError(LLMError):
    """The Messages API refused the request for its media: a picture over 5 MB or 8000 px,
    over 100 PDF pages, or a body over 32 MB (HTTP 400 or 413)."""


class ToolError(BotkitError):
    """Raised inside a tool to send a clean error text to the model."""


class MessengerError(BotkitError):
    """The messenger could not deliver or receive a message."""


class MCPConnectError(BotkitError):
    """An MCP server could not be started or connected to."""


class SessionError(BotkitError):
    """A session could not be read or written (a JSONL file, or the session database)."""


class StoreError(BotkitError):
    """The user store's database failed: unreachable, locked, or the connection was lost.

    The message says what failed, never with a password; the driver's error is the cause.
    """


class VoiceError(BotkitError):
    """The speech API (BOTKIT_TRANSCRIBE_URL, BOTKIT_SPEECH_URL) failed: down, slow or refusing."""
