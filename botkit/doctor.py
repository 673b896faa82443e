"""``python -m botkit doctor``: is this deployment configured right? One line per check.

Each line starts with ✓ or ✗; a ✗ says what to do. The checks ask the real peers (Telegram's
getMe and getWebhookInfo, a free token count at Anthropic, PostgreSQL, every MCP server) but
change nothing, and no token, key or password is ever printed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO
from urllib.parse import urlsplit

from botkit.errors import ConfigError, LLMError, MessengerError
from botkit.extras import require_extra, require_postgres
from botkit.messengers.base import Incoming

if TYPE_CHECKING:
    from pydantic import SecretStr

    from botkit.bot import Bot
    from botkit.config import Settings
    from botkit.tools.mcp import MCPServerConfig

__all__ = ["CheckResult", "doctor", "run_checks"]

OK, FAILED = "✓", "✗"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The outcome of one check: what was checked, whether it passed, and what was found."""

    name: str
    ok: bool
    detail: str
    """What was found; on a failure, also what to do."""

    def line(self) -> str:
        """``✓ name: detail`` (or ✗)."""
        return f"{OK if self.ok else FAILED} {self.name}: {self.detail}"


def doctor(
    target: str | None, out: TextIO | None = None, *, conversation: str | None = None
) -> int:
    """Run every check and print one line each; 0 when all passed, 1 otherwise (with
    ``conversation``, also whether that conversation's cached prompt prefix stays put)."""
    from botkit.log import configure_logging
    from botkit.targets import load_settings

    out = out or sys.stdout
    invalid: list[CheckResult] = []
    try:
        settings = load_settings()
    except ConfigError as e:
        # every other check still runs, on the defaults of the invalid values
        invalid = [CheckResult("configuration", False, p) for p in _setting_lines(str(e))]
        settings = _settings_anyway(e)
    secrets = settings.secret_values()
    configure_logging("CRITICAL", secrets=secrets)
    results = [
        *invalid,
        *_unknown_names(),
        *asyncio.run(run_checks(target, settings, conversation)),
    ]
    for result in results:
        out.write(_redacted(result.line(), secrets) + "\n")
    failed = sum(not r.ok for r in results)
    out.write(f"{failed} of {len(results)} checks failed\n" if failed else "all checks passed\n")
    return 1 if failed else 0


def _settings_anyway(error: ConfigError) -> Settings:
    """The settings with each invalid value at its default (``error`` came from them)."""
    from pydantic import ValidationError

    from botkit.config import settings_without_invalid

    cause = error.__cause__
    if isinstance(cause, ValidationError):
        return settings_without_invalid(cause)
    from botkit.config import Settings

    return Settings(_env_file=None)


def _setting_lines(message: str) -> list[str]:
    """Each invalid setting of a settings error on its own line."""
    lines = [line.strip() for line in message.splitlines()[1:]]
    return lines or [message]


def _unknown_names() -> list[CheckResult]:
    """A failed check for each BOTKIT_ variable no setting reads (a typo, most likely)."""
    from botkit.config import unknown_setting_names

    return [CheckResult("configuration", False, problem) for problem in unknown_setting_names()]


async def run_checks(
    target: str | None, settings: Settings, conversation: str | None = None
) -> list[CheckResult]:
    """Every check, in the order they are printed."""
    built, bot = await _check_bot(target)
    settings = bot.settings if bot is not None else settings
    prefix: list[CheckResult] = []
    try:
        telegram, anthropic, database, mcp, voice = await asyncio.gather(
            _check_telegram(settings),
            _check_anthropic(bot, settings),
            _check_database(settings),
            _check_mcp(settings),
            _check_voice(settings),
        )
        models = await _check_models(bot) if anthropic.ok else []
        if conversation is not None and bot is not None:
            prefix.append(await _check_prefix(bot, conversation))
    finally:
        if bot is not None:
            await bot.aclose()
    return [
        built,
        telegram,
        anthropic,
        *models,
        database,
        _check_sessions(settings),
        *mcp,
        *_skills(settings),
        *prefix,
        *voice,
    ]


async def _check_prefix(bot: Bot, conversation: str) -> CheckResult:
    """The conversation's cached prefix stays put between turns (#49)."""
    from botkit.prefixcheck import prefix_report

    try:
        steady, detail = await prefix_report(bot, conversation)
    except Exception as e:
        return CheckResult("cache prefix", False, then(e, "check the session store settings"))
    hint = "" if steady else " (per-turn material belongs in a plugin's turn_note)"
    return CheckResult(f"cache prefix of {conversation}", steady, detail + hint)


async def _check_bot(target: str | None) -> tuple[CheckResult, Bot | None]:
    """The bot target imports and builds."""
    from botkit.targets import load_bot

    what = target or "the default assistant"
    try:
        bot = load_bot(target)
    except ConfigError as e:
        return CheckResult("bot", False, str(e)), None
    except Exception as e:  # the target's own code failed: show how
        return CheckResult("bot", False, f"{what} failed to build: {type(e).__name__}: {e}"), None
    tools, commands = await _offered_tools(bot), len(bot.commands)
    found = f"{counted(tools, 'tool')} offered to a user, {counted(commands, 'command')}"
    return CheckResult("bot", True, f"{what} builds ({found})"), bot


async def _offered_tools(bot: Bot) -> int:
    """How many tools the model gets in a user's private chat (the bot's own and its plugins')."""
    sample = Incoming(update_id=0, user_id=0, chat_id=0, text="", date=datetime.now(UTC))
    try:
        return len(list(await bot.build_tools(sample)))
    except Exception:  # the bot's own step needs a real user: count what it registered
        return len(bot.tools)


def counted(n: int, noun: str) -> str:
    """``1 tool``, ``2 tools``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def then(error: Exception, hint: str) -> str:
    """``error``'s message followed by ``: hint``, without doubling its final full stop."""
    return f"{str(error).rstrip('.')}: {hint}"


async def _check_telegram(settings: Settings) -> CheckResult:
    """The token is accepted (getMe), and whether a webhook is set (getWebhookInfo)."""
    from botkit.messengers.flood import FloodControl
    from botkit.runtime.telegram import messenger_for

    try:
        messenger = messenger_for(settings, flood=FloodControl(max_attempts=2), inbox=False)
    except ConfigError as e:
        return CheckResult("Telegram", False, str(e))
    try:
        me = await messenger.start()
        info = await messenger.flood.send(0, messenger.api.get_webhook_info)
    except ConfigError as e:
        return CheckResult("Telegram", False, str(e))
    except MessengerError as e:
        return CheckResult("Telegram", False, then(e, "check the network and TELEGRAM_API_BASE"))
    finally:
        await messenger.close()
    webhook = (
        f"a webhook is set (to {urlsplit(info.url).hostname}); serving removes it and polls"
        if info.url
        else "no webhook set"
    )
    owner = await _owner_note(settings, me.username or "")
    return CheckResult("Telegram", True, f"@{me.username} answers getMe; {webhook}{owner}")


async def _owner_note(settings: Settings, username: str) -> str:
    """``; <owner notice>`` when the bot has no admin yet; a store failure is the database
    check's to report."""
    from botkit.owner import owner_link, owner_notice

    try:
        link = await owner_link(settings, username)
    except Exception:  # unreachable or unmigrated: the database line says so
        return ""
    return f"; {owner_notice(link)}" if link else ""


async def _check_anthropic(bot: Bot | None, settings: Settings) -> CheckResult:
    """The key is accepted and the model known, by a call that costs no tokens."""
    from botkit.llm.anthropic import AnthropicLLM

    try:
        llm = bot.llm if bot is not None else None
        own = llm is None
        if llm is None:
            llm = AnthropicLLM(
                api_key=settings.require_anthropic_key(),
                model=settings.model,
                base_url=settings.anthropic_base_url,
                max_concurrency=1,
            )
    except ConfigError as e:
        return CheckResult("Anthropic", False, str(e))
    if not isinstance(llm, AnthropicLLM):
        return CheckResult("Anthropic", True, f"the bot uses its own {type(llm).__name__}")
    try:
        await llm.verify(attempts=2, max_backoff=1.0)
    except (ConfigError, LLMError) as e:
        if isinstance(e, ConfigError):
            return CheckResult("Anthropic", False, str(e))
        return CheckResult("Anthropic", False, then(e, "check the network and ANTHROPIC_BASE_URL"))
    finally:
        if own:
            await llm.close()
    return CheckResult("Anthropic", True, f"key accepted, model {llm.model!r} known")


async def _check_models(bot: Bot | None) -> list[CheckResult]:
    """Every model users may pick (BOTKIT_MODELS, plans, personas) exists and takes the
    thinking settings, asked of the Models API; no line when users pick none."""
    from botkit.llm.anthropic import AnthropicLLM

    if bot is None or not isinstance(bot.llm, AnthropicLLM):
        return []
    offered = bot.choices.settings
    models = [*offered.models, *(p.model for p in offered.personas if p.model)]
    if len(set(models)) < 2:
        return []
    try:
        found = await bot.llm.unknown_models(models)
    except LLMError as e:
        return [CheckResult("models", False, then(e, "check the network"))]
    if found:
        return [
            CheckResult("models", False, f"{p}: fix BOTKIT_MODELS, the plans or the personas")
            for p in found
        ]
    listed = ", ".join(dict.fromkeys(models))
    return [CheckResult("models", True, f"users may pick {listed}; all known")]


async def _check_database(settings: Settings) -> CheckResult:
    """PostgreSQL answers and every migration is applied (when BOTKIT_DATABASE_URL is set)."""
    if settings.database_url is None:
        path = settings.database_path or settings.sessions_dir / "botkit.db"
        return CheckResult("database", True, f"SQLite at {path} (no migrations needed)")
    try:
        require_postgres("BOTKIT_DATABASE_URL")
    except ConfigError as e:
        return CheckResult("database", False, str(e))
    import asyncpg  # type: ignore[import-untyped]

    from botkit.stores.migrate import pending_migrations

    try:
        conn = await asyncpg.connect(settings.database_url.get_secret_value(), timeout=10)
    except (OSError, ValueError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
        return CheckResult(
            "database",
            False,
            f"cannot connect to BOTKIT_DATABASE_URL ({e}): check the URL and that PostgreSQL runs",
        )
    try:
        pending: list[str] = await pending_migrations(conn)
    finally:
        await conn.close()
    if pending:
        names = ", ".join(pending)
        return CheckResult(
            "database",
            False,
            f"PostgreSQL answers, but {len(pending)} migrations are not applied ({names}): "
            "run python -m botkit migrate",
        )
    return CheckResult("database", True, "PostgreSQL answers, migrations applied")


def _check_sessions(settings: Settings) -> CheckResult:
    """The sessions folder exists (or can be made) and takes a file."""
    from botkit.runtime.ownership import folder_refusal

    folder = settings.sessions_dir
    existing = next(p for p in (folder, *folder.absolute().parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return CheckResult(
            "sessions",
            False,
            f"{folder} is not writable ({existing} is not a folder the bot may write): set "
            "BOTKIT_SESSIONS_DIR to a folder the bot may write",
        )
    if existing != folder:  # nothing made here: the bot makes it, for its owner only
        return CheckResult("sessions", True, f"{folder.absolute()} will be made (mode 0700)")
    if settings.database_url is None and (refusal := folder_refusal(settings)) is not None:
        return CheckResult("sessions", False, refusal)
    return CheckResult("sessions", True, f"{folder.resolve()} is writable")


async def _check_mcp(settings: Settings) -> list[CheckResult]:
    """Each MCP server starts and lists its tools."""
    if not settings.mcp_config:
        return [CheckResult("MCP", True, "no servers configured")]
    try:
        require_extra("mcp", "mcp", "BOTKIT_MCP_CONFIG")
        from botkit.tools.mcp import parse_mcp_config

        configs = parse_mcp_config(settings.mcp_config)
    except ConfigError as e:
        return [CheckResult("MCP", False, str(e))]
    return list(await asyncio.gather(*(_check_mcp_server(c) for c in configs)))


async def _check_mcp_server(config: MCPServerConfig) -> CheckResult:
    from botkit.tools.mcp import MCPConnectError, MCPConnection

    try:
        async with MCPConnection(config) as connection:
            names = [tool.name for tool in connection.tools()]
    except MCPConnectError as e:
        where = "command" if config.transport == "stdio" else "url"
        return CheckResult("MCP", False, then(e, f"check its {where} in BOTKIT_MCP_CONFIG"))
    listed = ", ".join(names) or "none"
    return CheckResult("MCP", True, f"server {config.name!r} started; tools: {listed}")


async def _check_voice(settings: Settings) -> list[CheckResult]:
    """The speech APIs answer (BOTKIT_TRANSCRIBE_URL, BOTKIT_SPEECH_URL), when set; spoken
    answers asked for without a speech API are a mistake."""
    results: list[CheckResult] = []
    if settings.transcribe_url:
        key = settings.transcribe_api_key
        heard = await _speech_api_answers(settings.transcribe_url, key, settings.speech_timeout)
        detail = f"{settings.transcribe_url} answers ({settings.transcribe_model})"
        results.append(CheckResult("transcription", heard is None, heard or detail))
    if settings.speech_url:
        key = settings.speech_api_key
        spoken = await _speech_api_answers(settings.speech_url, key, settings.speech_timeout)
        detail = f"{settings.speech_url} answers ({settings.speech_model}, {settings.speech_voice})"
        results.append(CheckResult("speech", spoken is None, spoken or detail + _av_note()))
    elif settings.voice_replies != "off":
        needs = f"BOTKIT_VOICE_REPLIES={settings.voice_replies} needs BOTKIT_SPEECH_URL: set it"
        results.append(CheckResult("speech", False, needs))
    return results


async def _speech_api_answers(url: str, key: SecretStr | None, seconds: float) -> str | None:
    """``None`` when the speech API at ``url`` answers, else what to do."""
    from botkit.voice.api import SpeechAPI

    api = SpeechAPI(url, key.get_secret_value() if key else None, seconds)
    try:
        problem = await api.check()
    finally:
        await api.close()
    return None if problem is None else f"{url} did not answer as a speech API: {problem}"


def _av_note() -> str:
    try:
        require_extra("av", "voice", "Converting speech")
    except ConfigError:
        return (
            "; PyAV missing: speech in another format than OGG/Opus cannot be converted "
            "(pip install 'botkit[voice]')"
        )
    return ""


def _skills(settings: Settings) -> list[CheckResult]:
    """Every skill in BOTKIT_SKILLS_DIR parses."""
    from botkit.skills import SKILL_FILE, Skill, SkillLibrary

    root = settings.skills_dir
    if root is None:
        return [CheckResult("skills", True, "no skills folder configured")]
    if not root.is_dir():
        return [CheckResult("skills", False, f"{root} is not a folder: fix BOTKIT_SKILLS_DIR")]
    skills: list[Skill] = []
    broken: list[CheckResult] = []
    for path in sorted(root.glob(f"[!.]*/{SKILL_FILE}")):
        try:
            skills.append(Skill.from_file(path))
        except (OSError, ValueError) as e:
            broken.append(CheckResult("skills", False, f"{_relative(path)} does not parse: {e}"))
    try:
        SkillLibrary(skills)
    except ConfigError as e:
        broken.append(CheckResult("skills", False, str(e)))
    names = ", ".join(skill.name for skill in skills) or "none"
    return [CheckResult("skills", True, f"{len(skills)} parse in {root}: {names}"), *broken]


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _redacted(text: str, secrets: list[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
