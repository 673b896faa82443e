"""Files and pictures a tool hands back: botkit sends them to the chat, the model is told so."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ToolFile", "ToolImage"]


@dataclass(frozen=True)
class ToolFile:
    """A file a tool returns: sent to the chat as a document; the model sees a note that it was."""

    data: bytes
    """The file's bytes."""
    filename: str
    """The name the user sees, e.g. ``report.csv``."""
    mime: str = "application/octet-stream"
    """Its MIME type."""
    caption: str = ""
    """Shown under it in the chat (Telegram keeps the first 1,024 characters)."""

    @property
    def as_photo(self) -> bool:
        """Whether the chat shows it as a picture rather than as a file."""
        return False


@dataclass(frozen=True)
class ToolImage(ToolFile):
    """A picture a tool returns (PNG, JPEG, GIF, WebP): shown in the chat as a photo."""

    mime: str = "image/png"
    show_model: bool = True
    """Also put the picture in the tool result, so the model can look at what it sent."""

    @property
    def as_photo(self) -> bool:
        """Pictures are shown as photos."""
        return True
