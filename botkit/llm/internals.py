"""Which private names of the anthropic SDK and aiohttp botkit's fast LLM path needs, checked once.

``MessagesTransport`` posts with aiohttp and asks the SDK's private methods for headers,
retries and exceptions; it also takes over aiohttp's per-chunk read timer. A release of either
library may rename any of these. Where one is missing, botkit does not break: without the
SDK's names every call goes through the SDK's public ``messages.create`` / ``messages.stream``
(slower, correct); without aiohttp's, aiohttp keeps its own timers and proxy lookup.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass

import structlog

__all__ = ["Internals", "check"]

log = structlog.get_logger(__name__)

SDK_CLIENT_METHODS = (
    "_prepare_url",
    "_build_headers",
    "_should_retry",
    "_calculate_retry_timeout",
    "_make_status_error_from_response",
    "_make_status_error",
)
"""Methods of ``anthropic.AsyncAnthropic`` the transport calls."""

SDK_NAMES = ("anthropic._models.FinalRequestOptions.construct",)
AIOHTTP_TIMER_NAMES = (
    "aiohttp.client_proto.ResponseHandler.read_timeout",
    "aiohttp.client_proto.ResponseHandler.start_timeout",
    "aiohttp.client_proto.ResponseHandler.set_exception",
    "aiohttp.connector.Connection.protocol",
    "aiohttp.streams.StreamReader.set_exception",
)
AIOHTTP_PROXY_NAMES = ("aiohttp.helpers.get_env_proxy_for_url",)


@dataclass(frozen=True)
class Internals:
    """What is missing, by the part of the fast path that needs it."""

    missing_sdk: tuple[str, ...] = ()
    missing_timer: tuple[str, ...] = ()
    missing_proxy: tuple[str, ...] = ()

    @property
    def fast_path(self) -> bool:
        """Whether calls may be posted by ``MessagesTransport`` (else the SDK's public path)."""
        return not self.missing_sdk

    @property
    def own_read_timer(self) -> bool:
        """Whether a stream's read timeout may be kept by botkit's timer instead of aiohttp's."""
        return not self.missing_timer

    @property
    def own_proxy_lookup(self) -> bool:
        """Whether the environment's proxy may be looked up once (else aiohttp's ``trust_env``)."""
        return not self.missing_proxy

    @property
    def missing(self) -> tuple[str, ...]:
        """Every missing name."""
        return self.missing_sdk + self.missing_timer + self.missing_proxy


@functools.cache
def check() -> Internals:
    """The names this install lacks; logs one warning line naming them, once per process."""
    import anthropic

    client_class = anthropic.AsyncAnthropic
    found = Internals(
        missing_sdk=tuple(
            f"anthropic.AsyncAnthropic.{name}"
            for name in SDK_CLIENT_METHODS
            if not callable(getattr(client_class, name, None))
        )
        + _missing(SDK_NAMES),
        missing_timer=_missing(AIOHTTP_TIMER_NAMES),
        missing_proxy=_missing(AIOHTTP_PROXY_NAMES),
    )
    if found.missing:
        log.warning(
            "llm.fast_path_degraded",
            missing=list(found.missing),
            effect=_effect(found),
            anthropic=anthropic.__version__,
        )
    return found


def _missing(dotted_names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(name for name in dotted_names if not _exists(name))


def _exists(dotted: str) -> bool:
    """Whether ``module.path.Attr.attr`` can be imported and looked up."""
    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def _effect(found: Internals) -> str:
    effects = []
    if not found.fast_path:
        effects.append("LLM calls go through the SDK's public messages API (slower, correct)")
    if not found.own_read_timer:
        effects.append("aiohttp keeps a stream's read timeout itself")
    if not found.own_proxy_lookup:
        effects.append("aiohttp looks up the proxy on every call")
    return "; ".join(effects)
