"""The conversation sent to the model is always valid, whatever was cut or interrupted."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from botkit.agent.history import (
    INTERRUPTED_TOOL_TEXT,
    normalize,
    trim,
    without_earlier_thinking,
)
from botkit.types import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock


def user(text: str) -> Message:
    return Message.user_text(text)


def assistant(text: str) -> Message:
    return Message(role="assistant", content=[TextBlock(text=text)])


def calls(*ids: str) -> Message:
    return Message(role="assistant", content=[ToolUseBlock(id=i, name="t", input={}) for i in ids])


def results(*ids: str) -> Message:
    return Message(role="user", content=[ToolResultBlock(tool_use_id=i, content="ok") for i in ids])


def assert_valid(messages: list[Message]) -> None:
    """The Messages API's rules for a conversation."""
    if not messages:
        return
    assert messages[0].role == "user"
    for before, after in itertools.pairwise(messages):
        assert before.role != after.role, "roles must alternate"
    for index, message in enumerate(messages):
        assert message.content, "no empty messages"
        answered = {b.tool_use_id for b in message.content if isinstance(b, ToolResultBlock)}
        asked = {t.id for t in messages[index - 1].tool_uses} if index else set()
        if message.role == "user":
            assert answered == asked, f"message {index} answers {answered}, asked {asked}"
            kinds = [isinstance(b, ToolResultBlock) for b in message.content]
            assert kinds == sorted(kinds, reverse=True), "tool results lead the message"
    if messages[-1].tool_uses:
        raise AssertionError("a trailing tool call has no result")


def test_valid_history_is_kept_unchanged() -> None:
    history = [user("hi"), calls("a"), results("a"), assistant("done"), user("more")]
    assert normalize(history) == history


def test_unanswered_tool_call_gets_an_error_result() -> None:
    history = [user("hi"), calls("a", "b"), results("a"), user("next")]
    fixed = normalize(history)
    assert_valid(fixed)
    answer = fixed[2].content
    assert [b.tool_use_id for b in answer if isinstance(b, ToolResultBlock)] == ["a", "b"]
    missing = answer[1]
    assert isinstance(missing, ToolResultBlock)
    assert missing.is_error and missing.content == INTERRUPTED_TOOL_TEXT
    assert fixed[2].text == "next"


def test_orphan_tool_result_is_dropped() -> None:
    fixed = normalize([results("x"), assistant("a"), user("q"), assistant("b")])
    assert_valid(fixed)
    assert [m.text for m in fixed] == ["q", "b"]


def test_consecutive_user_messages_are_merged() -> None:
    fixed = normalize([user("one"), user("two"), assistant("a")])
    assert len(fixed) == 2
    assert fixed[0].text == "onetwo"


def test_trim_never_splits_a_tool_chain() -> None:
    history = [user("q1"), assistant("a1"), user("q2")]
    history += [calls("a"), results("a"), calls("b"), results("b")]
    trimmed = trim(normalize(history), 2)
    assert_valid(trimmed)
    assert trimmed[0].text == "q2", "starts at the question that opened the chain"


def test_the_window_does_not_move_within_a_turn() -> None:
    """A turn's thinking is bound to what came before it: however long its tool chain grows,
    every call of the turn starts where its first call started."""
    history = [m for n in range(5) for m in (user(f"q{n}"), assistant(f"a{n}"))]
    history.append(user("q5"))
    first = trim(normalize(history), 8)
    for n in range(6):
        history += [calls(f"c{n}"), results(f"c{n}")]
        assert trim(normalize(history), 8)[0] == first[0]
    history += [assistant("done"), user("q6")]
    assert trim(normalize(history), 8)[0] != first[0], "the next turn may move it"


def test_trim_keeps_everything_under_the_limit() -> None:
    history = [user("q"), assistant("a")]
    assert trim(history, 40) == history


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Random, often broken, histories: cuts, interruptions, stray results."""
    messages: list[Message] = []
    next_id = 0
    for _ in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from(["user", "assistant", "calls", "results", "stray"]))
        if kind == "user":
            messages.append(user("u"))
        elif kind == "assistant":
            messages.append(assistant("a"))
        elif kind == "calls":
            n = draw(st.integers(1, 3))
            ids = [f"t{next_id + i}" for i in range(n)]
            next_id += n
            messages.append(calls(*ids))
            if draw(st.booleans()):
                answered = draw(st.lists(st.sampled_from(ids), unique=True))
                messages.append(results(*answered) if answered else user("interrupt"))
        elif kind == "results":
            messages.append(results(f"t{draw(st.integers(0, max(next_id, 1)))}"))
        else:
            messages.append(results("never-called"))
    start = draw(st.integers(0, len(messages)))
    return messages[start:]  # a cut anywhere, as a crude truncation would make


@settings(max_examples=400, deadline=None)
@given(histories(), st.integers(1, 50))
def test_prepared_history_is_always_valid(history: list[Message], limit: int) -> None:
    prepared = trim(normalize(history), limit)
    assert_valid(prepared)
    user_texts = sum(1 for m in history if m.role == "user" and m.text)
    if user_texts and history[-1].role == "user" and history[-1].text:
        assert prepared, "the newest question always survives"
        assert prepared[-1].text.endswith("u") or prepared[-1].text.endswith("interrupt")


def test_a_message_goes_out_as_it_is_though_sent_before_marked_or_copied() -> None:
    # a message keeps what it dumped for the API: neither a request marking its copy nor a
    # copy with other content may change what goes out
    message = Message(role="assistant", content=[TextBlock(text="before")])
    sent = message.to_api()
    sent["content"][-1] = {**sent["content"][-1], "cache_control": {"type": "ephemeral"}}
    sent["content"].append({"type": "text", "text": "added"})
    copied = message.model_copy(update={"content": [TextBlock(text="after")]})
    assert copied.to_api()["content"] == [{"type": "text", "text": "after"}]
    assert message.to_api()["content"] == [{"type": "text", "text": "before"}]


def test_a_history_goes_out_as_the_same_messages_call_after_call() -> None:
    # A long conversation is sent again with every call: the window is made of the context's
    # own messages (an earlier answer without its thinking, made once), so what each dumped
    # for the API is dumped once, not once a call.
    thought = ThinkingBlock(thinking="", signature="sig")
    history = [
        message
        for n in range(20)
        for message in (
            Message.user_text(f"question {n}"),
            Message(role="assistant", content=[thought, TextBlock(text=f"answer {n}")]),
        )
    ]
    history.append(Message.user_text("the newest"))
    first, second = (without_earlier_thinking(trim(normalize(history), 100)) for _ in range(2))
    assert all(a is b for a, b in zip(first, second, strict=True)) and len(first) == 41
    assert [m for m in first if m.role == "user"] == history[::2], "the user's own messages"
    assert not any(m.thinking for m in first), "earlier turns' thinking left out"
    assert first[1].text == "answer 0" and first[1].model == history[1].model
    # a copy with other content never goes out as the original's copy without thinking
    other = history[1].model_copy(update={"content": [thought, TextBlock(text="other")]})
    assert other.without_thinking().text == "other"
    assert history[0].without_thinking() is history[0], "nothing to leave out: itself"
