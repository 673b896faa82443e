"""``python -m botkit payments list|refund CHARGE_ID``: the payments, and refunds."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    """Add ``payments`` to the CLI's subcommands."""
    payments = commands.add_parser("payments", help="payments for plans, and refunds")
    actions = payments.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser("list", help="the latest payments, newest first")
    listing.add_argument("--limit", type=int, default=50, help="how many (default 50)")
    refund = actions.add_parser(
        "refund", help="give a payment's Stars back (refundStarPayment) and end its plan"
    )
    refund.add_argument("charge_id", metavar="CHARGE_ID", help="telegram_payment_charge_id")


def run(args: argparse.Namespace) -> int:
    """Run ``payments list`` (the default) or ``payments refund``; the exit status."""
    from botkit.bot import Bot
    from botkit.log import configure_logging
    from botkit.targets import load_settings

    settings = load_settings()
    configure_logging(settings.log_level, secrets=settings.secret_values())
    bot = Bot(settings=settings)
    if args.action == "refund":
        return asyncio.run(_refund(bot, args.charge_id))
    return asyncio.run(_list(bot, getattr(args, "limit", 50)))


async def _list(bot: Any, limit: int) -> int:
    try:
        grants = await (await bot.payments.store()).recent(limit)
    finally:
        await bot.aclose()
    print("charge_id\tuser_id\tplan\tstars\tpaid_at\tends_at\trefunded_at")
    for g in grants:
        refunded = g.refunded_at.isoformat(timespec="seconds") if g.refunded_at else "-"
        print(
            f"{g.charge_id}\t{g.user_id}\t{g.plan_id}\t{g.stars}\t"
            f"{g.paid_at.isoformat(timespec='seconds')}\t"
            f"{g.ends_at.isoformat(timespec='seconds')}\t{refunded}"
        )
    return 0


async def _refund(bot: Any, charge_id: str) -> int:
    from botkit.admin import cli_admin
    from botkit.messengers.flood import FloodControl
    from botkit.runtime.telegram import messenger_for

    messenger = messenger_for(bot.settings, flood=FloodControl(max_attempts=3), inbox=False)
    try:
        admin = cli_admin(await bot.access.user_store())
        grant = await bot.payments.refund(charge_id, messenger.stars, admin)
    finally:
        await messenger.close()
        await bot.aclose()
    print(f"refunded {grant.stars} Stars to user {grant.user_id}; plan {grant.plan_id} ended")
    return 0
