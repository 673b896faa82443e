"""Each conversation's own assistant: the model, persona and standing instructions it chose,
within what the operator offers and the user's plan unlocks.

The pipeline asks :meth:`Choices.for_turn` once a turn, before it builds the prompt and the
tools: the answer (a :class:`~botkit.choices.turn.TurnChoice`) names the model, adds the
persona's prompt and the user's instructions to the system prompt, and narrows the tools to
the persona's. A bot that offers nothing to choose (one model, no personas, no instructions)
never reads the store. What users see and press lives in ``botkit.choices.menus``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from botkit.access import Access
from botkit.chats import conversation_of
from botkit.choices.personas import Persona
from botkit.choices.store import Choice, ChoiceField, ChoiceStore, choice_store_for
from botkit.choices.texts import ChoiceTexts
from botkit.choices.turn import NO_CHOICE, TurnChoice
from botkit.claimnotes import ClaimNote
from botkit.commands import ButtonHandler, CommandHandler
from botkit.config import Settings
from botkit.memory.store import memory_key
from botkit.messengers.base import Incoming, Messenger
from botkit.payments.plans import Plan
from botkit.stores.base import UserStore

__all__ = [
    "BUTTON_PREFIX",
    "MAX_INSTRUCTIONS_CHARS",
    "ChoiceHost",
    "ChoiceSettings",
    "Choices",
    "known_choice",
]

log = structlog.get_logger(__name__)

BUTTON_PREFIX = "choice"
"""The data prefix of the choice buttons: ``choice:m:<model>``, ``choice:p:<persona id>``
(empty: the default), ``choice:i:clear``."""
MAX_INSTRUCTIONS_CHARS = 1_500
"""The longest standing instructions a user may give."""


@dataclass(frozen=True)
class ChoiceSettings:
    """What users may choose: the models, the personas and whether instructions are taken."""

    default_model: str
    models: tuple[str, ...]
    """BOTKIT_MODELS (the default model first), then the models plans unlock."""
    personas: tuple[Persona, ...] = ()
    instructions: bool = False
    group_context: str = "shared"
    plans: tuple[Plan, ...] = ()
    locked: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Each model or persona id a plan unlocks, with the titles of the plans that do."""

    @classmethod
    def from_settings(
        cls, settings: Settings, personas: Sequence[Persona], plans: Iterable[Plan]
    ) -> ChoiceSettings:
        """From BOTKIT_MODELS, BOTKIT_INSTRUCTIONS, the personas and the plans."""
        plans = tuple(plans)
        locked: dict[str, tuple[str, ...]] = {}
        for plan in plans:
            for name in {*plan.models, *plan.personas}:
                locked[name] = (*locked.get(name, ()), plan.title)
        locked.pop(settings.model, None)  # the default is everyone's
        offered = [settings.model, *settings.models, *(m for p in plans for m in p.models)]
        models = tuple(dict.fromkeys(offered))
        instructions = settings.instructions
        if instructions is None:
            instructions = len(models) > 1 or bool(personas)
        return cls(
            default_model=settings.model,
            models=models,
            personas=tuple(personas),
            instructions=instructions,
            group_context=settings.group_context,
            plans=plans,
            locked=locked,
        )

    @property
    def active(self) -> bool:
        """Whether users can choose anything."""
        return len(self.models) > 1 or bool(self.personas) or self.instructions


_CHOICES: ClaimNote[Choice | None] = ClaimNote("botkit_known_choice")
"""The running job's conversation's choices, as its claim read them."""


def known_choice(conversation: str, choice: Choice | None) -> None:
    """Note, for the turn running in this task, its conversation's choices as the job's claim
    just read them (``None``: none made): the turn takes them instead of a query, so a choice
    made by another process is seen at the next turn's claim."""
    _CHOICES.note(conversation, choice)


def _take_known(conversation: str) -> tuple[bool, Choice | None]:
    """Whether a claim just read ``conversation``'s choices, and them (taken once)."""
    return _CHOICES.take(conversation)


class ChoiceHost(Protocol):
    """What the choices need of a bot."""

    buttons: dict[str, ButtonHandler]
    access: Access
    messenger: Messenger | None

    def command(
        self, name: str, description: str, *, admin_only: bool = False, hidden: bool = False
    ) -> Callable[[CommandHandler], CommandHandler]:
        """Register a command."""
        ...


PlanOf = Callable[[int], Awaitable[str | None]]
"""The id of a user's current plan (``None``: none)."""


class Choices:
    """The conversations' choices: ``/model``, ``/persona``, ``/instructions``, their buttons,
    and what each turn applies."""

    def __init__(
        self,
        settings: ChoiceSettings,
        texts: ChoiceTexts,
        users: Callable[[], Awaitable[UserStore]],
        plan_of: PlanOf | None = None,
    ) -> None:
        self.settings = settings
        self.texts = texts
        self.personas = {persona.id: persona for persona in settings.personas}
        self._users = users
        self._plan_of = plan_of
        self._store: ChoiceStore | None = None
        self._host: ChoiceHost | None = None

    def __bool__(self) -> bool:
        return self.settings.active

    def attach(self, host: ChoiceHost) -> None:
        """Ask ``host`` who a group's admins are; with models to pick, count budgets at the
        default model's prices (``botkit.choices.menus`` adds the commands and buttons)."""
        if not self:
            return
        self._host = host
        if len(self.settings.models) > 1 or any(p.model for p in self.personas.values()):
            host.access.budget_model = self.settings.default_model  # a dear pick costs more

    async def store(self) -> ChoiceStore:
        """The choice store, beside the user store, opened on first use."""
        if self._store is None:
            self._store = choice_store_for(await self._users())
        return self._store

    async def close(self) -> None:
        """Close the choice store, if it was opened."""
        if self._store is not None:
            await self._store.close()
            self._store = None

    # ---- the turn -----------------------------------------------------------------------

    async def for_turn(self, message: Incoming) -> TurnChoice:
        """What ``message``'s conversation chose, as this turn applies it: a choice its
        chooser's plan no longer unlocks falls back to the default (once, with a notice)."""
        if not self:
            return NO_CHOICE
        key = self.key_of(message)
        read, choice = _take_known(key)  # a queued job's claim read them (PostgreSQL)
        if not read:
            choice = await (await self.store()).get(key)
        if choice is None:
            return NO_CHOICE
        lost = await self._lost(choice)
        if lost:
            choice = await self._fall_back(choice, lost)
        persona = self.personas.get(choice.persona or "")
        model = choice.model or (persona.model if persona else None)
        instructions = choice.instructions if self.settings.instructions else None
        notice = self._lost_notice(lost) if lost else None
        return TurnChoice(model, persona, instructions, notice)

    async def _lost(self, choice: Choice) -> dict[ChoiceField, str]:
        """The choices no longer allowed: a plan's that ended, or withdrawn by the operator."""
        lost: dict[ChoiceField, str] = {}
        if choice.model and not await self._allowed(choice.model, choice.user_id, model=True):
            lost["model"] = choice.model
        if choice.persona and not await self._allowed(choice.persona, choice.user_id):
            lost["persona"] = choice.persona
        return lost

    async def _fall_back(self, choice: Choice, lost: dict[ChoiceField, str]) -> Choice:
        log.info("choice.fell_back", conversation=choice.conversation, lost=list(lost.values()))
        changes: dict[ChoiceField, str | None] = dict.fromkeys(lost)
        return await (await self.store()).set(choice.conversation, choice.user_id, changes)

    def _lost_notice(self, lost: dict[ChoiceField, str]) -> str:
        names = " and ".join(self.name_of(name) for name in lost.values())
        fallback = " and ".join(
            self.settings.default_model if kind == "model" else self.texts.default_persona
            for kind in lost
        )
        ended = all(name in self.settings.locked for name in lost.values())
        text = self.texts.no_longer_yours if ended else self.texts.no_longer_offered
        return text.format(names=names, fallback=fallback)

    async def _allowed(self, name: str, user_id: int, *, model: bool = False) -> bool:
        """Whether ``user_id`` may use the model (or persona) ``name`` now."""
        offered = name in self.settings.models if model else name in self.personas
        if not offered:
            return False
        if name not in self.settings.locked:
            return True
        return name in await self.unlocked(user_id)

    async def unlocked(self, user_id: int) -> frozenset[str]:
        """The models and personas ``user_id``'s current plan unlocks."""
        plan_id = await self._plan_of(user_id) if self._plan_of is not None else None
        for plan in self.settings.plans:
            if plan.id == plan_id:
                return frozenset({*plan.models, *plan.personas})
        return frozenset()

    def key_of(self, message: Incoming) -> str:
        """The conversation ``message`` chooses for: a private chat, or a group's."""
        conversation = conversation_of(message, self.settings.group_context)
        return memory_key(conversation.owner_id, conversation.key)

    def name_of(self, name: str) -> str:
        """How users know a model or persona: a persona's title, a model's name."""
        persona = self.personas.get(name)
        return persona.title if persona is not None else name

    # ---- choosing -----------------------------------------------------------------------

    async def choose(self, message: Incoming, kind: ChoiceField, value: str | None) -> str | None:
        """Set the conversation's model or persona to ``value`` (``None``: the default) for
        its sender: ``None`` when done, else the text refusing it (not offered, locked)."""
        if value is not None:
            refusal = await self._refusal(value, message.user_id, model=kind == "model")
            if refusal is not None:
                log.info("choice.refused", user_id=message.user_id, kind=kind, value=value)
                return refusal
        changes: dict[ChoiceField, str | None] = {kind: value}
        persona = self.personas.get(value or "") if kind == "persona" else None
        if persona is not None and persona.model is not None:
            changes["model"] = None  # the persona's own model, until another is picked
        await (await self.store()).set(self.key_of(message), message.user_id, changes)
        log.info("choice.made", user_id=message.user_id, kind=kind, value=value)
        return None

    async def _refusal(self, name: str, user_id: int, *, model: bool) -> str | None:
        offered = name in self.settings.models if model else name in self.personas
        if not offered:
            return self.texts.not_offered
        if await self._allowed(name, user_id, model=model):
            return None
        plans = " or ".join(self.settings.locked[name])
        return self.texts.locked.format(name=self.name_of(name), plans=plans)

    async def may_choose(self, message: Incoming) -> bool:
        """Private chats and per-member group conversations choose for themselves; a shared
        group's admins choose for it."""
        if not message.in_group or self.settings.group_context == "per_user":
            return True
        if self._host is None:
            return False
        return await self._host.access.is_group_admin(message, self._host.messenger)

    async def current(self, message: Incoming) -> Choice:
        """The conversation's choices as stored (nothing chosen: an empty one)."""
        choice = await (await self.store()).get(self.key_of(message))
        return choice or Choice(self.key_of(message), message.user_id)
