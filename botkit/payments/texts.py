"""What users are told about plans and payments (``BotOptions.payment_texts``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PaymentTexts"]


@dataclass(frozen=True)
class PaymentTexts:
    """Texts of ``/plans``, ``/plan``, ``/terms``, ``/paysupport`` and of buying a plan."""

    plans_intro: str = "Plans (paid in Telegram Stars):"
    plan_line: str = "**{title}** — {stars} ⭐ {period}: {tokens} tokens a day. {description}"
    """One plan in ``/plans``; ``{title}``, ``{stars}``, ``{period}``, ``{tokens}``,
    ``{description}`` are filled in."""
    unlocks: str = "Unlocks {names}."
    """Follows a plan's line when it unlocks models or personas (``/model``, ``/persona``)."""
    one_off_period: str = "for {days} days"
    subscription_period: str = "a month"
    buy_button: str = "Buy {title} — {stars} ⭐"
    subscribe_text: str = "Subscribe to {title} for {stars} ⭐ a month:"
    subscribe_button: str = "Subscribe — {stars} ⭐"
    no_plans_text: str = "There are no plans to buy."
    payments_unavailable_text: str = "Payments are not available here."
    unknown_plan_text: str = "This plan is no longer sold. Send /plans to see the current ones."
    price_changed_text: str = (
        "The price of this plan has changed. Send /plans for a new invoice at the current price."
    )
    not_your_invoice_text: str = "This invoice was made for someone else. Send /plans."
    refused_text: str = "Sorry, you can't buy plans here."
    """Shown at checkout to a user the gates do not admit (blocked, or never admitted)."""
    thanks_text: str = "Thank you! Your plan **{title}** is active until {ends}."
    renewed_text: str = "Thank you! Your plan **{title}** is renewed until {ends}."
    free_plan_text: str = (
        "You have no plan: the free allowance of {tokens} tokens a day. Left today: {left} tokens."
    )
    free_unlimited_text: str = "You have no plan."
    current_plan_text: str = "Your plan: **{title}**, until {ends}. Left today: {left} tokens."
    budget_hint: str = "Send /plans to raise your daily allowance."
    """Added to ``BotOptions.budget_text`` when plans are sold."""
    terms_text: str = (
        "Plans are digital services sold for Telegram Stars. A plan raises your daily "
        "allowance of tokens for its period; a subscription renews every 30 days until you "
        "cancel it in Telegram. Refunds are at the operator's discretion: see /paysupport."
    )
    paysupport_text: str = (
        "For help with a payment, write to this bot's operator with the date of the payment; "
        "Telegram's support cannot help with purchases made from bots."
    )
