"""A full disk (#26.8): a write cut short fails the turn politely and leaves nothing half-written.

Each scenario runs a bot in a child process whose file size limit (``RLIMIT_FSIZE``, SIGXFSZ
ignored) makes ``os.write`` write less than it was given, then fail with EFBIG, as on a full
disk; the fakes run in the child too. The child prints what it saw as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

USER = 42

_CHILD = r"""
import asyncio, base64, hashlib, io, json, resource, signal, sys
from pathlib import Path

from pypdf import PdfWriter

from botkit.sessions import JsonlSessionStore, SessionEntry, read_session_file
from botkit.testing import FakeAnthropicServer, FakeTelegramServer, make_bot, running
from botkit.types import Message, TextBlock

USER = 42
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # os.write returns short, then raises EFBIG
_, HARD = resource.getrlimit(resource.RLIMIT_FSIZE)


def limit_files(size):
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, HARD))


def unlimit_files():
    resource.setrlimit(resource.RLIMIT_FSIZE, (HARD, HARD))


def big_pdf(size):
    writer = PdfWriter()
    writer.add_blank_page(width=200, height=200)
    writer.add_metadata({"/Padding": "x" * size})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


async def ask(telegram, send):
    before = len(telegram.sent_messages(USER))
    send()
    return (await telegram.wait_for_messages(USER, before + 1, 20))[before].text


async def media(tmp):
    sessions = tmp / "sessions"
    pdf = big_pdf(400_000)
    name = hashlib.sha256(pdf).hexdigest() + ".pdf"
    send = lambda: telegram.send_document(USER, pdf, file_name="a.pdf", mime_type="application/pdf")
    facts = {"pdf_size": len(pdf)}
    async with FakeTelegramServer() as telegram, FakeAnthropicServer() as claude:
        bot = make_bot(claude, tmp, allowed_users=frozenset({USER}))
        async with running(bot, telegram):
            limit_files(200_000)
            facts["full_reply"] = await ask(telegram, send)
            unlimit_files()
            facts["media_after_failure"] = sorted(p.name for p in (sessions / "media").iterdir())
            recorded = read_session_file(sessions / f"{USER}.jsonl")
            facts["lines_after_failure"] = len(recorded.entries)
            (sessions / "media" / name).write_bytes(pdf[:1186])  # as botkit stored it before
            facts["later_reply"] = await ask(telegram, send)
        facts["stored_whole"] = (sessions / "media" / name).read_bytes() == pdf
        sent = [
            block["source"]["data"]
            for message in claude.requests[-1].messages
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "document"
        ]
        facts["model_got_whole"] = sent[-1:] == [base64.b64encode(pdf).decode()]
        facts["error_text"] = bot.options.error_text
    return facts


async def session_line(tmp):
    sessions = tmp / "sessions"
    path = sessions / f"{USER}.jsonl"
    store = JsonlSessionStore(sessions)  # a long history, so the session file is the largest
    for i in range(150):
        text = TextBlock(text=f"{i} " + "words " * 90)
        role = "assistant" if i % 2 else "user"
        await store.append(SessionEntry.of(USER, Message(role=role, content=[text])))
    await store.close()
    facts = {}
    async with FakeTelegramServer() as telegram, FakeAnthropicServer() as claude:
        bot = make_bot(claude, tmp, allowed_users=frozenset({USER}))
        async with running(bot, telegram):
            await ask(telegram, lambda: telegram.send_text(USER, "first"))
            before = path.stat().st_size
            limit_files(before + 40)
            facts["full_reply"] = await ask(telegram, lambda: telegram.send_text(USER, "y" * 300))
            unlimit_files()
            facts["grew_by"] = path.stat().st_size - before
            facts["later_reply"] = await ask(telegram, lambda: telegram.send_text(USER, "again"))
        facts["error_text"] = bot.options.error_text
    loaded = read_session_file(path)
    facts["problems"] = loaded.problems
    facts["last_texts"] = [m.text for m in loaded.messages[-4:]]
    facts["newline_ended"] = path.read_bytes().endswith(b"\n")
    return facts


scenario, tmp = sys.argv[1], Path(sys.argv[2])
print(json.dumps(asyncio.run({"media": media, "session_line": session_line}[scenario](tmp))))
"""


def run_child(scenario: str, tmp_path: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM", "ANTHROPIC"))}
    env.pop("BOTKIT_DATABASE_URL", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no .pyc written under the limit
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, scenario, str(tmp_path)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    facts: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return facts


def test_media_cut_short_fail_the_turn_politely_and_are_repaired_when_stored_again(
    tmp_path: Path,
) -> None:
    facts = run_child("media", tmp_path)

    assert facts["pdf_size"] > 200_000
    assert facts["full_reply"] == facts["error_text"], "the turn failed politely"
    assert facts["media_after_failure"] == [], "no half file, no temporary file"
    assert facts["lines_after_failure"] == 0, "no entry refers to media that were not stored"
    assert facts["later_reply"].startswith("echo")
    assert facts["stored_whole"], "the file cut short was written again, whole"
    assert facts["model_got_whole"]


def test_a_session_line_cut_short_is_removed_and_the_next_starts_on_its_own_line(
    tmp_path: Path,
) -> None:
    facts = run_child("session_line", tmp_path)

    assert facts["full_reply"] == facts["error_text"], "the turn failed politely"
    assert facts["grew_by"] == 0, "no part of the line stayed"
    assert facts["later_reply"] == "echo: again"
    assert facts["problems"] == [], "every line loads"
    assert facts["newline_ended"]
    said, answered = facts["last_texts"][-2:]
    assert said.endswith("again") and answered == "echo: again"
    assert not any("yyy" in text for text in facts["last_texts"]), "the failed line is gone"
