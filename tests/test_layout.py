"""How the code is laid out: no import circles, the agent never sees a messenger, a pinned API."""

from __future__ import annotations

import ast
from pathlib import Path

import botkit

PACKAGE = Path(botkit.__file__).resolve().parent

PUBLIC_API = {
    "LLM",
    "AgentEnd",
    "AgentLoop",
    "AgentTool",
    "AnthropicLLM",
    "ApprovalDecided",
    "ApprovalRequested",
    "ApprovalTexts",
    "Authorize",
    "Bot",
    "BotOptions",
    "BotkitError",
    "BuildExtra",
    "BuildPrompt",
    "BuildTools",
    "Command",
    "ConfigError",
    "ContextInjector",
    "ContextManager",
    "ErrorEvent",
    "Event",
    "HandleStart",
    "Hooks",
    "ImageBlock",
    "Incoming",
    "Invite",
    "JsonlSessionStore",
    "LLMAuthError",
    "LLMError",
    "LLMOverloadedError",
    "LLMRequest",
    "LLMResponse",
    "LoopTexts",
    "Message",
    "Messenger",
    "MessengerError",
    "Plugin",
    "Persona",
    "Plan",
    "PromptPlugin",
    "PromptTooLongError",
    "SessionEntry",
    "SessionError",
    "SessionStore",
    "Settings",
    "Skill",
    "SkillLibrary",
    "StoreError",
    "TextBlock",
    "TextDelta",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDef",
    "ToolError",
    "ToolFile",
    "ToolImage",
    "ToolPlugin",
    "ToolRegistry",
    "ToolResult",
    "ToolResultBlock",
    "ToolSet",
    "ToolStart",
    "ToolUseBlock",
    "TurnResult",
    "Usage",
    "UsageEvent",
    "UserRecord",
    "UserStore",
    "load_skills",
    "read_session_file",
    "tool",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every botkit module ``path`` imports, at any depth: in functions, under TYPE_CHECKING."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name in known}


def import_graph() -> dict[str, set[str]]:
    found = modules()
    names = set(found)
    return {name: imports_of(path, names) - {name} for name, path in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles_anywhere_in_botkit() -> None:
    graph = import_graph()
    graph.pop("botkit", None)  # the package root re-exports everything and nothing imports it
    assert cycles(graph) == []


def test_the_agent_layer_never_imports_a_messenger_or_the_bot() -> None:
    graph = import_graph()
    lower = [name for name in graph if name.startswith(("botkit.agent", "botkit.llm"))]
    for name in lower:
        upward = {
            target
            for target in graph[name]
            if target.startswith(("botkit.messengers", "botkit.runtime", "botkit.bot"))
            or target in ("botkit.turns", "botkit.access", "botkit.chats")
        }
        assert upward == set(), f"{name} imports {upward}"


def test_aiogram_stays_in_messengers_runtime_and_testing() -> None:
    allowed = ("botkit.messengers", "botkit.runtime", "botkit.testing", "botkit.doctor")
    for name, path in modules().items():
        if name.startswith(allowed):
            continue
        tree = ast.parse(path.read_text())
        roots = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        } | {
            node.module.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
        }
        assert "aiogram" not in roots, f"{name} imports aiogram"


def test_the_public_api_is_pinned() -> None:
    assert set(botkit.__all__) == PUBLIC_API


BOT_LINES = 250
BOT_MEMBERS = {
    # the card's steps of the turn cycle
    "handle_start",
    "authorize",
    "build_extra",
    "build_tools",
    "build_prompt",
    "context_for",
    # the features' steps, documented for overriding (files, approvals, relay, start-up)
    "transcribe",
    "approvers",
    "display_name",
    "can_relay",
    "on_start",
    # the registration decorators
    "tool",
    "command",
    # construction and its end
    "llm",
    "aclose",
}
"""``Bot``'s public methods and properties: anything else lives in the package it is about."""


def test_bot_keeps_to_its_steps() -> None:
    lines = len((PACKAGE / "bot.py").read_text().splitlines())
    assert lines <= BOT_LINES, f"botkit/bot.py has {lines} lines (at most {BOT_LINES})"
    public = {name for name in vars(botkit.Bot) if not name.startswith("_")}
    assert public == BOT_MEMBERS, (
        f"Bot's public members changed: {sorted(public - BOT_MEMBERS)} added, "
        f"{sorted(BOT_MEMBERS - public)} gone"
    )
