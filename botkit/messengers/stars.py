"""Telegram Stars on aiogram: invoices, subscription links, checkouts and refunds.

Reading a ``pre_checkout_query`` or a ``successful_payment`` into botkit's own records
(``Checkout``, ``StarPayment``) happens here too, so nothing above the messenger sees aiogram.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from typing import TypeVar

from aiogram import Bot as AiogramBot
from aiogram.exceptions import AiogramError
from aiogram.types import (
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LabeledPrice,
    PreCheckoutQuery,
    SuccessfulPayment,
)

from botkit.errors import MessengerError
from botkit.messengers.base import Checkout, StarPayment
from botkit.messengers.flood import FloodControl

__all__ = ["STARS", "TelegramStars", "checkout_of", "payment_of"]

STARS = "XTR"
"""The currency of Telegram Stars: digital goods are sold in it, with no payment provider."""
MAX_CHECKOUT_ERROR = 255
T = TypeVar("T")


class TelegramStars:
    """Selling for Stars through one aiogram bot, paced by the messenger's flood control."""

    def __init__(self, api: AiogramBot, flood: FloodControl) -> None:
        self.api = api
        self.flood = flood

    async def send_invoice(
        self, chat_id: int, title: str, description: str, payload: str, stars: int
    ) -> None:
        """Send a one-off invoice of ``stars`` Stars (``sendInvoice``, no provider token)."""
        call = partial(
            self.api.send_invoice,
            chat_id=chat_id,
            title=title,
            description=description,
            payload=payload,
            currency=STARS,
            prices=[LabeledPrice(label=title, amount=stars)],
            provider_token="",
        )
        await self._send(chat_id, "sendInvoice", call)

    async def subscription_link(
        self, title: str, description: str, payload: str, stars: int, period: int
    ) -> str:
        """A ``createInvoiceLink`` link charging ``stars`` Stars every ``period`` seconds."""
        call = partial(
            self.api.create_invoice_link,
            title=title,
            description=description,
            payload=payload,
            currency=STARS,
            prices=[LabeledPrice(label=title, amount=stars)],
            provider_token="",
            subscription_period=period,
        )
        return await self._send(0, "createInvoiceLink", call)

    async def send_link(self, chat_id: int, text: str, label: str, url: str) -> None:
        """Send ``text`` with one URL button under it."""
        keyboard = InlineKeyboardMarkup(
            inline_keyboard=[[InlineKeyboardButton(text=label, url=url)]]
        )
        call = partial(self.api.send_message, chat_id, text, reply_markup=keyboard)
        await self._send(chat_id, "sendMessage", call)

    async def answer_checkout(self, query_id: str, error: str | None) -> None:
        """``answerPreCheckoutQuery``: ok, or refused with ``error`` shown to the user."""
        message = error[:MAX_CHECKOUT_ERROR] if error else None
        call = partial(
            self.api.answer_pre_checkout_query, query_id, ok=error is None, error_message=message
        )
        await self._send(0, "answerPreCheckoutQuery", call)

    async def refund(self, user_id: int, charge_id: str) -> None:
        """``refundStarPayment``: the Stars of ``charge_id`` go back to ``user_id``."""
        call = partial(
            self.api.refund_star_payment, user_id=user_id, telegram_payment_charge_id=charge_id
        )
        await self._send(0, "refundStarPayment", call)

    async def cancel_subscription(self, user_id: int, charge_id: str) -> None:
        """``editUserStarSubscription`` with ``is_canceled``: the subscription of ``charge_id``
        is not renewed (the period paid for runs out as it would)."""
        call = partial(
            self.api.edit_user_star_subscription,
            user_id=user_id,
            telegram_payment_charge_id=charge_id,
            is_canceled=True,
        )
        await self._send(0, "editUserStarSubscription", call)

    async def _send(self, chat_id: int, method: str, call: Callable[[], Awaitable[T]]) -> T:
        """One paced request; aiogram's errors that flood control leaves raw as MessengerError."""
        try:
            return await self.flood.send(chat_id, call)
        except AiogramError as e:
            raise MessengerError(f"Telegram {method} failed: {type(e).__name__}") from e


def checkout_of(query: PreCheckoutQuery) -> Checkout:
    """A ``pre_checkout_query`` as botkit's ``Checkout``."""
    return Checkout(
        query_id=query.id,
        user_id=query.from_user.id,
        currency=query.currency,
        total_amount=query.total_amount,
        payload=query.invoice_payload,
        first_name=query.from_user.first_name,
    )


def payment_of(paid: SuccessfulPayment) -> StarPayment:
    """A ``successful_payment`` as botkit's ``StarPayment``."""
    expires = paid.subscription_expiration_date
    return StarPayment(
        charge_id=paid.telegram_payment_charge_id,
        currency=paid.currency,
        total_amount=paid.total_amount,
        payload=paid.invoice_payload,
        subscription_expires_at=datetime.fromtimestamp(expires, UTC) if expires else None,
        is_recurring=bool(paid.is_recurring),
        is_first_recurring=bool(paid.is_first_recurring),
    )
