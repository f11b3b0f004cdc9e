"""A decoding step of every decoder layer in C++ (``native_step.cpp``), for small models on a CPU.

A small model's cached step is mostly the dispatch of its many small operator calls (~58 a layer for
``transformer_mini``), not arithmetic. ``NativeSteps`` runs the decoder layers of a one-token step as one
C++ call that makes one ATen call a linear and does the norms, residuals, activation, cache write and both
attentions in loops of its own. The embedding, the final norm and the output projection stay in Python.

The extension is compiled on first use by ``torch.utils.cpp_extension`` (a C++ compiler and Python's
headers needed; about a minute, then cached per CPU) and ``load_native`` returns None, with the reason,
where it cannot be built: decoding then runs the Python step. ``unsupported(decoder)`` names the options
the C++ step does not cover (``Decoder.forward`` falls back to the Python step for them), and
``NativeSteps.takes`` the calls it does not take (the first call of a cache, several tokens a row). Greedy
search, sampling and beam search (a beam store's slots, read through its slot table) all run it. Its sums run in
another order than ATen's: hidden states within ~1e-5 of the Python step's.
"""

from __future__ import annotations

import hashlib
import sys
import warnings
from functools import cache
from pathlib import Path

import torch
from torch import Tensor, nn

from mt.model.cache import EncoderOut, LayerStep, additive_mask

SOURCES = tuple(Path(__file__).with_name(name) for name in ("native_step.cpp", "native_search.cpp"))
HEADER = Path(__file__).with_name("native.h")
DECODER_PARTS = ("self_attn.qkv", "self_attn.out", "self_attn_res.norm", "cross_attn.q", "cross_attn.out",
                 "cross_attn_res.norm", "ffn.fc1", "ffn.fc2", "ffn_res.norm")
ENCODER_PARTS = ("self_attn.qkv", "self_attn.out", "self_attn_res.norm", "ffn.fc1", "ffn.fc2", "ffn_res.norm")
ACTIVATION_CODES = {nn.ReLU: 0, nn.SiLU: 1, nn.GELU: 2}  # the C++ code's (``Activation`` in native_step.cpp)


def parts_of(stack: nn.Module) -> tuple[str, ...]:
    """The parts the C++ code reads of each layer of ``stack`` (an ``Encoder`` or a ``Decoder``)."""
    return DECODER_PARTS if hasattr(stack.layers[0], "cross_attn") else ENCODER_PARTS


def activation_code(ffn: nn.Module) -> int | None:
    """The C++ code's number for a ``FeedForward``'s activation: ReLU 0, SiLU 1, GELU (erf form) 2; None for
    those it does not cover (SwiGLU's gate, GELU's tanh approximation)."""
    if ffn.gate is not None or getattr(ffn.activation, "approximate", "none") != "none":
        return None
    return ACTIVATION_CODES.get(type(ffn.activation))


def unsupported(stack: nn.Module) -> str | None:
    """What of ``stack`` (an ``mt.model`` ``Encoder`` or ``Decoder``) the C++ code does not cover (None: it
    covers it). It covers float32 unpacked linears, fused QKV attention (no grouped-query attention) without
    qk-norm, a ReLU, SiLU or GELU (erf form) feed-forward, LayerNorm or RMSNorm, Post-LN or Pre-LN, any
    positions; the C++ searches add the decoder's logits bias (if any) too."""
    layer = stack.layers[0]
    attn = layer.self_attn
    checks = {
        "qk-norm": attn.q_norm is not None,
        "grouped-query attention": not attn.fused,
        "SwiGLU": layer.ffn.gate is not None,
        "an activation other than ReLU, SiLU or GELU": layer.ffn.gate is None and activation_code(layer.ffn) is None,
    }
    if attn.fused:  # the parts the C++ code reads exist
        linears = [layer.get_submodule(name) for name in parts_of(stack) if not name.endswith("norm")]
        checks["packed or quantized linears"] = any(type(linear) is not nn.Linear for linear in linears)
        checks["weights other than float32"] = any(linear.weight.dtype != torch.float32 for linear in linears)
    found = [name for name, bad in checks.items() if bad]
    return ", ".join(found) or None


class LayerWeights:
    """The weights of a stack's layers made ready once for the C++ code (``prepare``), and the layers' shape."""

    def __init__(self, stack: nn.Module, native) -> None:
        if (why := unsupported(stack)) is not None:
            raise ValueError(f"the C++ decoding step does not cover {why}")
        tensors, transpose = [], []
        for layer in stack.layers:
            for name in parts_of(stack):
                module = layer.get_submodule(name)
                bias = getattr(module, "bias", None)
                tensors += [module.weight.detach(), bias.detach() if bias is not None else torch.empty(0)]
                transpose += [not name.endswith("norm"), False]
        self.native = native
        self.weights = native.prepare(tensors, transpose)
        first = stack.layers[0]
        self.heads = first.self_attn.heads
        self.pre_ln = first.self_attn_res.pre_ln
        self.eps = float(first.self_attn_res.norm.eps)
        self.activation = activation_code(first.ffn)  # the feed-forward's (ACTIVATION_CODES)
        rope = first.self_attn.rope  # its cos / sin tables (P, Dh / 2): the Python step's values
        self.rope: tuple[Tensor | None, Tensor | None] = (rope.cos, rope.sin) if rope is not None else (None, None)

    def rope_covers(self, positions: int) -> bool:
        """Whether the rotary tables (if any) hold positions ``0 .. positions - 1``."""
        cos = self.rope[0]
        return cos is None or positions <= cos.size(0)


@cache
def load_native():
    """The compiled extension, or None (with a warning giving the reason) where it cannot be built."""
    try:
        from torch.utils.cpp_extension import _get_build_directory, load

        name = f"mt_native_step_{_cpu_tag()}"
        if not any(Path(_get_build_directory(name, verbose=False)).glob(f"{name}*.so")):
            print("building the C++ decoding step (once for this CPU, about 20 s) ...", file=sys.stderr, flush=True)
        return load(name, [str(source) for source in SOURCES], extra_cflags=["-O3", "-march=native", "-fopenmp"],
                    extra_include_paths=[str(HEADER.parent)], verbose=False)
    except Exception as e:  # no compiler, no headers, an unknown flag: decode with the Python step
        warnings.warn(f"the C++ decoding step could not be built ({type(e).__name__}: {str(e)[:200]}); "
                      "decoding runs the Python step", stacklevel=2)
        return None


def _cpu_tag() -> str:
    """A short hash of this CPU's model and flags and of the source: ``-march=native`` code built on one CPU
    may not run on another, so each gets its own build in torch's extension cache."""
    info = ""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        info = "\n".join(sorted({line for line in lines if line.startswith(("model name", "flags"))}))
    except OSError:
        pass
    code = "".join(path.read_text() for path in (*SOURCES, HEADER))
    return hashlib.sha1((info + code).encode()).hexdigest()[:12]


def build_native(stack: nn.Module, kind: type[LayerWeights]) -> LayerWeights | str:
    """``kind`` (``NativeEncoder`` or ``NativeSteps``) made for ``stack``, or why not: options the C++ code does
    not cover, or no build of it."""
    if (why := unsupported(stack)) is not None:
        return f"the C++ code does not cover {why}"
    if (native := load_native()) is None:
        return "the C++ code could not be built"
    return kind(stack, native)


class NativeEncoder(LayerWeights):
    """Every encoder layer in C++, on ``encoder``'s weights (made ready once)."""

    def takes(self, x: Tensor) -> bool:
        """Whether the C++ code runs this call: float32 on a CPU, without autograd, within the rotary tables."""
        return (
            x.dtype == torch.float32
            and x.device.type == "cpu"
            and not torch.is_grad_enabled()
            and self.rope_covers(x.size(1))
        )

    def __call__(self, x: Tensor, src_pad_mask: Tensor) -> Tensor:
        """x (B, S, D) embedded; src_pad_mask (B, S), True = padding -> (B, S, D), before any final norm."""
        bias = additive_mask(src_pad_mask, torch.float32)  # (B, S)
        return self.native.encoder_layers(x.contiguous(), self.weights, bias, self.heads, self.pre_ln, self.eps,
                                          self.activation, *self.rope)


class NativeSteps(LayerWeights):
    """The decoder layers of a cached one-token step, in C++, on ``decoder``'s weights (made ready once)."""

    def __init__(self, decoder: nn.Module, native) -> None:
        super().__init__(decoder, native)
        self.move_rows = native.move_rows  # ``DecoderCache.move_rows``: a cache's row moves in one call

    def takes(self, x: Tensor, steps: list[LayerStep]) -> bool:
        """Whether this call is one the C++ step runs: float32 on a CPU, one token a row, every layer's source
        keys and self-attention buffers already made (not a cache's first call), within the rotary tables."""
        first = steps[0]
        return (
            x.size(1) == 1
            and x.dtype == torch.float32
            and x.device.type == "cpu"
            and not torch.is_grad_enabled()
            and first.kv.cross_k is not None
            and first.kv.self_attn.keys is not None
            and (first.group == 1 or first.slots is not None)
            and self.rope_covers(first.extent if first.at is not None else first.kv.self_attn.length + 1)
        )

    def __call__(self, x: Tensor, steps: list[LayerStep]) -> Tensor:
        """x (N, 1, D) embedded -> (N, 1, D) after the last layer (before any final norm); each layer's
        cache gains this step. N is the cache's rows x ``group`` (a beam store's beams)."""
        first = steps[0]
        if first.at is None:  # every row at the same step
            extent = first.kv.self_attn.length + 1
            at = torch.full((x.size(0) // first.group,), extent - 1, dtype=torch.long)
        else:
            at, extent = first.at, first.extent
        buffers = [step.kv.self_attn for step in steps]
        for buffer in buffers:
            buffer.reserve(extent)
        out = self.native.decoder_step(
            x.contiguous(), self.weights, [b.keys for b in buffers], [b.values for b in buffers], at, first.group,
            [s.kv.cross_k for s in steps], [s.kv.cross_v for s in steps], first.source_mask, self.heads,
            self.pre_ln, self.eps, self.activation, *self.rope, first.slots if first.group > 1 else None,
        )
        for buffer in buffers:
            buffer.length = extent
        return out

    def greedy(
        self, decoder: nn.Module, enc: EncoderOut, max_len: list[int], min_len: list[int], vocab_size: int | None,
        special: tuple[int, int, int], scores: bool, forced: list[int] | None = None,
    ) -> tuple[list[list[int]], list[float]] | None:
        """Greedy search of every row of ``enc`` with each step in C++ (``native_search.cpp``): each sentence's
        pieces (EOS excluded) and summed log-prob (0 without ``scores``); None where the C++ loop does not take
        the call (``search_takes``). Arguments as ``mt.decode.greedy`` has them; ``special``: PAD, BOS, EOS;
        ``forced``: each sentence's forced first token (-1: none), scored 0 and kept first in its pieces."""
        if not self.search_takes(decoder, enc, max(max_len, default=0) + 1):
            return None
        tokens, lengths, logprob = self.native.greedy_decode(
            *self._decoder_args(decoder), *self._batch_args(decoder, enc), max_len, min_len,
            -1 if vocab_size is None else vocab_size, list(special), scores, no_forced(forced, len(max_len)),
        )
        pieces = [row[:n] for row, n in zip(tokens.tolist(), lengths.tolist(), strict=True)]
        return pieces, logprob.tolist()

    def beam(
        self, decoder: nn.Module, enc: EncoderOut, max_len: list[int], min_len: list[int], vocab_size: int | None,
        special: tuple[int, int, int], beam: int, nbest: int, penalty: int, alpha: float, stopping: int,
        forced: list[int] | None = None,
    ) -> list[list[tuple[list[int], float]]] | None:
        """Beam search of every row of ``enc`` with each step in C++ (``native_search.cpp``): each sentence's
        finished hypotheses (at most ``beam``, in the order they finished) as (pieces, summed log-prob); None
        where the C++ loop does not take the call. ``penalty``: 0 none, 1 gnmt, 2 length; ``stopping``: 0 exact,
        1 topk_eos, 2 fairseq; ``forced`` as ``greedy`` takes it (``mt.decode.beam`` has the rest)."""
        steps = max(max_len, default=0) + 1
        if not self.search_takes(decoder, enc, steps) or decoder.embedding.token.num_embeddings < 2 * beam:
            return None
        return self.native.beam_decode(
            *self._decoder_args(decoder), *self._batch_args(decoder, enc), max_len, min_len,
            -1 if vocab_size is None else vocab_size, list(special), beam, nbest, penalty, alpha, stopping,
            no_forced(forced, len(max_len)),
        )

    def _decoder_args(self, decoder: nn.Module) -> tuple:
        """The decoder's part of the C++ searches' arguments (``MT_DECODER_ARGS`` in ``native.h``)."""
        embedding, packed = decoder.embedding, decoder.output_packed is not None
        return (
            self.weights, self.heads, self.pre_ln, self.eps, self.activation, *self.rope,
            embedding.token.weight.detach(), embedding.scale, positions_table(embedding.positions),
            *norm_parameters(decoder.final_norm), decoder.output_packed if packed else decoder.output_weight.detach(),
            packed, decoder.logits_bias,
        )

    @staticmethod
    def _batch_args(decoder: nn.Module, enc: EncoderOut) -> tuple[list[Tensor], list[Tensor], Tensor]:
        """Each layer's source keys and values (B, H, S, Dh) and the source mask (B, 1, 1, S), made for the call
        (which overwrites them)."""
        cross = decoder.source_keys(enc.out)  # per layer, contiguous
        mask = additive_mask(enc.pad_mask, torch.float32)[:, None, None, :]
        return [k for k, _ in cross], [v for _, v in cross], mask

    def search_takes(self, decoder: nn.Module, enc: EncoderOut, steps: int) -> bool:
        """Whether the C++ searches run a search of ``steps`` steps at most: float32 on a CPU, in eval mode
        without autograd, a float32 output projection and logits bias (if any), position tables covering the
        steps."""
        packed, bias = decoder.output_packed, decoder.logits_bias
        table = positions_table(decoder.embedding.positions)
        return (
            enc.out.dtype == torch.float32
            and enc.out.device.type == "cpu"
            and not torch.is_grad_enabled()
            and not decoder.training
            and decoder.fast_steps
            and (bias is None or bias.dtype == torch.float32)
            and decoder.embedding.token.weight.dtype == torch.float32
            and (packed is None or (isinstance(packed, Tensor) and packed.dtype == torch.float32))
            and (table is None or table.size(0) >= steps)
            and self.rope_covers(steps)
        )


def no_forced(forced: list[int] | None, n: int) -> list[int]:
    """The C++ searches' forced first tokens: ``forced``, or -1 (none) for each of ``n`` sentences."""
    return [-1] * n if forced is None else list(forced)


def positions_table(positions: nn.Module | None) -> Tensor | None:
    """The (P, D) table an embedding adds for positions 0 .. P - 1 (sinusoidal or learned), None without one."""
    if positions is None:
        return None
    table = positions.table if hasattr(positions, "table") else positions.embedding.weight
    return table.detach()


def norm_parameters(norm: nn.Module | None) -> tuple[Tensor | None, Tensor | None, float]:
    """A final norm's gain, shift (None: RMSNorm) and eps; (None, None, 0) without a final norm (Post-LN)."""
    if norm is None:
        return None, None, 0.0
    shift = getattr(norm, "bias", None)
    return norm.weight.detach(), None if shift is None else shift.detach(), float(norm.eps)
