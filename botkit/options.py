"""How a bot behaves: its options, and the types of the steps a bot may pass as callbacks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from botkit.agent.loop import LoopTexts
from botkit.approvals.texts import ApprovalTexts
from botkit.choices.texts import ChoiceTexts
from botkit.console.texts import ConsoleTexts
from botkit.files import FileTexts, Transcribe
from botkit.memory.texts import MemoryTexts
from botkit.messengers.base import Incoming
from botkit.payments.texts import PaymentTexts
from botkit.privacy.texts import PrivacyTexts
from botkit.tools import Tool, ToolRegistry
from botkit.voice.texts import VoiceTexts

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "PLAIN_FORMAT_NOTE",
    "RICH_FORMAT_NOTE",
    "Authorize",
    "BotOptions",
    "BuildExtra",
    "BuildPrompt",
    "BuildTools",
    "HandleStart",
    "Transcribe",
]

HandleStart = Callable[[Incoming, str], Awaitable[str | None]]
"""``/start <payload>``: a non-empty reply is sent and ends the update."""
Authorize = Callable[[Incoming], Awaitable[str | None]]
"""A non-empty string rejects the message with that text; no LLM call is made."""
BuildExtra = Callable[[Incoming], Awaitable[Any]]
"""What tools receive as ``ToolContext.extra`` for this turn (e.g. a database pool)."""
BuildTools = Callable[[Incoming], Awaitable[ToolRegistry | Sequence[Tool]]]
"""The tools offered to the model for this turn."""
BuildPrompt = Callable[[Incoming], Awaitable[str]]
"""The system prompt for this turn."""

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant talking with people on Telegram. Answer clearly and "
    "briefly; use tools when they help. People can send you text, photos (several at once "
    "too), PDFs and text files such as .txt, .md, .csv, .json or source code; voice messages "
    "reach you as text when transcription is set up. Files and pictures your tools make are "
    "sent to the chat."
)
RICH_FORMAT_NOTE = (
    "Your replies are shown as Telegram rich messages: Markdown headings, tables, lists, "
    "checklists, code blocks and LaTeX formulas ($x^2$ inline, $$...$$ on lines of their "
    "own) render natively; use them where they make an answer clearer. There are no "
    "collapsible sections."
)
"""What the default prompt tells the model with BOTKIT_RICH_MESSAGES=auto."""
PLAIN_FORMAT_NOTE = (
    "Your replies are shown as Telegram messages: bold, italic, links, lists, quotes and "
    "code blocks render; tables, headings, formulas and collapsible sections do not (a table "
    "shows as aligned text, a formula as its source), so prefer lists and plain wording."
)
"""What the default prompt tells the model with BOTKIT_RICH_MESSAGES=off."""


@dataclass(frozen=True)
class BotOptions:
    """How a bot behaves; callbacks given here replace the methods of the same name."""

    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_iterations: int = 10
    """LLM calls one turn may make before the user is told it stopped."""
    max_parallel_tools: int = 8
    """Tool calls run from one answer; more get an error result asking the model for fewer."""
    max_messages: int = 40
    """Messages of history sent to the model, at most (tool chains are never split)."""
    rejection_text: str = "Sorry, this bot is private."
    overloaded_text: str = (
        "I'm overloaded right now and couldn't answer. Please try again in a minute."
    )
    error_text: str = "Sorry, something went wrong on my side. Please try again."
    unsupported_text: str = (
        "Sorry, I can only read text, photos, PDFs and text files. Please write your message "
        "as text."
    )
    stopped_text: str = "Stopped."
    given_up_text: str = (
        "Sorry, I couldn't handle this message: trying to answer it broke me each time, so "
        "I've set it aside. Your next messages will be answered as usual."
    )
    """Sent (as a reply to it) when a message is given up after its turn crashed the bot
    ``BOTKIT_MAX_JOB_ATTEMPTS`` times."""
    unknown_command_text: str = "I don't know /{command}. These are my commands:"
    max_input_chars: int = 16_000
    """Longer user messages are cut, with a note telling the model so."""
    max_contexts: int = 1_000
    """Contexts kept in memory; the least recently used are dropped and rebuilt on demand."""
    max_context_chars: int = 200_000
    """A context past 80 % of this is compacted: older messages become a summary."""
    admin_only_text: str = "Only admins can do that."
    group_admin_only_text: str = "Only this group's admins can do that."
    welcome_text: str = "Welcome! You're in. Just write to me."
    already_registered_text: str = "You're already registered. Just write to me."
    invite_unknown_text: str = "This invite link is not valid. Ask for a new one."
    invite_expired_text: str = "This invite link has expired. Ask for a new one."
    invite_used_up_text: str = "This invite link has already been used. Ask for a new one."
    budget_text: str = "You've used today's allowance of tokens. Please come back tomorrow."
    media_refused_text: str = (
        "Sorry, Claude could not take the files of that message (too large, or too many pages "
        "or pixels), so I've set it aside. Please send smaller files, or fewer at once."
    )
    """The API refused a message's media: the message is not kept in the conversation."""
    help_text: str = (
        "Just write to me, or send photos (albums too), PDFs and text files (.txt, .md, .csv, "
        ".json, source code); I can also use tools when they help. Commands:"
    )
    console_help_text: str = (
        "Just write to me: here in the terminal I read text only; I can also use tools when "
        "they help. /press N presses button N under my last message with buttons. Commands:"
    )
    """The help's first line in ``python -m botkit console``, which takes no files."""
    voice_help_text: str = "I understand voice messages too."
    """Added to the help when the bot can transcribe."""
    file_texts: FileTexts = field(default_factory=FileTexts)
    voice_texts: VoiceTexts = field(default_factory=VoiceTexts)
    """What users are told about voice (limits, ``/voice``) and hear (spoken notes)."""
    """What users are told about files that are too large or cannot be read."""
    max_text_file_chars: int = 100_000
    """A text file with more characters is refused (it would crowd the conversation out)."""
    clear_text: str = (
        "Done: we start afresh, and I no longer see our earlier messages. They stay in this "
        "bot's records, which its operator keeps."
    )
    """``/clear``'s reply: says what happens, as the session file keeps the earlier messages."""
    group_clear_text: str = (
        "Done: this group starts afresh, and I no longer see its earlier messages. They stay "
        "in this bot's records, which its operator keeps."
    )
    typing_interval: float = 4.0
    """Seconds between "typing…" signals while a turn runs."""
    typing_delay: float = 1.0
    """A turn quicker than this shows no "typing…" at all: its answer is the sign of life."""
    scheduling: bool = True
    """Offer reminders and scheduled tasks: the tools, ``/timezone``, ``/scheduled``, and the
    user's local time before each message."""
    whoami_text: str = "You are Telegram user {user_id}; your role here: {role}."
    """``/whoami``'s answer."""
    stranger_whoami_text: str = (
        "You are Telegram user {user_id}. This bot is private: ask its admin for an invite link."
    )
    """``/whoami``'s answer to someone the bot does not admit (instead of ``rejection_text``)."""
    feature_prompts: bool = True
    """Add the features' prompt parts (reminders and the user's time zone, skills, ...) after
    whatever ``build_prompt`` returns; ``False``: the prompt is ``build_prompt``'s alone."""
    task_put_off_text: str = (
        "Scheduled task #{id} was put off to {when}: scheduled tasks may run {runs} times a day."
    )
    """Sent instead of a task's answer when its user's tasks used up today's runs
    (BOTKIT_MAX_TASK_RUNS); ``{id}``, ``{when}`` (their local time) and ``{runs}`` are filled in."""
    loop_texts: LoopTexts = field(default_factory=LoopTexts)
    handoff_opened_text: str = "I've asked a person to join us. They'll answer you here shortly."
    """``/human`` or the ``handoff`` tool (BOTKIT_OPERATORS_CHAT): a person will answer."""
    handoff_already_text: str = "A person is already on this conversation; they'll answer here."
    handoff_closed_text: str = "The person has handed you back to me, the assistant."
    """Sent to the user when an operator ends the handoff (``/done`` in the topic)."""
    handoff_unavailable_text: str = (
        "Sorry, I couldn't reach a person just now. I'll keep helping you myself."
    )
    """Sent when the operators' topic cannot be opened or written to (the log says why)."""
    handoff_private_only_text: str = "Write /human to me in a private chat to reach a person."
    handoff_topic_text: str = (
        "{name} (user {user_id}) is handed to you. Reason: {reason}\n\n{summary}\n\n"
        "What you write in this topic goes to them; /done hands them back to the assistant."
    )
    """Posted in the user's topic when it opens; ``{name}``, ``{user_id}``, ``{reason}`` and
    ``{summary}`` (the model's, or the last messages) are filled in."""
    handoff_done_text: str = "Handed back to the assistant."
    handoff_done_button: str = "Done"
    """The button under a topic's first post that ends the handoff, as ``/done`` does."""
    handoff_done_refused_text: str = (
        "Only this chat's admins and the bot's admins can end a handoff."
    )
    handoff_undelivered_text: str = "Not delivered to the user: {error}"
    handoff_held_call_text: str = (
        "A person from the team has taken over this conversation, so this call was not run."
    )
    """The result a call waiting for approval gets when it is decided during a handoff."""
    handoff_held_call_note: str = (
        "An approval was decided while you hold this conversation; the assistant did not run "
        "its call ({tools}) and stays silent."
    )
    """Told in the user's topic when that happens."""
    approval_texts: ApprovalTexts = field(default_factory=ApprovalTexts)
    """What approval requests say, their buttons, and the answers to presses."""
    payment_texts: PaymentTexts = field(default_factory=PaymentTexts)
    """What users are told about plans and payments (with BOTKIT_PLANS or ``Bot(plans=)``)."""
    choice_texts: ChoiceTexts = field(default_factory=ChoiceTexts)
    """The texts of ``/model``, ``/persona`` and ``/instructions`` (with BOTKIT_MODELS,
    BOTKIT_PERSONAS_DIR or ``Bot(personas=)``)."""
    memory: bool = True
    """Give each conversation a long-term memory the model manages (BOTKIT_MEMORY too)."""
    memory_texts: MemoryTexts = field(default_factory=MemoryTexts)
    privacy_texts: PrivacyTexts = field(default_factory=PrivacyTexts)
    """The texts of ``/forget_me`` (on with BOTKIT_FORGET_ME, the default)."""
    console_texts: ConsoleTexts = field(default_factory=ConsoleTexts)
    """What ``/console`` and the console's pages say (with BOTKIT_CONSOLE_PORT)."""
    handle_start: HandleStart | None = None
    authorize: Authorize | None = None
    build_extra: BuildExtra | None = None
    build_tools: BuildTools | None = None
    build_prompt: BuildPrompt | None = None
    transcribe: Transcribe | None = None
    """Voice notes and audio files to text; without it they get ``unsupported_text``."""

    def prompt_for(self, *, rich: bool) -> str:
        """``system_prompt``; the default one also says what renders in the chat (tables and
        formulas with rich messages, or not)."""
        if self.system_prompt != DEFAULT_SYSTEM_PROMPT:
            return self.system_prompt
        return f"{DEFAULT_SYSTEM_PROMPT} {RICH_FORMAT_NOTE if rich else PLAIN_FORMAT_NOTE}"
