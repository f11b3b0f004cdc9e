"""mt-import of MarianMTModel directories: mt computes and generates what transformers does, token for token."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
import transformers
from export_helpers import demo_model, mt_search
from pretrained_helpers import captions, marian_directory, marian_layout

from mt.checkpoint import load_for_inference, load_tokenizers_and_config
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from mt.decode.translator import collate_sources
from mt.export import export_hf
from mt.pretrained import PretrainedError, import_hf

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")

VARIANTS = {
    "shared_swish": {},
    "separate_relu_untied": {"separate_vocabs": True, "activation": "relu", "tied": False},
    "gelu_extra_rows": {"activation": "gelu", "extra_rows": 5},
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def imported(request, tmp_path_factory, multi30k_dir):
    base = tmp_path_factory.mktemp(request.param)
    directory = marian_directory(base / "hf", multi30k_dir, **VARIANTS[request.param])
    report = import_hf(directory, base / "model.pt")
    return directory, report.out


def test_an_untied_lm_head_is_the_output_projection_of_its_own(imported):
    """``tie_word_embeddings=false``: ``model.tie_output=false``, a matrix apart from the target embedding."""
    directory, ckpt = imported
    model, _, cfg = load_for_inference(ckpt)
    tied = json.loads((directory / "config.json").read_text()).get("tie_word_embeddings", True)
    assert cfg.model.tie_output == tied
    assert (model.decoder.output_weight is model.decoder.embedding.token.weight) == tied
    assert ("decoder.output_projection" in model.state_dict()) != tied


@pytest.fixture(scope="module")
def sources(multi30k_dir):
    return [line for line in captions(multi30k_dir, "en", 2040)[2000:]]  # not the tokenizers' training lines


def hf(directory):
    return transformers.AutoTokenizer.from_pretrained(directory), transformers.MarianMTModel.from_pretrained(
        directory
    ).eval()


def hf_ids(tokenizer, mt_tokenizer, mt_ids: list[int], target: bool = False) -> list[int]:
    """mt's ids as the Hugging Face vocabulary (the target one with ``target``) numbers the same pieces."""
    vocab = tokenizer.target_encoder if target and tokenizer.separate_vocabs else tokenizer.encoder
    return [vocab.get(mt_tokenizer.id_to_piece(i), vocab["<unk>"]) for i in mt_ids]


def test_tokenization_is_marians(imported, sources, multi30k_dir):
    directory, ckpt = imported
    tokenizer, _ = hf(directory)
    tokenizers, _ = load_tokenizers_and_config(ckpt)
    for line in sources:
        expected = tokenizer(line).input_ids
        assert hf_ids(tokenizer, tokenizers.src, [*tokenizers.src.encode(line), EOS_ID]) == expected
    generator = torch.Generator().manual_seed(0)
    for target in captions(multi30k_dir, "de", 2040)[2000:]:
        ids = tokenizers.tgt.encode(target)
        mixed = [*ids, *torch.randint(4, tokenizers.tgt.vocab_size, (5,), generator=generator).tolist()]
        for case in (ids, mixed):  # mixed: pieces of the source model too (a shared vocabulary)
            theirs = tokenizer.decode(hf_ids(tokenizer, tokenizers.tgt, case, target=True), skip_special_tokens=True)
            assert tokenizers.tgt.decode(case) == theirs
            text, spans = tokenizers.tgt.decode_with_spans(case)
            assert text == theirs and all(0 <= a <= b <= len(text) for a, b in spans)


def test_log_probabilities_equal_transformers(imported, sources, multi30k_dir):
    """Every target position's whole distribution over the vocabulary, on a padded batch of real sentences."""
    directory, ckpt = imported
    tokenizer, marian = hf(directory)
    model, tokenizers, _ = load_for_inference(ckpt)
    targets = captions(multi30k_dir, "de", 2040)[2000:2016]
    src, src_pad_mask = collate_sources([tokenizers.src.encode(line) for line in sources[:16]], "cpu")
    pieces = [[BOS_ID, *tokenizers.tgt.encode(line)] for line in targets]
    tgt_in = torch.full((16, max(map(len, pieces))), PAD_ID)
    for row, ids in enumerate(pieces):
        tgt_in[row, : len(ids)] = torch.tensor(ids)
    to_hf = torch.tensor(hf_ids(tokenizer, tokenizers.tgt, list(range(tokenizers.tgt.vocab_size)), target=True))
    to_hf[BOS_ID] = marian.config.decoder_start_token_id  # mt's <s> row is a copy of Marian's <pad>
    with torch.inference_mode():
        ours = F.log_softmax(model(src, src_pad_mask, tgt_in), dim=-1)  # (B, T, V')
        hf_src = torch.tensor([hf_ids(tokenizer, tokenizers.src, row) for row in src.tolist()])
        theirs = F.log_softmax(marian(input_ids=hf_src, attention_mask=(~src_pad_mask).long(),
                                      decoder_input_ids=to_hf[tgt_in]).logits, dim=-1)
    real = tgt_in != PAD_ID
    scored = [i for i in range(tokenizers.tgt.vocab_size) if i != BOS_ID]  # <s> copies <pad>, scored there
    ours, theirs = ours[real][:, scored], theirs[real][:, to_hf[scored]]
    assert bool(torch.isfinite(ours).all())
    assert torch.allclose(ours, theirs, atol=1e-5), float((ours - theirs).abs().max())


def generate(directory, tokenizers, lines: list[str], **options) -> list[list[int]]:
    """transformers' outputs as mt ids (pieces, no start or end); ``<pad>`` and the embedding's rows past the
    vocabulary are suppressed, as mt bans them (OPUS-MT's generation_config.json bans ``<pad>`` too)."""
    tokenizer, marian = hf(directory)
    batch = tokenizer(lines, return_tensors="pt", padding=True)
    rows = marian.get_output_embeddings().weight.size(0)
    banned = [marian.config.pad_token_id, *range(len(tokenizer.decoder), rows)]
    with torch.inference_mode():
        out = marian.generate(**batch, suppress_tokens=banned, **options).tolist()
    eos = marian.config.eos_token_id
    rows = [row[1 : row.index(eos)] if eos in row[1:] else row[1:] for row in out]
    return [[tokenizers.tgt.piece_id(tokenizer.decoder[i]) for i in row] for row in rows]


def test_greedy_equals_generate(imported, sources):
    """Random models repeat themselves up to the length limit, where transformers scores the forced ``</s>``
    as probability 1 and mt (as fairseq) with the model's: greedy search, which ranks nothing, is equal."""
    directory, ckpt = imported
    tokenizers, _ = load_tokenizers_and_config(ckpt)
    ours, _ = mt_search(ckpt, sources, strategy="greedy", max_len_a=0, max_len_b=30, min_len=0)
    theirs = generate(directory, tokenizers, sources, num_beams=1, max_length=32, do_sample=False)
    assert [h.tokens for h in ours] == theirs


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A trained model (mt's demo, exported by mt-export --to hf) in OPUS-MT's layout, imported back; its test
    lines, the demo checkpoint and mt's own export."""
    base = tmp_path_factory.mktemp("trained_marian")
    demo = demo_model(tmp_path_factory.getbasetemp() / "export_demo")
    export_hf(demo.ckpt, base / "exported")
    directory = marian_layout(base / "exported", base / "hf")
    return directory, import_hf(directory, base / "model.pt").out, demo.sources, demo.ckpt, base / "exported"


def test_mts_own_export_imports_back_to_the_same_translations(trained, tmp_path):
    """The round trip: mt's trained model, exported by mt-export --to hf and imported back, translates its 300 test
    lines byte-identically (no reordering, no mask: mt's own layout comes back as it was)."""
    _, _, lines, original, exported = trained
    back = import_hf(exported, tmp_path / "back.pt").out
    _, cfg = load_tokenizers_and_config(back)
    assert not cfg.model.logits_bias and cfg.model.sinusoid == "fairseq"
    for strategy in ("greedy", "beam"):
        settings = dict(strategy=strategy, length_penalty="length", alpha=0.6)
        ours = [h.tokens for h in mt_search(back, lines, **settings)[0]]
        assert ours == [h.tokens for h in mt_search(original, lines, **settings)[0]]


@pytest.mark.parametrize(("beam", "alpha"), [(1, 0.0), (4, 0.6), (5, 1.0)])
def test_search_of_a_trained_model_equals_generate(trained, beam, alpha):
    directory, ckpt, lines, _, _ = trained
    tokenizers, cfg = load_tokenizers_and_config(ckpt)
    assert cfg.model.logits_bias and cfg.model.sinusoid == "fairseq"  # the stored table is mt's, kept
    ours, _ = mt_search(ckpt, lines, strategy="greedy" if beam == 1 else "beam", beam_size=beam,
                        length_penalty="length", alpha=alpha, max_len_a=0, max_len_b=60, min_len=0, stopping="exact")
    assert all(len(h.tokens) < 60 for h in ours)  # every output ends on its own
    options = dict(early_stopping="never", length_penalty=alpha) if beam > 1 else {}
    theirs = generate(directory, tokenizers, lines, num_beams=beam, max_length=62, do_sample=False, **options)
    assert [h.tokens for h in ours] == theirs  # 300 sentences


def test_imported_config_names_the_marian_options(imported):
    directory, ckpt = imported
    _, cfg = load_tokenizers_and_config(ckpt)
    config = json.loads((directory / "config.json").read_text())
    activation = {"swish": "silu"}.get(config["activation_function"], config["activation_function"])
    assert (cfg.model.activation, cfg.model.sinusoid, cfg.model.d_model) == (activation, "marian", 32)
    assert cfg.model.share_all_embeddings == config["share_encoder_decoder_embeddings"]
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("en", "de")


def test_refusals_name_the_field(tmp_path, multi30k_dir):
    directory = marian_directory(tmp_path / "hf", multi30k_dir, layers=1)
    config = json.loads((directory / "config.json").read_text())
    for field, value, message in [
        ("decoder_attention_heads", 2, "decoder_attention_heads=2: differs from encoder_attention_heads=4"),
        ("activation_function", "gelu_new", "activation_function='gelu_new': mt has gelu, relu, silu, swish"),
        ("model_type", "t5", "model_type='t5'; mt imports MarianMTModel"),
    ]:
        (directory / "config.json").write_text(json.dumps(config | {field: value}))
        with pytest.raises(PretrainedError, match=message):
            import_hf(directory, tmp_path / "model.pt")
    assert not (tmp_path / "model.pt").exists()


def test_target_tags_of_a_model_of_several_targets_work_as_mts_own(tmp_path, multi30k_dir, sources):
    """An OPUS-MT model of several targets (``>>de<<``, ``>>fr<<`` in its vocabulary): each target's tag starts the
    source, as transformers reads ``>>fr<< text``, and the outputs equal ``generate``'s on the tagged lines."""
    directory = marian_directory(tmp_path / "hf", multi30k_dir, tags=("de", "fr"), layers=1)
    ckpt = import_hf(directory, tmp_path / "model.pt").out
    tokenizers, cfg = load_tokenizers_and_config(ckpt)
    assert cfg.data.pairs == ["en-de", "en-fr"]
    tokenizer, _ = hf(directory)
    lines = sources[:10]
    for target in ("de", "fr"):
        tagged = [f">>{target}<< {line}" for line in lines]
        assert [hf_ids(tokenizer, tokenizers.src, [*tokenizers.src.encode(t), EOS_ID]) for t in tagged] == (
            tokenizer(tagged).input_ids)
        ours, _ = mt_search(ckpt, lines, target_lang=target, strategy="greedy", max_len_a=0, max_len_b=20, min_len=0)
        assert [h.tokens for h in ours] == generate(directory, tokenizers, tagged, num_beams=1, max_length=22)
    with pytest.raises(PretrainedError, match="--target-lang es: the model's target tags are de, fr"):
        import_hf(directory, tmp_path / "other.pt", target_lang="es")
