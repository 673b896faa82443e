"""The operators' console (#48) in a real browser: headless Chromium (Debian's ``chromium``
and ``chromium-driver``) driven by selenium, against a bot served by ``run`` (and ``receive``)
with the fake Telegram and the fake Messages API."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
from pydantic import SecretStr
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait
from structlog.testing import capture_logs

from botkit import Bot
from botkit.console import check_init_data
from botkit.console.signin import InitDataRefused, Sessions
from botkit.errors import ConfigError
from botkit.messengers.flood import FloodControl
from botkit.runtime.cluster import serve_queued
from botkit.runtime.telegram import messenger_for
from botkit.stores.schedules import NewSchedule
from botkit.testing import make_bot, running
from botkit.testing.anthropic import FakeAnthropicServer, FakeError, FakeReply, FakeRequest
from botkit.testing.telegram import FakeTelegramServer

ADMIN, VIEWER, STRANGER = 1001, 1002, 1003
DOCS = Path(__file__).parent.parent / "docs" / "guides" / "console"
PRO = json.dumps(
    [{"id": "pro", "title": "Pro", "description": "More", "stars": 50, "daily_tokens": 1_000_000}]
)
"""A plan sold (BOTKIT_PLANS)."""
LINK = re.compile(r"(http://\S+/signin/[A-Za-z0-9_-]+)")


def scripted(request: FakeRequest) -> FakeReply:
    """``DELETE <path>`` calls ``delete_file`` (which waits for approval); a result is read
    back; anything else is echoed."""
    results = request.tool_results()
    if results:
        content = results[0].get("content")
        text = (
            " ".join(str(b.get("text", "")) for b in content)
            if isinstance(content, list)
            else content
        )
        return FakeReply.text(f"tool said: {text}")
    text = request.last_user_text()
    _, asked, path = text.partition("DELETE ")
    if asked:
        return FakeReply.tool_use("delete_file", {"path": path})
    return FakeReply.text(f"echo: {text}")


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer(responder=scripted) as server:
        yield server


@pytest.fixture(scope="module")
def driver() -> Iterator[webdriver.Chrome]:
    """Headless Chromium with a fresh profile, that reaches nothing but loopback."""
    profile = tempfile.mkdtemp(prefix="botkit-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=420,900",  # a phone's width
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    chrome = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        yield chrome
    finally:
        chrome.quit()
        shutil.rmtree(profile, ignore_errors=True)


class Browser:
    """The driver's blocking calls run off the event loop, which serves the console."""

    def __init__(self, chrome: webdriver.Chrome) -> None:
        self.chrome = chrome

    async def open(self, url: str) -> str:
        await asyncio.to_thread(self.chrome.get, url)
        return await self.text()

    async def text(self) -> str:
        for _ in range(50):
            try:
                return str(
                    await asyncio.to_thread(
                        lambda: self.chrome.find_element(By.TAG_NAME, "body").text
                    )
                )
            except WebDriverException:  # the page changes under us (stale, or gone)
                await asyncio.sleep(0.1)
        raise AssertionError("the page never settled")

    async def click(self, css: str) -> str:
        """Press what ``css`` finds, and wait for the page it leads to."""

        def press() -> None:
            body = self.chrome.find_element(By.TAG_NAME, "body")
            self.chrome.find_element(By.CSS_SELECTOR, css).click()

            def left(_: Any) -> bool:
                try:
                    body.is_enabled()
                except WebDriverException:  # stale, or Chrome's "does not belong to the document"
                    return True
                return False

            WebDriverWait(self.chrome, 10).until(left)

        await asyncio.to_thread(press)
        return await self.text()

    async def wait_for(self, words: str) -> str:
        deadline = time.monotonic() + 10
        while words not in (text := await self.text()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{words!r} never showed; the page says: {text[:500]}")
            await asyncio.sleep(0.1)
        return text

    async def cookie(self) -> str | None:
        found = await asyncio.to_thread(self.chrome.get_cookie, "botkit_console")
        return None if found is None else str(found["value"])

    async def forget_cookies(self) -> None:
        await asyncio.to_thread(self.chrome.delete_all_cookies)

    async def screenshot(self, name: str) -> None:
        """With ``CONSOLE_SCREENSHOTS=1``, save the page for the docs (the guide's pictures)."""
        if not os.environ.get("CONSOLE_SCREENSHOTS"):
            return
        DOCS.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(self.chrome.save_screenshot, str(DOCS / f"{name}.png"))


@pytest.fixture
async def browser(driver: webdriver.Chrome) -> Browser:
    await asyncio.to_thread(driver.delete_all_cookies)
    return Browser(driver)


def console_bot(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    ran: list[str],
    **settings: Any,
) -> Bot:
    values: dict[str, Any] = {
        "admins": frozenset({ADMIN}),
        "allowed_users": frozenset({VIEWER, STRANGER}),
        "telegram_bot_token": SecretStr(telegram.token),
        "console_port": 0,
        **settings,
    }
    bot = make_bot(claude, tmp_path, **values)

    @bot.tool(approval=True)
    async def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    return bot


async def ask(telegram: FakeTelegramServer, user: int, text: str) -> str:
    before = len(telegram.sent_messages(user))
    telegram.send_text(user, text)
    return (await telegram.wait_for_messages(user, before + 1))[-1].plain_text


async def sign_in(browser: Browser, telegram: FakeTelegramServer, user: int = ADMIN) -> str:
    """Ask for a link with /console, open it, press Sign in; the link."""
    answer = await ask(telegram, user, "/console")
    match = LINK.search(answer)
    assert match, answer
    await browser.open(match.group(1))
    await browser.click("#signin")
    await browser.wait_for("Conversations")
    return match.group(1)


async def test_a_link_signs_an_admin_in_once_and_a_stranger_sees_nothing(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [])
    async with running(bot, telegram):
        await ask(telegram, ADMIN, "hello there")
        assert bot.console is not None and bot.console.served_at is not None
        base = bot.console.served_at
        page = await browser.open(f"{base}/conversations")
        assert "not signed in" in page.lower() and "hello" not in page
        link = await sign_in(browser, telegram)
        listing = await browser.text()
        assert str(ADMIN) in listing
        await browser.screenshot("conversations")
        await browser.forget_cookies()
        await browser.open(link)
        page = await browser.click("#signin")
        assert "used already" in page
        assert await browser.cookie() is None
        page = await browser.open(f"{base}/conversations")
        assert "not signed in" in page.lower() and str(ADMIN) not in page


async def test_an_expired_link_and_a_non_admins_console_are_refused(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [])
    async with running(bot, telegram):
        answer = await ask(telegram, STRANGER, "/console")
        assert answer == "The console is for the bot's admins." and "http" not in answer
        store: Any = await bot.access.user_store()
        token = "expired-token-of-forty-three-characters-xyz"
        past = datetime.now(UTC) - timedelta(seconds=1)
        await store.add_console_link(hashlib.sha256(token.encode()).hexdigest(), ADMIN, past)
        assert bot.console is not None
        await browser.open(f"{bot.console.served_at}/signin/{token}")
        page = await browser.click("#signin")
        assert "expired" in page
        assert await browser.cookie() is None


async def test_an_approval_allowed_on_the_page_runs_the_tool_once_and_is_audited(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    ran: list[str] = []
    bot = console_bot(claude, telegram, tmp_path, ran)
    async with running(bot, telegram):
        request = await ask(telegram, ADMIN, "DELETE /tmp/report.pdf")
        assert "delete_file" in request
        await sign_in(browser, telegram)
        assert bot.console is not None
        page = await browser.open(f"{bot.console.served_at}/approvals")
        assert "delete_file" in page and "/tmp/report.pdf" in page
        await browser.screenshot("approvals")
        with capture_logs() as logs:
            page = await browser.click("button.allow")
            await telegram.wait_for_messages(ADMIN, 3)
        assert "Allowed." in page
        assert "No request waits" in page
        await asyncio.sleep(0.5)
    assert ran == ["/tmp/report.pdf"], "allowed on the page, it ran once"
    assert telegram.sent_messages(ADMIN)[-1].plain_text == "tool said: deleted /tmp/report.pdf"
    (audit,) = [line for line in logs if line["event"] == "admin.action"]
    assert audit["actor"] == ADMIN and audit["action"] == "approvals.allow"
    assert audit["via"] == "console"


async def test_a_transcript_shows_tool_calls_and_the_usage_page_draws_its_charts(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [])
    async with running(bot, telegram):
        request = await ask(telegram, ADMIN, "DELETE /tmp/a.txt")
        telegram.press_button(ADMIN, telegram.sent_messages(ADMIN)[-1], "Allow")
        await telegram.wait_for_messages(ADMIN, 2)
        await ask(telegram, ADMIN, "<b>not markup</b>")
        telegram.react(ADMIN, telegram.sent_messages(ADMIN)[-1], "👎")
        negative = bot.metrics.feedback.labels("negative")
        for _ in range(100):  # the reaction is a Telegram update of its own: wait for it
            if negative._value.get():
                break
            await asyncio.sleep(0.05)
        assert "delete_file" in request
        await sign_in(browser, telegram)
        assert bot.console is not None
        base = bot.console.served_at
        page = await browser.open(f"{base}/conversations?since=2999-01-01")
        assert "No conversations" in page
        page = await browser.open(f"{base}/conversations?q=not+markup&since=2000-01-01")
        assert str(ADMIN) in page
        page = await browser.click(f'a[href="/conversations/{ADMIN}"]')
        assert "→ delete_file" in page and "/tmp/a.txt" in page
        assert "↳ delete_file: deleted /tmp/a.txt" in page
        assert "<b>not markup</b>" in page, "what people wrote is shown as text, not as HTML"
        assert "negative (👎)" in page, "the user's reaction shows beside the turn"
        await browser.screenshot("transcript")
        await bot.access.ledger.flush()  # written every few seconds: now
        page = await browser.open(f"{base}/usage")
        bars = await asyncio.to_thread(
            lambda: browser.chrome.find_elements(By.CSS_SELECTOR, "svg rect.bar")
        )
        assert "Cost per day" in page and "Cost per model" in page and "Top spenders" in page
        assert len(bars) >= 3 and str(ADMIN) in page
        assert "claude" in page, "each model's bar is labelled with its name"
        await browser.screenshot("usage")


async def test_a_form_posted_without_the_sessions_token_changes_nothing(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [])
    async with running(bot, telegram):
        store = await bot.access.user_store()
        await store.upsert_user(VIEWER, "user", "Vera")
        await sign_in(browser, telegram)
        cookie = await browser.cookie()
        assert bot.console is not None and cookie
        async with aiohttp.ClientSession(cookies={"botkit_console": cookie}) as http:
            url = f"{bot.console.served_at}/users/{VIEWER}"
            async with http.post(url, data={"action": "block"}) as response:
                assert response.status == 403
            record = await store.get_user(VIEWER)
            assert record is None or not record.blocked
        page = await browser.open(f"{bot.console.served_at}/users")
        assert str(VIEWER) in page
        page = await browser.click(f'form[action="/users/{VIEWER}"] button')
        assert f"Blocked {VIEWER}." in page
        record = await store.get_user(VIEWER)
        assert record is not None and record.blocked


async def test_a_viewer_sees_who_and_when_but_neither_content_nor_buttons(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [])
    async with running(bot, telegram):
        store = await bot.access.user_store()
        await store.upsert_user(VIEWER, "viewer")
        await ask(telegram, ADMIN, "DELETE /tmp/secret-plan.txt")
        await sign_in(browser, telegram, VIEWER)
        assert bot.console is not None
        base = bot.console.served_at
        page = await browser.open(f"{base}/approvals")
        assert "delete_file" in page and "secret-plan" not in page
        assert "Allow" not in page
        page = await browser.open(f"{base}/conversations/{ADMIN}")
        assert "→ delete_file" in page and "secret-plan" not in page
        assert "content hidden" in page


def _init_data(token: str, user_id: int, signed_at: float) -> str:
    """``initData`` as Telegram's page on Mini Apps says it is signed: the HMAC-SHA256 of the
    sorted ``key=value`` lines, under the HMAC-SHA256 of the bot's token keyed ``WebAppData``."""
    fields = {
        "auth_date": str(int(signed_at)),
        "query_id": "AAHdF6IQAAAAAN0XohDhrOrc",
        "user": json.dumps({"id": user_id, "first_name": "Ada"}),
    }
    check = "\n".join(f"{k}={fields[k]}" for k in sorted(fields))
    secret = hmac.new(b"WebAppData", token.encode(), hashlib.sha256).digest()
    fields["hash"] = hmac.new(secret, check.encode(), hashlib.sha256).hexdigest()
    return urlencode(fields)


def test_init_data_is_checked_against_the_token_and_its_age() -> None:
    token = "123456:AAH-real-token"
    now = time.time()
    assert check_init_data(_init_data(token, ADMIN, now - 5), token, 600) == ADMIN
    with pytest.raises(InitDataRefused, match="not signed"):
        check_init_data(_init_data("123456:AAH-other", ADMIN, now), token, 600)
    with pytest.raises(InitDataRefused, match="old"):
        check_init_data(_init_data(token, ADMIN, now - 601), token, 600)
    forged = _init_data(token, ADMIN, now).replace(str(ADMIN), str(STRANGER))
    with pytest.raises(InitDataRefused, match="not signed"):
        check_init_data(forged, token, 600)


async def test_the_mini_app_signs_in_with_telegrams_init_data_and_refuses_a_forged_one(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [])
    async with running(bot, telegram):
        await ask(telegram, ADMIN, "hello")
        assert bot.console is not None
        base = bot.console.served_at
        forged = _init_data("999:AAH-another-bot", ADMIN, time.time())
        await browser.open(f"{base}/app#" + urlencode({"tgWebAppData": forged}))
        page = await browser.wait_for("could not be checked")
        assert await browser.cookie() is None
        stale = _init_data(telegram.token, ADMIN, time.time() - 3600)
        await browser.open("about:blank")  # else only the #fragment changes: no new page
        await browser.open(f"{base}/app#" + urlencode({"tgWebAppData": stale}))
        await browser.wait_for("could not be checked")
        assert await browser.cookie() is None
        strangers = _init_data(telegram.token, STRANGER, time.time())  # Telegram's, not an admin
        await browser.open("about:blank")
        await browser.open(f"{base}/app#" + urlencode({"tgWebAppData": strangers}))
        await browser.wait_for("Only the bot's admins")
        assert await browser.cookie() is None
        good = _init_data(telegram.token, ADMIN, time.time())
        await browser.open("about:blank")
        await browser.open(f"{base}/app#" + urlencode({"tgWebAppData": good}))
        page = await browser.wait_for("Last written")
        assert str(ADMIN) in page and await browser.cookie()


# ---- the queued runtime on PostgreSQL: the receiver serves it, a worker answers /console ------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@asynccontextmanager
async def queued(bot: Bot, *, receive: bool = True, work: bool = True) -> AsyncIterator[None]:
    """``serve_queued`` in this loop while the block runs; on exit, stop it and wait."""
    messenger = messenger_for(bot.settings, flood=FloodControl.unlimited(), inbox=False)
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve_queued(
            bot,
            stop,
            receive=receive,
            work=work,
            concurrency=2,
            messenger=messenger,
            grace_period=5,
        )
    )
    try:
        yield
    finally:
        stop.set()
        await task


async def test_on_postgres_the_receiver_serves_the_console_and_a_workers_link_signs_in(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    db: str,
    browser: Browser,
) -> None:
    port = free_port()
    common: dict[str, Any] = {
        "database_url": SecretStr(db),
        "telegram_api_base": telegram.base_url,
        "stalled_timeout": 2.0,
        "poll_timeout": 1,
        "console_port": port,
    }
    receiver = console_bot(claude, telegram, tmp_path / "r", [], **common)
    worker = console_bot(claude, telegram, tmp_path / "w", [], **common)
    async with queued(receiver, work=False), queued(worker, receive=False):
        for _ in range(100):  # the processes start in the background
            if receiver.console is not None:
                break
            await asyncio.sleep(0.1)
        assert receiver.console is not None and worker.console is None
        await ask(telegram, STRANGER, "a question about <i>tides</i>")
        await sign_in(browser, telegram)  # the worker made the link; the receiver took it
        page = await browser.open(f"http://127.0.0.1:{port}/conversations?q=tides")
        assert str(STRANGER) in page and "entries" in page
        page = await browser.open(f"http://127.0.0.1:{port}/conversations?q=no-such-words")
        assert str(STRANGER) not in page
        page = await browser.open(f"http://127.0.0.1:{port}/conversations?since=2000-01-01")
        assert str(STRANGER) in page
        page = await browser.open(f"http://127.0.0.1:{port}/conversations?since=2999-01-01")
        assert str(STRANGER) not in page and "No conversations" in page
        page = await browser.open(f"http://127.0.0.1:{port}/conversations/{STRANGER}")
        assert "a question about <i>tides</i>" in page
        page = await browser.open(f"http://127.0.0.1:{port}/health")
        workers = await asyncio.to_thread(
            lambda: browser.chrome.find_element(By.ID, "workers").text
        )
        assert re.search(r"worker \d+ +\d+ s ago 0", workers), workers


async def test_an_invite_made_on_the_page_shows_its_link_and_qr_code_once(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [])
    async with running(bot, telegram):
        await sign_in(browser, telegram)
        assert bot.console is not None
        await browser.open(f"{bot.console.served_at}/invites")
        with capture_logs() as logs:
            page = await browser.click("#create")
        link = await asyncio.to_thread(
            lambda: browser.chrome.find_element(By.ID, "invite-link").get_attribute("value")
        )
        qr = await asyncio.to_thread(
            lambda: browser.chrome.find_elements(By.CSS_SELECTOR, "#qr svg")
        )
        await browser.screenshot("invite")
        assert "Invite for role user" in page and qr
        assert link and link.startswith(f"https://t.me/{telegram.bot_username}?start=")
        code = link.rpartition("=")[2]
        store = await bot.access.user_store()
        invite = await store.get_invite(code)
        assert invite is not None and invite.uses_left == 1 and invite.created_by == ADMIN
        page = await browser.open(f"{bot.console.served_at}/invites")
        assert code[:4] in page and code not in page, "the list shows the prefix only"
    (audit,) = [line for line in logs if line["event"] == "admin.action"]
    assert audit["action"] == "invites.create" and audit["actor"] == ADMIN


async def test_the_health_page_counts_turns_and_waiting_approvals(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [])
    async with running(bot, telegram):
        await ask(telegram, ADMIN, "hello")
        await ask(telegram, ADMIN, "DELETE /tmp/x")
        await sign_in(browser, telegram)
        assert bot.console is not None
        page = await browser.open(f"{bot.console.served_at}/health")
        assert "user store answers" in page
        assert "approvals waiting 1" in page
        assert "turns: answered 1" in page


async def test_a_forgotten_user_is_gone_from_every_page(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [])
    async with running(bot, telegram):
        store = await bot.access.user_store()
        await store.upsert_user(STRANGER, "user", "Stan Ranger")
        await ask(telegram, STRANGER, "my secret recipe")
        await ask(telegram, STRANGER, "DELETE /home/stan")
        await bot.access.ledger.flush()
        await sign_in(browser, telegram)
        assert bot.console is not None
        base = bot.console.served_at
        pages = ["/conversations", "/users", "/usage", "/approvals", f"/conversations/{STRANGER}"]
        before = {path: await browser.open(base + path) for path in pages}
        assert all(str(STRANGER) in text for text in before.values())
        await ask(telegram, STRANGER, "/forget_me")
        telegram.press_button(STRANGER, telegram.sent_messages(STRANGER)[-1], "Erase it all")
        await telegram.wait_for_requests("answerCallbackQuery", 1)
        await asyncio.sleep(0.5)
        for path in pages:
            page = await browser.open(base + path)
            assert str(STRANGER) not in page, path
            assert "Stan" not in page and "secret recipe" not in page, path


async def test_with_content_none_even_an_admin_sees_no_words(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [], console_content="none")
    async with running(bot, telegram):
        await ask(telegram, STRANGER, "my secret recipe")
        await sign_in(browser, telegram)
        assert bot.console is not None
        page = await browser.open(f"{bot.console.served_at}/conversations/{STRANGER}")
        assert "user" in page and "content hidden" in page and "recipe" not in page
        page = await browser.open(f"{bot.console.served_at}/conversations?q=recipe")
        names = await asyncio.to_thread(
            lambda: [
                i.get_attribute("name") for i in browser.chrome.find_elements(By.TAG_NAME, "input")
            ]
        )
        assert "q" not in names and "recipe" not in page, "no search by a text that is hidden"


async def test_console_in_a_group_gives_no_link_and_over_https_opens_as_a_mini_app(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [], console_url="https://ops.example.org/")
    group = -1001234
    async with running(bot, telegram):
        telegram.send_text(
            ADMIN, f"/console@{telegram.bot_username}", chat_id=group, chat_type="supergroup"
        )
        (answer,) = await telegram.wait_for_messages(group, 1)
        assert "private chat" in answer.plain_text and "signin" not in answer.plain_text
        await ask(telegram, ADMIN, "/console")
        sent = telegram.sent_messages(ADMIN)[-1]
    assert "https://ops.example.org/signin/" in sent.plain_text
    markup = sent.params["reply_markup"]
    markup = json.loads(markup) if isinstance(markup, str) else markup
    (button,) = [b for row in markup["inline_keyboard"] for b in row]
    assert button["web_app"] == {"url": "https://ops.example.org/app"}


async def test_on_postgres_allow_on_the_receivers_console_runs_the_call_once_on_a_worker(
    claude: FakeAnthropicServer,
    telegram: FakeTelegramServer,
    tmp_path: Path,
    db: str,
    browser: Browser,
) -> None:
    port = free_port()
    common: dict[str, Any] = {
        "database_url": SecretStr(db),
        "telegram_api_base": telegram.base_url,
        "stalled_timeout": 2.0,
        "poll_timeout": 1,
        "console_port": port,
        "approval_timeout": 12.0,  # the sweep that resumes decided requests: every 3 s
    }
    on_receiver: list[str] = []
    on_worker: list[str] = []
    receiver = console_bot(claude, telegram, tmp_path / "r", on_receiver, **common)
    worker = console_bot(claude, telegram, tmp_path / "w", on_worker, **common)
    async with queued(receiver, work=False), queued(worker, receive=False):
        request = await ask(telegram, ADMIN, "DELETE /tmp/pg")
        assert "delete_file" in request
        await sign_in(browser, telegram)
        page = await browser.open(f"http://127.0.0.1:{port}/approvals")
        assert "/tmp/pg" in page
        page = await browser.click("button.allow")
        assert "Allowed." in page
        answers = await telegram.wait_for_messages(ADMIN, 3, timeout=20)
        await asyncio.sleep(1)
    assert answers[-1].plain_text == "tool said: deleted /tmp/pg"
    assert on_receiver == [] and on_worker == ["/tmp/pg"], "run once, by a worker"


async def test_a_reminder_listed_on_the_page_is_cancelled_there(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [])
    async with running(bot, telegram):
        store = await bot.access.user_store()
        due = datetime.now(UTC) + timedelta(hours=3)
        made = await store.add_schedule(
            NewSchedule(STRANGER, STRANGER, "reminder", "water the plants", due, "UTC"),
            max_pending=10,
        )
        assert made is not None
        await sign_in(browser, telegram)
        assert bot.console is not None
        page = await browser.open(f"{bot.console.served_at}/scheduled")
        assert "water the plants" in page and str(STRANGER) in page
        with capture_logs() as logs:
            page = await browser.click(f'form[action="/scheduled/{made.id}"] button')
        assert f"Cancelled schedule {made.id}." in page and "water the plants" not in page
        assert await store.pending_schedules() == []
    (audit,) = [line for line in logs if line["event"] == "admin.action"]
    assert (audit["action"], audit["target"]) == ("schedules.cancel", made.id)


async def test_signing_out_ends_the_session_its_cookie_named(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [])
    async with running(bot, telegram):
        await sign_in(browser, telegram)
        cookie = await browser.cookie()
        assert bot.console is not None and cookie and len(bot.console.signed_in) == 1
        page = await browser.click("#signout")
        assert "Signed out." in page and await browser.cookie() is None
        assert len(bot.console.signed_in) == 0
        async with (
            aiohttp.ClientSession(cookies={"botkit_console": cookie}) as http,
            http.get(f"{bot.console.served_at}/users") as response,
        ):
            assert response.status == 401, "the old cookie opens nothing"


def test_a_session_ends_at_its_expiry_and_the_oldest_goes_beyond_the_cap() -> None:
    sessions = Sessions(seconds=0.2, most=2)
    first = sessions.start(ADMIN)
    found = sessions.get(first)
    assert found is not None and found.user_id == ADMIN and len(found.csrf) >= 32
    assert sessions.get("made-up") is None and sessions.get(None) is None
    time.sleep(0.25)
    assert sessions.get(first) is None, "expired"
    kept = [sessions.start(user) for user in (1, 2, 3)]
    assert sessions.get(kept[0]) is None and len(sessions) == 2
    assert [sessions.get(t).user_id for t in kept[1:]] == [2, 3]  # type: ignore[union-attr]


async def test_an_open_handoff_links_to_its_topic_in_the_operators_chat(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [])
    async with running(bot, telegram):
        store: Any = await bot.access.user_store()
        await store.open_handoff(STRANGER, -1001234, 77, "Stan (1003)")
        await store.open_handoff(VIEWER, -1001234, 78, "Vera (1002)")
        await store.close_handoff(VIEWER)
        await sign_in(browser, telegram)
        assert bot.console is not None
        page = await browser.open(f"{bot.console.served_at}/handoffs")
        href = await asyncio.to_thread(
            lambda: browser.chrome.find_element(By.LINK_TEXT, "topic 77").get_attribute("href")
        )
    assert "Stan (1003)" in page and "not yet" in page
    assert "Vera" not in page, "a closed handoff is not listed"
    assert href == "https://t.me/c/1234/77"


async def test_a_console_port_in_use_stops_the_bot_with_one_sentence(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        bot = console_bot(claude, telegram, tmp_path, [], console_port=port)
        with pytest.raises(ConfigError, match=f"cannot serve the console on 127.0.0.1:{port}"):
            async with running(bot, telegram):
                await asyncio.sleep(2)


async def pay(bot: Bot, telegram: FakeTelegramServer, user: int) -> str:
    """``user`` buys Pro; the charge id, once the payment is recorded and thanked for."""
    before = len(telegram.sent_messages(user))
    charge = telegram.complete_payment(user, f"plan:pro:50:{user}", 50)
    await telegram.wait_for_messages(user, before + 1)
    return charge


async def test_a_refund_pressed_on_the_payments_page_refunds_once_and_is_audited(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [], plans=PRO)
    async with running(bot, telegram):
        kept = await pay(bot, telegram, VIEWER)
        charge = await pay(bot, telegram, STRANGER)
        await sign_in(browser, telegram)
        assert bot.console is not None
        page = await browser.open(f"{bot.console.served_at}/payments")
        assert page.index(charge) < page.index(kept), "the newest first"
        assert "pro" in page and "Refund" in page
        bot.console.settings = replace(bot.console.settings, page_size=1)
        page = await browser.open(f"{bot.console.served_at}/payments")
        assert charge in page and kept not in page
        page = await browser.click("#next")
        assert kept in page and charge not in page, "paged"
        page = await browser.open(f"{bot.console.served_at}/payments")
        with capture_logs() as logs:
            page = await browser.click(f'form[action="/payments/{charge}"] button')
        assert "Refunded 50 Stars; plan pro ended." in page
        assert telegram.refunded == [charge]
        assert [r.params["user_id"] for r in telegram.requests_for("refundStarPayment")] == [
            STRANGER
        ]
        assert "refunded" in page
        refund_buttons = await asyncio.to_thread(
            browser.chrome.find_elements, By.CSS_SELECTOR, f'form[action="/payments/{charge}"]'
        )
        assert refund_buttons == [], "a refunded payment offers no second refund"
        grant = await (await bot.payments.store()).get(charge)
        assert grant is not None and grant.refunded_at is not None
        assert (await (await bot.payments.store()).get(kept)).refunded_at is None  # type: ignore[union-attr]
    (audit,) = [line for line in logs if line["event"] == "admin.action"]
    assert (audit["action"], audit["target"], audit["actor"]) == ("payments.refund", charge, ADMIN)
    assert audit["via"] == "console" and audit["user_id"] == STRANGER


async def test_a_viewer_sees_payments_without_refund_and_an_erased_payer_shows_as_erased(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [], plans=PRO)
    async with running(bot, telegram):
        store = await bot.access.user_store()
        await store.upsert_user(VIEWER, "viewer")
        await store.upsert_user(STRANGER, "user", "Stan Ranger")
        charge = await pay(bot, telegram, STRANGER)
        await sign_in(browser, telegram, VIEWER)
        assert bot.console is not None
        base = bot.console.served_at
        page = await browser.open(f"{base}/payments")
        assert charge in page and "Stan Ranger" in page and str(STRANGER) in page
        assert "Refund" not in page, "viewers see, not act"
        csrf = await asyncio.to_thread(
            lambda: browser.chrome.find_element(
                By.CSS_SELECTOR, 'form[action="/signout"] input[name="csrf"]'
            ).get_attribute("value")
        )
        cookie = await browser.cookie()
        assert csrf and cookie
        async with aiohttp.ClientSession(cookies={"botkit_console": cookie}) as http:
            url = f"{base}/payments/{charge}"
            async with http.post(url, data={"csrf": csrf}, allow_redirects=False) as response:
                assert response.status == 403, "a viewer's own form token acts on nothing"
                assert "Viewers can see, not act." in await response.text()
        assert telegram.refunded == []
        await ask(telegram, STRANGER, "/forget_me")
        telegram.press_button(STRANGER, telegram.sent_messages(STRANGER)[-1], "Erase it all")
        await telegram.wait_for_requests("answerCallbackQuery", 1)
        for _ in range(50):
            if await store.get_user(STRANGER) is None:
                break
            await asyncio.sleep(0.1)
        page = await browser.open(f"{base}/payments")
        assert charge in page, "payment records outlive an erasure"
        assert "erased user" in page
        assert str(STRANGER) not in page and "Stan" not in page
        await browser.forget_cookies()
        await sign_in(browser, telegram)
        page = await browser.open(f"{base}/payments")
        assert "erased user" in page and "Refund" in page, "an admin can still refund it"


async def test_the_users_page_shows_each_users_plan_and_todays_use_of_their_budget(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [], plans=PRO, daily_token_budget=5_000)
    async with running(bot, telegram):
        store = await bot.access.user_store()
        await store.upsert_user(VIEWER, "user", "Vera")
        await store.upsert_user(STRANGER, "user", "Stan")
        await pay(bot, telegram, STRANGER)
        today = datetime.now(UTC).date()
        await store.add_usage(STRANGER, today, 1_234)
        await store.add_usage(VIEWER, today, 321)
        await sign_in(browser, telegram)
        assert bot.console is not None
        page = await browser.open(f"{bot.console.served_at}/users")
        lines = {line.split()[0]: line for line in page.splitlines() if line[:1].isdigit()}
        assert "pro until" in lines[str(STRANGER)]
        assert "1,234 / 1,000,000" in lines[str(STRANGER)], "the plan's budget is in force"
        assert "none" in lines[str(VIEWER)] and "321 / 5,000" in lines[str(VIEWER)]


async def test_the_health_page_lists_this_process_and_the_last_failed_turn(
    claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, browser: Browser
) -> None:
    bot = console_bot(claude, telegram, tmp_path, [])
    async with running(bot, telegram):
        await sign_in(browser, telegram)
        assert bot.console is not None
        page = await browser.open(f"{bot.console.served_at}/health")
        assert f"this process (pid {os.getpid()}" in page
        assert "No turn has failed here." in page
        claude.enqueue(FakeError.invalid_request("messages: something is wrong"))
        await ask(telegram, ADMIN, "this one fails")
        page = await browser.open(f"{bot.console.served_at}/health")
        assert "No turn has failed here." not in page
        errors = await asyncio.to_thread(lambda: browser.chrome.find_element(By.ID, "errors").text)
        assert re.search(r"^\S+ \S+ error LLM\w*Error$", errors, re.M), errors
        assert "this one fails" not in page, "no user's words on the health page"
