"""Signing in to the console without passwords: a one-time link, or a Mini App's ``initData``.

A link comes from ``/console`` (admins only): a random token whose SHA-256 the user store
keeps until it is taken, once, within ``link_seconds``. Inside Telegram the console opens as
a Mini App, and Telegram hands it ``initData`` signed with a key made from the bot's token
(HMAC-SHA256 of the token with the key ``WebAppData``): its ``hash`` is the HMAC-SHA256, under
that key, of the other fields sorted by name as ``key=value`` lines; its ``auth_date`` (Unix
time) must be recent. Either way the console then keeps a session in memory (it is one
process: the one that serves it), named by a random token in an HttpOnly cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl

from botkit.errors import BotkitError
from botkit.stores.console_links import ConsoleLinkStore

__all__ = [
    "InitDataRefused",
    "LinkRefused",
    "Session",
    "Sessions",
    "check_init_data",
    "make_link_token",
    "take_link_token",
]


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class LinkRefused(BotkitError):
    """A sign-in link that signs nobody in: ``expired`` says which of the two reasons."""

    def __init__(self, expired: bool) -> None:
        super().__init__("expired" if expired else "used or unknown")
        self.expired = expired


class InitDataRefused(BotkitError):
    """Mini App ``initData`` that is not Telegram's, too old, or without a user."""


async def make_link_token(store: ConsoleLinkStore, user_id: int, seconds: float) -> str:
    """A new one-time sign-in token for ``user_id``, good for ``seconds`` (its hash kept)."""
    token = secrets.token_urlsafe(32)
    expires = datetime.now(UTC) + timedelta(seconds=seconds)
    await store.add_console_link(_digest(token), user_id, expires)
    return token


async def take_link_token(store: ConsoleLinkStore, token: str) -> int:
    """The user the token signs in (it is spent now), or :class:`LinkRefused`."""
    link = await store.take_console_link(_digest(token))
    if link is None:
        raise LinkRefused(expired=False)
    if link.expires_at <= datetime.now(UTC):
        raise LinkRefused(expired=True)
    return link.user_id


def _secret_key(bot_token: str) -> bytes:
    return hmac.new(b"WebAppData", bot_token.encode(), hashlib.sha256).digest()


def _data_check_string(fields: dict[str, str]) -> str:
    return "\n".join(f"{key}={fields[key]}" for key in sorted(fields) if key != "hash")


def check_init_data(
    init_data: str, bot_token: str, max_age: float, *, now: float | None = None
) -> int:
    """The Telegram user id in ``init_data`` signed with ``bot_token`` at most ``max_age``
    seconds ago; else :class:`InitDataRefused`, saying why."""
    fields = dict(parse_qsl(init_data, keep_blank_values=True))
    given = fields.get("hash", "")
    expected = hmac.new(
        _secret_key(bot_token), _data_check_string(fields).encode(), hashlib.sha256
    ).hexdigest()
    if not given or not hmac.compare_digest(given, expected):
        raise InitDataRefused("initData is not signed with this bot's token")
    try:
        signed_at = int(fields["auth_date"])
        user_id = int(json.loads(fields["user"])["id"])
    except (KeyError, ValueError, TypeError) as e:
        raise InitDataRefused(f"initData lacks a user or auth_date: {e}") from None
    age = (time.time() if now is None else now) - signed_at
    if age > max_age:
        raise InitDataRefused(f"initData is {age:.0f} s old (at most {max_age:.0f} s)")
    return user_id


@dataclass(slots=True)
class Session:
    """Someone signed in: who, until when, and the token their forms must carry."""

    user_id: int
    expires_at: float
    """``time.monotonic()`` after which it is over."""
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    """Sent with every form of theirs: a request that changes something without it is refused."""


class Sessions:
    """The sessions of one console, in memory, by the hash of their cookie's token."""

    def __init__(self, seconds: float, most: int) -> None:
        self.seconds = seconds
        self.most = most
        self._by_digest: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_digest)

    def start(self, user_id: int) -> str:
        """A new session for ``user_id``; its token (for the cookie)."""
        token = secrets.token_urlsafe(32)
        self._by_digest[_digest(token)] = Session(user_id, time.monotonic() + self.seconds)
        while len(self._by_digest) > self.most:
            self._by_digest.popitem(last=False)
        return token

    def get(self, token: str | None) -> Session | None:
        """The live session of ``token``, or ``None`` (an expired one is dropped)."""
        if not token:
            return None
        digest = _digest(token)
        session = self._by_digest.get(digest)
        if session is not None and session.expires_at <= time.monotonic():
            del self._by_digest[digest]
            return None
        return session

    def end(self, token: str | None) -> None:
        """Forget the session of ``token``, if any."""
        if token:
            self._by_digest.pop(_digest(token), None)
