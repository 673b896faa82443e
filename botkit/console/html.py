"""The console's HTML: one inline stylesheet, pages built from escaped parts, SVG bar charts.

Nothing is loaded from elsewhere (no fonts, scripts or pictures from the internet): a page is
one response, readable on a phone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

__all__ = ["bar_chart", "form", "page", "table"]

_STYLE = """
*{box-sizing:border-box}body{margin:0;font:15px/1.45 system-ui,-apple-system,sans-serif;
color:#1b1f24;background:#f6f7f9}header{background:#22303c;color:#fff;padding:.5rem .8rem;
display:flex;flex-wrap:wrap;gap:.2rem .9rem;align-items:center}header a{color:#cfe3ff;
text-decoration:none}header b{margin-right:.6rem}main{padding:.8rem;max-width:60rem;margin:auto}
table{border-collapse:collapse;width:100%;background:#fff}td,th{padding:.35rem .5rem;
border-bottom:1px solid #e3e6ea;text-align:left;vertical-align:top}th{font-size:.85em;
color:#57606a}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.entry{background:#fff;border-radius:6px;padding:.5rem .7rem;margin:.5rem 0;
border-left:4px solid #9aa5b1}.user{border-left-color:#2f81f7}.assistant{border-left-color:#2da44e}
.meta{color:#57606a;font-size:.85em}.call,.result{font-family:ui-monospace,monospace;
font-size:.85em;white-space:pre-wrap;word-break:break-word;background:#f3f4f6;padding:.3rem;
border-radius:4px;margin:.2rem 0}pre{white-space:pre-wrap;word-break:break-word;margin:.2rem 0;
font:inherit}details{margin:.2rem 0}summary{cursor:pointer;color:#57606a}
form.inline{display:inline}button{font:inherit;padding:.3rem .8rem;border-radius:5px;
border:1px solid #8c959f;background:#fff;cursor:pointer}button.allow{background:#2da44e;
color:#fff;border-color:#2da44e}button.deny{background:#cf222e;color:#fff;border-color:#cf222e}
input{font:inherit;padding:.3rem;border:1px solid #8c959f;border-radius:5px}
.note{color:#57606a}.flash{background:#fff8c5;padding:.5rem;border-radius:5px}
svg{max-width:100%;height:auto;background:#fff}.bar{fill:#2f81f7}.bar2{fill:#8fbcf9}
"""

NAV = (
    ("/conversations", "Conversations"),
    ("/usage", "Usage"),
    ("/approvals", "Approvals"),
    ("/users", "Users"),
    ("/handoffs", "Handoffs"),
    ("/invites", "Invites"),
    ("/scheduled", "Scheduled"),
    ("/payments", "Payments"),
    ("/health", "Health"),
)


def page(title: str, body: str, *, csrf: str = "", status_line: str = "") -> str:
    """A whole page: ``title`` and ``body`` (HTML already escaped); with the session's
    ``csrf`` token, the menu and a Sign out button too."""
    nav = bool(csrf)
    links = "".join(f'<a href="{href}">{escape(text)}</a>' for href, text in NAV) if nav else ""
    signout = (
        '<form class="inline" method="post" action="/signout">'
        f'<input type="hidden" name="csrf" value="{escape(csrf)}">'
        f'{status_line}<button id="signout">Sign out</button></form>'
        if nav
        else ""
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>{escape(title)} · botkit console</title><style>{_STYLE}</style></head>"
        f"<body><header><b>botkit console</b>{links}{signout}</header>"
        f"<main><h1>{escape(title)}</h1>{body}</main></body></html>"
    )


def table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, numeric: Iterable[int] = ()
) -> str:
    """A table of ``rows`` (cells already escaped); the ``numeric`` columns right-aligned."""
    right = set(numeric)

    def cls(i: int) -> str:
        return ' class="n"' if i in right else ""

    head = "".join(f"<th{cls(i)}>{escape(h)}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f"<td{cls(i)}>{cell}</td>" for i, cell in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def form(target: str, csrf: str, label: str, *, css: str = "", **fields: str) -> str:
    """A one-button form posting to ``target`` with the session's CSRF token."""
    hidden = "".join(
        f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">'
        for k, v in {"csrf": csrf, **fields}.items()
    )
    klass = f' class="{css}"' if css else ""
    return (
        f'<form class="inline" method="post" action="{escape(target)}">{hidden}'
        f"<button{klass}>{escape(label)}</button></form>"
    )


def bar_chart(title: str, bars: Sequence[tuple[str, float]], *, unit: str = "") -> str:
    """A horizontal bar chart as inline SVG, each bar's label and value written beside it."""
    if not bars:
        return f'<p class="note">{escape(title)}: nothing yet.</p>'
    height, label_width, width = 22, 150, 600
    top = max(value for _, value in bars) or 1.0
    rows = []
    for i, (label, value) in enumerate(bars):
        y = i * height
        length = max(1.0, (width - label_width - 110) * value / top) if value else 0.0
        rows.append(
            f'<text x="0" y="{y + 15}" font-size="12">{escape(label[:24])}</text>'
            f'<rect class="bar" x="{label_width}" y="{y + 4}" width="{length:.1f}" height="14">'
            f"<title>{escape(label)}: {escape(_number(value, unit))}</title></rect>"
            f'<text x="{label_width + length + 6:.1f}" y="{y + 15}" font-size="12">'
            f"{escape(_number(value, unit))}</text>"
        )
    total = height * len(bars) + 4
    return (
        f"<h2>{escape(title)}</h2>"
        f'<svg role="img" aria-label="{escape(title)}" viewBox="0 0 {width} {total}" '
        f'width="{width}" height="{total}">{"".join(rows)}</svg>'
    )


def _number(value: float, unit: str) -> str:
    if unit == "$":
        return f"${value:,.4f}"
    return f"{value:,.0f}{unit}"
