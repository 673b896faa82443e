"""Administration of users, invites and usage, from the command line or any other front end.

:class:`Admin` holds the actions that change something (block, unblock, set a role, revoke an
invite); each writes one ``admin.action`` log line saying who did what to whom, so the logs are
an audit trail. The ``python -m botkit users|invites|usage`` commands below print what the store
holds and call those actions, with the bot's own configuration: SQLite by default, PostgreSQL
with BOTKIT_DATABASE_URL. They work while the bot runs; the bot re-reads a user's record within
``USER_CACHE_SECONDS``, so a block takes effect in a running bot within that time.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any, Protocol

import structlog

from botkit.access import Access
from botkit.choices.cli import choice_lines, choose
from botkit.commands import CommandHandler
from botkit.config import Settings
from botkit.errors import ConfigError
from botkit.llm.keepwarm import KEEPER_USER_ID
from botkit.messengers.base import Incoming
from botkit.pricing import estimate, price_for
from botkit.relay import escape_markdown
from botkit.stores.base import (
    INVITE_PREFIX_LENGTH,
    Invite,
    ModelUsage,
    RevokeResult,
    StoredInvite,
    UserRecord,
    UserStore,
    is_invite_prefix,
)
from botkit.types import Usage

__all__ = [
    "Admin",
    "AdminHost",
    "add_commands",
    "cli_admin",
    "format_table",
    "register_admin_commands",
    "run_command",
]

EXIT_NOT_FOUND = 1

log = structlog.get_logger("botkit.admin")


class Admin:
    """Administrative changes to a user store, each written as one ``admin.action`` log line."""

    def __init__(self, store: UserStore, actor: str | int, **who: Any) -> None:
        self.store = store
        """The users and invites store."""
        self.actor = actor
        """Who acts: ``"cli"``, or the user id of an admin in chat."""
        self._who = who

    async def block(self, user_id: int) -> UserRecord:
        """Block the user; one never registered (say, admitted by the allowlist) is registered."""
        known = await self.store.get_user(user_id) is not None
        record = await self.store.block_user(user_id)
        self.audit("users.block", user_id, registered=not known)
        return record

    async def unblock(self, user_id: int) -> bool:
        """Unblock the user; ``False`` if there is no such user."""
        done = await self.store.set_blocked(user_id, False)
        if done:
            self.audit("users.unblock", user_id)
        return done

    async def set_role(self, user_id: int, role: str, *, register: bool = False) -> bool:
        """Give the user ``role``; ``False`` if unknown, unless ``register`` registers them."""
        if await self.store.set_role(user_id, role):
            self.audit("users.role", user_id, role=role)
            return True
        if not register:
            return False
        await self.store.upsert_user(user_id, role)
        self.audit("users.role", user_id, role=role, registered=True)
        return True

    async def create_invite(self, role: str, uses: int, expires_at: datetime | None) -> Invite:
        """Create an invite (made by the acting admin, when one acts in chat)."""
        created_by = self.actor if isinstance(self.actor, int) else None
        invite = await self.store.create_invite(role, uses, expires_at, created_by)
        expires = expires_at.isoformat() if expires_at else None
        self.audit("invites.create", invite.prefix, role=role, uses=uses, expires_at=expires)
        return invite

    async def revoke(self, code: str) -> RevokeResult:
        """Revoke the invite with this code, or the only one whose prefix starts with it."""
        result = await self.store.revoke_invite(code)
        if result.revoked is not None:  # the prefix only: the code is a secret
            self.audit("invites.revoke", result.revoked.prefix, role=result.revoked.role)
        return result

    def audit(self, action: str, target: int | str, **details: Any) -> None:
        """Write one ``admin.action`` line: this actor did ``action`` to ``target``."""
        log.info(
            "admin.action", actor=self.actor, action=action, target=target, **self._who, **details
        )


# --- output ------------------------------------------------------------------------------------

JSON_LINES_HELP = "one JSON object per line"
"""Every ``--json`` of the CLI prints JSON lines: one record per line, nothing around them."""
MONEY_DIGITS = 6
"""Dollar amounts in JSON are rounded to millionths (no float noise like ...0000000005)."""


def print_json_lines(records: Iterable[dict[str, Any]]) -> None:
    """Print each record as one line of JSON (the CLI's one ``--json`` convention)."""
    for record in records:
        print(json.dumps(record, ensure_ascii=False))


# --- admins in chat ---------------------------------------------------------------------------

CHAT_USERS_SHOWN = 30
"""Most users ``/users`` lists in one message (the newest ones)."""


class AdminHost(Protocol):
    """What the admin chat commands need of a bot."""

    settings: Settings

    def command(
        self, name: str, description: str, *, admin_only: bool = False, hidden: bool = False
    ) -> Callable[[CommandHandler], CommandHandler]:
        """Register a command."""
        ...

    access: Access


def register_admin_commands(bot: AdminHost) -> None:
    """``/users``, ``/block ID`` and ``/unblock ID``: for admins only, unknown to others."""

    async def admin_of(message: Incoming) -> Admin:
        return Admin(await bot.access.user_store(), message.user_id, via="chat")

    async def users(message: Incoming, args: str) -> str:
        role = args.strip() or None
        found = await (await bot.access.user_store()).list_users(role)
        if not found:
            return "No users" + (f" with role {role}." if role else " are registered.")
        lines = [_chat_line(user) for user in found[-CHAT_USERS_SHOWN:]]
        more = len(found) - len(lines)
        head = f"{len(found)} user{'' if len(found) == 1 else 's'}"
        head += f" with role {role}" if role else ""
        head += f" (the newest {len(lines)}):" if more else ":"
        return "\n".join([head, *lines])

    async def block(message: Incoming, args: str) -> str:
        user_id = _user_id(args)
        if user_id is None:
            return "Usage: /block USER_ID"
        record = await (await admin_of(message)).block(user_id)
        bot.access.forget(user_id)
        note = ""
        if user_id in bot.settings.admins:
            note = " They are in BOTKIT_ADMINS, so they are still admitted."
        return f"Blocked {user_id} (role {record.role}).{note}"

    async def unblock(message: Incoming, args: str) -> str:
        user_id = _user_id(args)
        if user_id is None:
            return "Usage: /unblock USER_ID"
        if not await (await admin_of(message)).unblock(user_id):
            return f"No user {user_id} in the user store."
        bot.access.forget(user_id)
        return f"Unblocked {user_id}."

    bot.command("users", "Registered users (/users ROLE: only that role)", hidden=True)(users)
    bot.command("block", "Block a user: /block USER_ID", hidden=True)(block)
    bot.command("unblock", "Unblock a user: /unblock USER_ID", hidden=True)(unblock)


def _user_id(args: str) -> int | None:
    text = args.strip()
    return int(text) if text.lstrip("-").isdigit() else None


def _chat_line(user: UserRecord) -> str:
    # A name is whatever the user typed in Telegram: shown as typed, never as a link.
    name = escape_markdown(_name(user)) or "-"
    return f"{user.user_id} {user.role} {name}" + (" (blocked)" if user.blocked else "")


# --- the command line ------------------------------------------------------------------------


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``users``, ``invites`` and ``usage`` commands to ``python -m botkit``."""
    _add_users(commands.add_parser("users", help="list, show, block, unblock users; set roles"))
    invites = commands.add_parser("invites", help="list or revoke invites")
    actions = invites.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="code prefix, role, uses left, expiry, creator")
    listing.add_argument("--json", action="store_true", help=JSON_LINES_HELP)
    revoke = actions.add_parser("revoke", help="revoke an invite by its code or its prefix")
    revoke.add_argument("code", help="the code (from the link) or its first characters")
    usage = commands.add_parser("usage", help="tokens and estimated cost per user and day")
    usage.add_argument("--days", type=int, default=7, help="how many days back (default 7)")
    usage.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per line: a user's day (scope 'day'), then each user's total",
    )


def _add_users(users: argparse.ArgumentParser) -> None:
    actions = users.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="the registered users, in the order they joined")
    listing.add_argument("--role", help="only users with this role")
    listing.add_argument("--blocked", action="store_true", help="only blocked users")
    listing.add_argument("--json", action="store_true", help=JSON_LINES_HELP)
    for name, text in [
        ("show", "one user's record"),
        ("block", "refuse the user service (any user id)"),
        ("unblock", "serve a blocked user again"),
    ]:
        actions.add_parser(name, help=text).add_argument("user_id", type=int, metavar="ID")
    role = actions.add_parser("role", help="set a user's role")
    role.add_argument("user_id", type=int, metavar="ID")
    role.add_argument("role", metavar="ROLE")
    from botkit.choices.cli import add_choose
    from botkit.privacy.erase import add_actions

    add_choose(actions)
    add_actions(actions)  # forget, export


def run_command(args: argparse.Namespace, settings: Settings) -> int:
    """Run a ``users``, ``invites`` or ``usage`` command with ``settings``; its exit status."""
    from botkit.log import configure_logging

    configure_logging(settings.log_level, secrets=settings.secret_values())
    handler = _HANDLERS[(args.command, getattr(args, "action", None))]
    create = handler not in _READ_ONLY
    return asyncio.run(
        _with_store(settings, lambda store: handler(store, settings, args), create=create)
    )


async def _with_store(
    settings: Settings, body: Callable[[UserStore], Awaitable[int]], *, create: bool = True
) -> int:
    from botkit.access import open_user_store

    store = await open_user_store(settings, create=create)
    try:
        return await body(store)
    finally:
        await store.close()


def cli_admin(store: UserStore) -> Admin:
    """An ``Admin`` acting from the command line (``actor="cli"`` and the login name)."""
    try:
        os_user: str | None = getpass.getuser()
    except (OSError, KeyError):  # no login name in this environment
        os_user = None
    return Admin(store, "cli", os_user=os_user)


def _not_found(text: str) -> int:
    print(f"botkit: {text}", file=sys.stderr)
    return EXIT_NOT_FOUND


def _note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr)


# --- users -------------------------------------------------------------------------------------


async def _users_list(store: UserStore, settings: Settings, args: argparse.Namespace) -> int:
    users = await store.list_users(args.role, blocked=True if args.blocked else None)
    if args.json:
        print_json_lines(_user_json(u) for u in users)
    elif not users:
        print("no users" + (" match" if args.role or args.blocked else " are registered"))
    else:
        rows = [
            [str(u.user_id), u.role, _name(u), _time(u.joined_at), _yes(u.blocked)] for u in users
        ]
        print(format_table(["ID", "ROLE", "NAME", "JOINED (UTC)", "BLOCKED"], rows, right={0}))
    return 0


async def _users_show(store: UserStore, settings: Settings, args: argparse.Namespace) -> int:
    user_id: int = args.user_id
    record, config = await store.get_user(user_id), _configured_as(settings, user_id)
    if record is None and config is None:
        return _not_found(f"no user {user_id}: not registered, not in the configuration")
    fields = [("user", str(user_id))]
    if record is None:
        fields.append(("registered", "no"))
    else:
        fields += [("role", record.role), ("name", _name(record))]
        fields += [("joined", _time(record.joined_at) + " UTC"), ("blocked", _yes(record.blocked))]
    if config is not None:
        fields.append(("admitted by", config))
    fields += await choice_lines(store, user_id)
    print(format_table([], [list(field) for field in fields]))
    return 0


async def _users_choose(store: UserStore, settings: Settings, args: argparse.Namespace) -> int:
    try:
        print(await choose(store, settings, args))
    except ConfigError as e:
        print(f"botkit: {e}", file=sys.stderr)
        return 2
    return 0


async def _users_block(store: UserStore, settings: Settings, args: argparse.Namespace) -> int:
    user_id: int = args.user_id
    record = await cli_admin(store).block(user_id)
    print(f"blocked {user_id} (role {record.role})")
    if user_id in settings.admins:
        _note(f"{user_id} is in BOTKIT_ADMINS, whom the default authorize always admits")
    return 0


async def _users_unblock(store: UserStore, settings: Settings, args: argparse.Namespace) -> int:
    if not await cli_admin(store).unblock(args.user_id):
        return _not_found(f"no user {args.user_id} in the user store")
    print(f"unblocked {args.user_id}")
    return 0


async def _users_role(store: UserStore, settings: Settings, args: argparse.Namespace) -> int:
    user_id: int = args.user_id
    configured = _configured_as(settings, user_id) is not None
    if not await cli_admin(store).set_role(user_id, args.role, register=configured):
        return _not_found(f"no user {user_id} in the user store")
    print(f"{user_id} now has role {args.role}")
    return 0


def _configured_as(settings: Settings, user_id: int) -> str | None:
    """Which setting admits ``user_id`` without a record, if one does."""
    if user_id in settings.admins:
        return "BOTKIT_ADMINS"
    if user_id in settings.allowed_users:
        return "BOTKIT_ALLOWED_USERS"
    return None


def _user_json(user: UserRecord) -> dict[str, Any]:
    return {
        "user_id": user.user_id,
        "role": user.role,
        "display_name": user.display_name,
        "joined_at": user.joined_at.isoformat(),
        "blocked": user.blocked,
    }


# --- invites -----------------------------------------------------------------------------------


async def _invites_list(store: UserStore, settings: Settings, args: argparse.Namespace) -> int:
    invites, now = await store.list_invites(), datetime.now(UTC)
    if args.json:
        print_json_lines(_invite_json(i, now) for i in invites)
    elif not invites:
        print("no invites")
    else:
        headers = ["PREFIX", "ROLE", "USES LEFT", "EXPIRES (UTC)", "CREATOR", "CREATED", "STATE"]
        print(format_table(headers, [_invite_row(i, now) for i in invites], right={2}))
    return 0


async def _invites_revoke(store: UserStore, settings: Settings, args: argparse.Namespace) -> int:
    code: str = args.code
    result = await cli_admin(store).revoke(code)
    if result.ambiguous:
        return _not_found(f"{len(result.matches)} invites start with {code!r}: give the whole code")
    if result.revoked is None:
        shown = code if is_invite_prefix(code) else code[:INVITE_PREFIX_LENGTH] + "…"
        return _not_found(f"no invite with code or prefix {shown!r}")
    print(f"revoked invite {result.revoked.prefix}… (role {result.revoked.role})")
    return 0


def _state(invite: StoredInvite, now: datetime) -> str:
    refusal = invite.refusal(now)
    return "usable" if refusal is None else str(refusal).replace("_", " ")


def _invite_row(invite: StoredInvite, now: datetime) -> list[str]:
    expires = "never" if invite.expires_at is None else _time(invite.expires_at)
    creator = "-" if invite.created_by is None else str(invite.created_by)
    created = _time(invite.created_at)
    return [
        invite.prefix + "…",
        invite.role,
        str(invite.uses_left),
        expires,
        creator,
        created,
        _state(invite, now),
    ]


def _invite_json(invite: StoredInvite, now: datetime) -> dict[str, Any]:
    return {
        "prefix": invite.prefix,
        "role": invite.role,
        "uses_left": invite.uses_left,
        "expires_at": None if invite.expires_at is None else invite.expires_at.isoformat(),
        "created_by": invite.created_by,
        "created_at": invite.created_at.isoformat(),
        "state": _state(invite, now),
    }


# --- usage -------------------------------------------------------------------------------------


async def _usage(store: UserStore, settings: Settings, args: argparse.Namespace) -> int:
    days: int = args.days
    if days < 1:
        raise ConfigError(f"--days must be at least 1, got {days}")
    first_day = datetime.now(UTC).date() - timedelta(days=days - 1)
    usage = await store.model_usage_since(first_day)
    names = {u.user_id: _name(u) for u in await store.list_users()}
    names.setdefault(
        KEEPER_USER_ID, "(cache keeper)"
    )  # the bot's own reads, BOTKIT_CACHE_KEEP_WARM
    report = _UsageReport(first_day, usage, names)
    if args.json:
        print_json_lines(report.as_json())
    else:
        print(report.as_text())
    return 0


_KINDS = (
    ("input_tokens", "input_tokens"),
    ("output_tokens", "output_tokens"),
    ("cache_read_tokens", "cache_read_input_tokens"),
    ("cache_creation_tokens", "cache_creation_input_tokens"),
)
"""The kinds of tokens as the report names them, and as ``Usage`` does."""


class _UsageReport:
    """Tokens per user and day, by kind, with costs from each model's prices."""

    def __init__(self, first_day: date, usage: list[ModelUsage], names: dict[int, str]) -> None:
        self.first_day, self.names = first_day, names
        self.days: dict[tuple[date, int], dict[str, Usage]] = {}
        for row in usage:
            models = self.days.setdefault((row.day, row.user_id), {})
            models[row.model] = models.get(row.model, Usage()) + row.usage
        self.unknown = sorted({row.model for row in usage if price_for(row.model) is None})

    def totals(self) -> dict[int, dict[str, Usage]]:
        """Usage per user and model over the whole period, biggest spender first."""
        totals: dict[int, dict[str, Usage]] = {}
        for (_, user), models in self.days.items():
            mine = totals.setdefault(user, {})
            for model, usage in models.items():
                mine[model] = mine.get(model, Usage()) + usage
        return dict(sorted(totals.items(), key=lambda item: (-estimate(item[1])[0], item[0])))

    def by_model(self) -> dict[tuple[date, str], Usage]:
        """Usage per day and model, all users together."""
        found: dict[tuple[date, str], Usage] = {}
        for (day, _), models in self.days.items():
            for model, usage in models.items():
                found[(day, model)] = found.get((day, model), Usage()) + usage
        return dict(sorted(found.items()))

    @property
    def basis(self) -> str:
        """How costs were estimated, in one sentence."""
        basis = (
            "cost estimated from each model's list prices (cache writes at 1.25x the input "
            "price, or 2x those kept an hour; cache reads at the model's read price)"
        )
        if self.unknown:
            basis += f"; no price known for {', '.join(self.unknown)}: priced as Sonnet"
        return basis

    def as_text(self) -> str:
        """Per day and per user tables, and the basis of the estimate."""
        if not self.days:
            return f"no usage since {self.first_day.isoformat()}"
        daily = [
            [day.isoformat(), str(user), self.names.get(user, ""), *_cells(models)]
            for (day, user), models in self.days.items()
        ]
        users = [
            [str(user), self.names.get(user, ""), *_cells(models)]
            for user, models in self.totals().items()
        ]
        models = [
            [day.isoformat(), model, *_cells({model: usage}), _cache_share(usage)]
            for (day, model), usage in self.by_model().items()
        ]
        kinds = ["INPUT", "OUTPUT", "CACHE READ", "CACHE WRITE", "COST"]
        return "\n".join(
            [
                format_table(["DAY", "USER", "NAME", *kinds], daily, right={1, 3, 4, 5, 6, 7}),
                "",
                format_table(["USER", "NAME", *kinds], users, right={0, 2, 3, 4, 5, 6}),
                "",
                format_table(["DAY", "MODEL", *kinds, "CACHED"], models, right={2, 3, 4, 5, 6, 7}),
                "",
                self.basis + "; CACHED: the share of the prompts read from the cache",
            ]
        )

    def as_json(self) -> list[dict[str, Any]]:
        """The same, as JSON-ready records: each user's days, then each user's total."""
        common = {"since": self.first_day.isoformat(), "cost_basis": self.basis}
        days = [
            {"scope": "day", "day": day.isoformat(), "user_id": user, **_as_json(models), **common}
            for (day, user), models in self.days.items()
        ]
        totals = [
            {"scope": "total", "user_id": user, **_as_json(models), **common}
            for user, models in self.totals().items()
        ]
        by_model = [
            {
                "scope": "model",
                "day": day.isoformat(),
                "model": model,
                **_as_json({model: usage}),
                "cache_share": round(_share(usage), 4),
                **common,
            }
            for (day, model), usage in self.by_model().items()
        ]
        return days + totals + by_model


def _share(usage: Usage) -> float:
    """The share of the prompts' tokens read from the cache."""
    prompt = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    return usage.cache_read_input_tokens / prompt if prompt else 0.0


def _cache_share(usage: Usage) -> str:
    return f"{_share(usage):.0%}"


def _cells(models: dict[str, Usage]) -> list[str]:
    total = sum(models.values(), Usage())
    return [f"{getattr(total, field):,}" for _, field in _KINDS] + [_usd(estimate(models)[0])]


def _as_json(models: dict[str, Usage]) -> dict[str, Any]:
    total = sum(models.values(), Usage())
    kinds = {name: getattr(total, field) for name, field in _KINDS}
    return {
        **kinds,
        "tokens": sum(kinds.values()),
        "cost_usd": round(estimate(models)[0], MONEY_DIGITS),
        "models": {
            model: {name: getattr(usage, field) for name, field in _KINDS}
            for model, usage in sorted(models.items())
        },
    }


# --- output ------------------------------------------------------------------------------------


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Collection[int] = ()
) -> str:
    """Rows as aligned columns two spaces apart, under ``headers`` (if any); ``right``-aligned."""
    lines = [list(headers), *map(list, rows)] if headers else [list(r) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]

    def align(i: int, cell: str) -> str:
        return cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])

    return "\n".join("  ".join(align(i, c) for i, c in enumerate(line)).rstrip() for line in lines)


def _name(user: UserRecord) -> str:
    return " ".join((user.display_name or "").split())  # no newlines or tabs in a table


def _time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _usd(dollars: float) -> str:
    return f"${dollars:,.4f}"


_Handler = Callable[[UserStore, Settings, argparse.Namespace], Awaitable[int]]
_HANDLERS: dict[tuple[str, str | None], _Handler] = {
    ("users", "list"): _users_list,
    ("users", "show"): _users_show,
    ("users", "block"): _users_block,
    ("users", "unblock"): _users_unblock,
    ("users", "role"): _users_role,
    ("users", "choose"): _users_choose,
    ("invites", "list"): _invites_list,
    ("invites", "revoke"): _invites_revoke,
    ("usage", None): _usage,
}
_READ_ONLY = {_users_list, _users_show, _invites_list, _usage}
"""Handlers that only read: on a bot that has no SQLite file yet they make none."""
