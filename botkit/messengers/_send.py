"""The Bot API's hot sends (``sendMessage``, ``sendRichMessage``, drafts, ``sendChatAction``)
as JSON.

aiogram builds a pydantic model for every call, encodes it as multipart form data, runs its
middleware chain and validates the answer into a ``Message``: hundreds of microseconds of CPU
per call, paid several times a streamed turn. :class:`JsonSender` posts the same parameters as
JSON through aiogram's own aiohttp session and reads the answer with orjson. Only a failed
answer builds aiogram's method model, so aiogram raises exactly the exception it would have
(``TelegramRetryAfter``, ``TelegramBadRequest``, ...) and flood control works as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)
from aiogram.methods import (
    SendChatAction,
    SendMessage,
    SendMessageDraft,
    SendRichMessage,
    SendRichMessageDraft,
    SetMessageReaction,
    TelegramMethod,
)
from aiohttp import ClientError, ClientTimeout

from botkit import tracing

if TYPE_CHECKING:
    from aiogram import Bot
    from aiogram.client.session.aiohttp import AiohttpSession

    from botkit.metrics import Metrics

_JSON = {"content-type": "application/json"}


class JsonSender:
    """aiogram's hot send methods, posted as JSON; aiogram's exceptions when one fails."""

    def __init__(self, bot: Bot, session: AiohttpSession) -> None:
        """Send as ``bot`` through ``session`` (the aiohttp session ``bot`` itself uses)."""
        self.bot = bot
        self.session = session
        self.metrics: Metrics | None = None
        """Where each request is counted by method and outcome, if anywhere."""

    async def send_message(self, **params: Any) -> Any:
        """``sendMessage``; the message sent, as raw JSON."""
        return await self.post(SendMessage, params)

    async def send_message_draft(self, **params: Any) -> Any:
        """``sendMessageDraft``; ``True``."""
        return await self.post(SendMessageDraft, params)

    async def send_rich_message(self, **params: Any) -> Any:
        """``sendRichMessage`` (Bot API 10.1); the message sent, as raw JSON."""
        return await self.post(SendRichMessage, params)

    async def send_rich_message_draft(self, **params: Any) -> Any:
        """``sendRichMessageDraft`` (Bot API 10.1, private chats); ``True``."""
        return await self.post(SendRichMessageDraft, params)

    async def set_message_reaction(self, **params: Any) -> Any:
        """``setMessageReaction``; ``True``."""
        return await self.post(SetMessageReaction, params)

    async def send_chat_action(self, **params: Any) -> Any:
        """``sendChatAction``; ``True``."""
        return await self.post(SendChatAction, params)

    async def post(self, method: type[TelegramMethod[Any]], params: dict[str, Any]) -> Any:
        """Call ``method`` with ``params`` (JSON values), counted as aiogram's requests are."""
        try:
            with tracing.tracer.telegram(method.__api_method__):
                result = await self._request(method, params)
        except Exception as e:
            if self.metrics is not None:
                self.metrics.telegram_request(method.__api_method__, request_outcome(e))
            raise
        if self.metrics is not None:
            self.metrics.telegram_request(method.__api_method__, "ok")
        return result

    async def _request(self, method: type[TelegramMethod[Any]], params: dict[str, Any]) -> Any:
        """One POST: the answer's ``result``, or the exception aiogram raises for the answer."""
        # aiogram leaves out None and empty strings too
        sent = {key: value for key, value in params.items() if value is not None and value != ""}
        session, token = self.session, self.bot.token
        url = session.api.api_url(token=token, method=method.__api_method__)
        client = await session.create_session()
        try:
            async with client.post(
                url,
                data=orjson.dumps(sent),
                headers=_JSON,
                timeout=ClientTimeout(total=session.timeout),
            ) as response:
                status, body = response.status, await response.read()
        except TimeoutError as e:
            raise TelegramNetworkError(method(**sent), "Request timeout error") from e
        except ClientError as e:
            error = TelegramNetworkError(method(**sent), f"{type(e).__name__}: {e}")
            if (masked := without_token(error, token)) is not None:
                raise masked from None
            raise error from e
        answer = _loads(body)
        if 200 <= status <= 226 and isinstance(answer, dict) and answer.get("ok") is True:
            return answer.get("result")
        text = body.decode(errors="replace")
        return session.check_response(self.bot, method(**sent), status, text).result


def without_token(error: TelegramNetworkError, token: str) -> TelegramNetworkError | None:
    """``error`` remade with the bot token masked if its text quotes it (aiohttp's errors
    quote the URL, and the token is part of it); ``None`` if it does not."""
    if token not in error.message:
        return None
    return TelegramNetworkError(error.method, error.message.replace(token, "***"))


def _loads(body: bytes) -> Any:
    """``body`` as JSON; ``None`` when it is not (aiogram then says why)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def request_outcome(error: Exception) -> str:
    """The ``outcome`` label of a failed Bot API request."""
    if isinstance(error, TelegramRetryAfter):
        return "flood"
    if isinstance(error, TelegramServerError):
        return "server"
    if isinstance(error, TelegramAPIError) and not isinstance(error, TelegramNetworkError):
        return "refused"
    return "network"
