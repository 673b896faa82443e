"""A re-run's report as text lines, JSON lines, and a self-contained HTML page."""

from __future__ import annotations

import html
from collections.abc import Sequence

import orjson

from botkit.rerun.compare import RerunReport, Side, TurnReport, call_signature

__all__ = ["as_html", "as_json_lines", "as_lines", "summary_table"]

_CUT = 200


def as_lines(report: RerunReport) -> list[str]:
    """One line per turn, the tokens and cost line, then ``N turns, M changed``."""
    lines = [_turn_line(turn) for turn in report.turns]
    return [*lines, report.cost_line(), report.summary()]


def _turn_line(turn: TurnReport) -> str:
    line = turn.summary()
    if not turn.changed and turn.notes:
        line += " (" + "; ".join(turn.notes) + ")"
    return line


def as_json_lines(report: RerunReport) -> list[str]:
    """One JSON object per turn, then the summary object."""
    objects = [turn.as_json() for turn in report.turns] + [report.as_json()]
    return [orjson.dumps(obj).decode() for obj in objects]


def summary_table(reports: Sequence[tuple[str, RerunReport | str]]) -> list[str]:
    """One row per session: its turns and changed turns, or why it could not be re-run."""
    width = max([len("session"), *(len(name) for name, _ in reports)])
    rows = [f"{'session':<{width}}  {'turns':>5}  {'changed':>7}  result"]
    for name, report in reports:
        if isinstance(report, str):
            rows.append(f"{name:<{width}}  {'-':>5}  {'-':>7}  unreadable: {report}")
            continue
        result = "changed" if report.changed else "same"
        rows.append(f"{name:<{width}}  {len(report.turns):>5}  {len(report.changed):>7}  {result}")
    return rows


# --- the HTML page -------------------------------------------------------------------------------

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:1.3em} table{border-collapse:collapse;width:100%;table-layout:fixed}
td,th{border:1px solid #ccc;padding:.5em;vertical-align:top;text-align:left}
th{background:#f4f4f4} .same{background:#f3fbf3} .changed{background:#fff6e5}
pre{white-space:pre-wrap;margin:0;font:12px/1.4 ui-monospace,monospace}
.turn{font-weight:bold} .note{color:#8a5a00} .tool{color:#245}
"""


def as_html(reports: Sequence[RerunReport]) -> str:
    """A page with each turn's record and re-run side by side (no outside resources)."""
    sections = "\n".join(_html_report(report) for report in reports)
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<title>botkit re-run</title><style>{_STYLE}</style></head><body>"
        f"{sections}</body></html>\n"
    )


def _html_report(report: RerunReport) -> str:
    mode = f"llm {report.llm} · {'anchored' if report.anchored else 'free'}"
    if report.model:
        mode += f" · model {report.model}"
    rows = "\n".join(_html_turn(turn) for turn in report.turns)
    return (
        f"<h1>Re-run of {_e(report.session)}</h1><p>{_e(mode)}</p>"
        f"<p><b>{_e(report.summary())}</b> · {_e(report.cost_line())}</p>"
        "<table><tr><th style='width:22%'>turn</th><th>recorded</th><th>now</th></tr>"
        f"{rows}</table>"
    )


def _html_turn(turn: TurnReport) -> str:
    css = "changed" if turn.changed else "same"
    notes = "".join(f"<div class='note'>{_e(n)}</div>" for n in _turn_notes(turn))
    about = (
        f"<div class='turn'>turn {turn.number}: {css}</div>"
        f"<pre>{_e(_cut(turn.user_text))}</pre>{notes}"
    )
    return (
        f"<tr class='{css}'><td>{about}</td>"
        f"<td>{_html_side(turn.recorded)}</td><td>{_html_side(turn.now)}</td></tr>"
    )


def _turn_notes(turn: TurnReport) -> list[str]:
    notes = [turn.summary().split(" — ", 1)[1]] if turn.changed else []
    return notes + ([] if turn.changed else turn.notes)


def _html_side(side: Side) -> str:
    calls = "".join(
        f"<div class='tool'>→ {_e(_cut(call_signature(c)))}<br>↳ "
        f"{'ERROR ' if c.is_error else ''}{_e(_cut(c.result or '(no result)'))}</div>"
        for c in side.calls
    )
    tokens = side.usage.input_tokens + side.usage.output_tokens
    return f"{calls}<pre>{_e(side.answer) or '(no answer)'}</pre><small>{tokens:,} tokens</small>"


def _cut(text: str) -> str:
    return text if len(text) <= _CUT else text[: _CUT - 1] + "…"


def _e(text: str) -> str:
    return html.escape(text, quote=True)
