"""``/model``, ``/persona``, ``/instructions`` and their buttons: what users see and press to
choose. Every press is checked as a typed choice is (``Choices.choose``)."""

from __future__ import annotations

import structlog

from botkit.choices.service import BUTTON_PREFIX, MAX_INSTRUCTIONS_CHARS, ChoiceHost, Choices
from botkit.choices.store import ChoiceField
from botkit.choices.texts import ChoiceTexts
from botkit.commands import PressAnswer
from botkit.messengers.base import Button, ButtonPress, Incoming, Reply
from botkit.pricing import price_for

__all__ = ["ChoiceMenus"]

log = structlog.get_logger(__name__)


class ChoiceMenus:
    """The commands and buttons of the choices."""

    def __init__(self, choices: Choices, texts: ChoiceTexts) -> None:
        self.choices = choices
        self.texts = texts

    def register(self, host: ChoiceHost) -> None:
        """Add ``/model`` (with several models), ``/persona`` (with personas),
        ``/instructions`` and the buttons; nothing when nothing can be chosen."""
        settings = self.choices.settings
        if not settings.active:
            return
        if len(settings.models) > 1:
            host.command("model", "Pick the model of this conversation")(self.model_command)
        if self.choices.personas:
            host.command("persona", "Pick how I talk in this conversation")(self.persona_command)
        if settings.instructions:
            host.command("instructions", "Your standing instructions for me")(self.instructions)
        host.buttons[BUTTON_PREFIX] = self.press

    async def model_command(self, message: Incoming, args: str) -> str | Reply:
        """``/model``: the models as buttons; ``/model NAME`` picks one."""
        wanted = args.strip()
        if wanted:
            if not await self.choices.may_choose(message):
                return self.texts.group_admins_only
            refusal = await self.choices.choose(message, "model", wanted)
            return refusal or self.texts.model_chosen.format(model=wanted)
        return await self._model_menu(message)

    async def _model_menu(self, message: Incoming) -> Reply:
        choice = await self.choices.for_turn(message)
        current = choice.model or self.choices.settings.default_model
        unlocked = await self.choices.unlocked(message.user_id)
        rows = []
        for model in self.choices.settings.models:
            label = self.texts.model_button.format(model=model, price=self._price(model))
            locked = self.choices.settings.locked.get(model)
            if locked and model not in unlocked:
                label = self.texts.locked_button.format(name=label, plans=" or ".join(locked))
            elif model == current:
                label = self.texts.chosen_mark + label
            rows.append((Button(label, f"{BUTTON_PREFIX}:m:{model}"),))
        return Reply(self.texts.model_menu.format(current=current), tuple(rows))

    def _price(self, model: str) -> str:
        price = price_for(model)
        if price is None:
            return self.texts.unknown_price
        return self.texts.price_hint.format(input=price.input, output=price.output)

    async def persona_command(self, message: Incoming, args: str) -> str | Reply:
        """``/persona``: the personas as buttons; ``/persona ID`` picks one."""
        wanted = args.strip()
        if wanted:
            if not await self.choices.may_choose(message):
                return self.texts.group_admins_only
            refusal = await self.choices.choose(message, "persona", wanted)
            return refusal or self.texts.persona_chosen.format(title=self.choices.name_of(wanted))
        return await self._persona_menu(message)

    async def _persona_menu(self, message: Incoming) -> Reply:
        choice = await self.choices.for_turn(message)
        current = choice.persona.id if choice.persona else ""
        unlocked = await self.choices.unlocked(message.user_id)
        default = self.texts.default_persona
        lines = [
            self.texts.persona_menu.format(
                current=choice.persona.title if choice.persona else default
            )
        ]
        rows = [(Button(self._marked(default, not current), f"{BUTTON_PREFIX}:p:"),)]
        for persona in self.choices.personas.values():
            lines.append(
                self.texts.persona_line.format(title=persona.title, description=persona.description)
            )
            locked = self.choices.settings.locked.get(persona.id)
            if locked and persona.id not in unlocked:
                label = self.texts.locked_button.format(
                    name=persona.title, plans=" or ".join(locked)
                )
            else:
                label = self._marked(persona.title, persona.id == current)
            rows.append((Button(label, f"{BUTTON_PREFIX}:p:{persona.id}"),))
        return Reply("\n".join(lines), tuple(rows))

    def _marked(self, label: str, chosen: bool) -> str:
        return self.texts.chosen_mark + label if chosen else label

    async def instructions(self, message: Incoming, args: str) -> str | Reply:
        """``/instructions``: shows them; with a text, keeps it; ``clear`` clears them."""
        text = args.strip()
        if text and not await self.choices.may_choose(message):
            return self.texts.group_admins_only
        if text.lower() == "clear":
            await self._set_instructions(message, None)
            return self.texts.instructions_cleared
        if len(text) > MAX_INSTRUCTIONS_CHARS:
            return self.texts.instructions_too_long.format(
                length=len(text), limit=MAX_INSTRUCTIONS_CHARS
            )
        if text:
            await self._set_instructions(message, text)
            return self.texts.instructions_saved
        current = (await self.choices.current(message)).instructions
        if not current:
            return self.texts.instructions_none.format(limit=MAX_INSTRUCTIONS_CHARS)
        clear = Button(self.texts.clear_button, f"{BUTTON_PREFIX}:i:clear")
        return Reply(self.texts.instructions_shown.format(text=current), ((clear,),))

    async def _set_instructions(self, message: Incoming, text: str | None) -> None:
        changes: dict[ChoiceField, str | None] = {"instructions": text}
        await (await self.choices.store()).set(
            self.choices.key_of(message), message.user_id, changes
        )
        log.info("choice.instructions", user_id=message.user_id, chars=len(text or ""))

    async def press(self, press: ButtonPress, payload: str) -> PressAnswer:
        """A choice button, checked like a typed choice: a button for a model or persona
        not offered (or forged), or locked to a plan the presser lacks, changes nothing."""
        message = press.as_incoming()
        kind, _, value = payload.partition(":")
        if kind not in ("m", "p", "i"):
            return PressAnswer(self.texts.not_offered)
        if not await self.choices.may_choose(message):
            return PressAnswer(self.texts.group_admins_only)
        if kind == "i":
            await self._set_instructions(message, None)
            return PressAnswer(
                self.texts.instructions_cleared, Reply(self.texts.instructions_cleared)
            )
        if kind == "m":
            refusal = await self.choices.choose(message, "model", value)
            if refusal is not None:
                return PressAnswer(refusal)
            notice = self.texts.model_chosen.format(model=value)
            return PressAnswer(notice, await self._model_menu(message))
        refusal = await self.choices.choose(message, "persona", value or None)
        if refusal is not None:
            return PressAnswer(refusal)
        title = self.choices.name_of(value) if value else self.texts.default_persona
        notice = self.texts.persona_chosen.format(title=title)
        return PressAnswer(notice, await self._persona_menu(message))
