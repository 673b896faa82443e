"""Handoff to a person: ``/human`` or the ``handoff`` tool gives the conversation to operators
in a forum topic (BOTKIT_OPERATORS_CHAT); ``/done`` there gives it back to the assistant."""

from botkit.handoff.service import Forum, HandoffHost, Handoffs, attach_handoffs
from botkit.stores.handoffs import Handoff, HandoffStore

__all__ = ["Forum", "Handoff", "HandoffHost", "HandoffStore", "Handoffs", "attach_handoffs"]
