"""Settings read from the environment and from ``.env``."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from botkit.errors import ConfigError

if TYPE_CHECKING:
    from botkit.llm.thinking import ThinkingSettings
    from botkit.tools.server import ServerTools

__all__ = [
    "DEFAULT_MODEL",
    "Settings",
    "setting_problems",
    "settings_without_invalid",
    "unknown_setting_names",
]

DEFAULT_MODEL = "claude-sonnet-5-5"
"""The model a bot talks to unless BOTKIT_MODEL names another."""
FREE_RATE = 30.0
"""Messages per second Telegram allows a bot across all chats without paid broadcasts."""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
NOT_SETTINGS = frozenset({"BOTKIT_TEST_DATABASE_URL", "BOTKIT_CI_VENV"})
"""BOTKIT_ names that are not settings but are known: the test suite's database, CI's venv."""

IdList = Annotated[frozenset[int], NoDecode]
DomainList = Annotated[tuple[str, ...], NoDecode]

_TOKEN = re.compile(r"[0-9]+:[A-Za-z0-9_-]+")
"""A bot token as @BotFather gives it: the bot's id, a colon, the secret."""


class Settings(BaseSettings):
    """botkit's configuration; every field has an environment variable of the same upper name."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    telegram_bot_token: SecretStr | None = None
    """TELEGRAM_BOT_TOKEN: the token @BotFather gave the bot."""
    anthropic_api_key: SecretStr | None = None
    """ANTHROPIC_API_KEY: the key for the Messages API."""
    telegram_api_base: str | None = None
    """TELEGRAM_API_BASE: another Bot API server, e.g. a local one or a test double."""
    anthropic_base_url: str | None = None
    """ANTHROPIC_BASE_URL: another Messages API server, honoured as the SDK does."""
    model: str = Field(DEFAULT_MODEL, validation_alias=AliasChoices("BOTKIT_MODEL", "model"))
    """BOTKIT_MODEL: the Claude model to talk to."""
    max_tokens: int = Field(
        4096, ge=1, validation_alias=AliasChoices("BOTKIT_MAX_TOKENS", "max_tokens")
    )
    """BOTKIT_MAX_TOKENS: the output limit of one LLM call."""
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_EFFORT", "effort")
    )
    """BOTKIT_EFFORT: how much the model thinks and writes (low, medium, high, xhigh, max);
    unset: the model's default."""
    thinking: Literal["adaptive", "between_tools", "off"] | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_THINKING", "thinking")
    )
    """BOTKIT_THINKING: adaptive, between_tools (Sonnet 5.5: no thinking before the first tool
    call) or off (where the model can turn it off); unset: the model's default."""
    thinking_display: Literal["omitted", "summarized"] | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_THINKING_DISPLAY", "thinking_display")
    )
    """BOTKIT_THINKING_DISPLAY: summarized to get the model's reasoning as text (shown while
    tools run, kept in the session), omitted for none; unset: the model's default."""
    cache_ttl: Literal["auto", "5m", "1h"] = Field(
        "auto", validation_alias=AliasChoices("BOTKIT_CACHE_TTL", "cache_ttl")
    )
    """BOTKIT_CACHE_TTL: how long the prompt cache keeps a conversation (auto: an hour for
    conversations that lately paused longer than five minutes, else five minutes; 5m; 1h)."""
    cache_keep_warm: bool = Field(
        True, validation_alias=AliasChoices("BOTKIT_CACHE_KEEP_WARM", "cache_keep_warm")
    )
    """BOTKIT_CACHE_KEEP_WARM: while a paused conversation (one kept an hour) used them in the
    last hour, read the tools and system prompt from the cache every 55 minutes with a one-token
    request (0.1x their input price) so a moved history window or a late return does not
    write them again at 2x."""
    web_search: bool = Field(
        False, validation_alias=AliasChoices("BOTKIT_WEB_SEARCH", "web_search")
    )
    """BOTKIT_WEB_SEARCH: let the model search the web (the API runs it; $10 per 1,000
    searches, counted in usage and budgets)."""
    web_fetch: bool = Field(False, validation_alias=AliasChoices("BOTKIT_WEB_FETCH", "web_fetch"))
    """BOTKIT_WEB_FETCH: let the model read web pages the conversation names (the API fetches
    them; their text is billed as input)."""
    web_domains: DomainList = Field(
        (), validation_alias=AliasChoices("BOTKIT_WEB_DOMAINS", "web_domains")
    )
    """BOTKIT_WEB_DOMAINS: comma-separated domains web search and fetch may reach (empty: any)."""
    web_max_uses: int = Field(
        5, ge=1, validation_alias=AliasChoices("BOTKIT_WEB_MAX_USES", "web_max_uses")
    )
    """BOTKIT_WEB_MAX_USES: the most searches (and fetches) the model may make in one call."""
    sessions_dir: Path = Field(
        Path("sessions"), validation_alias=AliasChoices("BOTKIT_SESSIONS_DIR", "sessions_dir")
    )
    """BOTKIT_SESSIONS_DIR: where the per-user JSONL session files live."""
    allowed_users: IdList = Field(
        frozenset(), validation_alias=AliasChoices("BOTKIT_ALLOWED_USERS", "allowed_users")
    )
    """BOTKIT_ALLOWED_USERS: comma-separated Telegram user ids admitted by the default gate."""
    admins: IdList = Field(frozenset(), validation_alias=AliasChoices("BOTKIT_ADMINS", "admins"))
    """BOTKIT_ADMINS: comma-separated Telegram user ids with admin rights."""
    poll_timeout: int = Field(
        30, ge=0, validation_alias=AliasChoices("BOTKIT_POLL_TIMEOUT", "poll_timeout")
    )
    """BOTKIT_POLL_TIMEOUT: seconds one getUpdates long poll may wait."""
    max_concurrent_turns: int = Field(
        64,
        ge=1,
        validation_alias=AliasChoices("BOTKIT_MAX_CONCURRENT_TURNS", "max_concurrent_turns"),
    )
    """BOTKIT_MAX_CONCURRENT_TURNS: turns (and so LLM calls) running at once, across users."""
    grace_period: float = Field(
        25.0, ge=0, validation_alias=AliasChoices("BOTKIT_GRACE_PERIOD", "grace_period")
    )
    """BOTKIT_GRACE_PERIOD: seconds running turns may take to finish after SIGTERM."""
    stream_replies: bool = Field(
        True, validation_alias=AliasChoices("BOTKIT_STREAM_REPLIES", "stream_replies")
    )
    """BOTKIT_STREAM_REPLIES: stream answers as live drafts in private chats."""
    rich_messages: Literal["auto", "off"] = Field(
        "auto", validation_alias=AliasChoices("BOTKIT_RICH_MESSAGES", "rich_messages")
    )
    """BOTKIT_RICH_MESSAGES: ``auto``: replies go out as Telegram rich messages (Bot API 10.1:
    tables, headings, math and collapsible sections render) and stream as rich drafts; a
    server without them (404) gets HTML until restart. ``off``: HTML messages and drafts."""
    reactions: Literal["on", "off"] = Field(
        "off", validation_alias=AliasChoices("BOTKIT_REACTIONS", "reactions")
    )
    """BOTKIT_REACTIONS: ``on``: the bot puts 👀 on a message it takes and removes it once it
    has answered. Users' reactions to replies are recorded as feedback either way."""
    answer_groups: Literal["mention", "all"] = Field(
        "mention", validation_alias=AliasChoices("BOTKIT_ANSWER_GROUPS", "answer_groups")
    )
    """BOTKIT_ANSWER_GROUPS: ``mention`` (only when mentioned or replied to) or ``all``."""
    global_rate: float = Field(
        30.0, gt=0, validation_alias=AliasChoices("BOTKIT_GLOBAL_RATE", "global_rate")
    )
    """BOTKIT_GLOBAL_RATE: messages per second across all chats (Telegram allows ~30; more
    only with BOTKIT_PAID_BROADCAST)."""
    paid_broadcast: bool = Field(
        False, validation_alias=AliasChoices("BOTKIT_PAID_BROADCAST", "paid_broadcast")
    )
    """BOTKIT_PAID_BROADCAST: send ``allow_paid_broadcast`` so a BOTKIT_GLOBAL_RATE over 30
    holds (Telegram charges Stars for every message over the free limit)."""
    group_context: Literal["shared", "per_user"] = Field(
        "shared", validation_alias=AliasChoices("BOTKIT_GROUP_CONTEXT", "group_context")
    )
    """BOTKIT_GROUP_CONTEXT: ``shared`` (one conversation per group and topic) or ``per_user``
    (one per member in each group and topic). Private chats never share anything."""
    group_rejection_interval: float = Field(
        3600.0,
        ge=0,
        validation_alias=AliasChoices(
            "BOTKIT_GROUP_REJECTION_INTERVAL", "group_rejection_interval"
        ),
    )
    """BOTKIT_GROUP_REJECTION_INTERVAL: seconds between two rejections of one stranger in one
    group (``0``: never say anything to strangers in groups)."""
    access: Literal["invite", "allowlist", "open"] = Field(
        "invite", validation_alias=AliasChoices("BOTKIT_ACCESS", "access")
    )
    """BOTKIT_ACCESS: ``invite`` (registered users, plus the allowlist), ``allowlist`` (only
    BOTKIT_ALLOWED_USERS) or ``open`` (anyone not blocked). Admins are always admitted."""
    database_url: SecretStr | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_DATABASE_URL", "database_url")
    )
    """BOTKIT_DATABASE_URL: PostgreSQL for users and invites; unset: an SQLite file."""
    database_path: Path | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_DATABASE_PATH", "database_path")
    )
    """BOTKIT_DATABASE_PATH: the SQLite file (default ``<sessions_dir>/botkit.db``)."""
    daily_token_budget: int | None = Field(
        None, ge=1, validation_alias=AliasChoices("BOTKIT_DAILY_TOKEN_BUDGET", "daily_token_budget")
    )
    """BOTKIT_DAILY_TOKEN_BUDGET: tokens one user may use per UTC day; unset: no limit."""
    skills_dir: Path | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_SKILLS_DIR", "skills_dir")
    )
    """BOTKIT_SKILLS_DIR: a folder of skills (``<name>/SKILL.md``) the model may load."""
    mcp_config: str | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_MCP_CONFIG", "mcp_config")
    )
    """BOTKIT_MCP_CONFIG: a JSON file (or inline JSON) ``{"mcpServers": {...}}`` of MCP
    servers whose tools the bot offers, named ``<server>__<tool>``."""
    webhook_url: str | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_WEBHOOK_URL", "webhook_url")
    )
    """BOTKIT_WEBHOOK_URL: the public HTTPS URL Telegram posts updates to (``receive``, and
    ``run`` with BOTKIT_DATABASE_URL); unset: long polling."""
    webhook_listen: str = Field(
        "127.0.0.1:8080", validation_alias=AliasChoices("BOTKIT_WEBHOOK_LISTEN", "webhook_listen")
    )
    """BOTKIT_WEBHOOK_LISTEN: ``host:port`` the webhook server listens on (loopback by default:
    put a TLS reverse proxy in front; ``0.0.0.0:8080`` exposes the port itself)."""
    http_max_connections: int = Field(
        256,
        ge=1,
        validation_alias=AliasChoices("BOTKIT_HTTP_MAX_CONNECTIONS", "http_max_connections"),
    )
    """BOTKIT_HTTP_MAX_CONNECTIONS: connections the webhook and ops servers keep open at once;
    past it new ones are closed at once."""
    http_read_timeout: float = Field(
        10.0,
        gt=0,
        le=10,
        validation_alias=AliasChoices("BOTKIT_HTTP_READ_TIMEOUT", "http_read_timeout"),
    )
    """BOTKIT_HTTP_READ_TIMEOUT: seconds the webhook and ops servers wait for a request's
    headers and body, and keep an idle connection open."""
    webhook_secret: SecretStr | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_WEBHOOK_SECRET", "webhook_secret")
    )
    """BOTKIT_WEBHOOK_SECRET: 1-256 of ``A-Z a-z 0-9 _ -``; Telegram sends it with every
    update and requests without it are refused (required in webhook mode)."""
    stalled_timeout: float = Field(
        8.0, gt=0, validation_alias=AliasChoices("BOTKIT_STALLED_TIMEOUT", "stalled_timeout")
    )
    """BOTKIT_STALLED_TIMEOUT: seconds without a heartbeat after which a worker counts as
    dead and its turns are picked up by the others (workers beat 4 times as often). A worker
    whose process ended is found sooner, within a second, by its liveness lock."""
    max_file_mb: float = Field(
        20.0, gt=0, validation_alias=AliasChoices("BOTKIT_MAX_FILE_MB", "max_file_mb")
    )
    """BOTKIT_MAX_FILE_MB: the largest file users may send, in MB (Telegram lets bots download
    at most 20); larger ones are refused before downloading."""
    max_image_pixels: int = Field(
        60_000_000,
        ge=1,
        validation_alias=AliasChoices("BOTKIT_MAX_IMAGE_PIXELS", "max_image_pixels"),
    )
    """BOTKIT_MAX_IMAGE_PIXELS: the most pixels (width x height) a picture users send may have;
    larger ones are refused from their header, before decoding."""
    image_memory_mb: float = Field(
        320.0, gt=0, validation_alias=AliasChoices("BOTKIT_IMAGE_MEMORY_MB", "image_memory_mb")
    )
    """BOTKIT_IMAGE_MEMORY_MB: the memory the whole process may use to decode pictures at
    once; a picture waits for room (a minute at most, then it is refused)."""
    max_media_mb: float = Field(
        200.0, gt=0, validation_alias=AliasChoices("BOTKIT_MAX_MEDIA_MB", "max_media_mb")
    )
    """BOTKIT_MAX_MEDIA_MB: the media (pictures, PDFs) one user may have stored, in MB; over it
    a file is refused before download."""
    retention_days: float | None = Field(
        None, gt=0, validation_alias=AliasChoices("BOTKIT_RETENTION_DAYS", "retention_days")
    )
    """BOTKIT_RETENTION_DAYS: session entries and media older than this are pruned (``prune``);
    unset: everything is kept."""
    max_job_attempts: int = Field(
        3, ge=1, validation_alias=AliasChoices("BOTKIT_MAX_JOB_ATTEMPTS", "max_job_attempts")
    )
    """BOTKIT_MAX_JOB_ATTEMPTS: starts of one update whose process died during it (a worker's
    job, or ``run``'s journal entry) before it is given up and its user told."""
    timezone: str = Field("UTC", validation_alias=AliasChoices("BOTKIT_TIMEZONE", "timezone"))
    """BOTKIT_TIMEZONE: the IANA time zone of users who have not set their own (``/timezone``)."""
    max_scheduled: int = Field(
        50, ge=1, validation_alias=AliasChoices("BOTKIT_MAX_SCHEDULED", "max_scheduled")
    )
    """BOTKIT_MAX_SCHEDULED: reminders and scheduled tasks one user may have pending."""
    min_task_interval: float = Field(
        3600.0,
        gt=0,
        validation_alias=AliasChoices("BOTKIT_MIN_TASK_INTERVAL", "min_task_interval"),
    )
    """BOTKIT_MIN_TASK_INTERVAL: the shortest repeat, in seconds, of a scheduled LLM task
    (reminders, which cost no LLM call, may repeat every minute)."""
    max_task_runs: int = Field(
        24, ge=1, validation_alias=AliasChoices("BOTKIT_MAX_TASK_RUNS", "max_task_runs")
    )
    """BOTKIT_MAX_TASK_RUNS: scheduled LLM task turns one user's tasks may run per UTC day."""
    schedule_poll: float = Field(
        30.0, gt=0, validation_alias=AliasChoices("BOTKIT_SCHEDULE_POLL", "schedule_poll")
    )
    """BOTKIT_SCHEDULE_POLL: seconds between looks for schedules other processes added."""
    schedule_lease: float = Field(
        600.0, gt=0, validation_alias=AliasChoices("BOTKIT_SCHEDULE_LEASE", "schedule_lease")
    )
    """BOTKIT_SCHEDULE_LEASE: seconds a claimed schedule is held for its delivery; one whose
    process died mid-delivery is delivered again after this, if its delivery was not recorded."""
    task_batches: Literal["off", "marked", "all"] = Field(
        "marked", validation_alias=AliasChoices("BOTKIT_TASK_BATCHES", "task_batches")
    )
    """BOTKIT_TASK_BATCHES: which scheduled tasks may wait for the Message Batches API (50 %
    off, answered within 24 hours, usually minutes): ``marked`` (the default) those scheduled
    as not urgent (``schedule_task(..., urgent=False)``), ``all`` every task, ``off`` none.
    Reminders never wait; a bot whose model is not ``AnthropicLLM`` runs every task at once."""
    batch_poll: float = Field(
        60.0, gt=0, validation_alias=AliasChoices("BOTKIT_BATCH_POLL", "batch_poll")
    )
    """BOTKIT_BATCH_POLL: seconds between looks at the Message Batches of tasks in flight."""
    approval_timeout: float = Field(
        900.0, gt=0, validation_alias=AliasChoices("BOTKIT_APPROVAL_TIMEOUT", "approval_timeout")
    )
    """BOTKIT_APPROVAL_TIMEOUT: seconds a tool call waits for Allow before it is denied."""
    operators_chat: int | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_OPERATORS_CHAT", "operators_chat")
    )
    """BOTKIT_OPERATORS_CHAT: the forum supergroup (the bot an admin) where operators take
    conversations over (``/human``, the ``handoff`` tool); unset: no handoff."""
    memory: bool = Field(True, validation_alias=AliasChoices("BOTKIT_MEMORY", "memory"))
    """BOTKIT_MEMORY: give each conversation a long-term memory the model manages."""
    memory_max_files: int = Field(
        100, ge=1, validation_alias=AliasChoices("BOTKIT_MEMORY_MAX_FILES", "memory_max_files")
    )
    """BOTKIT_MEMORY_MAX_FILES: files one conversation's memory may hold."""
    memory_max_file_kb: int = Field(
        100,
        ge=1,
        validation_alias=AliasChoices("BOTKIT_MEMORY_MAX_FILE_KB", "memory_max_file_kb"),
    )
    """BOTKIT_MEMORY_MAX_FILE_KB: the size limit of one memory file, in KB."""
    memory_max_total_kb: int = Field(
        1024,
        ge=1,
        validation_alias=AliasChoices("BOTKIT_MEMORY_MAX_TOTAL_KB", "memory_max_total_kb"),
    )
    """BOTKIT_MEMORY_MAX_TOTAL_KB: the size limit of one conversation's memory, in KB."""
    forget_me: bool = Field(True, validation_alias=AliasChoices("BOTKIT_FORGET_ME", "forget_me"))
    """BOTKIT_FORGET_ME: let users erase what the bot holds about them (``/forget_me``)."""
    trace_content: bool = Field(
        False, validation_alias=AliasChoices("BOTKIT_TRACE_CONTENT", "trace_content")
    )
    """BOTKIT_TRACE_CONTENT: record prompts, answers and tool arguments and results in traces."""
    trace_user_ids: bool = Field(
        False, validation_alias=AliasChoices("BOTKIT_TRACE_USER_IDS", "trace_user_ids")
    )
    """BOTKIT_TRACE_USER_IDS: put user ids in traces as they are (default: hashed)."""
    plans: str | None = Field(None, validation_alias=AliasChoices("BOTKIT_PLANS", "plans"))
    """BOTKIT_PLANS: paid plans as JSON (a list of plans) or a path to a JSON file; plans
    given in code (``Bot(plans=...)``) come first."""
    transcribe_url: str | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_TRANSCRIBE_URL", "transcribe_url")
    )
    """BOTKIT_TRANSCRIBE_URL: the base URL of an OpenAI-compatible speech API (e.g.
    ``https://api.openai.com/v1``); set, voice notes, audio files and video notes are
    transcribed (``POST {url}/audio/transcriptions``) unless the bot has its own ``transcribe``."""
    transcribe_model: str = Field(
        "whisper-1", validation_alias=AliasChoices("BOTKIT_TRANSCRIBE_MODEL", "transcribe_model")
    )
    """BOTKIT_TRANSCRIBE_MODEL: the transcription model (``whisper-1``, ``gpt-4o-transcribe``,
    Groq's ``whisper-large-v3``…)."""
    transcribe_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_TRANSCRIBE_API_KEY", "transcribe_api_key")
    )
    """BOTKIT_TRANSCRIBE_API_KEY: the bearer key for BOTKIT_TRANSCRIBE_URL (none for a local
    server)."""
    show_transcript: bool = Field(
        True, validation_alias=AliasChoices("BOTKIT_SHOW_TRANSCRIPT", "show_transcript")
    )
    """BOTKIT_SHOW_TRANSCRIPT: show users a short quote of what was heard before the answer."""
    max_voice_seconds: int = Field(
        300, ge=1, validation_alias=AliasChoices("BOTKIT_MAX_VOICE_SECONDS", "max_voice_seconds")
    )
    """BOTKIT_MAX_VOICE_SECONDS: the longest voice note, audio file or video note transcribed;
    longer ones are refused (with a reply) before download."""
    voice_replies: Literal["off", "mirror", "always"] = Field(
        "off", validation_alias=AliasChoices("BOTKIT_VOICE_REPLIES", "voice_replies")
    )
    """BOTKIT_VOICE_REPLIES: ``off``; ``mirror`` (answer a voice note with a voice note too);
    ``always`` (every answer also spoken). Users switch it for their conversation with
    ``/voice``; needs BOTKIT_SPEECH_URL."""
    speech_url: str | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_SPEECH_URL", "speech_url")
    )
    """BOTKIT_SPEECH_URL: the base URL of an OpenAI-compatible speech API that speaks answers
    (``POST {url}/audio/speech``)."""
    speech_model: str = Field(
        "gpt-4o-mini-tts", validation_alias=AliasChoices("BOTKIT_SPEECH_MODEL", "speech_model")
    )
    """BOTKIT_SPEECH_MODEL: the text-to-speech model (``tts-1``, ``gpt-4o-mini-tts``…)."""
    speech_voice: str = Field(
        "alloy", validation_alias=AliasChoices("BOTKIT_SPEECH_VOICE", "speech_voice")
    )
    """BOTKIT_SPEECH_VOICE: the voice answers are spoken in."""
    speech_api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_SPEECH_API_KEY", "speech_api_key")
    )
    """BOTKIT_SPEECH_API_KEY: the bearer key for BOTKIT_SPEECH_URL."""
    speech_max_chars: int = Field(
        1500, ge=1, validation_alias=AliasChoices("BOTKIT_SPEECH_MAX_CHARS", "speech_max_chars")
    )
    """BOTKIT_SPEECH_MAX_CHARS: the most characters of one answer spoken; a longer answer is
    spoken up to there and the voice note says the rest is in the text."""
    speech_timeout: float = Field(
        30.0, gt=0, validation_alias=AliasChoices("BOTKIT_SPEECH_TIMEOUT", "speech_timeout")
    )
    """BOTKIT_SPEECH_TIMEOUT: seconds one call to the speech or transcription API may take."""
    models: DomainList = Field((), validation_alias=AliasChoices("BOTKIT_MODELS", "models"))
    """BOTKIT_MODELS: comma-separated models users may pick with ``/model`` for their
    conversation (empty: BOTKIT_MODEL alone, and ``/model`` stays the admins' switch)."""
    personas_dir: Path | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_PERSONAS_DIR", "personas_dir")
    )
    """BOTKIT_PERSONAS_DIR: a folder of personas users may pick with ``/persona``, one
    Markdown file each (front matter: title, description, optionally model and tools)."""
    instructions: bool | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_INSTRUCTIONS", "instructions")
    )
    """BOTKIT_INSTRUCTIONS: let users give standing instructions with ``/instructions``;
    unset: on when users may pick models or personas."""
    log_level: str = Field("INFO", validation_alias=AliasChoices("BOTKIT_LOG_LEVEL", "log_level"))
    """BOTKIT_LOG_LEVEL: DEBUG, INFO, WARNING or ERROR (any case)."""
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        validation_alias=AliasChoices("BOTKIT_METRICS_PORT", "metrics_port"),
    )
    """BOTKIT_METRICS_PORT: serve ``/metrics``, ``/healthz`` and ``/readyz`` on this port
    (``0``: any free one); unset: no such server."""
    metrics_host: str = Field(
        "127.0.0.1", validation_alias=AliasChoices("BOTKIT_METRICS_HOST", "metrics_host")
    )
    """BOTKIT_METRICS_HOST: the address the metrics server listens on."""
    console_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        validation_alias=AliasChoices("BOTKIT_CONSOLE_PORT", "console_port"),
    )
    """BOTKIT_CONSOLE_PORT: serve the operators' console on this port (``run``, and
    ``receive`` in a scale-out; ``0``: any free one); unset: no console."""
    console_host: str = Field(
        "127.0.0.1", validation_alias=AliasChoices("BOTKIT_CONSOLE_HOST", "console_host")
    )
    """BOTKIT_CONSOLE_HOST: the address the console listens on."""
    console_url: str | None = Field(
        None, validation_alias=AliasChoices("BOTKIT_CONSOLE_URL", "console_url")
    )
    """BOTKIT_CONSOLE_URL: the console's public address behind a proxy, used in sign-in links
    (HTTPS: ``/console`` also offers it as a Mini App); unset: its own host and port."""
    console_content: Literal["admins", "all", "none"] = Field(
        "admins", validation_alias=AliasChoices("BOTKIT_CONSOLE_CONTENT", "console_content")
    )
    """BOTKIT_CONSOLE_CONTENT: who sees what people wrote on the console's pages: ``admins``
    (viewers see who and when, not what), ``all``, or ``none`` (nobody)."""

    @field_validator("allowed_users", "admins", mode="before")
    @classmethod
    def _split_ids(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return frozenset(int(part) for part in value.replace(" ", "").split(",") if part)
            except ValueError:
                raise ValueError(f"expected comma-separated user ids, got {value!r}") from None
        return value

    @field_validator("database_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        """``BOTKIT_DATABASE_URL=`` (set to nothing) means no database, as unset does."""
        return None if value == "" else value

    @field_validator("web_domains", "models", mode="before")
    @classmethod
    def _split_domains(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}, got {value!r}")
        return level

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r}: use an IANA name such as Europe/Berlin or UTC"
            ) from None
        return value

    @property
    def send_rate(self) -> float:
        """Messages per second the limiter allows: over Telegram's free 30 only when paid."""
        return self.global_rate if self.paid_broadcast else min(self.global_rate, FREE_RATE)

    def secret_values(self) -> list[str]:
        """Every secret these settings hold, for logs to redact: the bot token, the API key,
        the webhook secret, the database URL and its password (an error may show either)."""
        held = [self.telegram_bot_token, self.anthropic_api_key, self.webhook_secret]
        held += [self.transcribe_api_key, self.speech_api_key]
        values = [secret.get_secret_value() for secret in held if secret is not None]
        if self.database_url is not None:
            url = self.database_url.get_secret_value()
            values += [url, urlsplit(url).password or ""]
        return [value for value in values if value]

    def require_telegram_token(self) -> str:
        """The bot token, or a ConfigError saying how to set it (also when it is malformed)."""
        if self.telegram_bot_token is None or not self.telegram_bot_token.get_secret_value():
            raise ConfigError(
                "TELEGRAM_BOT_TOKEN is not set: put the token from @BotFather in the "
                "environment or in .env."
            )
        token = self.telegram_bot_token.get_secret_value()
        if _TOKEN.fullmatch(token) is None:  # never quoted: it may be a real token, mistyped
            raise ConfigError(
                "TELEGRAM_BOT_TOKEN is not a bot token: it must look like 123456789:AAH... "
                "exactly as @BotFather gives it, without spaces or quotes."
            )
        return token

    @property
    def bot_id(self) -> int:
        """The bot's Telegram id: the number before the token's colon (``ConfigError`` when
        the token is missing or malformed)."""
        return int(self.require_telegram_token().split(":", 1)[0])

    def thinking_settings(self) -> ThinkingSettings:
        """BOTKIT_THINKING, BOTKIT_EFFORT and BOTKIT_THINKING_DISPLAY, as the LLM client takes
        them."""
        from botkit.llm.thinking import ThinkingSettings

        return ThinkingSettings(self.thinking, self.effort, self.thinking_display)

    def server_tools(self) -> ServerTools:
        """BOTKIT_WEB_SEARCH, BOTKIT_WEB_FETCH and their limits, as the tool loop offers them."""
        from botkit.tools.server import ServerTools

        return ServerTools(self.web_search, self.web_fetch, self.web_domains, self.web_max_uses)

    def require_anthropic_key(self) -> str:
        """The Anthropic API key, or a ConfigError saying how to set it."""
        if self.anthropic_api_key is None or not self.anthropic_api_key.get_secret_value():
            raise ConfigError(
                "ANTHROPIC_API_KEY is not set: put your Anthropic API key in the environment "
                "or in .env."
            )
        return self.anthropic_api_key.get_secret_value()


def settings_without_invalid(error: ValidationError, **overrides: Any) -> Settings:
    """Settings as the environment and ``.env`` give them, but with each value ``error``
    found invalid replaced by its default (so a check can go on and report the rest)."""
    names = {str(item["loc"][0]).upper() for item in error.errors() if item["loc"]}
    defaults: dict[str, Any] = {}
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias
        first = alias.choices[0] if isinstance(alias, AliasChoices) else None
        env = first if isinstance(first, str) else field_name.upper()
        if env.upper() in names or field_name.upper() in names:
            defaults[field_name] = field.get_default(call_default_factory=True)
    return Settings(**defaults, **overrides)


def setting_problems(error: ValidationError) -> list[str]:
    """Every invalid value of ``error`` as ``NAME: problem``, named as in the environment."""
    problems = []
    for item in error.errors():
        name = str(item["loc"][0]).upper() if item["loc"] else "settings"
        problems.append(f"{name}: {item['msg'].removeprefix('Value error, ')}")
    return problems


def known_setting_names() -> list[str]:
    """The environment variable of every setting (BOTKIT_MODEL, TELEGRAM_BOT_TOKEN, ...)."""
    names = []
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias
        first = alias.choices[0] if isinstance(alias, AliasChoices) else None
        names.append(first if isinstance(first, str) else field_name.upper())
    return names


def unknown_setting_names(env_file: Path | None = Path(".env")) -> list[str]:
    """``NAME: not a setting; did you mean ...?`` for each BOTKIT_ variable of the environment
    and of ``env_file`` that no setting reads (a typo is otherwise silently ignored)."""
    from dotenv import dotenv_values

    names = set(os.environ)
    if env_file is not None and env_file.is_file():
        names |= set(dotenv_values(env_file))
    known = known_setting_names()
    problems = []
    for name in sorted(n for n in names if n.upper().startswith("BOTKIT_")):
        if name.upper() in known or name.upper() in NOT_SETTINGS:
            continue
        nearest = difflib.get_close_matches(name.upper(), known, n=1, cutoff=0.6)
        hint = f"did you mean {nearest[0]}?" if nearest else "no setting has this name"
        problems.append(f"{name}: not a setting; {hint}")
    return problems
