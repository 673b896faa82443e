"""Runtimes: what takes messages from somewhere and runs them through a bot's turn pipeline.

- ``botkit.runtime.telegram``: one process long-polling Telegram (``serve``, ``run_bot``,
  ``messenger_for``), with ``scheduler`` (one conversation's turns in order, many at once) and
  ``inbox`` (the journal that makes accepted updates survive a crash).
- ``botkit.runtime.console``: the same bot in a terminal.
- ``botkit.runtime.setup``: what every runtime does before taking messages (MCP tools, the
  Anthropic key check).

This package imports nothing on purpose: ``Bot.run`` imports one runtime without the others.
"""
