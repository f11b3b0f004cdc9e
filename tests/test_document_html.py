"""HTML documents: what the model sees, and that the writer puts text and elements back where they belong.

Translations are faked (``document_helpers``): ``upper`` keeps every inline where it was, ``reverse`` reverses
the word order with the inline elements carried along (as a projection would), so the expected output is
written by hand.
"""

from __future__ import annotations

import pytest
from document_helpers import reverse, upper
from lxml import etree
from lxml import html as lxml_html

from mt.document.errors import DocumentError
from mt.document.formats import html
from mt.document.model import Inline, Unit, check_inlines


def texts(source: str) -> list[str]:
    document = html.read_fragment(source)
    for unit in document.units:
        check_inlines(unit.text, unit.inlines)
    return [unit.text for unit in document.units]


def translate(source: str, fake=upper) -> str:
    document = html.read_fragment(source)
    return document.write(fake(document.units)).decode("utf-8")


def translate_page(source: str) -> tuple[list[str], str]:
    """A whole HTML document's units, and the document uppercased."""
    document = html.read(source.encode(), "page.html")
    return [unit.text for unit in document.units], document.write(upper(document.units)).decode()


def shape(markup: str) -> list[tuple[str, dict[str, str]]]:
    """Every element's tag and attributes, in document order: the structure a translation must keep."""
    root = lxml_html.document_fromstring(f"<html><body>{markup}</body></html>")
    return [(str(e.tag), dict(e.attrib)) for e in root.iter() if isinstance(e.tag, str)]


SAMPLE = (
    '<h1 id="top">Welcome <em>home</em></h1>\n'
    '<p class="lead">See <a href="https://example.org/?a=1&amp;b=2"><em><span>the docs</span></em></a> now.</p>\n'
    "<ul><li>One <b>bold</b> item</li><li>Two <i>items</i></li></ul>\n"
    "<table><tr><th>Name</th><td>Value <sup>2</sup></td></tr></table>"
)


def test_blocks_are_units_and_inline_elements_their_inlines():
    document = html.read_fragment(SAMPLE)
    assert [unit.text for unit in document.units] == [
        "Welcome home", "See the docs now.", "One bold item", "Two items", "Name", "Value 2",
    ]
    link = document.units[1]
    check_inlines(link.text, link.inlines)
    assert [(i.start, i.end, i.parent) for i in link.inlines] == [(4, 12, None), (4, 12, 0), (4, 12, 1)]
    assert document.hard_breaks is False


def test_identity_round_trip_keeps_the_markup():
    document = html.read_fragment(SAMPLE)
    assert document.write(document.units).decode() == SAMPLE


def test_uppercase_translation_lands_inside_the_same_elements():
    out = translate(SAMPLE)
    assert shape(out) == shape(SAMPLE)
    assert '<a href="https://example.org/?a=1&amp;b=2"><em><span>THE DOCS</span></em></a> NOW.' in out
    assert '<h1 id="top">WELCOME <em>HOME</em></h1>' in out
    assert "<td>VALUE <sup>2</sup></td>" in out


def test_reordered_words_carry_their_elements():
    out = translate('<p>Hello <a href="x"><em><span>big</span></em></a> world</p>', reverse)
    assert out == '<p>world <a href="x"><em><span>big</span></em></a> Hello</p>'
    assert translate("<p>Read <b>this <i>very</i> carefully</b> please</p>", reverse) == (
        "<p>please <b>carefully <i>very</i> this</b> Read</p>"
    )


def test_entities_are_characters_for_the_model_and_escaped_on_output():
    source = "<p>Fish &amp; chips &lt;3&nbsp;ok</p>"
    assert texts(source) == ["Fish & chips <3\xa0ok"]
    assert translate(source) == "<p>FISH &amp; CHIPS &lt;3\xa0OK</p>"
    assert translate("<p>a</p>", lambda units: [Unit("x < y & z")]) == "<p>x &lt; y &amp; z</p>"


def test_text_the_model_must_not_see_stays_as_it_was():
    source = (
        '<p translate="no">Keep this</p>'
        '<p>Run <span class="x notranslate">Brand Name</span> and <code>make test</code> now</p>'
        "<pre>  code\n  block</pre>"
        "<script>var s = '<p>hi</p>';</script><style>p { color: red }</style>"
        "<!-- a comment --><p>Say <kbd>Ctrl</kbd> <samp>out</samp> <var>x</var></p>"
        "<textarea>typed</textarea><svg><text>svg text</text></svg>"
    )
    assert texts(source) == ["Run  and  now", "Say   "]
    out = translate(source)
    assert shape(out) == shape(source)
    for kept in ('<p translate="no">Keep this</p>', '<span class="x notranslate">Brand Name</span>',
                 "<code>make test</code>", "<pre>  code\n  block</pre>", "<script>var s = '<p>hi</p>';</script>",
                 "<style>p { color: red }</style>", "<!-- a comment -->", "<kbd>Ctrl</kbd>",
                 "<textarea>typed</textarea>", "<svg><text>svg text</text></svg>"):
        assert kept in out
    assert '<p>RUN <span class="x notranslate">Brand Name</span> AND <code>make test</code> NOW</p>' in out


def test_zero_width_elements_keep_their_place():
    """A ``br`` between two words reads as a space (and is written back without it)."""
    source = '<p>Before<br>after <img src="a.png" alt="A cat"> end</p>'
    document = html.read_fragment(source)
    assert [unit.text for unit in document.units] == ["A cat", "Before after  end"]
    assert [(i.start, i.end) for i in document.units[1].inlines] == [(6, 6), (13, 13)]
    out = document.write(upper(document.units)).decode()
    assert out == '<p>BEFORE<br>AFTER <img src="a.png" alt="A CAT"> END</p>'


def test_an_element_that_stood_between_spaces_gets_its_space_back():
    document = html.read_fragment("<p>Run <code>make</code> now, or call<code>f</code>().</p>")
    assert [(i.start, i.end) for i in document.units[0].inlines] == [(4, 4), (17, 17)]
    projected = Unit("Lancez maintenant, ou appelez().", [Inline(6, 6, 0), Inline(29, 29, 1)])  # against a word
    assert document.write([projected]) == b"<p>Lancez <code>make</code> maintenant, ou appelez<code>f</code>().</p>"


def test_translatable_attributes_are_units():
    source = (
        '<p><img src="logo.png" alt="Our logo"> <input type="text" placeholder="Your name"> '
        '<a href="/" title="Go home">Home</a> <button aria-label="Close dialog">x</button> '
        '<span translate="no" title="Not this">y</span></p>'
    )
    assert texts(source) == ["Our logo", "Your name", "Go home", "Close dialog", "  Home x "]
    out = translate(source)
    for attribute in ('alt="OUR LOGO"', 'placeholder="YOUR NAME"', 'title="GO HOME"', 'aria-label="CLOSE DIALOG"',
                      'title="Not this"', 'src="logo.png"', 'href="/"'):
        assert attribute in out


def test_button_values_and_the_meta_description_are_units():
    source = (
        '<html><head><meta name="description" content="A page about cats"><meta name="author" content="Ann">'
        '</head><body><form><input type="submit" value="Send it"><input type="text" value="typed text">'
        "</form></body></html>"
    )
    units, out = translate_page(source)
    assert units == ["A page about cats", "Send it"]
    assert 'content="A PAGE ABOUT CATS"' in out and 'content="Ann"' in out
    assert 'value="SEND IT"' in out and 'value="typed text"' in out


def test_mixed_blocks_make_each_text_run_a_unit():
    source = "<div>Intro text <p>A paragraph.</p> more text <ul><li>Item <ul><li>Sub</li></ul> after</li></ul></div>"
    assert texts(source) == ["Intro text", "A paragraph.", "more text", "Item", "Sub", "after"]
    out = translate(source)
    assert out == (
        "<div>INTRO TEXT <p>A PARAGRAPH.</p> MORE TEXT <ul><li>ITEM <ul><li>SUB</li></ul> AFTER</li></ul></div>"
    )


def test_whitespace_only_text_is_not_a_unit_and_stays():
    source = "<table>\n  <tr>\n    <td>&nbsp;</td>\n    <td>\n      Cell  text\n    </td>\n  </tr>\n</table>"
    assert texts(source) == ["Cell text"]
    assert translate(source) == source.replace("&nbsp;", "\xa0").replace("Cell  text", "CELL TEXT")


def test_a_fragment_stays_a_fragment():
    assert translate("Hello <b>world</b>") == "HELLO <b>WORLD</b>"
    assert translate("  <p>x</p> tail ") == "  <p>X</p> TAIL "
    assert translate("") == ""


def test_a_document_keeps_its_doctype_and_head():
    source = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>The page</title>'
        '<link rel="stylesheet" href="s.css"><script src="a.js"></script></head>\n'
        "<body><p>Hello <b>world</b></p></body></html>"
    )
    units, out = translate_page(source)
    assert units == ["The page", "Hello world"]
    assert out.startswith("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>THE PAGE</title>")
    assert '<link rel="stylesheet" href="s.css"><script src="a.js"></script></head>' in out
    assert "<body><p>HELLO <b>WORLD</b></p></body></html>" in out


def test_broken_markup_is_recovered():
    assert translate("<p>unclosed <b>bold") == "<p>UNCLOSED <b>BOLD</b></p>"
    assert translate("<ul><li>one<li>two</ul>") == "<ul><li>ONE</li><li>TWO</li></ul>"


def test_external_entities_are_never_loaded(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    source = f'<!DOCTYPE html [<!ENTITY e SYSTEM "file://{secret}">]>\n<html><body><p>a &e; b</p></body></html>'
    document = html.read(source.encode(), "xxe.html")
    out = document.write(document.units).decode()
    assert "TOP-SECRET" not in out and all("TOP-SECRET" not in unit.text for unit in document.units)
    assert "a &amp;e; b" in out


def test_charset_declared_by_a_meta_is_read_and_written():
    source = '<html><head><meta charset="iso-8859-1"></head><body><p>Caf\xe9</p></body></html>'.encode("latin-1")
    document = html.read(source, "latin.html")
    assert [unit.text for unit in document.units] == ["Café"]
    out = document.write([Unit("Café €")])
    assert b"<p>Caf\xe9 &#8364;</p>" in out


def test_a_bom_and_xml_declaration_are_kept():
    source = b'\xef\xbb\xbf<?xml version="1.0"?>\n<!DOCTYPE html>\n<html><body><p>x</p></body></html>'
    document = html.read(source, "x.html")
    assert document.write(document.units) == source
    document = html.read_fragment(source.decode("utf-8"))
    assert not document.fragment and document.write(document.units) == source


def test_a_meta_declaring_utf16_in_ascii_bytes_is_read_as_utf8():
    document = html.read('<meta charset="utf-16"><p>Café</p>'.encode(), "mislabelled.html")
    assert [unit.text for unit in document.units] == ["Café"]


@pytest.mark.parametrize(("data", "message"), [
    (b"<p>caf\xe9</p>", r"bad\.html: not valid utf-8 \(byte 0xe9 at offset 6\)"),
    (b'<meta charset="klingon"><p>x</p>', r"bad\.html: declares the charset 'klingon'"),
    (b"<!DOCTYPE html>", r"bad\.html: no HTML could be read"),
    (b"<div>" * 300 + b"deep" + b"</div>" * 300, r"bad\.html: too deeply nested to read whole \(Excessive depth"),
])
def test_unreadable_input_is_a_document_error(data, message):
    with pytest.raises(DocumentError, match=message):
        html.read(data, "bad.html")


def test_writing_twice_starts_from_the_read_document():
    document = html.read_fragment("<p>One <b>two</b> three</p>")
    document.write(upper(document.units))
    assert document.write(reverse(document.units)) == b"<p>three <b>two</b> One</p>"


def test_a_larger_page_keeps_its_tree():
    source = (
        "<!DOCTYPE html><html><head><title>T</title></head><body>"
        + "".join(f'<section id="s{i}"><h2>Part {i}</h2><p>Text <a href="#{i}">link {i}</a> and '
                  f"<strong>more <em>text</em></strong>.<br>Line</p></section>" for i in range(20))
        + "</body></html>"
    )
    document = html.read(source.encode(), "big.html")
    before = lxml_html.document_fromstring(source)
    after = lxml_html.document_fromstring(document.write(upper(document.units)))
    assert [(e.tag, dict(e.attrib)) for e in before.iter()] == [(e.tag, dict(e.attrib)) for e in after.iter()]
    assert after.text_content() == before.text_content().upper()
    reordered = lxml_html.document_fromstring(document.write(reverse(document.units)))
    assert sorted(e.tag for e in reordered.iter()) == sorted(e.tag for e in before.iter())
    assert etree.tostring(reordered.find(".//section/p"), method="html") == (
        b'<p>Line<br>.<strong><em>text</em> more</strong> and <a href="#0">0 link</a> Text</p>'
    )
