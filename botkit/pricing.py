"""What tokens cost: one price table, used for ``/usage`` and the logs.

Prices are US dollars per million tokens, as published for the Messages API (checked
2026-11). Cache writes cost 1.25x the input price, cache reads 0.1x. Unknown models are
priced like the Sonnet tier, and ``estimate`` says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from botkit.types import Usage

__all__ = ["PRICES", "Price", "estimate", "price_for"]

CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.1


@dataclass(frozen=True, slots=True)
class Price:
    """Dollars per million input and output tokens of one model."""

    input: float
    output: float

    def cost(self, usage: Usage) -> float:
        """Dollars for ``usage`` at this price, cache writes and reads included."""
        billed_input = (
            usage.input_tokens
            + usage.cache_creation_input_tokens * CACHE_WRITE_FACTOR
            + usage.cache_read_input_tokens * CACHE_READ_FACTOR
        )
        return (billed_input * self.input + usage.output_tokens * self.output) / 1_000_000


PRICES: dict[str, Price] = {
    "claude-opus-5": Price(5.0, 25.0),
    "claude-opus-4": Price(5.0, 25.0),
    "claude-sonnet-5": Price(3.0, 15.0),
    "claude-sonnet-4": Price(3.0, 15.0),
    "claude-haiku-4": Price(1.0, 5.0),
    "claude-3-5-haiku": Price(0.8, 4.0),
}
"""Prefixes of model names and their prices; the longest matching prefix wins."""

FALLBACK = PRICES["claude-sonnet-5"]


def price_for(model: str) -> Price | None:
    """The price of ``model`` by its longest known prefix, or ``None``."""
    matches = [prefix for prefix in PRICES if model.startswith(prefix)]
    return PRICES[max(matches, key=len)] if matches else None


def estimate(usage_by_model: Mapping[str, Usage]) -> tuple[float, bool]:
    """Dollars for the usage of each model, and whether every model's price was known."""
    total, known = 0.0, True
    for model, usage in usage_by_model.items():
        price = price_for(model)
        known = known and price is not None
        total += (price or FALLBACK).cost(usage)
    return total, known
