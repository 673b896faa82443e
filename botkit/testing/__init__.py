"""Local fakes of the Telegram Bot API, the Anthropic Messages API and an OpenAI-compatible
speech API, for testing bots.

Both are real HTTP servers on 127.0.0.1 that the real aiogram and anthropic clients talk
to; ``running`` polls a fake Telegram with your ``Bot`` inside the test's event loop.
``make_bot``, ``make_settings``, ``fake_llm`` and ``ask`` make a test of a bot a few lines;
``run_in_virtual_time`` runs waits on the loop's clock without sleeping real seconds;
``rerun`` and ``assert_unchanged`` test a bot against recorded (golden) sessions.
"""

from botkit.testing.anthropic import FakeAnthropicServer, FakeError, FakeReply, FakeRequest
from botkit.testing.golden import assert_unchanged, rerun
from botkit.testing.harness import running
from botkit.testing.kit import (
    VirtualTimeLoop,
    ask,
    build_test_bot,
    fake_llm,
    isolated_settings,
    make_bot,
    make_settings,
    run_in_virtual_time,
)
from botkit.testing.speech import FakeSpeechServer, SpeechRequest
from botkit.testing.telegram import FakeTelegramServer, RecordedRequest, SentMessage

__all__ = [
    "FakeAnthropicServer",
    "FakeError",
    "FakeReply",
    "FakeRequest",
    "FakeSpeechServer",
    "FakeTelegramServer",
    "RecordedRequest",
    "SentMessage",
    "SpeechRequest",
    "VirtualTimeLoop",
    "ask",
    "assert_unchanged",
    "build_test_bot",
    "fake_llm",
    "isolated_settings",
    "make_bot",
    "make_settings",
    "rerun",
    "run_in_virtual_time",
    "running",
]
