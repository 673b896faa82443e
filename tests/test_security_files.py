"""What botkit writes is its owner's alone: files 0600, folders 0700, even under umask 022."""

from __future__ import annotations

import base64
import os
import sqlite3
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from botkit import Bot, Message
from botkit.runtime.inbox import Inbox
from botkit.sessions import JsonlSessionStore, SessionEntry
from botkit.stores import SqliteUserStore
from botkit.testing import FakeAnthropicServer, make_bot, running
from botkit.testing.telegram import TINY_PNG, FakeTelegramServer
from botkit.types import ImageBlock, ImageSource

TINY_PNG_B64 = base64.b64encode(TINY_PNG).decode()

ANN = 1101


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    """The common default umask, under which new files are readable by every local user."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path | str) -> str:
    """The permission bits of ``path``, as ``"0o600"``."""
    return oct(stat.S_IMODE(os.stat(path).st_mode))


def modes(*paths: Path | str) -> list[str]:
    return [mode(path) for path in paths]


def user_said(user_id: int, text: str) -> SessionEntry:
    return SessionEntry.of(user_id, Message.user_text(text))


async def test_session_files_and_their_folder_stay_private_across_a_restart(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "sessions"
    store = JsonlSessionStore(folder)
    await store.append(user_said(1, "my password is hunter2"))
    await store.close()

    assert mode(folder) == "0o700"
    assert mode(folder / "1.jsonl") == "0o600"

    restarted = JsonlSessionStore(folder)
    await restarted.append(user_said(1, "and my pin is 1234"))
    await restarted.append(user_said(2, "hello"))
    await restarted.close()

    assert mode(folder) == "0o700"
    assert modes(folder / "1.jsonl", folder / "2.jsonl") == ["0o600", "0o600"]
    assert len((await restarted.load(1)).messages) == 2


async def test_session_files_an_older_botkit_left_readable_are_made_private(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir(mode=0o755)
    old_file = folder / "1.jsonl"
    old_file.write_bytes(user_said(1, "from before").to_line())
    old_file.chmod(0o644)

    store = JsonlSessionStore(folder)
    await store.append(user_said(1, "now"))
    await store.close()

    assert mode(folder) == "0o700"
    assert mode(old_file) == "0o600"
    assert len((await store.load(1)).messages) == 2


async def test_the_user_store_and_its_wal_stay_private_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "users.db"
    files = [path, tmp_path / "users.db-wal", tmp_path / "users.db-shm"]

    store = await SqliteUserStore.connect(path)
    try:
        await store.upsert_user(1, "user", "Ann")
        await store.create_invite("admin")
        assert modes(*files) == ["0o600"] * 3
    finally:
        await store.close()

    restarted = await SqliteUserStore.connect(path)
    try:
        await restarted.upsert_user(2, "user", "Bo")
        assert modes(*files) == ["0o600"] * 3
        assert len(await restarted.list_users()) == 2
    finally:
        await restarted.close()
    assert mode(path) == "0o600"


async def test_a_user_store_an_older_botkit_left_readable_is_made_private(
    tmp_path: Path,
) -> None:
    path = tmp_path / "users.db"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE kept (n INTEGER)")
    db.close()
    path.chmod(0o644)

    store = await SqliteUserStore.connect(path)
    try:
        await store.upsert_user(1, "user")
        assert modes(path, f"{path}-wal", f"{path}-shm") == ["0o600"] * 3
    finally:
        await store.close()


@pytest.fixture
async def bot(claude: FakeAnthropicServer, tmp_path: Path) -> AsyncIterator[Bot]:
    made = make_bot(claude, tmp_path, allowed_users=frozenset({ANN}))
    yield made
    await made.aclose()


async def test_a_bot_keeps_its_sessions_folder_and_everything_in_it_private(
    bot: Bot, tmp_path: Path
) -> None:
    users = await bot.access.user_store()  # opened first, as when serving: it makes the folder
    await users.upsert_user(ANN, "user", "Ann")
    [event async for event in bot.turns.stream(ANN, "my address is 1 Main St")]

    folder = tmp_path / "sessions"
    written = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
    assert mode(folder) == "0o700"
    assert f"{ANN}.jsonl" in written
    assert "botkit.db" in written
    assert {name: oct(m) for name, m in written.items() if m & 0o077} == {}


def test_the_inbox_journal_stays_private_across_restarts_and_compaction(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    path = folder / "inbox.jsonl"
    inbox = Inbox(path)
    inbox.accept(1, {"message": {"text": "my card number is 4242"}})
    inbox.close()
    assert modes(folder, path) == ["0o700", "0o600"]

    path.chmod(0o644)  # as an older botkit rewrote it on every start
    restarted = Inbox(path)  # which compacts: the journal is written anew
    restarted.accept(2, {"message": {"text": "and the pin"}})
    restarted.compact()
    restarted.close()
    assert mode(path) == "0o600"
    assert not (folder / "inbox.tmp").exists()
    assert [item.update_id for item in Inbox(path).pending()] == [1, 2]


async def test_a_media_folder_left_readable_is_made_private_by_the_next_picture(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "sessions"
    (folder / "media").mkdir(parents=True, mode=0o755)
    folder.chmod(0o755)
    photo = ImageBlock(source=ImageSource(media_type="image/png", data=TINY_PNG_B64))
    store = JsonlSessionStore(folder)
    await store.append(SessionEntry.of(ANN, Message(role="user", content=[photo])))
    await store.close()

    [stored] = (folder / "media").iterdir()
    assert modes(folder, folder / "media", stored) == ["0o700", "0o700", "0o600"]


USER_ID = 5151


def test_decoding_draws_on_one_budget_for_the_process() -> None:
    """#51: pictures just under the pixel limit decode one budget's worth at a time; one that
    never fits, or waits too long, is refused instead of taking the memory."""
    import io
    from concurrent.futures import ThreadPoolExecutor

    from PIL import Image

    from botkit.images import DecodeBudget, ImageDecodeBusy, decoded_bytes, scale_image

    buffer = io.BytesIO()
    Image.new("RGBA", (2000, 2000), (10, 20, 30, 255)).save(buffer, "PNG")
    picture = buffer.getvalue()
    need = decoded_bytes((2000, 2000), "RGBA")
    budget = DecodeBudget(need * 1.5 / (1024 * 1024))  # room for one at a time
    with ThreadPoolExecutor(4) as pool:
        scaled = list(pool.map(lambda _: scale_image(picture, budget=budget), range(4)))
    assert all(s is not None for s in scaled)
    assert need <= budget.peak <= budget.total, "never two at once"
    with pytest.raises(ImageDecodeBusy):
        scale_image(picture, budget=DecodeBudget(need / 2 / (1024 * 1024)))


async def test_a_picture_with_no_room_to_decode_gets_a_clear_reply(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGBA", (3000, 3000), (1, 2, 3, 255)).save(buffer, "PNG")
    from botkit.images import DECODE_BUDGET

    bot = make_bot(claude, tmp_path, allowed_users=frozenset({USER_ID}), image_memory_mb=1)
    try:
        async with running(bot, telegram):
            telegram.send_document(
                USER_ID, buffer.getvalue(), file_name="big.png", mime_type="image/png"
            )
            [reply] = await telegram.wait_for_messages(USER_ID)
    finally:
        DECODE_BUDGET.resize(400)  # the process's budget back to its default for other tests
    assert reply.text.startswith("Sorry, big.png would take")
    assert not claude.requests
