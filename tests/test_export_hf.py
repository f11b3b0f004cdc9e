"""mt-export --to hf: a MarianMTModel directory that computes and generates what mt does, offline."""

from __future__ import annotations

import json

import pytest
import torch  # noqa: E402
import transformers  # noqa: E402  (the test extra installs it)
from export_helpers import compare_forward, demo_model, demo_sources, mt_search, untrained_checkpoint  # noqa: E402
from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding  # noqa: E402

from mt.checkpoint import load_for_inference  # noqa: E402
from mt.cli.export import main  # noqa: E402
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from mt.export import ExportError, export_hf  # noqa: E402
from mt.model import sinusoid_table  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_model(tmp_path_factory.getbasetemp() / "export_demo")


@pytest.fixture(scope="module")
def exported(demo, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf") / "model"
    assert main(["--to", "hf", "--ckpt", str(demo.ckpt), "--out", str(out)]) == 0
    return out


def load(directory):
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    return tokenizer, transformers.MarianMTModel.from_pretrained(directory).eval()


def generate(directory, lines: list[str], **options) -> list[list[int]]:
    """HF's output pieces per line (no decoder start, cut at the first EOS), batches of 64."""
    tokenizer, model = load(directory)
    out = []
    for i in range(0, len(lines), 64):
        batch = tokenizer(lines[i : i + 64], return_tensors="pt", padding=True)
        with torch.inference_mode():
            out += model.generate(**batch, **options).tolist()
    assert all(row[0] == BOS_ID for row in out)
    return [row[1:row.index(EOS_ID)] if EOS_ID in row else [t for t in row[1:] if t != PAD_ID] for row in out]


def test_directory_holds_config_generation_settings_weights_and_tokenizer(demo, exported):
    assert {"config.json", "generation_config.json", "model.safetensors", "source.spm", "target.spm", "vocab.json",
            "tokenizer_config.json", "README.md"} <= {p.name for p in exported.iterdir()}
    config = json.loads((exported / "config.json").read_text())
    assert config["model_type"] == "marian" and config["scale_embedding"] is True
    assert (config["activation_function"], config["d_model"], config["max_position_embeddings"]) == ("relu", 64, 256)
    special = (config["decoder_start_token_id"], config["eos_token_id"], config["pad_token_id"])
    assert special == (BOS_ID, EOS_ID, PAD_ID)
    generation = json.loads((exported / "generation_config.json").read_text())
    assert (generation["num_beams"], generation["length_penalty"], generation["early_stopping"]) == (4, 0.6, False)
    assert generation["decoder_start_token_id"] == BOS_ID and generation["forced_eos_token_id"] == EOS_ID
    assert generation["suppress_tokens"] == [PAD_ID, BOS_ID, 124, 125, 126, 127]  # + the embedding's padding rows
    assert generation["max_length"] == 255 + 2  # <s> + mt's limit for the longest source (max_positions - 1) + </s>
    tokenizer, _ = load(exported)
    assert type(tokenizer).__name__ == "MarianTokenizer"


def test_tokenizer_encodes_and_decodes_as_mt(demo, exported):
    _, tokenizers, _ = load_for_inference(demo.ckpt)
    tokenizer = transformers.MarianTokenizer.from_pretrained(exported)
    assert tokenizer(demo.sources).input_ids == [tokenizers.src.encode(line) + [EOS_ID] for line in demo.sources]
    hyps, _ = mt_search(demo.ckpt, demo.sources, strategy="greedy")
    texts = tokenizer.batch_decode([[BOS_ID, *h.tokens, EOS_ID] for h in hyps], skip_special_tokens=True)
    assert texts == [tokenizers.tgt.decode(h.tokens) for h in hyps]


def test_encoder_output_and_logits_match_mt_on_a_padded_batch(demo, exported):
    compare_forward(demo.ckpt, exported, demo.sources[:16])


def test_mt_position_table_is_stored_because_marians_own_differs(demo, exported):
    """Marian's sinusoids use frequencies 10000^(-2i/D), mt's (fairseq's) 10000^(-i/(D/2-1))."""
    _, marian = load(exported)
    mt_table = sinusoid_table(torch.arange(256), 64)
    marian_table = MarianSinusoidalPositionalEmbedding(256, 64).create_weight()
    assert float((marian_table - mt_table).abs().max()) > 0.1  # far from a rounding difference
    assert torch.equal(marian.model.encoder.embed_positions.weight, mt_table)
    assert torch.equal(marian.model.decoder.embed_positions.weight, mt_table)


def test_greedy_generate_is_token_identical_to_mt_greedy(demo, exported):
    ours, _ = mt_search(demo.ckpt, demo.sources, strategy="greedy")
    assert generate(exported, demo.sources, num_beams=1) == [h.tokens for h in ours]  # 300 sentences


def test_beam_generate_with_the_exported_settings_agrees_on_95_percent(demo, exported):
    """generation_config.json: num_beams 4, length_penalty 0.6 = mt's 'length' penalty |Y|^0.6 (the demo's
    decode settings). transformers keeps num_beams finished hypotheses and stops by its early_stopping
    heuristic where mt stops at the best candidate's EOS, so a few outputs may differ (measured 299/300)."""
    ours, cfg = mt_search(demo.ckpt, demo.sources)
    assert (cfg.decode.strategy, cfg.decode.beam_size, cfg.decode.length_penalty) == ("beam", 4, "length")
    theirs = generate(exported, demo.sources)  # every setting from generation_config.json
    same = sum(h.tokens == t for h, t in zip(ours, theirs, strict=True))
    assert same >= 0.95 * len(demo.sources)


@pytest.mark.parametrize(
    "overrides",
    [
        ("data.joint_vocab=false", "model.share_all_embeddings=false"),
        ("model.positions=learned", "model.activation=gelu"),
    ],
    ids=["separate_vocab", "learned_positions_gelu"],
)
def test_variants_compute_what_mt_computes(tmp_path, overrides):
    ckpt = untrained_checkpoint(tmp_path / "model.pt", *overrides)
    export_hf(ckpt, tmp_path / "hf")
    compare_forward(ckpt, tmp_path / "hf", demo_sources(6))
    _, tokenizers, _ = load_for_inference(ckpt)
    if not tokenizers.joint:
        tokenizer = transformers.MarianTokenizer.from_pretrained(tmp_path / "hf")
        german = ["einundzwanzig; dreitausendvier"]
        assert tokenizer(text_target=german).input_ids == [tokenizers.tgt.encode(german[0]) + [EOS_ID]]
        ids = tokenizers.tgt.encode(german[0])
        assert tokenizer.decode(ids, skip_special_tokens=True) == german[0]


def test_length_limit_and_forced_eos_match_mt_on_an_untrained_model(tmp_path):
    """An untrained model never says EOS: mt stops after max_len_b pieces with a forced EOS; the exported
    generation_config (max_length = <s> + 7 + </s>, forced_eos_token_id) does the same, greedy and beam."""
    ckpt = untrained_checkpoint(tmp_path / "model.pt", "decode.max_len_a=0", "decode.max_len_b=7")
    export_hf(ckpt, tmp_path / "hf")
    lines = demo_sources(12)
    greedy, _ = mt_search(ckpt, lines, strategy="greedy")
    assert all(len(h.tokens) == 7 for h in greedy)
    assert generate(tmp_path / "hf", lines, num_beams=1) == [h.tokens for h in greedy]
    beam, _ = mt_search(ckpt, lines, strategy="beam", length_penalty="length", alpha=0.6)
    assert generate(tmp_path / "hf", lines, num_beams=4) == [h.tokens for h in beam]


def test_pre_ln_is_refused_naming_the_option(tmp_path, capsys):
    ckpt = untrained_checkpoint(tmp_path / "model.pt", "model.pre_ln=true")
    with pytest.raises(ExportError, match="model.pre_ln=true cannot be exported to Hugging Face"):
        export_hf(ckpt, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    assert main(["--to", "hf", "--ckpt", str(ckpt), "--out", str(tmp_path / "hf")]) == 1
    assert "mt-export: error: model.pre_ln=true" in capsys.readouterr().err
    assert main(["--to", "hf", "--ckpt", str(ckpt), "--out", str(tmp_path / "hf"), "--quantization", "int8"]) == 1
    assert "applies to --to ctranslate2 only" in capsys.readouterr().err
