"""The docs: the generated references cover the code, and README's first example works."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

from botkit import Bot, Settings
from botkit.cli import _parser
from botkit.reference import cli_markdown, env_name, settings_markdown
from botkit.testing import (
    FakeAnthropicServer,
    FakeReply,
    FakeRequest,
    FakeTelegramServer,
    fake_llm,
    running,
)

ROOT = Path(__file__).resolve().parent.parent


def test_settings_reference_lists_every_setting_with_its_default_and_meaning() -> None:
    rows = {
        match[1]: (match[2], match[3])
        for match in re.finditer(r"^\| `(\w+)` \| (.+?) \| (.*) \|$", settings_markdown(), re.M)
    }
    names = {env_name(name, field) for name, field in Settings.model_fields.items()}
    assert names <= set(rows), names - set(rows)
    assert len(rows) == len(Settings.model_fields)
    assert rows["BOTKIT_MAX_TOKENS"] == ("`4096`", "the output limit of one LLM call.")
    assert rows["TELEGRAM_BOT_TOKEN"][0] == "unset"
    undocumented = [env for env, (_, meaning) in rows.items() if not meaning]
    assert not undocumented, f"settings without a docstring: {undocumented}"


def test_cli_reference_has_a_section_for_every_command() -> None:
    page = cli_markdown(_parser())
    for command in ("run", "receive", "work", "doctor", "migrate", "users block", "sessions"):
        assert f"\n## {command}\n" in page, command
    assert "usage: python -m botkit migrate" in page


async def test_readme_first_example_answers_with_its_tool(tmp_path: Path) -> None:
    block = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block is not None, "README shows a bot"
    module = types.ModuleType("mybot")
    exec(compile(block[1], "README.md", "exec"), module.__dict__)
    template: Bot = module.bot

    def model(request: FakeRequest) -> FakeReply:
        if request.tool_results():
            return FakeReply.text(f"It is {request.tool_results()[0]['content']} there.")
        return FakeReply.tool_use("time_in", {"zone": "UTC"})

    settings = Settings(_env_file=None, allowed_users=frozenset({7}), sessions_dir=tmp_path)
    async with FakeTelegramServer() as telegram, FakeAnthropicServer(responder=model) as claude:
        llm = fake_llm(claude)
        bot = type(template)(settings=settings, llm=llm, tools=list(template.tools))
        async with running(bot, telegram):
            telegram.send_text(7, "what time is it in London?")
            (reply,) = await telegram.wait_for_messages(7)
        await llm.close()
    assert re.fullmatch(r"It is \d\d:\d\d there\.", reply.text), reply.text
    assert "knows the time anywhere" in claude.requests[0].system_text


def test_readme_first_shell_block_runs_without_keys_in_a_fresh_folder(tmp_path: Path) -> None:
    """A newcomer's first commands: install from the clone (done for this run), then ``try``,
    the assistant and README's own example, with no token and no key in the environment."""
    readme = (ROOT / "README.md").read_text()
    shell = re.search(r"```sh\n(.*?)```", readme, re.S)
    example = re.search(r"```python\n(.*?)```", readme, re.S)
    assert shell is not None and example is not None
    (tmp_path / "mybot.py").write_text(example[1])
    commands = [line.split("#")[0].strip() for line in shell[1].splitlines() if line.strip()]
    assert commands[0] in ("pip install -e .", "pip install ."), "installs from the clone"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("BOTKIT_", "TELEGRAM_", "ANTHROPIC_"))
    }
    for command in commands[1:]:
        argv = shlex.split(command)
        assert argv[:3] == ["python", "-m", "botkit"], command
        done = subprocess.run(
            [sys.executable, *argv[1:]],
            cwd=tmp_path,
            env=env,
            input="hello\n",
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "bot> echo: hello" in done.stdout, done.stdout


def test_every_link_in_the_readme_resolves() -> None:
    """README is read on the repository's page, where only files that exist open."""
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if not t.startswith(("http://", "https://", "mailto:"))]
    assert local, "README links the docs"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, missing
