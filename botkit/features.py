"""The features every ``Bot`` is built with, attached in one place (each lives in its package).

Skills, the built-in and admin commands, payments, reminders, memory, ``/forget_me``,
handoffs and approvals: each registers its commands, buttons and plugins on the bot, in this
order (it is the order of the menu and ``/help``), and ``close_features`` releases what they
opened.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from botkit.admin import AdminHost, register_admin_commands
from botkit.approvals.request import BUTTON_PREFIX as APPROVAL_BUTTONS
from botkit.approvals.service import ApprovalHost, Approvals
from botkit.commands import CommandHost, register_builtin_commands
from botkit.console.command import register_console_command
from botkit.handoff import HandoffHost, Handoffs, attach_handoffs
from botkit.memory.plugin import MemoryHost, enable_memory
from botkit.memory.store import MemoryStore
from botkit.payments.plans import Plan, load_plans
from botkit.payments.service import PaymentHost, Payments
from botkit.plugins import PromptPlugin, ToolPlugin
from botkit.privacy.command import ForgetMeHost, enable_forget_me
from botkit.reminders.commands import register_scheduling_commands
from botkit.reminders.service import Reminders
from botkit.reminders.tools import SchedulingPlugin
from botkit.skills import SkillLibrary, load_skills

__all__ = ["FeatureHost", "attach_features", "close_features"]


class FeatureHost(
    CommandHost,
    AdminHost,
    PaymentHost,
    MemoryHost,
    ForgetMeHost,
    HandoffHost,
    ApprovalHost,
    Protocol,
):
    """A bot the features attach to: what each of them needs, and where each is kept."""

    skills: SkillLibrary
    payments: Payments
    reminders: Reminders
    memory: MemoryStore | None
    handoffs: Handoffs | None
    approvals: Approvals


def attach_features(bot: FeatureHost, plans: Iterable[Plan] = ()) -> None:
    """Give ``bot`` its features; ``plans`` are sold beside those of BOTKIT_PLANS."""
    settings = bot.settings
    bot.skills = load_skills(settings.skills_dir) if settings.skills_dir else SkillLibrary()
    if bot.skills:
        bot.plugins += [PromptPlugin(bot.skills.prompt_section()), ToolPlugin(bot.skills)]
    register_builtin_commands(bot)
    register_admin_commands(bot)
    bot.payments = Payments(bot, load_plans(settings.plans, plans), bot.access)
    bot.payments.register()
    bot.reminders = Reminders(bot.access.user_store, settings)
    if bot.options.scheduling:
        bot.plugins.append(SchedulingPlugin(bot.reminders))
        register_scheduling_commands(bot, bot.reminders)
    bot.memory = enable_memory(bot)
    enable_forget_me(bot)  # /forget_me, unless BOTKIT_FORGET_ME=false
    bot.handoffs = attach_handoffs(bot)
    bot.approvals = Approvals(bot)
    register_console_command(bot, bot.options.console_texts)  # with BOTKIT_CONSOLE_PORT or _URL
    bot.buttons[APPROVAL_BUTTONS] = bot.approvals.on_press


async def close_features(bot: FeatureHost) -> None:
    """Release what the features opened: the payments' and approvals' stores, the memory."""
    await bot.payments.close()
    await bot.approvals.aclose()
    if bot.memory is not None:
        await bot.memory.close()
