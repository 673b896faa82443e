"""The operators' console: web pages (and a Telegram Mini App) over the bot's stores.

With BOTKIT_CONSOLE_PORT set, ``run`` (and ``receive`` in a scale-out) serves it
(``botkit.console.server``); an admin signs in with the one-time link ``/console`` gives them
(``botkit.console.command``), or inside Telegram as a Mini App. This package's top holds only
what has no dependency on the bot (``BotOptions`` imports the texts from here).
"""

from botkit.console.settings import ConsoleSettings
from botkit.console.signin import check_init_data
from botkit.console.texts import ConsoleTexts

__all__ = ["ConsoleSettings", "ConsoleTexts", "check_init_data"]
