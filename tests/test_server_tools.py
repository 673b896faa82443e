"""Web search and web fetch, run by the Messages API: offered from the settings, their blocks
kept as received, a paused turn continued, citations shown as links, searches' fees counted
(#44 point 7)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from botkit.pricing import price_for
from botkit.testing import make_bot, running
from botkit.testing.anthropic import FakeAnthropicServer, FakeReply
from botkit.testing.kit import ask, fake_llm
from botkit.testing.telegram import FakeTelegramServer
from botkit.tools import ToolContext
from botkit.types import Message, Usage

ALICE = 8001
CONTEXT = ToolContext(user_id=1, chat_id=1, timestamp=datetime.now(UTC))
URL = "https://example.org/shannon"


def searched(*, paused: bool = False) -> list[FakeReply]:
    call = {
        "type": "server_tool_use",
        "id": "srvtoolu_01A",
        "name": "web_search",
        "input": {"query": "claude shannon birth"},
    }
    result = {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_01A",
        "content": [
            {
                "type": "web_search_result",
                "url": URL,
                "title": "Claude Shannon",
                "encrypted_content": "EqgfCioI",
                "page_age": "April 30, 2025",
            }
        ],
    }
    cited = {
        "type": "text",
        "text": "He was born on 30 April 1916.",
        "citations": [
            {
                "type": "web_search_result_location",
                "url": URL,
                "title": "Claude Shannon",
                "encrypted_index": "Eo8B",
                "cited_text": "born April 30, 1916",
            }
        ],
    }
    if paused:
        return [FakeReply([call, result], "pause_turn"), FakeReply([cited])]
    return [FakeReply([call, result, cited])]


async def test_a_web_search_answer_cites_its_pages_and_is_charged(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(
        claude,
        tmp_path,
        allowed_users=frozenset({ALICE}),
        web_search=True,
        web_domains="example.org, wikipedia.org",
    )
    claude.enqueue(*searched())
    async with running(bot, telegram):
        reply = await ask(telegram, ALICE, "when was Shannon born?")
        usage = await ask(telegram, ALICE, "/usage")
    await bot.aclose()
    offered = {t["name"]: t for t in claude.requests[0].tools}
    assert offered["web_search"] == {
        "type": "web_search_20250305",
        "name": "web_search",
        "max_uses": 5,
        "allowed_domains": ["example.org", "wikipedia.org"],
        "cache_control": {"type": "ephemeral", "ttl": "1h"},
    }
    assert reply.text.startswith("He was born on 30 April 1916.")
    links = [e for e in reply.entities if e.get("type") == "text_link"]
    assert [e["url"] for e in links] == [URL], "the cited page is a link"
    assert "$" in usage.text
    session = (tmp_path / "sessions" / f"{ALICE}.jsonl").read_text()
    assert "web_search_tool_result" in session and "encrypted_content" in session


async def test_a_paused_search_turn_is_continued_with_its_blocks_unchanged(
    claude: FakeAnthropicServer,
) -> None:
    from botkit.agent.context import ContextManager
    from botkit.agent.loop import AgentLoop
    from botkit.tools import ToolRegistry

    claude.enqueue(*searched(paused=True))
    llm = fake_llm(claude)
    context = ContextManager(1)
    await context.append(Message.user_text("when was Shannon born?"))
    loop = AgentLoop(llm, server_tools=make_settings_tools())
    result = await loop.run(context, system="S", tools=ToolRegistry(), tool_context=CONTEXT)
    assert result.text.startswith("He was born")
    paused = claude.requests[1].messages[-1]
    assert paused["role"] == "assistant"
    assert [b["type"] for b in paused["content"]] == [
        "thinking",
        "server_tool_use",
        "web_search_tool_result",
    ], "the paused answer goes back as it came"
    assert paused["content"][2]["content"][0]["encrypted_content"] == "EqgfCioI"
    assert result.usage.web_search_requests == 1
    await llm.close()


def make_settings_tools() -> list:  # type: ignore[type-arg]
    from botkit.tools.server import ServerTools

    return ServerTools(web_search=True, web_fetch=True).definitions()


def test_a_search_costs_its_fee_besides_tokens() -> None:
    price = price_for("claude-sonnet-5-5")
    assert price is not None
    assert price.cost(Usage(web_search_requests=3)) == 0.03
    assert price.search_tokens() == 5_000, "$0.01 is 5,000 input tokens at $2 per million"


async def test_the_fake_refuses_both_domain_lists(claude: FakeAnthropicServer) -> None:
    import anthropic
    import pytest

    client = anthropic.AsyncAnthropic(base_url=claude.base_url, api_key="k", max_retries=0)
    tool = {
        "type": "web_search_20250305",
        "name": "web_search",
        "allowed_domains": ["a.org"],
        "blocked_domains": ["b.org"],
    }
    with pytest.raises(anthropic.BadRequestError, match="either allowed_domains"):
        await client.messages.create(
            model="claude-sonnet-5-5",
            max_tokens=10,
            messages=[{"role": "user", "content": "q"}],
            tools=[tool],  # type: ignore[list-item]
        )
    await client.close()
