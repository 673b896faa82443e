"""What people see of an approval: the request's words, its buttons, the answers to presses."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ApprovalTexts"]


@dataclass(frozen=True, slots=True)
class ApprovalTexts:
    """The texts of approval requests (``BotOptions.approval_texts``)."""

    request: str = "The assistant wants to do this. Allow it?"
    allow: str = "Allow"
    deny: str = "Deny"
    allowed: str = "Allowed."
    denied: str = "Denied."
    expired: str = "Expired: nobody allowed it in time, so it was not done."
    not_yours: str = "This is not yours to approve."
    too_late: str = "This request has expired."
    already_decided: str = "This was already decided."
