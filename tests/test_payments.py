"""Plans bought with Telegram Stars (#33): the real aiogram client against the fake Bot API
(invoices, checkouts, payments, refunds), the real anthropic SDK against the fake Messages
API, on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg  # type: ignore[import-untyped]
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from structlog.testing import capture_logs

from botkit import Bot, Incoming, Plan, tool
from botkit.errors import ConfigError
from botkit.payments import load_plans
from botkit.payments.store import Grant
from botkit.testing import FakeAnthropicServer, FakeReply, FakeTelegramServer, running
from botkit.testing.kit import ask, fake_llm, make_settings
from botkit.testing.telegram import SentMessage

ROOT = Path(__file__).resolve().parent.parent
USER = 4201
OTHER = 4202
FREE = 100
"""The free daily budget in these tests: one turn uses it up."""
PRO = Plan(
    id="pro",
    title="Pro",
    description="A million tokens a day",
    stars=50,
    daily_tokens=1_000_000,
)
MONTHLY = Plan(
    id="monthly",
    title="Monthly",
    description="Renewed every month",
    stars=120,
    daily_tokens=2_000_000,
    subscription=True,
)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Settings that put users (and payments) in SQLite, or in a migrated PostgreSQL."""
    if request.param == "sqlite":
        return {}
    return {"database_url": SecretStr(request.getfixturevalue("migrated_db"))}


def paid_bot(
    claude: FakeAnthropicServer,
    tmp_path: Path,
    store: dict[str, Any],
    plans: tuple[Plan, ...] = (PRO, MONTHLY),
    **more: Any,
) -> Bot:
    """A bot selling ``plans`` (given in code), free budget ``FREE``, on ``store``."""
    values: dict[str, Any] = {
        "allowed_users": frozenset({USER, OTHER}),
        "daily_token_budget": FREE,
    }
    settings = make_settings(tmp_path, **{**values, **store, **more})
    return Bot(settings=settings, llm=fake_llm(claude), plans=plans)


async def use_up_free_budget(bot: Bot, user_id: int = USER) -> None:
    today = datetime.now(UTC).date()
    await (await bot.access.user_store()).add_usage(user_id, today, FREE)


async def grants(bot: Bot) -> list[Grant]:
    return await (await bot.payments.store()).recent()


async def buy(telegram: FakeTelegramServer, user_id: int, label: str) -> dict[str, Any]:
    """``/plans``, then the Buy button labelled ``label``: the invoice the bot sent."""
    listing = await ask(telegram, user_id, "/plans")
    before = len(telegram.invoices(user_id))
    telegram.press_button(user_id, listing, label)
    await telegram.wait_for_requests("sendInvoice", before + 1)
    return telegram.invoices(user_id)[before]


async def next_message(
    telegram: FakeTelegramServer,
    chat_id: int,
    before: int,
    timeout: float = 10.0,  # noqa: ASYNC109
) -> SentMessage:
    return (await telegram.wait_for_messages(chat_id, before + 1, timeout))[before]


async def scrape(url: str) -> dict[tuple[str, str], float]:
    """The bot's ``/metrics`` as an operator's Prometheus reads them: by name and plan."""
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
        assert response.status == 200
        text = await response.text()
    return {
        (sample.name, sample.labels.get("plan", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def metric(bot: Bot, name: str, **labels: str) -> float:
    return bot.metrics.registry.get_sample_value(name, labels) or 0.0


# --- plans -------------------------------------------------------------------------------


def test_plans_come_from_code_then_the_setting(tmp_path: Path) -> None:
    as_file = tmp_path / "plans.json"
    as_file.write_text(MONTHLY.model_dump_json().join("[]"))
    assert load_plans(str(as_file), [PRO]) == (PRO, MONTHLY)
    assert load_plans(f"[{MONTHLY.model_dump_json()}]") == (MONTHLY,)


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ('[{"id": "x"}]', "0.title"),
        ('{"id": "x"}', "not a JSON list"),
        ("/nonexistent/plans.json", "cannot read"),
        (f"[{PRO.model_dump_json()}]", "two plans have the id pro"),
    ],
)
def test_a_bad_plans_setting_is_a_config_error_saying_what(setting: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_plans(setting, [PRO])


# --- the whole buy flow --------------------------------------------------------------------


async def test_buying_a_plan_grants_it_once_and_raises_the_budget(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    store: dict[str, Any],
) -> None:
    bot = paid_bot(claude, tmp_path, store)
    claude.enqueue(FakeReply.text("answered on the plan"))
    async with running(bot, telegram):
        await (await bot.access.user_store()).add_usage(USER, datetime.now(UTC).date(), 40)
        free = (await ask(telegram, USER, "/plan")).plain_text
        assert "no plan" in free and "Left today: 60 tokens" in free, free
        await use_up_free_budget(bot)
        refused = await ask(telegram, USER, "hello")
        assert refused.plain_text.startswith(bot.options.budget_text)
        assert "/plans" in refused.plain_text, "the over-budget text offers the plans"

        invoice = await buy(telegram, USER, "Buy Pro — 50 ⭐")
        assert invoice["currency"] == "XTR"
        assert invoice["prices"] == [{"label": "Pro", "amount": 50}]
        assert invoice.get("provider_token", "") == ""

        before = len(telegram.sent_messages(USER))
        charge = await telegram.pay(USER, invoice)
        assert charge is not None, telegram.checkout_answers
        polled = telegram.requests_for("getUpdates")[-1].params
        assert "pre_checkout_query" in polled["allowed_updates"], "Telegram sends checkouts"
        thanks = await next_message(telegram, USER, before)
        assert "Pro" in thanks.plain_text and "active until" in thanks.plain_text

        [grant] = await grants(bot)
        assert (grant.charge_id, grant.user_id, grant.plan_id, grant.stars) == (
            charge,
            USER,
            "pro",
            50,
        )
        assert timedelta(days=29) < grant.ends_at - datetime.now(UTC) <= timedelta(days=30)
        assert (await ask(telegram, USER, "hello again")).text == "answered on the plan"
        shown = (await ask(telegram, USER, "/plan")).plain_text
        assert "Pro" in shown and "Left today" in shown
        assert f"until {grant.ends_at:%Y-%m-%d %H:%M} UTC" in shown, "the plan's end"
    assert metric(bot, "botkit_payments_total", plan="pro") == 1
    assert metric(bot, "botkit_payment_stars_total", plan="pro") == 50
    assert metric(bot, "botkit_checkouts_total", outcome="ok") == 1
    assert metric(bot, "botkit_turns_total", outcome="payment") == 1


async def test_a_subscription_is_sold_through_an_invoice_link_and_renewals_extend_it(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    store: dict[str, Any],
) -> None:
    bot = paid_bot(claude, tmp_path, store)
    async with running(bot, telegram):
        listing = await ask(telegram, USER, "/plans")
        before = len(telegram.sent_messages(USER))
        telegram.press_button(USER, listing, "Buy Monthly — 120 ⭐")
        offer = await next_message(telegram, USER, before)
        [[button]] = offer.params["reply_markup"]["inline_keyboard"]
        link = telegram.invoice_links[button["url"]]
        assert link["subscription_period"] == 2592000
        assert link["currency"] == "XTR" and link["prices"] == [{"label": "Monthly", "amount": 120}]

        first_end = int(time.time()) + 2592000
        query = telegram.start_checkout(USER, link["payload"], 120)
        assert (await telegram.wait_for_checkout(query))["ok"] is True
        before = len(telegram.sent_messages(USER))
        telegram.complete_payment(
            USER,
            link["payload"],
            120,
            subscription_expiration_date=first_end,
            is_recurring=True,
            is_first_recurring=True,
        )
        await next_message(telegram, USER, before)
        renewed_end = first_end + 2592000
        telegram.complete_payment(
            USER,
            link["payload"],
            120,
            subscription_expiration_date=renewed_end,
            is_recurring=True,
        )
        renewal = await next_message(telegram, USER, before + 1)
        assert "renewed" in renewal.plain_text
        plan = await bot.payments.current_plan(USER)
        assert plan is not None and plan.plan_id == "monthly"
        assert int(plan.ends_at.timestamp()) == renewed_end
    assert len(await grants(bot)) == 2
    assert metric(bot, "botkit_payment_stars_total", plan="monthly") == 240


async def test_the_same_successful_payment_twice_grants_the_plan_once(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    store: dict[str, Any],
) -> None:
    bot = paid_bot(claude, tmp_path, store)
    payload = f"plan:pro:50:{USER}"
    async with running(bot, telegram):
        telegram.complete_payment(USER, payload, 50, charge_id="charge-twice")
        await telegram.wait_for_messages(USER, 1)
        telegram.complete_payment(USER, payload, 50, charge_id="charge-twice")
        await telegram.wait_for_messages(USER, 2)
    [grant] = await grants(bot)
    assert grant.ends_at - grant.paid_at == timedelta(days=30), "not extended twice"
    assert metric(bot, "botkit_payments_total", plan="pro") == 1


# --- checkout refusals --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "amount", "text"),
    [
        (f"plan:gold:50:{USER}", 50, "unknown_plan_text"),
        (f"plan:pro:40:{USER}", 40, "price_changed_text"),  # an invoice from before a rise
        (f"plan:pro:50:{USER}", 10, "price_changed_text"),
        (f"plan:pro:50:{OTHER}", 50, "not_your_invoice_text"),
        ("something else", 50, "unknown_plan_text"),
    ],
)
async def test_a_checkout_for_no_plan_on_sale_at_its_price_is_refused_with_a_text(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    store: dict[str, Any],
    payload: str,
    amount: int,
    text: str,
) -> None:
    bot = paid_bot(claude, tmp_path, store)
    async with running(bot, telegram):
        answer = await telegram.wait_for_checkout(telegram.start_checkout(USER, payload, amount))
    assert answer == {"ok": False, "error_message": getattr(bot.options.payment_texts, text)}
    assert metric(bot, "botkit_checkouts_total", outcome="refused") == 1


async def test_a_blocked_user_cannot_pay(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    store: dict[str, Any],
) -> None:
    bot = paid_bot(claude, tmp_path, store, allowed_users=frozenset(), access="invite")
    await (await bot.access.user_store()).block_user(USER)
    async with running(bot, telegram):
        query = telegram.start_checkout(USER, f"plan:pro:50:{USER}", 50)
        answer = await telegram.wait_for_checkout(query)
        stranger = telegram.start_checkout(OTHER, f"plan:pro:50:{OTHER}", 50)
        refused = await telegram.wait_for_checkout(stranger)
    texts = bot.options.payment_texts
    assert answer == {"ok": False, "error_message": texts.refused_text}
    assert refused == {"ok": False, "error_message": texts.refused_text}, "never admitted"


async def test_a_checkout_is_answered_while_the_users_turn_runs(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = paid_bot(claude, tmp_path, {}, daily_token_budget=None)
    started, go_on = asyncio.Event(), asyncio.Event()

    @tool
    async def think_long() -> str:
        """Thinks for a long time."""
        started.set()
        await go_on.wait()
        return "thought"

    bot.tools.register(think_long)
    claude.enqueue(FakeReply.tool_use("think_long", {}), FakeReply.text("done thinking"))
    async with running(bot, telegram):
        telegram.send_text(USER, "think long")
        await asyncio.wait_for(started.wait(), 10)
        query = telegram.start_checkout(USER, f"plan:pro:50:{USER}", 50)
        answer = await telegram.wait_for_checkout(query, timeout=5)
        assert answer["ok"] is True, "answered beside the running turn, not after it"
        go_on.set()
        assert (await telegram.wait_for_messages(USER, 1))[0].text == "done thinking"


# --- expiry, refunds, the budget gate --------------------------------------------------------


async def test_a_plan_past_its_end_no_longer_raises_the_budget(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    store: dict[str, Any],
) -> None:
    bot = paid_bot(claude, tmp_path, store)
    claude.enqueue(FakeReply.text("on the plan"))
    payload = f"plan:monthly:120:{USER}"
    async with running(bot, telegram):
        await use_up_free_budget(bot)
        ends = int(time.time()) + 3
        telegram.complete_payment(USER, payload, 120, subscription_expiration_date=ends)
        await telegram.wait_for_messages(USER, 1)
        assert (await ask(telegram, USER, "while it lasts")).text == "on the plan"
        await asyncio.sleep(max(0.0, ends - time.time()) + 0.5)
        after = await ask(telegram, USER, "after its end")
        assert after.plain_text.startswith(bot.options.budget_text)
        assert "no plan" in (await ask(telegram, USER, "/plan")).plain_text


async def test_a_refund_gives_the_stars_back_and_ends_the_plan(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    store: dict[str, Any],
) -> None:
    bot = paid_bot(claude, tmp_path, store, metrics_port=0)
    claude.enqueue(FakeReply.text("on the plan"))
    env = cli_env(telegram, tmp_path, store)
    async with running(bot, telegram):
        await use_up_free_budget(bot)
        charge = telegram.complete_payment(USER, f"plan:pro:50:{USER}", 50)
        await telegram.wait_for_messages(USER, 1)
        assert (await ask(telegram, USER, "paid")).text == "on the plan"

        refund = await cli(tmp_path, env, "payments", "refund", charge)
        assert refund.returncode == 0, refund.stderr
        assert telegram.refunded == [charge]
        assert [r.params["user_id"] for r in telegram.requests_for("refundStarPayment")] == [USER]
        [audit] = audit_lines(refund.stderr)
        assert (audit["actor"], audit["action"]) == ("cli", "payments.refund")
        assert audit["target"] == charge
        assert (audit["user_id"], audit["plan"], audit["stars"]) == (USER, "pro", 50)
        assert "os_user" in audit, "who ran it, as the admin commands say"
        again = await cli(tmp_path, env, "payments", "refund", charge)
        assert again.returncode == 1 and "was refunded" in again.stderr
        assert telegram.refunded == [charge], "not refunded twice"
        assert telegram.requests_for("editUserStarSubscription") == [], "not a subscription"

        await asyncio.sleep(3.2)  # the bot's read of the plan is trusted for up to 3 s
        refused = await ask(telegram, USER, "after the refund")
        assert refused.plain_text.startswith(bot.options.budget_text)
        listed = await cli(tmp_path, env, "payments", "list")
        assert charge in listed.stdout and "\tpro\t50\t" in listed.stdout
        assert bot.metrics.served_at is not None
        scraped = await scrape(bot.metrics.served_at)
        assert scraped.get(("botkit_refunds_total", "pro")) == 1, "the bot counts the CLI's"
    [grant] = await grants(bot)
    assert grant.refunded_at is not None


async def test_refunding_a_subscription_cancels_it(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    store: dict[str, Any],
) -> None:
    bot = paid_bot(claude, tmp_path, store)
    ends = int(time.time()) + 2592000
    async with running(bot, telegram):
        charge = telegram.complete_payment(
            USER,
            f"plan:monthly:120:{USER}",
            120,
            subscription_expiration_date=ends,
            is_recurring=True,
            is_first_recurring=True,
        )
        await telegram.wait_for_messages(USER, 1)
        env = cli_env(telegram, tmp_path, store)
        refund = await cli(tmp_path, env, "payments", "refund", charge)
        assert refund.returncode == 0, refund.stderr
    assert telegram.refunded == [charge]
    assert telegram.subscriptions == {charge: True}, "cancelled: Telegram renews it no more"
    [cancel] = telegram.requests_for("editUserStarSubscription")
    assert cancel.params["user_id"] == USER and cancel.params["is_canceled"] is True


async def test_a_payment_for_a_plan_no_longer_sold_is_recorded_granting_nothing_and_refundable(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    store: dict[str, Any],
) -> None:
    bot = paid_bot(claude, tmp_path, store)
    env = cli_env(telegram, tmp_path, store)
    async with running(bot, telegram):
        with capture_logs() as logs:
            charge = telegram.complete_payment(USER, f"plan:gold:70:{USER}", 70)
            [told] = await telegram.wait_for_messages(USER, 1)
        assert told.plain_text == bot.options.payment_texts.paysupport_text
        assert await bot.payments.current_plan(USER) is None, "nothing granted"
        listed = await cli(tmp_path, env, "payments", "list")
        assert f"{charge}\t{USER}\tunknown:gold\t70\t" in listed.stdout, listed.stdout
        refund = await cli(tmp_path, env, "payments", "refund", charge)
        assert refund.returncode == 0, refund.stderr
    assert telegram.refunded == [charge]
    [error] = [e for e in logs if e["event"] == "payments.unknown_plan_paid"]
    assert error["charge_id"] == charge and error["recorded_as"] == "unknown:gold"
    [grant] = await grants(bot)
    assert grant.refunded_at is not None and grant.ends_at == grant.paid_at
    assert metric(bot, "botkit_payments_total", plan="unknown:gold") == 0


def audit_lines(stderr: str) -> list[dict[str, Any]]:
    """The ``admin.action`` log lines in a CLI's stderr (JSON lines, as it is not a terminal)."""
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [line for line in lines if line["event"] == "admin.action"]


def cli_env(telegram: FakeTelegramServer, tmp_path: Path, store: dict[str, Any]) -> dict[str, str]:
    """The settings a ``python -m botkit payments`` run needs to reach the bot's records."""
    env = {
        "TELEGRAM_BOT_TOKEN": telegram.token,
        "TELEGRAM_API_BASE": telegram.base_url,
        "BOTKIT_SESSIONS_DIR": str(tmp_path / "sessions"),
    }
    if "database_url" in store:
        env["BOTKIT_DATABASE_URL"] = store["database_url"].get_secret_value()
    return env


async def cli(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m botkit ARGS`` with this configuration only (no .env, no outer settings)."""
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC", "BOTKIT"))
    }
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "botkit", *args],
        env={**clean, **env, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_without_plans_nothing_is_sold_and_budgets_are_as_before(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = paid_bot(claude, tmp_path, {}, plans=())
    async with running(bot, telegram):
        await use_up_free_budget(bot)
        assert (await ask(telegram, USER, "hello")).plain_text == bot.options.budget_text
        assert "plans" not in bot.commands and "terms" not in bot.commands


async def test_terms_and_paysupport_answer_when_plans_are_sold(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = paid_bot(claude, tmp_path, {})
    texts = bot.options.payment_texts
    async with running(bot, telegram):
        assert (await ask(telegram, USER, "/terms")).plain_text == texts.terms_text
        assert (await ask(telegram, USER, "/paysupport")).plain_text == texts.paysupport_text


# --- exactly once across processes ----------------------------------------------------------


async def test_two_stores_granting_one_charge_at_once_grant_it_once(
    claude: FakeAnthropicServer, tmp_path: Path, store: dict[str, Any]
) -> None:
    from botkit.access import open_user_store
    from botkit.payments.store import NewPayment, payment_store_for

    settings = make_settings(tmp_path, **store)
    users = [await open_user_store(settings) for _ in range(2)]
    stores = [payment_store_for(u) for u in users]
    now = datetime.now(UTC)
    try:
        paid = [NewPayment(f"race-{i}", USER, PRO, 50, now) for i in range(20)]
        results = await asyncio.gather(
            *(s.grant(p) for p in paid for s in stores)  # each charge by both, at once
        )
        granted = [g for g in results if g is not None]
        assert sorted(g.charge_id for g in granted) == sorted(p.charge_id for p in paid)
        ends = sorted(g.ends_at for g in granted)
        assert ends[-1] - now == timedelta(days=30 * 20), "each charge extended the plan once"
    finally:
        for s, u in zip(stores, users, strict=True):
            await s.close()
            await u.close()


async def test_on_the_job_queue_a_payment_is_granted_once_and_checkouts_answered(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    migrated_db: str,
) -> None:
    from botkit.messengers.flood import FloodControl
    from botkit.runtime.cluster import queue_for, serve_queued
    from botkit.runtime.telegram import messenger_for

    def queued_bot(folder: str) -> Bot:
        return paid_bot(
            claude,
            tmp_path / folder,
            {"database_url": SecretStr(migrated_db)},
            telegram_bot_token=SecretStr(telegram.token),
            telegram_api_base=telegram.base_url,
            stalled_timeout=2.0,
            poll_timeout=1,
        )

    stop = asyncio.Event()
    bots = [queued_bot("a"), queued_bot("b")]
    tasks = [
        asyncio.create_task(
            serve_queued(
                bot,
                stop,
                receive=receive,
                work=True,
                concurrency=4,
                messenger=messenger_for(bot.settings, flood=FloodControl.unlimited(), inbox=False),
                queue=queue_for(bot.settings, concurrency=4),
                grace_period=5,
            )
        )
        for bot, receive in zip(bots, (True, False), strict=True)
    ]
    try:
        invoice = await buy(telegram, USER, "Buy Pro — 50 ⭐")
        charge = await telegram.pay(USER, invoice)
        assert charge is not None, "a worker answered the checkout"
        await telegram.wait_for_messages(USER, 2, timeout=20)  # the listing, the thanks
        for _ in range(3):  # delivered again, as after a receiver's restart
            telegram.complete_payment(USER, str(invoice["payload"]), 50, charge_id=charge)
        await telegram.wait_for_messages(USER, 5, timeout=20)
        refused = telegram.start_checkout(USER, f"plan:pro:49:{USER}", 49)
        answer = await telegram.wait_for_checkout(refused, timeout=10)
        assert answer["ok"] is False
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    [grant] = await grants(bots[0])
    assert grant.charge_id == charge and grant.ends_at - grant.paid_at == timedelta(days=30)
    granted = sum(metric(bot, "botkit_payments_total", plan="pro") for bot in bots)
    assert granted == 1


async def test_on_the_job_queue_the_receiver_answers_checkouts_with_no_worker_running(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path, migrated_db: str
) -> None:
    from botkit.messengers.flood import FloodControl
    from botkit.runtime.cluster import queue_for, serve_queued
    from botkit.runtime.telegram import messenger_for

    bot = paid_bot(
        claude,
        tmp_path,
        {"database_url": SecretStr(migrated_db)},
        telegram_bot_token=SecretStr(telegram.token),
        telegram_api_base=telegram.base_url,
        poll_timeout=1,
    )
    stop = asyncio.Event()
    receiver = asyncio.create_task(
        serve_queued(
            bot,
            stop,
            receive=True,
            work=False,  # every worker stopped: nothing takes jobs from the queue
            messenger=messenger_for(bot.settings, flood=FloodControl.unlimited(), inbox=False),
            queue=queue_for(bot.settings),
        )
    )
    try:
        ok = telegram.start_checkout(USER, f"plan:pro:50:{USER}", 50)
        assert (await telegram.wait_for_checkout(ok, timeout=10))["ok"] is True
        wrong = telegram.start_checkout(USER, f"plan:pro:49:{USER}", 49)
        refused = await telegram.wait_for_checkout(wrong, timeout=10)
    finally:
        stop.set()
        await receiver
    assert refused == {"ok": False, "error_message": bot.options.payment_texts.price_changed_text}
    assert metric(bot, "botkit_checkouts_total", outcome="ok") == 1


STALLING_BOT = """
import asyncio
from pathlib import Path

from botkit import Bot

bot = Bot()  # its plans from BOTKIT_PLANS
opened = bot.payments.store


async def store():
    payments = await opened()
    grant = payments.grant

    async def stalled(payment):
        if Path("stall").exists():  # the test kills the process here, before the record
            Path("stalled").touch()
            await asyncio.sleep(3600)
        return await grant(payment)

    if getattr(payments.grant, "__name__", "") != "stalled":
        payments.grant = stalled
    return payments


bot.payments.store = store
"""


@pytest.mark.timeout(300)
async def test_a_process_killed_before_recording_a_payment_grants_it_once_after_restart(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    store: dict[str, Any],
) -> None:
    """SQLite: ``run`` (the inbox journal). PostgreSQL: receive/work (the job queue), the
    receiver living on while the worker is killed and started again."""
    from botkit.payments.store import PaymentStore, PostgresPayments, SqlitePayments

    (tmp_path / "stalling_bot.py").write_text(STALLING_BOT)
    (tmp_path / "stall").touch()
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))}
    env = {
        **{k: v for k, v in keep.items() if not k.startswith("BOTKIT")},
        "TELEGRAM_BOT_TOKEN": telegram.token,
        "TELEGRAM_API_BASE": telegram.base_url,
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": claude.base_url,
        "BOTKIT_ACCESS": "open",
        "BOTKIT_POLL_TIMEOUT": "1",
        "BOTKIT_SESSIONS_DIR": str(tmp_path / "sessions"),
        "BOTKIT_DAILY_TOKEN_BUDGET": str(FREE),
        "BOTKIT_PLANS": f"[{PRO.model_dump_json()}]",
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
    }
    command, pool = "run", None
    payments: PaymentStore = SqlitePayments(tmp_path / "sessions" / "botkit.db")
    if "database_url" in store:
        db = store["database_url"].get_secret_value()
        env.update(BOTKIT_DATABASE_URL=db, BOTKIT_STALLED_TIMEOUT="2")
        command, pool = "work", await asyncpg.create_pool(db, min_size=1, max_size=2)
        payments = PostgresPayments(pool)

    def start(command: str) -> subprocess.Popen[bytes]:
        with (tmp_path / "stderr.log").open("ab") as stderr:
            return subprocess.Popen(
                [sys.executable, "-m", "botkit", command, "stalling_bot:bot"],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )

    async def until_exists(path: Path, timeout: float) -> None:  # noqa: ASYNC109
        deadline = time.monotonic() + timeout
        while not await asyncio.to_thread(path.exists):
            assert time.monotonic() < deadline, (tmp_path / "stderr.log").read_text()[-3000:]
            await asyncio.sleep(0.1)

    processes = [start("receive")] if command == "work" else []
    process = start(command)
    try:
        charge = telegram.complete_payment(USER, f"plan:pro:50:{USER}", 50)
        await until_exists(tmp_path / "stalled", timeout=90)
        process.kill()  # SIGKILL: between the update journaled (or queued) and its record
        await asyncio.to_thread(process.wait, 30)
        (tmp_path / "stall").unlink()
        assert await payments.recent() == [], "killed before the record"

        process = start(command)
        [thanks] = await telegram.wait_for_messages(USER, 1, timeout=90)
        assert "Pro" in thanks.plain_text
        await asyncio.sleep(1.5)  # a second grant or thanks would come by now
        assert len(telegram.sent_messages(USER)) == 1
        [grant] = await payments.recent()
        assert (grant.charge_id, grant.user_id, grant.plan_id) == (charge, USER, "pro")
        assert grant.ends_at - grant.paid_at == timedelta(days=30)
    finally:
        await payments.close()
        if pool is not None:
            await pool.close()
        for running_process in [process, *processes]:
            if running_process.poll() is None:
                running_process.terminate()
                await asyncio.to_thread(running_process.wait, 30)


async def test_a_plan_with_a_role_gives_it_while_it_lasts(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    roles: list[str | None] = []

    async def build_prompt(message: Incoming) -> str:
        roles.append(message.user.role if message.user else None)
        return "You are a test bot."

    team = Plan(
        id="team",
        title="Team",
        description="With tools",
        stars=80,
        daily_tokens=10**6,
        role="premium",
    )
    settings = make_settings(tmp_path, allowed_users=frozenset({USER}))
    bot = Bot(settings=settings, llm=fake_llm(claude), plans=[team], build_prompt=build_prompt)
    async with running(bot, telegram):
        await ask(telegram, USER, "before")
        ends = int(time.time()) + 3
        telegram.complete_payment(
            USER, f"plan:team:80:{USER}", 80, subscription_expiration_date=ends
        )
        await telegram.wait_for_messages(USER, 2)
        await ask(telegram, USER, "on the plan")
        await asyncio.sleep(max(0.0, ends - time.time()) + 0.5)
        await ask(telegram, USER, "after")
    assert roles == ["user", "premium", "user"]


async def test_a_payment_made_in_a_group_is_granted_though_the_bot_was_not_mentioned(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = paid_bot(claude, tmp_path, {})
    async with running(bot, telegram):
        telegram.complete_payment(USER, f"plan:pro:50:{USER}", 50, chat_type="supergroup")
        group = -(1_000_000_000_000 + USER)
        [thanks] = await telegram.wait_for_messages(group, 1)
    assert "Pro" in thanks.plain_text
    [grant] = await grants(bot)
    assert grant.user_id == USER


async def test_a_checkout_the_bot_cannot_check_is_refused_not_left_waiting(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path, migrated_db: str
) -> None:
    bot = paid_bot(claude, tmp_path, {"database_url": SecretStr(migrated_db)})
    async with running(bot, telegram):
        conn = await asyncpg.connect(migrated_db)
        try:
            await conn.execute("DROP TABLE botkit_users CASCADE")  # every user read fails
        finally:
            await conn.close()
        query = telegram.start_checkout(USER, f"plan:pro:50:{USER}", 50)
        answer = await telegram.wait_for_checkout(query, timeout=20)
    assert answer == {"ok": False, "error_message": bot.options.error_text}


async def test_a_refund_takes_off_exactly_the_days_its_charge_granted(
    tmp_path: Path, store: dict[str, Any]
) -> None:
    """#51: Pro bought twice (ends in 30, then 60 days), the first charge refunded: the plan
    runs 30 days from now, not 60; refunding the later one then ends it."""
    from botkit.access import open_user_store
    from botkit.payments.store import NewPayment, payment_store_for

    users = await open_user_store(make_settings(tmp_path, **store))
    payments = payment_store_for(users)
    now = datetime.now(UTC)
    try:
        first = await payments.grant(NewPayment("first", USER, PRO, 50, now))
        second = await payments.grant(NewPayment("second", USER, PRO, 50, now))
        assert first is not None and second is not None
        assert second.ends_at - now == timedelta(days=60), "stacked after the first"
        await payments.revoke("first", now)
        active = await payments.active(USER, now)
        assert active is not None and active.charge_id == "second"
        assert active.ends_at - now == timedelta(days=30), "the refunded 30 days are gone"
        await payments.revoke("second", now)
        assert await payments.active(USER, now) is None
    finally:
        await payments.close()
        await users.close()


async def test_turns_of_users_who_never_paid_read_no_plan_and_a_payment_counts_at_once(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    tmp_path: Path,
    store: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With plans on sale, who ever paid is read once and kept: a turn of anyone else reads
    no plan. A payment counts at the payer's next turn: recorded by this process, or (on
    PostgreSQL, heard through the change feed) by another."""
    from botkit.payments.store import NewPayment, PostgresPayments, SqlitePayments

    reads: list[int] = []
    real_fetch = SqlitePayments._run

    async def run(self: SqlitePayments, doing: str, work: Any, *args: Any) -> Any:
        if doing == "reading a plan":
            reads.append(1)
        return await real_fetch(self, doing, work, *args)

    real_connection = PostgresPayments._connection

    def connection(self: PostgresPayments, doing: str) -> Any:
        if doing == "reading a plan":
            reads.append(1)
        return real_connection(self, doing)

    monkeypatch.setattr(SqlitePayments, "_run", run)
    monkeypatch.setattr(PostgresPayments, "_connection", connection)
    bot = paid_bot(claude, tmp_path, store, daily_token_budget=1_000_000)
    async with running(bot, telegram):
        for n in range(3):
            await ask(telegram, USER, f"hello {n}")
        assert reads == [], "no one paid: no plan read"
        paid = NewPayment("elsewhere-1", OTHER, PRO, 50, datetime.now(UTC))
        if store:  # PostgreSQL: another process's store, on its own pool, records it
            pool = await asyncpg.create_pool(store["database_url"].get_secret_value())
            try:
                await PostgresPayments(pool).grant(paid)
            finally:
                await pool.close()
            ours = await bot.payments.store()
            for _ in range(100):
                if OTHER in ours._heard:  # type: ignore[attr-defined]
                    break
                await asyncio.sleep(0.05)
        else:  # SQLite: payments come to the serving process
            await (await bot.payments.store()).grant(paid)
        shown = (await ask(telegram, OTHER, "/plan")).plain_text
        assert "Pro" in shown, shown
        assert reads, "the payer's plan is read"
