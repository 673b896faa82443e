"""The fake Messages API's reading of thinking on today's models (documentation of 2026-11).

Which model thinks when a request says nothing, which ``thinking``, ``output_config.effort``,
``tool_choice`` and sampling values each refuses (with the API's 400 texts), signed thinking
blocks bound to the prefix and the model that produced them, the prefix check with
``drop_block`` and ``input_transformations``, and the Models API's ``capabilities``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BINDING_BETA", "CATALOGUE", "Checked", "FakeModel", "ThinkingContract", "model_of"]

BINDING_BETA = "thinking-binding-controls-2026-08-01"
_EFFORTS = ("low", "medium", "high", "xhigh", "max")
_THINKING_TYPES = ("adaptive", "enabled", "disabled", "between_tools")


@dataclass(frozen=True)
class FakeModel:
    """What one model does with thinking, as documented."""

    id: str
    thinking: frozenset[str]
    """``thinking.type`` values accepted."""
    thinks_by_default: bool
    efforts: tuple[str, ...] = ()
    default_effort: str | None = None
    binds_prefix: bool = False
    """Preserved thinking: blocks bound to their prefix (the prefix check)."""
    strict: bool = False
    """No forced ``tool_choice`` and no assistant prefill (Opus/Sonnet/Haiku 5.5, Fable 5.1)."""
    sampling: bool = False
    """Whether non-default temperature, top_p and top_k are accepted."""
    updates_in_thinking: str = ""
    """Where text written before a tool call goes: ``all`` of it into thinking blocks,
    ``long`` notes only (Sonnet 5.5), or nowhere (``""``)."""
    reads: frozenset[str] = frozenset()
    """Other models whose thinking blocks this one reads."""
    disabled_up_to_high: bool = False
    display: str = "omitted"
    """The default ``thinking.display``."""
    line: str = "sonnet"
    context: int = 1_000_000
    max_tokens: int = 128_000


_ALL = _EFFORTS
CATALOGUE: dict[str, FakeModel] = {
    m.id: m
    for m in (
        FakeModel(
            "claude-fable-5-1",
            frozenset({"adaptive"}),
            True,
            _ALL,
            "high",
            binds_prefix=True,
            strict=True,
            updates_in_thinking="all",
            reads=frozenset({"claude-opus-5", "claude-opus-5-5", "claude-sonnet-5"}),
            line="fable",
        ),
        FakeModel(
            "claude-opus-5-5",
            frozenset({"adaptive"}),
            True,
            _ALL,
            "medium",
            binds_prefix=True,
            strict=True,
            updates_in_thinking="all",
            reads=frozenset({"claude-opus-5", "claude-sonnet-5-5", "claude-sonnet-5"}),
            line="opus",
        ),
        FakeModel(
            "claude-sonnet-5-5",
            frozenset({"adaptive", "between_tools"}),
            True,
            _ALL,
            "high",
            binds_prefix=True,
            strict=True,
            updates_in_thinking="long",
            reads=frozenset({"claude-sonnet-5", "claude-haiku-4-5"}),
        ),
        FakeModel(
            "claude-haiku-5-5",
            frozenset({"adaptive", "disabled"}),
            True,
            _ALL,
            "medium",
            binds_prefix=True,
            strict=True,
            disabled_up_to_high=True,
            line="haiku",
        ),
        FakeModel(
            "claude-opus-5",
            frozenset({"adaptive", "disabled"}),
            True,
            _ALL,
            "high",
            disabled_up_to_high=True,
            line="opus",
        ),
        FakeModel("claude-sonnet-5", frozenset({"adaptive", "disabled"}), True, _ALL, "high"),
        FakeModel(
            "claude-haiku-4-5",
            frozenset({"enabled", "disabled"}),
            False,
            sampling=True,
            display="summarized",
            line="haiku",
            context=200_000,
            max_tokens=64_000,
        ),
    )
}
"""The models the fake knows by name, with their documented behaviour."""

_PRE_THINKING = FakeModel(
    "", frozenset({"enabled", "disabled"}), False, sampling=True, display="summarized"
)


def model_of(model_id: str) -> FakeModel:
    """The catalogue's model for an id (a dated id too: ``claude-haiku-4-5-20251001``); any
    other id speaks the contract of Claude Haiku 4.5 (no thinking unless asked)."""
    for known in sorted(CATALOGUE, key=len, reverse=True):
        if model_id == known or model_id.startswith(known + "-2"):
            return CATALOGUE[known]
    return _PRE_THINKING


def capabilities(model: FakeModel) -> dict[str, Any]:
    """The Models API's ``capabilities`` object of ``model``."""

    def yes(flag: bool) -> dict[str, bool]:
        return {"supported": flag}

    effort: dict[str, Any] = {"supported": bool(model.efforts)}
    effort.update({level: yes(level in model.efforts) for level in _EFFORTS})
    return {
        "batch": yes(True),
        "citations": yes(True),
        "code_execution": yes(True),
        "context_management": {"supported": True},
        "effort": effort,
        "image_input": yes(True),
        "pdf_input": yes(True),
        "structured_outputs": yes(True),
        "thinking": {
            "supported": True,
            "types": {
                "adaptive": yes("adaptive" in model.thinking),
                "enabled": yes("enabled" in model.thinking),
            },
        },
    }


def model_object(model: FakeModel) -> dict[str, Any]:
    """``GET /v1/models/{id}``'s answer."""
    return {
        "type": "model",
        "id": model.id,
        "display_name": model.id.replace("claude-", "Claude ").replace("-", " ").title(),
        "created_at": "2026-06-01T00:00:00Z",
        "line": model.line,
        "max_input_tokens": model.context,
        "max_tokens": model.max_tokens,
        "capabilities": capabilities(model),
    }


def _dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def _unmarked(value: Any) -> Any:
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "cache_control"}
    return value


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return content if isinstance(content, list) else []


class _Prefix:
    """The running hash of a request's prefix, as the fake binds blocks to it: ``system``,
    ``tools`` and the messages before a block (values, not formatting; no cache markers)."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.hasher = hashlib.sha256()
        system = body.get("system")
        if isinstance(system, str):
            system = [{"type": "text", "text": system}] if system else []
        self._feed(b"S", _unmarked(system or []))
        self._feed(b"T", _unmarked(body.get("tools") or []))

    def _feed(self, tag: bytes, value: Any) -> None:
        data = _dumps(value)
        self.hasher.update(tag + len(data).to_bytes(8, "big") + data)

    def message(self, message: dict[str, Any]) -> None:
        self._feed(b"M", [message.get("role"), _unmarked(_blocks(message))])

    def blocks(self, role: str, blocks: list[Any]) -> list[str]:
        """The digest before each of ``blocks`` of a message of ``role`` coming next."""
        running = self.hasher.copy()
        running.update(b"R" + role.encode())
        digests = []
        for block in blocks:
            digests.append(running.hexdigest())
            data = _dumps(_unmarked(block))
            running.update(b"B" + len(data).to_bytes(8, "big") + data)
        return digests


@dataclass
class Checked:
    """What the thinking checks made of a request: its refusal, or what it dropped."""

    problem: str | None = None
    transformations: list[dict[str, str]] = field(default_factory=list)


class ThinkingContract:
    """Signs the thinking blocks the fake answers with and checks those sent back."""

    def __init__(self, *, enforce_prefix_check: bool = True) -> None:
        self.enforce_prefix_check = enforce_prefix_check
        """As for accounts created from 2026-08-31: a changed prefix is a 400 by default."""
        self._key = secrets.token_bytes(32)
        self._thought: dict[str, int] = {}
        """For each tool call answered with thinking: how many thinking blocks led its answer."""

    # ------------------------------------------------------------------ request checks

    def check(self, body: dict[str, Any], headers: dict[str, str]) -> Checked:
        """The API's 400 about the request's thinking, effort, sampling, tool choice and
        prefill on its model; else the blocks it drops (unreadable, or bound elsewhere)."""
        model = model_of(str(body.get("model")))
        betas = {b.strip() for b in headers.get("anthropic-beta", "").split(",")}
        problem = self._settings_problem(body, model, betas)
        if problem is None and _thinks(body, model):
            problem = self._missing_problem(body)
        if problem is not None:
            return Checked(problem)
        return self._signatures(body, model, betas)

    def _settings_problem(
        self, body: dict[str, Any], model: FakeModel, betas: set[str]
    ) -> str | None:
        thinking = body.get("thinking")
        effort = (body.get("output_config") or {}).get("effort")
        if effort is not None and effort not in _EFFORTS:
            return f"output_config.effort: Input should be {', '.join(map(repr, _EFFORTS))}"
        if effort is not None and effort not in model.efforts:
            return f"output_config.effort: effort {effort!r} is not supported for this model."
        for name in ("temperature", "top_p", "top_k"):
            if name in body and not model.sampling:
                return f"`{name}` is deprecated for this model."
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
            forced_off = model.strict or (
                isinstance(thinking, dict) and thinking.get("type") == "enabled"
            )
            if forced_off:
                return 'tool_choice: type "tool" and "any" are not supported for this model.'
        messages = body.get("messages") or []
        if model.thinks_by_default and messages and _prefilled(messages[-1]):
            return (
                "This model does not support assistant message prefill. The conversation must "
                "end with a user message."
            )
        if thinking is None:
            return None
        return _thinking_problem(thinking, model, effort, betas)

    def _missing_problem(self, body: dict[str, Any]) -> str | None:
        """A tool cycle continued without the thinking blocks its answer started with."""
        messages = body.get("messages") or []
        if len(messages) < 2 or messages[-1].get("role") != "user":
            return None
        if not any(b.get("type") == "tool_result" for b in _blocks(messages[-1])):
            return None
        index = len(messages) - 2
        answer = _blocks(messages[index])
        if messages[index].get("role") != "assistant" or not answer:
            return None
        produced = max(
            (self._thought.get(str(b.get("id")), 0) for b in answer if b.get("type") == "tool_use"),
            default=0,
        )
        leading = 0
        while leading < len(answer) and answer[leading].get("type") in _THINKING:
            leading += 1
        if produced and leading == 0:
            return (
                f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, "
                f"but found `{answer[0].get('type')}`. When `thinking` is enabled, a final "
                "`assistant` message must start with a thinking block (preceeding the lastmost "
                "set of `tool_use` and `tool_result` blocks). To avoid this requirement, disable "
                "`thinking`."
            )
        if produced and leading < produced:
            return (
                f"messages.{index}.content.{leading}: `thinking` or `redacted_thinking` blocks "
                "in the latest assistant message cannot be modified. These blocks must remain "
                "as they were in the original response."
            )
        return None

    def _signatures(self, body: dict[str, Any], model: FakeModel, betas: set[str]) -> Checked:
        """Each thinking block sent back: its signature checked, dropped when this model
        cannot read it, checked against its prefix on a model with preserved thinking."""
        checked = Checked()
        binding = (body.get("thinking") or {}).get("block_binding") or {}
        behaviour = binding.get("prefix_mismatch_behavior")
        enforced = behaviour is not None or self.enforce_prefix_check
        prefix = _Prefix(body)
        invalid_from: str | None = None  # once a block fails, every later one does too
        for i, message in enumerate(body.get("messages") or []):
            blocks = _blocks(message)
            digests = prefix.blocks(str(message.get("role")), blocks)
            for j, block in enumerate(blocks):
                if block.get("type") not in _THINKING:
                    continue
                where = f"messages.{i}.content.{j}"
                seal = self._open(block)
                if seal is None:
                    return Checked(f"{where}: Invalid `signature` in `thinking` block")
                if not model.thinks_by_default and "adaptive" not in model.thinking:
                    continue  # a model without adaptive thinking ignores earlier thinking
                if seal["m"] != model.id and seal["m"] not in model.reads:
                    checked.transformations.append(_dropped(where, "model_binding_mismatch"))
                    continue
                if not model.binds_prefix:
                    continue
                if invalid_from is None and seal["p"] != digests[j]:
                    invalid_from = where
                if invalid_from is None:
                    continue
                if not enforced:
                    checked.transformations.append(
                        {
                            "type": "thinking_mismatch_allowed",
                            "path": where,
                            "reason": "prefix_binding_mismatch",
                        }
                    )
                elif behaviour == "drop_block":
                    checked.transformations.append(_dropped(where, "prefix_binding_mismatch"))
                else:
                    return Checked(_bound_elsewhere(where, BINDING_BETA in betas))
            prefix.message(message)
        if BINDING_BETA not in betas:
            checked.transformations = []  # reported only under the beta header
        return checked

    # ------------------------------------------------------------------ answers

    def answer(
        self, body: dict[str, Any], content: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], int]:
        """The answer's blocks as the request's model writes them (thinking first, signed and
        bound; notes before a tool call moved into thinking where the model does that), and
        the characters of hidden reasoning (billed as output)."""
        model = model_of(str(body.get("model")))
        given = body.get("thinking")
        thinking: dict[str, Any] = given if isinstance(given, dict) else {}
        kind = thinking.get("type") or ("adaptive" if model.thinks_by_default else "disabled")
        if kind == "disabled" or any(b.get("type") in _THINKING for b in content):
            return content, 0
        display = thinking.get("display") or model.display
        between = kind == "between_tools"
        shown = display == "summarized" or between
        out: list[dict[str, Any]] = []
        if not between:
            out.append({"type": "thinking", "thinking": _REASONING if shown else ""})
        hidden = len(_REASONING) if not between else 0
        for index, block in enumerate(content):
            before_call = any(b.get("type") == "tool_use" for b in content[index + 1 :])
            if block.get("type") == "text" and before_call and self._moves(model, block):
                text = str(block.get("text", ""))
                out.append({"type": "thinking", "thinking": text if shown else ""})
                hidden += len(text)
                continue
            out.append(block)
        self._sign(body, model, out)
        for call in (b for b in out if b.get("type") == "tool_use"):
            self._thought[str(call.get("id"))] = _leading(out)
        return out, hidden

    @staticmethod
    def _moves(model: FakeModel, block: dict[str, Any]) -> bool:
        if model.updates_in_thinking == "all":
            return True
        text = str(block.get("text", ""))
        return model.updates_in_thinking == "long" and text.count(". ") >= 2

    def _sign(self, body: dict[str, Any], model: FakeModel, blocks: list[dict[str, Any]]) -> None:
        prefix = _Prefix(body)
        for message in body.get("messages") or []:
            prefix.message(message)
        # a block's signature seals its own text too, so it is signed before it is hashed on
        for j, block in enumerate(blocks):
            if block.get("type") != "thinking" or block.get("signature"):
                continue
            digest = prefix.blocks("assistant", blocks)[j]
            block["signature"] = self._seal({"m": model.id, "p": digest, "t": block["thinking"]})

    def _seal(self, claims: dict[str, str]) -> str:
        data = base64.urlsafe_b64encode(_dumps(claims)).decode()
        mac = hmac.new(self._key, data.encode(), hashlib.sha256).hexdigest()[:32]
        return f"{data}.{mac}"

    def _open(self, block: dict[str, Any]) -> dict[str, str] | None:
        """The claims of a block's signature, or ``None`` when it is not one of ours intact."""
        raw = block.get("signature") if block.get("type") == "thinking" else block.get("data")
        if not isinstance(raw, str) or "." not in raw:
            return None
        data, _, mac = raw.rpartition(".")
        expected = hmac.new(self._key, data.encode(), hashlib.sha256).hexdigest()[:32]
        if not hmac.compare_digest(mac, expected):
            return None
        try:
            claims: dict[str, str] = json.loads(base64.urlsafe_b64decode(data))
        except ValueError:
            return None
        text = block.get("thinking")
        if block.get("type") == "thinking" and text and text != claims.get("t"):
            return None  # an edited summary
        return claims

    def redacted(self, body: dict[str, Any]) -> dict[str, Any]:
        """A ``redacted_thinking`` block for the request's model (for scripted replies)."""
        model = model_of(str(body.get("model")))
        prefix = _Prefix(body)
        for message in body.get("messages") or []:
            prefix.message(message)
        digest = prefix.blocks("assistant", [{}])[0]
        return {"type": "redacted_thinking", "data": self._seal({"m": model.id, "p": digest})}


_THINKING = ("thinking", "redacted_thinking")
_REASONING = "The user asks something; I will answer it step by step."
"""The fake's reasoning: billed as output, shown only when summarized."""


def _prefilled(message: Any) -> bool:
    """Whether a last message is a prefill: the caller's words as the assistant's, not a paused
    answer sent back to continue (that one holds the model's thinking or server tool calls)."""
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return False
    kinds = {b.get("type") for b in _blocks(message) if isinstance(b, dict)}
    return not kinds & {"thinking", "redacted_thinking", "server_tool_use"}


def _thinks(body: dict[str, Any], model: FakeModel) -> bool:
    """Whether the request has thinking on (asked for, or the model's default)."""
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type"):
        return bool(thinking["type"] != "disabled")
    return model.thinks_by_default


def _leading(blocks: list[dict[str, Any]]) -> int:
    count = 0
    for block in blocks:
        if block.get("type") not in _THINKING:
            break
        count += 1
    return count


def _dropped(path: str, reason: str) -> dict[str, str]:
    return {"type": "thinking_dropped", "path": path, "reason": reason}


def _bound_elsewhere(where: str, beta: bool) -> str:
    message = (
        f"{where}: Invalid `signature` in `thinking` block. The block is bound to a different "
        "conversation. Remove the block, or set "
        '`thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
    )
    if not beta:
        message += (
            f" That setting requires the `{BINDING_BETA}` value in the `anthropic-beta` header."
        )
    return message


def _thinking_problem(
    thinking: Any, model: FakeModel, effort: str | None, betas: set[str]
) -> str | None:
    """The API's 400 about a ``thinking`` object on ``model``, or ``None``."""
    if not isinstance(thinking, dict) or thinking.get("type") not in _THINKING_TYPES:
        return "thinking: Input tag does not match any of the expected tags"
    kind = thinking["type"]
    if kind == "between_tools":
        extra = sorted(set(thinking) - {"type"})
        if "between_tools" not in model.thinking:
            return '"thinking.type.between_tools" is not supported for this model.'
        if extra:
            return f"thinking.between_tools.{extra[0]}: Extra inputs are not permitted"
        if effort in ("xhigh", "max"):
            return '"thinking.type.between_tools" is supported only at effort low, medium or high.'
        return None
    if "block_binding" in thinking and BINDING_BETA not in betas:
        return "thinking.block_binding: Extra inputs are not permitted"
    if thinking.get("display") not in (None, "omitted", "summarized"):
        return "thinking.display: Input should be 'omitted' or 'summarized'"
    if kind == "disabled" and "display" in thinking:
        return "thinking.disabled.display: Extra inputs are not permitted"
    if kind == "enabled" and not isinstance(thinking.get("budget_tokens"), int):
        return "thinking.enabled.budget_tokens: Field required"
    if kind not in model.thinking:
        if kind == "adaptive":
            return "adaptive thinking is not supported on this model"
        hint = (
            ' Use "thinking.type.between_tools" to turn off thinking before the first tool call.'
            if "between_tools" in model.thinking and kind == "disabled"
            else ""
        )
        return (
            f'"thinking.type.{kind}" is not supported for this model. Use '
            '"thinking.type.adaptive" and "output_config.effort" to control thinking '
            f"behavior.{hint}"
        )
    if kind == "disabled" and model.disabled_up_to_high and effort in ("xhigh", "max"):
        return '"thinking.type.disabled" is supported only at effort high or below.'
    return None
