"""Local fakes of the Telegram Bot API and the Anthropic Messages API, for tests."""
