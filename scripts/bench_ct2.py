"""The same checkpoint in CTranslate2, for a same-machine comparison with ``scripts/bench_decode.py``.

    pip install ctranslate2          # not a dependency of mt; only this script needs it
    python scripts/bench_ct2.py --ckpt runs/bench_small/checkpoints/checkpoint_800.pt

Converts the checkpoint to a CTranslate2 float32 model (weights copied as they are, sinusoid table
included, so both run the very same network), then decodes Multi30k test2016 with beam 4 and greedy,
2 threads, batches of up to 64 sentences, and prints sentences/s and target tokens/s (median of
``--repeats`` runs, the timer around ``translate_batch`` only), as bench_decode does for mt.
It also prints how many outputs equal mt's, as a check of the conversion. What differs by design:
CTranslate2's length penalty is fairseq's ``|Y|^alpha`` (mt's default is GNMT's, and this script runs
mt with ``length`` to match), its stopping rule is its own, and its length limit is one number
(``--max-len``, default 100 > every test2016 source + 50).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

import torch

from mt.checkpoint import load_for_inference
from mt.data import read_lines
from mt.decode import Translator

DEFAULT_INPUT = Path(__file__).resolve().parents[2] / "shared/data/multi30k/test_2016_flickr.en.gz"


def to_ctranslate2(model: torch.nn.Module, vocab: list[str], heads: int, pre_ln: bool, out_dir: Path) -> None:
    """Write ``model`` (a Seq2SeqTransformer with one joint vocabulary) as a CTranslate2 model."""
    from ctranslate2.specs import common_spec, transformer_spec

    def arr(t: torch.Tensor):
        return t.detach().float().numpy().copy()

    def linear(spec, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        spec.weight = arr(weight)
        if bias is not None:
            spec.bias = arr(bias)

    def norm(spec, ln: torch.nn.LayerNorm) -> None:
        spec.gamma, spec.beta = arr(ln.weight), arr(ln.bias)

    def attention(spec, mha, self_attention: bool) -> None:
        if self_attention:  # one fused Q|K|V projection in both
            linear(spec.linear[0], mha.qkv.weight, mha.qkv.bias)
        else:  # Q, then fused K|V
            linear(spec.linear[0], mha.q.weight, mha.q.bias)
            linear(spec.linear[1], mha.kv.weight, mha.kv.bias)
        linear(spec.linear[-1], mha.out.weight, mha.out.bias)

    def ffn(spec, layer) -> None:
        norm(spec.layer_norm, layer.ffn_res.norm)
        linear(spec.linear_0, layer.ffn.fc1.weight, layer.ffn.fc1.bias)
        linear(spec.linear_1, layer.ffn.fc2.weight, layer.ffn.fc2.bias)

    def inputs(spec, stack) -> None:
        emb = stack.embedding
        (spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings).weight = arr(emb.token.weight)
        spec.scale_embeddings = True
        spec.position_encodings.encodings = arr(emb.positions.table)
        if stack.final_norm is not None:
            norm(spec.layer_norm, stack.final_norm)

    layers = (len(model.encoder.layers), len(model.decoder.layers))
    spec = transformer_spec.TransformerSpec.from_config(
        layers, heads, pre_norm=pre_ln, activation=common_spec.Activation.RELU
    )
    inputs(spec.encoder, model.encoder)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder.layers, strict=True):
        attention(layer_spec.self_attention, layer.self_attn, True)
        norm(layer_spec.self_attention.layer_norm, layer.self_attn_res.norm)
        ffn(layer_spec.ffn, layer)
    inputs(spec.decoder, model.decoder)
    linear(spec.decoder.projection, model.decoder.output_weight, None)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder.layers, strict=True):
        attention(layer_spec.self_attention, layer.self_attn, True)
        norm(layer_spec.self_attention.layer_norm, layer.self_attn_res.norm)
        attention(layer_spec.attention, layer.cross_attn, False)
        norm(layer_spec.attention.layer_norm, layer.cross_attn_res.norm)
        ffn(layer_spec.ffn, layer)
    spec.register_source_vocabulary(vocab)
    spec.register_target_vocabulary(vocab)
    spec.validate()
    spec.optimize(quantization=None)
    spec.save(str(out_dir))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", type=Path, required=True)
    p.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--max-len", type=int, default=100)
    p.add_argument("--max-sentences", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    try:
        import ctranslate2
    except ModuleNotFoundError:
        raise SystemExit("bench_ct2.py needs CTranslate2: pip install ctranslate2 (not a dependency of mt)") from None

    torch.set_num_threads(args.threads)
    model, tokenizers, cfg = load_for_inference(args.ckpt, "cpu")
    if not tokenizers.joint:
        raise SystemExit("this script converts models with one joint vocabulary")
    vocab = [tokenizers.tgt.id_to_piece(i) for i in range(model.decoder.output_weight.size(0))]
    lines = list(read_lines(args.input))
    sources = [[vocab[i] for i in tokenizers.src.encode(line)] + ["</s>"] for line in lines]

    with tempfile.TemporaryDirectory() as tmp:
        to_ctranslate2(model, vocab, cfg.model.heads, cfg.model.pre_ln, Path(tmp))
        ct2 = ctranslate2.Translator(tmp, device="cpu", compute_type="float32", intra_threads=args.threads)
        version = ctranslate2.__version__
        print(f"{len(lines)} sentences from {args.input}, {args.threads} threads, ctranslate2 {version}")
        results: dict[str, list[tuple[float, float]]] = {}
        for _ in range(args.repeats):
            for label, beam in ((f"beam{args.beam}", args.beam), ("greedy", 1)):
                start = time.perf_counter()
                out = ct2.translate_batch(
                    sources, max_batch_size=args.max_sentences, batch_type="examples", beam_size=beam,
                    length_penalty=args.alpha, max_decoding_length=args.max_len,
                )
                wall = time.perf_counter() - start
                tokens = sum(len(r.hypotheses[0]) + 1 for r in out)  # pieces + EOS, as bench_decode counts
                rate = f"{len(lines) / wall:.1f} sentences/s, {tokens / wall:.0f} target tokens/s"
                print(f"{label:>8}: {rate}", flush=True)
                results.setdefault(label, []).append((len(lines) / wall, tokens / wall))
                if beam == args.beam:
                    beam_out = out
        del ct2
    piece_id = {piece: i for i, piece in enumerate(vocab)}
    texts = [tokenizers.tgt.decode([piece_id[t] for t in r.hypotheses[0]]) for r in beam_out]
    # mt with the penalty CTranslate2 has, for the agreement check; after the timing, so that the two
    # libraries' OpenMP thread pools never spin at the same time
    decode = dataclasses.replace(
        cfg.decode, strategy="beam", beam_size=args.beam, nbest=1, length_penalty="length", alpha=args.alpha,
        max_sentences=args.max_sentences,
    )
    translator = Translator(model, tokenizers, decode, "cpu", max_positions=cfg.model.max_positions)
    start = time.perf_counter()
    ours = translator.translate(lines)
    wall = time.perf_counter() - start
    print(f"mt, same settings (beam {args.beam}, |Y|^{args.alpha}): {len(lines) / wall:.1f} sentences/s (1 run)")
    same = sum(a == b for a, b in zip(texts, ours, strict=True))
    print(f"beam outputs equal to mt's (length penalty 'length', alpha {args.alpha}): {same}/{len(lines)}")
    for label, runs in results.items():
        sents, toks = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        print(f"median {label}: {sents:.1f} sentences/s, {toks:.0f} target tokens/s ({len(runs)} runs)")


if __name__ == "__main__":
    main()
