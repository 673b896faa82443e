"""Local fakes of the Telegram Bot API and the Anthropic Messages API, for testing bots.

Both are real HTTP servers on 127.0.0.1 that the real aiogram and anthropic clients talk
to; ``running`` polls a fake Telegram with your ``Bot`` inside the test's event loop.
"""

from botkit.testing.anthropic import FakeAnthropicServer, FakeError, FakeReply, FakeRequest
from botkit.testing.harness import running
from botkit.testing.telegram import FakeTelegramServer, RecordedRequest, SentMessage

__all__ = [
    "FakeAnthropicServer",
    "FakeError",
    "FakeReply",
    "FakeRequest",
    "FakeTelegramServer",
    "RecordedRequest",
    "SentMessage",
    "running",
]
