"""What users send costs nothing before the gates, and nothing the API would refuse (#27).

Real aiogram against the fake Bot API (getFile is logged), the real Anthropic SDK against the
fake Messages API, which enforces the documented media limits.
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from botkit.testing.anthropic import FakeAnthropicServer
from botkit.testing.harness import running
from botkit.testing.kit import ask, make_bot
from botkit.testing.telegram import FakeTelegramServer

USER = 2701
ALLOWED = frozenset({USER})
MB = 1024 * 1024


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 120, 200)).save(out, format="PNG")
    return out.getvalue()


async def test_an_over_budget_users_files_are_never_fetched(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED, daily_token_budget=10)
    async with running(bot, telegram):
        await ask(telegram, USER, "spend the budget")
        telegram.send_document(USER, png(64, 64), file_name="a.png", mime_type="image/png")
        telegram.send_photo(USER, caption="and this")
        replies = await telegram.wait_for_messages(USER, 3)
    assert [r.text for r in replies[1:]] == [bot.options.budget_text] * 2
    assert telegram.requests_for("getFile") == [], "the budget gate comes before any download"
    assert len(claude.requests) == 1


async def test_a_command_sent_with_a_file_is_answered_without_fetching_it(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        telegram.send_document(
            USER, png(64, 64), file_name="a.png", mime_type="image/png", caption="/help"
        )
        [reply] = await telegram.wait_for_messages(USER)
    assert "/help" in reply.text
    assert telegram.requests_for("getFile") == []
    assert claude.requests == []
