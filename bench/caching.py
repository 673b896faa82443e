"""What does prompt caching save on a long conversation with tools?

One user has a scripted 30-turn conversation with a support bot whose system prompt is about
3,000 tokens (12,000 characters of instructions and reference tables); on every third turn
the model first calls a tool, then answers. The conversation runs through botkit's own
``AgentLoop`` and ``AnthropicLLM`` (configured as ``Bot`` configures them: default
``BotOptions``, a ``Compactor``, streaming as ``Settings.stream_replies`` does by default)
against ``FakeAnthropicServer`` on loopback, which reports cache usage like the Messages API:
a prompt prefix seen before, up to a ``cache_control`` breakpoint, is a cache read; what a
request adds up to its last breakpoint is a cache write; tokens are characters / 4.

The conversation runs twice, each against a fresh fake: with ``prompt_caching=False`` (the
yardstick: the same loop without caching, as a user's plain loop would call the API) and with
``prompt_caching=True`` (botkit's default). Usage is botkit's own record: the sum of the
``Usage`` of every call, as ``ContextManager.usage_by_model`` keeps it for ``/usage``.

"Billed input tokens" weighs tokens as they are priced: plain input x 1, 5-minute cache
writes x 1.25, 1-hour cache writes x 2, cache reads x 0.1, from the usage the fake reported for
each call (its ``cache_creation`` split by TTL; the fake keeps each entry for its TTL, a read
refreshes it, and it looks for a cached prefix at most 20 blocks before a breakpoint, as the
API does). Target (#34): billed input with caching at most 15 % of the input without caching.
By default the turns follow each other at once; ``--pause-minutes N`` lets N minutes pass for
the cache after each turn (a user who pauses: 5-minute entries expire, 1-hour ones stay). When
the target is missed, the script says where the cache stopped hitting and reruns the cached
conversation with other history windows for comparison. It also prints the *floor*: what the
prompts botkit sent would bill with the best breakpoints there could be (``cache_floor``), so
a target below it is out of reach of breakpoint placement.

    python bench/caching.py [--turns 30] [--tool-every 3] [--model NAME] [--no-stream] [--calls]
                            [--pause-minutes 0]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botkit.agent.compaction import Compactor
from botkit.agent.context import ContextManager, TransformContext
from botkit.agent.loop import AgentLoop
from botkit.bot import BotOptions
from botkit.config import DEFAULT_MODEL
from botkit.llm.anthropic import AnthropicLLM
from botkit.llm.caching import CacheTTL
from botkit.pricing import CACHE_READ_FACTOR, CACHE_WRITE_FACTOR, estimate
from botkit.testing import FakeAnthropicServer, FakeReply
from botkit.testing.anthropic import _segments, _tokens  # the fake's own prefix accounting
from botkit.tools import ToolContext, ToolRegistry, tool
from botkit.types import Message, Usage

USER_ID = 4242
WRITE_1H_FACTOR = 2.0
"""A 1-hour cache write costs twice the input price (5-minute writes: ``CACHE_WRITE_FACTOR``)."""
SEED = 7

# ---------------------------------------------------------------------------- the system prompt

INSTRUCTIONS = """\
You are Page, the customer assistant of Northwind Books, an independent bookshop with six
branches and an online store that ships to 28 countries. You talk with customers on Telegram.
Most of them write from a phone, between other things, so they value short, exact answers
over long explanations. You represent the shop: be warm and plain-spoken, never pushy, and
never promise what the shop cannot do.

## Who you talk to
Customers write about orders they placed, books they are looking for, deliveries, returns,
gift cards, events in the branches and the loyalty programme. Some write in English, some in
German, French, Spanish or Italian; answer in the language of their last message. If a
message mixes languages, use the one that carries the question. Address people the way they
address you: if they use first names, you may too; otherwise stay polite and neutral.

## What you can do
You can look up orders by their number (format NW- followed by six digits), search the
catalogue by title, author, ISBN or topic, and check shipping options and prices for a
destination country and a parcel weight. You cannot change an order, refund money, issue a
gift card or book an event seat yourself: for those, explain the next step and offer to hand
the conversation to a colleague (see Escalation). Never invent an order status, a price, a
delivery date or a stock level: if a tool did not tell you, say that you do not know yet and
look it up, or say plainly that you cannot find out.

## Using the tools
- lookup_order: call it whenever the customer mentions an order number, or asks about "my
  order" and gave its number earlier in the conversation. If they did not give a number, ask
  for it once; do not guess. The result lists the items, the payment state, the warehouse
  status and the carrier's tracking events. Summarise; do not paste the raw result.
- search_catalog: call it for any question about whether a book exists, is in stock, or
  what it costs. Prefer the ISBN when the customer gives one. Mention at most three results,
  each with title, author, format and price, unless the customer asks for more.
- check_shipping: call it when the customer asks what delivery to a country costs or how
  long it takes. Weights: paperback 350 g, hardcover 700 g, boxed set 1,800 g, unless the
  catalogue says otherwise. Quote the cheapest and the fastest option.
Call one tool at a time unless two lookups are clearly independent. If a tool fails, tell
the customer briefly that the lookup did not work and offer to try again in a minute.

## Orders and delivery
Orders placed before 14:00 on a working day leave the warehouse the same day; later orders
leave the next working day. Pre-orders ship on the publication date. An order in the state
"picking" can still be changed by the warehouse team within about an hour; "packed" or
"shipped" orders cannot be changed, only returned. Tracking numbers become active a few
hours after the parcel is handed to the carrier; if a customer says the link shows nothing,
explain that before anything else. A parcel that shows no movement for five working days
inside the EU (eight outside) counts as delayed: apologise, and offer a colleague who can
open an investigation with the carrier. Never blame the carrier by name.

## Returns and refunds
Books can be returned within 30 days of delivery if they are unread and undamaged; signed
copies and personalised gifts cannot be returned unless they arrived damaged. Damaged or
wrong items: ask for a photo, apologise, and hand over to a colleague who arranges a free
replacement or refund. Refunds go back to the original payment method within 5 to 10
working days after the return arrives. Gift card purchases are refunded as store credit.
Do not ask for bank details, card numbers or passwords, ever, and tell customers who send
them to delete the message.

## Payments, prices and the loyalty programme
Prices include VAT for EU addresses; for other countries the checkout shows prices without
VAT and the customer may owe import duties. Northwind accepts cards, PayPal, bank transfer
(orders are held for seven days until the transfer arrives) and gift cards. Loyalty members
collect one point per euro spent and get a 5 euro voucher per 100 points; points expire
after two years. Members get free shipping inside Germany from 25 euro, everyone else from
40 euro. Student discounts (10 %) apply to academic titles only, with a valid student
email address.

## Events and branches
The branches host readings, children's story hours and book clubs. You may tell customers
what is on and where, but seats are booked on the website or in the branch. Opening hours
and addresses are in the reference tables below; public holidays follow the branch's region.

## Style on Telegram
Keep answers under about 120 words unless the customer asks for detail. Use short
paragraphs; use a list only for three or more items. Bold (with **) at most one phrase per
answer, for the thing the customer must not miss, such as a deadline. No headings, no
tables, no emoji unless the customer uses them first. Prices with currency and two
decimals. Dates as "12 March" (add the year only if it is not the current one).

## Gift cards
Gift cards exist as printed cards (sold in the branches) and as e-gift cards (10 to 200 EUR,
sent by email on a chosen date). Both are valid for three years and work online and in
every branch; a balance can be checked on the website with the code.

## Privacy and safety
Only discuss an order with the person who placed it: if the name or email they give does
not match the order, say you cannot share its details and suggest they contact the shop
from the address used for the order. Do not repeat a customer's full address back to them;
the city is enough. Politely decline anything unrelated to books, reading and the shop's
services; a little small talk about books is fine. If someone seems distressed, be kind,
and point to local help lines if they mention harming themselves.

## Escalation
Offer a colleague when: an order is delayed, an item is damaged or wrong, a payment failed
twice, a customer asks for a refund outside the rules, or a customer is unhappy after two
attempts to help. Say that a colleague will reply in this chat within one working day
(Monday to Saturday, 9:00 to 18:00 Berlin time), and summarise the case in one sentence so
the customer can confirm it is right. Never close a conversation while a question is open.
"""

FAQ = """\
## Reference: answers to frequent questions
- Can I change the delivery address? Only while the order is "picking"; offer a colleague,
  who will try within the hour. Once "packed", the customer can redirect the parcel with the
  carrier using the tracking link.
- Do you ship to Packstations or parcel lockers? Yes, inside Germany; enter the locker as the
  street address and the customer number as the first line.
- Can I order a book you don't list? Yes, most books in print in Germany, the UK and the US
  can be ordered in 3 to 10 working days; the customer asks in a branch or by email.
- Do you sell second-hand or signed books? Signed copies appear in the catalogue as a separate
  format; we do not sell second-hand books.
- Do you gift-wrap? Yes, for 2.50 EUR per parcel, chosen at checkout; gift notes are free.
- Can schools and libraries order on invoice? Yes, through the business account; a colleague
  sets it up after checking the institution.
- Do you price-match? No, but book prices in Germany are fixed by law, so new German-language
  books cost the same everywhere.
- The website says "temporarily unavailable": the publisher is reprinting; we order it as soon
  as copies exist and keep the order open, unless the customer cancels.
"""

COUNTRIES = [
    ("Germany", 3.90, 1, 9.90, "1-2"),
    ("Austria", 5.90, 2, 14.90, "2-3"),
    ("Switzerland", 12.90, 4, 24.90, "3-5"),
    ("France", 6.90, 2, 16.90, "3-4"),
    ("Belgium", 6.90, 2, 16.90, "2-4"),
    ("Netherlands", 6.90, 2, 16.90, "2-3"),
    ("Luxembourg", 6.90, 2, 16.90, "2-3"),
    ("Denmark", 7.90, 3, 18.90, "3-4"),
    ("Sweden", 8.90, 3, 19.90, "3-5"),
    ("Finland", 8.90, 3, 19.90, "4-6"),
    ("Norway", 14.90, 5, 29.90, "4-7"),
    ("Poland", 6.90, 2, 16.90, "3-5"),
    ("Czechia", 6.90, 2, 16.90, "3-4"),
    ("Slovakia", 7.90, 3, 17.90, "3-5"),
    ("Hungary", 7.90, 3, 17.90, "4-6"),
    ("Slovenia", 7.90, 3, 17.90, "3-5"),
    ("Croatia", 8.90, 3, 19.90, "4-6"),
    ("Italy", 8.90, 3, 19.90, "4-6"),
    ("Spain", 8.90, 3, 19.90, "4-6"),
    ("Portugal", 9.90, 3, 21.90, "4-7"),
    ("Ireland", 9.90, 3, 21.90, "4-6"),
    ("United Kingdom", 12.90, 4, 27.90, "4-7"),
    ("Greece", 10.90, 4, 23.90, "5-8"),
    ("Estonia", 9.90, 3, 21.90, "4-6"),
    ("Latvia", 9.90, 3, 21.90, "4-6"),
    ("Lithuania", 9.90, 3, 21.90, "4-6"),
    ("United States", 19.90, 6, 44.90, "6-10"),
    ("Canada", 21.90, 6, 46.90, "7-12"),
]

BRANCHES = [
    ("Berlin Mitte", "Linienstrasse 118", "Mon-Sat 10:00-20:00", "readings on Thursdays"),
    ("Berlin Neukoelln", "Weserstrasse 54", "Mon-Sat 11:00-19:00", "children's hour Saturdays"),
    ("Hamburg", "Grindelallee 41", "Mon-Fri 10:00-19:00, Sat 10:00-18:00", "book club Tuesdays"),
    ("Leipzig", "Karl-Liebknecht-Strasse 9", "Mon-Sat 10:00-19:00", "readings monthly"),
    ("Munich", "Tuerkenstrasse 21", "Mon-Fri 9:30-19:30, Sat 9:30-18:00", "science talks"),
    ("Cologne", "Zuelpicher Strasse 30", "Mon-Sat 10:00-19:30", "crime fiction club Wednesdays"),
]

EVENTS = [
    ("Berlin Mitte", "Thursday 19:30", "reading: Ines Carvalho, 'Small Hours'", "8 EUR"),
    ("Hamburg", "Tuesday 19:00", "book club: 'The Weight of Snow'", "free, sign up in branch"),
    ("Leipzig", "Friday 20:00", "poetry night with open mic", "5 EUR, drink included"),
    ("Munich", "Wednesday 18:30", "science talk: starlings and murmurations", "free"),
    ("Cologne", "Wednesday 19:30", "crime fiction club: 'The Salt Roads'", "free"),
    ("Berlin Neukoelln", "Saturday 11:00", "children's story hour (ages 4-7)", "free"),
    ("Berlin Mitte", "Sunday 16:00", "translation workshop, Italian to German", "15 EUR"),
]


def system_prompt() -> str:
    """About 12,000 characters: instructions plus the reference tables a real shop would add."""
    lines = [INSTRUCTIONS, FAQ, "## Reference: shipping from our Berlin warehouse"]
    lines.append("Country: standard price for 1 kg / extra per kg / express price / days")
    for country, standard, extra, express, days in COUNTRIES:
        lines.append(
            f"- {country}: standard {standard:.2f} EUR, +{extra:.2f} EUR per extra kg, "
            f"express {express:.2f} EUR, standard delivery {days} working days"
        )
    lines.append("\n## Reference: branches")
    for name, street, hours, events in BRANCHES:
        lines.append(f"- {name}, {street}: {hours}; {events}")
    lines.append("\n## Reference: events this week (seats: website or branch)")
    for branch, when, what, price in EVENTS:
        lines.append(f"- {branch}, {when}: {what}; {price}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- the tools


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by its number (NW- and six digits): items, payment and tracking.

    Args:
        order_id: The order number, e.g. NW-204518.
    """
    rng = random.Random(order_id)
    items = [
        {
            "isbn": f"978{rng.randrange(10**9, 10**10)}",
            "title": rng.choice(TITLES),
            "format": rng.choice(["paperback", "hardcover"]),
            "quantity": 1,
            "price_eur": round(rng.uniform(9, 39), 2),
        }
        for _ in range(rng.randint(1, 3))
    ]
    events = [
        {"at": f"2026-03-{day:02d}T{rng.randint(7, 20):02d}:{rng.randint(0, 59):02d}", "event": e}
        for day, e in zip(
            range(9, 14),
            ["order received", "payment confirmed", "picked", "handed to carrier", "in transit"],
            strict=True,
        )
    ]
    return {
        "order_id": order_id,
        "customer": "matches the chat's customer",
        "items": items,
        "payment": {"method": "card", "state": "captured"},
        "warehouse_status": "shipped",
        "carrier": {"service": "standard", "tracking": f"JJD{rng.randrange(10**13, 10**14)}"},
        "tracking_events": events,
    }


@tool
def search_catalog(query: str, max_results: int = 3) -> list[dict[str, Any]]:
    """Search the catalogue by title, author, ISBN or topic.

    Args:
        query: What to look for.
        max_results: How many results to return at most.
    """
    rng = random.Random(query)
    return [
        {
            "isbn": f"978{rng.randrange(10**9, 10**10)}",
            "title": rng.choice(TITLES),
            "author": rng.choice(AUTHORS),
            "format": rng.choice(["paperback", "hardcover", "ebook"]),
            "price_eur": round(rng.uniform(8, 45), 2),
            "in_stock": rng.randint(0, 14),
            "branches_with_stock": rng.sample([b[0] for b in BRANCHES], k=2),
        }
        for _ in range(max_results)
    ]


@tool
def check_shipping(country: str, weight_grams: int) -> dict[str, Any]:
    """Shipping options and prices for a parcel to a country.

    Args:
        country: The destination country, in English.
        weight_grams: The parcel's weight in grams.
    """
    row = next((c for c in COUNTRIES if c[0].lower() == country.lower()), COUNTRIES[0])
    extra_kg = max(0, (weight_grams - 1) // 1000)
    return {
        "country": row[0],
        "weight_grams": weight_grams,
        "options": [
            {"service": "standard", "price_eur": round(row[1] + extra_kg * row[2], 2)},
            {"service": "express", "price_eur": round(row[3] + extra_kg * row[2], 2)},
        ],
        "standard_days": row[4],
        "express_days": "1-2",
        "free_shipping_from_eur": 25 if row[0] == "Germany" else 40,
    }


TITLES = [
    "The Salt Roads",
    "A Map of Quiet Rivers",
    "Small Hours",
    "The Glass Orchard",
    "Letters from the Northern Line",
    "An Atlas of Lost Kitchens",
    "The Weight of Snow",
    "Field Notes on Starlings",
]
AUTHORS = ["Mara Lindqvist", "Tomasz Wrobel", "Ines Carvalho", "Jonah Achterberg", "Lea Brandt"]

# ---------------------------------------------------------------------------- the conversation

QUESTIONS = [
    "Hi! I ordered two books last week as a birthday present for my sister and I'm getting a "
    "bit nervous because the party is on Saturday. The order number is {order}. Can you tell "
    "me where it is right now and whether it will make it in time?",
    "Do you have anything by {author}? A friend recommended her at book club and I'd like to "
    "start with whatever is considered her best novel, ideally as a paperback because I read "
    "on the train and hardcovers are too heavy for my bag.",
    "How much would it cost to send a hardcover and two paperbacks to {country}? My parents "
    "live there and I'd like to surprise them, but last time the shipping was more than the "
    "books themselves, so I want to check before I order anything.",
    "Thanks, that helps. One more question: if I join the loyalty programme now, do the points "
    "count for this order as well, or only for the next one? And do the points expire?",
    "The tracking link you gave me shows nothing at all, just 'no information available'. Is "
    "that normal? I'm a bit worried the parcel got lost somewhere between you and the carrier.",
    "I'd like to return one of the books, it turned out my sister already had it. It's still "
    "in its wrapping. How does that work and how long until I get the money back on my card?",
    "Is the {branch} branch open on Saturday afternoon? I'd like to pick up a book there "
    "instead of waiting for delivery, if that's possible at all with an online order.",
    "Can you recommend something similar to '{title}'? I loved the slow pace and the "
    "descriptions of the landscape, but I'd prefer something a little less sad this time.",
    "I paid by bank transfer on Monday but the order still says 'awaiting payment'. How long "
    "does it usually take, and will the order be cancelled if the money arrives late?",
    "Do you do gift cards that can be sent by email? I need something for a colleague who is "
    "leaving on Friday and I have no idea what she has already read.",
]

ANSWERS = [
    "Thanks for waiting. Your order left our warehouse on Tuesday and is now with the carrier; "
    "the last scan shows it in transit to your regional depot. Standard delivery inside "
    "Germany takes one to two working days from here, so it should arrive by **Friday**. If "
    "the tracking shows no movement by Thursday evening, write to me and I'll ask a colleague "
    "to contact the carrier for you.",
    "We have three of her books in stock. The one most readers start with is her second "
    "novel, available as a paperback for 14.00 EUR; the newer one is only out in hardcover so "
    "far (24.00 EUR). Both are in stock online, and the paperback is also on the shelf in our "
    "Hamburg and Leipzig branches if you'd rather pick it up.",
    "For a hardcover and two paperbacks (about 1.4 kg) the cheapest option is standard "
    "shipping, which takes a few working days; express is about twice the price and arrives "
    "within two working days. From 40.00 EUR of books, standard shipping is free, so adding a "
    "small paperback might cost you less than the postage.",
    "Points are collected from the moment you join, so an order you place after signing up "
    "counts in full: one point per euro. Orders from before you joined are not added "
    "retroactively, I'm afraid. Points stay valid for two years, and every 100 points become a "
    "5.00 EUR voucher automatically.",
    "That's normal for the first few hours: the tracking number becomes active once the "
    "carrier scans the parcel at their depot, which usually happens the evening after we hand "
    "it over. If it still shows nothing tomorrow afternoon, let me know and I'll have a "
    "colleague look into it with the carrier.",
    "Sure. Unread books in their wrapping can be returned within 30 days of delivery. Use the "
    "return label in the parcel (or the one in your account), and once the book arrives back "
    "with us the refund goes to your card within 5 to 10 working days. You'll get an email "
    "when we've received it.",
    "Yes, the branch is open on Saturdays until 18:00. For online orders you can choose "
    "'pick up in branch' at checkout; we'll send you a message when the book is ready, usually "
    "the next working day. Bring the order number or the message, no ID needed.",
    "If you liked the landscape and the pace, two books come to mind: a quiet novel about a "
    "family running a lighthouse on the Baltic coast, and a walking memoir through the Scottish "
    "islands that is gentle and often funny. Both are paperbacks around 13.00 EUR and in stock.",
    "Bank transfers usually take one to two working days to reach us, sometimes three if they "
    "were sent on a Friday. Orders are held for seven days, so nothing will be cancelled yet. "
    "Once the payment arrives the status changes automatically and you'll get a confirmation.",
    "Yes, we have e-gift cards from 10.00 to 200.00 EUR. You choose the amount, add a short "
    "message and the date it should be sent, and your colleague gets an email with a code that "
    "works online and in all six branches. They're valid for three years.",
]

FILLERS = [
    " Sorry for all the questions, it's my first order with you.",
    " By the way, the last order arrived nicely packed, thank you for that.",
    " I'm writing from my phone, so excuse any typos.",
    " No rush, but I'd like to sort it out today if possible.",
    "",
]

SIGN_OFFS = [
    " Anything else I can help with?",
    " Let me know if you'd like me to check anything else.",
    "",
]

TOOL_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("lookup_order", {"order_id": "NW-204518"}, "Let me look up that order for you."),
    ("search_catalog", {"query": "Mara Lindqvist", "max_results": 3}, "Let me check."),
    ("check_shipping", {"country": "Austria", "weight_grams": 1400}, "I'll check the prices."),
    ("lookup_order", {"order_id": "NW-204777"}, "One moment, I'm checking the order."),
    ("search_catalog", {"query": "quiet landscape novel", "max_results": 3}, "Let me search."),
]


@dataclass(frozen=True)
class Turn:
    """One scripted exchange: what the user writes and what "Claude" answers."""

    user_text: str
    replies: tuple[FakeReply, ...]
    answer: str


def script(turns: int, tool_every: int) -> list[Turn]:
    """A deterministic conversation; every ``tool_every``-th turn calls a tool first."""
    rng = random.Random(SEED)
    out: list[Turn] = []
    for number in range(1, turns + 1):
        question = QUESTIONS[(number - 1) % len(QUESTIONS)].format(
            order=f"NW-{rng.randrange(200_000, 300_000)}",
            author=rng.choice(AUTHORS),
            country=rng.choice(COUNTRIES)[0],
            branch=rng.choice(BRANCHES)[0],
            title=rng.choice(TITLES),
        )
        answer = ANSWERS[(number - 1) % len(ANSWERS)] + rng.choice(SIGN_OFFS)
        user_text = question + rng.choice(FILLERS)
        replies: list[FakeReply] = []
        if tool_every and number % tool_every == 0:
            name, args, preface = TOOL_CALLS[(number // tool_every - 1) % len(TOOL_CALLS)]
            replies.append(FakeReply.tool_use(name, args, text=preface))
        replies.append(FakeReply.text(answer))
        out.append(Turn(user_text, tuple(replies), answer))
    return out


# ---------------------------------------------------------------------------- running it


@dataclass
class Run:
    """One pass of the conversation: botkit's usage records and what they cost."""

    label: str
    total: Usage
    per_call: list[Usage]
    dollars: float
    prices_known: bool
    seconds: float
    written_1h: int = 0
    """Of the cache writes, those kept an hour (as the fake reported them)."""
    floor: float = 0.0
    """The least any breakpoints could bill for the prompts this run sent (:func:`cache_floor`)."""
    thinking_blocks: int = 0
    """Thinking blocks in the model's answers (today's models send them unasked)."""
    kept: int = 0
    """Reads the cache keeper sent to keep the tools and system prompt (billed in ``total``)."""

    @property
    def written_5m(self) -> int:
        """Of the cache writes, those kept five minutes."""
        return self.total.cache_creation_input_tokens - self.written_1h

    @property
    def billed_input(self) -> float:
        """Input tokens weighted as priced: plain x1, cache writes x1.25 (5 minutes) or x2 (an
        hour), cache reads x0.1."""
        u = self.total
        return (
            u.input_tokens
            + CACHE_WRITE_FACTOR * self.written_5m
            + WRITE_1H_FACTOR * self.written_1h
            + CACHE_READ_FACTOR * u.cache_read_input_tokens
        )

    def shares(self, uncached: float) -> str:
        """Plain input, writes and reads as shares of the uncached run's billed input."""
        u = self.total
        parts = [
            ("plain input", u.input_tokens),
            ("5-minute writes", CACHE_WRITE_FACTOR * self.written_5m),
            ("1-hour writes", WRITE_1H_FACTOR * self.written_1h),
            ("reads", CACHE_READ_FACTOR * u.cache_read_input_tokens),
        ]
        return ", ".join(f"{name} {value / uncached:.1%}" for name, value in parts)

    @property
    def prompt_tokens(self) -> int:
        """Every prompt token sent, however it was billed."""
        u = self.total
        return u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens


async def converse(
    turns: list[Turn],
    *,
    caching: bool,
    model: str,
    stream: bool,
    label: str,
    max_messages: int | None = None,
    transform_context: TransformContext | None = None,
    pause_minutes: float | list[float] = 0.0,
    cache_ttl: CacheTTL = "auto",
) -> Run:
    """The whole conversation through botkit's loop, against a fresh fake Messages API."""
    options = BotOptions()
    registry = ToolRegistry([lookup_order, search_catalog, check_shipping])
    system = system_prompt()
    async with FakeAnthropicServer() as fake:
        llm = AnthropicLLM(
            api_key="bench-key",
            model=model,
            base_url=fake.base_url,
            max_retries=0,
            prompt_caching=caching,
            cache_ttl=cache_ttl,
        )
        loop = AgentLoop(
            llm,
            max_iterations=options.max_iterations,
            texts=options.loop_texts,
            compactor=Compactor(llm, max_context_chars=options.max_context_chars),
        )
        context = ContextManager(
            USER_ID,
            max_messages=max_messages or options.max_messages,
            transform_context=transform_context,
        )
        tool_context = ToolContext(user_id=USER_ID, chat_id=USER_ID, timestamp=datetime.now(UTC))
        streamed: list[str] = []

        async def sink(delta: str) -> None:
            streamed.append(delta)

        kept: list[Usage] = []  # the cache keeper's reads (BOTKIT_CACHE_KEEP_WARM, default on)
        if llm.keeper is not None:
            llm.keeper.clock = fake.now  # its reads fall due on the cache's clock

            async def count_kept(model: str, usage: Usage) -> None:
                kept.append(usage)

            llm.keeper.on_usage = count_kept
        pauses = _pauses(pause_minutes, len(turns))
        clock = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)  # the user's: it moves as the cache's
        started = time.perf_counter()
        try:
            for number, turn in enumerate(turns, start=1):
                fake.enqueue(*turn.replies)
                message = Message.user_text(turn.user_text)
                await context.append(message, update_id=number, timestamp=clock)
                result = await loop.run(
                    context,
                    system=system,
                    tools=registry,
                    tool_context=tool_context,
                    on_text=sink if stream else None,
                )
                if result.text != turn.answer or fake.queued:
                    raise RuntimeError(f"turn {number} went off script: {result.text[:80]!r}")
                await let_pass(fake, llm, pauses[number - 1] * 60)
                clock += timedelta(minutes=pauses[number - 1])
        finally:
            await llm.close()
        seconds = time.perf_counter() - started
        if len(fake.requests) != sum(len(t.replies) for t in turns) + len(kept):
            raise RuntimeError(f"expected one request per scripted reply, got {len(fake.requests)}")
        written_1h = sum(u["cache_creation"]["ephemeral_1h_input_tokens"] for u in fake.usages)
        floor = cache_floor([request.body for request in fake.requests])
    per_call = [m.usage for m in context.messages if m.role == "assistant" and m.usage]
    total = sum(context.usage_by_model.values(), Usage())
    if total != sum(per_call, Usage()):
        raise RuntimeError("usage_by_model disagrees with the per-call usage")
    by_model = dict(context.usage_by_model)
    if kept:  # the keeper's reads are billed like any call
        total = total + sum(kept, Usage())
        by_model[model] = by_model.get(model, Usage()) + sum(kept, Usage())
    dollars, known = estimate(by_model)
    # botkit.pricing prices every cache write as a 5-minute one: add what the hour costs more
    dollars += _extra_for_hour_writes(written_1h, model)
    thinking = sum(len(m.thinking) for m in context.messages if m.role == "assistant")
    run = Run(label, total, per_call, dollars, known, seconds, written_1h, floor, thinking)
    run.kept = len(kept)
    return run


async def let_pass(fake: FakeAnthropicServer, llm: AnthropicLLM, seconds: float) -> None:
    """Let ``seconds`` pass for the cache, the cache keeper reading its prefixes when they fall
    due on the way (as its background task does in real time)."""
    end = fake.now() + seconds
    keeper = llm.keeper
    while keeper is not None and (due := keeper.next_due()) is not None and due <= end:
        fake.advance(max(0.0, due - fake.now()))
        await keeper.ping_due()
    fake.advance(max(0.0, end - fake.now()))


def _pauses(minutes: float | list[float], turns: int) -> list[float]:
    """The pause after each turn: one figure for all, or one per turn."""
    return [minutes] * turns if isinstance(minutes, int | float) else list(minutes)


def cache_floor(bodies: list[dict[str, Any]]) -> float:
    """The billed input of these prompts with the best breakpoints there could be.

    A call can at best read from the cache the longest prefix an earlier call sent (0.1x);
    of the rest, what a later call sends again must be written (1.25x, the cheaper TTL) and
    what none does is plain input (1x). Breakpoints are taken as free and unlimited, entries
    as never expiring and the minimum cacheable length as zero, so no placement bills less:
    a target below this figure cannot be met by where the breakpoints go, only by sending less.
    """
    calls = [_segments(body) for body in bodies]
    digests = [[segment.digest for segment in segments] for segments in calls]
    billed = 0.0
    for i, segments in enumerate(calls):
        sent = _tokens(segments[-1].chars)
        before = set().union(*digests[:i]) if i else set()
        after = set().union(*digests[i + 1 :]) if i + 1 < len(calls) else set()
        shared = _prefix_tokens(segments, before)
        reused = max(shared, _prefix_tokens(segments, after))
        billed += 0.1 * shared + CACHE_WRITE_FACTOR * (reused - shared) + (sent - reused)
    return billed


def _prefix_tokens(segments: list[Any], seen: set[str]) -> int:
    """Tokens of the longest prefix of ``segments`` whose (chained) digest is in ``seen``."""
    ends = [segment.chars for segment in segments if segment.digest in seen]
    return _tokens(max(ends)) if ends else 0


def _extra_for_hour_writes(tokens: int, model: str) -> float:
    """What ``tokens`` of 1-hour writes cost beyond the 5-minute price ``estimate`` used."""
    if not tokens:
        return 0.0
    one = {model: Usage(input_tokens=1_000_000)}
    per_million, _ = estimate(one)
    return per_million * (WRITE_1H_FACTOR - CACHE_WRITE_FACTOR) * tokens / 1_000_000


def describe(run: Run) -> None:
    """Print a run's token figures."""
    u = run.total
    print(f"{run.label}: {len(run.per_call)} calls in {run.seconds:.2f} s")
    print(f"  prompt tokens sent:  {run.prompt_tokens:>9,}")
    print(f"  plain input tokens:  {u.input_tokens:>9,}")
    print(
        f"  cache writes:        {u.cache_creation_input_tokens:>9,} ({run.written_5m:,} for 5 "
        f"minutes, {run.written_1h:,} for an hour)"
    )
    print(f"  cache reads:         {u.cache_read_input_tokens:>9,}")
    print(f"  billed input tokens: {run.billed_input:>11,.0f}")
    print(f"  output tokens:       {u.output_tokens:>9,}")
    known = "" if run.prices_known else " (model not in botkit.pricing: priced as Sonnet)"
    print(f"  estimated cost:      ${run.dollars:.4f}{known}")


def print_calls(run: Run) -> None:
    """One line per LLM call: how its prompt was billed."""
    print(f"  per call ({run.label}): input / cache write / cache read")
    for index, u in enumerate(run.per_call, start=1):
        print(
            f"    {index:>3}: {u.input_tokens:>6,} / {u.cache_creation_input_tokens:>6,} / "
            f"{u.cache_read_input_tokens:>6,}"
        )


def fixed_prefix_reads(run: Run) -> list[int]:
    """Calls (1-based) after the first whose cache read was only the tools + system prompt."""
    first = run.per_call[0].cache_creation_input_tokens if run.per_call else 0
    floor = min((u.cache_read_input_tokens for u in run.per_call[1:]), default=0)
    return [
        index
        for index, u in enumerate(run.per_call[1:], start=2)
        if u.cache_read_input_tokens == floor and u.cache_read_input_tokens < first
    ]


async def diagnose(
    turns: list[Turn], plain: Run, cached: Run, args: argparse.Namespace, pauses: list[float]
) -> None:
    """Why the target was missed: where the cache stopped hitting, and what would fix it."""
    options = BotOptions()
    misses = fixed_prefix_reads(cached)
    print("diagnosis:")
    if misses:
        rewritten = sum(cached.per_call[i - 1].cache_creation_input_tokens for i in misses)
        print(
            f"  {len(misses)} of {len(cached.per_call)} calls read only the tools + system "
            f"prompt ({cached.per_call[misses[0] - 1].cache_read_input_tokens:,} tokens) from "
            f"the cache, the first at call {misses[0]}: the conversation prefix had changed, so "
            f"those calls wrote {rewritten:,} tokens back to the cache at 1.25x"
        )
        print(
            f"  cause: ContextManager.prepare() keeps the last max_messages="
            f"{options.max_messages} (botkit.agent.history.trim), cutting the oldest "
            f"{options.max_messages // 2} at a time: each cut moves the window's start, so the "
            "call after it shares only the tools and system prompt with the one before"
        )
    print(
        f"  the floor ({cached.floor / plain.billed_input:.1%}) is what these prompts cost with "
        "the best breakpoints; below it, only sending less helps. Other history windows:"
    )
    for label, extra in [
        ("no trimming (max_messages=10,000)", {"max_messages": 10_000}),
        ("max_messages=20", {"max_messages": 20}),
        ("max_messages=60", {"max_messages": 60}),
    ]:
        run = await converse(
            turns,
            caching=True,
            model=args.model,
            stream=not args.no_stream,
            label=label,
            pause_minutes=pauses,
            **extra,
        )
        print(
            f"  caching on, {label}: billed input {run.billed_input:,.0f} = "
            f"{run.billed_input / plain.billed_input:.1%} of the uncached run's input, floor "
            f"{run.floor / plain.billed_input:.1%} (prompt tokens sent {run.prompt_tokens:,}; "
            f"${run.dollars:.4f})"
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30, help="user turns in the conversation")
    parser.add_argument("--tool-every", type=int, default=3, help="a tool call every N turns")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model name, for pricing")
    parser.add_argument(
        "--no-stream", action="store_true", help="non-streamed calls (Bot streams by default)"
    )
    parser.add_argument("--calls", action="store_true", help="print every call's usage")
    parser.add_argument(
        "--paces",
        default="0,10,mixed",
        help="comma-separated paces: minutes the cache ages after each turn, or 'mixed' "
        f"(seeded pauses of {MIXED[0]:g}-{MIXED[1]:g} minutes)",
    )
    parser.add_argument(
        "--pause-minutes", type=float, help="one pace only (same as --paces N)", default=None
    )
    parser.add_argument("--diagnose", action="store_true", help="rerun with other history windows")
    return parser.parse_args()


MIXED = (1.0, 30.0)
"""The range of the mixed pace's pauses, in minutes."""
NEAR_FLOOR = 1.5
"""Turns at once: billed input within this many points of the floor (#49)."""
PAUSED_SHARE = 0.25
"""Pauses of ten minutes: billed input at most this share of the uncached input (#49)."""
PAUSED_VS_5M = 0.55
"""Pauses of ten minutes: billed input at most this multiple of a fixed 5-minute lifetime's."""


def pace_pauses(pace: str, turns: int) -> list[float]:
    """The pause after each turn, in minutes, for a pace given on the command line."""
    if pace == "mixed":
        rng = random.Random(SEED)
        return [round(rng.uniform(*MIXED), 1) for _ in range(turns)]
    return [float(pace)] * turns


async def run_pace(turns: list[Turn], pace: str, args: argparse.Namespace) -> bool:
    """One pace: uncached, botkit's default (auto lifetimes) and a fixed 5-minute lifetime."""
    pauses = pace_pauses(pace, len(turns))
    common: dict[str, Any] = {
        "model": args.model,
        "stream": not args.no_stream,
        "pause_minutes": pauses,
    }
    label = "turns at once" if set(pauses) == {0.0} else f"pauses of {pace} minutes"
    if pace == "mixed":
        label = f"mixed pace (pauses {min(pauses):g}-{max(pauses):g} min, seed {SEED})"
    print(f"\n== {label}")
    plain = await converse(turns, caching=False, label="caching off (yardstick)", **common)
    auto = await converse(turns, caching=True, label="botkit default (auto)", **common)
    fixed = await converse(
        turns, caching=True, label="fixed 5-minute lifetime", cache_ttl="5m", **common
    )
    for run in (plain, auto, fixed):
        describe(run)
    if args.calls:
        print_calls(auto)
    uncached = plain.billed_input
    share, fixed_share = auto.billed_input / uncached, fixed.billed_input / uncached
    floor = auto.floor / uncached
    versus = auto.billed_input / fixed.billed_input
    print(f"  shares of the uncached input (auto): {auto.shares(uncached)}")
    print(f"  shares of the uncached input (5m):   {fixed.shares(uncached)}")
    print(
        f"  billed input: auto {share:.1%}, fixed 5m {fixed_share:.1%} (auto / 5m = "
        f"{versus:.2f}x), floor {floor:.1%}; cost ${auto.dollars:.4f} auto, ${fixed.dollars:.4f} "
        f"5m, ${plain.dollars:.4f} uncached; thinking blocks in the answers: "
        f"{auto.thinking_blocks}; cache keeper's reads (billed above): {auto.kept}"
    )
    if pace == "mixed":
        ok, target = True, "printed beside the others (no target)"
    elif set(pauses) == {0.0}:
        ok = (share - floor) * 100 <= NEAR_FLOOR
        target = f"target: within {NEAR_FLOOR:g} points of the floor"
    else:
        ok = share <= PAUSED_SHARE and versus <= PAUSED_VS_5M
        target = f"target: <= {PAUSED_SHARE:.0%} of uncached and <= {PAUSED_VS_5M}x fixed 5m"
    verdict = "" if pace == "mixed" else (" PASS" if ok else " FAIL")
    print(
        f"RESULT caching pace={pace} billed={share:.1%} of uncached, floor={floor:.1%}, fixed "
        f"5m={fixed_share:.1%}, auto/5m={versus:.2f}x ({target}){verdict}"
    )
    if args.diagnose:
        await diagnose(turns, plain, auto, args, pauses)
    return ok


async def main(args: argparse.Namespace) -> int:
    turns = script(args.turns, args.tool_every)
    system = system_prompt()
    stream = not args.no_stream
    user_chars = [len(t.user_text) for t in turns]
    answer_chars = [len(t.answer) for t in turns]
    tool_turns = sum(len(t.replies) > 1 for t in turns)
    print("bench/caching.py: one user's scripted conversation through AgentLoop + AnthropicLLM")
    print("  against FakeAnthropicServer (tokens = chars / 4, cache usage as the real API, each")
    print("  entry kept for its lifetime on a clock the bench moves: a read refreshes only the")
    print(f"  entry it hits); model {args.model}, {'streamed' if stream else 'non-streamed'} calls")
    print(
        f"system prompt: {len(system):,} chars (~{len(system) // 4:,} tokens); "
        f"3 tools ({', '.join(ToolRegistry([lookup_order, search_catalog, check_shipping]).names)})"
    )
    print(
        f"conversation: {len(turns)} turns, {tool_turns} with a tool call first; user messages "
        f"{min(user_chars)}-{max(user_chars)} chars, answers {min(answer_chars)}-"
        f"{max(answer_chars)} chars; BotOptions defaults (max_messages="
        f"{BotOptions().max_messages}, max_iterations={BotOptions().max_iterations}); "
        "BOTKIT_CACHE_TTL=auto (the default) beside 5m"
    )
    print(
        "billed input tokens = input + 1.25 x 5-minute cache writes + 2 x 1-hour cache writes "
        "+ 0.1 x cache reads; floor = the least any breakpoints could bill for the prompts sent "
        "(each call reads all an earlier one sent, writes at 1.25x only what a later one sends "
        "again, nothing expires)"
    )
    paces = [f"{args.pause_minutes:g}"] if args.pause_minutes is not None else args.paces.split(",")
    for pace in paces:
        await run_pace(turns, pace.strip(), args)
    return 0  # figures are printed (RESULT lines), not asserted


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
