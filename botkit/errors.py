"""Exceptions raised by botkit.

All of them derive from :class:`BotkitError`::

    BotkitError
    ├── ConfigError            misconfiguration; the message says what to set
    ├── LLMError               the model could not answer
    │   ├── LLMAuthError           the API rejected the key (wrong or revoked)
    │   ├── LLMOverloadedError     overloaded / rate limited after the SDK's retries
    │   └── PromptTooLongError     the request does not fit the context window
    ├── ToolError              raised by a tool to report a failure to the model
    ├── MessengerError         the messenger could not deliver or receive
    └── SessionError           a session file could not be read or written
"""

from __future__ import annotations

__all__ = [
    "BotkitError",
    "ConfigError",
    "LLMAuthError",
    "LLMError",
    "LLMOverloadedError",
    "MessengerError",
    "PromptTooLongError",
    "SessionError",
    "ToolError",
]


class BotkitError(Exception):
    """Root of every error botkit raises."""


class ConfigError(BotkitError):
    """The bot is misconfigured; the message says how to fix it."""


class LLMError(BotkitError):
    """The language model could not produce an answer."""


class LLMAuthError(LLMError):
    """The Messages API rejected ANTHROPIC_API_KEY (HTTP 401)."""


class LLMOverloadedError(LLMError):
    """The model is overloaded or rate limited, even after retries."""


class PromptTooLongError(LLMError):
    """The request is larger than the model's context window."""


class ToolError(BotkitError):
    """Raised inside a tool to send a clean error text to the model."""


class MessengerError(BotkitError):
    """The messenger could not deliver or receive a message."""


class SessionError(BotkitError):
    """A session file could not be read or written."""
