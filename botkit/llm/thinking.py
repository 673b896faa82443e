"""Thinking on today's Claude models: what each model accepts, and blocks bound to their prefix.

Since Claude Sonnet 5 and Opus 5 an answer may start with ``thinking`` blocks even when the
request asks for none. Within a tool cycle they must come back exactly as received; on the
models with *preserved thinking* (Fable 5.1, Opus 5.5, Sonnet 5.5, Haiku 5.5 and later) each
block is also bound to its prefix (the system prompt, the tools and everything before it),
and the API refuses a block whose prefix changed. botkit records, on every thinking block, the
model that wrote it and a hash of its prefix, so a request can tell before it is sent whether
a block would be refused, and then asks the API to drop such blocks instead of failing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from botkit.types import Message, RedactedThinkingBlock, ThinkingBlock

__all__ = [
    "BINDING_BETA",
    "EFFORTS",
    "Effort",
    "ModelTraits",
    "ThinkingDisplay",
    "ThinkingMode",
    "ThinkingSettings",
    "problems",
    "traits_for",
]

Effort = Literal["low", "medium", "high", "xhigh", "max"]
EFFORTS: tuple[Effort, ...] = ("low", "medium", "high", "xhigh", "max")
ThinkingMode = Literal["adaptive", "between_tools", "off"]
ThinkingDisplay = Literal["omitted", "summarized"]

BINDING_BETA = "thinking-binding-controls-2026-08-01"
"""The ``anthropic-beta`` value that lets a request set ``thinking.block_binding``."""

_ALL_EFFORTS = frozenset(EFFORTS)
_NO_MAX = frozenset({"low", "medium", "high", "xhigh"})


@dataclass(frozen=True, slots=True)
class ModelTraits:
    """What one model family accepts, as its documentation says (read 2026-11-28)."""

    thinking: frozenset[str]
    """The ``thinking.type`` values it takes: ``adaptive``, ``enabled``, ``disabled``,
    ``between_tools``."""
    thinks_by_default: bool
    """Whether a request without ``thinking`` gets thinking blocks (adaptive by default)."""
    efforts: frozenset[str] = frozenset()
    """The ``output_config.effort`` levels it takes (none: no effort parameter)."""
    binds_prefix: bool = False
    """Preserved thinking: its blocks are bound to their prefix (the prefix check)."""
    disabled_up_to_high: bool = False
    """``thinking.type: disabled`` only at effort ``high`` or below."""

    @property
    def refuses_sampling(self) -> bool:
        """Whether a non-default temperature, top_p or top_k is a 400 (every thinking-by-default
        model); botkit never sends them."""
        return self.thinks_by_default


_EXTENDED_ONLY = ModelTraits(frozenset({"enabled", "disabled"}), thinks_by_default=False)
_FAMILIES: tuple[tuple[str, ModelTraits], ...] = (
    ("claude-fable-5-", ModelTraits(frozenset({"adaptive"}), True, _ALL_EFFORTS, True)),
    ("claude-mythos-5-", ModelTraits(frozenset({"adaptive"}), True, _ALL_EFFORTS, True)),
    ("claude-fable-5", ModelTraits(frozenset({"adaptive"}), True, _ALL_EFFORTS)),
    ("claude-mythos-5", ModelTraits(frozenset({"adaptive"}), True, _ALL_EFFORTS)),
    ("claude-opus-5-5", ModelTraits(frozenset({"adaptive"}), True, _ALL_EFFORTS, True)),
    (
        "claude-sonnet-5-5",
        ModelTraits(frozenset({"adaptive", "between_tools"}), True, _ALL_EFFORTS, True),
    ),
    (
        "claude-haiku-5-5",
        ModelTraits(frozenset({"adaptive", "disabled"}), True, _ALL_EFFORTS, True, True),
    ),
    (
        "claude-opus-5",
        ModelTraits(frozenset({"adaptive", "disabled"}), True, _ALL_EFFORTS, False, True),
    ),
    ("claude-sonnet-5", ModelTraits(frozenset({"adaptive", "disabled"}), True, _ALL_EFFORTS)),
    ("claude-opus-4-8", ModelTraits(frozenset({"adaptive", "disabled"}), False, _ALL_EFFORTS)),
    ("claude-opus-4-7", ModelTraits(frozenset({"adaptive", "disabled"}), False, _ALL_EFFORTS)),
    (
        "claude-opus-4-6",
        ModelTraits(frozenset({"adaptive", "enabled", "disabled"}), False, _ALL_EFFORTS),
    ),
    (
        "claude-sonnet-4-6",
        ModelTraits(frozenset({"adaptive", "enabled", "disabled"}), False, _NO_MAX),
    ),
)
"""Model id prefixes, most specific first."""


def traits_for(model: str) -> ModelTraits:
    """What ``model`` accepts; models botkit does not know are treated as extended-thinking
    models (no thinking unless asked, no effort), the contract of Claude Haiku 4.5."""
    for prefix, traits in _FAMILIES:
        if model.startswith(prefix):
            return traits
    return _EXTENDED_ONLY


@dataclass(frozen=True, slots=True)
class ThinkingSettings:
    """How deep and how visibly the model thinks: ``BOTKIT_THINKING``, ``BOTKIT_EFFORT`` and
    ``BOTKIT_THINKING_DISPLAY`` (``None``: the model's default)."""

    mode: ThinkingMode | None = None
    effort: Effort | None = None
    display: ThinkingDisplay | None = None

    def fields(self, model: str) -> dict[str, Any]:
        """The request fields these settings give on ``model`` (only those it accepts)."""
        traits = traits_for(model)
        fields: dict[str, Any] = {}
        thinking = self._thinking(traits)
        if thinking is not None:
            fields["thinking"] = thinking
        if self.effort is not None and self.effort in traits.efforts:
            fields["output_config"] = {"effort": self.effort}
        return fields

    def _thinking(self, traits: ModelTraits) -> dict[str, Any] | None:
        if self.mode == "off":
            return {"type": "disabled"} if "disabled" in traits.thinking else None
        if self.mode == "between_tools" and "between_tools" in traits.thinking:
            return {"type": "between_tools"}  # it takes no other field
        adaptive = self.mode is not None or traits.thinks_by_default
        if self.display is not None and adaptive and "adaptive" in traits.thinking:
            return {"type": "adaptive", "display": self.display}
        if self.mode is not None and "adaptive" in traits.thinking:
            return {"type": "adaptive"}
        return None


def least_thinking(model: str) -> dict[str, Any]:
    """The request fields for the least thinking ``model`` accepts: none, or thinking only
    between tool calls (none before a first answer) where it cannot be turned off."""
    traits = traits_for(model)
    for kind in ("disabled", "between_tools"):
        if kind in traits.thinking:
            return {"thinking": {"type": kind}}
    return {}


def problems(settings: ThinkingSettings, model: str) -> list[str]:
    """What ``model`` would refuse of ``settings``, one sentence each (empty: all accepted)."""
    traits = traits_for(model)
    found: list[str] = []
    mode, effort = settings.mode, settings.effort
    if mode == "off" and "disabled" not in traits.thinking:
        hint = " (use BOTKIT_THINKING=between_tools)" if "between_tools" in traits.thinking else ""
        found.append(f"{model} cannot think less than adaptively: BOTKIT_THINKING=off{hint}")
    elif mode == "off" and traits.disabled_up_to_high and effort in ("xhigh", "max"):
        found.append(f"{model} turns thinking off only at effort high or below")
    if mode == "between_tools":
        if "between_tools" not in traits.thinking:
            found.append(f"{model} does not take BOTKIT_THINKING=between_tools")
        elif effort in ("xhigh", "max"):
            found.append(f"{model} takes between_tools only at effort low, medium or high")
        elif settings.display is not None:
            found.append("BOTKIT_THINKING_DISPLAY cannot be set with between_tools")
    if mode == "adaptive" and "adaptive" not in traits.thinking:
        found.append(f"{model} has no adaptive thinking (BOTKIT_THINKING=adaptive)")
    if effort is not None and effort not in traits.efforts:
        found.append(f"{model} does not take BOTKIT_EFFORT={effort}")
    return found


# ------------------------------------------------------------------------ prefix binding


def _feed(hasher: Any, tag: bytes, value: Any) -> None:
    data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    hasher.update(tag + len(data).to_bytes(8, "big") + data)


def prefix_hasher(system: Any, tools: Sequence[dict[str, Any]]) -> Any:
    """A SHA-256 fed with the top of a request (``cache_control`` markers left out: they are
    not part of a thinking block's prefix)."""
    hasher = hashlib.sha256()
    _feed(hasher, b"S", _unmarked(system))
    _feed(hasher, b"T", _unmarked(list(tools)))
    return hasher


_TOPS: dict[tuple[str, tuple[int, ...]], tuple[tuple[Any, ...], Any]] = {}
_TOPS_KEPT = 32
"""Tops (system prompt and tools) kept hashed; all are dropped when there are more."""


def top_hasher(system: Any, tools: Sequence[dict[str, Any]], owners: Sequence[Any]) -> Any:
    """:func:`prefix_hasher` of a request's top, fed once for a system prompt and tools that
    many calls share. ``owners``, the immutable objects ``tools`` were made from (one each),
    name the tools; the entry keeps them, so their identities stay theirs."""
    if not isinstance(system, str) or len(owners) != len(tools):
        return prefix_hasher(system, tools)
    key = (system, tuple(map(id, owners)))
    kept = _TOPS.get(key)
    if kept is None:
        if len(_TOPS) >= _TOPS_KEPT:
            _TOPS.clear()
        kept = _TOPS[key] = (tuple(owners), prefix_hasher(system, tools))
    return kept[1].copy()


def feed_message(hasher: Any, message: Message) -> None:
    """Add one whole message to a prefix hash: its digest, made once, so a long history
    costs a few bytes a message at every call."""
    hasher.update(b"M" + message.digest)


def block_prefixes(hasher: Any, role: str, blocks: Sequence[dict[str, Any]]) -> list[str]:
    """The prefix hash in front of each of ``blocks`` of a message of ``role`` that follows
    what ``hasher`` was fed (``hasher`` is left unchanged)."""
    running = hasher.copy()
    _feed(running, b"R", role)
    digests: list[str] = []
    for block in blocks:
        digests.append(running.hexdigest())
        _feed(running, b"B", _unmarked(block))
    return digests


def _unmarked(value: Any) -> Any:
    if isinstance(value, list):
        return [_unmarked(item) for item in value]
    if isinstance(value, dict) and "cache_control" in value:
        return {k: v for k, v in value.items() if k != "cache_control"}
    return value


def stale_thinking(hasher: Any, messages: Sequence[Message], model: str) -> list[str]:
    """Where the request's thinking blocks would fail the prefix check on ``model``: the
    path (``messages.i.content.j``) of each block whose prefix changed since it was written,
    or that botkit has no record of. Blocks of another model are left to the API (dropped
    unread without an error). ``hasher`` starts fed with the request's top (:func:`top_hasher`)
    and ends fed with every message."""
    stale: list[str] = []
    for i, message in enumerate(messages):
        if message.role == "assistant" and message.thinking:
            digests = block_prefixes(hasher, "assistant", message.to_api()["content"])
            for j, block in enumerate(message.content):
                if not isinstance(block, ThinkingBlock | RedactedThinkingBlock):
                    continue
                if block.model not in (None, model):
                    continue
                if block.prefix_sha256 != digests[j]:
                    stale.append(f"messages.{i}.content.{j}")
        feed_message(hasher, message)
    return stale
