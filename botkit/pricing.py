"""What tokens cost: one price table, used for ``/usage``, the metrics and the logs.

Prices are US dollars per million tokens, as the Messages API's pricing page gave them when
read on 2026-11-28. Cache writes cost 1.25x the input price when kept five minutes and 2x
when kept an hour; cache reads 0.1x, except on the newest models (0.05x on Opus 5.5 and
Sonnet 5.5, 0.025x on Fable 5.1 and Mythos 5.1). Thinking is billed as output, whether or not
its text is shown. A call answered through the Message Batches API costs half of all of it
(input, output, cache writes and reads): its usage is kept under the model's name with
:data:`BATCH_MARK` after it (``claude-sonnet-5-5+batch``), priced here at half. A model botkit
does not know is priced like the dearest one it knows (a
budget is better too tight than too generous), and ``estimate`` says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from botkit.types import Usage

__all__ = [
    "BATCH_MARK",
    "PRICES",
    "PRICES_READ_ON",
    "Price",
    "batch_model",
    "cache_savings",
    "estimate",
    "price_for",
]

PRICES_READ_ON = "2026-11-28"
"""When the table below was read off the pricing page."""
CACHE_WRITE_FACTOR = 1.25
"""A five-minute cache write, as a multiple of the input price."""
CACHE_WRITE_1H_FACTOR = 2.0
"""A one-hour cache write, as a multiple of the input price."""
CACHE_READ_FACTOR = 0.1
"""A cache read on most models, as a multiple of the input price."""
BATCH_MARK = "+batch"
"""After a model's name in usage records: its calls went through the Message Batches API."""
BATCH_FACTOR = 0.5
"""What a batched call's tokens cost, as a multiple of the same call's at once (all kinds)."""
WEB_SEARCH_DOLLARS = 10.0 / 1000
"""One web search the API ran ($10 per 1,000, besides the tokens of its results); web fetch
costs its tokens only."""


@dataclass(frozen=True, slots=True)
class Price:
    """Dollars per million input and output tokens of one model."""

    input: float
    output: float
    cache_read: float = CACHE_READ_FACTOR
    """A cache read, as a multiple of ``input``."""
    long_prompt: tuple[int, Price] | None = None
    """Above this many prompt tokens (cache reads and writes included), this price instead."""
    audio_minute: float = 0.0
    """Dollars per minute of audio transcribed (speech-to-text models)."""
    million_chars: float = 0.0
    """Dollars per million characters spoken (text-to-speech models)."""

    def cost(self, usage: Usage) -> float:
        """Dollars for ``usage`` (one call's) at this price, cache writes and reads included."""
        if self.long_prompt is not None and _prompt_tokens(usage) > self.long_prompt[0]:
            return self.long_prompt[1].cost(usage)
        written_1h = min(usage.cache_write_1h_tokens, usage.cache_creation_input_tokens)
        billed_input = (
            usage.input_tokens
            + (usage.cache_creation_input_tokens - written_1h) * CACHE_WRITE_FACTOR
            + written_1h * CACHE_WRITE_1H_FACTOR
            + usage.cache_read_input_tokens * self.cache_read
        )
        tokens = (billed_input * self.input + usage.output_tokens * self.output) / 1_000_000
        return tokens + usage.web_search_requests * WEB_SEARCH_DOLLARS + self.voice_cost(usage)

    def halved(self) -> Price:
        """This price for calls answered through the Message Batches API (50 % off)."""
        long = None
        if self.long_prompt is not None:
            long = (self.long_prompt[0], self.long_prompt[1].halved())
        factor = BATCH_FACTOR
        return Price(self.input * factor, self.output * factor, self.cache_read, long)

    def voice_cost(self, usage: Usage) -> float:
        """Dollars for the audio transcribed and the characters spoken in ``usage``."""
        heard = usage.audio_seconds / 60 * self.audio_minute
        return heard + usage.spoken_chars / 1_000_000 * self.million_chars

    def voice_tokens(self, usage: Usage, chat: Price) -> int:
        """What the voice part of ``usage`` (at this price) costs, in input tokens of the
        ``chat`` model (for token budgets)."""
        return round(self.voice_cost(usage) / chat.input * 1_000_000) if chat.input else 0

    def search_tokens(self) -> int:
        """What one web search costs, in input tokens of this model (for token budgets)."""
        return round(WEB_SEARCH_DOLLARS / self.input * 1_000_000)


def _prompt_tokens(usage: Usage) -> int:
    return usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens


PRICES: dict[str, Price] = {
    "claude-fable-5-1": Price(10.0, 50.0, cache_read=0.025),
    "claude-mythos-5-1": Price(10.0, 50.0, cache_read=0.025),
    "claude-fable-5": Price(10.0, 50.0),
    "claude-mythos-5": Price(10.0, 50.0),
    "claude-opus-5-5": Price(4.0, 20.0, cache_read=0.05),
    "claude-opus-5": Price(5.0, 25.0),
    "claude-opus-4": Price(5.0, 25.0),
    "claude-sonnet-5-5": Price(2.0, 10.0, cache_read=0.05),
    "claude-sonnet-5": Price(2.0, 10.0),
    "claude-sonnet-4": Price(3.0, 15.0),
    "claude-haiku-5-5": Price(0.1, 0.5, long_prompt=(100_000, Price(0.5, 2.5))),
    "claude-haiku-4": Price(1.0, 5.0),
    "claude-3-5-haiku": Price(0.8, 4.0),
    "botkit-scripted": Price(0.0, 0.0),  # the scripted model of ``python -m botkit try``
    # Speech (OpenAI's and Groq's pricing pages, read 2026-11-28): per minute heard, per
    # million characters spoken; gpt-4o-mini-tts is billed by tokens, here as its estimate
    # per character.
    "whisper-1": Price(0.0, 0.0, audio_minute=0.006),
    "gpt-4o-transcribe": Price(0.0, 0.0, audio_minute=0.006),
    "gpt-4o-mini-transcribe": Price(0.0, 0.0, audio_minute=0.003),
    "whisper-large-v3-turbo": Price(0.0, 0.0, audio_minute=0.04 / 60),
    "whisper-large-v3": Price(0.0, 0.0, audio_minute=0.111 / 60),
    "tts-1-hd": Price(0.0, 0.0, million_chars=30.0),
    "tts-1": Price(0.0, 0.0, million_chars=15.0),
    "gpt-4o-mini-tts": Price(0.0, 0.0, million_chars=12.0),
}
"""Prefixes of model names and their prices; the longest matching prefix wins."""

FALLBACK = Price(10.0, 50.0, audio_minute=0.006, million_chars=30.0)
"""The price of a model not in the table: the dearest known (of speech models too)."""


def price_for(model: str) -> Price | None:
    """The price of ``model`` by its longest known prefix, or ``None`` (half of it for a
    batched model's name, ending with :data:`BATCH_MARK`)."""
    if model.endswith(BATCH_MARK):
        price = price_for(model.removesuffix(BATCH_MARK))
        return None if price is None else price.halved()
    matches = [prefix for prefix in PRICES if model.startswith(prefix)]
    return PRICES[max(matches, key=len)] if matches else None


def batch_model(model: str) -> str:
    """The name usage of ``model`` answered through a Message Batch is kept under."""
    return model if model.endswith(BATCH_MARK) else model + BATCH_MARK


def estimate(usage_by_model: Mapping[str, Usage]) -> tuple[float, bool]:
    """Dollars for the usage of each model, and whether every model's price was known.

    Usage summed over many calls is priced as one call: a model whose price depends on the
    prompt's length (Claude Haiku 5.5 above 100,000 tokens) is priced at its short rate."""
    total, known = 0.0, True
    for model, usage in usage_by_model.items():
        price = price_for(model)
        known = known and price is not None
        total += (price or FALLBACK).cost(usage)
    return total, known


def cache_savings(usage_by_model: Mapping[str, Usage]) -> float:
    """Dollars the prompt cache saved on this usage: what its prompts would have cost uncached,
    less what they cost (negative when writes cost more than reads saved)."""
    saved = 0.0
    for model, usage in usage_by_model.items():
        price = price_for(model) or FALLBACK
        prompt = (
            usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
        )
        uncached = Usage(input_tokens=prompt, output_tokens=usage.output_tokens)
        saved += price.cost(uncached) - price.cost(usage)
    return saved
