"""MCP tools per role: ``build_tools`` decides who is offered them, and nobody else runs them."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from botkit import Bot, Incoming, Tool
from botkit.testing import (
    FakeAnthropicServer,
    FakeReply,
    FakeRequest,
    FakeTelegramServer,
    ask,
    make_bot,
    running,
)

EXAMPLE = Path(__file__).with_name("mcp_server_example.py")
ADMIN, CLEANER = 1501, 1502


class TeamBot(Bot):
    """The README's example: the ``example`` server's tools are for admins only."""

    async def build_tools(self, message: Incoming) -> list[Tool]:
        admin = message.user is not None and message.user.role == "admin"
        tools = list(await super().build_tools(message))
        return [t for t in tools if admin or not t.name.startswith("example__")]


def always_add(request: FakeRequest) -> FakeReply:
    """A model that calls the MCP tool whether or not it was offered."""
    if request.tool_results():
        return FakeReply.text(request.tool_results()[0]["content"])
    return FakeReply.tool_use("example__add", {"a": 2, "b": 3})


async def test_mcp_tools_kept_for_a_role_are_neither_offered_nor_run_for_others(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    config = {"mcpServers": {"example": {"command": sys.executable, "args": [str(EXAMPLE)]}}}
    claude.responder = always_add
    bot = make_bot(claude, tmp_path, bot_class=TeamBot, mcp_config=orjson.dumps(config).decode())
    store = await bot.access.user_store()
    await store.upsert_user(ADMIN, "admin")
    await store.upsert_user(CLEANER, "cleaner")
    async with running(bot, telegram):
        admin_reply = await ask(telegram, ADMIN, "add 2 and 3", timeout=30)
        cleaner_reply = await ask(telegram, CLEANER, "add 2 and 3", timeout=30)
    await bot.aclose()
    admin_call, _, cleaner_call, _ = claude.requests
    assert "example__add" in admin_call.tool_names and admin_reply.plain_text == "5"
    assert not any(name.startswith("example__") for name in cleaner_call.tool_names)
    assert cleaner_reply.plain_text.startswith("Unknown tool 'example__add'"), "and never run"
