"""A small shop bot for the ``replay --rerun`` tests: one tool, a prompt, a fake-model script.

``python -m botkit replay … --rerun --bot rerun_shop:make`` loads it in a subprocess;
``SHOP_RESULT`` and ``SHOP_PROMPT`` change what its tool returns and its system prompt there,
and each call of the tool appends ``ToolContext.rerun`` to the file ``SHOP_LOG`` names. It
imports no test fakes, so the subprocess starts quickly.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from botkit import Bot, ToolContext

PROMPT = "You help customers with their orders."
FORMAL_PROMPT = "You help customers with their orders. Be formal."


async def lookup_order(ctx: ToolContext, id: int) -> str:
    """Look up an order by its number."""
    log = os.environ.get("SHOP_LOG")
    if log:
        with Path(log).open("a") as file:  # noqa: ASYNC230 - a test double, a tiny write
            file.write(f"{ctx.rerun}\n")
    return os.environ.get("SHOP_RESULT", "order {id}: shipped").format(id=id)


async def cancel_order(ctx: ToolContext, id: int) -> str:
    """Cancel an order by its number."""
    return f"order {id}: cancelled"


def shop_bot(**options: Any) -> Bot:
    """The shop bot (``options`` as ``Bot`` takes them: settings, llm, …)."""
    tools = [lookup_order] if os.environ.get("SHOP_NO_CANCEL") else [lookup_order, cancel_order]
    prompt = os.environ.get("SHOP_PROMPT", PROMPT)
    return Bot(tools=tools, system_prompt=prompt, scheduling=False, memory=False, **options)


def make() -> Bot:
    """The CLI target: the shop bot with settings from the environment."""
    return shop_bot()
