"""Documents through a trained model: nothing dropped, the same translation as sentence by sentence, markup kept.

The demo model (number words, en -> de) translates paragraphs of up to 50 sentences and sentences three
times its length limit: every source sentence comes back translated (non-empty), in order, and each
equals what the Translator gives that sentence alone. mt-translate reads and writes an HTML file.
"""

from __future__ import annotations

import random

import pytest
from export_helpers import demo_model

from mt.checkpoint import load_for_inference
from mt.cli.documents import plan_document, translate_plan
from mt.cli.translate import main as translate_main
from mt.decode import Translator
from mt.document.model import Unit
from mt.document.plain import TextDocument


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_model(tmp_path_factory.getbasetemp() / "export_demo")


@pytest.fixture(scope="module")
def translator(demo):
    model, tokenizers, cfg = load_for_inference(demo.ckpt, "cpu")
    return Translator(model, tokenizers, cfg.decode, "cpu", max_positions=cfg.model.max_positions)


@pytest.mark.parametrize("count", [1, 3, 50])
def test_paragraphs_of_up_to_50_sentences_lose_no_sentence(translator, demo, count):
    rng = random.Random(count)
    chosen = [rng.choice(demo.sources) for _ in range(count)]
    text = " ".join(s + "." for s in chosen)
    plan = plan_document(translator, TextDocument([Unit(text)]), "en", None)
    assert plan.sentences == [s + "." for s in chosen]
    translated = translate_plan(translator, plan, None)
    alone = translator.translate(plan.sentences)
    assert [t.text for t in translated] == alone and all(alone)
    assert plan.assemble(translated)[0].text == " ".join(alone)


def test_a_sentence_three_times_the_limit_is_cut_and_every_piece_translated(translator, demo):
    limit = translator.max_src_len
    translator.max_src_len = 12
    try:
        sentence = ", ".join(demo.sources[:12])  # far over 36 pieces
        pieces = len(translator.tokenizers.src.encode(sentence))
        assert pieces > 3 * 12
        plan = plan_document(translator, TextDocument([Unit(sentence)]), "en", None)
        assert all(len(translator.tokenizers.src.encode(s)) <= 12 for s in plan.sentences)
        assert "".join(plan.sentences).replace(" ", "") == sentence.replace(" ", "")
        translated = translate_plan(translator, plan, None)
        assert all(t.text for t in translated)
    finally:
        translator.max_src_len = limit


def test_mt_translate_translates_an_html_file_and_keeps_its_markup(demo, tmp_path, capsys):
    source = tmp_path / "page.html"
    first, second = demo.sources[:2]
    source.write_text(f'<html><body><h1 title="{first}">{first}</h1><p>{second}. <b>{first}</b>.</p>'
                      f"<pre>{second}</pre></body></html>", encoding="utf-8")
    out = tmp_path / "page.de.html"
    assert translate_main(["--ckpt", str(demo.ckpt), "--input", str(source), "--output", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert "<h1 title=" in html and "<b>" in html and f"<pre>{second}</pre>" in html  # pre never translated
    assert first not in html.replace(f"<pre>{second}</pre>", "")  # everything else was


def test_lines_stay_line_aligned_unless_splitting_is_asked_for(demo, tmp_path):
    first, second = demo.sources[:2]
    source = tmp_path / "in.en"
    source.write_text(f"{first}. {second}.\n{second}\n", encoding="utf-8")
    plain, split = tmp_path / "plain.de", tmp_path / "split.de"
    assert translate_main(["--ckpt", str(demo.ckpt), "--input", str(source), "--output", str(plain)]) == 0
    assert translate_main(["--ckpt", str(demo.ckpt), "--input", str(source), "--output", str(split),
                           "--split-sentences", "on"]) == 0
    assert len(plain.read_text().splitlines()) == len(split.read_text().splitlines()) == 2
    model, tokenizers, cfg = load_for_inference(demo.ckpt, "cpu")
    translator = Translator(model, tokenizers, cfg.decode, "cpu", max_positions=cfg.model.max_positions)
    a, b, c = translator.translate([f"{first}.", f"{second}.", second])
    assert split.read_text().splitlines() == [f"{a} {b}", c]


def test_word_links_come_from_the_chosen_layers_attention(translator, demo, monkeypatch):
    """Target-to-source links alone: each target word gets one link to a source word in range; the pieces of
    a word are summed, so a link is the source word its pieces attended to most (checked against the attention
    computed here)."""
    import torch

    import mt.decode.align
    from mt.decode.align import attention

    monkeypatch.setattr(mt.decode.align, "SYMMETRISE", "target")
    lines = demo.sources[:6]
    translations = translator.translate_nbest(lines, scores=False)
    for layer, shift in ((-1, False), (-2, True)):
        links = translator.align(lines, translations, layer=layer, shift=shift)
        for line, tr, found in zip(lines, translations, links, strict=True):
            assert {t for _, t in found} == set(range(len(tr.text.split())))
            assert all(0 <= s < len(line.split()) for s, _ in found)
    line, tr = lines[0], translations[0]
    src_ids, src_spans = translator.tokenizers.src.encode_with_spans(line)
    text, tgt_spans = translator.tokenizers.tgt.decode_with_spans(tr.hypotheses[0].tokens)
    from mt.decode.align import AlignInput, piece_words

    pair = AlignInput(src_ids, piece_words(line, src_spans), tr.hypotheses[0].tokens, piece_words(text, tgt_spans))
    weights = attention(translator.model, [pair], "cpu", -1)[0]  # (T+1, S+1)
    first_word = [k for k, w in enumerate(pair.tgt_words) if w == 0]
    src_of = torch.tensor(pair.src_words)
    per_piece = weights[first_word].sum(0)[: len(src_ids)] * (src_of >= 0)  # spaces belong to no word
    by_word = torch.zeros(max(pair.src_words) + 1).index_add_(0, src_of.clamp(min=0), per_piece)
    assert (int(by_word.argmax()), 0) in translator.align([line], [tr], layer=-1, shift=False)[0]


def test_grow_diag_final_and_keeps_both_directions_links_within_the_union(translator, demo, monkeypatch):
    """The default links lie between the two directions' intersection and their union, each in range."""
    import mt.decode.align

    lines = demo.sources[:6]
    translations = translator.translate_nbest(lines, scores=False)
    joined = translator.align(lines, translations)
    found = {}
    for how in ("target", "union"):
        monkeypatch.setattr(mt.decode.align, "SYMMETRISE", how)
        found[how] = translator.align(lines, translations)
    for line, tr, links, forward, union in zip(lines, translations, joined, found["target"], found["union"],
                                               strict=True):
        backward = set(union) - set(forward) | {link for link in forward if link in union}
        assert set(links) <= set(union) and links == sorted(links, key=lambda link: (link[1], link[0]))
        assert all(0 <= s < len(line.split()) and 0 <= t < len(tr.text.split()) for s, t in links)
        assert len(links) >= len(set(forward) & backward) > 0


@pytest.mark.parametrize("refill", ["none", "all"])
def test_aligning_with_the_encoder_rows_decoding_kept_encodes_nothing_and_links_alike(demo, refill):
    """``encoder_rows``: the outputs decoding computed are read back (the encoder does not run while aligning),
    and the links are those of encoding again, with refill's joins too."""
    import dataclasses

    model, tokenizers, cfg = load_for_inference(demo.ckpt, "cpu", pack=True, native=True)
    settings = dataclasses.replace(cfg.decode, refill=refill, max_sentences=4)
    translator = Translator(model, tokenizers, settings, "cpu", max_positions=cfg.model.max_positions)
    from mt.decode.align import EncoderRows

    lines = demo.sources[:24]
    wanted = lines[::2]
    rows = EncoderRows()
    translations = translator.translate_nbest(lines, scores=False, encoder_rows=rows)
    others = demo.sources[24:26]
    elsewhere = translator.translate_nbest(others, scores=False)  # decoded without the rows
    assert model.on_encoded is None  # recording ends with the search
    kept = [translations[i] for i in range(0, len(lines), 2)]
    encoded = []
    model.encoder.register_forward_hook(lambda *args: encoded.append(1))
    fast = translator.align(wanted, kept, encoder_rows=rows)
    assert encoded == []
    assert fast == translator.align(wanted, kept) and encoded  # the plain path encodes
    assert translator.align(others, elsewhere, encoder_rows=rows) == translator.align(
        others, elsewhere)  # lines not kept: encoded here
