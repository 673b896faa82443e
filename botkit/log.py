"""Logging through structlog: pretty on a terminal, JSON lines otherwise, secrets redacted."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any

import orjson
import structlog

from botkit import tracing

__all__ = ["configure_logging"]

REDACTED = "[REDACTED]"


class _Redactor:
    """Replaces every secret in every string of an event by ``[REDACTED]``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = [s for s in secrets if s]

    def __call__(
        self, _logger: Any, _method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        for key, value in event.items():
            event[key] = self._scrub(value)
        return event

    def _scrub(self, value: Any) -> Any:
        if isinstance(value, str):
            for secret in self.secrets:
                value = value.replace(secret, REDACTED)
            return value
        if isinstance(value, dict):
            return {k: self._scrub(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._scrub(v) for v in value]
        if isinstance(value, BaseException):
            return self._scrub(repr(value))
        return value


def configure_logging(level: str = "INFO", *, secrets: Iterable[str] = ()) -> None:
    """Send structlog and stdlib logs (aiogram's too) to stderr, redacting ``secrets``."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    redact = _Redactor(secrets)
    stamp = structlog.processors.TimeStamper(fmt="iso", utc=True)
    # botkit's own lines skip the stdlib round trip: they are the hot path under load.
    traced = [tracing.add_log_ids] if tracing.tracer.enabled else []
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *traced,
            structlog.processors.add_log_level,
            stamp,
            structlog.processors.format_exc_info,
            redact,
            _renderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.WriteLoggerFactory(sys.stderr),  # a line, one write
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            stamp,
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            redact,
            _renderer(),
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    # One line per HTTP request is noise at INFO, and costs real time under load.
    for chatty in ("httpx", "httpx2", "aiohttp.access"):
        logging.getLogger(chatty).setLevel(max(logging.WARNING, numeric))


def _renderer() -> Any:
    if sys.stderr.isatty():
        return structlog.dev.ConsoleRenderer()
    return structlog.processors.JSONRenderer(serializer=_json)


def _json(data: Any, **_: Any) -> str:
    return orjson.dumps(data, default=str).decode()
