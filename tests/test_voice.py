"""Voice (#46): voice notes heard through an OpenAI-compatible speech API, answers spoken back.

Real aiogram against the fake Bot API (getFile, sendVoice), the real Anthropic SDK against the
fake Messages API, botkit's speech client against the fake speech API (real OGG/Opus audio).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import av
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import SecretStr
from structlog.testing import capture_logs
from test_approvals import queued

from botkit import Bot, BotOptions, tracing
from botkit.access import Access, today
from botkit.commands import understands_voice
from botkit.messengers.base import OutgoingFile
from botkit.testing.anthropic import FakeAnthropicServer, FakeReply
from botkit.testing.harness import running
from botkit.testing.kit import make_bot, make_settings
from botkit.testing.speech import FakeSpeechServer
from botkit.testing.telegram import FakeTelegramServer
from botkit.types import Usage
from botkit.voice.audio import ogg_opus_seconds, tone_ogg_opus
from botkit.voice.spoken import speakable, spoken_parts
from botkit.voice.texts import VoiceTexts

USER = 601
GROUP = -601
ALLOWED = frozenset({USER})
VOICE_NOTE = tone_ogg_opus(3.0)
HEARD = "what is the weather like"


def voice_bot(
    claude: FakeAnthropicServer, tmp_path: Path, speech: FakeSpeechServer, **more: Any
) -> Bot:
    """A bot that hears (and, with ``voice_replies``, speaks) through ``speech``."""
    more.setdefault("allowed_users", ALLOWED)
    more.setdefault("speech_timeout", 2.0)
    return make_bot(
        claude,
        tmp_path,
        transcribe_url=speech.base_url,
        speech_url=speech.base_url,
        **more,
    )


def decoded_seconds(data: bytes) -> float:
    """The length of ``data`` as an OGG/Opus decoder (ffmpeg's, through PyAV) plays it."""
    with av.open(io.BytesIO(data), "r") as container:
        stream = container.streams.audio[0]
        assert stream.codec_context.name == "opus"
        return sum(frame.samples for frame in container.decode(audio=0)) / 48_000


async def test_a_voice_note_reaches_the_model_marked_as_spoken_and_the_user_sees_what_was_heard(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    speech.transcripts[VOICE_NOTE] = HEARD
    bot = voice_bot(claude, tmp_path, speech)
    async with running(bot, telegram):
        telegram.send_voice(USER, VOICE_NOTE, duration=3)
        heard, answer = await telegram.wait_for_messages(USER, 2)
    assert heard.text == f"🎤 I understood: “{HEARD}”"
    assert claude.requests[0].last_user_text() == f"[Voice message, transcribed] {HEARD}"
    assert answer.text == f"echo: [Voice message, transcribed] {HEARD}"
    [call] = speech.calls("/audio/transcriptions")
    assert call.fields["file"] == VOICE_NOTE
    assert call.fields["model"] == "whisper-1"
    assert bot.turns.usage_by_model["whisper-1"].audio_seconds == 3  # counted, and priced
    assert telegram.sent_voices(USER) == []  # voice answers are off by default


async def test_transcripts_can_be_hidden(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    bot = voice_bot(claude, tmp_path, speech, show_transcript=False)
    async with running(bot, telegram):
        telegram.send_voice(USER, VOICE_NOTE)
        [answer] = await telegram.wait_for_messages(USER)
    assert answer.text.startswith("echo: [Voice message, transcribed]")


async def test_a_voice_note_from_a_user_over_budget_is_not_downloaded_nor_transcribed(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    bot = voice_bot(claude, tmp_path, speech, daily_token_budget=1)
    async with running(bot, telegram):
        telegram.send_text(USER, "spend the budget")
        await telegram.wait_for_messages(USER)
        telegram.send_voice(USER, VOICE_NOTE)
        replies = await telegram.wait_for_messages(USER, 2)
    assert replies[1].text == bot.access.budget_text
    assert telegram.requests_for("getFile") == []
    assert speech.requests == []
    assert len(claude.requests) == 1


async def test_a_ten_minute_voice_note_over_the_limit_is_refused_with_a_reply_before_download(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    bot = voice_bot(claude, tmp_path, speech, max_voice_seconds=300)
    async with running(bot, telegram):
        telegram.send_voice(USER, VOICE_NOTE, duration=600)
        [reply] = await telegram.wait_for_messages(USER)
    assert "10:00 long" in reply.text and "up to 5:00" in reply.text
    assert telegram.requests_for("getFile") == []
    assert speech.requests == [] and claude.requests == []


async def test_a_transcription_timeout_asks_the_user_to_type_and_costs_no_llm_call(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    bot = voice_bot(claude, tmp_path, speech, speech_timeout=0.5)
    speech.stall_next()
    async with running(bot, telegram):
        with capture_logs() as logs:
            telegram.send_voice(USER, VOICE_NOTE)
            [reply] = await telegram.wait_for_messages(USER)
    assert reply.text == bot.options.file_texts.not_heard
    assert claude.requests == []
    failed = [line for line in logs if line["event"] == "files.transcribe_failed"]
    assert len(failed) == 1 and "longer than 0.5 s" in failed[0]["error"]


async def test_a_refusing_transcription_api_asks_the_user_to_type(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    speech.fail_next(503, "overloaded")
    bot = voice_bot(claude, tmp_path, speech)
    async with running(bot, telegram):
        telegram.send_voice(USER, VOICE_NOTE)
        [reply] = await telegram.wait_for_messages(USER)
    assert reply.text == bot.options.file_texts.not_heard
    assert claude.requests == []


async def test_the_bots_own_transcribe_wins_over_the_speech_api(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    async def transcribe(audio: bytes, mime: str) -> str | None:
        return "my own transcript"

    bot = voice_bot(claude, tmp_path, speech, transcribe=transcribe)
    async with running(bot, telegram):
        telegram.send_voice(USER, VOICE_NOTE)
        await telegram.wait_for_messages(USER, 2)
    assert speech.calls("/audio/transcriptions") == []
    assert claude.requests[0].last_user_text() == "my own transcript"


async def test_a_video_note_and_an_audio_file_are_heard_too(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    bot = voice_bot(claude, tmp_path, speech)
    async with running(bot, telegram):
        telegram.send_video_note(USER, b"\x00\x00\x00\x18ftypmp42-fake-video")
        await telegram.wait_for_messages(USER, 2)
        telegram.send_audio(USER, b"ID3-fake-mp3")
        await telegram.wait_for_messages(USER, 4)
    video, audio = speech.calls("/audio/transcriptions")
    assert video.fields["file"].startswith(b"\x00\x00\x00\x18ftyp")
    assert audio.fields["file"] == b"ID3-fake-mp3"
    assert len(claude.requests) == 2


async def test_mirror_answers_a_voice_note_with_a_decodable_ogg_voice_note_and_the_text(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    claude.enqueue(FakeReply.text("It is sunny. See the table:\n\n| a | b |\n|---|---|\n| 1 | 2 |"))
    bot = voice_bot(claude, tmp_path, speech, voice_replies="mirror")
    async with running(bot, telegram):
        telegram.send_voice(USER, VOICE_NOTE)
        await telegram.wait_for_requests("sendVoice", 1)
        telegram.send_text(USER, "and tomorrow?")
        await telegram.wait_for_messages(USER, 3)
    [note] = telegram.sent_voices(USER)
    assert note.data.startswith(b"OggS")
    assert decoded_seconds(note.data) > 0.5
    assert abs(note.params["duration"] - decoded_seconds(note.data)) <= 1
    assert [m.text for m in telegram.sent_messages(USER)][1].startswith("It is sunny.")
    [spoken] = speech.calls("/audio/speech")
    assert spoken.fields["input"] == "It is sunny. See the table:\n\nThere is a table in the text."
    assert spoken.fields["response_format"] == "opus"
    assert bot.turns.usage_by_model["gpt-4o-mini-tts"].spoken_chars == len(spoken.fields["input"])
    assert len(telegram.sent_voices(USER)) == 1  # a typed message is answered in text only


async def test_mirror_in_a_group_answers_a_voice_note_that_replies_to_the_bot(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    bot = voice_bot(claude, tmp_path, speech, voice_replies="mirror")
    async with running(bot, telegram):
        telegram.send_text(USER, "@botkit_test_bot hello", chat_id=GROUP, chat_type="group")
        await telegram.wait_for_messages(GROUP)
        telegram.send_voice(USER, VOICE_NOTE, chat_id=GROUP, reply_to_bot=True)
        await telegram.wait_for_requests("sendVoice", 1)
    [note] = telegram.sent_voices(GROUP)
    assert decoded_seconds(note.data) > 0.5
    assert "[Voice message, transcribed]" in claude.requests[-1].last_user_text()
    assert telegram.sent_voices(USER) == []  # in the group, not in private


async def test_a_group_voice_note_is_answered_only_when_it_says_the_bots_name(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    chatter, addressed = tone_ogg_opus(2.0, 300.0), tone_ogg_opus(2.0, 500.0)
    speech.transcripts[chatter] = "see you all at seven"
    speech.transcripts[addressed] = "Botkit test bot, what is seven times six?"
    stranger = 999  # not allowed: turned away in silence, never heard
    bot = voice_bot(claude, tmp_path, speech, voice_replies="mirror")
    async with running(bot, telegram):
        telegram.send_voice(stranger, addressed, chat_id=GROUP)
        telegram.send_voice(USER, addressed, chat_id=GROUP, duration=900)  # too long: silent
        telegram.send_voice(USER, chatter, chat_id=GROUP)
        telegram.send_voice(USER, addressed, chat_id=GROUP)
        await telegram.wait_for_requests("sendVoice", 1)
    assert [call.fields["file"] for call in speech.calls("/audio/transcriptions")] == [
        chatter,
        addressed,
    ]
    assert len(claude.requests) == 1
    assert "what is seven times six" in claude.requests[0].last_user_text()
    heard, answer = telegram.sent_messages(GROUP)
    assert heard.text.startswith("🎤 I understood: “Botkit test bot")
    assert answer.text.startswith("echo:")


async def test_a_slow_speech_api_leaves_the_text_reply_alone_with_one_log_line(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    bot = voice_bot(claude, tmp_path, speech, voice_replies="always", speech_timeout=0.5)
    speech.stall_next()
    with capture_logs() as logs:
        async with running(bot, telegram):  # its end waits for the turn's voice note too
            telegram.send_text(USER, "hi")
            [answer] = await telegram.wait_for_messages(USER)
    assert answer.text == "echo: hi"
    assert telegram.sent_voices(USER) == []
    assert [line["event"] for line in logs if line["log_level"] == "warning"] == [
        "voice.speech_failed"
    ]


async def test_a_provider_answering_wav_is_converted_to_ogg_opus(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    speech.answer_format = "wav"
    bot = voice_bot(claude, tmp_path, speech, voice_replies="always")
    async with running(bot, telegram):
        telegram.send_text(USER, "say something long enough to hear")
        await telegram.wait_for_requests("sendVoice", 1)
    [note] = telegram.sent_voices(USER)
    assert note.data.startswith(b"OggS") and decoded_seconds(note.data) > 1


async def test_voice_command_switches_spoken_answers_for_the_conversation(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    bot = voice_bot(claude, tmp_path, speech)
    async with running(bot, telegram):
        telegram.send_text(USER, "/voice on")
        await telegram.wait_for_messages(USER)
        telegram.send_text(USER, "hello")
        await telegram.wait_for_requests("sendVoice", 1)
        telegram.send_text(USER, "/voice off")
        telegram.send_text(USER, "again")
        await telegram.wait_for_messages(USER, 4)
    assert len(telegram.sent_voices(USER)) == 1
    assert telegram.sent_messages(USER)[0].text == bot.options.voice_texts.voice_on


async def test_the_fake_bot_api_plays_only_ogg_opus_mp3_and_m4a_as_voice_notes(
    telegram: FakeTelegramServer, claude: FakeAnthropicServer, tmp_path: Path
) -> None:
    bot = make_bot(claude, tmp_path, allowed_users=ALLOWED)
    ogg = tone_ogg_opus(2.0)
    async with running(bot, telegram) as messenger:
        wav = OutgoingFile(b"RIFF\x24\x00\x00\x00WAVEfmt ", "a.wav", "audio/wav", as_voice=True)
        await messenger.send_file(USER, wav)  # delivered, but as a file
        mp3 = OutgoingFile(b"ID3\x03\x00fake", "a.mp3", "audio/mpeg", as_voice=True)
        await messenger.send_file(USER, mp3)
        note = OutgoingFile(ogg, "a.ogg", "audio/ogg", as_voice=True, duration=2)
        await messenger.send_file(USER, note)
        wrong = OutgoingFile(ogg, "b.ogg", "audio/ogg", as_voice=True, duration=9)
        try:
            await messenger.send_file(USER, wrong)
        except Exception as e:
            refused = str(e)
        else:
            refused = ""
    assert "duration 9 is not 2.0 s" in refused
    assert [sent.filename for sent in telegram.sent_voices(USER)] == ["a.mp3", "a.ogg"]
    assert telegram.sent_voices(USER)[1].params["duration"] == 2


def test_code_tables_and_links_are_not_read_aloud() -> None:
    answer = (
        "## Plan\nRead [the guide](https://example.com/g) first, then run `make`:\n\n"
        "```sh\nmake all\n```\n\n| k | v |\n|---|---|\n| a | 1 |\n\nSee https://example.com."
    )
    said = speakable(answer, code_note="(code)", table_note="(table)")
    assert said == "Plan\nRead the guide first, then run make:\n\n(code)\n\n(table)\n\nSee"


def test_a_long_answer_is_spoken_up_to_the_limit_and_says_the_rest_is_in_the_text() -> None:
    text = "A sentence of some length. " * 200
    parts, cut = spoken_parts(text, 1000, "The rest is in the text.", part_chars=400)
    assert cut and parts[-1].endswith("The rest is in the text.")
    assert all(len(part) <= 400 for part in parts)
    assert sum(len(part) for part in parts) <= 1000


def test_ogg_opus_length_is_read_from_the_file() -> None:
    assert ogg_opus_seconds(tone_ogg_opus(4.0)) == 4.0
    assert ogg_opus_seconds(b"ID3 not ogg") is None


async def test_a_conversations_voice_choice_outlives_a_restart(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    async with running(voice_bot(claude, tmp_path, speech), telegram):
        telegram.send_text(USER, "/voice mirror")
        await telegram.wait_for_messages(USER)
    restarted = voice_bot(claude, tmp_path, speech)  # same user store, fresh memory
    async with running(restarted, telegram):
        telegram.send_voice(USER, VOICE_NOTE)
        await telegram.wait_for_requests("sendVoice", 1)
        telegram.send_text(USER, "/voice")
        replies = await telegram.wait_for_messages(USER, 4)
    assert "Voice answers here: mirror" in replies[-1].text


async def test_a_voice_turn_has_spans_for_transcription_and_speech_and_metrics_of_both(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    bot = voice_bot(claude, tmp_path, speech, voice_replies="mirror", tracer_provider=provider)
    try:
        async with running(bot, telegram):
            telegram.send_voice(USER, VOICE_NOTE, duration=3)
            await telegram.wait_for_requests("sendVoice", 1)
    finally:
        tracing.reset()
    spans = {span.name: span for span in exporter.get_finished_spans()}
    turn = next(span for name, span in spans.items() if name.startswith("invoke_agent"))
    heard, spoken = spans["transcribe"], spans["speak"]
    assert turn.context is not None
    for span in (heard, spoken):
        assert span.parent is not None and span.parent.trace_id == turn.context.trace_id
    assert dict(heard.attributes or {})["botkit.audio.seconds"] == 3
    assert dict(spoken.attributes or {})["botkit.speech.chars"] > 0
    metrics = bot.metrics.render().decode()
    assert 'botkit_voice_audio_seconds_total{model="whisper-1"} 3.0' in metrics
    assert (
        'botkit_voice_calls_total{model="gpt-4o-mini-tts",operation="speak",outcome="ok"} 1.0'
        in (metrics)
    )
    assert 'botkit_voice_spoken_chars_total{model="gpt-4o-mini-tts"}' in metrics


async def test_queued_on_postgres_a_voice_note_is_heard_and_spoken_and_voice_off_is_kept(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
    db: str,
) -> None:
    """receive/work on PostgreSQL: the worker hears, answers and speaks; ``/voice off`` is kept
    in the database, so the next voice note (on a worker with a fresh memory) gets text only."""
    queued_settings: dict[str, Any] = {
        "database_url": SecretStr(db),
        "telegram_bot_token": SecretStr(telegram.token),
        "telegram_api_base": telegram.base_url,
        "poll_timeout": 1,
        "voice_replies": "mirror",
    }
    async with queued(voice_bot(claude, tmp_path / "one", speech, **queued_settings)):
        telegram.send_voice(USER, VOICE_NOTE)
        await telegram.wait_for_requests("sendVoice", 1, timeout=30)
        telegram.send_text(USER, "/voice off")
        await telegram.wait_for_messages(USER, 3, timeout=30)
    async with queued(voice_bot(claude, tmp_path / "two", speech, **queued_settings)):
        telegram.send_voice(USER, VOICE_NOTE)
        await telegram.wait_for_messages(USER, 5, timeout=30)
    assert len(telegram.sent_voices(USER)) == 1
    assert len(speech.calls("/audio/transcriptions")) == 2
    assert telegram.sent_messages(USER)[2].text == VoiceTexts().voice_off


async def test_help_says_voice_is_understood_and_offers_voice_when_the_bot_can_speak(
    telegram: FakeTelegramServer,
    claude: FakeAnthropicServer,
    speech: FakeSpeechServer,
    tmp_path: Path,
) -> None:
    hears_only = make_bot(
        claude, tmp_path / "a", allowed_users=ALLOWED, transcribe_url="http://x/v1"
    )
    bot = voice_bot(claude, tmp_path / "b", speech)
    async with running(bot, telegram):
        telegram.send_text(USER, "/help")
        [help_text] = await telegram.wait_for_messages(USER)
    assert bot.options.voice_help_text in help_text.text
    assert "/voice — Answer with voice notes" in help_text.text
    assert "voice" not in hears_only.commands  # nothing to switch without a speech API
    assert understands_voice(hears_only)


async def test_seconds_heard_and_characters_spoken_count_against_the_budget(tmp_path: Path) -> None:
    """A minute of whisper-1 ($0.006) costs what 3,000 input tokens of Claude Sonnet 5.5 ($2 a
    million) cost; 1,000 characters of tts-1 ($15 a million) what 7,500 do."""
    settings = make_settings(tmp_path, daily_token_budget=1_000_000, model="claude-sonnet-5-5")
    access = Access(settings, BotOptions())
    try:
        await access.charge(USER, Usage(audio_seconds=60), "whisper-1")
        await access.charge(USER, Usage(spoken_chars=1000), "tts-1")
        await access.ledger.flush()  # budget tokens are written in batches
        store = await access.user_store()
        assert await store.usage_on(USER, today()) == 3_000 + 7_500
    finally:
        await access.close()
