// mt.model.native: one cached decoding step of every decoder layer, one new token a row, in C++.
//
// The same computation as DecoderLayer.step (self-attention over the row's cached steps, encoder-decoder
// attention, the feed-forward network, each in its residual with LayerNorm or RMSNorm, Post-LN or Pre-LN),
// with one ATen call for each linear (a matrix product into a preallocated output; a few rows: linear_into's
// loops) and everything else -- the norms, residuals, activation, the cache write, both attentions of the one
// query -- as loops of its own: a step makes 6 operator calls a layer instead of ~58. Sums run in another order than
// ATen's, so hidden states differ from the Python step's in the last bits (tested within 1e-4).
//
// Coverage (mt.model.native.unsupported names the rest): float32, fused QKV (kv_heads == heads), no qk-norm,
// ReLU, SiLU or (erf) GELU, with or without rotary positions. Cache rows hold `group` decoder rows each: 1 (greedy,
// sampling), or a beam store's beams, one slot each (mt.model.beam_cache), whose slot table says which slot of each
// step a beam reads. The encoder's layers run the same way (encoder_layers).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#ifdef __AVX2__
#include <immintrin.h>
#endif
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "native.h"

using at::Tensor;

namespace {

constexpr int kPerLayer = 18;  // qkv w, b; out w, b; norm 1 w, b; q w, b; out w, b; norm 2; fc1 w, b; fc2 w, b; norm 3

// exp(x) for x <= 0 (scores minus their maximum), written so that loops over it vectorise: 2^n e^r with
// x = n ln 2 + r, |r| <= ln 2 / 2, and Cephes' degree-7 polynomial for e^r (relative error ~1e-7); 0 below -87.3
// (and at -inf).
inline float exp_nonpositive(float x) {
  const float clamped = std::max(x, -87.3f);
  const float n = std::floor(clamped * 1.44269504088896341f + 0.5f);
  float r = clamped - n * 0.693359375f;  // ln 2 in two parts, for an exact first product
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < -87.3f ? 0.f : p * scale;
}

// The feed-forward activations (mt.model.native.ACTIVATION_CODES), as ATen's vectorised CPU kernels compute
// them: SiLU x / (1 + exp(-x)), GELU x (1 + erf(x / sqrt 2)) / 2 with erf as Abramowitz and Stegun 7.1.26 (absolute
// error ~1.5e-7); exp by exp_nonpositive, so that the loops vectorise.
enum Activation : int64_t { kRelu = 0, kSilu = 1, kGelu = 2 };

inline float silu(float x) {
  const float e = exp_nonpositive(-std::abs(x));  // exp(-|x|)
  return (x >= 0.f ? x : x * e) / (1.f + e);
}

inline float gelu(float x) {
  const float z = std::abs(x) * 0.70710678118654752f, t = 1.f / (1.f + 0.3275911f * z);
  const float r = (((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f;
  const float erf = 1.f - r * t * exp_nonpositive(-z * z);  // erf(|x| / sqrt 2)
  return 0.5f * x * (1.f + (x >= 0.f ? erf : -erf));
}

// The activation `kind` in place on the n rows of F (n, d_ff), rows in parallel
void activate(float* F, int64_t n, int64_t d_ff, int64_t kind) {
  TORCH_CHECK(kind == kRelu || kind == kSilu || kind == kGelu, "activation: 0 ReLU, 1 SiLU, 2 GELU");
  at::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
    float* f = F + begin * d_ff;
    const int64_t count = (end - begin) * d_ff;
    if (kind == kRelu) {
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) f[i] = std::max(f[i], 0.f);
    } else if (kind == kSilu) {
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) f[i] = silu(f[i]);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) f[i] = gelu(f[i]);
    }
  });
}

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// scores[c] = q . k_(idx[c]) for `count` keys, key i at k + i * stride (dh floats each)
inline void dots(const float* q, const float* k, int64_t stride, const int32_t* idx, int64_t count, int64_t dh,
                 float* scores) {
  int64_t c = 0;
#ifdef __AVX2__
  if (dh % 8 == 0) {  // 8 keys at a time: 8 running sums, then one transposing reduction
    for (; c + 8 <= count; c += 8) {
      const float* key[8];
      __m256 s[8];
      for (int j = 0; j < 8; ++j) key[j] = k + idx[c + j] * stride, s[j] = _mm256_setzero_ps();
      for (int64_t e = 0; e < dh; e += 8) {
        const __m256 qv = _mm256_loadu_ps(q + e);
        for (int j = 0; j < 8; ++j) s[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(key[j] + e), s[j]);
      }
      const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(s[0], s[1]), _mm256_hadd_ps(s[2], s[3]));
      const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(s[4], s[5]), _mm256_hadd_ps(s[6], s[7]));
      _mm256_storeu_ps(scores + c,
                       _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31)));
    }
  }
#endif
  for (; c < count; ++c) scores[c] = dot(q, k + idx[c] * stride, dh);
}

// out (dh) = sum over c of w[c] * v_(idx[c])
inline void weighted_sum(const float* w, const float* v, int64_t stride, const int32_t* idx, int64_t count,
                         int64_t dh, float* out) {
#ifdef __AVX2__
  if (dh == 32) {  // the sum in four registers
    __m256 o0 = _mm256_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
    for (int64_t c = 0; c < count; ++c) {
      const __m256 wc = _mm256_set1_ps(w[c]);
      const float* vc = v + idx[c] * stride;
      o0 = _mm256_fmadd_ps(wc, _mm256_loadu_ps(vc), o0);
      o1 = _mm256_fmadd_ps(wc, _mm256_loadu_ps(vc + 8), o1);
      o2 = _mm256_fmadd_ps(wc, _mm256_loadu_ps(vc + 16), o2);
      o3 = _mm256_fmadd_ps(wc, _mm256_loadu_ps(vc + 24), o3);
    }
    _mm256_storeu_ps(out, o0), _mm256_storeu_ps(out + 8, o1), _mm256_storeu_ps(out + 16, o2);
    _mm256_storeu_ps(out + 24, o3);
    return;
  }
#endif
  std::fill(out, out + dh, 0.f);
  for (int64_t c = 0; c < count; ++c) {
    const float* vc = v + idx[c] * stride;
#pragma omp simd
    for (int64_t e = 0; e < dh; ++e) out[e] += w[c] * vc[e];
  }
}

// out (n, outs) = bias + x (n, in) . wt (in, outs), all contiguous float32. At most kFewRows rows, as vector loops of
// its own (a product of a few rows is mostly a BLAS call's fixed cost); more, one ATen addmm.
constexpr int64_t kFewRows = 4;
void linear_into(Tensor& out, const Tensor& bias, const Tensor& x, const Tensor& wt) {
  const int64_t n = x.size(0), in = wt.size(0), outs = wt.size(1);
  if (n > kFewRows) {
    at::addmm_out(out, bias, x, wt);
    return;
  }
  const float *X = x.data_ptr<float>(), *W = wt.data_ptr<float>(), *b = bias.data_ptr<float>();
  float* O = out.data_ptr<float>();
  for (int64_t r = 0; r < n; ++r) {
    float* o = O + r * outs;
    std::copy(b, b + outs, o);
    for (int64_t i = 0; i < in; ++i) {
      const float xi = X[r * in + i];
      const float* w = W + i * outs;
#pragma omp simd
      for (int64_t j = 0; j < outs; ++j) o[j] += xi * w[j];
    }
  }
}

// Per-thread scratch for attend_one: room for `keys` keys.
struct Scratch {
  std::vector<float> scores, bias;
  std::vector<int32_t> idx;
  explicit Scratch(int64_t keys) : scores(keys), bias(keys), idx(keys) {}
};

// One query q (dh) against the `count` keys idx[0 .. count): k, v point at key 0, key i at k + i * stride;
// `bias` (nullptr: none) adds a value to each. out (dh) = softmax(q.k / sqrt(dh) + bias) . v
void attend_keys(const float* q, const float* k, const float* v, int64_t stride, const int32_t* idx, int64_t count,
                 const float* bias, int64_t dh, float* out, Scratch& scratch) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  float* scores = scratch.scores.data();
  dots(q, k, stride, idx, count, dh, scores);
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < count; ++c)
    top = std::max(top, scores[c] = bias ? scores[c] * scale + bias[c] : scores[c] * scale);
  float total = 0.f;
#pragma omp simd reduction(+ : total)
  for (int64_t c = 0; c < count; ++c) total += (scores[c] = exp_nonpositive(scores[c] - top));
  const float inv = 1.f / total;
  for (int64_t c = 0; c < count; ++c) scores[c] *= inv;
  weighted_sum(scores, v, stride, idx, count, dh, out);
}

// One query q (dh) against `keys` keys: k, v point at key 0, key i at k + i * stride; `bias` (nullptr: none)
// adds a value a key (a mask: 0 or -inf; a -inf key is not read). out (dh) = softmax(q.k / sqrt(dh) + bias) . v
void attend_one(const float* q, const float* k, const float* v, int64_t stride, int64_t keys, int64_t dh,
                const float* bias, int64_t bias_stride, float* out, Scratch& scratch) {
  const float blocked = -std::numeric_limits<float>::infinity();
  int32_t* idx = scratch.idx.data();
  int64_t count = 0;  // the keys read: all, or those the mask allows
  for (int64_t i = 0; i < keys; ++i) {
    const float b = bias ? bias[i * bias_stride] : 0.f;
    if (b == blocked) continue;
    scratch.bias[count] = b;
    idx[count++] = static_cast<int32_t>(i);
  }
  attend_keys(q, k, v, stride, idx, count, bias ? scratch.bias.data() : nullptr, dh, out, scratch);
}

struct Norm {
  const float* gain;
  const float* shift;  // nullptr: RMSNorm
  float eps;

  // out (d) = norm(a + b) (b nullptr: norm(a)); out may alias a
  void apply(const float* a, const float* b, float* out, int64_t d, float* tmp) const {
    float mean = 0.f;
    for (int64_t i = 0; i < d; ++i) tmp[i] = a[i] + (b ? b[i] : 0.f);
    if (shift) {
      for (int64_t i = 0; i < d; ++i) mean += tmp[i];
      mean /= d;
    }
    float var = 0.f;
    for (int64_t i = 0; i < d; ++i) var += (tmp[i] - mean) * (tmp[i] - mean);
    const float inv = 1.f / std::sqrt(var / d + eps);
    for (int64_t i = 0; i < d; ++i) out[i] = (tmp[i] - mean) * inv * gain[i] + (shift ? shift[i] : 0.f);
  }
};

Norm norm_of(const Tensor* p, double eps) {
  return {p[0].data_ptr<float>(), p[1].defined() && p[1].numel() ? p[1].data_ptr<float>() : nullptr,
          static_cast<float>(eps)};
}

// Rotary positions (mt.model.rope): x (dh) at `position`, rotated in place as [x1 cos - x2 sin | x2 cos + x1 sin]
// with the model's tables cos, sin (P, dh / 2) (nullptr: no rotary positions).
struct Rope {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t positions = 0;

  void rotate(float* x, int64_t position, int64_t dh) const {
    const int64_t half = dh / 2;
    const float *c = cos + position * half, *s = sin + position * half;
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = x[i], x2 = x[i + half];
      x[i] = x1 * c[i] - x2 * s[i];
      x[i + half] = x2 * c[i] + x1 * s[i];
    }
  }
};

Rope rope_of(const c10::optional<Tensor>& cos, const c10::optional<Tensor>& sin, int64_t dh) {
  if (!cos.has_value()) return {};
  TORCH_CHECK(sin.has_value() && cos->scalar_type() == at::kFloat && sin->scalar_type() == at::kFloat &&
                  cos->is_contiguous() && sin->is_contiguous() && cos->dim() == 2 && cos->size(1) * 2 == dh &&
                  cos->sizes() == sin->sizes(),
              "rope tables: contiguous float32 (P, Dh / 2), cos and sin");
  return {cos->data_ptr<float>(), sin->data_ptr<float>(), cos->size(0)};
}

// The residual stream X (n, d) of a stack's rows around each sublayer, whose input is Hp and output O.
struct Residuals {
  float* X;
  float* Hp;
  const float* O;
  int64_t n, d;
  bool pre_ln;
  std::vector<float> tmp;

  // Pre-LN: Hp = norm(X); Post-LN: Hp = X
  void sublayer_input(const Norm& norm) {
    for (int64_t r = 0; r < n; ++r) {
      if (pre_ln) norm.apply(X + r * d, nullptr, Hp + r * d, d, tmp.data());
      else std::copy(X + r * d, X + (r + 1) * d, Hp + r * d);
    }
  }

  // Pre-LN: X += O; Post-LN: X = norm(X + O)
  void close(const Norm& norm) {
    for (int64_t r = 0; r < n; ++r) {
      if (pre_ln) for (int64_t i = 0; i < d; ++i) X[r * d + i] += O[r * d + i];
      else norm.apply(X + r * d, O + r * d, X + r * d, d, tmp.data());
    }
  }
};

void check_kv(const Tensor& t, const char* what) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.stride(-1) == 1, what, ": float32 with contiguous head vectors");
}

}  // namespace

// The layers' tensors made ready once: the linears' weights (transpose[i]) transposed to (in, out) and
// contiguous; biases and norm parameters contiguous (an undefined or empty norm shift: RMSNorm).
std::vector<Tensor> prepare(const std::vector<Tensor>& w, const std::vector<bool>& transpose) {
  TORCH_CHECK(w.size() == transpose.size(), "one transpose flag a tensor");
  std::vector<Tensor> out;
  for (size_t i = 0; i < w.size(); ++i) {
    if (!w[i].defined() || w[i].numel() == 0) {
      out.push_back(at::empty({0}, at::kFloat));
      continue;
    }
    TORCH_CHECK(w[i].scalar_type() == at::kFloat, "the native step takes float32 weights");
    out.push_back(transpose[i] ? w[i].t().contiguous() : w[i].contiguous());
  }
  return out;
}

// The encoder's layers (EncoderLayer.forward in inference): x (B, S, D) embedded; w: prepare()'s tensors, 12 a
// layer (qkv w, b; out w, b; norm 1 w, b; fc1 w, b; fc2 w, b; norm 2 w, b); pad_bias (B, S) additive (0, or -inf
// at padding); activation: the feed-forward's (0 ReLU, 1 SiLU, 2 GELU). -> (B, S, D), before any final norm.
// Every position attends to its sentence's tokens.
Tensor encoder_layers(const Tensor& x, const std::vector<Tensor>& w, const Tensor& pad_bias, int64_t heads,
                      bool pre_ln, double eps, int64_t activation, const c10::optional<Tensor>& rope_cos,
                      const c10::optional<Tensor>& rope_sin) {
  constexpr int64_t kEncoderPerLayer = 12;
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.dim() == 3, "x: float32 (B, S, D)");
  TORCH_CHECK(w.size() % kEncoderPerLayer == 0, "12 tensors a layer");
  const int64_t b = x.size(0), len = x.size(1), d = x.size(2), n = b * len, dh = d / heads;
  const int64_t layers = w.size() / kEncoderPerLayer, d_ff = w[6].size(1);
  const Tensor bias = pad_bias.to(at::kFloat).contiguous();
  TORCH_CHECK(bias.size(0) == b && bias.size(1) == len, "pad_bias: (B, S)");
  const Rope rope = rope_of(rope_cos, rope_sin, dh);
  TORCH_CHECK(!rope.cos || len <= rope.positions, "rope tables shorter than the source");
  const auto opts = x.options();
  Tensor xs = x.reshape({n, d}).clone();  // (B*S, D) the residual stream
  Tensor h = at::empty({n, d}, opts), qkv = at::empty({n, 3 * d}, opts), a = at::empty({n, d}, opts);
  Tensor o = at::empty({n, d}, opts), f = at::empty({n, d_ff}, opts);
  float *X = xs.data_ptr<float>(), *Hp = h.data_ptr<float>(), *QKV = qkv.data_ptr<float>();
  float *A = a.data_ptr<float>(), *O = o.data_ptr<float>(), *F = f.data_ptr<float>();
  const float* B = bias.data_ptr<float>();
  Residuals res{X, Hp, O, n, d, pre_ln, std::vector<float>(d)};
  for (int64_t l = 0; l < layers; ++l) {
    const Tensor* p = &w[kEncoderPerLayer * l];
    const Norm norm1 = norm_of(p + 4, eps), norm2 = norm_of(p + 10, eps);
    res.sublayer_input(norm1);
    at::addmm_out(qkv, p[1], h, p[0]);  // (B*S, 3D)
    if (rope.cos)  // every query and key at its position, before any query reads the keys
      at::parallel_for(0, n, 64, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r)
          for (int64_t hd = 0; hd < heads; ++hd) {
            rope.rotate(QKV + r * 3 * d + hd * dh, r % len, dh);
            rope.rotate(QKV + r * 3 * d + d + hd * dh, r % len, dh);
          }
      });
    at::parallel_for(0, n * heads, 16, [&](int64_t begin, int64_t end) {
      Scratch scratch(len);
      for (int64_t i = begin; i < end; ++i) {
        const int64_t r = i / heads, hd = i % heads, sentence = r / len;
        const float* keys = QKV + sentence * len * 3 * d + d + hd * dh;  // position 0's key; a row of 3D each
        attend_one(QKV + r * 3 * d + hd * dh, keys, keys + d, 3 * d, len, dh, B + sentence * len, 1,
                   A + r * d + hd * dh, scratch);
      }
    });
    at::addmm_out(o, p[3], a, p[2]);
    res.close(norm1);
    res.sublayer_input(norm2);
    at::addmm_out(f, p[7], h, p[6]);  // (B*S, d_ff)
    activate(F, n, d_ff, activation);
    at::addmm_out(o, p[9], f, p[8]);
    res.close(norm2);
  }
  return xs.view({b, len, d});
}

// x (N, 1, D): the embedded new tokens, N = cache rows x group; w: prepare()'s tensors; self_k / self_v: each
// layer's KVBuffer store (N / group, H, capacity, group, Dh); at (N / group,) int64: the step each cache row
// writes (row r = c * group + j writes slot j of cache row c), and row r attends to its steps 0 .. at[c]: with
// group 1 to its own, with more to slot self_slots[r, t] of each step t (int32 (N, >= at + 1), needed then: the
// beam store's slot table); cross_k / cross_v (N / group, H, S, Dh); source_mask (N / group, 1, 1, S) additive;
// activation as encoder_layers takes it. -> (N, 1, D), before any final norm. Writes each layer's new keys and
// values into the stores.
Tensor decoder_step(const Tensor& x, const std::vector<Tensor>& w, const std::vector<Tensor>& self_k,
                    const std::vector<Tensor>& self_v, const Tensor& at, int64_t group,
                    const std::vector<Tensor>& cross_k,
                    const std::vector<Tensor>& cross_v, const Tensor& source_mask, int64_t heads, bool pre_ln,
                    double eps, int64_t activation, const c10::optional<Tensor>& rope_cos,
                    const c10::optional<Tensor>& rope_sin, const c10::optional<Tensor>& self_slots) {
  const int64_t n = x.size(0), d = x.size(2), dh = d / heads, layers = self_k.size();
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.size(1) == 1, "x: float32 (N, 1, D)");
  TORCH_CHECK(group >= 1 && n % group == 0, "rows: cache rows x group");
  TORCH_CHECK(static_cast<int64_t>(w.size()) == kPerLayer * layers, "weights for ", layers, " layers");
  TORCH_CHECK(at.scalar_type() == at::kLong && at.numel() == n / group, "at: int64, one a cache row");
  TORCH_CHECK(source_mask.scalar_type() == at::kFloat, "source_mask: float32");
  const bool slots = group > 1;
  const Rope rope = rope_of(rope_cos, rope_sin, dh);
  TORCH_CHECK(!slots || (self_slots.has_value() && self_slots->scalar_type() == at::kInt &&
                         self_slots->is_contiguous() && self_slots->dim() == 2 && self_slots->size(0) >= n),
              "self_slots: contiguous int32 (N, capacity) for a group of several rows");
  const int64_t d_ff = w[12].size(1), src = cross_k.at(0).size(2);
  const auto opts = x.options();
  Tensor xs = x.reshape({n, d}).clone();  // (N, D) the residual stream
  Tensor h = at::empty({n, d}, opts), qkv = at::empty({n, 3 * d}, opts), a = at::empty({n, d}, opts);
  Tensor o = at::empty({n, d}, opts), f = at::empty({n, d_ff}, opts);
  float *X = xs.data_ptr<float>(), *Hp = h.data_ptr<float>(), *QKV = qkv.data_ptr<float>();
  float *A = a.data_ptr<float>(), *O = o.data_ptr<float>(), *F = f.data_ptr<float>();
  const int64_t* steps = at.contiguous().data_ptr<int64_t>();
  const float* mask = source_mask.data_ptr<float>();
  const int64_t mask_row = source_mask.stride(0), mask_key = source_mask.stride(3);
  int64_t most_keys = 0;  // keys a row attends to: its steps
  for (int64_t c = 0; c < n / group; ++c) most_keys = std::max(most_keys, steps[c] + 1);
  const int32_t* table = slots ? self_slots->data_ptr<int32_t>() : nullptr;
  const int64_t table_row = slots ? self_slots->size(1) : 0;
  TORCH_CHECK(!slots || most_keys <= table_row, "self_slots: a slot for every step");
  TORCH_CHECK(!rope.cos || most_keys <= rope.positions, "rope tables shorter than the output");

  Residuals res{X, Hp, O, n, d, pre_ln, std::vector<float>(d)};

  for (int64_t l = 0; l < layers; ++l) {
    const Tensor* p = &w[kPerLayer * l];
    const Norm norm1 = norm_of(p + 4, eps), norm2 = norm_of(p + 10, eps), norm3 = norm_of(p + 16, eps);
    const Tensor &sk = self_k[l], &sv = self_v[l], &ck = cross_k[l], &cv = cross_v[l];
    check_kv(sk, "self keys"), check_kv(sv, "self values"), check_kv(ck, "source keys"), check_kv(cv, "source values");
    TORCH_CHECK(sk.dim() == 5 && sk.size(3) == group && sk.size(2) >= most_keys &&
                    sk.stride(2) == group * sk.stride(3) && sk.strides() == sv.strides(),
                "self keys/values: (N / group, H, capacity, group, Dh), steps of group slots, the same layout");
    TORCH_CHECK(ck.strides() == cv.strides() && ck.size(2) == src, "source keys/values: the same layout");

    // self-attention: this step's keys and values into the cache, one query over the row's steps
    res.sublayer_input(norm1);
    linear_into(qkv, p[1], h, p[0]);  // (N, 3D)
    float *K = sk.data_ptr<float>(), *V = sv.data_ptr<float>();
    const int64_t s0 = sk.stride(0), s1 = sk.stride(1), s2 = sk.stride(2), s3 = sk.stride(3);
    at::parallel_for(0, n * heads, 16, [&](int64_t begin, int64_t end) {
      Scratch scratch(most_keys);
      for (int64_t i = begin; i < end; ++i) {
        const int64_t r = i / heads, hd = i % heads, c = r / group, j = r % group, step = steps[c];
        float* row = QKV + r * 3 * d;
        if (rope.cos) {  // this step's query and key at the row's position (the cached keys are rotated)
          rope.rotate(row + hd * dh, step, dh);
          rope.rotate(row + d + hd * dh, step, dh);
        }
        float *k = K + c * s0 + hd * s1, *v = V + c * s0 + hd * s1;
        std::copy(row + d + hd * dh, row + d + (hd + 1) * dh, k + step * s2 + j * s3);
        std::copy(row + 2 * d + hd * dh, row + 2 * d + (hd + 1) * dh, v + step * s2 + j * s3);
        if (slots) {  // key t * group + slot: step t, the slot the row reads at step t
          int32_t* idx = scratch.idx.data();
          for (int64_t t = 0; t <= step; ++t) idx[t] = static_cast<int32_t>(t * group + table[r * table_row + t]);
          attend_keys(row + hd * dh, k, v, s3, idx, step + 1, nullptr, dh, A + r * d + hd * dh, scratch);
        } else
          attend_one(row + hd * dh, k, v, s2, step + 1, dh, nullptr, 0, A + r * d + hd * dh, scratch);
      }
    });
    linear_into(o, p[3], a, p[2]);
    res.close(norm1);

    // encoder-decoder attention over the source (O holds the queries)
    res.sublayer_input(norm2);
    linear_into(o, p[7], h, p[6]);
    const float *CK = ck.data_ptr<float>(), *CV = cv.data_ptr<float>();
    const int64_t c0 = ck.stride(0), c1 = ck.stride(1), c2 = ck.stride(2);
    at::parallel_for(0, n * heads, 16, [&](int64_t begin, int64_t end) {
      Scratch scratch(src);
      for (int64_t i = begin; i < end; ++i) {
        const int64_t r = i / heads, hd = i % heads, c = r / group;
        attend_one(O + r * d + hd * dh, CK + c * c0 + hd * c1, CV + c * c0 + hd * c1, c2, src, dh,
                   mask + c * mask_row, mask_key, A + r * d + hd * dh, scratch);
      }
    });
    linear_into(o, p[9], a, p[8]);
    res.close(norm2);

    // feed-forward
    res.sublayer_input(norm3);
    linear_into(f, p[13], h, p[12]);  // (N, d_ff)
    activate(F, n, d_ff, activation);
    linear_into(o, p[15], f, p[14]);
    res.close(norm3);
  }
  return xs.view({n, 1, d});
}

// A cache's row moves (mt.model.cache.select_rows_ with few rows moving) for all its stores in one call: in each
// store (rows, H, S, ...; float32, dims 2.. contiguous), rows to[m] take the first steps[i] entries of dim 2 of
// rows source[m], every head. All sources are read before any row is written.
void move_rows(const std::vector<Tensor>& stores, const std::vector<int64_t>& steps, const Tensor& to,
               const Tensor& source) {
  TORCH_CHECK(stores.size() == steps.size(), "one step count a store");
  TORCH_CHECK(to.scalar_type() == at::kLong && source.scalar_type() == at::kLong && to.numel() == source.numel(),
              "to, source: int64, as many");
  const Tensor to_c = to.contiguous(), source_c = source.contiguous();
  const int64_t* dst = to_c.data_ptr<int64_t>();
  const int64_t* src = source_c.data_ptr<int64_t>();
  const int64_t moves = to.numel();
  std::vector<float> held;
  for (size_t i = 0; i < stores.size(); ++i) {
    const Tensor& t = stores[i];
    TORCH_CHECK(t.scalar_type() == at::kFloat && t.dim() >= 3 && steps[i] <= t.size(2), "store ", i,
                ": float32 (rows, H, S, ...) with at least the steps moved");
    int64_t inner = 1;
    for (int64_t d = t.dim() - 1; d >= 2; --d) {
      TORCH_CHECK(t.stride(d) == inner, "store ", i, ": dims 2.. must be contiguous");
      inner *= t.size(d);
    }
    const int64_t heads = t.size(1), block = steps[i] * t.stride(2), rows = t.size(0);
    float* base = t.data_ptr<float>();
    held.resize(moves * heads * block);
    for (int64_t m = 0; m < moves; ++m) {
      TORCH_CHECK(0 <= src[m] && src[m] < rows && 0 <= dst[m] && dst[m] < rows, "row index out of range");
      for (int64_t h = 0; h < heads; ++h)
        std::copy_n(base + src[m] * t.stride(0) + h * t.stride(1), block, held.data() + (m * heads + h) * block);
    }
    for (int64_t m = 0; m < moves; ++m)
      for (int64_t h = 0; h < heads; ++h)
        std::copy_n(held.data() + (m * heads + h) * block, block, base + dst[m] * t.stride(0) + h * t.stride(1));
  }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("move_rows", &move_rows, "a cache's few row moves, every store in one call");
  m.def("prepare", &prepare, "the layers' tensors made ready for decoder_step");
  m.def("decoder_step", &decoder_step, "one cached step of every decoder layer");
  m.def("encoder_layers", &encoder_layers, "every encoder layer");
  m.def("greedy_decode", &greedy_decode, "greedy search of a batch, every step in C++");
  m.def("beam_decode", &beam_decode, "beam search of a batch, every step in C++");
}
