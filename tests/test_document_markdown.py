"""Markdown documents: what the model sees, and that the writer keeps the structure, URLs and code.

Written-back Markdown is compared by the HTML it renders to (whitespace runs made one space), since the
writer formats it the way mdformat does. Translations are faked (``document_helpers``): ``upper`` keeps
every inline where it was, ``reverse`` reverses the word order with the inline elements carried along.
"""

from __future__ import annotations

import re

import pytest
from document_helpers import reverse, upper
from markdown_it import MarkdownIt

from mt.document.errors import DocumentError
from mt.document.formats import markdown
from mt.document.model import Inline, Unit, check_inlines

SOURCE = """\
Setext title
============

## A *small* heading

Paragraph with **bold**, *em*, `inline code`, a [link](https://example.org/a_b "Title") and
an ![image](img.png) in it &amp; an escaped \\* star.\\
After a hard break.

- first item
- second [item][ref]
  1. nested *one*
  2. nested two

> Quoted **text**
> over two lines.

```python
print("code is kept")
```

    indented code is kept

<div class="raw">HTML block kept</div>

| Name | Value |
|:-----|------:|
| pipe \\| in cell | ~~gone~~ `co\\|de` |
| <https://auto.link> | plain |

[ref]: https://example.org/ref
"""


def html_of(text: str) -> str:
    rendered = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(text)
    return re.sub(r"\s+", " ", rendered).strip()


def read(text: str) -> markdown.MarkdownDocument:
    document = markdown.read(text.encode(), "doc.md")
    for unit in document.units:
        check_inlines(unit.text, unit.inlines)
    return document


def test_units_are_the_inline_content_of_blocks():
    document = read(SOURCE)
    assert [unit.text for unit in document.units] == [
        "Setext title",
        "A small heading",
        "image",
        "Paragraph with bold, em, , a link and an  in it & an escaped * star. After a hard break.",
        "first item",
        "second item",
        "nested one",
        "nested two",
        "Quoted text over two lines.",
        "Name", "Value", "pipe | in cell", "gone ", "plain",
    ]
    assert document.hard_breaks is False
    assert not any("code" in unit.text or "HTML block" in unit.text or "auto.link" in unit.text
                   for unit in document.units)


def test_identity_round_trip_renders_the_same_html():
    document = read(SOURCE)
    out = document.write(document.units).decode()
    assert html_of(out) == html_of(SOURCE)
    assert read(out).write(read(out).units).decode() == out  # stable once formatted


def tags(text: str) -> list[str]:
    return re.findall(r"<([a-z0-9]+)", html_of(text))


def test_uppercase_translation_keeps_structure_urls_and_code():
    document = read(SOURCE)
    out = document.write(upper(document.units)).decode()
    assert tags(out) == tags(SOURCE)
    for kept in ('[LINK](https://example.org/a_b "Title")', "`inline code`", "![IMAGE](img.png)",
                 'print("code is kept")', "indented code is kept", '<div class="raw">HTML block kept</div>',
                 "[ref]: https://example.org/ref", "<https://auto.link>", "`co\\|de`", "# SETEXT TITLE",
                 "## A *SMALL* HEADING", "- FIRST ITEM", "> QUOTED **TEXT**", "~~GONE~~", "[ITEM][ref]"):
        assert kept in out, kept
    rendered = html_of(out)
    assert "<h1>SETEXT TITLE</h1>" in rendered and "<em>SMALL</em>" in rendered
    assert '<a href="https://example.org/a_b" title="Title">LINK</a>' in rendered
    assert "<code>inline code</code>" in rendered and "<br />" in rendered
    assert '<td style="text-align:left">PIPE | IN CELL</td>' in rendered
    assert '<td style="text-align:right">PLAIN</td>' in rendered
    assert "<li>NESTED <em>ONE</em></li>" in rendered


def test_reordered_words_carry_their_elements():
    document = read("Read **this *very* carefully** [now](https://x.org) please.\n")
    out = document.write(reverse(document.units)).decode()
    assert out == "please. [now](https://x.org) **carefully *very* this** Read\n"


def test_code_and_html_spans_stay_between_the_words():
    document = read("Run `make test` then <kbd>Enter</kbd>.\n")
    assert [unit.text for unit in document.units] == ["Run  then Enter."]
    assert document.write(upper(document.units)).decode() == "RUN `make test` THEN <kbd>ENTER</kbd>.\n"


def test_code_between_words_stays_between_words():
    document = read("Run `make test` now.\n")
    translated = Unit("Lancez maintenant.", [Inline(6, 6, document.units[0].inlines[0].key)])
    assert document.write([translated]).decode() == "Lancez `make test` maintenant.\n"


def test_translated_text_is_escaped_where_markdown_would_read_it():
    document = read("Plain words.\n")
    out = document.write([Unit("1. not a *list* [x] <b>")]).decode()
    assert html_of(out) == "<p>1. not a *list* [x] &lt;b&gt;</p>"


def test_line_breaks_in_a_translation_do_not_break_a_heading_or_table():
    document = read("# Title\n\n| a |\n|---|\n| b |\n")
    out = document.write([Unit("Two\nlines"), Unit("x\ny"), Unit("z")]).decode()
    assert html_of(out) == html_of("# Two lines\n\n| x y |\n|---|\n| z |\n")


@pytest.mark.parametrize("front", ["---\ntitle: A page\ntags: [a, b]\n---\n", "+++\ntitle = 'A page'\n+++\n"])
def test_front_matter_is_kept_untranslated(front):
    document = read(front + "\n# Heading\n\nText.\n")
    assert [unit.text for unit in document.units] == ["Heading", "Text."]
    assert document.write(upper(document.units)).decode() == front + "\n# HEADING\n\nTEXT.\n"


def test_bom_and_crlf_are_kept():
    document = markdown.read(b"\xef\xbb\xbf# Hi\r\n\r\nText *em*\r\nmore\r\n", "crlf.md")
    assert document.write(upper(document.units)) == b"\xef\xbb\xbf# HI\r\n\r\nTEXT *EM* MORE\r\n"


def test_empty_and_unreadable_files():
    assert markdown.read(b"", "empty.md").write([]) == b""
    with pytest.raises(DocumentError, match=r"bad\.md: not UTF-8 text \(byte 0xff at offset 3\)"):
        markdown.read(b"# a\xff", "bad.md")


@pytest.mark.parametrize(("source", "message"), [
    (">" * 60 + " deep", r"^deep\.md: block quotes and lists nested more than 50 levels deep$"),
    ("- " * 60 + "deep", r"^deep\.md: block quotes and lists nested more than 50 levels deep$"),
    ("*" * 500 + "x" + "*" * 500, r"^deep\.md: inline markup nested more than 50 deep$"),
])
def test_nesting_markdown_it_would_cut_short_is_a_document_error(source, message):
    with pytest.raises(DocumentError, match=message):
        markdown.read(source.encode(), "deep.md")


def test_format():
    assert markdown.FORMAT.extensions == (".md", ".markdown") and markdown.FORMAT.media_type == "text/markdown"
