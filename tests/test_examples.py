"""Each example bot runs against the fakes and does what it promises."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from botkit import Bot, Settings
from botkit.testing import (
    FakeAnthropicServer,
    FakeReply,
    FakeRequest,
    FakeTelegramServer,
    fake_llm,
    running,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_assistant_example_remembers_notes_in_its_prompt(tmp_path: Path) -> None:
    example = load_example("assistant")
    template: Bot = example.bot

    def model(request: FakeRequest) -> FakeReply:
        if request.tool_results():
            return FakeReply.text(request.tool_results()[0]["content"])
        if request.last_user_text().startswith("remember"):
            return FakeReply.tool_use("remember", {"note": request.last_user_text()[9:]})
        return FakeReply.text(request.system_text)

    settings = Settings(_env_file=None, allowed_users=frozenset({7}), sessions_dir=tmp_path)
    async with FakeTelegramServer() as telegram, FakeAnthropicServer(responder=model) as claude:
        llm = fake_llm(claude)
        bot = type(template)(settings=settings, llm=llm, tools=list(template.tools))
        async with running(bot, telegram):
            telegram.send_text(7, "remember the milk")
            await telegram.wait_for_messages(7)
            telegram.send_text(7, "what do you know?")
            replies = await telegram.wait_for_messages(7, 2)
        await llm.close()
    assert replies[0].text == "Noted (1 notes so far)."
    assert "the milk" in replies[1].text, "the note reached the system prompt"
