"""Sub-agents are no way around the bot's rules: their calls are charged, their tools hooked."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from botkit import AgentTool, Bot, ToolStart, Usage, tool
from botkit.access import CACHE_READ_FACTOR
from botkit.testing import (
    FakeAnthropicServer,
    FakeReply,
    FakeRequest,
    FakeTelegramServer,
    ask,
    make_bot,
    running,
)

USER = 1401
RESEARCH = "You research."
FINDINGS = "otters hold hands while they sleep. " * 60  # about 540 output tokens


def weighted(usage: Usage) -> int:
    """What the budget counts for ``usage``."""
    spent = usage.input_tokens + usage.output_tokens + usage.cache_creation_input_tokens
    return spent + round(usage.cache_read_input_tokens * CACHE_READ_FACTOR)


def research_bot(claude: FakeAnthropicServer, tmp_path: Path) -> Bot:
    bot = make_bot(claude, tmp_path, allowed_users=frozenset({USER}), daily_token_budget=10**6)
    bot.tools.register(AgentTool("researcher", "Researches a topic.", system_prompt=RESEARCH))
    return bot


async def test_a_sub_agents_calls_are_charged_to_the_user(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    def model(request: FakeRequest) -> FakeReply:
        if request.system_text == RESEARCH:
            return FakeReply.text(FINDINGS)
        if request.tool_results():
            return FakeReply.text("They hold hands.")
        return FakeReply.tool_use("researcher", {"task": "otters"})

    claude.responder = model
    bot = research_bot(claude, tmp_path)
    async with running(bot, telegram):
        assert (await ask(telegram, USER, "tell me about otters")).plain_text == "They hold hands."
        await bot.access.ledger.flush()  # budget tokens are written in batches
        store = await bot.access.user_store()
        spent = await store.usage_on(USER, datetime.now(UTC).date())
    assert [r.system_text for r in claude.requests].count(RESEARCH) == 1
    main_loop = sum((await bot.context_for(USER)).usage_by_model.values(), Usage())
    assert spent - weighted(main_loop) >= len(FINDINGS) // 4, "the sub-agent's call was charged"
    await bot.aclose()


async def test_a_tool_start_hook_blocks_a_tool_inside_a_sub_agent(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    wiped: list[str] = []

    @tool
    async def wipe(what: str) -> str:
        """Deletes things.

        Args:
            what: What to delete.
        """
        wiped.append(what)
        return "wiped"

    def model(request: FakeRequest) -> FakeReply:
        if request.system_text == "You clean up.":
            if request.tool_results():
                return FakeReply.text("sub: " + request.tool_results()[0]["content"])
            return FakeReply.tool_use("wipe", {"what": "everything"})
        if request.tool_results():
            return FakeReply.text(request.tool_results()[0]["content"])
        return FakeReply.tool_use("cleaner", {"task": "tidy up"})

    claude.responder = model
    bot = make_bot(claude, tmp_path, allowed_users=frozenset({USER}))
    bot.tools.register(
        AgentTool("cleaner", "Cleans up.", system_prompt="You clean up.", tools=[wipe])
    )

    async def no_wiping(event: ToolStart) -> str | None:
        return "wiping is not allowed" if event.call.name == "wipe" else None

    bot.hooks.on("tool_start", no_wiping)
    async with running(bot, telegram):
        reply = await ask(telegram, USER, "clean up")
    assert wiped == [], "the hook's block holds inside the sub-agent"
    assert reply.plain_text == "sub: Blocked: wiping is not allowed"
    await bot.aclose()
