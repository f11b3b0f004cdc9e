"""Linears with their weights pre-packed for oneDNN: the CPU inference path of every projection.

On the x86 CPUs measured here (an AMD EPYC with AVX-512) ``F.linear`` in float32 runs MKL's sgemm,
which takes a slower code path on non-Intel CPUs; oneDNN (bundled with torch as ``mkldnn``) with the
weight reordered once into its blocked layout runs the same products 2-3x faster at the shapes of
decoding (64-1024 rows, d 128-2048; `docs/benchmarks.md`). The results equal ``F.linear``'s to
float32 rounding (the sums are ordered differently): tests compare translations of both paths.

``pack_linears_(model)`` turns every ``nn.Linear`` of an inference model into a ``PackedLinear``
(same parameters, same state dict, one packed copy of each weight) and packs the decoder's tied output
projection. Training never packs (a packed copy would go stale at the first update); in training mode
a ``PackedLinear`` runs ``F.linear``.

``pack_linears_(model, torch.bfloat16)`` packs bfloat16 copies instead (a CPU with bf16 instructions):
each product takes its input in bfloat16 and gives float32 back, so everything between the linears
(norms, softmax, residual sums, the search's log-probs) stays float32, as training's bf16 autocast.

``pack_linears_(model, torch.qint8)`` quantises every weight to int8 instead (symmetric, one scale per output
row) and packs it with its bias for fbgemm (torch's x86 int8 kernels): each product quantises its input to
7 bits on the fly (one scale per call, ``quantized::linear_dynamic``; ``INT8_REDUCE_RANGE``) and gives
float32 back; everything between the linears stays float32 as with bfloat16. Rows are not padded (the
padding below bounds oneDNN's kernel caches, which fbgemm does not use).

Small weights the other way round: oneDNN's packed product has a fixed cost of about 10-20 us a call, which
``F.linear`` does not pay (2 threads, an Intel Xeon with AVX-512: 128 -> 128 at 64 rows 16 against 29 us, at 8
rows 6 against 21 us), while from 512 x 512 up (and the output projection) oneDNN stays faster. So weights of
at most ``MKL_MAX_ENTRIES`` entries stay plain ``nn.Linear`` in float32 (``SMALL_WEIGHTS_ON_MKL``): a
``transformer_mini``'s layers. ``mt-translate`` of test2016 on it is 8% faster for that on the Intel Xeon; on
the AMD EPYC the decoding race's mt worker is 1.16x (greedy) and 1.24x (beam 4) faster (`docs/benchmarks.md`).

oneDNN builds a kernel for every input shape and keeps it in two caches (its primitive cache and ideep's,
1,024 entries each by default), about 0.5 MB a shape here. A server meets every row count from 1 to a few
thousand (its RSS grew from 427 to 1,252 MiB in a 10-minute soak), so a product runs its rows padded up to
one of a few sizes (``padded_rows``: multiples of 8 up to 64, then 8 sizes an octave, at most 1/8 more
rows): 56 row counts up to 4,096, so a served model builds its kernels in its warm-up (``mt-serve``'s fill
meets every size a decoder batch can) and then reuses them (soaks: `docs/benchmarks.md`). The caches are also
bounded to ``ONEDNN_CACHE_ENTRIES`` each before the first packed product (``packing_supported`` calls
``mt.kernel_cache.bound_kernel_caches``; the environment's own ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` /
``LRU_CACHE_CAPACITY`` win).
"""

from __future__ import annotations

import functools
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mt.kernel_cache import bound_kernel_caches

ONEDNN_CACHE_ENTRIES = 256
MKL_MAX_ENTRIES = 128 * 384  # float32 weights up to this size keep F.linear (module doc)
SMALL_WEIGHTS_ON_MKL = True  # pack_linears_'s default for keep_small (False: every weight packed)
# int8 products quantise their input to 7 bits, as torch's own dynamic quantisation does on x86: without
# VNNI, fbgemm's 8-bit x 8-bit products can saturate their 16-bit sums
INT8_REDUCE_RANGE = True

Packed = Tensor | torch.ScriptObject  # a oneDNN float32/bfloat16 weight, or fbgemm's int8 weight and bias


@functools.cache
def packing_supported() -> bool:
    """True when this torch has oneDNN's packed linear for CPU float32 and it agrees with ``F.linear``."""
    # before the probe below, oneDNN's first kernel in an inference process: the caches' size is read then
    bound_kernel_caches(ONEDNN_CACHE_ENTRIES, environment_wins=True)
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    try:
        gen = torch.Generator().manual_seed(0)
        w, x = torch.randn(24, 16, generator=gen), torch.randn(3, 16, generator=gen)
        got = packed_linear(x, pack_weight(w), None)
    except (RuntimeError, NotImplementedError):
        return False
    return torch.allclose(got, F.linear(x, w), atol=1e-5)


def int8_supported() -> bool:
    """This torch has fbgemm's dynamically quantised linear (its x86 builds) and the quantised tensors that
    pack it (deprecated since torch 2.13; a torch without them says no here, and ``--precision int8`` then
    says why)."""
    return (
        "fbgemm" in torch.backends.quantized.supported_engines
        and hasattr(torch.ops.quantized, "linear_dynamic")
        and hasattr(torch, "quantize_per_channel")
    )


def bf16_supported() -> bool:
    """This CPU has bfloat16 instructions oneDNN uses (AVX512-BF16 or AMX)."""
    return packing_supported() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def pack_weight(weight: Tensor, dtype: torch.dtype = torch.float32) -> Packed:
    """A (out, in) float32 CPU weight, as ``dtype``, reordered into oneDNN's layout (an opaque mkldnn tensor);
    for ``torch.qint8``, quantised and packed for fbgemm without a bias (``pack_int8``)."""
    if dtype == torch.qint8:
        return pack_int8(weight, None)
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(dtype))


def pack_int8(weight: Tensor, bias: Tensor | None) -> torch.ScriptObject:
    """``weight`` (out, in) quantised to int8 with one symmetric scale per output row (max |w| / 127) and
    packed, with the float32 ``bias`` (out,) if any, for ``quantized::linear_dynamic``."""
    w = weight.detach().float()
    scales = (w.abs().amax(dim=1) / 127).clamp_min(torch.finfo(torch.float32).tiny).double()  # (out,)
    zero_points = torch.zeros(w.size(0), dtype=torch.long)
    with warnings.catch_warnings():  # torch 2.13 warns that quantised tensors are deprecated, on every call
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*deprecated")
        qweight = torch.quantize_per_channel(w, scales, zero_points, 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(qweight, None if bias is None else bias.detach().float())


def padded_rows(rows: int) -> int:
    """The row count a product of ``rows`` rows runs at: a multiple of 8 up to 64, above that a multiple
    of an eighth of the power of two below (65 -> 72, 200 -> 208, 1000 -> 1024), so at most 1/8 more."""
    if rows <= 64:
        return -(-rows // 8) * 8
    step = 1 << (rows.bit_length() - 4)  # rows in [2^k, 2^(k+1)): step 2^(k-3)
    return -(-rows // step) * step


def packed_product(x: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
    """The oneDNN product itself, at whatever row count ``x`` (..., in) has: a kernel for each."""
    if packed.dtype == torch.float32:
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    return torch.ops.mkldnn._linear_pointwise(x.to(packed.dtype), packed, bias, "none", [], "").float()


def packed_linear(x: Tensor, packed: Packed, bias: Tensor | None) -> Tensor:
    """``F.linear(x, W, bias)`` with ``packed = pack_weight(W, dtype)``: float32 x (..., in) -> float32
    (..., out); for a bfloat16 ``packed`` (and ``bias``) the product runs in bfloat16. The rows run padded
    with zeros to ``padded_rows`` (each output row depends on its own input row only). An int8 ``packed``
    (``pack_int8``) holds its bias: ``bias`` is None then, and x is quantised per call, rows unpadded."""
    if not isinstance(packed, Tensor):
        return torch.ops.quantized.linear_dynamic(x, packed, reduce_range=INT8_REDUCE_RANGE)
    features = x.size(-1)
    rows = x.numel() // features if features else 0
    padding = padded_rows(rows) - rows
    if padding == 0:
        return packed_product(x, packed, bias)
    flat = F.pad(x.reshape(rows, features), (0, 0, 0, padding))  # (rows + padding, in)
    return packed_product(flat, packed, bias)[:rows].reshape(*x.shape[:-1], -1)  # (..., out)


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` that, in eval mode on float32 input, multiplies by its packed weight."""

    packed: Packed
    packed_bias: Tensor | None

    @classmethod
    def from_linear(cls, linear: nn.Linear, dtype: torch.dtype = torch.float32) -> PackedLinear:
        """The same module (parameters shared, not copied) with a packed ``dtype`` copy of its weight."""
        linear.__class__ = cls
        assert isinstance(linear, PackedLinear)
        # plain attributes, not in the state dict
        if dtype == torch.qint8:
            linear.packed, linear.packed_bias = pack_int8(linear.weight, linear.bias), None
        else:
            linear.packed = pack_weight(linear.weight, dtype)
            linear.packed_bias = None if linear.bias is None else linear.bias.detach().to(dtype)
        return linear

    def forward(self, x: Tensor) -> Tensor:
        if self.training or x.dtype != torch.float32:
            return F.linear(x, self.weight, self.bias)
        return packed_linear(x, self.packed, self.packed_bias)


def can_pack(model: nn.Module) -> bool:
    """Packing applies: oneDNN is there, and the model is float32 on the CPU."""
    first = next(model.parameters(), None)
    return first is not None and first.device.type == "cpu" and first.dtype == torch.float32 and packing_supported()


def pack_linears_(model: nn.Module, dtype: torch.dtype = torch.float32, *, keep_small: bool | None = None) -> int:
    """In place: every ``nn.Linear`` becomes a ``PackedLinear`` (weights packed as ``dtype``: float32,
    bfloat16 or int8 (``torch.qint8``)) and a decoder with an ``output_weight`` gets a packed output
    projection; eval mode. ``keep_small`` (default ``SMALL_WEIGHTS_ON_MKL``): in float32, linears of at most
    ``MKL_MAX_ENTRIES`` weights stay ``nn.Linear``. Returns how many weights were packed (0 when ``can_pack``
    says no: the model is left as it was, still correct). bfloat16 needs ``bf16_supported()``, int8 ``int8_supported()``
    (ValueError otherwise)."""
    if dtype not in (torch.float32, torch.bfloat16, torch.qint8):
        raise ValueError(f"linears are packed as float32, bfloat16 or int8, not {dtype}")
    if not can_pack(model):
        return 0
    if dtype == torch.bfloat16 and not bf16_supported():
        raise ValueError("bfloat16 linears need a CPU with bf16 instructions (AVX512-BF16 or AMX)")
    if dtype == torch.qint8 and not int8_supported():
        raise ValueError("int8 linears need torch's fbgemm kernels (an x86 CPU build of torch)")
    model.eval()
    keep_small = (SMALL_WEIGHTS_ON_MKL if keep_small is None else keep_small) and dtype == torch.float32
    count = 0
    for module in model.modules():
        if type(module) is nn.Linear and not (keep_small and module.weight.numel() <= MKL_MAX_ENTRIES):
            PackedLinear.from_linear(module, dtype)
            count += 1
    decoder = getattr(model, "decoder", None)
    if decoder is not None and hasattr(decoder, "pack_output"):
        decoder.pack_output(dtype)
        count += 1
    return count
