import collections, sqlite3
from pathlib import Path
from botkit import Bot, Plan
from botkit.testing import FakeAnthropicServer, FakeTelegramServer, running
from botkit.testing.kit import ask, fake_llm, make_settings

PRO = Plan(id="pro", title="Pro", description="A million tokens a day", stars=50, daily_tokens=1_000_000)

async def test_count(claude: FakeAnthropicServer, telegram: FakeTelegramServer, tmp_path: Path, monkeypatch) -> None:
    seen = collections.Counter()
    state = {"on": False}
    real_connect = sqlite3.connect
    def connect(*a, **k):
        conn = real_connect(*a, **k)
        conn.set_trace_callback(lambda q: seen.update([" ".join(q.split())[:100]]) if state["on"] else None)
        return conn
    monkeypatch.setattr(sqlite3, "connect", connect)
    settings = make_settings(tmp_path, allowed_users=frozenset({1, 2}), models=("claude-sonnet-5", "claude-haiku-4-5"), daily_token_budget=100_000, operators_chat=-100999, max_media_mb=50)
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
