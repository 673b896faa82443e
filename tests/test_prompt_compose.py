"""Prompts compose: a bot's own ``build_prompt`` is followed by the features' prompt parts."""

from __future__ import annotations

from pathlib import Path

from botkit import Bot, Incoming
from botkit.testing import FakeAnthropicServer, FakeTelegramServer, ask, make_bot, running

SKILLS = Path(__file__).resolve().parent.parent / "examples" / "skills"
USER = 610


class ShopBot(Bot):
    async def build_prompt(self, message: Incoming) -> str:
        return f"You sell tea to {message.first_name}."


async def test_a_custom_prompt_keeps_the_skills_and_reminders_parts(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(
        claude, tmp_path, bot_class=ShopBot, skills_dir=SKILLS, allowed_users=frozenset({USER})
    )
    async with running(bot, telegram):
        await ask(telegram, USER, "hello", first_name="Ann")
    system = claude.requests[0].system_text
    assert system.startswith("You sell tea to Ann.\n\n"), "the user's prompt comes first"
    assert bot.skills.prompt_section() in system, "the skills part follows"
    assert "trip-checklist" in system
    assert "time zone is UTC" in system, "so does the reminders part"
    assert "load_skill" in claude.requests[0].tool_names


async def test_a_callback_prompt_composes_and_feature_prompts_off_keeps_it_alone(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    async def prompt(message: Incoming) -> str:
        return "Callback prompt."

    users = frozenset({USER})
    composed = make_bot(
        claude, tmp_path, skills_dir=SKILLS, allowed_users=users, build_prompt=prompt
    )
    async with running(composed, telegram):
        await ask(telegram, USER, "one")
    alone = make_bot(
        claude,
        tmp_path / "alone",
        skills_dir=SKILLS,
        allowed_users=users,
        build_prompt=prompt,
        feature_prompts=False,
    )
    async with running(alone, telegram):
        await ask(telegram, USER, "two")
    first, second = (r.system_text for r in claude.requests)
    assert first.startswith("Callback prompt.\n\n") and "trip-checklist" in first
    assert second == "Callback prompt."
