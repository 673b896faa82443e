"""The features every ``Bot`` is built with, attached in one place (each lives in its package).

Skills, the built-in and admin commands, payments, choices (models, personas,
instructions), reminders, memory, ``/forget_me``, handoffs, approvals and voice: each registers
its commands, buttons and plugins on the bot, in this
order (it is the order of the menu and ``/help``), and ``close_features`` releases what they
opened.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from botkit.admin import AdminHost, register_admin_commands
from botkit.approvals.request import BUTTON_PREFIX as APPROVAL_BUTTONS
from botkit.approvals.service import ApprovalHost, Approvals
from botkit.choices.menus import ChoiceMenus
from botkit.choices.personas import Persona, load_personas
from botkit.choices.service import ChoiceHost, Choices, ChoiceSettings
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
from botkit.voice.attach import VoiceHost, attach_voice
from botkit.voice.service import Voice

__all__ = ["FeatureHost", "attach_features", "close_features"]


class FeatureHost(
    CommandHost,
    AdminHost,
    PaymentHost,
    MemoryHost,
    ForgetMeHost,
    HandoffHost,
    ApprovalHost,
    VoiceHost,
    ChoiceHost,
    Protocol,
):
    """A bot the features attach to: what each of them needs, and where each is kept."""

    skills: SkillLibrary
    payments: Payments
    reminders: Reminders
    memory: MemoryStore | None
    handoffs: Handoffs | None
    approvals: Approvals
    voice: Voice | None
    choices: Choices


def attach_features(
    bot: FeatureHost, plans: Iterable[Plan] = (), personas: Iterable[Persona] = ()
) -> None:
    """Give ``bot`` its features; ``plans`` are sold beside those of BOTKIT_PLANS,
    ``personas`` offered beside those of BOTKIT_PERSONAS_DIR."""
    settings = bot.settings
    bot.skills = load_skills(settings.skills_dir) if settings.skills_dir else SkillLibrary()
    if bot.skills:
        bot.plugins += [PromptPlugin(bot.skills.prompt_section()), ToolPlugin(bot.skills)]
    register_builtin_commands(bot)
    register_admin_commands(bot)
    bot.payments = Payments(bot, load_plans(settings.plans, plans), bot.access)
    bot.payments.register()
    bot.choices = _choices(bot, personas)
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
    bot.voice = attach_voice(bot)  # /voice last: after every other command in the menu


def _choices(bot: FeatureHost, personas: Iterable[Persona]) -> Choices:
    """The models, personas and instructions users may choose (registered when any)."""
    settings = bot.settings
    offered = load_personas(settings.personas_dir, personas)
    plans = bot.payments.plans.values()
    choice_settings = ChoiceSettings.from_settings(settings, offered, plans)
    plan_of = bot.payments.current_plan_id if bot.payments else None
    choices = Choices(choice_settings, bot.options.choice_texts, bot.access.user_store, plan_of)
    choices.attach(bot)
    ChoiceMenus(choices, bot.options.choice_texts).register(bot)
    return choices


async def close_features(bot: FeatureHost) -> None:
    """Release what the features opened: the payments' and approvals' stores, the memory."""
    await bot.payments.close()
    await bot.approvals.aclose()
    await bot.choices.close()
    if bot.memory is not None:
        await bot.memory.close()
    if bot.voice is not None:
        await bot.voice.close()
