"""Personas: a title, a description and a prompt users pick with ``/persona``, optionally with
their own model and a narrower set of tools.

BOTKIT_PERSONAS_DIR holds one Markdown file per persona, its id the file's name::

    personas/
        tutor.md
        coder.md

Each file starts with YAML front matter and its body is the persona's prompt::

    ---
    title: Patient tutor
    description: Explains step by step and asks questions back.
    model: claude-opus-5-5        # optional: the model it talks with
    tools: [load_skill, memory]   # optional: the only tools it may use
    ---
    You are a patient tutor...
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from botkit.errors import ConfigError
from botkit.skills import _parse_front_matter, _split_front_matter

__all__ = ["Persona", "load_personas"]


class Persona(BaseModel):
    """A style the assistant can take: its prompt joins the system prompt while it is chosen."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")
    """Names it in buttons, plans and records: keep it once users have picked it."""
    title: str = Field(min_length=1, max_length=48)
    """Shown on its button."""
    description: str = Field(min_length=1, max_length=255)
    """Shown in ``/persona``."""
    prompt: str = Field(min_length=1)
    """Added to the system prompt, after the bot's own."""
    model: str | None = None
    """The model it talks with (``None``: the conversation's)."""
    tools: tuple[str, ...] | None = None
    """The only tools it may use (``None``: every tool the turn has; ``()``: none)."""


def load_personas(directory: Path | None, in_code: Iterable[Persona] = ()) -> tuple[Persona, ...]:
    """The personas given in code, then those of ``directory`` (``*.md``, by name).

    A malformed file, or two personas with one id, is a ``ConfigError`` saying what to fix.
    """
    personas = [*in_code, *(_from_file(path) for path in _files(directory))]
    ids = [persona.id for persona in personas]
    doubled = sorted({i for i in ids if ids.count(i) > 1})
    if doubled:
        raise ConfigError(f"two personas have the id {', '.join(doubled)}: ids must differ")
    return tuple(personas)


def _files(directory: Path | None) -> list[Path]:
    if directory is None:
        return []
    if not directory.is_dir():
        raise ConfigError(f"BOTKIT_PERSONAS_DIR: {directory} is not a folder")
    return sorted(directory.glob("*.md"))


def _from_file(path: Path) -> Persona:
    try:
        front, body = _split_front_matter(path.read_text(encoding="utf-8"))
        data = _parse_front_matter(front)
        if set(data) & {"id", "prompt"}:
            raise ValueError("the file's name is its id and its body the prompt, not keys")
        tools = data.get("tools")
        if isinstance(tools, str):  # "a, b" as well as [a, b]
            data["tools"] = [name.strip() for name in tools.split(",") if name.strip()]
        return Persona(id=path.stem, prompt=body, **data)
    except (OSError, ValueError) as e:
        why = _first_error(e) if isinstance(e, ValidationError) else str(e)
        raise ConfigError(f"persona {path}: {why}") from e


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]
