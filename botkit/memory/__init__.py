"""Long-term memory: each conversation's own files, managed by the model with the memory tool.

A private chat's memory is its user's; a group's shared conversation has one of its own. The
tool offered in a turn is bound to that turn's conversation, so nothing the model asks reaches
another conversation's memory. Kept in PostgreSQL with BOTKIT_DATABASE_URL, else in files
beside the sessions (``<sessions_dir>/memory/<conversation>.json``). The plugin, ``/memory``
and ``enable_memory`` are in ``botkit.memory.plugin``.
"""

from botkit.memory.paths import ROOT, normalise
from botkit.memory.store import FileMemoryStore, MemoryStore, memory_key, memory_store_for
from botkit.memory.texts import MemoryTexts
from botkit.memory.tool import MEMORY_TOOL_TYPE, MemoryLimits, MemoryTool

__all__ = [
    "MEMORY_TOOL_TYPE",
    "ROOT",
    "FileMemoryStore",
    "MemoryLimits",
    "MemoryStore",
    "MemoryTexts",
    "MemoryTool",
    "memory_key",
    "memory_store_for",
    "normalise",
]
