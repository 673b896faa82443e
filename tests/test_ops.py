"""Operating a bot: /metrics counts what happened, /healthz and /readyz tell its state."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import asyncpg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from structlog.testing import capture_logs

from botkit import Bot, ConfigError, Incoming, StoreError, ToolError, tool
from botkit.messengers.flood import FloodControl
from botkit.metrics import TURN_OUTCOMES, Metrics
from botkit.ops import ops_server, stores_check
from botkit.runtime.telegram import messenger_for
from botkit.stores.migrate import migrate
from botkit.testing import FakeReply, ask, make_bot, make_settings, running
from botkit.testing.anthropic import FakeAnthropicServer, FakeError, FakeRequest
from botkit.testing.telegram import FakeTelegramServer

ALICE, STRANGER = 42, 99


@tool
async def broken(city: str) -> str:
    """Always fails.

    Args:
        city: Any city.
    """
    raise ToolError(f"no weather for {city}")


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(url: str) -> Samples:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
        assert response.status == 200
        text = await response.text()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def test_metrics_count_turns_calls_tools_and_telegram_requests(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    claude.enqueue(
        FakeReply.text("Hello."),
        FakeReply.tool_use("broken", {"city": "Paris"}),
        FakeReply.text("Sorry, no weather."),
    )
    bot = make_bot(
        claude, tmp_path, allowed_users=frozenset({ALICE}), metrics_port=0, tools=[broken]
    )
    async with running(bot, telegram):
        assert (await ask(telegram, ALICE, "hi")).text == "Hello."
        telegram.fail_next("sendMessage", error_code=429, retry_after=1)
        assert (await ask(telegram, ALICE, "weather?")).text == "Sorry, no weather."
        assert "private" in (await ask(telegram, STRANGER, "let me in")).text.lower()
        telegram.fail_next("sendMessage", error_code=502)  # a proxy in front of the Bot API
        assert (await ask(telegram, ALICE, "and?")).text == "echo: and?"
        assert bot.metrics.served_at is not None
        samples = await scrape(bot.metrics.served_at)

    assert value(samples, "botkit_turns_total", outcome="answered") == 3
    assert value(samples, "botkit_turns_total", outcome="rejected") == 1
    assert value(samples, "botkit_turns_total", outcome="error") == 0
    assert value(samples, "botkit_turn_seconds_count") == 4
    model = bot.settings.model
    assert value(samples, "botkit_llm_calls_total", model=model, outcome="ok") == 4
    assert value(samples, "botkit_llm_seconds_count") == 4
    usage = bot.turns.usage_by_model[model]
    assert value(samples, "botkit_llm_tokens_total", model=model, kind="input") == (
        usage.input_tokens
    )
    assert value(samples, "botkit_llm_tokens_total", model=model, kind="output") == (
        usage.output_tokens
    )
    assert value(samples, "botkit_llm_cost_usd_total", model=model) > 0
    cache = {
        (op, ttl): value(samples, "botkit_llm_cache_tokens_total", model=model, op=op, ttl=ttl)
        for op, ttl in (("write", "1h"), ("write", "5m"), ("read", "any"))
    }
    assert cache[("write", "1h")] == usage.cache_write_1h_tokens > 0, "the tools and prompt"
    assert cache[("write", "5m")] + cache[("write", "1h")] == usage.cache_creation_input_tokens
    assert cache[("read", "any")] == usage.cache_read_input_tokens
    assert value(samples, "botkit_tool_calls_total", tool="broken", outcome="error") == 1
    assert value(samples, "botkit_tool_seconds_count") == 1
    assert value(samples, "botkit_telegram_requests_total", method="sendMessage", outcome="ok") == 4
    assert (
        value(samples, "botkit_telegram_requests_total", method="sendMessage", outcome="flood") == 1
    )
    assert (
        value(samples, "botkit_telegram_requests_total", method="sendMessage", outcome="server")
        == 1
    )
    assert value(samples, "botkit_telegram_retries_total", reason="429") == 1
    assert value(samples, "botkit_telegram_retries_total", reason="network") == 1
    assert value(samples, "botkit_telegram_flood_wait_seconds_total") == 1
    assert value(samples, "botkit_contexts_in_memory") == 1
    assert value(samples, "botkit_turns_running") == 0
    assert value(samples, "botkit_inbox_unfinished") == 0
    labels = {label for key in samples for label, _ in key[1]}
    bounded = {"outcome", "model", "kind", "tool", "method", "reason", "decision", "plan", "le"}
    bounded |= {"op", "ttl"}  # the cache's operation and lifetime (#49)
    assert labels <= bounded  # values from small fixed sets or the configuration, never a user


async def test_every_turn_outcome_is_counted_as_it_happened(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    bob, carol = 43, 44
    started = asyncio.Event()

    @tool
    async def long_job() -> str:
        """Takes forever."""
        started.set()
        await asyncio.sleep(60)
        return "never"

    async def prompt(message: Incoming) -> str:
        if message.user_id == carol:
            raise RuntimeError("a bug in the bot's prompt")
        return "Be brief."

    def model(request: FakeRequest) -> FakeReply:
        if request.last_user_text() == "work":
            return FakeReply.tool_use("long_job", {}, text="Working on it.\n")
        return FakeReply.text("fine")

    claude.responder = model
    sticker = {"file_id": "s", "file_unique_id": "u", "type": "regular", "width": 1, "height": 1}
    sticker |= {"is_animated": False, "is_video": False}
    bot = make_bot(
        claude,
        tmp_path,
        allowed_users=frozenset({ALICE, bob, carol}),
        daily_token_budget=1,
        stream_replies=True,
        metrics_port=0,
        tools=[long_job],
        build_prompt=prompt,
    )
    options = bot.options
    async with running(bot, telegram):
        assert "/help" in (await ask(telegram, ALICE, "/help")).text
        telegram.inject_update(
            {
                "message": {
                    "message_id": 1,
                    "date": 0,
                    "chat": {"id": ALICE, "type": "private", "first_name": "A"},
                    "from": {"id": ALICE, "is_bot": False, "first_name": "A"},
                    "sticker": sticker,
                }
            }
        )
        assert (await telegram.wait_for_messages(ALICE, 2))[-1].text == options.unsupported_text
        claude.enqueue(FakeError.overloaded())
        assert (await ask(telegram, ALICE, "hello")).text == options.overloaded_text
        assert (await ask(telegram, ALICE, "hello again")).text == "fine"
        assert (await ask(telegram, ALICE, "more")).text == options.budget_text
        assert (await ask(telegram, STRANGER, "let me in")).text == options.rejection_text
        assert (await ask(telegram, carol, "hi")).text == options.error_text
        telegram.send_text(bob, "work")
        await asyncio.wait_for(started.wait(), 10)
        (draft,) = {d.params["draft_id"] for d in telegram.drafts(bob)}
        chat = {"id": bob, "type": "private", "first_name": "B"}
        telegram.inject_update({"stopped_message_generation": {"chat": chat, "draft_id": draft}})
        await telegram.wait_for_messages(bob)
        assert bot.metrics.served_at is not None
        samples = await until_counted(bot.metrics.served_at, 9)

    counted = {o: value(samples, "botkit_turns_total", outcome=o) for o in TURN_OUTCOMES}
    assert counted == {
        "answered": 1,
        "rejected": 1,
        "command": 1,
        "unsupported": 1,
        "budget": 1,
        "error": 1,
        "overloaded": 1,
        "stopped": 1,
        "cancelled": 0,
        "handoff": 0,
        "waiting": 0,
        "held": 0,
        "payment": 0,  # a new outcome (#33), counted in test_payments
        "unaddressed": 0,  # a group voice note not for the bot (#46), counted in test_voice
    }
    model_name = bot.settings.model
    assert value(samples, "botkit_llm_calls_total", model=model_name, outcome="overloaded") == 1
    assert value(samples, "botkit_llm_calls_total", model=model_name, outcome="ok") == 2


async def until_counted(url: str, turns: int) -> Samples:
    """A scrape once ``turns`` turns were counted (a stopped turn is counted after its reply)."""
    for _ in range(200):
        samples = await scrape(url)
        if value(samples, "botkit_turn_seconds_count") >= turns:
            return samples
        await asyncio.sleep(0.05)
    return samples


async def test_readyz_turns_503_when_telegram_stops_answering(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=frozenset({ALICE}), metrics_port=0)
    async with running(bot, telegram):
        await ask(telegram, ALICE, "hi")
        url = bot.metrics.served_at
        assert url is not None
        assert await get(f"{url}/readyz") == (200, "ready\n")
        assert (await get(f"{url}/healthz"))[0] == 200
        await telegram.stop()
        for _ in range(100):
            status, reason = await get(f"{url}/readyz")
            if status == 503:
                break
            await asyncio.sleep(0.05)
        assert status == 503
        assert reason.startswith("polling Telegram fails:")
        assert reason.count("\n") == 1
        assert (await get(f"{url}/healthz"))[0] == 200


async def test_readyz_turns_503_while_the_postgres_stores_do_not_answer(
    tmp_path: Path,
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    postgres_db: str,
    postgres_dsn: str,
) -> None:
    await migrate(postgres_db)
    bot = make_bot(
        claude,
        tmp_path,
        database_url=SecretStr(postgres_db),
        allowed_users=frozenset({ALICE}),
        metrics_port=0,
    )
    async with running(bot, telegram):
        await ask(telegram, ALICE, "hi")
        url = bot.metrics.served_at
        assert url is not None
        before = await get(f"{url}/readyz")
        await refuse_connections(postgres_db, postgres_dsn, refuse=True)
        try:
            during = await until_status(f"{url}/readyz", 503)
            alive = await get(f"{url}/healthz")
        finally:
            await refuse_connections(postgres_db, postgres_dsn, refuse=False)
        after = await until_status(f"{url}/readyz", 200)

    assert before == (200, "ready\n")
    assert during[0] == 503 and during[1].count("\n") == 1
    assert during[1].startswith("a store does not answer:"), during
    assert alive[0] == 200
    assert after == (200, "ready\n")


async def refuse_connections(db: str, admin_dsn: str, *, refuse: bool) -> None:
    """Make ``db`` refuse connections and drop the open ones (an outage), or end that."""
    name = urlsplit(db).path.lstrip("/")
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(not refuse).lower()}')
        if refuse:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
            )
    finally:
        await admin.close()


async def until_status(url: str, status: int) -> tuple[int, str]:
    """GET ``url`` until it answers ``status`` (20 s at most); the last answer."""
    for _ in range(200):
        answer = await get(url)
        if answer[0] == status:
            return answer
        await asyncio.sleep(0.1)
    return answer


async def test_no_server_without_a_metrics_port(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=frozenset({ALICE}))
    async with running(bot, telegram):
        await ask(telegram, ALICE, "hi")
        assert bot.metrics.served_at is None


def test_bots_in_one_process_count_apart() -> None:
    first, second = Metrics(), Metrics()
    first.turn_done("answered", 0.1)
    assert b'botkit_turns_total{outcome="answered"} 1.0' in first.render()
    assert b'botkit_turns_total{outcome="answered"} 0.0' in second.render()


def test_label_values_are_bounded() -> None:
    metrics = Metrics()
    for n in range(200):
        metrics.telegram_request(f"method{n}", "ok")
    methods = {
        sample.labels["method"]
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
        if sample.name == "botkit_telegram_requests_total"
    }
    assert len(methods) == 51 and "other" in methods


async def test_a_tool_name_the_model_made_up_is_counted_as_unknown(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    made_up = [f"iban_DE89_3704_0044_0532_0130_{n:02d}" for n in range(52)]
    batches = [made_up[n : n + 8] for n in range(0, len(made_up), 8)]

    def model(request: FakeRequest) -> FakeReply:
        answered = sum(1 for m in request.messages if m["role"] == "assistant")
        if answered < len(batches):
            calls = [(name, {}) for name in batches[answered]]
            return FakeReply.tool_uses([*calls, ("broken", {"city": "Oslo"})][:8])
        return FakeReply.text("done")

    claude.responder = model
    bot = make_bot(
        claude, tmp_path, allowed_users=frozenset({ALICE}), metrics_port=0, tools=[broken]
    )
    async with running(bot, telegram):
        assert (await ask(telegram, ALICE, "pay my bills", timeout=30)).text == "done"
        assert bot.metrics.served_at is not None
        samples = await scrape(bot.metrics.served_at)

    tools = {dict(key[1])["tool"] for key in samples if key[0] == "botkit_tool_calls_total"}
    assert tools == {"broken", "unknown"}, "no made-up name becomes a label"
    assert value(samples, "botkit_tool_calls_total", tool="unknown", outcome="error") == 52
    assert value(samples, "botkit_tool_calls_total", tool="broken", outcome="error") == 1


# --- admins in chat ----------------------------------------------------------------------------

ADMIN, MEMBER = 7, 8


async def test_admins_list_block_and_unblock_users_in_chat_with_an_audit_line(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    bot = make_bot(
        claude, tmp_path, admins=frozenset({ADMIN}), allowed_users=frozenset({ALICE, MEMBER})
    )
    rejection = bot.options.rejection_text
    async with running(bot, telegram):
        assert (await ask(telegram, ALICE, "hi")).text == "echo: hi"
        with capture_logs() as logs:
            blocked = (await ask(telegram, ADMIN, f"/block {ALICE}")).text
            assert blocked == f"Blocked {ALICE} (role user)."
            assert (await ask(telegram, ALICE, "still there?")).text == rejection
            listed = (await ask(telegram, ADMIN, "/users")).text
            assert (await ask(telegram, ADMIN, f"/unblock {ALICE}")).text == f"Unblocked {ALICE}."
            assert (await ask(telegram, ALICE, "back?")).text == "echo: back?"
            assert (
                await ask(telegram, ADMIN, "/unblock 123")
            ).text == "No user 123 in the user store."
            assert (await ask(telegram, ADMIN, "/block someone")).text == "Usage: /block USER_ID"

    assert listed.splitlines() == ["1 user:", f"{ALICE} user - (blocked)"]
    assert len(claude.requests) == 2, "the blocked message cost no LLM call"
    audit = [e for e in logs if e["event"] == "admin.action"]
    assert [(e["actor"], e["action"], e["target"], e["via"]) for e in audit] == [
        (ADMIN, "users.block", ALICE, "chat"),
        (ADMIN, "users.unblock", ALICE, "chat"),
    ]


async def test_a_name_listed_to_an_admin_is_shown_as_typed_never_as_a_link(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    bot = make_bot(claude, tmp_path, admins=frozenset({ADMIN}))
    name = "[Open your payslip](https://evil.example/pay) *now*"
    await (await bot.access.user_store()).upsert_user(MEMBER, "user", name)
    async with running(bot, telegram):
        listed = await ask(telegram, ADMIN, "/users")
    assert "<a" not in listed.text and "<b>" not in listed.text and "<i>" not in listed.text
    assert listed.plain_text.splitlines()[1] == f"{MEMBER} user {name}"


async def test_admin_commands_are_unknown_to_everyone_else(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    bot = make_bot(claude, tmp_path, admins=frozenset({ADMIN}), allowed_users=frozenset({MEMBER}))
    async with running(bot, telegram):
        unknown = (await ask(telegram, MEMBER, "/frobnicate 1")).text
        tried = (await ask(telegram, MEMBER, f"/block {ADMIN}")).text
        users = (await ask(telegram, MEMBER, "/users")).text
        member_help = (await ask(telegram, MEMBER, "/help")).text
        admin_help = (await ask(telegram, ADMIN, "/help")).text
        default_menu = telegram.commands()
        admin_menu = telegram.commands({"type": "chat", "chat_id": ADMIN})

    assert tried == unknown.replace("frobnicate", "block")
    assert users == unknown.replace("frobnicate", "users")
    assert await bot.access.known_user(ADMIN) is None, "nothing was blocked"
    for hidden in ("/users", "/block", "/unblock"):
        assert hidden not in member_help and hidden not in unknown
        assert hidden in admin_help
    assert {c["command"] for c in default_menu} & {"users", "block", "unblock"} == set()
    assert {"users", "block", "unblock", "help"} <= {c["command"] for c in admin_menu}
    assert len(claude.requests) == 0


async def test_a_user_whose_role_is_admin_administers_in_chat_too(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer
) -> None:
    bot = make_bot(claude, tmp_path, access="invite")
    store = await bot.access.user_store()
    await store.upsert_user(ADMIN, "admin")
    await store.upsert_user(MEMBER, "user")
    async with running(bot, telegram):
        assert (await ask(telegram, MEMBER, "hi")).text == "echo: hi"
        admin_help = (await ask(telegram, ADMIN, "/help")).text
        with capture_logs() as logs:
            blocked = (await ask(telegram, ADMIN, f"/block {MEMBER}")).text
        turned_away = (await ask(telegram, MEMBER, "hi again")).text

    assert "/block" in admin_help and "/users" in admin_help
    assert blocked == f"Blocked {MEMBER} (role user)."
    assert turned_away == bot.options.rejection_text
    (audit,) = [e for e in logs if e["event"] == "admin.action"]
    assert (audit["actor"], audit["action"], audit["target"], audit["via"]) == (
        ADMIN,
        "users.block",
        MEMBER,
        "chat",
    )
    assert len(claude.requests) == 1


# --- the queued runtimes (receive and work) ------------------------------------------------------


async def test_a_queued_receiver_and_worker_serve_metrics_and_readiness(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer, postgres_db: str
) -> None:
    from botkit.runtime.cluster import queue_for, serve_queued

    await migrate(postgres_db)
    bot = make_bot(
        claude,
        tmp_path,
        database_url=SecretStr(postgres_db),
        telegram_bot_token=SecretStr(telegram.token),
        telegram_api_base=telegram.base_url,
        access="open",
        poll_timeout=1,
        metrics_port=0,
    )
    messenger = messenger_for(bot.settings, flood=FloodControl.unlimited(), inbox=False)
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve_queued(bot, stop, messenger=messenger, queue=queue_for(bot.settings, concurrency=2))
    )
    try:
        assert (await ask(telegram, ALICE, "hi", timeout=20)).text == "echo: hi"
        url = bot.metrics.served_at
        assert url is not None
        samples = await scrape(url)
        ready = await get(f"{url}/readyz")
    finally:
        stop.set()
        await task

    assert value(samples, "botkit_turns_total", outcome="answered") == 1
    assert value(samples, "botkit_telegram_requests_total", method="sendMessage", outcome="ok") == 1
    assert ready == (200, "ready\n")


# --- the server on its own ----------------------------------------------------------------------


async def test_readyz_names_the_first_failing_check_in_one_line(tmp_path: Path) -> None:
    async def fine() -> str | None:
        return None

    async def broken_store() -> object:
        raise StoreError("the user store x.db failed while reading a user:\nlocked")

    async def stuck() -> str | None:
        await asyncio.sleep(60)
        return None

    settings = make_settings(tmp_path, metrics_port=0)
    checks = [fine, stores_check(broken_store)]
    async with ops_server(settings, Metrics(), checks) as url:
        assert await get(f"{url}/readyz") == (
            503,
            "a store does not answer: StoreError: the user store x.db failed while reading a "
            "user:\n",
        )
    async with ops_server(settings, Metrics(), [fine, stuck], check_timeout=0.1) as url:
        status, reason = await get(f"{url}/readyz")
    assert (status, reason) == (503, "a readiness check took more than 0.1 s\n")


async def test_a_metrics_port_in_use_is_one_clear_sentence(tmp_path: Path) -> None:
    async with ops_server(make_settings(tmp_path, metrics_port=0), Metrics()) as url:
        assert url is not None
        taken = int(url.rsplit(":", 1)[1])
        with pytest.raises(ConfigError, match=f"cannot serve metrics on 127.0.0.1:{taken}"):
            async with ops_server(make_settings(tmp_path, metrics_port=taken), Metrics()):
                pass


async def until(read: Callable[[], Awaitable[float]], wanted: float, seconds: float = 15) -> float:
    """Poll ``read`` until it gives ``wanted`` (or ``seconds`` pass); the last value read."""
    for _ in range(int(seconds / 0.05)):
        if (seen := await read()) == wanted:
            return seen
        await asyncio.sleep(0.05)
    return await read()


async def served(bot: Bot, task: asyncio.Task[None]) -> str:
    """The URL ``bot``'s metrics are served at, once its process (``task``) listens."""
    for _ in range(400):
        if bot.metrics.served_at is not None:
            return bot.metrics.served_at
        assert not task.done(), task
        await asyncio.sleep(0.05)
    raise AssertionError("no metrics server within 20 s")


async def test_a_receiver_and_a_worker_apart_each_serve_what_they_do(
    tmp_path: Path, telegram: FakeTelegramServer, claude: FakeAnthropicServer, postgres_db: str
) -> None:
    """``python -m botkit receive`` and ``work`` as two processes of one bot, each its port."""
    from botkit.runtime.cluster import queue_for, serve_queued

    await migrate(postgres_db)

    def queued(name: str) -> Bot:
        return make_bot(
            claude,
            tmp_path / name,
            database_url=SecretStr(postgres_db),
            telegram_bot_token=SecretStr(telegram.token),
            telegram_api_base=telegram.base_url,
            access="open",
            poll_timeout=1,
            metrics_port=0,
        )

    def serve(bot: Bot, stop: asyncio.Event, *, receive: bool) -> asyncio.Task[None]:
        messenger = messenger_for(bot.settings, flood=FloodControl.unlimited(), inbox=False)
        queue = queue_for(bot.settings, concurrency=2)
        return asyncio.create_task(
            serve_queued(
                bot, stop, receive=receive, work=not receive, messenger=messenger, queue=queue
            )
        )

    receiver, worker = queued("receiver"), queued("worker")
    stop_receiving, stop_working = asyncio.Event(), asyncio.Event()
    receiving = serve(receiver, stop_receiving, receive=True)
    try:
        at_receiver = await served(receiver, receiving)
        telegram.send_text(ALICE, "hi")
        queued_before_any_worker = await until(
            lambda: gauge(at_receiver, "botkit_turns_waiting"), 1
        )
        claude.latency = 1.0  # long enough to see the turn running
        working = serve(worker, stop_working, receive=False)
        try:
            at_worker = await served(worker, working)
            running_mid_turn = await until(lambda: gauge(at_worker, "botkit_turns_running"), 1)
            (reply,) = await telegram.wait_for_messages(ALICE, 1, timeout=20)
            worked = await scrape(at_worker)
            worker_ready = await get(f"{at_worker}/readyz")
        finally:
            stop_working.set()
            await working
        received = await scrape(at_receiver)
        receiver_ready = await get(f"{at_receiver}/readyz")
    finally:
        stop_receiving.set()
        await receiving

    assert reply.text == "echo: hi"
    assert queued_before_any_worker == 1, "the receiver shows the update waiting in the queue"
    assert running_mid_turn == 1
    assert value(worked, "botkit_turns_total", outcome="answered") == 1
    assert value(worked, "botkit_turns_running") == 0
    assert value(worked, "botkit_turns_waiting") == 0
    assert value(worked, "botkit_llm_calls_total", model=worker.settings.model, outcome="ok") == 1
    assert value(worked, "botkit_telegram_requests_total", method="sendMessage", outcome="ok") == 1
    assert value(worked, "botkit_telegram_requests_total", method="getUpdates", outcome="ok") == 0
    assert value(received, "botkit_turns_total", outcome="answered") == 0
    assert value(received, "botkit_telegram_requests_total", method="getUpdates", outcome="ok") >= 1
    assert (
        value(received, "botkit_telegram_requests_total", method="sendMessage", outcome="ok") == 0
    )
    assert value(received, "botkit_turns_waiting") == 0, "the worker took it"
    assert worker_ready == receiver_ready == (200, "ready\n")


async def gauge(url: str, name: str) -> float:
    return value(await scrape(url), name)
