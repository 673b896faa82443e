"""Approval before a tool acts: ``@bot.tool(approval=True)``, Allow and Deny in the chat.

``botkit.approvals.service.Approvals`` keeps requests, takes presses and resumes turns;
``botkit.approvals.store`` keeps them across restarts. This module stays light, as
``botkit.options`` imports its texts.
"""

from botkit.approvals.texts import ApprovalTexts

__all__ = ["ApprovalTexts"]
