"""Each example bot runs against the fakes and does what it promises."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path
from types import ModuleType

from PIL import Image

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


async def test_voice_example_turns_a_voice_note_into_a_turn_through_its_backend(
    tmp_path: Path,
) -> None:
    example = load_example("voice_bot")
    script = "import sys; print(f'heard {len(open(sys.argv[1], \"rb\").read())} bytes')"
    settings = Settings(_env_file=None, allowed_users=frozenset({7}), sessions_dir=tmp_path)
    async with FakeTelegramServer() as telegram, FakeAnthropicServer() as claude:
        llm = fake_llm(claude)
        bot = example.VoiceBot(settings=settings, llm=llm)
        bot.transcriber = example.CommandTranscriber([sys.executable, "-c", script, "{file}"])
        async with running(bot, telegram):
            telegram.send_voice(7, b"OggS" + b"\0" * 96)
            replies = await telegram.wait_for_messages(7, 2)
        await llm.close()
    assert [r.text for r in replies] == [
        "🎤 I understood: “heard 100 bytes”",
        "echo: heard 100 bytes",
    ]


async def test_chart_example_sends_its_chart_as_a_photo(tmp_path: Path) -> None:
    example = load_example("chart_bot")
    call = {"title": "Spending", "labels": ["Jan", "Feb", "Mar"], "values": [120, 80.5, 200]}

    def model(request: FakeRequest) -> FakeReply:
        if request.tool_results():
            return FakeReply.text("Done.")
        return FakeReply.tool_use("bar_chart", call)

    settings = Settings(_env_file=None, allowed_users=frozenset({7}), sessions_dir=tmp_path)
    async with FakeTelegramServer() as telegram, FakeAnthropicServer(responder=model) as claude:
        llm = fake_llm(claude)
        bot = Bot(settings=settings, llm=llm, tools=list(example.bot.tools))
        async with running(bot, telegram):
            telegram.send_text(7, "chart my spending")
            await telegram.wait_for_messages(7)
        await llm.close()
    [sent] = telegram.sent_files(7)
    assert (sent.method, sent.caption) == ("sendPhoto", "Spending")
    assert Image.open(io.BytesIO(sent.data)).size == (640, 400)
