"""Tools the Messages API runs itself: web search and web fetch.

They are offered with every turn's tools when their settings are on; the model calls them
and the API answers within the same response (``server_tool_use`` and its result block),
which botkit keeps as received. Their fees are counted in usage (``Usage.web_search_requests``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from botkit.types import ToolDef

__all__ = ["WEB_FETCH_TYPE", "WEB_SEARCH_TYPE", "ServerTools"]

WEB_SEARCH_TYPE = "web_search_20250305"
WEB_FETCH_TYPE = "web_fetch_20250910"


@dataclass(frozen=True, slots=True)
class ServerTools:
    """Which server tools a bot offers: ``BOTKIT_WEB_SEARCH``, ``BOTKIT_WEB_FETCH``,
    ``BOTKIT_WEB_DOMAINS`` (the only domains they may reach; empty: any) and
    ``BOTKIT_WEB_MAX_USES`` (per model call)."""

    web_search: bool = False
    web_fetch: bool = False
    domains: Sequence[str] = ()
    max_uses: int = 5

    def definitions(self) -> list[ToolDef]:
        """The tools' definitions as the model is offered them."""
        options: dict[str, object] = {"max_uses": self.max_uses}
        if self.domains:
            options["allowed_domains"] = list(self.domains)
        found: list[ToolDef] = []
        if self.web_search:
            found.append(_server_tool(WEB_SEARCH_TYPE, "web_search", options))
        if self.web_fetch:
            fetch = {**options, "citations": {"enabled": True}}
            found.append(_server_tool(WEB_FETCH_TYPE, "web_fetch", fetch))
        return found


def _server_tool(kind: str, name: str, options: dict[str, object]) -> ToolDef:
    return ToolDef(
        name=name,
        description="",
        input_schema={},
        type=kind,
        options=dict(options),
    )
