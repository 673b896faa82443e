"""What users are told about erasing their data (``BotOptions.privacy_texts``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PrivacyTexts"]


@dataclass(frozen=True)
class PrivacyTexts:
    """The texts of ``/forget_me`` and its buttons."""

    description: str = "Erase everything I keep about you"
    confirm: str = (
        "This erases everything I keep about you: our conversation, what I remember, your "
        "reminders, usage and your user record. It cannot be undone. Go ahead?"
    )
    confirm_button: str = "Erase it all"
    cancel_button: str = "Cancel"
    cancelled: str = "Nothing was erased."
    done: str = "Done: I have erased everything I kept about you."
    private_only: str = "Send /forget_me to me in a private chat."
    not_yours: str = "Only the person who asked can press this."
