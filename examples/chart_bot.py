"""A tool that draws a small bar chart with Pillow and sends it to the chat.

The tool returns a ``ToolImage``: botkit sends it with ``sendPhoto`` (the caption under it),
and the model is told it was sent and sees the picture, so it can talk about it.

Run it with ``python -m botkit run examples/chart_bot.py:bot``.
"""

from __future__ import annotations

import io

from PIL import Image, ImageDraw

from botkit import Bot, ToolError, ToolImage, tool

WIDTH, HEIGHT, MARGIN = 640, 400, 40
BAR = (66, 133, 244)


@tool
async def bar_chart(title: str, labels: list[str], values: list[float]) -> ToolImage:
    """Draw a bar chart and send it to the user.

    Args:
        title: What the chart shows, written above it.
        labels: One short label per bar.
        values: One non-negative number per bar, in the same order as the labels.
    """
    if not labels or len(labels) != len(values) or len(labels) > 24:
        raise ToolError("Give between 1 and 24 labels, and exactly one value for each.")
    if any(v < 0 for v in values):
        raise ToolError("Values must not be negative.")
    return ToolImage(draw_bars(title, labels, values), "chart.png", caption=title)


def draw_bars(title: str, labels: list[str], values: list[float]) -> bytes:
    """A PNG bar chart: the title on top, bars scaled to the largest value, labels below."""
    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    draw.text((MARGIN, 12), title, fill="black")
    top, bottom = MARGIN, HEIGHT - MARGIN
    slot = (WIDTH - 2 * MARGIN) / len(values)
    highest = max(values) or 1.0
    for index, (label, value) in enumerate(zip(labels, values, strict=True)):
        left = MARGIN + index * slot + slot * 0.15
        right = MARGIN + (index + 1) * slot - slot * 0.15
        height = (bottom - top) * value / highest
        draw.rectangle((left, bottom - height, right, bottom), fill=BAR)
        draw.text((left, bottom - height - 14), f"{value:g}", fill="black")
        draw.text((left, bottom + 6), label[:12], fill="black")
    draw.line((MARGIN, bottom, WIDTH - MARGIN, bottom), fill="black")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


bot = Bot(tools=[bar_chart])
