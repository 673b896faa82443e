"""What the console says to people: in the chat (``/console``) and on its pages."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConsoleTexts"]


@dataclass(frozen=True, slots=True)
class ConsoleTexts:
    """The console's texts: change them with ``BotOptions(console_texts=...)``."""

    link: str = "Your sign-in link to the console (it works once, for {minutes} minutes):\n{url}"
    """``/console``'s answer: ``{url}`` the link, ``{minutes}`` how long it works."""
    open_here: str = "Open the console here"
    """The label of the Mini App button under that answer (an HTTPS console only)."""
    not_served: str = "The console is not served: set BOTKIT_CONSOLE_PORT."
    """``/console`` when BOTKIT_CONSOLE_PORT is unset."""
    private_only: str = "Send /console in a private chat with me: a sign-in link is personal."
    """``/console`` in a group (anyone there could use the link)."""
    refused: str = "The console is for the bot's admins."
    """``/console`` from anyone else."""
    link_used: str = "This sign-in link was used already, or it is not a link of this bot."
    """The page of a link taken before (or never made)."""
    link_expired: str = "This sign-in link has expired: send /console to the bot for a new one."
    """The page of a link past its minutes."""
    not_admin: str = "Only the bot's admins can use the console."
    """The page of someone signed in whose role no longer lets them in."""
    app_refused: str = "Telegram's sign-in data for this page could not be checked."
    """The Mini App's answer to ``initData`` that is forged, too old or missing."""
    signed_out: str = "You are not signed in: send /console to the bot for a sign-in link."
    """Any page without a session."""
