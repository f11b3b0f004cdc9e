// scripts/bench_native_step.py's decoder step: mt's cached decoder layers (DecoderLayer.step) for one new token a
// row, as the same ATen calls in the same order from C++ (no Python between them), to measure what the Python of a
// step costs. It covers what that script checks: plain float32 linears (a small model's, not packed), fused QKV,
// LayerNorm, ReLU, Post-LN or Pre-LN, no RoPE or qk-norm, one K/V head per head, every row at the same step.
// ATen and torch's pybind11 casters only, not <torch/extension.h> (all of libtorch's C++ API): half the compile time
#include <ATen/ATen.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <cmath>
#include <vector>

using at::Tensor;

static Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const c10::optional<Tensor>& mask) {
  // q (N, H, 1, Dh); k, v (N, H, L, Dh) -> (N, H, 1, Dh), as attend_by_bmm
  auto rows = q.size(0), heads = q.size(1), queries = q.size(2), head_dim = q.size(3), keys = k.size(2);
  auto flat_q = q.reshape({rows * heads, queries, head_dim});
  auto scores = at::bmm(flat_q, k.reshape({rows * heads, keys, head_dim}).transpose(1, 2));
  scores = scores.mul_(1.0 / std::sqrt((double)head_dim)).view({rows, heads, queries, keys});
  if (mask.has_value()) scores = scores + *mask;
  auto weights = at::softmax(scores, -1);
  auto out = at::bmm(weights.view({rows * heads, queries, keys}), v.reshape({rows * heads, keys, head_dim}));
  return out.view({rows, heads, queries, head_dim});
}

// mt.model.layers.Residual.close around sublayer(input): Post-LN LN(x + out), Pre-LN x + out
static Tensor residual(const Tensor& x, const Tensor& out, const Tensor& gain, const Tensor& shift, bool pre_ln) {
  return pre_ln ? x + out : at::layer_norm(x + out, {x.size(2)}, gain, shift, 1e-5);
}

static Tensor sublayer_input(const Tensor& x, const Tensor& gain, const Tensor& shift, bool pre_ln) {
  return pre_ln ? at::layer_norm(x, {x.size(2)}, gain, shift, 1e-5) : x;
}

// x (N, 1, D) embedded; w: 18 tensors a layer (qkv w, b; out w, b; norm 1 gain, shift; cross q w, b; cross out w, b;
// norm 2; fc1 w, b; fc2 w, b; norm 3); self_k/self_v: each layer's KVBuffer (N, H, capacity, 1, Dh), ``length``
// steps valid; cross_k/cross_v (N, H, S, Dh); source_mask (N, 1, 1, S) additive -> (N, 1, D) before any final norm.
Tensor decoder_step(Tensor x, const std::vector<Tensor>& w, const std::vector<Tensor>& self_k,
                    const std::vector<Tensor>& self_v, int64_t length, const std::vector<Tensor>& cross_k,
                    const std::vector<Tensor>& cross_v, const Tensor& source_mask, int64_t heads, bool pre_ln) {
  auto n = x.size(0), d = x.size(2), dh = d / heads;
  for (size_t l = 0; l < self_k.size(); ++l) {
    const Tensor* p = &w[18 * l];
    auto h = sublayer_input(x, p[4], p[5], pre_ln);
    auto qkv = at::linear(h, p[0], p[1]).view({n, 1, 3, heads, dh}).permute({2, 0, 3, 1, 4}).unbind(0);
    for (int j = 0; j < 2; ++j) {  // KVBuffer.append: this step's keys and values after the valid ones
      const Tensor& store = j == 0 ? self_k[l] : self_v[l];
      store.slice(2, length, length + 1).copy_(qkv[1 + j].view({n, 1, heads, 1, dh}).permute({0, 2, 3, 1, 4}));
    }
    auto keys = self_k[l].slice(2, 0, length + 1).flatten(2, 3);
    auto values = self_v[l].slice(2, 0, length + 1).flatten(2, 3);
    auto a = attend(qkv[0], keys, values, c10::nullopt).view({n, 1, d});
    x = residual(x, at::linear(a, p[2], p[3]), p[4], p[5], pre_ln);
    h = sublayer_input(x, p[10], p[11], pre_ln);
    auto q = at::linear(h, p[6], p[7]).view({n, 1, heads, dh}).transpose(1, 2);
    auto c = attend(q, cross_k[l], cross_v[l], source_mask).view({n, 1, d});
    x = residual(x, at::linear(c, p[8], p[9]), p[10], p[11], pre_ln);
    h = at::relu(at::linear(sublayer_input(x, p[16], p[17], pre_ln), p[12], p[13]));
    x = residual(x, at::linear(h, p[14], p[15]), p[16], p[17], pre_ln);
  }
  return x;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("decoder_step", &decoder_step); }
