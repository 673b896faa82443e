"""Files in and out: documents, pictures, albums, voice, and what tools send back (#15).

Real aiogram against the fake Bot API (getFile, the file URL, sendPhoto, sendDocument), the real
Anthropic SDK against the fake Messages API.
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

from PIL import Image
from pypdf import PdfWriter
from structlog.testing import capture_logs

from botkit import ToolFile, ToolImage
from botkit.testing.anthropic import FakeAnthropicServer, FakeReply
from botkit.testing.harness import running
from botkit.testing.kit import ask, make_bot
from botkit.testing.telegram import FakeTelegramServer

USER = 501
ALLOWED = frozenset({USER})
MB = 1024 * 1024
LOCAL_TIME = re.compile(r"\[\w{3} \d{1,2} \w{3} \d{4} \d\d:\d\d UTC \(UTC\)\]")


def sent(content: list[dict[str, object]]) -> list[dict[str, object]]:
    """A user turn's blocks without the local-time note every turn carries (one, just before
    the text)."""
    notes = [b for b in content if b["type"] == "text" and LOCAL_TIME.fullmatch(str(b["text"]))]
    assert len(notes) == 1, content
    return [block for block in content if block is not notes[0]]


def make_pdf(pages: int = 1) -> bytes:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=200, height=200)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_image(width: int, height: int, fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, format=fmt)
    return out.getvalue()


def decoded_image(block: dict[str, object]) -> Image.Image:
    source = block["source"]
    assert isinstance(source, dict)
    return Image.open(io.BytesIO(base64.b64decode(source["data"])))


async def test_pdf_reaches_the_model_as_a_document_block_with_the_caption(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    pdf = make_pdf(2)
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        telegram.send_document(
            USER, pdf, file_name="contract.pdf", mime_type="application/pdf", caption="summary?"
        )
        await telegram.wait_for_messages(USER)
    assert len(telegram.requests_for("getFile")) == 1
    content = sent(claude.requests[0].messages[0]["content"])
    assert content[0]["type"] == "document"
    assert content[0]["title"] == "contract.pdf"
    assert content[0]["source"]["media_type"] == "application/pdf"
    assert base64.b64decode(content[0]["source"]["data"]) == pdf
    assert (content[1]["type"], content[1]["text"]) == ("text", "summary?")


async def test_text_file_reaches_the_model_as_text_with_its_name(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    csv = "name,amount\nrent,900\nfood,350\n"
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        telegram.send_document(USER, csv.encode(), file_name="budget.csv", mime_type="text/csv")
        await telegram.wait_for_messages(USER)
    [document] = sent(claude.requests[0].messages[0]["content"])
    assert document["type"] == "document"
    assert document["title"] == "budget.csv"
    assert document["source"] == {"type": "text", "media_type": "text/plain", "data": csv}


async def test_source_code_without_a_text_mime_type_is_read_by_its_suffix(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    code = "def f():\n    return 42\n"
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        telegram.send_document(
            USER, code.encode(), file_name="f.py", mime_type="application/octet-stream"
        )
        await telegram.wait_for_messages(USER)
    [document] = sent(claude.requests[0].messages[0]["content"])
    assert document["source"]["data"] == code


async def test_text_file_that_is_not_utf8_gets_a_clear_reply_without_an_llm_call(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        telegram.send_document(
            USER, "Grüße".encode("latin-1"), file_name="notes.txt", mime_type="text/plain"
        )
        [reply] = await telegram.wait_for_messages(USER)
    assert "notes.txt" in reply.text and "UTF-8" in reply.text
    assert claude.requests == []


async def test_oversize_file_is_refused_before_downloading_and_without_an_llm_call(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        telegram.send_document(
            USER, b"%PDF-", file_name="scan.pdf", mime_type="application/pdf", file_size=25 * MB
        )
        [reply] = await telegram.wait_for_messages(USER)
    assert reply.text == (
        "Sorry, scan.pdf is 25 MB: I can only take files up to 20 MB (Telegram's limit for bots)."
    )
    assert telegram.requests_for("getFile") == [], "the size in the update was enough"
    assert claude.requests == []


async def test_botkit_max_file_mb_is_the_limit_named_in_the_reply(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED, max_file_mb=2)
    async with running(bot, telegram):
        telegram.send_document(USER, b"x" * (3 * MB), file_name="big.txt", mime_type="text/plain")
        [reply] = await telegram.wait_for_messages(USER)
    assert (
        reply.text == "Sorry, big.txt is 3 MB: I can only take files up to 2 MB (this bot's limit)."
    )
    assert claude.requests == []


async def test_pdf_over_claudes_page_limit_is_refused_naming_the_limit(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        telegram.send_document(
            USER, make_pdf(101), file_name="book.pdf", mime_type="application/pdf"
        )
        [reply] = await telegram.wait_for_messages(USER)
    assert reply.text == "Sorry, book.pdf has 101 pages: I can read PDFs of up to 100 pages."
    assert claude.requests == []


async def test_unknown_binary_file_gets_a_reply_saying_what_can_be_read(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        telegram.send_document(
            USER, b"PK\x03\x04", file_name="archive.zip", mime_type="application/zip"
        )
        [reply] = await telegram.wait_for_messages(USER)
    assert "archive.zip" in reply.text and "PDFs" in reply.text
    assert claude.requests == []


async def test_large_photo_is_scaled_to_1568_pixels_keeping_its_format(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        telegram.send_photo(USER, data=make_image(3136, 1000, "JPEG"), caption="look")
        await telegram.wait_for_messages(USER)
    image_block = claude.requests[0].messages[0]["content"][0]
    assert image_block["source"]["media_type"] == "image/jpeg"
    image = decoded_image(image_block)
    assert image.format == "JPEG"
    assert image.size == (1568, 500)


async def test_album_of_three_photos_is_one_llm_call_with_three_images(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    photos = [make_image(10 + n, 10) for n in range(3)]
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        telegram.send_album(USER, photos, caption="my receipt")
        replies = await telegram.wait_for_messages(USER)
        telegram.send_text(USER, "thanks")
        await telegram.wait_for_messages(USER, 2)
    assert len(replies) == 1
    assert len(claude.requests) == 2, "one call for the album, one for the next message"
    content = claude.requests[0].messages[0]["content"]
    images = [block for block in content if block["type"] == "image"]
    assert [decoded_image(block).size[0] for block in images] == [10, 11, 12]
    assert (content[-1]["type"], content[-1]["text"]) == ("text", "my receipt")


async def test_voice_note_with_a_transcriber_becomes_a_turn_and_the_user_sees_it(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    heard: list[tuple[bytes, str]] = []

    async def transcribe(audio: bytes, mime: str) -> str | None:
        heard.append((audio, mime))
        return "remind me to buy milk"

    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED, transcribe=transcribe)
    async with running(bot, telegram):
        telegram.send_voice(USER, b"OggS-fake-voice")
        replies = await telegram.wait_for_messages(USER, 2)
    assert heard == [(b"OggS-fake-voice", "audio/ogg")]
    assert replies[0].text == "🎤 I understood: “remind me to buy milk”"
    assert replies[1].text == "echo: remind me to buy milk"
    assert claude.requests[0].last_user_text() == "remind me to buy milk"


async def test_voice_note_without_a_transcriber_gets_the_polite_reply_and_no_download(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        telegram.send_voice(USER, b"OggS-fake-voice")
        [reply] = await telegram.wait_for_messages(USER)
    assert reply.text == bot.options.unsupported_text
    assert telegram.requests_for("getFile") == []
    assert claude.requests == []


async def test_a_tools_image_arrives_as_send_photo_and_the_model_sees_it(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    chart = make_image(40, 20)

    async def draw_chart() -> ToolImage:
        """Draw the chart."""
        return ToolImage(chart, "chart.png", caption="Spending by month")

    claude.enqueue(FakeReply.tool_use("draw_chart", {}), FakeReply.text("Here it is."))
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED, tools=[draw_chart])
    async with running(bot, telegram):
        telegram.send_text(USER, "chart please")
        [reply] = await telegram.wait_for_messages(USER)
    [sent] = telegram.sent_files(USER)
    assert (sent.method, sent.data, sent.caption) == ("sendPhoto", chart, "Spending by month")
    assert reply.text == "Here it is."
    [result] = claude.requests[1].tool_results()
    note, image = result["content"]
    assert "chart.png" in note["text"] and "sent to the user" in note["text"]
    assert base64.b64decode(image["source"]["data"]) == chart


async def test_a_session_with_images_restores_after_restart_without_base64_in_the_jsonl(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    photo = make_image(30, 20)
    pdf = make_pdf(1)
    async with running(make_bot(claude, tmp_path, allowed_users=ALLOWED), telegram):
        telegram.send_photo(USER, data=photo, caption="what is this?")
        await telegram.wait_for_messages(USER)
        telegram.send_document(USER, pdf, file_name="a.pdf", mime_type="application/pdf")
        await telegram.wait_for_messages(USER, 2)

    session = (tmp_path / "sessions" / f"{USER}.jsonl").read_text()
    assert base64.b64encode(photo).decode() not in session
    assert base64.b64encode(pdf).decode()[:100] not in session
    assert len(list((tmp_path / "sessions" / "media").iterdir())) == 2

    async with running(make_bot(claude, tmp_path, allowed_users=ALLOWED), telegram):
        telegram.send_text(USER, "and now?")
        await telegram.wait_for_messages(USER, 3)
    restored = claude.requests[-1].messages
    assert base64.b64decode(restored[0]["content"][0]["source"]["data"]) == photo
    assert base64.b64decode(restored[2]["content"][0]["source"]["data"]) == pdf


async def test_a_tools_file_arrives_as_send_document_with_its_name(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    async def export_csv() -> ToolFile:
        """Export the data."""
        return ToolFile(b"a,b\n1,2\n", "data.csv", "text/csv", caption="Your export")

    claude.enqueue(FakeReply.tool_use("export_csv", {}), FakeReply.text("Sent."))
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED, tools=[export_csv])
    async with running(bot, telegram):
        telegram.send_text(USER, "export please")
        await telegram.wait_for_messages(USER)
    [sent] = telegram.sent_files(USER)
    assert (sent.method, sent.filename, sent.data) == ("sendDocument", "data.csv", b"a,b\n1,2\n")
    assert sent.caption == "Your export"
    [result] = claude.requests[1].tool_results()
    assert result["content"] == (
        "The file data.csv (text/csv, 8 B) was sent to the user with the caption: Your export"
    )


async def test_help_says_what_the_bot_accepts_and_voice_only_with_a_transcriber(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    async def transcribe(audio: bytes, mime: str) -> str | None:
        return None

    async with running(make_bot(claude, tmp_path, allowed_users=ALLOWED), telegram):
        plain = (await ask(telegram, USER, "/help")).plain_text
    voice_bot = make_bot(claude, tmp_path, allowed_users=ALLOWED, transcribe=transcribe)
    async with running(voice_bot, telegram):
        voice = (await ask(telegram, USER, "/help")).plain_text
    assert "PDFs" in plain and "photos" in plain and "voice" not in plain
    assert "voice messages" in voice
    assert "PDFs" in bot_prompt(claude, tmp_path)


def bot_prompt(claude: FakeAnthropicServer, tmp_path: Path) -> str:
    return make_bot(claude, tmp_path).options.system_prompt


async def test_an_album_addressed_to_the_bot_in_a_group_is_read_whole(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    group = -4242
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    async with running(bot, telegram):
        telegram.send_album(
            USER,
            [make_image(10, 10), make_image(11, 10)],
            caption="@botkit_test_bot which is bigger?",
            chat_id=group,
            chat_type="group",
        )
        await telegram.wait_for_messages(group)
    [request] = claude.requests
    content = sent(request.messages[0]["content"])
    assert [block["type"] for block in content] == ["image", "image", "text"]
    assert "which is bigger?" in content[-1]["text"]


async def test_a_large_tool_image_reaches_the_chat_whole_and_the_model_scaled(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    big = make_image(3000, 100)

    async def panorama() -> ToolImage:
        """Draw a wide picture."""
        return ToolImage(big, "wide.png", mime="image/jpeg")  # the declared type is wrong

    claude.enqueue(FakeReply.tool_use("panorama", {}), FakeReply.text("Done."))
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED, tools=[panorama])
    async with running(bot, telegram):
        telegram.send_text(USER, "draw")
        await telegram.wait_for_messages(USER)
    assert telegram.sent_files(USER)[0].data == big
    [result] = claude.requests[1].tool_results()
    image = result["content"][1]
    assert image["source"]["media_type"] == "image/png", "the picture's real type"
    assert decoded_image(image).size == (1568, 52)


async def test_a_failing_transcriber_gets_the_not_understood_reply_and_a_log_line(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    async def transcribe(audio: bytes, mime: str) -> str | None:
        raise ConnectionError("speech service down")

    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED, transcribe=transcribe)
    with capture_logs() as logs:
        async with running(bot, telegram):
            telegram.send_voice(USER, b"OggS")
            [reply] = await telegram.wait_for_messages(USER)
    assert reply.text == bot.options.file_texts.not_heard
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["files.transcribe_failed"]
    assert claude.requests == []


async def test_a_failed_download_is_a_polite_reply_and_the_token_stays_out_of_the_logs(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    telegram.fail_downloads(error_code=500)
    with capture_logs() as logs:
        async with running(bot, telegram):
            telegram.send_document(USER, b"hello", file_name="a.txt", mime_type="text/plain")
            [reply] = await telegram.wait_for_messages(USER)
    assert reply.text == "Sorry, I couldn't fetch a.txt. Please send it again."
    assert any(e["event"] == "telegram.download_failed" for e in logs)
    assert telegram.token not in repr(logs)
    assert claude.requests == []
