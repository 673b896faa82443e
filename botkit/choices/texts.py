"""What users are told about their choices (``BotOptions.choice_texts``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ChoiceTexts"]


@dataclass(frozen=True)
class ChoiceTexts:
    """The texts of ``/model``, ``/persona``, ``/instructions`` and their buttons."""

    model_menu: str = "This conversation uses {current}. Pick a model:"
    model_button: str = "{model} · {price}"
    """One model's button; ``{price}`` is its price hint."""
    price_hint: str = "${input:g}/${output:g} per M tokens"
    """Dollars per million input and output tokens."""
    unknown_price: str = "price unknown"
    chosen_mark: str = "✓ "
    locked_button: str = "🔒 {name} · {plans}"
    """A choice a plan unlocks, shown to someone without that plan."""
    model_chosen: str = "This conversation now uses {model}."
    persona_menu: str = "This conversation talks as {current}. Pick a persona:"
    persona_line: str = "**{title}**: {description}"
    default_persona: str = "Default"
    persona_chosen: str = "This conversation now talks as {title}."
    not_offered: str = "That is not one of the choices here: send /model or /persona."
    locked: str = "{name} comes with {plans}: send /plans."
    group_admins_only: str = "Only the group's admins choose for this conversation."
    instructions_shown: str = "Your standing instructions for this conversation:\n\n{text}"
    instructions_none: str = (
        "No standing instructions yet. Send /instructions followed by what I should always "
        "keep in mind here (at most {limit} characters)."
    )
    instructions_saved: str = "Saved: I will keep these in mind in this conversation."
    instructions_cleared: str = "Your standing instructions are cleared."
    instructions_too_long: str = (
        "That is {length} characters; standing instructions may have at most {limit}. "
        "Nothing was saved."
    )
    clear_button: str = "Clear them"
    no_longer_yours: str = "{names} is no longer yours (your plan has ended): back to {fallback}."
    """Told once, before the answer, when a plan that unlocked a choice has ended."""
    no_longer_offered: str = "{names} is no longer offered here: back to {fallback}."
    """Told once, before the answer, when the operator withdrew a choice."""
