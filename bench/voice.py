"""What does a spoken turn add to a text turn? Latency of a mirrored voice turn, memory of a
5-minute voice note.

botkit runs as ``python -m botkit`` runs it for a new user (the default assistant, streaming on)
with voice on: ``BOTKIT_TRANSCRIBE_URL`` and ``BOTKIT_SPEECH_URL`` at the fake speech API
(``botkit.testing.speech``, in this process: real OGG/Opus, made with PyAV) and
``BOTKIT_VOICE_REPLIES=mirror``. The yardstick is botkit's own text turn, in the same process
and run: the issue asks what voice adds to it.

- **Latency** (one bot process, ``--turns`` of each, alternating): a text turn is timed from
  injecting the message to the answer's ``sendMessage``; a voice turn (a 3-second OGG/Opus
  voice note) from injecting it to the spoken answer's ``sendVoice`` (after its transcript's
  quote and the answer's text). Figures: medians, the added seconds and the ratio.
- **Memory** (a fresh bot process each): after one warm-up text turn, ``VmRSS`` is read; then
  one more turn, a text one or a 5-minute voice note (heard, answered, spoken back), and the
  peak it added is ``VmHWM`` after minus ``VmRSS`` before (``/proc/<pid>/status``).

The answers are the benches' paragraph (about 600 characters, spoken as about 40 s of audio),
streamed in deltas ``--chunk-delay`` apart.

    python bench/voice.py [--turns 10] [--chunk-delay 0.02]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    BOTKIT,
    BotSpec,
    BotUnderTest,
    load_line,
    machine_line,
    median,
    paragraph_responder,
)

from botkit.testing.speech import FakeSpeechServer
from botkit.voice.audio import tone_ogg_opus

USER = 40_000
NOTE_SECONDS = 3.0
LONG_NOTE_SECONDS = 300.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10, help="measured turns of each kind")
    parser.add_argument(
        "--chunk-delay", type=float, default=0.02, help="seconds between two deltas"
    )
    return parser.parse_args()


def voice_spec(speech: FakeSpeechServer) -> BotSpec:
    env = {
        "BOTKIT_TRANSCRIBE_URL": speech.base_url,
        "BOTKIT_SPEECH_URL": speech.base_url,
        "BOTKIT_VOICE_REPLIES": "mirror",
    }
    return BotSpec(kind=BOTKIT, allowed_users=(USER,), stream_replies=True, assistant=True, env=env)


def proc_mb(pid: int, field: str) -> float:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``) in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/{pid}/status (Linux only)")


async def text_turn(bot: BotUnderTest, n: int) -> float:
    """Seconds from a text message in to its answer's ``sendMessage``."""
    before = len(bot.telegram.sent_messages(USER))
    started = time.monotonic()
    bot.telegram.send_text(USER, f"question {n}")
    await bot.telegram.wait_for_messages(USER, before + 1, timeout=60)
    return time.monotonic() - started


async def voice_turn(bot: BotUnderTest, note: bytes, seconds: float) -> float:
    """Seconds from a voice note in to its spoken answer's ``sendVoice``."""
    before = len(bot.telegram.requests_for("sendVoice"))
    started = time.monotonic()
    bot.telegram.send_voice(USER, note, duration=round(seconds))
    await bot.telegram.wait_for_requests("sendVoice", before + 1, timeout=120)
    return time.monotonic() - started


async def started_bot(
    name: str, speech: FakeSpeechServer, workdir: Path, delay: float
) -> BotUnderTest:
    bot = BotUnderTest(
        name, voice_spec(speech), workdir / name, chunk_delay=delay, responder=paragraph_responder
    )
    await bot.start()
    await bot.ready()
    return bot


async def latency(
    args: argparse.Namespace, speech: FakeSpeechServer, workdir: Path
) -> tuple[float, float]:
    note = tone_ogg_opus(NOTE_SECONDS)
    bot = await started_bot("latency", speech, workdir, args.chunk_delay)
    try:
        await text_turn(bot, -1)  # warm-up: first imports, first connections
        await voice_turn(bot, note, NOTE_SECONDS)
        texts, voices = [], []
        for n in range(args.turns):
            texts.append(await text_turn(bot, n))
            voices.append(await voice_turn(bot, note, NOTE_SECONDS))
            print(
                f"round {n + 1}: text {texts[-1] * 1000:.0f} ms, voice {voices[-1] * 1000:.0f} ms"
            )
    finally:
        await bot.stop()
    return median(texts), median(voices)


async def peak_added(kind: str, speech: FakeSpeechServer, workdir: Path, delay: float) -> float:
    """MB a process's peak grew by for one more turn of ``kind`` after a warm-up text turn."""
    bot = await started_bot(f"memory-{kind}", speech, workdir, delay)
    try:
        await text_turn(bot, -1)
        await voice_turn(bot, tone_ogg_opus(NOTE_SECONDS), NOTE_SECONDS)  # voice code loaded
        assert bot.process is not None
        pid = bot.process.pid
        before = proc_mb(pid, "VmRSS")
        if kind == "text":
            await text_turn(bot, 0)
        else:
            note = await asyncio.to_thread(tone_ogg_opus, LONG_NOTE_SECONDS)
            print(f"5-minute voice note: {len(note) / 1024 / 1024:.2f} MB of OGG/Opus")
            await voice_turn(bot, note, LONG_NOTE_SECONDS)
        return proc_mb(pid, "VmHWM") - before
    finally:
        await bot.stop()


async def main() -> int:
    args = parse_args()
    print(machine_line())
    print(load_line())
    print("botkit: the default assistant, streaming on, voice on (mirror), fakes in this process")
    with tempfile.TemporaryDirectory(prefix="botkit-bench-voice-") as folder:
        workdir = Path(folder)
        async with FakeSpeechServer() as speech:
            text, voice = await latency(args, speech, workdir)
            text_mb = await peak_added("text", speech, workdir, args.chunk_delay)
            voice_mb = await peak_added("voice", speech, workdir, args.chunk_delay)
    added = voice - text
    print(f"latency: text turn {text * 1000:.0f} ms, mirrored voice turn {voice * 1000:.0f} ms")
    print(f"memory added by one turn: text {text_mb:.1f} MB, 5-minute voice note {voice_mb:.1f} MB")
    ratio = voice / text if text else float("inf")
    print(
        f"RESULT voice latency={ratio:.2f}x (+{added * 1000:.0f} ms over a text turn) "
        f"memory_5min={voice_mb:.1f} MB (text turn {text_mb:.1f} MB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
