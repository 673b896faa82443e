"""When schedules fire: ``when`` and ``repeat`` read as the model writes them, in the user's
zone, across daylight-saving changes, with fixed clocks (#13)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from botkit.errors import ToolError
from botkit.reminders.times import Repeat, format_local, parse_repeat, parse_when, zone_named

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
# Berlin leaves CET (+01:00) for CEST (+02:00) at 02:00 on 29 March 2026, and goes back at
# 03:00 on 25 October 2026.
SAT_BEFORE_SPRING = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        ("10m", datetime(2026, 3, 28, 12, 10, tzinfo=UTC)),
        ("2h", datetime(2026, 3, 28, 14, 0, tzinfo=UTC)),
        ("in 90 minutes", datetime(2026, 3, 28, 13, 30, tzinfo=UTC)),
        ("1h30m", datetime(2026, 3, 28, 13, 30, tzinfo=UTC)),
        ("1d", datetime(2026, 3, 29, 12, 0, tzinfo=UTC)),  # 24 hours, whatever the clocks do
        ("2026-03-29T09:00:00+01:00", datetime(2026, 3, 29, 8, 0, tzinfo=UTC)),
        ("2026-03-29T08:00:00Z", datetime(2026, 3, 29, 8, 0, tzinfo=UTC)),
        ("2026-03-29T09:00", datetime(2026, 3, 29, 7, 0, tzinfo=UTC)),  # local: already CEST
        ("2026-03-28T15:00", datetime(2026, 3, 28, 14, 0, tzinfo=UTC)),  # local: still CET
        ("09:00", datetime(2026, 3, 29, 7, 0, tzinfo=UTC)),  # passed today: tomorrow, in CEST
        ("14:30", datetime(2026, 3, 28, 13, 30, tzinfo=UTC)),  # still ahead today
        ("2026-03-29T02:30", datetime(2026, 3, 29, 1, 30, tzinfo=UTC)),  # skipped: 03:30 CEST
    ],
)
def test_when_is_read_in_the_users_zone_across_the_spring_change(
    when: str, expected: datetime
) -> None:
    assert parse_when(when, SAT_BEFORE_SPRING, BERLIN) == expected


def test_an_hour_that_happens_twice_in_autumn_is_its_first_occurrence() -> None:
    now = datetime(2026, 10, 24, 12, 0, tzinfo=UTC)
    assert parse_when("2026-10-25T02:30", now, BERLIN) == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("when", "says"),
    [
        ("tomorrow morning", "ISO 8601"),
        ("5 pm", "unknown unit 'pm'"),
        ("2026-03-29", "a day without a time"),
        ("2026-03-28T12:59", "in the past"),  # 12:59 CET is 11:59 UTC
        ("2020-01-01T00:00:00Z", "in the past"),
        ("0m", "no time from now"),
        ("25:00", "not a time of day"),
        ("2040-01-01T00:00Z", "more than ten years ahead"),
        ("99999999999w", "more than ten years ahead"),  # not an OverflowError
    ],
)
def test_unreadable_or_past_times_are_tool_errors_saying_what_to_write(
    when: str, says: str
) -> None:
    with pytest.raises(ToolError, match=says):
        parse_when(when, SAT_BEFORE_SPRING, BERLIN)


def test_daily_keeps_the_local_wall_time_across_both_changes() -> None:
    daily = Repeat("daily")
    spring = datetime(2026, 3, 28, 8, 0, tzinfo=UTC)  # 09:00 CET
    after = daily.next_after(spring, BERLIN, spring)
    assert format_local(after, BERLIN) == "Sun 29 Mar 2026 09:00 CEST"
    assert after - spring == timedelta(hours=23), "the night was an hour short"
    autumn = datetime(2026, 10, 24, 7, 0, tzinfo=UTC)  # 09:00 CEST
    after = daily.next_after(autumn, BERLIN, autumn)
    assert format_local(after, BERLIN) == "Sun 25 Oct 2026 09:00 CET"
    assert after - autumn == timedelta(hours=25)


def test_weekly_and_cron_follow_local_time_and_every_follows_the_clock() -> None:
    friday = datetime(2026, 3, 27, 8, 0, tzinfo=UTC)  # Fri 09:00 CET
    weekly = Repeat("weekly").next_after(friday, BERLIN, friday)
    assert format_local(weekly, BERLIN) == "Fri 03 Apr 2026 09:00 CEST"
    weekdays = Repeat("0 9 * * 1-5").next_after(friday, BERLIN, friday)
    assert format_local(weekdays, BERLIN) == "Mon 30 Mar 2026 09:00 CEST"
    every = Repeat("every 12h").next_after(friday, BERLIN, datetime(2026, 3, 29, 0, 0, tzinfo=UTC))
    assert every == datetime(2026, 3, 29, 8, 0, tzinfo=UTC), "on the grid of 12 h from the start"


def test_a_repeat_missed_while_down_fires_next_on_its_grid_not_once_per_miss() -> None:
    planned = datetime(2026, 11, 2, 14, 0, tzinfo=UTC)  # Mon 09:00 in New York (EST)
    back_up = datetime(2026, 11, 20, 15, 0, tzinfo=UTC)
    after = Repeat("daily").next_after(planned, NEW_YORK, back_up)
    assert after == datetime(2026, 11, 21, 14, 0, tzinfo=UTC)
    assert Repeat("every 2h").next_after(planned, NEW_YORK, back_up) == back_up + timedelta(hours=1)


@pytest.mark.parametrize(
    ("repeat", "canonical"),
    [
        (None, None),
        ("", None),
        ("once", None),
        ("Daily", "daily"),
        ("every week", "weekly"),
        ("hourly", "every 1h"),
        ("every 2h", "every 2h"),
        ("every 90 minutes", "every 90m"),
        ("every 1 day", "every 1d"),
        ("0 9 * * 1-5", "0 9 * * 1-5"),
        ("*/15  *  * * *", "*/15 * * * *"),
    ],
)
def test_repeats_are_read_and_stored_in_one_spelling(
    repeat: str | None, canonical: str | None
) -> None:
    parsed = parse_repeat(repeat)
    assert (parsed.text if parsed else None) == canonical


@pytest.mark.parametrize(
    ("repeat", "says"),
    [
        ("fortnightly", "cannot read"),
        ("every 10s", "at most once a minute"),
        ("every blue moon", "cannot read"),
        ("61 * * * *", "not a valid cron expression"),
        ("* * * *", "cannot read"),
        ("0 0 9 * * 1", "cannot read"),  # six fields
    ],
)
def test_unreadable_repeats_are_tool_errors_naming_the_forms(repeat: str, says: str) -> None:
    with pytest.raises(ToolError, match=says) as raised:
        parse_repeat(repeat)
    assert "daily" in str(raised.value) or "once a minute" in str(raised.value)


def test_unknown_time_zones_are_refused_with_an_example() -> None:
    assert zone_named(" Asia/Tokyo ").key == "Asia/Tokyo"
    for name in ("Mars/Olympus", "", "../etc/passwd", "Europe/"):
        with pytest.raises(ToolError, match="IANA name such as Europe/Berlin"):
            zone_named(name)


@pytest.mark.parametrize(
    "repeat", ["every 367d", "every 53w", "every 520000w", "every 99999999999999w"]
)
def test_a_repeat_longer_than_a_year_is_refused(repeat: str) -> None:
    with pytest.raises(ToolError, match="too long a repeat: at most a year"):
        parse_repeat(repeat)


@pytest.mark.parametrize("repeat", ["every 366d", "every 52w", "0 9 1 1 *", "0 9 29 2 *"])
def test_a_repeat_up_to_a_year_and_yearly_crons_are_kept(repeat: str) -> None:
    assert parse_repeat(repeat) is not None


@pytest.mark.parametrize(
    ("repeat", "gap"),
    [
        ("every 90m", timedelta(minutes=90)),
        ("hourly", timedelta(hours=1)),
        ("daily", timedelta(days=1)),
        ("weekly", timedelta(days=7)),
        ("0 * * * *", timedelta(hours=1)),
        ("*/30 * * * *", timedelta(minutes=30)),
        ("0 9,17 * * 1-5", timedelta(hours=8)),
        ("0 0,23 * * *", timedelta(hours=1)),  # 23:00, then 00:00 the next day
        ("0 23 28 2 *", None),  # yearly
        ("0 9 29 2 *", None),  # once in the year looked at
    ],
)
def test_a_repeats_shortest_gap_is_found(repeat: str, gap: timedelta | None) -> None:
    rule = parse_repeat(repeat)
    assert rule is not None
    assert rule.shortest_gap(timedelta(minutes=1)) == gap


def test_the_next_time_of_a_repeat_past_the_calendar_is_an_overflow() -> None:
    last_day = datetime(9999, 12, 31, 8, 0, tzinfo=UTC)
    for repeat in ("daily", "every 1d", "0 9 * * *"):
        with pytest.raises(OverflowError):
            Repeat(repeat).next_after(last_day, BERLIN, last_day)
