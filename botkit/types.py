"""Messages, content blocks, tool definitions and usage, in the Anthropic Messages shape."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from functools import cached_property
from typing import Annotated, Any, Literal, Self, cast

import orjson
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

__all__ = [
    "ContentBlock",
    "DocumentBlock",
    "DocumentSource",
    "ImageBlock",
    "ImageSource",
    "Message",
    "RedactedThinkingBlock",
    "Role",
    "ServerBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolDef",
    "ToolResultBlock",
    "ToolUseBlock",
    "Usage",
]

Role = Literal["user", "assistant"]


class _Block(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class TextBlock(_Block):
    """Plain text written by the user or the model (with the sources it cites, if any)."""

    type: Literal["text"] = "text"
    text: str
    citations: list[dict[str, Any]] | None = None
    """Where the model's words come from (web search results, documents), as the API sent
    them; sent back unchanged."""


class ThinkingBlock(_Block):
    """The model's reasoning before it answers or calls a tool: its text (empty unless the
    call asked for a summary) and the signature the API checks when the block is sent back."""

    type: Literal["thinking"] = "thinking"
    thinking: str = ""
    signature: str = ""
    model: str | None = None
    """The model that wrote it (botkit's record; never sent)."""
    prefix_sha256: str | None = None
    """A hash of everything the request that produced it held before it (botkit's record,
    never sent): the API refuses the block once that prefix changed."""

    def to_api(self) -> dict[str, Any]:
        """The block exactly as the API returned it."""
        return {"type": "thinking", "thinking": self.thinking, "signature": self.signature}


class RedactedThinkingBlock(_Block):
    """Reasoning the API returned encrypted: kept and sent back as it came."""

    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str
    model: str | None = None
    """The model that wrote it (botkit's record; never sent)."""
    prefix_sha256: str | None = None
    """As :attr:`ThinkingBlock.prefix_sha256`."""

    def to_api(self) -> dict[str, Any]:
        """The block exactly as the API returned it."""
        return {"type": "redacted_thinking", "data": self.data}


class ServerBlock(BaseModel):
    """A block botkit does not read but must keep, such as a server tool's call and its
    result (``server_tool_use``, ``web_search_tool_result``): every field kept as sent."""

    model_config = ConfigDict(frozen=True, extra="allow")

    type: str

    def to_api(self) -> dict[str, Any]:
        """The block as the API returned it."""
        return self.model_dump()


class ImageSource(_Block):
    """Where an image comes from: inline base64 data, a URL, or (in a session) stored media."""

    type: Literal["base64", "url", "stored"] = "base64"
    media_type: str | None = None
    data: str | None = None
    url: str | None = None
    sha256: str | None = None
    """With ``type="stored"``: the content hash naming the bytes in the session's media store."""


class ImageBlock(_Block):
    """An image the user sent."""

    type: Literal["image"] = "image"
    source: ImageSource


class DocumentSource(_Block):
    """A document's content: a base64 PDF, plain text, or (in a session) stored media."""

    type: Literal["base64", "text", "stored"] = "base64"
    media_type: str = "application/pdf"
    data: str | None = None
    sha256: str | None = None
    """With ``type="stored"``: the content hash naming the bytes in the session's media store."""


class DocumentBlock(_Block):
    """A file the user sent: a PDF, or a text file (``title`` is its file name)."""

    type: Literal["document"] = "document"
    source: DocumentSource
    title: str | None = None


class ToolUseBlock(_Block):
    """The model asks for a tool call."""

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(_Block):
    """The answer to one tool call; ``is_error`` marks a failure the model should see."""

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str
    is_error: bool = False
    images: tuple[ImageBlock, ...] | None = None
    """Pictures the tool made, shown to the model after ``content`` (e.g. a chart it sent)."""

    def to_api(self) -> dict[str, Any]:
        """The block as the Messages API expects it: pictures go inside ``content``."""
        data = self.model_dump(exclude_none=True, exclude={"images"})
        if self.images:
            text = [{"type": "text", "text": self.content}] if self.content else []
            data["content"] = text + [i.model_dump(exclude_none=True) for i in self.images]
        return data


_KNOWN_BLOCKS = frozenset(
    {"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking"}
)


def _block_tag(value: Any) -> str:
    """A block's kind for validation: its ``type``, or ``server`` for any other type."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in _KNOWN_BLOCKS else "server"


ContentBlock = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ImageBlock, Tag("image")]
    | Annotated[DocumentBlock, Tag("document")]
    | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[ToolResultBlock, Tag("tool_result")]
    | Annotated[ThinkingBlock, Tag("thinking")]
    | Annotated[RedactedThinkingBlock, Tag("redacted_thinking")]
    | Annotated[ServerBlock, Tag("server")],
    Discriminator(_block_tag),
]
THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
"""The block types that hold the model's reasoning."""


class Usage(BaseModel):
    """Tokens billed for one LLM call (or a sum of calls)."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_write_1h_tokens: int = 0
    """Of ``cache_creation_input_tokens``, those written to the one-hour cache (billed 2x the
    input price instead of 1.25x)."""
    web_search_requests: int = 0
    """Web searches the API ran for the call (billed per search, besides tokens)."""
    web_fetch_requests: int = 0
    """Pages the API fetched for the call (billed as tokens only)."""
    audio_seconds: int = 0
    """Seconds of audio transcribed (BOTKIT_TRANSCRIBE_URL; billed per minute)."""
    spoken_chars: int = 0
    """Characters spoken (BOTKIT_SPEECH_URL; billed per character)."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens
            + other.cache_creation_input_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_write_1h_tokens=self.cache_write_1h_tokens + other.cache_write_1h_tokens,
            web_search_requests=self.web_search_requests + other.web_search_requests,
            web_fetch_requests=self.web_fetch_requests + other.web_fetch_requests,
            audio_seconds=self.audio_seconds + other.audio_seconds,
            spoken_chars=self.spoken_chars + other.spoken_chars,
        )


class Message(BaseModel):
    """One message of a conversation: a role and its content blocks."""

    model_config = ConfigDict(frozen=True)

    role: Role
    content: list[ContentBlock]
    usage: Usage | None = None
    """Set on assistant messages: what the call that produced it cost."""
    model: str | None = None
    """Set on assistant messages: the model that wrote it (never sent)."""

    @classmethod
    def user_text(cls, text: str) -> Message:
        """A user message holding one text block."""
        return cls(role="user", content=[TextBlock(text=text)])

    @property
    def text(self) -> str:
        """All text blocks joined, without tool calls."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        """The tool calls this message asks for."""
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    @property
    def thinking(self) -> list[ThinkingBlock | RedactedThinkingBlock]:
        """The reasoning blocks of this message, in order."""
        return [b for b in self.content if isinstance(b, ThinkingBlock | RedactedThinkingBlock)]

    @cached_property
    def has_media(self) -> bool:
        """Whether it holds a picture or a document (in a tool result too)."""
        media = ImageBlock | DocumentBlock
        return any(
            isinstance(b, media) or (isinstance(b, ToolResultBlock) and b.images)
            for b in self.content
        )

    def without_thinking(self) -> Message:
        """This message without its thinking blocks (itself when it has none); made once, so
        a history sent again and again keeps the same messages (and what they dumped)."""
        kept = self.__dict__.get("_thoughtless")
        if kept is None:
            thinking = ThinkingBlock | RedactedThinkingBlock
            content: list[ContentBlock] = [b for b in self.content if not isinstance(b, thinking)]
            kept = len(content) < len(self.content) and Message(
                role=self.role, content=content, usage=self.usage, model=self.model
            )
            self.__dict__["_thoughtless"] = kept  # False: none (never itself: == compares it)
        return cast(Message, kept or self)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with ``update`` applied; what this message made of itself once (its dump
        for the API, its copy without thinking) is not carried over (its content may be
        another)."""
        copied = super().model_copy(update=update, deep=deep)
        for kept in _KEPT_ONCE:  # pydantic copies cached_property values
            copied.__dict__.pop(kept, None)
        return copied

    def to_api(self) -> dict[str, Any]:
        """The message as the Messages API expects it (no usage, no model); a new dict and
        content list each time (a request may mark a block), the blocks' dicts shared."""
        return {"role": self.role, "content": list(self._api_blocks)}

    @cached_property
    def digest(self) -> bytes:
        """A SHA-256 of what the API is sent of this message (its role and content, keys
        sorted, no cache marks); made once."""
        sent = [self.role, list(self._api_blocks)]
        return hashlib.sha256(orjson.dumps(sent, option=orjson.OPT_SORT_KEYS)).digest()

    @cached_property
    def _api_blocks(self) -> tuple[dict[str, Any], ...]:
        """Dumped once: a conversation's history goes out again with every call (frozen; the
        dicts hold the fields' own strings, so keeping them costs little memory)."""
        return tuple(_block_to_api(b) for b in self.content)


_KEPT_ONCE = ("_api_blocks", "_thoughtless", "has_media", "digest")
"""What a message makes of itself once and keeps (a copy makes its own)."""


def _block_to_api(block: Any) -> dict[str, Any]:
    if isinstance(block, ToolResultBlock | ThinkingBlock | RedactedThinkingBlock | ServerBlock):
        return block.to_api()
    data: dict[str, Any] = block.model_dump(exclude_none=True)
    return data


class ToolDef(BaseModel):
    """A tool as the model sees it: name, description and JSON schema of its input."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    input_schema: dict[str, Any]
    type: str | None = Field(None, exclude=True)
    """A tool the API defines (e.g. ``memory_20250818``): sent as its type and name (and
    ``options``) only."""
    options: dict[str, Any] | None = Field(None, exclude=True)
    """With ``type``: its settings (``max_uses``, ``allowed_domains``…)."""

    def to_api(self) -> dict[str, Any]:
        """The tool as the Messages API takes it (a copy: a request may mark it)."""
        return dict(self._api)

    @cached_property
    def _api(self) -> dict[str, Any]:
        """Dumped once: a bot offers the same few definitions every call (frozen)."""
        if self.type is not None:
            return {"type": self.type, "name": self.name, **(self.options or {})}
        return self.model_dump()

    @cached_property
    def schema_text(self) -> str:
        """The description and the input schema as one text (what the prefix watch compares)."""
        return self.description + orjson.dumps(self.input_schema).decode()
