"""Tests of skills: loading ``SKILL.md`` folders, the prompt section, ``load_skill``, a bot."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from botkit import Bot, Incoming, ToolContext, ToolRegistry
from botkit.errors import ConfigError
from botkit.skills import Skill, SkillLibrary, load_skills
from botkit.testing import (
    FakeAnthropicServer,
    FakeReply,
    FakeRequest,
    FakeTelegramServer,
    fake_llm,
    make_settings,
    running,
)
from botkit.types import ToolResultBlock, ToolUseBlock

CTX = ToolContext(user_id=7, chat_id=70, timestamp=datetime(2024, 1, 1, tzinfo=UTC))
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "skills"
USER = 501


def write_skill(root: Path, folder: str, text: str) -> Path:
    """Write ``<root>/<folder>/SKILL.md`` and return its path."""
    path = root / folder / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def skill_text(name: str, description: str, body: str, extra: str = "") -> str:
    """A ``SKILL.md`` with front matter."""
    return f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body}\n"


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    write_skill(root, "haiku", skill_text("haiku", "Write a haiku.", "# Haiku\n\nUse 5-7-5."))
    write_skill(
        root,
        "release-notes",
        skill_text(
            "release-notes",
            ">\n  Draft release notes\n  from a list of changes.",
            "Group changes under Added, Fixed, Removed.",
            extra="license: MIT\nmetadata:\n  version: 2\n",
        ),
    )
    return root


async def call_load_skill(library: SkillLibrary, name: str) -> ToolResultBlock:
    """``load_skill`` run as the model would call it, through a registry."""
    registry = ToolRegistry()
    registry.register_toolset(library)
    return await registry.execute(
        ToolUseBlock(id="t", name="load_skill", input={"name": name}), CTX
    )


# ---- loading --------------------------------------------------------------------------


def test_front_matter_is_parsed_and_extra_keys_are_ignored(skills_dir: Path) -> None:
    library = load_skills(skills_dir)
    assert len(library) == 2
    assert library.names == ["haiku", "release-notes"]
    notes = library.get("release-notes")
    assert notes == Skill(
        name="release-notes",
        description="Draft release notes from a list of changes.",
        path=skills_dir / "release-notes" / "SKILL.md",
    )
    assert "haiku" in library and "nope" not in library
    assert [s.name for s in library] == library.names


def test_body_is_read_on_demand(skills_dir: Path) -> None:
    library = load_skills(skills_dir)
    haiku = library.get("haiku")
    assert haiku is not None
    assert haiku.body() == "# Haiku\n\nUse 5-7-5."
    assert not hasattr(haiku, "__dict__"), "a skill keeps no body in memory"
    write_skill(skills_dir, "haiku", skill_text("haiku", "Write a haiku.", "Now 5-7-5-7-7."))
    assert haiku.body() == "Now 5-7-5-7-7."


def test_crlf_and_bom_are_accepted(tmp_path: Path) -> None:
    text = "\ufeff---\r\nname: crlf\r\ndescription: Windows file.\r\n---\r\nBody line.\r\n"
    path = tmp_path / "crlf" / "SKILL.md"
    path.parent.mkdir()
    path.write_bytes(text.encode("utf-8"))
    skill = Skill.from_file(path)
    assert (skill.name, skill.description) == ("crlf", "Windows file.")
    assert skill.body() == "Body line."


def test_only_skill_folders_are_read(skills_dir: Path) -> None:
    (skills_dir / "loose.md").write_text(skill_text("loose", "Not in a folder.", "x"))
    (skills_dir / "empty-folder").mkdir()
    write_skill(skills_dir, ".hidden", skill_text("hidden", "Hidden.", "x"))
    with capture_logs() as logs:
        library = load_skills(skills_dir)
    assert library.names == ["haiku", "release-notes"]
    assert [e for e in logs if e["log_level"] == "warning"] == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("# Just Markdown\n", "does not start with front matter"),
        ("---\nname: open\ndescription: Never closed.\n", "not closed"),
        ("---\nname: [unclosed\n---\nbody\n", "not valid YAML"),
        ("---\n- a list\n---\nbody\n", "not a mapping"),
        ("---\ndescription: No name.\n---\nbody\n", "no 'name'"),
        ("---\nname: Bad_Name\ndescription: Upper case.\n---\nbody\n", "'Bad_Name' is invalid"),
        ("---\nname: " + "a" * 65 + "\ndescription: Too long.\n---\nbody\n", "is invalid"),
        ("---\nname: nodesc\n---\nbody\n", "no 'description'"),
        ("---\nname: blank\ndescription: '  '\n---\nbody\n", "no 'description'"),
        ("---\nname: long\ndescription: " + "x" * 1025 + "\n---\nbody\n", "1025 characters"),
        ("---\nname: empty\ndescription: No body.\n---\n\n", "no instructions"),
    ],
)
def test_invalid_skill_is_skipped_with_a_warning(skills_dir: Path, text: str, problem: str) -> None:
    broken = write_skill(skills_dir, "broken", text)
    with capture_logs() as logs:
        library = load_skills(skills_dir)
    assert library.names == ["haiku", "release-notes"], "the good skills still load"
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1
    assert warnings[0]["event"] == "skills.skipped"
    assert warnings[0]["path"] == str(broken)
    assert problem in warnings[0]["problem"]


def test_undecodable_file_is_skipped_with_a_warning(skills_dir: Path) -> None:
    broken = skills_dir / "latin1" / "SKILL.md"
    broken.parent.mkdir()
    broken.write_bytes(b"---\nname: latin1\ndescription: caf\xe9\n---\nbody\n")
    with capture_logs() as logs:
        library = load_skills(skills_dir)
    assert "latin1" not in library
    assert [e["path"] for e in logs if e["event"] == "skills.skipped"] == [str(broken)]


def test_duplicate_names_raise_config_error_naming_both_files(skills_dir: Path) -> None:
    copy = write_skill(skills_dir, "haiku-copy", skill_text("haiku", "Another haiku.", "x"))
    with pytest.raises(ConfigError) as info:
        load_skills(skills_dir)
    message = str(info.value)
    assert "'haiku'" in message
    assert str(skills_dir / "haiku" / "SKILL.md") in message
    assert str(copy) in message


def test_missing_directory_raises_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_skills(tmp_path / "nowhere")


def test_example_skills_load() -> None:
    with capture_logs() as logs:
        library = load_skills(EXAMPLES)
    assert library.names == ["meeting-notes", "trip-checklist"]
    assert [e for e in logs if e["log_level"] == "warning"] == []
    for skill in library:
        assert skill.body().startswith("# ")
        assert skill.path.parent.name == skill.name


# ---- prompt, listing, tool ------------------------------------------------------------


def test_prompt_section_names_every_skill_and_the_tool(skills_dir: Path) -> None:
    section = load_skills(skills_dir).prompt_section()
    assert "load_skill" in section
    assert "- haiku: Write a haiku." in section
    assert "- release-notes: Draft release notes from a list of changes." in section
    assert "5-7-5" not in section, "bodies stay out of the prompt"


def test_empty_library_has_no_prompt_section(tmp_path: Path) -> None:
    library = load_skills(tmp_path)
    assert len(library) == 0
    assert library.prompt_section() == ""
    assert library.listing() == "No skills are installed."


def test_listing_has_one_line_per_skill(skills_dir: Path) -> None:
    assert load_skills(skills_dir).listing().splitlines() == [
        "haiku — Write a haiku.",
        "release-notes — Draft release notes from a list of changes.",
    ]


def test_load_skill_tool_definition(skills_dir: Path) -> None:
    (t,) = load_skills(skills_dir).tools()
    assert t.name == "load_skill"
    assert t.definition.input_schema["required"] == ["name"]
    assert "system prompt" in t.definition.input_schema["properties"]["name"]["description"]


async def test_load_skill_returns_the_body(skills_dir: Path) -> None:
    result = await call_load_skill(load_skills(skills_dir), "haiku")
    assert not result.is_error
    assert result.content == "# Haiku\n\nUse 5-7-5."


async def test_load_skill_unknown_name_lists_the_available_ones(skills_dir: Path) -> None:
    result = await call_load_skill(load_skills(skills_dir), "sonnet")
    assert result.is_error
    assert result.content == "Unknown skill 'sonnet'. Available skills: haiku, release-notes"


async def test_load_skill_reports_a_file_gone_since_loading(skills_dir: Path) -> None:
    library = load_skills(skills_dir)
    (skills_dir / "haiku" / "SKILL.md").unlink()
    with capture_logs() as logs:
        result = await call_load_skill(library, "haiku")
    assert result.is_error
    assert result.content.startswith("The skill 'haiku' could not be read")
    assert [e["event"] for e in logs] == ["skills.unreadable"]


def test_library_from_skills_rejects_duplicates(tmp_path: Path) -> None:
    a = Skill("same", "A.", tmp_path / "a" / "SKILL.md")
    b = Skill("same", "B.", tmp_path / "b" / "SKILL.md")
    with pytest.raises(ConfigError, match="Two skills are named 'same'"):
        SkillLibrary([a, b])


# ---- end to end, through a bot --------------------------------------------------------


class SkilledBot(Bot):
    """A bot with skills: the prompt lists them, ``load_skill`` reads them, ``/skills``."""

    def __init__(self, library: SkillLibrary, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.library = library
        self.tools.register_toolset(library)

        @self.command("skills", "List skills")
        async def skills(message: Incoming, args: str) -> str:
            return library.listing()

    async def build_prompt(self, message: Incoming) -> str:
        return f"{self.options.system_prompt}\n\n{self.library.prompt_section()}"


async def test_bot_lists_loads_and_prompts_skills(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    def model(request: FakeRequest) -> FakeReply:
        if request.tool_results():
            return FakeReply.text("Here is your checklist.")
        return FakeReply.tool_use("load_skill", {"name": "trip-checklist"})

    claude.responder = model
    library = load_skills(EXAMPLES)
    settings = make_settings(tmp_path, allowed_users=frozenset({USER}), sessions_dir=tmp_path)
    bot = SkilledBot(library, settings=settings, llm=fake_llm(claude))
    async with running(bot, telegram):
        telegram.send_text(USER, "/skills")
        listed = await telegram.wait_for_messages(USER)
        assert claude.requests == [], "/skills answers without the model"
        telegram.send_text(USER, "I'm off to Lisbon for a conference next week")
        replies = await telegram.wait_for_messages(USER, 2)

    assert listed[0].text.splitlines() == library.listing().splitlines()
    first, second = claude.requests
    assert "load_skill" in first.tool_names
    assert library.prompt_section() in first.system_text
    assert "- meeting-notes: " in first.system_text
    assert "- trip-checklist: " in first.system_text
    (result,) = second.tool_results()
    body = (EXAMPLES / "trip-checklist" / "SKILL.md").read_text().split("---\n", 2)[2].strip()
    assert result["content"] == body
    assert not result.get("is_error")
    assert replies[1].text == "Here is your checklist."
    assert {"command": "skills", "description": "List skills"} in telegram.commands()
