"""Office formats (.docx, .pptx, .odt): units read from files the libraries build, written back translated.

The files are built here with python-docx, python-pptx and odfpy. A "translation" is the source text
uppercased (inlines where they were) or two words swapped with the inlines moved along with them, so a
re-read shows each element on the right words. Hostile uploads (corrupt, encrypted, zip bombs, external
entities) are DocumentErrors naming the file.
"""

from __future__ import annotations

import io
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from lxml import etree

from mt.document.errors import DocumentError
from mt.document.formats import archive, docx, odt, pptx, spacing
from mt.document.model import Element, Inline, Unit, check_inlines, flatten, nest

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
TEXT_NS = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
SENTENCE = "The black cat sleeps here, see a link."


# ---- fake translations -------------------------------------------------------------------------------


def upper(unit: Unit) -> Unit:
    return Unit(unit.text.upper(), list(unit.inlines))


def swap(unit: Unit, first: str, second: str) -> Unit:
    """``unit`` with the words ``first`` and ``second`` (in that order, once each) swapped, every inline moved
    with the characters it covers (the test's inlines never straddle a swapped word)."""
    a0 = unit.text.index(first)
    a1 = a0 + len(first)
    b0 = unit.text.index(second, a1)
    b1 = b0 + len(second)
    text = unit.text[:a0] + second + unit.text[a1:b0] + first + unit.text[b1:]
    shift = len(second) - len(first)

    def char(c: int) -> int:
        if a0 <= c < a1:
            return c - a0 + b1 - len(first)
        if b0 <= c < b1:
            return c - b0 + a0
        return c + shift if a1 <= c < b0 else c

    def point(p: int) -> int:
        return p + shift if a1 <= p <= b0 else p

    moved = [
        Inline(char(x.start), char(x.end - 1) + 1, x.key, x.parent) if x.end > x.start
        else Inline(point(x.start), point(x.start), x.key, x.parent)
        for x in unit.inlines
    ]
    order: list[int] = []  # parents first, siblings by position (as mt.document.project orders them)

    def visit(parent: int | None) -> None:
        kids = [i for i, x in enumerate(moved) if x.parent == parent]
        for i in sorted(kids, key=lambda i: (moved[i].start, moved[i].end)):
            order.append(i)
            visit(i)

    visit(None)
    new = {old: n for n, old in enumerate(order)}
    inlines = [Inline(x.start, x.end, x.key, None if x.parent is None else new[x.parent])
               for x in (moved[i] for i in order)]
    check_inlines(text, inlines)
    return Unit(text, inlines)


def covered(unit: Unit) -> list[str]:
    """The text each inline covers, in order."""
    return [unit.text[x.start : x.end] for x in unit.inlines]


# ---- spacing: a break between two words is a space in the text ---------------------------------------


def test_pad_puts_one_space_after_a_break_between_two_words_and_unpad_takes_it_out():
    tree = ["one", Element(0, []), Element(1, []), "two", Element(2, [Element(3, []), "three"]), Element(4, []),
            " four", Element(5, [])]
    padded = spacing.pad(tree, lambda key: key != 2)
    assert padded == {1, 3}  # 0: the space after 1 is next to it; 4: a space follows; 5: nothing follows
    unit = flatten(tree)
    assert unit.text == "one two three four"
    back = nest(unit.text, unit.inlines)
    spacing.unpad(back, padded)
    assert flatten(back).text == "onetwothree four"  # the text read, as the file holds it

    moved = nest("ONE TWO THREE FOUR", [Inline(3, 3, 0), Inline(8, 8, 1), Inline(8, 13, 2), Inline(8, 8, 3, 2),
                                        Inline(14, 14, 4), Inline(18, 18, 5)])
    spacing.unpad(moved, padded)  # 1: the space before it goes (none after); 3: no space next to it is left
    assert flatten(moved).text == "ONE TWOTHREE FOUR"


# ---- files built with the libraries ------------------------------------------------------------------


def build_docx(tmp_path: Path) -> bytes:
    import docx as python_docx
    from docx.opc.constants import CONTENT_TYPE as CT
    from docx.opc.constants import RELATIONSHIP_TYPE as RT
    from docx.opc.packuri import PackURI
    from docx.opc.part import Part
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    document = python_docx.Document()
    document.add_heading("A title", level=1)
    p = document.add_paragraph("The ")
    p.add_run("black").bold = True
    p.add_run(" cat ")
    p.add_run("sleeps").italic = True
    p.add_run(" here, see ")
    rid = document.part.relate_to("https://example.com/", RT.HYPERLINK, is_external=True)
    p._p.append(parse_xml(
        f'<w:hyperlink {nsdecls("w", "r")} r:id="{rid}"><w:r><w:rPr><w:u w:val="single"/></w:rPr>'
        f"<w:t>a link</w:t></w:r></w:hyperlink>"
    ))
    p.add_run(".")

    lines = document.add_paragraph()
    lines.add_run("first").add_break()
    lines.add_run("second")
    lines.add_run().add_tab()
    lines.add_run("third")

    field = document.add_paragraph("Page ")
    for xml in (
        '<w:r><w:fldChar w:fldCharType="begin"/></w:r>',
        '<w:r><w:instrText xml:space="preserve"> PAGE </w:instrText></w:r>',
        '<w:r><w:fldChar w:fldCharType="separate"/></w:r>',
        "<w:r><w:t>7</w:t></w:r>",
        '<w:r><w:fldChar w:fldCharType="end"/></w:r>',
        '<w:r><w:t xml:space="preserve"> of the report</w:t></w:r>',
    ):
        field._p.append(parse_xml(xml.replace("<w:r>", f"<w:r {nsdecls('w')}>", 1)))

    boxed = document.add_paragraph("Anchor ")
    boxed._p.append(parse_xml(
        f'<w:r {nsdecls("w")} xmlns:v="urn:schemas-microsoft-com:vml"><w:pict><v:shape><v:textbox><w:txbxContent>'
        "<w:p><w:r><w:t>boxed text</w:t></w:r></w:p></w:txbxContent></v:textbox></v:shape></w:pict></w:r>"
    ))
    boxed.add_run("words")

    noted = document.add_paragraph("Noted")
    noted._p.append(parse_xml(
        f'<w:r {nsdecls("w")}><w:rPr><w:vertAlign w:val="superscript"/></w:rPr><w:footnoteReference w:id="1"/></w:r>'
    ))
    noted.add_run(".")
    footnotes = (
        f'<w:footnotes {nsdecls("w")}><w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p>'
        '</w:footnote><w:footnote w:id="1"><w:p><w:r><w:t>a footnote</w:t></w:r></w:p></w:footnote></w:footnotes>'
    )
    part = Part(PackURI("/word/footnotes.xml"), CT.WML_FOOTNOTES, footnotes.encode(), document.part.package)
    document.part.relate_to(part, RT.FOOTNOTES)

    table = document.add_table(rows=1, cols=2)
    table.style = "Table Grid"
    table.cell(0, 0).text = "left cell"
    table.cell(0, 1).text = "right cell"
    table.cell(0, 1).add_table(rows=1, cols=1).cell(0, 0).text = "nested cell"
    document.sections[0].header.paragraphs[0].text = "header text"
    path = tmp_path / "test.docx"
    document.save(path)
    return path.read_bytes()


def build_pptx(tmp_path: Path) -> bytes:
    from pptx import Presentation
    from pptx.util import Inches

    presentation = Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = "A title"
    p = slide.placeholders[1].text_frame.paragraphs[0]
    for text, bold, link in (("The ", False, None), ("black", True, None), (" cat ", False, None),
                             ("link", False, "https://example.com/")):
        run = p.add_run()
        run.text = text
        run.font.bold = bold or None
        if link is not None:
            run.hyperlink.address = link
    p.add_line_break()
    p.add_run().text = "second line"
    table = slide.shapes.add_table(1, 2, Inches(1), Inches(4), Inches(4), Inches(1)).table
    table.cell(0, 0).text = "left cell"
    table.cell(0, 1).text = "right cell"
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(5), Inches(2), Inches(1)).text_frame.text = "grouped text"
    slide.notes_slide.notes_text_frame.text = "speaker notes"
    path = tmp_path / "test.pptx"
    presentation.save(path)
    return path.read_bytes()


def build_odt(tmp_path: Path) -> bytes:
    from odf.opendocument import OpenDocumentText
    from odf.style import Header, MasterPage, PageLayout, Style, TextProperties
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import A, H, LineBreak, Note, NoteBody, NoteCitation, P, S, Span

    document = OpenDocumentText()
    for name, properties in (("Bold", {"fontweight": "bold"}), ("Italic", {"fontstyle": "italic"})):
        style = Style(name=name, family="text")
        style.addElement(TextProperties(**properties))
        document.automaticstyles.addElement(style)
    layout = PageLayout(name="Layout")
    document.automaticstyles.addElement(layout)
    master = MasterPage(name="Standard", pagelayoutname=layout)
    header = Header()
    header.addElement(P(text="header text"))
    master.addElement(header)
    document.masterstyles.addElement(master)

    document.text.addElement(H(outlinelevel=1, text="A title"))
    p = P()
    p.addText("The ")
    p.addElement(Span(stylename="Bold", text="black"))
    p.addText(" cat ")
    p.addElement(Span(stylename="Italic", text="sleeps"))
    p.addText(" here, see ")
    link = A(href="https://example.com/", type="simple")
    link.addElement(Span(stylename="Bold", text="a link"))
    p.addElement(link)
    p.addText(".")
    document.text.addElement(p)
    lines = P()
    lines.addText("first")
    lines.addElement(LineBreak())
    lines.addText("two")
    lines.addElement(S(c=2))
    lines.addText("spaces")
    note = Note(id="n1", noteclass="footnote")
    note.addElement(NoteCitation(text="1"))
    body = NoteBody()
    body.addElement(P(text="a footnote"))
    note.addElement(body)
    lines.addElement(note)
    document.text.addElement(lines)
    table = Table(name="Table1")
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    row = TableRow()
    for text in ("left cell", "right cell"):
        cell = TableCell()
        cell.addElement(P(text=text))
        row.addElement(cell)
    table.addElement(row)
    document.text.addElement(table)
    path = tmp_path / "test.odt"
    document.save(str(path))
    return path.read_bytes()


FORMATS = {"docx": (docx, build_docx), "pptx": (pptx, build_pptx), "odt": (odt, build_odt)}


def member(data: bytes, name: str) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return z.read(name)


def rezip(data: bytes, name: str, change: Callable[[bytes], bytes]) -> bytes:
    """``data`` (a zip) with its member ``name`` changed."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            content = source.read(info)
            target.writestr(info, change(content) if info.filename == name else content)
    return out.getvalue()


# ---- every format ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", FORMATS)
def test_units_are_well_nested_and_an_untranslated_write_reads_back_the_same(kind, tmp_path):
    module, build = FORMATS[kind]
    data = build(tmp_path)
    document = module.FORMAT.read(data, f"test.{kind}")
    assert not document.hard_breaks
    assert len(document.units) >= 5
    for unit in document.units:
        check_inlines(unit.text, unit.inlines)
    again = module.FORMAT.read(document.write(document.units), f"again.{kind}")
    assert again.units == document.units


@pytest.mark.parametrize("kind", FORMATS)
def test_uppercase_translation_reaches_every_unit(kind, tmp_path):
    module, build = FORMATS[kind]
    document = module.FORMAT.read(build(tmp_path), f"test.{kind}")
    out = module.FORMAT.read(document.write([upper(u) for u in document.units]), f"out.{kind}")
    assert [u.text for u in out.units] == [u.text.upper() for u in document.units]
    assert [u.inlines for u in out.units] == [u.inlines for u in document.units]


# ---- docx --------------------------------------------------------------------------------------------


def test_docx_units(tmp_path):
    units = docx.read(build_docx(tmp_path), "test.docx").units
    texts = [u.text for u in units]
    assert texts == [
        "A title", SENTENCE, "first second third", "Page 7 of the report", "Anchor words", "boxed text",
        "Noted.", "left cell", "right cell", "nested cell", "header text", "a footnote",
    ]
    sentence = units[1]
    assert covered(sentence) == ["black", "sleeps", "a link"]  # the link's own base formatting: no inline in it
    breaks = units[2]  # a space stands for each break in the text, the break a zero-width inline
    assert [(x.start, x.end) for x in breaks.inlines] == [(5, 5), (12, 12)]
    page = units[3]
    assert covered(page) == ["7"]  # the field, around its displayed result
    anchor = units[4]
    assert [(x.start, x.end) for x in anchor.inlines] == [(7, 7)]  # the text box's drawing
    noted = units[6]
    assert [(x.start, x.end) for x in noted.inlines] == [(5, 5)]  # the footnote reference


def test_docx_swapped_words_keep_their_formatting_and_the_link(tmp_path):
    import docx as python_docx

    data = build_docx(tmp_path)
    document = docx.read(data, "test.docx")
    translated = [swap(u, "black", "sleeps") if u.text == SENTENCE else upper(u) for u in document.units]
    out = document.write(translated)
    result = python_docx.Document(io.BytesIO(out))

    p = result.paragraphs[1]
    assert p.text.startswith("The sleeps cat black here, see ")
    assert [r.text for r in p.runs if r.bold] == ["black"]
    assert [r.text for r in p.runs if r.italic] == ["sleeps"]
    link = p._p.find(f"{{{W}}}hyperlink")
    assert "".join(link.xpath(".//w:t/text()")) == "a link"
    rid = link.get("{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id")
    assert result.part.rels[rid].target_ref == "https://example.com/"
    assert link.find(f".//{{{W}}}u") is not None  # the link's run properties kept

    assert result.paragraphs[0].style.name == "Heading 1"
    assert result.paragraphs[2].text == "FIRST\nSECOND\tTHIRD"  # breaks back, no space added
    assert result.tables[0].style.name == "Table Grid"
    assert [c.text for c in result.tables[0].rows[0].cells][0] == "LEFT CELL"
    assert result.tables[0].cell(0, 1).tables[0].cell(0, 0).text == "NESTED CELL"
    assert result.sections[0].header.paragraphs[0].text == "HEADER TEXT"
    assert b"A FOOTNOTE" in member(out, "word/footnotes.xml")
    assert b"BOXED TEXT" in member(out, "word/document.xml")


def test_docx_field_instruction_and_markers_stay_around_the_translated_result(tmp_path):
    import docx as python_docx

    document = docx.read(build_docx(tmp_path), "test.docx")
    out = document.write([upper(u) for u in document.units])
    p = python_docx.Document(io.BytesIO(out)).paragraphs[3]._p
    sequence = [
        child.get(f"{{{W}}}fldCharType") or child.text
        for child in p.iter(f"{{{W}}}fldChar", f"{{{W}}}instrText", f"{{{W}}}t")
    ]
    assert sequence == ["PAGE ", "begin", " PAGE ", "separate", "7", "end", " OF THE REPORT"]


def with_external_entity(data: bytes, part: str, root: str, secret: Path) -> bytes:
    """``data`` with a DOCTYPE in ``part`` declaring an entity that names the file ``secret``, used in the text."""

    def inject(xml: bytes) -> bytes:
        head, rest = xml.split(b"?>", 1)
        doctype = f'<!DOCTYPE {root} [<!ENTITY xxe SYSTEM "{secret.as_uri()}">]>'.encode()
        return head + b"?>" + doctype + rest.replace(b"left cell", b"left &xxe; cell")

    return rezip(data, part, inject)


@pytest.mark.parametrize(("kind", "part", "root"), [("docx", "word/document.xml", "w:document"),
                                                     ("pptx", "ppt/slides/slide1.xml", "p:sld")])
def test_external_entity_is_never_resolved(kind, part, root, tmp_path):
    module, build = FORMATS[kind]
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    data = with_external_entity(build(tmp_path), part, root, secret)
    document = module.FORMAT.read(data, f"xxe.{kind}")
    assert "left  cell" in [u.text for u in document.units]  # the reference dropped, the text around it kept
    out = document.write([upper(u) for u in document.units])
    assert b"LEFT  CELL" in member(out, part)
    assert b"TOPSECRET" not in member(out, part) and b"xxe" not in member(out, part)


def test_docx_broken_xml_names_the_file(tmp_path):
    data = rezip(build_docx(tmp_path), "word/document.xml", lambda xml: xml[: len(xml) // 2])
    with pytest.raises(DocumentError, match=r"^broken\.docx: not a valid \.docx file: "):
        docx.read(data, "broken.docx")


# ---- pptx --------------------------------------------------------------------------------------------


def test_pptx_units(tmp_path):
    units = pptx.read(build_pptx(tmp_path), "test.pptx").units
    assert [u.text for u in units] == [
        "A title", "The black cat link second line", "left cell", "right cell", "grouped text", "speaker notes",
    ]
    body = units[1]
    assert covered(body) == ["black", "link", ""]  # bold, the linked run, the line break


def test_pptx_swapped_words_keep_bold_and_link(tmp_path):
    from pptx import Presentation

    document = pptx.read(build_pptx(tmp_path), "test.pptx")
    translated = [swap(u, "black", "link") if "black" in u.text else upper(u) for u in document.units]
    result = Presentation(io.BytesIO(document.write(translated)))
    slide = result.slides[0]
    p = slide.placeholders[1].text_frame.paragraphs[0]
    assert p.text == "The link cat black\vsecond line"
    assert [r.text for r in p.runs if r.font.bold] == ["black"]
    assert [(r.text, r.hyperlink.address) for r in p.runs if r.hyperlink.address] == [("link", "https://example.com/")]
    assert slide.shapes.title.text == "A TITLE"
    table = next(s for s in slide.shapes if s.has_table).table
    assert [table.cell(0, 0).text, table.cell(0, 1).text] == ["LEFT CELL", "RIGHT CELL"]
    group = next(s for s in slide.shapes if s.shape_type == 6)  # MSO_SHAPE_TYPE.GROUP
    assert group.shapes[0].text_frame.text == "GROUPED TEXT"
    assert slide.notes_slide.notes_text_frame.text == "SPEAKER NOTES"


def test_pptx_line_break_between_translated_words_gains_no_space(tmp_path):
    from pptx import Presentation

    document = pptx.read(build_pptx(tmp_path), "test.pptx")
    keys = [x.key for x in document.units[1].inlines]  # bold, link, line break
    translations = {  # the break after "lien" with the space after it, then with the space before it
        "Le chat noir lien deuxième ligne": [Inline(8, 12, keys[0]), Inline(13, 17, keys[1]), Inline(17, 17, keys[2])],
        "Le chat noir lien deuxième ligne.": [Inline(8, 12, keys[0]), Inline(13, 17, keys[1]), Inline(18, 18, keys[2])],
    }
    for text, inlines in translations.items():
        translated = [Unit(text, inlines) if i == 1 else u for i, u in enumerate(document.units)]
        result = Presentation(io.BytesIO(document.write(translated)))
        p = result.slides[0].placeholders[1].text_frame.paragraphs[0]
        assert p.text == text.replace("lien ", "lien\v")
        assert [r.text for r in p.runs if r.font.bold] == ["noir"]
        assert [r.text for r in p.runs if r.hyperlink.address] == ["lien"]


# ---- odt ---------------------------------------------------------------------------------------------


def test_odt_units(tmp_path):
    units = odt.read(build_odt(tmp_path), "test.odt").units
    assert [u.text for u in units] == [
        "A title", SENTENCE, "first two  spaces", "a footnote", "left cell", "right cell", "header text",
    ]
    sentence = units[1]
    assert covered(sentence) == ["black", "sleeps", "a link", "a link"]  # the link, the bold span in it
    assert sentence.inlines[3].parent == 2
    lines = units[2]  # text:s is spaces; the line break and the note zero-width inlines
    assert [(x.start, x.end) for x in lines.inlines] == [(5, 5), (17, 17)]


def test_odt_swapped_words_keep_spans_links_and_spaces(tmp_path):
    document = odt.read(build_odt(tmp_path), "test.odt")
    translated = [swap(u, "black", "sleeps") if u.text == SENTENCE else upper(u) for u in document.units]
    out = document.write(translated)
    content = etree.fromstring(member(out, "content.xml"))
    ns = {"text": TEXT_NS, "xlink": "http://www.w3.org/1999/xlink"}

    def spans(style: str) -> list[str]:
        return ["".join(s.itertext()) for s in content.iterfind(f".//text:span[@text:style-name='{style}']", ns)]

    assert spans("Bold") == ["black", "a link"]
    assert spans("Italic") == ["sleeps"]
    link = content.find(".//text:a", ns)
    assert link.get("{http://www.w3.org/1999/xlink}href") == "https://example.com/"
    assert "".join(link.itertext()) == "a link"
    paragraphs = ["".join(p.itertext()) for p in content.iterfind(".//text:p", ns)]
    assert paragraphs[0] == "The sleeps cat black here, see a link."
    assert content.find(".//text:line-break", ns) is not None
    assert content.find(".//text:s", ns) is not None  # the second of two spaces, kept from collapsing
    assert "A FOOTNOTE" in paragraphs and "LEFT CELL" in paragraphs
    assert b"HEADER TEXT" in member(out, "styles.xml")
    assert b'style:name="Bold"' in member(out, "content.xml")


def test_odt_external_entity_is_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    data = with_external_entity(build_odt(tmp_path), "content.xml", "office:document-content", secret)
    with pytest.raises(DocumentError, match=r"^xxe\.odt: not a valid \.odt file: it declares XML entities"):
        odt.read(data, "xxe.odt")


# ---- hostile and broken uploads ----------------------------------------------------------------------


def zip_of(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, content in members.items():
            z.writestr(name, content)
    return out.getvalue()


def declare_size(data: bytes, size: int) -> bytes:
    """``data`` (a zip) with every member's uncompressed size in the central directory set to ``size``."""
    out = bytearray(data)
    at = out.find(b"PK\x01\x02")
    while at >= 0:
        out[at + 24 : at + 28] = struct.pack("<I", size)
        at = out.find(b"PK\x01\x02", at + 4)
    return bytes(out)


@pytest.mark.parametrize("kind", FORMATS)
def test_not_a_zip_is_a_corrupt_file(kind):
    module = FORMATS[kind][0]
    for data in (b"", b"hello, world", zip_of({"a.txt": b"x" * 100})[:60]):
        with pytest.raises(DocumentError, match=rf"^bad\.{kind}: not a valid \.{kind} file \(corrupt zip\)$"):
            module.FORMAT.read(data, f"bad.{kind}")


@pytest.mark.parametrize("kind", FORMATS)
def test_ole_file_is_encrypted(kind):
    module = FORMATS[kind][0]
    with pytest.raises(DocumentError, match=rf"^secret\.{kind}: encrypted \(password-protected\) files cannot be"):
        module.FORMAT.read(archive.OLE_MAGIC + bytes(1000), f"secret.{kind}")


@pytest.mark.parametrize("kind", FORMATS)
def test_zip_without_the_format_parts_names_the_file(kind):
    module = FORMATS[kind][0]
    with pytest.raises(DocumentError, match=rf"^other\.{kind}: not a valid \.{kind} file: \w+"):
        module.FORMAT.read(zip_of({"hello.txt": b"hello"}), f"other.{kind}")


@pytest.mark.parametrize("kind", FORMATS)
def test_declared_huge_member_is_a_zip_bomb(kind, tmp_path):
    module, build = FORMATS[kind]
    bomb = declare_size(build(tmp_path), 300 * 2**20)
    with pytest.raises(DocumentError, match=rf"^bomb\.{kind}: unpacks to more than 256 MiB"):
        module.FORMAT.read(bomb, f"bomb.{kind}")


def test_archive_bounds_the_unpacked_size_and_the_ratio():
    zeros = zip_of({"zeros.bin": bytes(5 * 2**20)})
    with pytest.raises(DocumentError, match=r"^z\.docx: unpacks to more than 1 MiB"):
        archive.check_archive(zeros, "z.docx", max_unpacked=2**20)
    with pytest.raises(DocumentError, match=r"^z\.docx: its member 'zeros\.bin' is compressed \d+ times"):
        archive.check_archive(zeros, "z.docx")
    archive.check_archive(zip_of({"text.xml": b"<a/>" * 1000}), "small.docx")  # small and repetitive: fine


def test_archive_check_decompresses_nothing(tmp_path, monkeypatch):
    data = build_docx(tmp_path)

    def refuse(*args, **kwargs):
        raise AssertionError("check_archive opened a member")

    monkeypatch.setattr(zipfile.ZipFile, "open", refuse)
    archive.check_archive(data, "test.docx")
