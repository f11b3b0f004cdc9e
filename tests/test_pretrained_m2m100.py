"""mt-import of M2M100ForConditionalGeneration directories (M2M-100, NLLB-200): mt computes and generates what
transformers does, token for token, with the source language's code first and the target's forced first."""

from __future__ import annotations

import json
import re

import pytest
import torch
import torch.nn.functional as F
import transformers
from pretrained_helpers import NLLB_CODES, captions, m2m100_directory
from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding

from mt.checkpoint import load_for_inference, load_tokenizers_and_config
from mt.cli.translate import main as translate_main
from mt.config import DecodeConfig
from mt.data.languages import LanguageError, data_pairs, source_languages, target_languages
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from mt.decode import Translator
from mt.decode.translator import collate_sources
from mt.model.embedding import SinusoidalPositions
from mt.pretrained import PretrainedError, import_hf

# each family's layout, and settings of the random model whose outputs end at various lengths
VARIANTS = {
    "m2m100": dict(eos_bias=14.0, scale_embedding=False, tied=False),  # an lm_head of its own
    "nllb": dict(nllb=True, eos_bias=14.0),
}
LANGUAGES = {"m2m100": {"en": "en", "de": "de", "fr": "fr"}, "nllb": NLLB_CODES}  # mt's names of en, de, fr
CODES = {"m2m100": "__{}__", "nllb": "{}"}  # a language's code token
LIMIT = 30  # pieces a search may generate (max_len_b, with max_len_a=0)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def imported(request, tmp_path_factory, multi30k_dir):
    base = tmp_path_factory.mktemp(request.param)
    directory = m2m100_directory(base / "hf", multi30k_dir, **VARIANTS[request.param])
    report = import_hf(directory, base / "model.pt")
    return directory, report.out, LANGUAGES[request.param], CODES[request.param]


@pytest.fixture(scope="module")
def sources(multi30k_dir):
    return captions(multi30k_dir, "en", 2060)[2000:]  # not the tokenizer's training lines


def hf(directory):
    return (transformers.AutoTokenizer.from_pretrained(directory),
            transformers.M2M100ForConditionalGeneration.from_pretrained(directory).eval())


def to_hf(tokenizer, model, mt_tokenizer) -> torch.Tensor:
    """(V',) the Hugging Face id of each mt id's row: the same piece (``<s:0>``: id 0), the decoder start for mt's
    ``<s>`` (a copy: mt has one piece more), the same row past the vocabulary."""
    pieces = mt_tokenizer.vocab_size - 1
    ids = {tokenizer.convert_ids_to_tokens(i): i for i in range(pieces)}
    rows = []
    for i in range(mt_tokenizer.padded_vocab_size):
        piece = mt_tokenizer.id_to_piece(i) if i < mt_tokenizer.vocab_size else ""
        kept = re.fullmatch(r"</?[a-z]+:([0-9]+)>", piece)
        rows.append(model.config.decoder_start_token_id if i == BOS_ID else int(kept.group(1)) if kept
                    else ids[piece] if piece else pieces + i - mt_tokenizer.vocab_size)
    return torch.tensor(rows)


def test_positions_equal_transformers():
    """mt's table row p is transformers' row p + 2 (padding_idx + 1), within the table and past it."""
    for d_model in (32, 33):
        theirs = M2M100SinusoidalPositionalEmbedding(200, d_model, padding_idx=1).weights  # (202, D)
        ours = SinusoidalPositions(d_model, 100, "fairseq", offset=2)
        assert torch.equal(ours.table, theirs[2:102])
        assert torch.equal(ours(90, 30), theirs[92:122])  # computed on the fly past max_positions
        assert torch.equal(ours(torch.tensor([0, 5]), 3), theirs[torch.tensor([[2, 3, 4], [7, 8, 9]])])


def test_tokenization_equals_transformers(imported, sources, multi30k_dir):
    """Sources are [source code] + pieces + [</s>]; decoding leaves out language codes and fairseq's <s>."""
    directory, ckpt, lang, code = imported
    tokenizer, model = hf(directory)
    tokenizers, _ = load_tokenizers_and_config(ckpt)
    rows = to_hf(tokenizer, model, tokenizers.src)
    for source in ("en", "fr"):
        tokenizer.src_lang = lang[source]
        translator = Translator(torch.nn.Identity(), tokenizers, DecodeConfig(), source_lang=lang[source])
        lines = sources if source == "en" else captions(multi30k_dir, "fr", 2040)[2000:]
        ours = translator.encode_lines(lines, target_lang=lang["de"])
        assert [rows[[*ids, EOS_ID]].tolist() for ids in ours] == [tokenizer(line).input_ids for line in lines]
    generator = torch.Generator().manual_seed(0)
    pieces = [i for i in range(4, tokenizers.tgt.vocab_size) if i not in tokenizers.tgt.language_codes.values()
              and not tokenizers.tgt.id_to_piece(i).startswith("<")]
    specials = [*tokenizers.tgt.language_codes.values(), tokenizers.tgt.piece_id("<s:0>")]
    for target in captions(multi30k_dir, "de", 2030)[2000:]:
        ids = tokenizers.tgt.encode(target)
        mixed = [*ids, *torch.tensor(pieces)[torch.randint(len(pieces), (5,), generator=generator)].tolist()]
        for case in (ids, mixed):
            theirs = tokenizer.decode(rows[case].tolist(), skip_special_tokens=True)
            assert tokenizers.tgt.decode(case) == theirs
            assert tokenizers.tgt.decode([specials[0], *case[:3], *specials, *case[3:]]) == theirs


def test_log_probabilities_equal_transformers(imported, sources, multi30k_dir):
    """Every target position's whole distribution over the vocabulary (every row, the code's too), on a padded
    batch of real sentences into German: decoder input [</s>, de code, pieces]."""
    directory, ckpt, lang, code = imported
    tokenizer, m2m = hf(directory)
    model, tokenizers, _ = load_for_inference(ckpt)
    translator = Translator(model, tokenizers, DecodeConfig(), source_lang=lang["en"])
    src, src_pad_mask = collate_sources(translator.encode_lines(sources[:16], target_lang=lang["de"]), "cpu")
    de = tokenizers.tgt.language_codes[lang["de"]]
    pieces = [[BOS_ID, de, *tokenizers.tgt.encode(line)] for line in captions(multi30k_dir, "de", 2016)[2000:]]
    tgt_in = torch.full((16, max(map(len, pieces))), PAD_ID)
    for row, ids in enumerate(pieces):
        tgt_in[row, : len(ids)] = torch.tensor(ids)
    rows = to_hf(tokenizer, m2m, tokenizers.tgt)
    with torch.inference_mode():
        ours = F.log_softmax(model(src, src_pad_mask, tgt_in), dim=-1)  # (B, T, V')
        theirs = F.log_softmax(m2m(input_ids=rows[src], attention_mask=(~src_pad_mask).long(),
                                   decoder_input_ids=rows[tgt_in]).logits, dim=-1)
    real = tgt_in != PAD_ID
    scored = [i for i in range(tokenizers.tgt.padded_vocab_size) if i != BOS_ID]  # <s> copies </s>, scored there
    ours, theirs = ours[real][:, scored], theirs[real][:, rows[scored]]
    assert bool(torch.isfinite(ours).all())
    assert torch.allclose(ours, theirs, atol=1e-5), float((ours - theirs).abs().max())


def generate(directory, tokenizers, lines: list[str], source: str, target: str, **options) -> list[list[int]]:
    """transformers' outputs as mt ids (the pieces after the forced code, no end; ``LIMIT`` of them where the
    length limit forced the end); ``<pad>`` and the rows past the vocabulary are suppressed, as mt bans them."""
    tokenizer, m2m = hf(directory)
    tokenizer.src_lang = source
    rows = to_hf(tokenizer, m2m, tokenizers.tgt)
    back = {int(hf_id): i for i, hf_id in enumerate(rows.tolist()) if i != BOS_ID}
    code = int(rows[tokenizers.tgt.language_codes[target]])
    eos = m2m.config.eos_token_id
    banned = [m2m.config.pad_token_id, *rows[tokenizers.tgt.vocab_size :].tolist()]
    batch = tokenizer(lines, return_tensors="pt", padding=True)
    with torch.inference_mode():
        out = m2m.generate(**batch, forced_bos_token_id=code, suppress_tokens=banned, do_sample=False,
                           max_length=LIMIT + 3, forced_eos_token_id=eos, **options).tolist()  # </s> code pieces </s>
    assert all(row[:2] == [m2m.config.decoder_start_token_id, code] and eos in row[2:] for row in out)
    return [[back[i] for i in row[2 : row.index(eos, 2)]] for row in out]


def mt_search(ckpt, lines: list[str], source: str, target, native: bool = True, **decode) -> list[list[int]]:
    return [t.hypotheses[0].tokens for t in mt_translations(ckpt, lines, source, target, native, **decode)]


def mt_translations(ckpt, lines: list[str], source: str, target, native: bool = True, **decode):
    """mt's translations (``native``: the C++ search, else the Python loop), limits and rules as transformers'."""
    model, tokenizers, cfg = load_for_inference(ckpt, pack=True, native=native)  # as mt-translate loads it
    settings = DecodeConfig(max_len_a=0, max_len_b=LIMIT, min_len=0, stopping="exact", length_penalty="length",
                            **decode)
    translator = Translator(model, tokenizers, settings, max_positions=cfg.model.max_positions, source_lang=source)
    return translator.translate_nbest(lines, target_lang=target)


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_the_cpp_search_forces_the_code_as_the_python_loop_does(imported, sources, strategy):
    """The C++ whole-batch search (``native_search.cpp``) takes the forced first token: the same outputs and scores
    as the Python loop, into two targets in one batch."""
    _, ckpt, lang, _ = imported
    model = load_for_inference(ckpt, pack=True)[0]
    src = torch.tensor([[5, 6, 7, EOS_ID]])
    with torch.inference_mode():  # the C++ search takes the model: Pre-LN, offset positions, the logits bias
        assert model.decoder.native.search_takes(model.decoder, model.encode(src, src == PAD_ID), LIMIT + 2)
    targets = [lang["de"] if i % 2 else lang["fr"] for i in range(len(sources))]
    fast = mt_translations(ckpt, sources, lang["en"], targets, strategy=strategy)
    plain = mt_translations(ckpt, sources, lang["en"], targets, native=False, strategy=strategy)
    assert [t.hypotheses[0].tokens for t in fast] == [t.hypotheses[0].tokens for t in plain]
    assert all(abs(a.hypotheses[0].score - b.hypotheses[0].score) < 1e-4 for a, b in zip(fast, plain, strict=True))


def test_greedy_equals_generate(imported, sources):
    """Every line, those that reach the length limit too (greedy search ranks nothing)."""
    directory, ckpt, lang, _ = imported
    tokenizers, _ = load_tokenizers_and_config(ckpt)
    ours = mt_search(ckpt, sources, lang["en"], lang["de"], strategy="greedy")
    theirs = generate(directory, tokenizers, sources, lang["en"], lang["de"], num_beams=1)
    assert ours == theirs
    assert 10 < sum(len(t) < LIMIT for t in theirs) < len(theirs)  # outputs of several lengths, some at the limit


@pytest.mark.parametrize(("beam", "alpha"), [(4, 1.0), (5, 0.6)])
def test_beam_equals_generate(imported, sources, beam, alpha):
    """Where transformers' best output ends before the length limit (at the limit it scores the forced </s> as
    probability 1, mt with the model's)."""
    directory, ckpt, lang, _ = imported
    tokenizers, _ = load_tokenizers_and_config(ckpt)
    ours = mt_search(ckpt, sources, lang["en"], lang["de"], strategy="beam", beam_size=beam, alpha=alpha)
    theirs = generate(directory, tokenizers, sources, lang["en"], lang["de"], num_beams=beam, length_penalty=alpha,
                      early_stopping="never")
    ended = [i for i, t in enumerate(theirs) if len(t) < LIMIT]
    assert len(ended) >= 5 and any(theirs[i] for i in ended)  # some non-empty
    assert [ours[i] for i in ended] == [theirs[i] for i in ended]


def test_each_target_language_is_forced(imported, sources):
    """Into German and into French (one batch, a target a line): each line's forced code is its own language's,
    equal to transformers', scored 0 and left out of the output."""
    directory, ckpt, lang, _ = imported
    tokenizers, _ = load_tokenizers_and_config(ckpt)
    lines = sources[:20]
    targets = [lang["de"], lang["fr"]] * 10
    mixed = mt_search(ckpt, lines, lang["en"], targets, strategy="greedy")
    alone = {target: mt_search(ckpt, lines, lang["en"], lang[target], strategy="greedy") for target in ("de", "fr")}
    for target in ("de", "fr"):
        assert alone[target] == generate(directory, tokenizers, lines, lang["en"], lang[target], num_beams=1)
        assert [mixed[i] for i, t in enumerate(targets) if t == lang[target]] == alone[target][int(target == "fr") :: 2]
    assert alone["de"] != alone["fr"]
    model = load_for_inference(ckpt)[0]
    translator = Translator(model, tokenizers, DecodeConfig(strategy="greedy"), source_lang=lang["en"])
    translations = translator.translate_nbest(lines[:4], target_lang=lang["fr"])
    found = translations[0].hypotheses[0]
    aligned = translator.align(lines[:4], translations, lang["fr"])  # the code read first, in no word
    for line, translation, links in zip(lines[:4], translations, aligned, strict=True):
        assert all(s < len(line.split()) and t < len(translation.text.split()) for s, t in links)
        assert bool(links) == bool(translation.text.strip())
    src, src_pad_mask = collate_sources(translator.encode_lines(lines[:1], lang["fr"]), "cpu")
    tgt = torch.tensor([[BOS_ID, tokenizers.tgt.language_codes[lang["fr"]], *found.tokens]])
    with torch.inference_mode():
        lprobs = F.log_softmax(model(src, src_pad_mask, tgt), dim=-1)[0, 1:]  # the steps after the code
    assert found.logprob == pytest.approx(float(lprobs.gather(1, torch.tensor([*found.tokens, EOS_ID])[:, None]).sum()),
                                          abs=1e-4)


def test_imported_config_lists_the_languages(imported):
    directory, ckpt, lang, code = imported
    tokenizers, cfg = load_tokenizers_and_config(ckpt)
    config = json.loads((directory / "config.json").read_text())
    model = cfg.model
    assert (model.pre_ln, model.sinusoid, model.position_offset, model.logits_bias) == (True, "fairseq", 2, True)
    assert model.scale_embeddings == config["scale_embedding"] and model.share_all_embeddings
    codes = list(tokenizers.src.language_codes)
    assert sorted(source_languages(cfg.data)) == sorted(target_languages(cfg.data)) == sorted(codes)
    assert data_pairs(cfg.data)[0].name == f"{lang['en']}-{lang['de']}"  # tokenizer_config's src_lang, tgt_lang
    assert all(tokenizers.src.id_to_piece(i) == code.format(name) for name, i in tokenizers.src.language_codes.items())
    with pytest.raises(LanguageError, match="no code for the target language 'xx'"):
        Translator(torch.nn.Identity(), tokenizers, DecodeConfig(), source_lang=lang["en"]).encode_lines(["a"], "xx")
    with pytest.raises(LanguageError, match="give the source language"):
        Translator(torch.nn.Identity(), tokenizers, DecodeConfig()).encode_lines(["a"], lang["de"])


def test_mt_translate_takes_the_languages(imported, sources, tmp_path, capsys):
    directory, ckpt, lang, _ = imported
    (tmp_path / "in.txt").write_text("\n".join(sources[:6]) + "\n", encoding="utf-8")
    argv = ["--ckpt", str(ckpt), "--input", str(tmp_path / "in.txt"), "--strategy", "greedy", "--source-lang",
            lang["en"], "--target-lang", lang["fr"], "--output", str(tmp_path / "out.txt")]
    assert translate_main(argv) == 0
    model, tokenizers, cfg = load_for_inference(ckpt)
    translator = Translator(model, tokenizers, DecodeConfig(strategy="greedy", **{
        k: getattr(cfg.decode, k) for k in ("max_len_a", "max_len_b", "min_len")}),
        max_positions=cfg.model.max_positions, source_lang=lang["en"])
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines() == translator.translate(
        sources[:6], target_lang=lang["fr"])
    assert translate_main([*argv[:-1], str(tmp_path / "other.txt"), "--source-lang", "xx"]) != 0
    assert "source language 'xx' is not one of this model's" in capsys.readouterr().err


def test_mt_eval_scores_any_two_of_the_models_languages(imported, multi30k_dir, tmp_path, capsys):
    """``--pair de-fr`` (no pair the import lists, two of the model's languages): German read with its own code,
    French forced; the report's translations are mt-translate's. A language the model lacks is refused."""
    from mt.cli.evaluate import main as eval_main

    directory, ckpt, lang, _ = imported
    german, french = captions(multi30k_dir, "de", 2006)[2000:], captions(multi30k_dir, "fr", 2006)[2000:]
    (tmp_path / "de.txt").write_text("\n".join(german) + "\n", encoding="utf-8")
    (tmp_path / "fr.txt").write_text("\n".join(french) + "\n", encoding="utf-8")
    pair = f"{lang['de']}-{lang['fr']}"
    argv = ["--ckpt", str(ckpt), "--src", str(tmp_path / "de.txt"), "--ref", str(tmp_path / "fr.txt"), "--strategy",
            "greedy", "--out-dir", str(tmp_path / "reports"), "--name", "de-fr"]
    assert eval_main([*argv, "--pair", pair]) == 0
    report = json.loads((tmp_path / "reports" / f"de-fr.{pair}.json").read_text())  # a model of several pairs
    model, tokenizers, cfg = load_for_inference(ckpt)
    translator = Translator(model, tokenizers, DecodeConfig(strategy="greedy", **{
        k: getattr(cfg.decode, k) for k in ("max_len_a", "max_len_b", "min_len")}),
        max_positions=cfg.model.max_positions, source_lang=lang["de"])
    expected = translator.translate(german, target_lang=lang["fr"])
    assert [(e["source"], e["hypothesis"]) for e in report["examples"]] == [
        (german[e["line"] - 1], expected[e["line"] - 1]) for e in report["examples"]]
    capsys.readouterr()
    assert eval_main([*argv, "--pair", f"{lang['de']}-xx"]) != 0
    assert f"--pair {lang['de']}-xx: this model's pairs are" in capsys.readouterr().err


def test_for_source_reads_another_language_first(imported, sources):
    """What mt-eval gives each pair of a ``--split``: the same translator with that pair's source code first."""
    _, ckpt, lang, _ = imported
    model, tokenizers, cfg = load_for_inference(ckpt)
    english = Translator(model, tokenizers, DecodeConfig(), source_lang=lang["en"])
    german = english.for_source(lang["de"])
    codes = tokenizers.src.language_codes
    assert german.encode_lines(sources[:2], target_lang=lang["fr"])[0][0] == codes[lang["de"]]
    assert english.encode_lines(sources[:2], target_lang=lang["fr"])[0][0] == codes[lang["en"]]
    assert (german.model, german.cfg, german.max_positions) == (english.model, english.cfg, english.max_positions)


def test_refusals_name_the_field(tmp_path, multi30k_dir):
    directory = m2m100_directory(tmp_path / "hf", multi30k_dir, nllb=True, layers=1)
    config = json.loads((directory / "config.json").read_text())
    for field, value, message in [
        ("decoder_ffn_dim", 16, "decoder_ffn_dim=16: differs from encoder_ffn_dim=64"),
        ("layernorm_embedding", True, "layernorm_embedding=True: mt has no norm between the embeddings"),
        ("num_experts", 4, "num_experts=4: a mixture of experts"),
        ("model_type", "nllb-moe", "model_type='nllb-moe'; mt imports MarianMTModel .*M2M100ForConditionalGeneration"),
    ]:
        (directory / "config.json").write_text(json.dumps(config | {field: value}))
        with pytest.raises(PretrainedError, match=message):
            import_hf(directory, tmp_path / "model.pt")
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(PretrainedError, match="--target-lang xx_Latn: not one of the model's language codes"):
        import_hf(directory, tmp_path / "model.pt", target_lang="xx_Latn")
    assert not (tmp_path / "model.pt").exists()


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_refill_forces_each_joining_sentence(imported, sources, strategy):
    """Continuous batching: sentences that join a decoding in progress are forced at their own first step."""
    _, ckpt, lang, _ = imported
    targets = [lang["de"], lang["fr"], lang["fr"]] * 6
    options = dict(strategy=strategy, beam_size=4, max_sentences=3)
    whole = mt_search(ckpt, sources[:18], lang["en"], targets, refill="none", **options)
    assert mt_search(ckpt, sources[:18], lang["en"], targets, refill="all", **options) == whole
    sampled = mt_search(ckpt, sources[:6], lang["en"], lang["fr"], strategy="sample", top_k=1)
    assert sampled == mt_search(ckpt, sources[:6], lang["en"], lang["fr"], strategy="greedy")


def test_ctranslate2_greedy_with_the_code_as_target_prefix_equals_mt(imported, sources, tmp_path):
    """The export keeps the codes as pieces: a source is [its code] + pieces, the target's code is the
    ``target_prefix`` (counted by ``max_decoding_length``), and the pieces after it are mt's greedy output."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from mt.export import export_ctranslate2

    _, ckpt, lang, code = imported
    export_ctranslate2(ckpt, tmp_path / "ct2")
    tokenizers, _ = load_tokenizers_and_config(ckpt)
    source_code, target_code = code.format(lang["en"]), code.format(lang["de"])
    readme = (tmp_path / "ct2" / "README.md").read_text()
    assert f'target_prefix=[["{target_code}"]]' in readme and "hypotheses[0][1:]" in readme
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu", intra_threads=1)
    tokens = [[source_code, *map(tokenizers.src.id_to_piece, tokenizers.src.encode(line))] for line in sources]
    results = translator.translate_batch(tokens, target_prefix=[[target_code]] * len(sources), beam_size=1,
                                         max_decoding_length=LIMIT + 1)
    assert all(r.hypotheses[0][0] == target_code for r in results)
    theirs = [[tokenizers.tgt.piece_id(p) for p in r.hypotheses[0][1:]] for r in results]
    ours = mt_search(ckpt, sources, lang["en"], lang["de"], strategy="greedy")
    assert theirs == ours
    assert 10 < sum(len(t) < LIMIT for t in ours) < len(ours)  # outputs of several lengths, some at the limit
