import collections
from pathlib import Path
import asyncpg
from pydantic import SecretStr
from botkit import Bot, Plan
from botkit.testing import FakeAnthropicServer, FakeTelegramServer, running
from botkit.testing.kit import ask, fake_llm, make_settings

PRO = Plan(id="pro", title="Pro", description="A million tokens a day", stars=50, daily_tokens=1_000_000)

async def test_count(claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, migrated_db: str, monkeypatch) -> None:
    seen = collections.Counter()
    state = {"on": False}
    for name in ("fetch", "fetchrow", "fetchval", "execute", "executemany"):
        real = getattr(asyncpg.connection.Connection, name)
        def wrap(real=real):
            async def f(self, query, *a, **k):
                if state["on"]:
                    seen[" ".join(str(query).split())[:100]] += 1
                return await real(self, query, *a, **k)
            return f
        monkeypatch.setattr(asyncpg.connection.Connection, name, wrap())
    settings = make_settings(tmp_path, allowed_users=frozenset({1, 2}), database_url=SecretStr(migrated_db), models=("claude-sonnet-5", "claude-haiku-4-5"), daily_token_budget=100_000, operators_chat=-100999, max_media_mb=50)
    bot = Bot(settings=settings, llm=fake_llm(claude), plans=(PRO,))
    @bot.tool(approval=True)
    async def delete_file(path: str) -> str:
        """Delete a file."""
        return "ok"
    async with running(bot, telegram):
        await ask(telegram, 1, "first")
        await ask(telegram, 1, "second")
        state["on"] = True
        for i in range(10):
            await ask(telegram, 1, f"again {i}")
        state["on"] = False
    for q, n in seen.most_common():
        print(n, q)
