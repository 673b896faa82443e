"""A cleaning team on Telegram: the manager assigns rooms, cleaners report back, all via Claude.

The manager and the cleaners join through invite links that carry their role; each role gets
its own prompt and tools. Rooms live in PostgreSQL, next to botkit's own tables::

    export BOTKIT_DATABASE_URL=postgresql://... TELEGRAM_BOT_TOKEN=... ANTHROPIC_API_KEY=...
    python -m botkit migrate
    python -m botkit invite --role manager              # send this link to the manager
    python -m botkit invite --role cleaner --uses 10    # and this one to the cleaners
    python -m botkit run examples.team_bot:bot
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botkit import (
    LLM,
    Bot,
    ConfigError,
    Incoming,
    Settings,
    Tool,
    ToolContext,
    ToolError,
    UserRecord,
    UserStore,
    tool,
)
from botkit.relay import send_user_message_tool
from botkit.stores import PostgresUserStore

MANAGER_ROLES = ("manager", "admin")  # the bot's admins (BOTKIT_ADMINS) run the team too

SCHEMA = """
    CREATE TABLE IF NOT EXISTS team_rooms (
        room       text        PRIMARY KEY,
        cleaner_id bigint      NOT NULL,
        status     text        NOT NULL DEFAULT 'dirty' CHECK (status IN ('dirty', 'clean')),
        updated_at timestamptz NOT NULL DEFAULT now()
    )"""

ASSIGN = """
    INSERT INTO team_rooms (room, cleaner_id) VALUES ($1, $2)
    ON CONFLICT (room) DO UPDATE
    SET cleaner_id = excluded.cleaner_id, status = 'dirty', updated_at = now()"""

MARK_CLEAN = """
    UPDATE team_rooms SET status = 'clean', updated_at = now()
    WHERE room = $1 AND cleaner_id = $2 RETURNING room"""

MANAGER_PROMPT = """You assist {name}, the manager of a hotel cleaning team, on Telegram.
Use list_team to find people and their user ids, room_status to see the rooms, assign_room to
give a room to a cleaner, and send_user_message to ask a cleaner something or to tell them about
a room. Cleaners answer through their own assistant: their answers arrive here as messages.
Be brief."""

CLEANER_PROMPT = """You assist {name}, a cleaner on a hotel cleaning team, on Telegram.
Use my_rooms to see their rooms, and mark_room_clean when they say a room is done.
When a manager has asked them something (you see it as a note) and they answer, pass the
answer back to that manager with send_user_message. The managers: {managers}.
Be brief: they are busy."""

GUEST_PROMPT = """You assist a member of a hotel cleaning team who has no role yet.
Tell them to ask their manager for an invite link."""


async def prepare(pool: Any) -> None:
    """Create the rooms table if it is not there yet."""
    async with pool.acquire() as conn, conn.transaction():
        # Two processes starting at once can both miss the table and collide on creating it.
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('team_rooms'))")
        await conn.execute(SCHEMA)


@dataclass(frozen=True)
class Team:
    """What the team tools work with, handed to them as ``ToolContext.extra``."""

    users: UserStore
    pool: Any
    """The user store's ``asyncpg.Pool``: rooms and people share one database."""


def label(user: UserRecord) -> str:
    """A user as others see them: "Maria (cleaner)"."""
    return f"{user.display_name or f'user {user.user_id}'} ({user.role})"


@tool
async def list_team(ctx: ToolContext) -> str:
    """List everyone on the team with their role and user id."""
    team: Team = ctx.extra
    users = [u for u in await team.users.list_users() if not u.blocked]
    return "\n".join(f"{label(u)}, id {u.user_id}" for u in users) or "Nobody has joined yet."


@tool
async def room_status(ctx: ToolContext) -> str:
    """Show every room with its cleaner and whether it is clean."""
    team: Team = ctx.extra
    names = {u.user_id: label(u) for u in await team.users.list_users()}
    rows = await team.pool.fetch("SELECT room, cleaner_id, status FROM team_rooms ORDER BY room")
    lines = [f"Room {r['room']}: {r['status']}, {names.get(r['cleaner_id'], '?')}" for r in rows]
    return "\n".join(lines) or "No rooms assigned yet."


@tool
async def assign_room(ctx: ToolContext, room: str, cleaner_id: int) -> str:
    """Give a room to a cleaner; it counts as dirty until they mark it clean.

    Args:
        room: The room number, e.g. "12".
        cleaner_id: The cleaner's user id, from list_team.
    """
    team: Team = ctx.extra
    cleaner = await team.users.get_user(cleaner_id)
    if cleaner is None or cleaner.role != "cleaner":
        raise ToolError(f"user {cleaner_id} is not a cleaner; list_team shows who is")
    await team.pool.execute(ASSIGN, room.strip(), cleaner_id)
    return f"Room {room} is now {label(cleaner)}'s, marked dirty."


@tool
async def my_rooms(ctx: ToolContext) -> str:
    """Show the rooms assigned to this cleaner and whether each is clean."""
    team: Team = ctx.extra
    sql = "SELECT room, status FROM team_rooms WHERE cleaner_id = $1 ORDER BY room"
    rows = await team.pool.fetch(sql, ctx.user_id)
    return "\n".join(f"Room {r['room']}: {r['status']}" for r in rows) or "No rooms assigned."


@tool
async def mark_room_clean(ctx: ToolContext, room: str) -> str:
    """Mark one of this cleaner's rooms as clean.

    Args:
        room: The room number, as assigned, e.g. "12".
    """
    team: Team = ctx.extra
    # The cleaner is the sender, never an argument: nobody marks another cleaner's rooms.
    if await team.pool.fetchval(MARK_CLEAN, room.strip(), ctx.user_id) is None:
        raise ToolError(f"room {room} is not assigned to you; my_rooms shows yours")
    return f"Room {room} is marked clean."


class TeamBot(Bot):
    """A manager and cleaners, each with the prompt and tools of their role."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.send_user_message = send_user_message_tool(self)

    async def member(self, message: Incoming) -> UserRecord:
        """The sender's record (the console fills in none, so look it up then)."""
        return message.user or await self.access.user_record(message)

    async def on_start(self) -> None:
        """Refuse to start without PostgreSQL, and make sure the rooms table exists."""
        store = await self.access.user_store()
        if not isinstance(store, PostgresUserStore):
            raise ConfigError("the team bot keeps rooms in PostgreSQL: set BOTKIT_DATABASE_URL")
        await prepare(store.pool)

    async def build_extra(self, message: Incoming) -> Team:
        """The user store and its pool, for the room tools."""
        store = await self.access.user_store()
        assert isinstance(store, PostgresUserStore), "checked in on_start"
        return Team(store, store.pool)

    async def build_tools(self, message: Incoming) -> Sequence[Tool]:
        """The tools of the sender's role, besides botkit's own (admins: create_invite)."""
        role = (await self.member(message)).role
        tools = list(await super().build_tools(message))
        if role in MANAGER_ROLES:
            tools += [list_team, room_status, assign_room, self.send_user_message]
        elif role == "cleaner":
            tools += [my_rooms, mark_room_clean, self.send_user_message]
        return tools

    async def build_prompt(self, message: Incoming) -> str:
        """The prompt of the sender's role; a cleaner's names the managers to answer."""
        user = await self.member(message)
        name = user.display_name or "this user"
        if user.role in MANAGER_ROLES:
            return MANAGER_PROMPT.format(name=name)
        if user.role != "cleaner":
            return GUEST_PROMPT
        # The relayed note names the manager but not their id, which send_user_message needs.
        store = await self.access.user_store()
        managers = [u for role in MANAGER_ROLES for u in await store.list_users(role)]
        listed = ", ".join(f"{label(u)}, id {u.user_id}" for u in managers) or "none yet"
        return CLEANER_PROMPT.format(name=name, managers=listed)

    async def can_relay(self, sender_id: int, recipient_id: int) -> bool:
        """Cleaners may message managers only; managers anyone on the team."""
        if not await super().can_relay(sender_id, recipient_id):
            return False
        store = await self.access.user_store()
        sender, recipient = await store.get_user(sender_id), await store.get_user(recipient_id)
        if sender is None or recipient is None:
            return False
        return sender.role in MANAGER_ROLES or recipient.role in MANAGER_ROLES

    async def display_name(self, user_id: int) -> str:
        """Relayed messages say who sent them: "Message from Maria (cleaner)"."""
        user = await (await self.access.user_store()).get_user(user_id)
        return label(user) if user is not None else await super().display_name(user_id)


def make_bot(settings: Settings | None = None, llm: LLM | None = None) -> TeamBot:
    """A team bot; nothing connects to the database until the first message."""
    return TeamBot(settings=settings, llm=llm)


bot = make_bot()
