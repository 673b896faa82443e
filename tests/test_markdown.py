"""Markdown from the model rendered as Telegram HTML and split into messages Telegram accepts."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from botkit.messengers.markdown import html_to_plain, markdown_to_html, render_chunks
from botkit.testing.telegram import parse_html

ALLOWED_TAGS = {"b", "i", "s", "code", "pre", "a", "blockquote"}


class _TagChecker(HTMLParser):
    """Fails on tags Telegram would reject, unbalanced tags and bare ``<``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        assert tag in ALLOWED_TAGS, tag
        names = [name for name, _ in attrs]
        if tag == "a":
            assert names == ["href"]
            assert re.match(r"(https?|tg|mailto):", dict(attrs)["href"] or "")
        elif tag == "code" and self.stack[-1:] == ["pre"]:
            assert names in ([], ["class"])
        else:
            assert names == [], (tag, attrs)
        self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        raise AssertionError(f"self-closing <{tag}/>")

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack.pop() == tag, tag

    def handle_data(self, data: str) -> None:
        assert "<" not in data and ">" not in data, data

    def handle_comment(self, data: str) -> None:
        raise AssertionError("comment")


def assert_telegram_html(text: str, limit: int = 4096) -> str:
    """Check ``text`` is well-formed Telegram HTML within ``limit``; return its visible text."""
    checker = _TagChecker()
    checker.feed(text)
    checker.close()
    assert checker.stack == []
    plain, _ = parse_html(text)
    assert plain == html_to_plain(text)
    assert plain.strip()
    assert len(plain.encode("utf-16-le")) // 2 <= limit
    return plain


def assert_chunks(markdown: str, limit: int = 4096) -> list[str]:
    chunks = render_chunks(markdown, limit)
    for chunk in chunks:
        assert_telegram_html(chunk, limit)
    return chunks


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


# --- rendering ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("# Title", "<b>Title</b>"),
        ("### Deep *title*", "<b>Deep <i>title</i></b>"),
        ("**bold** __bold__", "<b>bold</b> <b>bold</b>"),
        ("*it* _it_", "<i>it</i> <i>it</i>"),
        ("~~gone~~", "<s>gone</s>"),
        ("`x = 1`", "<code>x = 1</code>"),
        ("***both***", "<i><b>both</b></i>"),
        ("---", "———"),
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        ("`a<b>&c`", "<code>a&lt;b&gt;&amp;c</code>"),
        ("\\*not italic\\*", "*not italic*"),
        ("&copy; &lt;tag&gt;", "© &lt;tag&gt;"),
    ],
)
def test_inline_constructs(markdown: str, expected: str) -> None:
    assert markdown_to_html(markdown) == expected


def test_fenced_code_keeps_its_language_and_content_verbatim() -> None:
    markdown = '```python\ndef f(x):\n    return "<b>" & **x** _y_ # z\n```'
    assert markdown_to_html(markdown) == (
        '<pre><code class="language-python">def f(x):\n'
        '    return "&lt;b&gt;" &amp; **x** _y_ # z</code></pre>'
    )


def test_code_without_language_is_a_plain_pre() -> None:
    assert markdown_to_html("```\n  [x](http://e.com)\n```") == "<pre>  [x](http://e.com)</pre>"
    assert markdown_to_html("    indented *code*") == "<pre>indented *code*</pre>"


def test_links_with_safe_schemes() -> None:
    assert markdown_to_html("[site](https://e.com/a?b=1&c=2)") == (
        '<a href="https://e.com/a?b=1&amp;c=2">site</a>'
    )
    assert markdown_to_html("<mailto:me@e.com>") == '<a href="mailto:me@e.com">mailto:me@e.com</a>'
    assert markdown_to_html("[me](tg://user?id=1)") == '<a href="tg://user?id=1">me</a>'
    assert markdown_to_html("[**big**](http://e.com)") == '<a href="http://e.com"><b>big</b></a>'


@pytest.mark.parametrize(
    "markdown",
    ["[x](javascript:alert(1))", "[x](/relative)", "[x](ftp://e.com)", "[x](data:text/html,hi)"],
)
def test_other_links_are_text(markdown: str) -> None:
    rendered = markdown_to_html(markdown)
    assert "<a" not in rendered
    assert "x" in html_to_plain(rendered)


def test_image_becomes_a_link_with_its_alt_text() -> None:
    assert markdown_to_html("![a cat](https://e.com/cat.png)") == (
        '<a href="https://e.com/cat.png">a cat</a>'
    )
    assert markdown_to_html("![](https://e.com/cat.png)") == (
        '<a href="https://e.com/cat.png">https://e.com/cat.png</a>'
    )


def test_code_is_never_nested_in_formatting_or_links() -> None:
    assert markdown_to_html("**a `b` c**") == "<b>a </b><code>b</code><b> c</b>"
    assert markdown_to_html("[`f()`](http://e.com)") == '<a href="http://e.com">f()</a>'


def test_lists() -> None:
    assert markdown_to_html("- one\n- two\n* three") == "• one\n• two\n\n• three"
    assert markdown_to_html("1. one\n2. two") == "1. one\n2. two"
    assert markdown_to_html("3. three\n4. four") == "3. three\n4. four"


def test_nested_lists_indent_two_spaces_per_level() -> None:
    markdown = "- a\n  - b\n    1. c\n    2. d\n- e\n  more"
    assert markdown_to_html(markdown) == "• a\n  • b\n    1. c\n    2. d\n• e\n  more"


def test_code_block_in_a_list_is_not_indented() -> None:
    markdown = "- run:\n\n  ```sh\n  ls\n  pwd\n  ```"
    assert markdown_to_html(markdown) == (
        '• run:\n<pre><code class="language-sh">ls\npwd</code></pre>'
    )


def test_blockquote() -> None:
    assert markdown_to_html("> quoted **text**\n> more") == (
        "<blockquote>quoted <b>text</b>\nmore</blockquote>"
    )


def test_nested_blockquotes_do_not_nest_tags() -> None:
    rendered = markdown_to_html("> outer\n>\n> > inner")
    assert rendered == "<blockquote>outer\n\ninner</blockquote>"


def test_table_is_an_aligned_pre_block() -> None:
    markdown = "| Name | Qty | Note |\n|:--|--:|:-:|\n| apple | 3 | ok |\n| kiwi | 12 | <b> |"
    assert markdown_to_html(markdown) == (
        "<pre>Name  | Qty | Note\n"
        "------+-----+-----\n"
        "apple |   3 |  ok\n"
        "kiwi  |  12 | &lt;b&gt;</pre>"
    )


@pytest.mark.parametrize(
    "markdown",
    ["<script>alert(1)</script>", "<div>hello</div>", "hi <b onclick=x>there</b>", "<!-- c -->"],
)
def test_raw_html_is_shown_escaped(markdown: str) -> None:
    rendered = markdown_to_html(markdown)
    assert_telegram_html(rendered)
    assert html_to_plain(rendered) == markdown


def test_raw_html_block_is_escaped() -> None:
    rendered = markdown_to_html("<div>\n*hi*\n</div>")
    assert rendered == "&lt;div&gt;\n<i>hi</i>\n&lt;/div&gt;"


def test_line_breaks_and_paragraphs() -> None:
    markdown = "line one\nline two  \nline three\n\n\n\nnext   \n"
    assert markdown_to_html(markdown) == "line one\nline two\nline three\n\nnext"


def test_no_trailing_whitespace() -> None:
    rendered = markdown_to_html("- \n- a  \n\n| a | b |\n|---|---|\n| x |  |\n\n# h #  ")
    assert all(line == line.rstrip() for line in rendered.split("\n"))


@pytest.mark.parametrize("markdown", ["", "   ", "\n\n\t\n", "```\n\n```"])
def test_blank_input(markdown: str) -> None:
    assert markdown_to_html(markdown) == ""
    assert render_chunks(markdown) == []


def test_html_to_plain() -> None:
    html = '<b>a &lt; b</b> &amp; <a href="http://e.com?a=1&amp;b=2">link</a>\n<pre>x &gt; 1</pre>'
    assert html_to_plain(html) == "a < b & link\nx > 1"


def test_everything_together_is_accepted_by_telegram() -> None:
    markdown = (
        "# Report\n\nSome **bold**, *italic*, ~~old~~ and `code`.\n\n"
        "- item with [link](https://e.com)\n  - nested ![img](http://e.com/i.png)\n\n"
        "> quote\n> ```js\n> let a = 1 < 2;\n> ```\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n***\n\n<span>raw</span> & done"
    )
    assert_telegram_html(markdown_to_html(markdown))
    assert len(assert_chunks(markdown)) == 1


# --- splitting ---------------------------------------------------------------------------


def test_short_reply_is_one_chunk_equal_to_the_whole_render() -> None:
    markdown = "Hello **there**\n\n- a\n- b"
    assert render_chunks(markdown) == [markdown_to_html(markdown)]


def test_long_reply_with_a_long_code_block_splits_into_valid_chunks() -> None:
    code = "\n".join(f"    value_{i} = compute({i}) < limit && ok  # **{i}**" for i in range(160))
    prose = " ".join(f"word{i} *x* & y" for i in range(150))
    markdown = f"# Answer\n\n{prose}\n\n```python\n{code}\n```\n\nThat is **all**."
    assert len(markdown) > 10_000
    chunks = assert_chunks(markdown)
    assert len(chunks) >= 3
    visible = "".join(html_to_plain(chunk) for chunk in chunks)
    assert squash(visible) == squash(html_to_plain(markdown_to_html(markdown)))
    code_chunks = [chunk for chunk in chunks if "value_" in chunk]
    assert len(code_chunks) >= 2
    for chunk in code_chunks:
        assert '<pre><code class="language-python">' in chunk
        assert chunk.count("<pre>") == chunk.count("</pre>")


def test_split_code_block_is_cut_at_line_ends() -> None:
    code = "\n".join(f"line {i:03}" for i in range(100))
    chunks = assert_chunks(f"```\n{code}\n```", limit=100)
    lines = [line for chunk in chunks for line in html_to_plain(chunk).split("\n")]
    assert lines == code.split("\n")
    assert all(chunk.startswith("<pre>") and chunk.endswith("</pre>") for chunk in chunks)


def test_split_paragraph_is_cut_at_spaces_and_keeps_formatting() -> None:
    markdown = "**" + " ".join(f"w{i}" for i in range(200)) + "**"
    chunks = assert_chunks(markdown, limit=100)
    assert len(chunks) > 1
    assert all(chunk.startswith("<b>") and chunk.endswith("</b>") for chunk in chunks)
    words = " ".join(html_to_plain(chunk) for chunk in chunks).split(" ")
    assert words == [f"w{i}" for i in range(200)]


def test_split_link_is_reopened_in_every_piece() -> None:
    markdown = "[" + "x" * 250 + "](https://e.com)"
    chunks = assert_chunks(markdown, limit=100)
    assert len(chunks) == 3
    assert all(chunk.startswith('<a href="https://e.com">') for chunk in chunks)
    assert "".join(html_to_plain(chunk) for chunk in chunks) == "x" * 250


def test_splits_between_blocks_first() -> None:
    first, second, third = ("a" * 60, "b" * 60, "c" * 130)
    chunks = assert_chunks(f"{first}\n\n{second}\n\n{third}", limit=130)
    assert [html_to_plain(chunk) for chunk in chunks] == [f"{first}\n\n{second}", third]


def test_escaping_does_not_count_towards_the_limit() -> None:
    chunks = assert_chunks("&" * 100, limit=100)
    assert chunks == ["&amp;" * 100]


def test_characters_outside_the_bmp_count_twice() -> None:
    chunks = assert_chunks("😀" * 100, limit=100)
    assert [len(html_to_plain(chunk)) for chunk in chunks] == [50, 50]


def test_limit_must_leave_room_for_a_character() -> None:
    with pytest.raises(ValueError, match="limit"):
        render_chunks("hi", limit=1)


def test_split_blockquote_is_reopened_in_every_piece() -> None:
    markdown = "\n".join(f"> line {i} with **bold**" for i in range(30))
    chunks = assert_chunks(markdown, limit=120)
    assert len(chunks) > 1
    assert all(c.startswith("<blockquote>") and c.endswith("</blockquote>") for c in chunks)


def test_list_inside_a_quote_stays_inside_the_quote() -> None:
    assert markdown_to_html("> - a\n>   - b") == "<blockquote>• a\n  • b</blockquote>"


@pytest.mark.parametrize(
    "markdown",
    [
        "*" * 3000 + "x" + "*" * 3000,
        "> " * 90 + "deep",
        "- " * 45 + "deep",
        "![" * 500 + "x" + "](http://e.com)" * 500,
        "[" * 3000 + "x",
    ],
)
def test_deeply_nested_input_renders_without_crashing(markdown: str) -> None:
    chunks = assert_chunks(markdown)
    visible = "".join(html_to_plain(chunk) for chunk in chunks)
    assert "x" in visible or "deep" in visible


# --- property ----------------------------------------------------------------------------

_PIECES = st.sampled_from(
    [
        "word",
        "other",
        " ",
        " ",
        "*",
        "**",
        "_",
        "~~",
        "`",
        "# ",
        "- ",
        "1. ",
        "> ",
        "[x](http://e.com)",
        "![i](https://e.com/i.png)",
        "[bad](javascript:x)",
        "<",
        ">",
        "&",
        "&amp;",
        "<b>",
        "</div>",
        '"',
        "|",
        "| a | b |\n|---|---|\n| 1 | 2 |\n",
        "\n",
        "\n\n",
        "    ",
        "\n```python\n",
        "\n```\n",
        "---\n",
        "😀",
        "日本",
        "\\",
    ]
)
_MARKDOWN = st.lists(_PIECES, max_size=120).map("".join)


@settings(max_examples=300, deadline=None)
@given(markdown=_MARKDOWN, limit=st.integers(min_value=20, max_value=200))
def test_any_markdown_gives_valid_chunks_within_the_limit(markdown: str, limit: int) -> None:
    chunks = assert_chunks(markdown, limit)
    whole = markdown_to_html(markdown)
    assert bool(chunks) == bool(whole)
    if whole:
        assert_telegram_html(whole, limit=10**6)
        visible = "".join(html_to_plain(chunk) for chunk in chunks)
        assert squash(visible) == squash(html_to_plain(whole))
