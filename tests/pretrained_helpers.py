"""Tiny Hugging Face models built offline (random weights, the real classes and configs, ``save_pretrained``),
with SentencePiece models trained on Multi30k captions as their tokenizers: what ``mt-import`` is tested on.

The vocabularies are laid out as the families lay theirs out (Marian: ``</s>`` 0, ``<unk>`` 1, the pieces of
both SentencePiece models, ``<pad>`` last), so mt's reordering of the ids is exercised, not skipped.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import sentencepiece as spm
import torch
import transformers


def captions(multi30k: Path, lang: str, n: int = 2000) -> list[str]:
    with gzip.open(multi30k / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


def marian_spm(lines: list[str], vocab_size: int) -> bytes:
    """A SentencePiece model as OPUS-MT's are trained: unigram, ``nmt_nfkc``, ``<unk> <s> </s>`` first."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, model_type="unigram", vocab_size=vocab_size,
        character_coverage=1.0, minloglevel=2, num_threads=1, seed_sentencepiece_size=10000,
    )
    return model.getvalue()


def spm_pieces(proto: bytes) -> list[str]:
    sp = spm.SentencePieceProcessor(model_proto=proto)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_control(i) and not sp.is_unknown(i)]


def marian_directory(out: Path, multi30k: Path, *, separate_vocabs: bool = False, activation: str = "swish",
                     d_model: int = 32, layers: int = 2, extra_rows: int = 0, seed: int = 0,
                     tags: tuple[str, ...] = (), tied: bool = True) -> Path:
    """A random ``MarianMTModel`` en-de (or en into each of ``tags``) saved with its ``MarianTokenizer`` at ``out``.
    Its random ``final_logits_bias`` favours ``</s>`` (+6), so that outputs end on their own at various lengths: at a
    length limit transformers gives the forced ``</s>`` probability 1, mt (as fairseq) the model's."""
    source, target = marian_spm(captions(multi30k, "en"), 300), marian_spm(captions(multi30k, "de"), 320)
    out.mkdir(parents=True)
    (out / "source.spm").write_bytes(source)
    (out / "target.spm").write_bytes(target)

    def vocab(*protos: bytes) -> dict[str, int]:
        pieces = ["</s>", "<unk>", "<pad>"] if separate_vocabs else ["</s>", "<unk>"]  # <pad>: one id on both sides
        pieces += [f">>{tag}<<" for tag in tags]  # an OPUS-MT model of several targets: a tag a target language
        for proto in protos:
            pieces += [p for p in spm_pieces(proto) if p not in pieces]
        return {p: i for i, p in enumerate(pieces if separate_vocabs else [*pieces, "<pad>"])}

    src_vocab = vocab(source) if separate_vocabs else vocab(source, target)
    tgt_vocab = vocab(target) if separate_vocabs else src_vocab
    (out / "vocab.json").write_text(json.dumps(src_vocab), encoding="utf-8")
    if separate_vocabs:
        (out / "target_vocab.json").write_text(json.dumps(tgt_vocab), encoding="utf-8")
    tokenizer = transformers.MarianTokenizer(
        source_spm=str(out / "source.spm"), target_spm=str(out / "target.spm"), vocab=str(out / "vocab.json"),
        target_vocab_file=str(out / "target_vocab.json") if separate_vocabs else None,
        separate_vocabs=separate_vocabs, source_lang="en", target_lang="de",
    )
    pad = src_vocab["<pad>"]
    config = transformers.MarianConfig(
        vocab_size=len(src_vocab) + extra_rows,
        decoder_vocab_size=len(tgt_vocab) + extra_rows,
        share_encoder_decoder_embeddings=not separate_vocabs,
        d_model=d_model, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model, activation_function=activation, max_position_embeddings=128,
        scale_embedding=True, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad,
        forced_eos_token_id=0, dropout=0.0, tie_word_embeddings=tied,
    )
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():  # transformers' own init is small (std 0.02): wider weights give peaked distributions
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embed_positions" not in name:
                p.normal_(0.0, 0.3)
        model.final_logits_bias.normal_(0.0, 1.0)
        model.final_logits_bias[0, config.eos_token_id] += 6.0
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def marian_layout(exported: Path, out: Path, seed: int = 0) -> Path:
    """mt's own ``mt-export --to hf`` directory (a trained model: its outputs end on their own) laid out as
    OPUS-MT's are: ``</s>`` 0, ``<unk>`` 1, the pieces, then ``<pad>``, which decoding starts from (mt's ``<s>``
    row), and the embedding's rows past the vocabulary; a random ``final_logits_bias``. mt's own ``<pad>`` row
    is dropped, so the model scores one row fewer than mt's and must be reordered, masked and biased to import."""
    from safetensors.torch import load_file, save_file

    vocab = json.loads((exported / "vocab.json").read_text(encoding="utf-8"))
    pieces = sorted(vocab, key=vocab.__getitem__)  # mt's order: <pad> <unk> <s> </s> ...
    rows = json.loads((exported / "config.json").read_text())["vocab_size"]
    order = [3, 1, *range(4, len(pieces)), 2, *range(len(pieces), rows)]  # new row i = old row order[i]
    new_pieces = ["</s>", "<unk>", *pieces[4:], "<pad>"]
    out.mkdir(parents=True)
    for name in ("source.spm", "target.spm"):
        (out / name).write_bytes((exported / name).read_bytes())
    (out / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(new_pieces)}), encoding="utf-8")
    pad = len(new_pieces) - 1
    config = transformers.MarianConfig.from_pretrained(exported)
    config.update(dict(vocab_size=len(order), decoder_vocab_size=len(order), pad_token_id=pad, eos_token_id=0,
                       decoder_start_token_id=pad, forced_eos_token_id=0, bos_token_id=None))
    weights = load_file(exported / "model.safetensors")
    index = torch.tensor(order)
    torch.manual_seed(seed)
    state = {k: v[index] if k in ("model.shared.weight", "lm_head.weight") or "embed_tokens" in k else v
             for k, v in transformers.MarianMTModel.from_pretrained(exported).state_dict().items()}
    state["final_logits_bias"] = torch.randn(1, len(order)) * 0.1
    model = transformers.MarianMTModel(config)
    model.load_state_dict(state, strict=True)
    model.save_pretrained(out)
    saved = load_file(out / "model.safetensors")
    for key in ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"):
        saved[key] = weights[key]  # mt's (fairseq's) table: transformers' own save leaves it out
    save_file(saved, out / "model.safetensors", metadata={"format": "pt"})
    transformers.MarianTokenizer(source_spm=str(out / "source.spm"), target_spm=str(out / "target.spm"),
                                 vocab=str(out / "vocab.json"), source_lang="en", target_lang="de").save_pretrained(out)
    return out


def fairseq_spm(lines: list[str], vocab_size: int) -> bytes:
    """A SentencePiece BPE model as M2M-100's and NLLB's ``sentencepiece.bpe.model``: ``<unk> <s> </s>`` first."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, model_type="bpe", vocab_size=vocab_size,
        character_coverage=1.0, minloglevel=2, num_threads=1,
    )
    return model.getvalue()


NLLB_CODES = {"en": "eng_Latn", "de": "deu_Latn", "fr": "fra_Latn"}


def m2m100_directory(out: Path, multi30k: Path, *, nllb: bool = False, d_model: int = 32, layers: int = 2,
                     extra_rows: int = 8, std: float = 0.5, eos_bias: float = 8.0, scale_embedding: bool = True,
                     seed: int = 0, tied: bool = True) -> Path:
    """A random ``M2M100ForConditionalGeneration`` saved with its tokenizer at ``out``, one SentencePiece model for
    en, de and fr captions. M2M-100's layout (``nllb=False``): ``M2M100Tokenizer``'s ``vocab.json`` (fairseq's
    ``<s> <pad> </s> <unk>``, then the pieces in another order than SentencePiece's), its 100 language codes
    numbered after it and ``extra_rows`` rows past them (M2M-100's "madeup words"). NLLB's: ``NllbTokenizer``'s
    ``tokenizer.json`` (SentencePiece's ids + 1), the codes ``eng_Latn deu_Latn fra_Latn`` after the pieces, then
    ``<mask>``. The decoder's final norm and the ``</s>`` row are drawn so that ``</s>`` gets about ``eos_bias``
    more in the logits (M2M-100 has no ``final_logits_bias``): outputs end on their own at various lengths.
    ``tied=False``: an output projection (``lm_head``) apart from the one embedding the stacks share."""
    lines = [line for lang in ("en", "de", "fr") for line in captions(multi30k, lang, 1000)]
    proto = fairseq_spm(lines, 600)
    out.mkdir(parents=True)
    (out / "sentencepiece.bpe.model").write_bytes(proto)
    if nllb:
        tokenizer = nllb_tokenizer(out)
    else:
        pieces = spm_pieces(proto)
        order = torch.randperm(len(pieces), generator=torch.Generator().manual_seed(seed)).tolist()
        vocab = {p: i for i, p in enumerate(["<s>", "<pad>", "</s>", "<unk>", *(pieces[i] for i in order)])}
        (out / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
        tokenizer = transformers.M2M100Tokenizer(vocab_file=str(out / "vocab.json"),
                                                 spm_file=str(out / "sentencepiece.bpe.model"), src_lang="en",
                                                 tgt_lang="de")
    ids = len(tokenizer) if nllb else tokenizer.vocab_size + len(tokenizer.lang_code_to_id)  # (v5 counts no codes)
    config = transformers.M2M100Config(
        vocab_size=ids + extra_rows, d_model=d_model, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model, max_position_embeddings=128, dropout=0.0, attention_dropout=0.0,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, scale_embedding=scale_embedding,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(seed)
    model = transformers.M2M100ForConditionalGeneration(config).eval()
    with torch.no_grad():  # wider than transformers' init (std 0.02): peaked distributions
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, std)
            elif "layer_norm" in name:
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.2)
        if not tied:  # the stacks read the shared embedding (transformers 4 ties them whatever the config says)
            model.model.encoder.embed_tokens.weight.copy_(model.model.shared.weight)
            model.model.decoder.embed_tokens.weight.copy_(model.model.shared.weight)
        direction = torch.randn(d_model)
        model.model.decoder.layer_norm.bias.copy_(direction)
        model.get_output_embeddings().weight[config.eos_token_id] += direction * eos_bias / direction.norm() ** 2
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def nllb_tokenizer(out: Path):
    """``NllbTokenizer`` (tokenizers' BPE, converted from ``out``'s SentencePiece model) with the codes of
    ``NLLB_CODES``, renumbered as NLLB numbers them: the codes right after the pieces, then ``<mask>``."""
    tokenizer = transformers.NllbTokenizer.from_pretrained(out, additional_special_tokens=list(NLLB_CODES.values()),
                                                           src_lang="eng_Latn", tgt_lang="deu_Latn")
    tokenizer.save_pretrained(out)
    fast = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    added = fast["added_tokens"]
    first = min(t["id"] for t in added if t["content"] in [*NLLB_CODES.values(), "<mask>"])
    for i, token in enumerate(t for t in added if t["content"] in NLLB_CODES.values()):
        token["id"] = first + i
    next(t for t in added if t["content"] == "<mask>")["id"] = first + len(NLLB_CODES)
    fast["added_tokens"] = sorted(added, key=lambda t: t["id"])
    (out / "tokenizer.json").write_text(json.dumps(fast, ensure_ascii=False), encoding="utf-8")
    return transformers.NllbTokenizer.from_pretrained(out)
