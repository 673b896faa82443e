"""When a schedule fires: ``when`` and ``repeat`` as the model writes them, and time zones.

``when`` is ISO 8601 with an offset or ``Z`` (``2026-11-24T09:00:00+01:00``), a local time
without one (``2026-11-24T09:00``, or just ``09:00`` for its next occurrence), read in the
user's zone, or a duration from now (``10m``, ``2h``, ``1d``, ``in 90 minutes``,
``1h30m``). ``repeat`` is ``daily``, ``weekly``, ``hourly``, ``every 2h`` or a 5-field cron
expression (evaluated by ``cronsim`` in the user's zone). Anything else is a
:class:`ToolError` whose text tells the model what to write instead.

Repeats follow the definition, never the clock of the last delivery: the next occurrence is
the first one on the schedule's own grid after the planned time (and after now, so one missed
while the bot was down is not delivered again and again). ``daily`` and ``weekly`` keep the
local wall time across daylight-saving changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from botkit.errors import ToolError

__all__ = [
    "MAX_INTERVAL",
    "MIN_INTERVAL",
    "Repeat",
    "describe_duration",
    "format_local",
    "parse_repeat",
    "parse_when",
    "zone_named",
]

MIN_INTERVAL = timedelta(minutes=1)
"""The shortest repeat: a schedule cannot fire more often than once a minute."""
MAX_INTERVAL = timedelta(days=366)
"""The longest ``every …`` repeat: a year (a longer one would outrun the calendar)."""
MAX_AHEAD = timedelta(days=366 * 10)
"""The furthest ahead a schedule may be set."""
_GAP_SAMPLE_START = datetime(2028, 1, 1, tzinfo=UTC)  # a leap year, so 29 February is seen
_GAP_SAMPLE_SPAN = timedelta(days=62)  # two months: every weekday, month end and 29 February
_GAP_SAMPLE_MAX = 1_500
"""Occurrences of a cron expression looked at, at most, to find its shortest gap (a gap that
shows only rarely is still bounded by BOTKIT_MAX_TASK_RUNS)."""

_UNITS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}  # fmt: skip
_PART = r"(\d+(?:\.\d+)?)\s*([a-z]+)"
_DURATION = re.compile(rf"^(?:in\s+)?{_PART}(?:(?:\s*,\s*|\s+and\s+|\s*){_PART})*$")
_PARTS = re.compile(_PART)
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_EVERY = re.compile(r"^every\s+(.+)$")
_NAMED = {
    "daily": "daily",
    "every day": "daily",
    "weekly": "weekly",
    "every week": "weekly",
    "hourly": "every 1h",
    "every hour": "every 1h",
}
_WHEN_HELP = (
    'Write `when` as ISO 8601 with an offset ("2026-11-24T09:00:00+01:00" or "...Z"), as a '
    'local time without one ("2026-11-24T09:00", "09:00"), or as a duration from now '
    '("10m", "2h", "1d", "in 90 minutes").'
)
_REPEAT_HELP = (
    'Write `repeat` as "daily", "weekly", "hourly", "every <n><m|h|d|w>" (e.g. "every 2h") or '
    'a 5-field cron expression such as "0 9 * * 1-5" (minute hour day month weekday, in the '
    "user's time zone); leave it out for once."
)


def zone_named(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (``Europe/Berlin``, ``UTC``), or a ToolError saying so."""
    cleaned = name.strip()
    try:
        if not cleaned or cleaned.startswith(("/", ".")) or ".." in cleaned:
            raise ValueError(cleaned)
        return ZoneInfo(cleaned)
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolError(
            f"unknown time zone {name!r}: use an IANA name such as Europe/Berlin, "
            "America/New_York or UTC"
        ) from None


def parse_when(text: str, now: datetime, zone: ZoneInfo) -> datetime:
    """The moment ``text`` names (in UTC), later than ``now``; local times are in ``zone``."""
    cleaned = " ".join(text.strip().lower().split())
    moment = _relative(cleaned, now) or _clock(cleaned, now, zone) or _absolute(text, zone)
    if moment <= now:
        shown = format_local(moment, zone)
        raise ToolError(
            f"{text!r} is {shown}, which is in the past (it is now {format_local(now, zone)}): "
            "give a time in the future."
        )
    if moment - now > MAX_AHEAD:
        raise ToolError(f"{text!r} is more than ten years ahead: give a nearer time.")
    return moment


def _relative(text: str, now: datetime) -> datetime | None:
    if not _DURATION.match(text):
        return None
    seconds = 0.0
    for amount, unit in _PARTS.findall(text.removeprefix("in ")):
        if unit not in _UNITS:
            raise ToolError(f"unknown unit {unit!r} in {text!r}. {_WHEN_HELP}")
        seconds += float(amount) * _UNITS[unit]
    if seconds <= 0:
        raise ToolError(f"{text!r} is no time from now: give a time in the future.")
    if seconds > MAX_AHEAD.total_seconds():  # checked here: a huge timedelta overflows
        raise ToolError(f"{text!r} is more than ten years ahead: give a nearer time.")
    return _utc(now) + timedelta(seconds=seconds)


def _clock(text: str, now: datetime, zone: ZoneInfo) -> datetime | None:
    """``09:00``: that local time today, or tomorrow if it has passed."""
    match = _CLOCK.match(text)
    if match is None:
        return None
    hour, minute, second = int(match[1]), int(match[2]), int(match[3] or 0)
    if hour > 23 or minute > 59 or second > 59:
        raise ToolError(f"{text!r} is not a time of day. {_WHEN_HELP}")
    local = now.astimezone(zone)
    wall = local.replace(tzinfo=None, hour=hour, minute=minute, second=second, microsecond=0)
    moment = _localized(wall, zone)
    if moment <= now:
        moment = _localized(wall + timedelta(days=1), zone)
    return moment


def _absolute(text: str, zone: ZoneInfo) -> datetime:
    cleaned = text.strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", cleaned):
        raise ToolError(f"{text!r} is a day without a time: add the time. {_WHEN_HELP}")
    try:
        parsed = datetime.fromisoformat(cleaned.replace("z", "Z"))
    except ValueError:
        raise ToolError(f"cannot read {text!r} as a time. {_WHEN_HELP}") from None
    if parsed.tzinfo is None:
        return _localized(parsed, zone)
    return parsed.astimezone(UTC)


def _localized(wall: datetime, zone: ZoneInfo) -> datetime:
    """A local wall time in ``zone`` as UTC; one skipped by a DST change moves past the gap."""
    return wall.replace(tzinfo=zone).astimezone(UTC)


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


def format_local(moment: datetime, zone: ZoneInfo) -> str:
    """``Tue 24 Nov 2026 09:00 CET`` (seconds shown only when there are some)."""
    local = moment.astimezone(zone)
    pattern = "%a %d %b %Y %H:%M:%S %Z" if local.second else "%a %d %b %Y %H:%M %Z"
    return local.strftime(pattern)


@dataclass(frozen=True, slots=True)
class Repeat:
    """How a schedule repeats, in canonical text (as stored): ``daily``, ``every 2h``, cron."""

    text: str

    @property
    def interval(self) -> timedelta | None:
        """The fixed period of an ``every …`` repeat; ``None`` for calendar repeats."""
        match = _EVERY.match(self.text)
        return None if match is None else timedelta(seconds=_seconds(match[1]))

    def shortest_gap(self, floor: timedelta) -> timedelta | None:
        """The shortest time between two occurrences, as the clock of its definition goes
        (daylight-saving changes aside); looking stops at the first gap below ``floor``.
        ``None`` when a cron expression fires at most once in the two months looked at."""
        if self.text in ("daily", "weekly"):
            return timedelta(days=1 if self.text == "daily" else 7)
        if (step := self.interval) is not None:
            return step
        shortest: timedelta | None = None
        previous: datetime | None = None
        end = _GAP_SAMPLE_START + _GAP_SAMPLE_SPAN
        for count, moment in enumerate(CronSim(self.text, _GAP_SAMPLE_START)):
            if moment > end or count >= _GAP_SAMPLE_MAX:
                break
            if previous is not None:
                gap = moment - previous
                shortest = gap if shortest is None else min(shortest, gap)
                if gap < floor:
                    break
            previous = moment
        return shortest

    def next_after(self, planned: datetime, zone: ZoneInfo, now: datetime) -> datetime:
        """The first occurrence on this repeat's grid after ``planned`` and after ``now``.

        An ``OverflowError`` when that is past the calendar's end (the year 9999)."""
        after = max(planned, now)
        if self.text in ("daily", "weekly"):
            return _next_wall_time(planned, zone, after, 1 if self.text == "daily" else 7)
        if (step := self.interval) is not None:
            periods = (after - planned) // step + 1
            return planned + periods * step
        return _utc(next(CronSim(self.text, after.astimezone(zone))))


def _next_wall_time(planned: datetime, zone: ZoneInfo, after: datetime, days: int) -> datetime:
    """The planned local wall time, ``days`` apart, first after ``after`` (DST-correct)."""
    wall = planned.astimezone(zone).replace(tzinfo=None)
    skip = max((after - planned).days // days - 1, 0)
    wall += timedelta(days=days * (skip + 1))
    while (moment := _localized(wall, zone)) <= after:
        wall += timedelta(days=days)
    return moment


def parse_repeat(text: str | None) -> Repeat | None:
    """``repeat`` as the model wrote it, checked and made canonical; ``None`` for once."""
    if text is None or not text.strip() or text.strip().lower() in ("none", "once", "no"):
        return None
    cleaned = " ".join(text.strip().lower().split())
    if cleaned in _NAMED:
        return Repeat(_NAMED[cleaned])
    if (match := _EVERY.match(cleaned)) is not None and not _looks_like_cron(cleaned):
        if not _DURATION.match(match[1]):
            raise ToolError(f"cannot read {text!r} as a repeat. {_REPEAT_HELP}")
        seconds = _seconds(match[1])
        if seconds < MIN_INTERVAL.total_seconds():
            raise ToolError(f"{text!r} is too often: repeat at most once a minute.")
        if seconds > MAX_INTERVAL.total_seconds():  # compared as numbers: no timedelta overflow
            raise ToolError(
                f"{text!r} is too long a repeat: at most a year (every 52w, or a cron "
                "expression for a yearly date)."
            )
        return Repeat(f"every {_canonical(seconds)}")
    if _looks_like_cron(cleaned):
        return Repeat(_cron(cleaned, text))
    raise ToolError(f"cannot read {text!r} as a repeat. {_REPEAT_HELP}")


def describe_duration(span: timedelta) -> str:
    """``1h``, ``90m``, ``2d``: a span as ``every …`` writes it."""
    return _canonical(round(span.total_seconds()))


def _seconds(text: str) -> int:
    total = 0.0
    for amount, unit in _PARTS.findall(text):
        if unit not in _UNITS:
            raise ToolError(f"unknown unit {unit!r} in {text!r}. {_REPEAT_HELP}")
        total += float(amount) * _UNITS[unit]
    return round(total)


def _canonical(seconds: int) -> str:
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _looks_like_cron(text: str) -> bool:
    return len(text.split()) == 5 and not text.startswith("every ")


def _cron(cleaned: str, original: str) -> str:
    try:
        CronSim(cleaned, datetime(2026, 1, 1, tzinfo=UTC))
    except CronSimError as e:
        raise ToolError(
            f"{original!r} is not a valid cron expression ({e}). {_REPEAT_HELP}"
        ) from None
    return cleaned
