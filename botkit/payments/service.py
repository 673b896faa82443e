"""Selling plans for Telegram Stars: ``/plans``, invoices, checkouts, grants and refunds.

The bot's pipeline hands this service two things at one point each: a checkout
(``pre_checkout_query``, answered within Telegram's 10 s) and a payment
(``successful_payment``, granted exactly once by its charge id, recorded before the user is
thanked). The budget gate reads :meth:`Payments.daily_budget`. Everything Telegram-specific
is behind the messenger's ``StarSales`` (``TelegramMessenger.stars``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Protocol

import structlog
from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, Metric

from botkit.access import Access
from botkit.commands import ButtonHandler, CommandHandler, PressAnswer
from botkit.config import Settings
from botkit.errors import BotkitError, MessengerError, StoreError
from botkit.messengers.base import (
    Button,
    ButtonPress,
    Checkout,
    Incoming,
    Messenger,
    Reply,
    StarSales,
)
from botkit.metrics import Metrics
from botkit.options import BotOptions
from botkit.payments.plans import SUBSCRIPTION_PERIOD, Invoice, Plan
from botkit.payments.store import Grant, NewPayment, PaymentStore, payment_store_for
from botkit.payments.texts import PaymentTexts

if TYPE_CHECKING:
    from botkit.admin import Admin

__all__ = ["STARS", "PaymentHost", "Payments", "RefundError", "RefundsCounted"]

log = structlog.get_logger(__name__)

STARS = "XTR"
BUY = "buy"
"""The data prefix of Buy buttons (``buy:<plan id>``)."""
PLAN_CACHE_SECONDS = 3.0
"""How long a user's plan read for the budget gate is trusted (a grant or refund in this
process takes effect at once; one on another worker within this)."""


class RefundError(BotkitError):
    """A refund that cannot be made: an unknown charge, or one refunded before."""


class PaymentHost(Protocol):
    """What the payments need of a bot."""

    settings: Settings
    options: BotOptions
    buttons: dict[str, ButtonHandler]
    metrics: Metrics
    messenger: Messenger | None

    def command(
        self, name: str, description: str, *, admin_only: bool = False, hidden: bool = False
    ) -> Callable[[CommandHandler], CommandHandler]:
        """Register a command."""
        ...

    async def authorize(self, message: Incoming) -> str | None:
        """``None`` admits the message's sender; a text refuses them."""
        ...


class Payments:
    """The plans a bot sells, their payments and the budgets they grant."""

    def __init__(self, host: PaymentHost, plans: Iterable[Plan], access: Access) -> None:
        self.host = host
        self.access = access
        self.plans = {plan.id: plan for plan in plans}
        """The plans on sale, by id."""
        self._store: PaymentStore | None = None
        self._cache: dict[int, tuple[float, Grant | None]] = {}
        registry = host.metrics.registry
        self.paid = Counter(
            "botkit_payments", "Payments granted, by plan", ["plan"], registry=registry
        )
        self.stars = Counter(
            "botkit_payment_stars", "Telegram Stars received, by plan", ["plan"], registry=registry
        )
        self.refunds = RefundsCounted()
        registry.register(self.refunds)
        self.checkouts = Counter(
            "botkit_checkouts", "Checkouts answered, by outcome", ["outcome"], registry=registry
        )

    def __bool__(self) -> bool:
        return bool(self.plans)

    @property
    def texts(self) -> PaymentTexts:
        """What users are told (``BotOptions.payment_texts``)."""
        return self.host.options.payment_texts

    def register(self) -> None:
        """Add ``/plans``, ``/plan``, ``/terms``, ``/paysupport`` and the Buy buttons (only
        when plans are sold)."""
        if not self.plans:
            return
        self.access.plan_budget = self.daily_budget
        if any(plan.role for plan in self.plans.values()):
            self.access.plan_role = self.role
        self.access.budget_hint = self.texts.budget_hint
        command = self.host.command
        command("plans", "plans to buy with Telegram Stars")(self._list_plans)
        command("plan", "your plan and what is left today")(self._show_plan)
        command("terms", "terms of purchase")(self._static(lambda: self.texts.terms_text))
        command("paysupport", "help with a payment")(
            self._static(lambda: self.texts.paysupport_text)
        )
        self.host.buttons[BUY] = self._buy
        self.host.metrics.refresh_on_scrape(self._count_refunds)

    async def store(self) -> PaymentStore:
        """The payments store, beside the user store, opened on first use."""
        if self._store is None:
            self._store = payment_store_for(await self.access.user_store())
        return self._store

    async def close(self) -> None:
        """Close the payments store, if it was opened."""
        if self._store is not None:
            await self._store.close()
            self._store = None

    # ---- the budget gate ----------------------------------------------------------------

    async def daily_budget(self, user_id: int) -> int | None:
        """The daily token budget of the user's current plan; ``None`` without one."""
        grant = await self.current_plan(user_id)
        return None if grant is None else grant.daily_tokens

    async def role(self, user_id: int) -> str | None:
        """The role the user's current plan gives; ``None`` without one."""
        grant = await self.current_plan(user_id)
        return None if grant is None else grant.role

    async def current_plan_id(self, user_id: int) -> str | None:
        """The id of the user's current plan; ``None`` without one."""
        grant = await self.current_plan(user_id)
        return None if grant is None else grant.plan_id

    async def current_plan(self, user_id: int) -> Grant | None:
        """The user's plan now (read at most every few seconds: every turn asks)."""
        now = datetime.now(UTC)
        cached = self._cache.get(user_id)
        if cached is not None and time.monotonic() - cached[0] < PLAN_CACHE_SECONDS:
            grant = cached[1]
            return grant if grant is not None and grant.active(now) else None
        grant = await (await self.store()).active(user_id, now)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[user_id] = (time.monotonic(), grant)
        return grant

    # ---- buying --------------------------------------------------------------------------

    async def _list_plans(self, message: Incoming, args: str) -> str | Reply:
        texts = self.texts
        lines = [texts.plans_intro]
        rows: list[tuple[Button, ...]] = []
        for plan in self.plans.values():
            period = (
                texts.subscription_period
                if plan.subscription
                else texts.one_off_period.format(days=plan.days)
            )
            line = texts.plan_line.format(
                title=plan.title,
                stars=plan.stars,
                period=period,
                tokens=f"{plan.daily_tokens:,}",
                description=plan.description,
            )
            if unlocked := [*plan.models, *plan.personas]:
                line += " " + texts.unlocks.format(names=", ".join(unlocked))
            lines.append(line)
            label = texts.buy_button.format(title=plan.title, stars=plan.stars)
            rows.append((Button(label, f"{BUY}:{plan.id}"),))
        return Reply("\n\n".join(lines), tuple(rows))

    async def _buy(self, press: ButtonPress, plan_id: str) -> PressAnswer:
        """A Buy press: an invoice at today's price (a subscription: a link to subscribe)."""
        plan = self.plans.get(plan_id)
        if plan is None:
            return PressAnswer(self.texts.unknown_plan_text)
        sales = self._sales()
        if sales is None:
            return PressAnswer(self.texts.payments_unavailable_text)
        payload = Invoice(plan.id, plan.stars, press.user_id).payload()
        if plan.subscription:
            link = await sales.subscription_link(
                plan.title, plan.description, payload, plan.stars, SUBSCRIPTION_PERIOD
            )
            text = self.texts.subscribe_text.format(title=plan.title, stars=plan.stars)
            label = self.texts.subscribe_button.format(stars=plan.stars)
            await sales.send_link(press.chat_id, text, label, link)
        else:
            await sales.send_invoice(
                press.chat_id, plan.title, plan.description, payload, plan.stars
            )
        log.info("payments.invoice_sent", user_id=press.user_id, plan=plan.id, stars=plan.stars)
        return PressAnswer()

    async def answer_checkout(self, checkout: Checkout, messenger: Messenger) -> None:
        """Answer a ``pre_checkout_query``: ok only for a plan on sale at its current price,
        bought by the user it was made for, whom the gates admit."""
        try:
            refusal = await self._checkout_refusal(checkout)
        except Exception:  # the store away, say: stop this payment rather than leave it
            log.exception("payments.checkout_failed", user_id=checkout.user_id)
            refusal = self.host.options.error_text
        sales = _sales_of(messenger)
        if sales is None:
            log.error("payments.checkout_unanswerable", user_id=checkout.user_id)
            return
        try:
            await sales.answer_checkout(checkout.query_id, refusal)
        except MessengerError as e:  # too late, or Telegram away: the payment does not happen
            log.warning("payments.checkout_not_answered", user_id=checkout.user_id, error=str(e))
            return
        self.checkouts.labels("ok" if refusal is None else "refused").inc()
        log.info(
            "payments.checkout",
            user_id=checkout.user_id,
            payload=checkout.payload,
            ok=refusal is None,
            refusal=refusal,
        )

    async def _checkout_refusal(self, checkout: Checkout) -> str | None:
        texts = self.texts
        invoice = Invoice.parse(checkout.payload)
        plan = self.plans.get(invoice.plan_id) if invoice is not None else None
        if invoice is None or plan is None:
            return texts.unknown_plan_text
        if invoice.user_id != checkout.user_id:
            return texts.not_your_invoice_text
        prices = {invoice.stars, checkout.total_amount}
        if checkout.currency != STARS or prices != {plan.stars}:
            return texts.price_changed_text
        if await self.host.authorize(checkout.as_incoming()):
            return texts.refused_text
        return None

    # ---- paying --------------------------------------------------------------------------

    async def take_payment(self, message: Incoming, messenger: Messenger) -> None:
        """Grant the plan of a ``successful_payment`` once (by its charge id), then thank the
        user; a payment seen before is not granted again (its thanks are sent again, as a
        crash may have come between the record and the thanks). A payment for a plan no longer
        configured is recorded, granting nothing, so the operator can refund it."""
        payment = message.payment
        assert payment is not None
        invoice = Invoice.parse(payment.payload)
        plan = self.plans.get(invoice.plan_id) if invoice is not None else None
        paid = NewPayment(
            charge_id=payment.charge_id,
            user_id=message.user_id,
            plan=plan,
            stars=payment.total_amount,
            paid_at=datetime.now(UTC),
            paid_until=payment.subscription_expires_at,
            paid_for=invoice.plan_id if invoice is not None else "",
        )
        grant = await self._record(paid)
        if grant is None:
            return
        if plan is None:
            log.error(
                "payments.unknown_plan_paid",
                user_id=message.user_id,
                charge_id=payment.charge_id,
                payload=payment.payload,
                stars=payment.total_amount,
                recorded_as=grant.plan_id,
            )
            await messenger.send_text(message.chat_id, self.texts.paysupport_text)
            return
        self._cache.pop(message.user_id, None)
        renewal = payment.is_recurring and not payment.is_first_recurring
        text = self.texts.renewed_text if renewal else self.texts.thanks_text
        await messenger.send_text(
            message.chat_id, text.format(title=plan.title, ends=_day(grant.ends_at))
        )

    async def _record(self, paid: NewPayment) -> Grant | None:
        """The payment's record: made now (and counted), or the one made before."""
        store = await self.store()
        try:
            grant = await store.grant(paid)
        except StoreError as e:  # Telegram has the money: the operator must grant it by hand
            log.error(
                "payments.not_recorded",
                user_id=paid.user_id,
                plan=paid.plan_id,
                stars=paid.stars,
                charge_id=paid.charge_id,
                error=str(e),
            )
            raise
        if grant is not None:
            self._count(grant)
            return grant
        log.info("payments.seen_before", user_id=paid.user_id, charge_id=paid.charge_id)
        return await store.get(paid.charge_id)

    def _count(self, grant: Grant) -> None:
        self.stars.labels(grant.plan_id).inc(grant.stars)
        if grant.plan_id not in self.plans:  # recorded, granting nothing
            return
        self.paid.labels(grant.plan_id).inc()
        log.info(
            "payments.granted",
            user_id=grant.user_id,
            plan=grant.plan_id,
            stars=grant.stars,
            charge_id=grant.charge_id,
            ends_at=grant.ends_at.isoformat(),
        )

    # ---- refunds -------------------------------------------------------------------------

    async def refund(self, charge_id: str, sales: StarSales, admin: Admin) -> Grant:
        """Give a payment's Stars back (``refundStarPayment``), cancel its subscription if it
        is one (``editUserStarSubscription``), then end its plan; ``admin`` writes the audit
        line (``admin.action``, ``payments.refund``). Raises ``RefundError`` for an unknown
        or already refunded charge."""
        store = await self.store()
        grant = await store.get(charge_id)
        if grant is None:
            raise RefundError(f"no payment {charge_id} is recorded")
        if grant.refunded_at is not None:
            raise RefundError(f"payment {charge_id} was refunded on {grant.refunded_at:%Y-%m-%d}")
        try:
            await sales.refund(grant.user_id, charge_id)
        except MessengerError as e:
            if "ALREADY_REFUNDED" not in str(e.__cause__ or e):
                raise
        if grant.subscription:  # else Telegram renews it, and the renewal grants the plan again
            await sales.cancel_subscription(grant.user_id, charge_id)
        revoked = await store.revoke(charge_id, datetime.now(UTC)) or grant
        self._cache.pop(grant.user_id, None)
        admin.audit(
            "payments.refund",
            charge_id,
            user_id=grant.user_id,
            plan=grant.plan_id,
            stars=grant.stars,
        )
        return revoked

    async def _count_refunds(self) -> None:
        self.refunds.by_plan = await (await self.store()).refunds()

    # ---- showing -------------------------------------------------------------------------

    async def _show_plan(self, message: Incoming, args: str) -> str:
        grant = await self.current_plan(message.user_id)
        texts = self.texts
        budget = self.host.settings.daily_token_budget if grant is None else grant.daily_tokens
        if budget is None:
            return texts.free_unlimited_text
        used = await (await self.access.user_store()).usage_on(message.user_id, _today())
        left = f"{max(0, budget - used):,}"
        if grant is None:
            return texts.free_plan_text.format(tokens=f"{budget:,}", left=left)
        plan = self.plans.get(grant.plan_id)
        return texts.current_plan_text.format(
            title=plan.title if plan else grant.plan_id, ends=_day(grant.ends_at), left=left
        )

    def _static(self, text: Callable[[], str]) -> CommandHandler:
        async def answer(message: Incoming, args: str) -> str:
            return text()

        return answer

    def _sales(self) -> StarSales | None:
        return _sales_of(self.host.messenger)


class RefundsCounted:
    """``botkit_refunds_total`` by plan, as the store counts them when the metrics are scraped:
    refunds are made by ``python -m botkit payments refund``, not by the bot's processes."""

    def __init__(self) -> None:
        self.by_plan: dict[str, int] = {}
        """The count at the last scrape."""

    def describe(self) -> list[Metric]:
        """The metric without samples (the registry checks names with it)."""
        return [self._family()]

    def collect(self) -> Iterator[Metric]:
        """The counts read at the last scrape."""
        family = self._family()
        for plan_id, count in sorted(self.by_plan.items()):
            family.add_metric([plan_id], count)
        yield family

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily("botkit_refunds", "Payments refunded, by plan", labels=["plan"])


def _sales_of(messenger: Messenger | None) -> StarSales | None:
    sales: StarSales | None = getattr(messenger, "stars", None)
    return sales


def _day(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M} UTC"


def _today() -> date:
    return datetime.now(UTC).date()
