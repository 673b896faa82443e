"""The console's web application: sign-in, the pages, and the actions behind their buttons.

Every page but sign-in needs a session (an HttpOnly, SameSite=Strict cookie); the signed-in
person's role is read again at each request, so one blocked, demoted or forgotten is out at
once. Admins act; viewers (role ``viewer``) only see. Every form carries the session's CSRF
token, and a request that changes something without it is refused. Every action writes the
same ``admin.action`` log line as the command line's (actor: the admin's id, via ``console``).
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from html import escape
from typing import Any, Literal, Protocol
from urllib.parse import quote, urlencode

import structlog
from aiohttp import web

from botkit.access import Access
from botkit.admin import Admin
from botkit.console.conversations import Conversations
from botkit.console.html import bar_chart, page, table
from botkit.console.html import form as button_form
from botkit.console.settings import ConsoleSettings
from botkit.console.signin import (
    InitDataRefused,
    LinkRefused,
    Session,
    Sessions,
    check_init_data,
    take_link_token,
)
from botkit.console.texts import ConsoleTexts
from botkit.console.transcript import transcript_html
from botkit.errors import MessengerError
from botkit.metrics import TurnFailure
from botkit.payments.service import RefundError
from botkit.payments.store import Grant
from botkit.pricing import estimate
from botkit.sessions import is_conversation_key
from botkit.sessions.base import SessionStore
from botkit.stores.base import UserRecord
from botkit.stores.console_links import ConsoleLinkStore
from botkit.stores.handoffs import HandoffStore
from botkit.types import Usage

__all__ = ["COOKIE", "ConsoleApp", "Deciding", "Paying", "Worker"]

log = structlog.get_logger(__name__)

COOKIE = "botkit_console"
"""The session cookie's name."""
USAGE_DAYS = 14
"""The days the usage page shows unless asked for others (at most ``MAX_USAGE_DAYS``)."""
MAX_USAGE_DAYS = 92
TOP_SPENDERS = 10
MAX_INVITES_SHOWN = 200
"""The newest invites the invites page lists."""
MAX_SCHEDULES_SHOWN = 200
"""The soonest reminders and tasks the scheduled page lists."""

ERASED = "erased user"
"""How a payment of a user erased since shows its payer (the record is kept; the person is not)."""

Role = Literal["admin", "viewer"]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Readings = Callable[[], Awaitable[list[tuple[str, str]]]]
"""The health page's lines: (what, how much)."""


class Deciding(Protocol):
    """What the console needs of approvals: the waiting ones, and a press on the page."""

    async def waiting(self) -> list[Any]:
        """The requests waiting for a decision."""
        ...

    async def press(self, approval_id: str, choice: str, user_id: int) -> str:
        """Allow (``"a"``) or Deny (``"d"``), as the buttons do; the notice."""
        ...


class Paying(Protocol):
    """What the console needs of payments: a page of them, a user's plan, and a refund."""

    async def recent(self, limit: int, offset: int) -> list[Grant]:
        """Payments, newest first."""
        ...

    async def plan(self, user_id: int) -> Grant | None:
        """The user's current plan, if any."""
        ...

    async def refund(self, charge_id: str, admin: Admin) -> Grant:
        """Refund as ``payments refund`` does (``RefundError`` if it cannot be)."""
        ...


@dataclass(frozen=True, slots=True)
class Worker:
    """One line of the health page's workers."""

    name: str
    started: datetime | None
    seen: datetime
    """Its last sign of life (a heartbeat; for this process, now)."""
    running: int
    """The turns it runs now."""


@dataclass(slots=True)
class _Visitor:
    session: Session
    role: Role
    token: str

    @property
    def acts(self) -> bool:
        return self.role == "admin"


_VISITOR: web.RequestKey[_Visitor] = web.RequestKey("visitor", _Visitor)
_NONCE: web.RequestKey[str] = web.RequestKey("nonce", str)


class ConsoleApp:
    """The console's pages over the bot's stores."""

    def __init__(
        self,
        settings: ConsoleSettings,
        access: Access,
        sessions: SessionStore,
        conversations: Conversations,
        approvals: Deciding,
        texts: ConsoleTexts | None = None,
        *,
        health: Readings | None = None,
        bot_username: Callable[[], str | None] = lambda: None,
        payments: Paying | None = None,
        workers: Callable[[], Awaitable[list[Worker]]] | None = None,
        failures: Callable[[], list[TurnFailure]] = list,
    ) -> None:
        self.settings = settings
        self.access = access
        self.sessions = sessions
        self.conversations = conversations
        self.approvals = approvals
        self.health = health
        """The health page's readings (queue depth, turns, errors)."""
        self.payments = payments
        """Payments, plans and refunds (``None``: no payments page)."""
        self.workers = workers
        """The workers the health page lists."""
        self.failures = failures
        """The last failed turns this process saw (``Metrics.last_failures``)."""
        self.bot_username = bot_username
        """The bot's username, for invite links (``None`` until known)."""
        self.texts = texts or ConsoleTexts()
        self.signed_in = Sessions(settings.session_seconds, settings.max_sessions)
        """The open sessions."""
        self.served_at: str | None = None
        """The address it listens on, once served."""

    def application(self) -> web.Application:
        """The aiohttp application serving the console."""
        app = web.Application(middlewares=[self._guard], client_max_size=64 * 1024)
        app.router.add_get("/", self._home)
        app.router.add_get("/signin/{token}", self._signin_page)
        app.router.add_post("/signin", self._signin)
        app.router.add_get("/app", self._mini_app)
        app.router.add_post("/app/signin", self._mini_app_signin)
        app.router.add_post("/signout", self._signout)
        app.router.add_get("/conversations", self._conversations)
        app.router.add_get("/conversations/{key}", self._transcript)
        app.router.add_get("/usage", self._usage)
        app.router.add_get("/approvals", self._approvals)
        app.router.add_post("/approvals/{id}", self._decide)
        app.router.add_get("/users", self._users)
        app.router.add_post("/users/{id}", self._user_action)
        app.router.add_get("/handoffs", self._handoffs)
        app.router.add_get("/invites", self._invites)
        app.router.add_post("/invites", self._create_invite)
        app.router.add_get("/scheduled", self._scheduled)
        app.router.add_post("/scheduled/{id}", self._cancel_schedule)
        app.router.add_get("/payments", self._payments)
        app.router.add_post("/payments/{charge}", self._refund)
        app.router.add_get("/health", self._health)
        return app

    # ---- who may come in ----------------------------------------------------------------

    _OPEN = frozenset({"/signin", "/app", "/app/signin"})

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Security headers on every answer; a session (and a CSRF token on a POST) for
        every page but sign-in."""
        open_path = request.path in self._OPEN or request.path.startswith("/signin/")
        if not open_path:
            visitor = await self._visitor(request)
            if visitor is None:
                return self._refusal(request, 401, self.texts.signed_out)
            if request.method == "POST":
                form = await request.post()
                given = str(form.get("csrf", ""))
                if not hmac.compare_digest(given.encode(), visitor.session.csrf.encode()):
                    log.warning("console.csrf_refused", path=request.path)
                    return self._refusal(request, 403, "This form is stale: reload the page.")
                if not visitor.acts and request.path != "/signout":
                    return self._refusal(request, 403, "Viewers can see, not act.")
            request[_VISITOR] = visitor
        response = await handler(request)
        _secure_headers(response, script_nonce=request.get(_NONCE))
        return response

    async def _visitor(self, request: web.Request) -> _Visitor | None:
        token = request.cookies.get(COOKIE)
        session = self.signed_in.get(token)
        if session is None or token is None:
            return None
        role = await self.role_of(session.user_id)
        if role is None:
            self.signed_in.end(token)
            return None
        return _Visitor(session, role, token)

    async def role_of(self, user_id: int) -> Role | None:
        """What ``user_id`` may do on the console: ``admin``, ``viewer``, or nothing."""
        store = await self.access.user_store()
        record = await store.get_user(user_id)
        if record is not None and record.blocked:
            return None
        if user_id in self.settings.admins or (record is not None and record.role == "admin"):
            return "admin"
        if record is not None and record.role == "viewer":
            return "viewer"
        return None

    def _refusal(self, request: web.Request, status: int, text: str) -> web.Response:
        body = f"<p>{escape(text)}</p>"
        response = _page(page("Not signed in" if status == 401 else "Refused", body))
        response.set_status(status)
        _secure_headers(response)
        return response

    # ---- sign-in --------------------------------------------------------------------------

    async def _signin_page(self, request: web.Request) -> web.Response:
        # A GET only shows a button: a link preview fetching the address spends nothing.
        token = request.match_info["token"]
        body = (
            '<form method="post" action="/signin">'
            f'<input type="hidden" name="token" value="{escape(token)}">'
            '<button class="allow" id="signin">Sign in to the console</button></form>'
        )
        return _page(page("Sign in", body))

    async def _signin(self, request: web.Request) -> web.Response:
        form = await request.post()
        store = await self.access.user_store()
        assert isinstance(store, ConsoleLinkStore)
        try:
            user_id = await take_link_token(store, str(form.get("token", "")))
        except LinkRefused as e:
            log.info("console.link_refused", expired=e.expired)
            text = self.texts.link_expired if e.expired else self.texts.link_used
            return self._refusal(request, 403, text)
        return await self._start(request, user_id, "link")

    async def _start(self, request: web.Request, user_id: int, how: str) -> web.Response:
        if await self.role_of(user_id) is None:
            log.info("console.signin_refused", user_id=user_id, via=how)
            if how == "link":
                return self._refusal(request, 403, self.texts.not_admin)
            return web.Response(status=403, text=self.texts.not_admin)  # shown by the app's script
        token = self.signed_in.start(user_id)
        log.info("console.signed_in", user_id=user_id, via=how)
        if how == "link":
            redirect = web.HTTPSeeOther("/conversations")
            self._set_cookie(redirect, token)
            raise redirect
        response = web.json_response({"ok": True, "next": "/conversations"})
        self._set_cookie(response, token)
        return response

    def _set_cookie(self, response: web.StreamResponse, token: str) -> None:
        """The session's cookie: HttpOnly, SameSite=Strict, expiring with the session."""
        response.set_cookie(
            COOKIE,
            token,
            max_age=int(self.settings.session_seconds),
            path="/",
            httponly=True,
            samesite="Strict",
            secure=self.settings.secure,
        )

    async def _mini_app(self, request: web.Request) -> web.Response:
        nonce = secrets.token_urlsafe(16)
        request[_NONCE] = nonce
        script = (
            "const p=new URLSearchParams(location.hash.slice(1));"
            "const d=p.get('tgWebAppData');const s=document.getElementById('state');"
            "if(!d){s.textContent='Open this page from the bot: send /console.';}else{"
            "fetch('/app/signin',{method:'POST',credentials:'same-origin',"
            "headers:{'Content-Type':'application/x-www-form-urlencoded'},"
            "body:new URLSearchParams({init_data:d})}).then(async r=>{"
            "if(r.ok){location.replace((await r.json()).next);}"
            "else{s.textContent=await r.text();}});}"
        )
        body = f'<p id="state">Signing in…</p><script nonce="{nonce}">{script}</script>'
        return _page(page("Console", body))

    async def _mini_app_signin(self, request: web.Request) -> web.Response:
        form = await request.post()
        try:
            user_id = check_init_data(
                str(form.get("init_data", "")),
                self.settings.bot_token,
                self.settings.init_data_seconds,
            )
        except InitDataRefused as e:
            log.info("console.init_data_refused", reason=str(e))
            return web.Response(status=403, text=self.texts.app_refused)
        return await self._start(request, user_id, "mini_app")

    async def _signout(self, request: web.Request) -> web.Response:
        visitor = request[_VISITOR]
        self.signed_in.end(visitor.token)
        response = _page(page("Signed out", "<p>Signed out.</p>"))
        response.del_cookie(COOKIE, path="/")
        return response

    async def _home(self, request: web.Request) -> web.Response:
        raise web.HTTPSeeOther("/conversations")

    # ---- pages ----------------------------------------------------------------------------

    def _sees_content(self, visitor: _Visitor) -> bool:
        content = self.settings.content
        return content == "all" or (content == "admins" and visitor.role == "admin")

    def _render(self, request: web.Request, title: str, body: str) -> web.Response:
        visitor = request[_VISITOR]
        who = f'<span class="note">{visitor.session.user_id} ({visitor.role}) </span>'
        return _page(page(title, body, csrf=visitor.session.csrf, status_line=who))

    async def _conversations(self, request: web.Request) -> web.Response:
        visitor = request[_VISITOR]
        page_number = _page_number(request)
        user = request.query.get("user", "").strip() or None
        text = request.query.get("q", "").strip() or None
        if text and not self._sees_content(visitor):
            text = None
        since_text = request.query.get("since", "").strip()
        try:
            since = datetime.fromisoformat(since_text).replace(tzinfo=UTC) if since_text else None
        except ValueError:
            since, since_text = None, ""
        size = self.settings.page_size
        found = await self.conversations.page(
            offset=page_number * size, limit=size, user=user, text=text, since=since
        )
        search = (
            '<form method="get" action="/conversations">'
            f'<input name="user" placeholder="user id" value="{escape(user or "")}"> '
            + (
                f'<input name="q" placeholder="text" value="{escape(text or "")}"> '
                if self._sees_content(visitor)
                else ""
            )
            + f'since <input type="date" name="since" value="{escape(since_text)}"> '
            + "<button>Search</button></form>"
        )
        rows = [
            [
                f'<a href="/conversations/{quote(row.key)}">{escape(row.key)}</a>',
                escape(_when(row.last_at)),
                escape(row.size),
            ]
            for row in found.rows
        ]
        listing = table(["Conversation", "Last written (UTC)", "Holds"], rows, numeric=[2])
        if not found.rows:
            listing = '<p class="note">No conversations.</p>'
        pager = _pager(request, page_number, found.more)
        note = f'<p class="note">{escape(found.note)}</p>' if found.note else ""
        return self._render(request, "Conversations", search + listing + note + pager)

    async def _transcript(self, request: web.Request) -> web.Response:
        visitor = request[_VISITOR]
        key = request.match_info["key"]
        if not is_conversation_key(key):
            raise web.HTTPNotFound()
        file = await self.sessions.load(key)
        if not file.entries:  # never was, or erased: nothing of it, not even its key
            response = self._render(request, "No such conversation", "")
            response.set_status(404)
            return response
        body = transcript_html(file, show_content=self._sees_content(visitor))
        return self._render(request, f"Conversation {key}", body)

    async def _usage(self, request: web.Request) -> web.Response:
        try:
            days = min(max(int(request.query.get("days", USAGE_DAYS)), 1), MAX_USAGE_DAYS)
        except ValueError:
            days = USAGE_DAYS
        first = datetime.now(UTC).date() - timedelta(days=days - 1)
        store = await self.access.user_store()
        rows = await store.model_usage_since(first)
        body = _usage_html(rows, first, days)
        return self._render(request, "Usage and cost", body)

    async def _approvals(self, request: web.Request) -> web.Response:
        visitor = request[_VISITOR]
        waiting = await self.approvals.waiting()
        flash = request.query.get("done", "")
        parts = [f'<p class="flash">{escape(flash)}</p>'] if flash else []
        if not waiting:
            parts.append('<p class="note">No request waits for a decision.</p>')
        for approval in waiting:
            parts.append(self._approval_html(approval, visitor))
        return self._render(request, "Approvals waiting", "".join(parts))

    def _approval_html(self, approval: Any, visitor: _Visitor) -> str:
        calls = []
        for call in approval.calls:
            args = (
                json.dumps(call["input"], ensure_ascii=False)
                if self._sees_content(visitor)
                else "(hidden)"
            )
            calls.append(f'<div class="call">{escape(call["name"])} {escape(args)}</div>')
        deadline = datetime.fromtimestamp(approval.deadline, UTC)
        head = (
            f'<div class="entry" id="approval-{escape(approval.id)}"><div class="meta">'
            f"user {approval.user_id} · conversation "
            f"{escape(approval.conversation.removesuffix(':'))} · "
            f"expires {escape(_when(deadline))} UTC</div>"
        )
        if not visitor.acts:
            actions = ""
        elif approval.may_press(visitor.session.user_id):
            csrf = visitor.session.csrf
            actions = (
                button_form(f"/approvals/{approval.id}", csrf, "Allow", css="allow", choice="a")
                + " "
                + button_form(f"/approvals/{approval.id}", csrf, "Deny", css="deny", choice="d")
            )
        else:
            actions = '<p class="note">Only the user or the approvers they were given decide.</p>'
        return head + "".join(calls) + actions + "</div>"

    async def _decide(self, request: web.Request) -> web.Response:
        visitor = request[_VISITOR]
        form = await request.post()
        approval_id = request.match_info["id"]
        choice = str(form.get("choice", ""))
        if choice not in ("a", "d"):
            raise web.HTTPBadRequest(text="choose a (Allow) or d (Deny)")
        notice = await self.approvals.press(approval_id, choice, visitor.session.user_id)
        action = "approvals.allow" if choice == "a" else "approvals.deny"
        (await self._admin(visitor)).audit(action, approval_id, notice=notice)
        raise web.HTTPSeeOther("/approvals?" + urlencode({"done": notice}))

    async def _users(self, request: web.Request) -> web.Response:
        visitor = request[_VISITOR]
        store = await self.access.user_store()
        page_number = _page_number(request)
        size = self.settings.page_size
        found = await store.list_users(offset=page_number * size, limit=size + 1)
        shown = found[:size]
        rows = []
        today = datetime.now(UTC).date()
        for user in shown:
            action = ""
            if visitor.acts and user.user_id != visitor.session.user_id:
                todo = "unblock" if user.blocked else "block"
                action = button_form(
                    f"/users/{user.user_id}", visitor.session.csrf, todo.title(), action=todo
                )
            rows.append(
                [
                    str(user.user_id),
                    escape(user.role),
                    escape(user.display_name or ""),
                    escape(_when(user.joined_at)),
                    await self._plan_html(user),
                    await self._budget_html(user, today),
                    "blocked" if user.blocked else "",
                    action,
                ]
            )
        flash = request.query.get("done", "")
        headers = ["User", "Role", "Name", "Joined (UTC)", "Plan", "Today / budget", "", ""]
        body = (f'<p class="flash">{escape(flash)}</p>' if flash else "") + table(
            headers, rows, numeric=[0, 5]
        )
        body += _pager(request, page_number, len(found) > size)
        return self._render(request, "Users", body)

    async def _plan_html(self, user: UserRecord) -> str:
        """The user's plan: its id and end (one indexed read, trusted a few seconds)."""
        grant = await self.payments.plan(user.user_id) if self.payments else None
        if grant is None:
            return '<span class="note">none</span>'
        return f"{escape(grant.plan_id)} until {escape(_when(grant.ends_at))}"

    async def _budget_html(self, user: UserRecord, today: date) -> str:
        """Today's tokens against the daily budget in force (the plan's, else the default)."""
        budget = await self.access.daily_budget(user.user_id)
        used = await (await self.access.user_store()).usage_on(user.user_id, today)
        return f"{used:,} / {budget:,}" if budget is not None else f"{used:,} / no budget"

    async def _user_action(self, request: web.Request) -> web.Response:
        visitor = request[_VISITOR]
        form = await request.post()
        try:
            user_id = int(request.match_info["id"])
        except ValueError:
            raise web.HTTPNotFound() from None
        admin = await self._admin(visitor)
        action = str(form.get("action", ""))
        if action == "block":
            await admin.block(user_id)
            done = f"Blocked {user_id}."
        elif action == "unblock":
            done = f"Unblocked {user_id}." if await admin.unblock(user_id) else "No such user."
        else:
            raise web.HTTPBadRequest(text="unknown action")
        self.access.forget(user_id)
        raise web.HTTPSeeOther("/users?" + urlencode({"done": done}))

    async def _handoffs(self, request: web.Request) -> web.Response:
        store = await self.access.user_store()
        handoffs = await store.open_handoffs() if isinstance(store, HandoffStore) else []
        rows = [
            [
                str(h.user_id),
                escape(h.name),
                escape(_when(h.opened_at)),
                escape(_when(h.first_reply_at)) if h.first_reply_at else "not yet",
                _topic_link(h.chat_id, h.topic_id),
            ]
            for h in handoffs
        ]
        body = (
            table(["User", "Name", "Opened (UTC)", "First reply", "Topic"], rows)
            if rows
            else '<p class="note">No conversation is with a person now.</p>'
        )
        return self._render(request, "Handoffs", body)

    async def _invites(self, request: web.Request) -> web.Response:
        visitor = request[_VISITOR]
        store = await self.access.user_store()
        moment = datetime.now(UTC)
        rows = [
            [
                escape(invite.prefix) + "…",
                escape(invite.role),
                str(invite.uses_left),
                escape(_when(invite.expires_at)) if invite.expires_at else "never",
                escape(str(invite.refusal(moment) or "usable")).replace("_", " "),
            ]
            for invite in (await store.list_invites())[-MAX_INVITES_SHOWN:]
        ]
        body = ""
        if visitor.acts:
            body += (
                '<form method="post" action="/invites">'
                f'<input type="hidden" name="csrf" value="{escape(visitor.session.csrf)}">'
                '<input name="role" value="user" size="8" aria-label="role"> '
                '<input name="uses" value="1" size="3" inputmode="numeric" aria-label="uses"> '
                'uses, <input name="days" value="7" size="3" inputmode="numeric" '
                'aria-label="days"> days <button id="create">Create an invite</button></form>'
            )
        body += (
            table(["Code", "Role", "Uses left", "Expires (UTC)", "State"], rows, numeric=[2])
            if rows
            else '<p class="note">No invites.</p>'
        )
        return self._render(request, "Invites", body)

    async def _create_invite(self, request: web.Request) -> web.Response:
        visitor = request[_VISITOR]
        form = await request.post()
        role = str(form.get("role", "user")).strip() or "user"
        try:
            uses = int(str(form.get("uses", "1")))
            days = float(str(form.get("days", "7")))
        except ValueError:
            return self._refusal(request, 400, "Uses and days are numbers.")
        if not 1 <= uses <= 10_000 or not 0 < days <= 366:
            return self._refusal(request, 400, "Uses: 1 to 10,000; days: up to 366.")
        expires = datetime.now(UTC) + timedelta(days=days)
        invite = await (await self._admin(visitor)).create_invite(role, uses, expires)
        username = self.bot_username()
        link = f"https://t.me/{username}?start={invite.code}" if username else invite.code
        body = (
            f"<p>Invite for role <b>{escape(role)}</b>, {uses} use(s), until "
            f"{escape(_when(expires))} UTC. It is shown once:</p>"
            f'<p><input readonly id="invite-link" size="60" value="{escape(link)}"></p>'
            + _qr_code(link)
            + '<p><a href="/invites">All invites</a></p>'
        )
        return self._render(request, "Invite created", body)

    async def _scheduled(self, request: web.Request) -> web.Response:
        visitor = request[_VISITOR]
        store = await self.access.user_store()
        pending = await store.pending_schedules()
        shown = pending[:MAX_SCHEDULES_SHOWN]
        rows = []
        for schedule in shown:
            text = escape(schedule.text) if self._sees_content(visitor) else "(hidden)"
            cancel = ""
            if visitor.acts:
                target = f"/scheduled/{schedule.id}"
                cancel = button_form(target, visitor.session.csrf, "Cancel")
            rows.append(
                [
                    str(schedule.id),
                    str(schedule.user_id),
                    escape(schedule.kind),
                    escape(_when(schedule.due_at)),
                    escape(schedule.repeat or "once") + (" (paused)" if schedule.paused else ""),
                    text,
                    cancel,
                ]
            )
        flash = request.query.get("done", "")
        body = f'<p class="flash">{escape(flash)}</p>' if flash else ""
        if not rows:
            body += '<p class="note">Nothing is scheduled.</p>'
        else:
            headers = ["#", "User", "Kind", "Next (UTC)", "Repeats", "What", ""]
            body += table(headers, rows, numeric=[0, 1])
        if len(pending) > len(shown):
            body += f'<p class="note">The soonest {len(shown)} of {len(pending):,}.</p>'
        return self._render(request, "Reminders and scheduled tasks", body)

    async def _cancel_schedule(self, request: web.Request) -> web.Response:
        visitor = request[_VISITOR]
        try:
            schedule_id = int(request.match_info["id"])
        except ValueError:
            raise web.HTTPNotFound() from None
        store = await self.access.user_store()
        cancelled = await store.cancel_schedule(schedule_id)
        if cancelled is None:
            done = f"Schedule {schedule_id} was done or cancelled already."
        else:
            (await self._admin(visitor)).audit(
                "schedules.cancel", schedule_id, user_id=cancelled.user_id, kind=cancelled.kind
            )
            done = f"Cancelled schedule {schedule_id}."
        raise web.HTTPSeeOther("/scheduled?" + urlencode({"done": done}))

    async def _payments(self, request: web.Request) -> web.Response:
        visitor = request[_VISITOR]
        if self.payments is None:
            return self._render(request, "Payments", '<p class="note">No payments here.</p>')
        page_number = _page_number(request)
        size = self.settings.page_size
        found = await self.payments.recent(size + 1, page_number * size)
        shown = found[:size]
        people = await self._payers({grant.user_id for grant in shown})
        rows = []
        for grant in shown:
            refund = ""
            if grant.refunded_at is not None:
                refund = f"refunded {escape(_when(grant.refunded_at))}"
            elif visitor.acts:
                target = f"/payments/{quote(grant.charge_id, safe='')}"
                refund = button_form(target, visitor.session.csrf, "Refund", css="deny")
            rows.append(
                [
                    escape(_when(grant.paid_at)),
                    escape(grant.charge_id),
                    people.get(grant.user_id, ERASED),
                    escape(grant.plan_id),
                    str(grant.stars),
                    escape(_when(grant.ends_at)),
                    refund,
                ]
            )
        flash = request.query.get("done", "")
        body = f'<p class="flash">{escape(flash)}</p>' if flash else ""
        if rows:
            headers = ["Paid (UTC)", "Charge", "User", "Plan", "Stars", "Ends (UTC)", ""]
            body += table(headers, rows, numeric=[4])
        else:
            body += '<p class="note">No payments.</p>'
        body += _pager(request, page_number, len(found) > size)
        return self._render(request, "Payments", body)

    async def _payers(self, user_ids: set[int]) -> dict[int, str]:
        """Each payer as the page shows them (an id and a name); one erased since has no
        user record, and is left out: the page calls them ``ERASED``."""
        store = await self.access.user_store()
        shown: dict[int, str] = {}
        for user_id in user_ids:
            record = await store.get_user(user_id)
            if record is not None:
                name = f" {escape(record.display_name)}" if record.display_name else ""
                shown[user_id] = f"{user_id}{name}"
        return shown

    async def _refund(self, request: web.Request) -> web.Response:
        visitor = request[_VISITOR]
        if self.payments is None:
            raise web.HTTPNotFound()
        charge_id = request.match_info["charge"]
        try:
            grant = await self.payments.refund(charge_id, await self._admin(visitor))
        except RefundError as e:
            done = f"Not refunded: {e}."
        except MessengerError as e:
            log.warning("console.refund_failed", charge_id=charge_id, error=str(e))
            done = f"Not refunded: Telegram answered {e}."
        else:
            done = f"Refunded {grant.stars} Stars; plan {grant.plan_id} ended."
        raise web.HTTPSeeOther("/payments?" + urlencode({"done": done}))

    async def _health(self, request: web.Request) -> web.Response:
        readings = await self.health() if self.health is not None else []
        store_state = "answers"
        try:
            store = await self.access.user_store()
            await store.get_user(0)
        except Exception as e:  # the page says so rather than failing
            store_state = f"fails: {type(e).__name__}"
        waiting = len(await self.approvals.waiting())
        rows = [
            ["user store", escape(store_state)],
            ["approvals waiting", str(waiting)],
            *([escape(name), escape(value)] for name, value in readings),
        ]
        body = table(["", ""], rows, numeric=[1]) + await self._workers_html()
        return self._render(request, "Health", body + self._failures_html())

    async def _workers_html(self) -> str:
        if self.workers is None:
            return ""
        try:
            workers = await self.workers()
        except Exception as e:  # the page says so rather than failing
            return f"<h2>Workers</h2><p>The workers cannot be read: {escape(type(e).__name__)}</p>"
        now = datetime.now(UTC)
        rows = [
            [
                escape(worker.name),
                escape(_when(worker.started)) if worker.started else "",
                f"{max(0.0, (now - worker.seen).total_seconds()):,.0f} s ago",
                str(worker.running),
            ]
            for worker in workers
        ]
        headers = ["Worker", "Started (UTC)", "Last sign of life", "Turns running"]
        listing = table(headers, rows, numeric=[3]) if rows else "<p>No worker runs.</p>"
        return f'<h2>Workers</h2><div id="workers">{listing}</div>'

    def _failures_html(self) -> str:
        failures = list(reversed(self.failures()))
        note = (
            '<p class="note">The last failed turns this process saw (kept in its memory, '
            "newest first); other processes log theirs as <code>turn.failed</code>.</p>"
        )
        rows = [
            [escape(f.at.strftime("%Y-%m-%d %H:%M:%S")), escape(f.outcome), escape(f.error)]
            for f in failures
        ]
        listing = (
            table(["When (UTC)", "Outcome", "What failed"], rows)
            if rows
            else "<p>No turn has failed here.</p>"
        )
        return f'<h2>Last errors</h2>{note}<div id="errors">{listing}</div>'

    async def _admin(self, visitor: _Visitor) -> Admin:
        store = await self.access.user_store()
        return Admin(store, visitor.session.user_id, via="console")


def _qr_code(link: str) -> str:
    """The link as a QR code in inline SVG (with the ``console`` extra's segno), else nothing."""
    try:
        import segno
    except ImportError:
        return '<p class="note">A QR code needs botkit\'s console extra (segno).</p>'
    svg: str = segno.make(link, error="m").svg_inline(scale=4, title="invite QR code")
    return f'<p id="qr">{svg}</p>'


def _page(text: str) -> web.Response:
    return web.Response(text=text, content_type="text/html", charset="utf-8")


def _secure_headers(response: web.StreamResponse, script_nonce: str | None = None) -> None:
    script = f"'nonce-{script_nonce}'" if script_nonce else "'none'"
    response.headers["Content-Security-Policy"] = (
        f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src {script}; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'self' "
        "https://web.telegram.org"
    )
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-store"


def _page_number(request: web.Request) -> int:
    try:
        return max(int(request.query.get("page", "0")), 0)
    except ValueError:
        return 0


def _pager(request: web.Request, number: int, more: bool) -> str:
    links = []
    if number > 0:
        query = {**request.query, "page": str(number - 1)}
        links.append(f'<a href="?{escape(urlencode(query))}">← newer</a>')
    if more:
        query = {**request.query, "page": str(number + 1)}
        links.append(f'<a href="?{escape(urlencode(query))}" id="next">older →</a>')
    return f"<p>{' · '.join(links)}</p>" if links else ""


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def _topic_link(chat_id: int, topic_id: int) -> str:
    internal = str(chat_id).removeprefix("-100")
    url = f"https://t.me/c/{internal}/{topic_id}"
    return f'<a href="{escape(url)}">topic {topic_id}</a>'


def _usage_html(rows: list[Any], first: date, days: int) -> str:
    per_day: dict[date, dict[str, Usage]] = {}
    per_model: dict[str, Usage] = {}
    per_user: dict[int, dict[str, Usage]] = {}
    for row in rows:
        models = per_day.setdefault(row.day, {})
        models[row.model] = models.get(row.model, Usage()) + row.usage
        per_model[row.model] = per_model.get(row.model, Usage()) + row.usage
        mine = per_user.setdefault(row.user_id, {})
        mine[row.model] = mine.get(row.model, Usage()) + row.usage
    day_bars = [
        (day.isoformat(), estimate(per_day.get(day, {}))[0])
        for day in (first + timedelta(days=i) for i in range(days))
    ]
    model_bars = [(model, estimate({model: u})[0]) for model, u in sorted(per_model.items())]
    spenders = sorted(
        ((str(user), estimate(models)[0]) for user, models in per_user.items()),
        key=lambda bar: -bar[1],
    )[:TOP_SPENDERS]
    cache_bars = [(model, 100 * _cache_share(u)) for model, u in sorted(per_model.items())]
    total = estimate(per_model)[0]
    choose = " · ".join(f'<a href="/usage?days={n}">{n} days</a>' for n in (7, 14, 30, 90))
    return (
        f'<p>{choose}</p><p>Since {first.isoformat()}: <b id="total">${total:,.4f}</b> '
        "estimated from each model's list prices.</p>"
        + bar_chart("Cost per day", day_bars, unit="$")
        + bar_chart("Cost per model", model_bars, unit="$")
        + bar_chart("Top spenders", spenders, unit="$")
        + bar_chart("Prompts read from the cache, per model", cache_bars, unit=" %")
    )


def _cache_share(usage: Usage) -> float:
    prompt = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    return usage.cache_read_input_tokens / prompt if prompt else 0.0
