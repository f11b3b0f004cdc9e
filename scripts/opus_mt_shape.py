"""The OPUS-MT shape for the decoding race: a random ``MarianMTModel`` built as Helsinki-NLP's opus-mt-en-de is.

``opus_mt_directory`` writes a transformers directory offline: opus-mt-en-de's configuration (6+6 layers,
d_model 512, 8 heads, FFN 2048 with SiLU ("swish"), 58,101 pieces in one shared vocabulary, sqrt(d)-scaled
embeddings, Marian's sinusoids, decoding from ``<pad>``), random weights (seed 0, transformers' own
initialisation) and a random ``final_logits_bias``. Its tokenizers are SentencePiece models trained on the
Multi30k captions (English ``source.spm``, German ``target.spm``, up to 8,000 pieces each); ``vocab.json`` numbers
their pieces as Marian does (``</s>`` 0, ``<unk>`` 1, ..., ``<pad>`` last) and fills the vocabulary to
58,101 entries with pieces no text produces, so the output projection has the real model's size.

``mt_import`` makes it an mt checkpoint (``mt.pretrained.import_hf``); ``ct2_conversion`` converts the same
directory with CTranslate2's own converter (``TransformersConverter``), as LibreTranslate and Argos users get
their models, and copies the SentencePiece models beside it for the race's CTranslate2 worker.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path

OPUS_MT_EN_DE = dict(
    d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
    encoder_ffn_dim=2048, decoder_ffn_dim=2048, activation_function="swish", max_position_embeddings=512,
    vocab_size=58101, scale_embedding=True, share_encoder_decoder_embeddings=True,
)
SMOKE = dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=64, decoder_ffn_dim=64)  # --smoke: the same files, a tiny network
SPM_PIECES = 8000


def train_spm(lines: list[str], pieces: int) -> bytes:
    """A unigram SentencePiece model as OPUS-MT's are trained (``nmt_nfkc``, ``<unk> <s> </s>`` first)."""
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, model_type="unigram",
                                   vocab_size=pieces, character_coverage=1.0, minloglevel=2, num_threads=2,
                                   hard_vocab_limit=False)  # Multi30k German holds fewer than 8,000
    return model.getvalue()


def marian_vocab(protos: list[bytes], size: int) -> dict[str, int]:
    """Marian's numbering of the models' pieces, filled to ``size`` entries with pieces text never produces."""
    import sentencepiece as spm

    pieces = ["</s>", "<unk>"]
    seen = set(pieces)
    for proto in protos:
        sp = spm.SentencePieceProcessor(model_proto=proto)
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if not (sp.is_control(i) or sp.is_unknown(i)) and piece not in seen:
                pieces.append(piece)
                seen.add(piece)
    pieces += [f"<unused{i}>" for i in range(size - 1 - len(pieces))]
    return {piece: i for i, piece in enumerate([*pieces, "<pad>"])}


def read_gz(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def opus_mt_directory(out: Path, data_dir: Path, *, smoke: bool = False) -> Path:
    """Write the random OPUS-MT-shaped directory to ``out`` (replacing it); returns ``out``."""
    import torch
    import transformers

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    pieces, lines = (500, 3000) if smoke else (SPM_PIECES, None)
    source = train_spm(read_gz(data_dir / "train.en.gz")[:lines], pieces)
    target = train_spm(read_gz(data_dir / "train.de.gz")[:lines], pieces)
    (out / "source.spm").write_bytes(source)
    (out / "target.spm").write_bytes(target)
    vocab = marian_vocab([source, target], OPUS_MT_EN_DE["vocab_size"])
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    pad = vocab["<pad>"]
    shape = OPUS_MT_EN_DE | (SMOKE if smoke else {})
    config = transformers.MarianConfig(**shape, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad,
                                       forced_eos_token_id=0, bad_words_ids=[[pad]], num_beams=4, max_length=512)
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 1.0)
    model.save_pretrained(out)
    transformers.MarianTokenizer(source_spm=str(out / "source.spm"), target_spm=str(out / "target.spm"),
                                 vocab=str(out / "vocab.json"), source_lang="en",
                                 target_lang="de").save_pretrained(out)
    return out


def mt_import(directory: Path, out: Path) -> Path:
    from mt.pretrained import import_hf

    return import_hf(directory, out, force=True).out


def ct2_conversion(directory: Path, out: Path) -> Path:
    """CTranslate2's own conversion of ``directory`` (float32), with ``src.model`` / ``tgt.model`` beside it."""
    import ctranslate2

    ctranslate2.converters.TransformersConverter(str(directory)).convert(str(out), force=True)
    shutil.copyfile(directory / "source.spm", out / "src.model")
    shutil.copyfile(directory / "target.spm", out / "tgt.model")
    return out
