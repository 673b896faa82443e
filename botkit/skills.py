"""Skills: folders of instructions the model reads on demand, as Anthropic's Agent Skills.

A skills directory holds one folder per skill, each with a ``SKILL.md``::

    skills/
        meeting-notes/SKILL.md
        trip-checklist/SKILL.md

A ``SKILL.md`` starts with YAML front matter giving ``name`` and ``description`` (other keys
are ignored), followed by the Markdown instructions::

    ---
    name: meeting-notes
    description: Turn raw meeting notes into a summary, decisions and action items.
    ---
    # Meeting notes
    ...

Only names and descriptions go into the system prompt; the model calls the ``load_skill``
tool to read a skill's instructions when a request matches it, and the body is read from
disk at that moment. Loose ``*.md`` files and folders without a ``SKILL.md`` are ignored.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import yaml

from botkit.errors import ConfigError, ToolError
from botkit.tools.decorator import ToolSet, tool

__all__ = ["SKILL_FILE", "Skill", "SkillLibrary", "load_skills"]

log = structlog.get_logger(__name__)

SKILL_FILE = "SKILL.md"
"""The file that defines a skill, inside the skill's folder."""

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_MAX_DESCRIPTION_CHARS = 1024
_FENCE = "---"


def _split_front_matter(text: str) -> tuple[str, str]:
    """The YAML front matter and the body of a ``SKILL.md`` text; ``ValueError`` if absent."""
    lines = text.removeprefix("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != _FENCE:
        raise ValueError(f"it does not start with front matter (a line '{_FENCE}')")
    for i, line in enumerate(lines[1:], start=1):
        if line.rstrip() == _FENCE:
            return "".join(lines[1:i]), "".join(lines[i + 1 :]).strip()
    raise ValueError(f"its front matter is not closed by a line '{_FENCE}'")


def _parse_front_matter(front: str) -> dict[str, Any]:
    """The front matter as a mapping; ``ValueError`` if it is not valid YAML or not a mapping."""
    try:
        data = yaml.safe_load(front)
    except yaml.YAMLError as e:
        raise ValueError(f"its front matter is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ValueError("its front matter is not a mapping with 'name' and 'description'")
    return data


@dataclass(frozen=True, slots=True)
class Skill:
    """One skill: its name and description; the instructions stay on disk until asked for."""

    name: str
    description: str
    path: Path
    """The skill's ``SKILL.md``."""

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Skill:
        """The skill defined by a ``SKILL.md``; ``ValueError`` (or ``OSError``) if it is invalid."""
        path = Path(path)
        front, body = _split_front_matter(path.read_text(encoding="utf-8"))
        data = _parse_front_matter(front)
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("its front matter has no 'name' (a string)")
        if not _NAME_RE.match(name):
            raise ValueError(
                f"its name {name!r} is invalid: use 1-64 lowercase letters, digits and '-', "
                "starting with a letter or digit"
            )
        description = data.get("description")
        if not isinstance(description, str) or not description.strip():
            raise ValueError("its front matter has no 'description' (a non-empty string)")
        description = " ".join(description.split())
        if len(description) > _MAX_DESCRIPTION_CHARS:
            raise ValueError(
                f"its description has {len(description)} characters "
                f"(at most {_MAX_DESCRIPTION_CHARS})"
            )
        if not body:
            raise ValueError("it has no instructions after the front matter")
        return cls(name=name, description=description, path=path)

    def body(self) -> str:
        """The instructions (the Markdown after the front matter), read from disk now."""
        return _split_front_matter(self.path.read_text(encoding="utf-8"))[1]


class SkillLibrary(ToolSet):
    """The skills a bot has: a system-prompt section, the ``load_skill`` tool, a listing."""

    def __init__(self, skills: Iterable[Skill] = ()) -> None:
        self.skills: list[Skill] = sorted(skills, key=lambda s: s.name)
        """The skills, sorted by name."""
        self._by_name: dict[str, Skill] = {}
        for skill in self.skills:
            if (other := self._by_name.get(skill.name)) is not None:
                raise ConfigError(
                    f"Two skills are named {skill.name!r}: {other.path} and {skill.path}. "
                    "Rename one of them."
                )
            self._by_name[skill.name] = skill

    def get(self, name: str) -> Skill | None:
        """The skill called ``name``, if any."""
        return self._by_name.get(name)

    @property
    def names(self) -> list[str]:
        """The skills' names, sorted."""
        return [s.name for s in self.skills]

    def prompt_section(self) -> str:
        """The system-prompt part naming each skill and how to use it; "" without skills."""
        if not self.skills:
            return ""
        lines = [
            "## Skills",
            "",
            "You have skills: written instructions for particular tasks. When a request "
            "matches a skill's description, first call the `load_skill` tool with the skill's "
            "name to read its full instructions, then follow them. Do not guess a skill's "
            "instructions from its description.",
            "",
            *(f"- {s.name}: {s.description}" for s in self.skills),
        ]
        return "\n".join(lines)

    def listing(self) -> str:
        """One line per skill, for a ``/skills`` command."""
        if not self.skills:
            return "No skills are installed."
        return "\n".join(f"{s.name} — {s.description}" for s in self.skills)

    @tool
    async def load_skill(self, name: str) -> str:
        """Read the full instructions of a skill before following it.

        Args:
            name: The skill's name, exactly as listed under "Skills" in the system prompt.
        """
        skill = self._by_name.get(name)
        if skill is None:
            available = ", ".join(self.names) or "(none)"
            raise ToolError(f"Unknown skill {name!r}. Available skills: {available}")
        try:
            return await asyncio.to_thread(skill.body)
        except (OSError, ValueError) as e:
            log.warning("skills.unreadable", skill=name, path=str(skill.path), error=str(e))
            raise ToolError(f"The skill {name!r} could not be read: {e}") from None

    def __len__(self) -> int:
        return len(self.skills)

    def __iter__(self) -> Iterator[Skill]:
        return iter(self.skills)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __repr__(self) -> str:
        return f"SkillLibrary({self.names})"


def load_skills(directory: str | os.PathLike[str]) -> SkillLibrary:
    """The skills in ``directory`` (``<folder>/SKILL.md`` each); invalid ones are skipped.

    A skill that cannot be read or parsed is logged as a warning naming its file and the
    problem, and left out. A missing directory or two skills with one name raise
    ``ConfigError``.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(f"The skills directory {root} does not exist or is not a directory.")
    skills: list[Skill] = []
    for folder in sorted(root.iterdir()):
        path = folder / SKILL_FILE
        if folder.name.startswith(".") or not path.is_file():
            continue
        try:
            skills.append(Skill.from_file(path))
        except (OSError, ValueError) as e:
            log.warning("skills.skipped", path=str(path), problem=str(e))
    library = SkillLibrary(skills)
    log.info("skills.loaded", directory=str(root), skills=library.names)
    return library
