"""``python -m botkit try``: a bot in the terminal, on a scripted model without keys."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from botkit.testing.anthropic import FakeAnthropicServer, FakeReply
from botkit.testing.speech import FakeSpeechServer
from botkit.tryout.scripted import sample_arguments, scripted_answer
from botkit.voice.audio import ogg_opus_seconds, tone_ogg_opus

MY_BOT = '''
from botkit import Bot, tool


@tool
async def greet(name: str) -> str:
    """Greet someone by name.

    Args:
        name: Who to greet.
    """
    return f"Hello, {name}!"


bot = Bot(tools=[greet], system_prompt="You greet people.")
'''


def try_botkit(tmp_path: Path, lines: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "ANTHROPIC_"))}
    env["BOTKIT_DATABASE_URL"] = "postgresql://nobody@127.0.0.1:1/nothing"  # never used by try
    return subprocess.run(
        [sys.executable, "-m", "botkit", "try", *args, "--sessions", str(tmp_path / "s")],
        input=lines,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_try_runs_the_default_assistant_without_keys(tmp_path: Path) -> None:
    result = try_botkit(tmp_path, "hello there\nuse roll_dice\n/help\n")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("botkit try: you are user 1"), lines[0]
    assert "Claude is a scripted model" in lines[0] and "'use roll_dice'" in lines[0]
    assert f"sessions: {tmp_path / 's'}" in result.stdout
    assert "bot> echo: hello there" in lines
    tool = next(line for line in lines if line.startswith("tool> roll_dice() → ["))
    rolled = tool.split("→ ", 1)[1]
    assert f"bot> roll_dice answered: {rolled}" in lines, "the answer reads the tool's result"
    assert "/clear — Start a fresh conversation" in lines, "commands run as on Telegram"
    session = (tmp_path / "s" / "1.jsonl").read_text()
    assert "hello there" in session and "roll_dice" in session
    assert "Traceback" not in result.stderr


def test_try_runs_your_bot_and_fills_in_required_arguments(tmp_path: Path) -> None:
    (tmp_path / "mybot.py").write_text(MY_BOT)
    result = try_botkit(tmp_path, "please use greet Ann\n", "mybot:bot")
    assert result.returncode == 0, result.stderr
    assert "e.g. 'use greet'" in result.stdout.splitlines()[0], "names the bot's own tool"
    assert "tools: greet," in result.stdout
    assert 'tool> greet(name="Ann") → Hello, Ann!' in result.stdout.splitlines()
    assert "bot> greet answered: Hello, Ann!" in result.stdout.splitlines()


def test_scripted_model_makes_arguments_from_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "unit": {"type": "string", "enum": ["C", "F"]},
            "days": {"type": "integer", "minimum": 1},
            "city": {"type": "string"},
            "verbose": {"type": "boolean"},
        },
        "required": ["unit", "days", "city"],
    }
    assert sample_arguments(schema, "Paris") == {"unit": "C", "days": 1, "city": "Paris"}
    body = {
        "messages": [{"role": "user", "content": "weather in Paris please"}],
        "tools": [{"name": "weather", "input_schema": schema}],
    }
    call = scripted_answer(body)[-1]
    assert call["name"] == "weather" and call["input"]["city"] == "in Paris please"
    assert json.dumps(call["input"])


async def test_try_with_a_key_uses_claude(tmp_path: Path, claude: FakeAnthropicServer) -> None:
    """With ANTHROPIC_API_KEY the model is the one at ANTHROPIC_BASE_URL (here a fake standing
    in for Claude), not the scripted one, and the first line says so."""
    claude.enqueue(FakeReply.text("Bonjour from Claude."))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "ANTHROPIC_"))}
    env.update(ANTHROPIC_API_KEY="sk-ant-real-key", ANTHROPIC_BASE_URL=claude.base_url)
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "botkit", "try", "--sessions", str(tmp_path / "s")),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(b"hello there\n"), 90)
    assert process.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0].startswith("botkit try: you are user 1"), lines[0]
    assert "Claude is real" in lines[0] and "scripted" not in lines[0]
    assert "bot> Bonjour from Claude." in lines and "bot> echo: hello there" not in lines
    [request] = claude.requests
    assert request.api_key == "sk-ant-real-key" and request.last_user_text() == "hello there"


def test_try_loads_neither_aiogram_nor_the_sdk_without_a_key(tmp_path: Path) -> None:
    """What makes its first answer come within a second or two: nothing it does not use."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "ANTHROPIC_"))}
    probe = (
        "import sys, runpy; sys.argv = ['botkit', 'try', '--sessions', 's']; "
        "sys.stdin = __import__('io').StringIO('hello\\n')\n"
        "try:\n    runpy.run_module('botkit', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print('LOADED', sorted(m for m in ('aiogram', 'anthropic') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert "bot> echo: hello" in done.stdout, done.stdout + done.stderr
    assert "LOADED []" in done.stdout, done.stdout


def test_a_try_session_is_labelled_as_scripted_and_costs_nothing(tmp_path: Path) -> None:
    result = try_botkit(tmp_path, "hello\n")
    assert result.returncode == 0, result.stderr
    replay = subprocess.run(
        [sys.executable, "-m", "botkit", "replay", str(tmp_path / "s" / "1.jsonl")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert "botkit-scripted" in replay.stdout and "claude" not in replay.stdout, replay.stdout


def seconds_of(path: Path) -> float:
    return ogg_opus_seconds(path.read_bytes()) or 0.0


async def test_try_hears_a_local_voice_note_and_saves_the_spoken_answer(
    tmp_path: Path, speech: FakeSpeechServer
) -> None:
    """``/voice_note PATH`` is a voice note as Telegram delivers one; the answer, spoken, is
    saved as a playable OGG/Opus file whose path is shown."""
    note = tmp_path / "question.ogg"
    note.write_bytes(tone_ogg_opus(2.0))
    speech.transcripts[note.read_bytes()] = "how are you"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "ANTHROPIC_"))}
    env.update(
        BOTKIT_TRANSCRIBE_URL=speech.base_url,
        BOTKIT_SPEECH_URL=speech.base_url,
        BOTKIT_VOICE_REPLIES="mirror",
    )
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "botkit", "try", "--sessions", str(tmp_path / "s")),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    lines_in = f"/voice_note {note}\n/voice_note {tmp_path / 'missing.ogg'}\n".encode()
    out, err = await asyncio.wait_for(process.communicate(lines_in), 90)
    assert process.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert "bot> echo: [Voice message, transcribed] how are you" in lines, lines
    saved = next(line for line in lines if "spoken answer" in line).rsplit(" saved to ", 1)[1]
    assert Path(saved).parent == tmp_path / "s" / "spoken"
    assert seconds_of(Path(saved)) > 1
    assert any(f"cannot read {tmp_path / 'missing.ogg'}" in line for line in lines)


APPROVE_BOT = '''
from botkit import Bot

bot = Bot()


@bot.tool(approval=True)
async def delete_note(name: str) -> str:
    """Delete a note."""
    return f"deleted {name}"


@bot.command("moons", "A table of moons")
async def moons(message, args):
    return "Moons:\\n\\n| Planet | Moons |\\n|---|--:|\\n| Earth | 1 |\\n| Mars | 2 |"
'''


def test_try_lists_buttons_with_numbers_and_presses_them_through_a_pipe(tmp_path: Path) -> None:
    (tmp_path / "approvebot.py").write_text(APPROVE_BOT)
    lines = "use delete_note n1\nhello\n/press 1\n/press 9\n/moons\n"
    result = try_botkit(tmp_path, lines, "approvebot:bot")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert "[1] Allow  [2] Deny  (/press N presses one)" in out
    ran = out.index('tool> delete_note(name="n1") → deleted n1')
    assert out[ran + 1] == "bot> delete_note answered: deleted n1", "Allow ran the call"
    assert out[ran + 2] == "bot> echo: hello", "the message held behind the approval ran after"
    assert "error> No button 9 here: 0 under the last message with buttons." in out
    table = out.index("Planet | Moons")
    assert out[table + 1 : table + 4] == ["-------+------", "Earth  |     1", "Mars   |     2"]
    assert out[-1].startswith("sessions: "), "the closing line"


def test_end_of_input_ends_try_while_a_message_waits_behind_an_approval(tmp_path: Path) -> None:
    (tmp_path / "approvebot.py").write_text(APPROVE_BOT)
    result = try_botkit(tmp_path, "use delete_note n1\nhello\n", "approvebot:bot")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[-2] == "[1] Allow  [2] Deny  (/press N presses one)"
    assert out[-1].startswith("sessions: "), "the closing line, and try ended"
    assert "bot> echo: hello" not in out, "held for the decision, not run past it"
    assert "Traceback" not in result.stderr
