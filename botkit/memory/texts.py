"""What users are told about the memory (``BotOptions.memory_texts``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MemoryTexts"]


@dataclass(frozen=True)
class MemoryTexts:
    """The texts of ``/memory`` and its button."""

    header: str = "This is what I remember of this conversation:"
    empty: str = "I don't remember anything of this conversation yet."
    clear_button: str = "Forget all of it"
    cleared: str = "Done: I have forgotten everything I remembered of this conversation."
    off: str = "I keep no long-term memory."
    more: str = "…and {count} more characters."
    """Ends a listing cut to fit one message."""
