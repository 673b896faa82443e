"""What users send costs nothing before the gates, and nothing the API would refuse (#27).

Real aiogram against the fake Bot API (getFile is logged), the real Anthropic SDK against the
fake Messages API, which enforces the documented media limits.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import random
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic import AsyncAnthropic
from PIL import Image

from botkit.images import MAX_IMAGE_BYTES, MAX_IMAGE_SIDE, scale_image
from botkit.pdfpages import PageCount, count_pages
from botkit.sessions import JsonlSessionStore, PostgresSessionStore, SessionEntry
from botkit.stores.migrate import migrate
from botkit.testing.anthropic import FakeAnthropicServer, FakeError, FakeRequest
from botkit.testing.harness import running
from botkit.testing.kit import ask, make_bot
from botkit.testing.telegram import FakeTelegramServer
from botkit.types import ImageBlock, ImageSource, Message, TextBlock

USER = 2701
ALLOWED = frozenset({USER})
MB = 1024 * 1024
linux_only = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM")


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 120, 200)).save(out, format="PNG")
    return out.getvalue()


async def test_an_over_budget_users_files_are_never_fetched(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED, daily_token_budget=10)
    async with running(bot, telegram):
        await ask(telegram, USER, "spend the budget")
        telegram.send_document(USER, png(64, 64), file_name="a.png", mime_type="image/png")
        telegram.send_photo(USER, caption="and this")
        replies = await telegram.wait_for_messages(USER, 3)
    assert [r.text for r in replies[1:]] == [bot.options.budget_text] * 2
    assert telegram.requests_for("getFile") == [], "the budget gate comes before any download"
    assert len(claude.requests) == 1


async def test_a_command_sent_with_a_file_is_answered_without_fetching_it(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        telegram.send_document(
            USER, png(64, 64), file_name="a.png", mime_type="image/png", caption="/help"
        )
        [reply] = await telegram.wait_for_messages(USER)
    assert "/help" in reply.text
    assert telegram.requests_for("getFile") == []
    assert claude.requests == []


def blank_png(width: int, height: int) -> bytes:
    """A black RGB PNG of any size, made without holding its pixels (a decompression bomb)."""
    row = b"\0" * (1 + 3 * width)
    packer = zlib.compressobj(9)
    idat = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body).to_bytes(4, "big")
        return len(body).to_bytes(4, "big") + kind + body + crc

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunks = chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + chunks


def peak_growth_mb(code: str, path: Path) -> tuple[str, float]:
    """Run ``code`` (with ``data``, the bytes at ``path``, and ``images``, botkit.images) in a
    fresh interpreter: what it set ``result`` to, and how far it raised the process's peak
    memory, in MB. Pillow allocates outside tracemalloc's view, so it is the peak RSS
    (VmHWM: unlike ru_maxrss, it does not start at the parent's peak after fork and exec)."""
    program = (
        "import importlib.util, io, sys\n"
        "from PIL import Image, JpegImagePlugin, PngImagePlugin\n"
        "spec = importlib.util.spec_from_file_location('images', sys.argv[2])\n"
        "images = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(images)\n"
        "def peak():\n"
        "    status = open('/proc/self/status').read()\n"
        "    return int(status.split('VmHWM:')[1].split()[0]) / 1024\n"
        "data = open(sys.argv[1], 'rb').read()\n"
        "before = peak()\n"
        f"{code}\n"
        "print(result, peak() - before)\n"
    )
    module = Path(__file__).parents[1] / "botkit" / "images.py"
    done = subprocess.run(
        [sys.executable, "-c", program, str(path), str(module)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    result, growth = done.stdout.splitlines()[-1].split()  # after any log lines
    return result, float(growth)


@linux_only
def test_a_decompression_bomb_is_refused_from_its_header_without_decoding(
    tmp_path: Path,
) -> None:
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(blank_png(9400, 9400))
    assert bomb.stat().st_size < 400 * 1024  # 88 million pixels in a few hundred KiB
    result, growth = peak_growth_mb("result = images.scale_image(data) is None", bomb)
    assert result == "True"
    assert growth < 30, f"decoding would take 253 MB; the peak grew {growth:.0f} MB"


@linux_only
def test_a_large_jpeg_is_decoded_reduced(tmp_path: Path) -> None:
    photo = tmp_path / "photo.jpg"
    make = (
        "from PIL import Image; import sys; "
        "Image.new('RGB', (7000, 5000), (90, 140, 30)).save(sys.argv[1], quality=90)"
    )
    subprocess.run([sys.executable, "-c", make, str(photo)], check=True)
    scaled = "result = Image.open(io.BytesIO(images.scale_image(data))).width"
    result, growth = peak_growth_mb(scaled, photo)
    assert result == "1568"
    assert growth < 80, f"a full decode takes 190 MB; the peak grew {growth:.0f} MB"


async def test_a_picture_over_the_pixel_limit_gets_a_reply_naming_it_and_no_llm_call(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED, max_image_pixels=1_000_000)
    async with running(bot, telegram):
        telegram.send_document(USER, png(1200, 1000), file_name="big.png", mime_type="image/png")
        [reply] = await telegram.wait_for_messages(USER)
    assert reply.text == (
        "Sorry, big.png is 1,200 by 1,000 pixels: I can take pictures of up to 1 million pixels."
    )
    assert claude.requests == []


def noise_png(side: int = 1568) -> bytes:
    """A picture of random pixels: PNG cannot compress it (1568 px: 7.4 MB)."""
    out = io.BytesIO()
    Image.frombytes("RGB", (side, side), random.randbytes(side * side * 3)).save(out, "PNG")
    return out.getvalue()


def test_a_picture_over_5_mb_is_reencoded_until_it_fits_the_api() -> None:
    noise = noise_png()
    assert len(noise) > 7 * MB
    scaled = scale_image(noise)
    assert scaled is not None and len(scaled) <= MAX_IMAGE_BYTES
    assert Image.open(io.BytesIO(scaled)).size[0] <= MAX_IMAGE_SIDE


def many_pages_pdf(pages: int) -> bytes:
    """A valid PDF of ``pages`` blank pages, each its own object as in a real one, written
    directly (pypdf's writer takes half a minute for 100,000 pages; this, half a second)."""
    bodies = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = b" ".join(b"%d 0 R" % (n + 3) for n in range(pages))
    bodies.append(b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages))
    bodies += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 10 10] >>"] * pages
    parts = [b"%PDF-1.4\n"]
    size = len(parts[0])
    offsets = []
    for number, body in enumerate(bodies, start=1):
        offsets.append(size)
        parts.append(b"%d 0 obj\n%s\nendobj\n" % (number, body))
        size += len(parts[-1])
    parts.append(b"xref\n0 %d\n0000000000 65535 f \n" % (len(bodies) + 1))
    parts += [b"%010d 00000 n \n" % offset for offset in offsets]
    parts.append(b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(bodies) + 1))
    parts.append(b"startxref\n%d\n%%%%EOF\n" % size)
    return b"".join(parts)


@contextlib.asynccontextmanager
async def loop_lag() -> AsyncIterator[list[float]]:
    """The event loop's delays in waking a 5 ms timer while the block runs, in seconds."""
    delays: list[float] = []

    async def tick() -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(0.005)
            delays.append(time.monotonic() - started - 0.005)

    ticker = asyncio.create_task(tick())
    try:
        yield delays
    finally:
        ticker.cancel()


async def test_a_pdf_of_100000_pages_is_refused_without_stalling_other_turns(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    pdf = many_pages_pdf(100_000)
    assert len(pdf) > 9 * MB
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED, max_file_mb=20)
    async with running(bot, telegram):
        await ask(telegram, USER, "warm up")
        async with loop_lag() as delays:
            telegram.send_document(USER, pdf, file_name="long.pdf", mime_type="application/pdf")
            replies = await telegram.wait_for_messages(USER, 2, timeout=60)
    assert replies[1].text == (
        "Sorry, long.pdf has 100000 pages: I can read PDFs of up to 100 pages."
    )
    # Counting in a thread of this process stalled the loop 2.4 s; now the worst stall in the
    # whole turn (10 MB downloaded, a child started) is 30-45 ms on a loaded 2-core machine.
    assert max(delays) < 0.1, f"the event loop stalled {max(delays) * 1000:.0f} ms"
    assert len(claude.requests) == 1


async def test_a_pdf_that_takes_too_long_to_count_is_given_up_at_its_time_limit() -> None:
    liar = many_pages_pdf(100_000).replace(b"/Count 100000", b"/Count 1")  # pypdf: 10 s of CPU
    started = time.monotonic()
    counted = await count_pages(liar, 100, seconds=1.0)
    assert counted == PageCount(None, timed_out=True)
    assert time.monotonic() - started < 5
    assert await count_pages(many_pages_pdf(3), 100, seconds=30) == PageCount(3)


GROUP = -2727


def group_text(telegram: FakeTelegramServer, text: str) -> None:
    telegram.send_text(USER, f"@botkit_test_bot {text}", chat_id=GROUP, chat_type="group")


def image_blocks(request: FakeRequest) -> list[dict[str, Any]]:
    return [
        block
        for message in request.messages
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "image"
    ]


async def test_a_7_mb_noise_png_reaches_the_api_under_5_mb_and_the_group_goes_on(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        telegram.send_document(
            USER,
            noise_png(),
            file_name="noise.png",
            mime_type="image/png",
            caption="@botkit_test_bot what is this?",
            chat_id=GROUP,
        )
        await telegram.wait_for_messages(GROUP, timeout=60)
        group_text(telegram, "and now?")
        replies = await telegram.wait_for_messages(GROUP, 2, timeout=60)
    assert [r.text.split(":")[0] for r in replies] == ["echo", "echo"], "both were answered"
    [image] = image_blocks(claude.requests[-1])
    assert len(base64.b64decode(image["source"]["data"])) <= 5 * MB


async def test_pdfs_over_100_pages_in_one_request_leave_the_oldest_out_with_a_note(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        for n in (1, 2):
            telegram.send_document(
                USER, many_pages_pdf(60), file_name=f"part{n}.pdf", mime_type="application/pdf"
            )
            await telegram.wait_for_messages(USER, n)
        replies = telegram.sent_messages(USER)
    assert [r.text.split(":")[0] for r in replies] == ["echo", "echo"]
    first, second = claude.requests[-1].messages[0]["content"], claude.requests[-1].messages[2]
    assert first[0] == {
        "type": "text",
        "text": "[The document part1.pdf sent earlier is left out of this request: too large to "
        "send again.]",
    }
    assert second["content"][0]["type"] == "document"
    session = (tmp_path / "sessions" / f"{USER}.jsonl").read_text()
    assert session.count('"type":"document"') == 2, "the session keeps both"


async def test_media_the_api_refuses_fail_that_message_politely_and_are_not_kept(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    too_large = "Request exceeds the maximum allowed number of bytes."
    claude.enqueue(FakeError(413, "request_too_large", too_large))
    async with running(bot, telegram):
        telegram.send_photo(USER, data=png(40, 40), caption="look")
        [refused] = await telegram.wait_for_messages(USER)
        answered = await ask(telegram, USER, "hello again")
    assert refused.text == bot.options.media_refused_text
    assert answered.text.startswith("echo")
    assert image_blocks(claude.requests[-1]) == [], "the refused picture left the context"
    assert not (tmp_path / "sessions" / "media").exists(), "nor is it stored"
    session = (tmp_path / "sessions" / f"{USER}.jsonl").read_text()
    assert "look" not in session and "hello again" in session


async def test_the_fake_api_enforces_the_documented_media_limits(
    claude: FakeAnthropicServer,
) -> None:
    client = AsyncAnthropic(api_key="k", base_url=claude.base_url, max_retries=0)

    def image(data: bytes) -> dict[str, Any]:
        encoded = base64.b64encode(data).decode()
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": encoded},
        }

    def pdf(pages: int) -> dict[str, Any]:
        encoded = base64.b64encode(many_pages_pdf(pages)).decode()
        source = {"type": "base64", "media_type": "application/pdf", "data": encoded}
        return {"type": "document", "source": source}

    async def send(*blocks: dict[str, Any]) -> Any:
        content = [*blocks, {"type": "text", "text": "hi"}]
        return await client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": content}]
        )

    try:
        answer = await send(image(png(1500, 1000)))
        hi = len('{"type":"text","text":"hi"}') // 4
        assert answer.usage.input_tokens == 1500 * 1000 // 750 + hi  # not its base64
        with pytest.raises(anthropic.BadRequestError, match="image exceeds 5 MB maximum"):
            await send(image(noise_png()))
        with pytest.raises(anthropic.BadRequestError, match="dimensions exceed"):
            await send(image(png(8001, 10)))
        with pytest.raises(anthropic.BadRequestError, match="100 PDF pages"):
            await send(pdf(60), pdf(41))
        big = noise_png(2048)  # 12 MB; three: over 32 MB
        with pytest.raises(anthropic.APIStatusError, match="maximum allowed number of bytes") as e:
            await send(image(big), image(big), image(big))
        assert e.value.status_code == 413
    finally:
        await client.close()


async def test_over_the_media_quota_a_file_is_refused_before_download(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    picture = noise_png(100)  # 30 KB that PNG cannot compress
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED, max_media_mb=0.05)  # 52 KB
    async with running(bot, telegram):
        telegram.send_document(USER, picture, file_name="one.png", mime_type="image/png")
        await telegram.wait_for_messages(USER)
        telegram.send_document(USER, noise_png(100), file_name="two.png", mime_type="image/png")
        replies = await telegram.wait_for_messages(USER, 2)
    assert replies[0].text.startswith("echo")
    assert replies[1].text == (
        "Sorry, I can't take more files from you: those you've sent me take 0.0 MB, and I keep "
        "at most 0.0 MB per person."
    )
    assert len(telegram.requests_for("getFile")) == 1, "the second was never fetched"
    assert len(claude.requests) == 1


@pytest.fixture(params=["jsonl", "postgres"])
def store_place(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where sessions live: a folder of JSONL files, or a PostgreSQL database."""
    if request.param == "jsonl":
        return tmp_path / "sessions"
    dsn: str = request.getfixturevalue("postgres_db")
    return dsn


@pytest.fixture
async def session_store(
    store_place: Path | str,
) -> AsyncIterator[JsonlSessionStore | PostgresSessionStore]:
    """A session store of each kind on ``store_place`` (the database migrated)."""
    if isinstance(store_place, Path):
        yield JsonlSessionStore(store_place)
        return
    await migrate(store_place)
    store = await PostgresSessionStore.connect(store_place)
    yield store
    await store.close()


async def test_each_store_counts_the_media_a_user_stored_in_a_conversation_once_each(
    session_store: JsonlSessionStore | PostgresSessionStore,
) -> None:
    one, two = png(30, 30), png(31, 30)

    def said(user_id: int, *pictures: bytes, key: str | None = None) -> SessionEntry:
        blocks = [
            ImageBlock(
                source=ImageSource(media_type="image/png", data=base64.b64encode(p).decode())
            )
            for p in pictures
        ]
        message = Message(role="user", content=[*blocks, TextBlock(text="see")])
        return SessionEntry.of(user_id, message, conversation=key)

    group = "chat_-5"
    for entry in (said(USER, one), said(USER, one, two), said(USER, two, key=group)):
        await session_store.append(entry)
    await session_store.append(said(USER + 1, one, key=group))
    assert await session_store.media_bytes(USER, USER) == len(one) + len(two)
    assert await session_store.media_bytes(group, USER) == len(two)
    assert await session_store.media_bytes(group, USER + 1) == len(one)
    assert await session_store.media_bytes(USER + 2, USER + 2) == 0
    # #51: the quota is the user's, across every conversation they write in
    three = png(32, 30)
    await session_store.append(said(USER, three, key="chat_-6"))
    assert await session_store.user_media_bytes(USER) == len(one) + len(two) + len(three)
    assert await session_store.user_media_bytes(USER + 1) == len(one)
    assert await session_store.user_media_bytes(USER + 2) == 0


async def test_a_refusal_of_older_media_is_retried_once_with_the_newest_messages_only(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        telegram.send_photo(USER, data=png(40, 40), caption="look")
        await telegram.wait_for_messages(USER)
        refusal = "messages.0.content.0.image.source.base64: image exceeds 5 MB maximum"
        claude.enqueue(FakeError.invalid_request(refusal))
        answered = await ask(telegram, USER, "and now?")
    assert answered.text.startswith("echo")
    refused, retried = claude.requests[-2:]
    assert len(image_blocks(refused)) == 1
    assert image_blocks(retried) == [], "the older picture is left out of the retry"
