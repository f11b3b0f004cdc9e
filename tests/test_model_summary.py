"""Parameter accounting: the transformer_base figure, the closed form, the CLI."""

import pytest
import torch

from mt.config import ModelConfig
from mt.model import build_model
from mt.model.summary import count_parameters, count_parameters_closed_form, load_model_config, main


def test_transformer_base_with_37000_vocab() -> None:
    cfg = load_model_config("transformer_base")
    assert (cfg.d_model, cfg.d_ff, cfg.heads, cfg.encoder_layers, cfg.decoder_layers) == (512, 2048, 8, 6, 6)
    with torch.device("meta"):
        counts = count_parameters(build_model(cfg, 37000, 37000))
    assert counts["embeddings_weights"] == 18_944_000
    assert counts["encoder_weights"] == 18_874_368
    assert counts["decoder_weights"] == 25_165_824
    assert counts["weights"] == 62_984_192
    assert counts["biases"] == 98_304
    assert counts["total"] == 63_082_496
    assert counts == count_parameters_closed_form(6, 6, 512, 2048, 37000)


@pytest.mark.parametrize(
    ("n_enc", "n_dec", "d", "d_ff", "vocab", "shared"),
    [
        (1, 1, 16, 32, 40, True),
        (2, 3, 32, 128, 104, True),
        (3, 1, 64, 96, 256, False),
        (6, 6, 512, 2048, 8000, True),
    ],
)
def test_closed_form_equals_the_module(
    n_enc: int, n_dec: int, d: int, d_ff: int, vocab: int, shared: bool
) -> None:
    cfg = ModelConfig(encoder_layers=n_enc, decoder_layers=n_dec, d_model=d, d_ff=d_ff, heads=4)
    cfg.share_all_embeddings = shared
    with torch.device("meta"):
        model = build_model(cfg, vocab, vocab)
    assert count_parameters(model) == count_parameters_closed_form(
        n_enc, n_dec, d, d_ff, vocab, shared=shared
    )
    assert count_parameters(model)["total"] == sum(p.numel() for p in model.parameters())


def test_pre_ln_adds_two_final_layer_norms() -> None:
    cfg = ModelConfig(encoder_layers=2, decoder_layers=2, d_model=32, d_ff=64, heads=4, pre_ln=True)
    counts = count_parameters(build_model(cfg, 40, 40))
    assert counts["total"] == count_parameters_closed_form(2, 2, 32, 64, 40)["total"] + 2 * 2 * 32


def test_cli_prints_the_figures(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--model", "transformer_base", "--vocab", "37000"])
    out = capsys.readouterr().out
    for figure in ("62,984,192", "98,304", "63,082,496", "18,944,000", "18,874,368", "25,165,824"):
        assert figure in out
    assert "per sentence per beam" in out and "24,576 B fp32" in out and "12,288 B bf16" in out


@pytest.mark.parametrize(
    "name", ["transformer_tiny", "transformer_small", "transformer_base", "transformer_big"]
)
def test_every_model_config_loads(name: str) -> None:
    assert load_model_config(name).name == name
