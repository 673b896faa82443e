"""Rebuilding a context reads only the media of the messages it may still send (#27.5).

The media of every message before a ``/clear``, a compaction, or outside the ``max_messages``
window are deleted from the store before the rebuild: a rebuild that read them would log
``session.media_missing`` and put notes in their place. Run on JSONL files and PostgreSQL.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from botkit.agent import ContextManager
from botkit.agent.pool import ContextPool
from botkit.sessions import JsonlSessionStore, PostgresSessionStore, SessionStore
from botkit.types import DocumentBlock, DocumentSource, Message, TextBlock

USER = 42


@pytest.fixture(params=["jsonl", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where the sessions live: a folder of JSONL files, or a migrated PostgreSQL database."""
    if request.param == "jsonl":
        return tmp_path / "sessions"
    dsn: str = request.getfixturevalue("migrated_db")
    return dsn


@pytest.fixture
async def store(backend: Path | str) -> AsyncIterator[SessionStore]:
    """A session store on the backend."""
    opened: SessionStore
    if isinstance(backend, Path):
        opened = JsonlSessionStore(backend)
    else:
        opened = await PostgresSessionStore.connect(backend)
    yield opened
    await opened.close()


def pdf(n: int) -> bytes:
    return b"%PDF-1.4 " + f"document number {n} ".encode() * 50


def name_of(data: bytes) -> str:
    return f"{hashlib.sha256(data).hexdigest()}.pdf"


def with_pdf(n: int) -> Message:
    source = DocumentSource(data=base64.b64encode(pdf(n)).decode())
    document = DocumentBlock(source=source, title=f"{n}.pdf")
    return Message(role="user", content=[document, TextBlock(text=f"read {n}")])


async def exchange(context: ContextManager, n: int) -> None:
    await context.append(with_pdf(n), update_id=n)
    await context.append(Message(role="assistant", content=[TextBlock(text=f"read {n}: ok")]))


async def forget_media(store: SessionStore, names: list[str]) -> None:
    """Delete media from the store, as if a disk had lost them."""
    if isinstance(store, JsonlSessionStore):
        for name in names:
            (store.directory / "media" / name).unlink()
        return
    assert isinstance(store, PostgresSessionStore)
    async with store._connection() as conn:
        await conn.execute("DELETE FROM botkit_session_media WHERE name = ANY($1::text[])", names)


def documents(messages: list[Message]) -> list[bytes]:
    return [
        base64.b64decode(block.source.data or "")
        for message in messages
        for block in message.content
        if isinstance(block, DocumentBlock)
    ]


async def rebuilt(store: SessionStore, max_messages: int) -> tuple[ContextManager, list[str]]:
    """A cold rebuild of the user's context; the names of the media it found missing."""
    with capture_logs() as logs:
        context = await ContextPool(store, max_messages=max_messages).get(USER)
    missing = [e["media"] for e in logs if e["event"] == "session.media_missing"]
    return context, missing


async def test_media_before_a_clear_or_a_compaction_are_never_read(store: SessionStore) -> None:
    live = ContextManager(USER, on_append=store.append, max_messages=40)
    for n in range(5):
        await exchange(live, n)
    await live.reset("/clear")
    for n in range(5, 9):
        await exchange(live, n)
    await live.compact("they sent PDFs", kept=2)
    await exchange(live, 9)
    await forget_media(store, [name_of(pdf(n)) for n in range(8)])

    context, missing = await rebuilt(store, max_messages=40)

    assert missing == [], "no media of a message the context no longer holds was read"
    assert context.messages == live.messages
    assert documents(context.prepare()) == [pdf(8), pdf(9)]


async def test_only_the_media_of_the_window_sent_to_the_model_are_read(
    store: SessionStore,
) -> None:
    live = ContextManager(USER, on_append=store.append, max_messages=4)
    for n in range(8):
        await exchange(live, n)
    sent = documents(live.prepare())
    await forget_media(store, [name_of(pdf(n)) for n in range(8) if pdf(n) not in sent])

    context, missing = await rebuilt(store, max_messages=4)
    window = context.prepare()
    await exchange(context, 8)
    await exchange(context, 9)

    assert sent == [pdf(6), pdf(7)] and missing == []
    assert window == live.prepare(), "the same window, its media read back"
    assert documents(context.prepare()) == [pdf(8), pdf(9)], "the window only moves forward"


async def test_a_pdf_lost_from_the_window_still_leaves_its_note(store: SessionStore) -> None:
    live = ContextManager(USER, on_append=store.append, max_messages=40)
    await exchange(live, 1)
    await forget_media(store, [name_of(pdf(1))])

    context, missing = await rebuilt(store, max_messages=40)

    assert missing == [name_of(pdf(1))]
    first = context.messages[0].content
    assert next(b.text for b in first if isinstance(b, TextBlock)).endswith("no longer stored]")
