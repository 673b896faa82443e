"""The operators' console: web pages (and a Telegram Mini App) over the bot's stores.

With BOTKIT_CONSOLE_PORT set, ``run`` (and ``receive`` in a scale-out) serves it; an admin
signs in with the one-time link ``/console`` gives them, or inside Telegram as a Mini App.
"""

from botkit.console.command import register_console_command
from botkit.console.server import console_server
from botkit.console.settings import ConsoleSettings
from botkit.console.signin import check_init_data, sign_init_data
from botkit.console.texts import ConsoleTexts

__all__ = [
    "ConsoleSettings",
    "ConsoleTexts",
    "check_init_data",
    "console_server",
    "register_console_command",
    "sign_init_data",
]
