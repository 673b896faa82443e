"""Paid plans bought with Telegram Stars (``Bot(plans=[Plan(...)])`` or BOTKIT_PLANS).

Kept light: ``botkit.options`` imports the texts from here, so the service
(``botkit.payments.service``) is imported by the bot, not by this package.
"""

from botkit.payments.plans import Plan, load_plans
from botkit.payments.texts import PaymentTexts

__all__ = ["PaymentTexts", "Plan", "load_plans"]
