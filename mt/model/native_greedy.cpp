// mt.model.native: greedy search of a batch with every step in C++ (one call a batch, no Python per step).
//
// The loop of mt.decode.greedy for a batch decoded whole: each step embeds the rows' last tokens, runs every
// decoder layer (decoder_step), the final norm and the output projection (the same ATen and oneDNN calls as the
// Python path, so the logits are the same), bans PAD, BOS and the ids past the tokenizer's vocabulary, forces EOS
// at a row's length limit and bans it before its minimum, and takes each row's first largest entry (of the logits,
// or with scores of the log-probs). Rows that produced EOS leave: the last rows move into their places
// (move_rows, mt.decode.common.fill_from_the_end), so the batch shrinks without copying its cache.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "native.h"

using at::Tensor;

namespace {

// mt.model.packed_linear.padded_rows: the row count a packed product runs at
int64_t padded_rows(int64_t rows) {
  if (rows <= 64) return (rows + 7) / 8 * 8;
  const int64_t bit_length = 64 - __builtin_clzll(static_cast<uint64_t>(rows));
  const int64_t step = int64_t{1} << (bit_length - 4);
  return (rows + step - 1) / step * step;
}

// The output projection as Decoder.project makes it: h (n, 1, D) -> logits (n, V). A packed weight runs
// mt.model.packed_linear.packed_linear's oneDNN call (rows padded with zeros), a plain one F.linear.
Tensor project(const Tensor& h, const Tensor& output, bool packed) {
  if (!packed) return at::linear(h, output).view({h.size(0), -1});
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  const int64_t rows = h.size(0), padding = padded_rows(rows) - rows;
  const Tensor x = padding ? at::constant_pad_nd(h.view({rows, -1}), {0, 0, 0, padding}, 0) : h;
  std::vector<c10::IValue> stack{x, output, c10::IValue(), std::string("none"),
                                 c10::List<c10::optional<at::Scalar>>(), std::string("")};
  op.callBoxed(&stack);
  return stack.at(0).toTensor().view({padded_rows(rows), -1}).narrow(0, 0, rows);
}

// x (n, D) = embedding[tokens[r]] * scale + positions[step] for the first n tokens (the Python step's two
// float32 operations, unfused)
__attribute__((optimize("fp-contract=off"))) void embed(const float* table, const float* positions,
                                                         const int64_t* tokens, int64_t n, int64_t step,
                                                         float scale, int64_t d, float* x) {
  for (int64_t r = 0; r < n; ++r) {
    const float* e = table + tokens[r] * d;
    float* out = x + r * d;
    for (int64_t i = 0; i < d; ++i) out[i] = e[i] * scale;
    if (positions)
      for (int64_t i = 0; i < d; ++i) out[i] = out[i] + positions[step * d + i];
  }
}

// The first index of a row's largest entry, NaN counting as largest (torch.argmax's answer)
int64_t first_argmax(const float* c, int64_t v) {
  int64_t best = 0;
  float top = c[0];
  if (std::isnan(top)) return 0;
  for (int64_t i = 1; i < v; ++i) {
    if (std::isnan(c[i])) return i;
    if (c[i] > top) top = c[i], best = i;
  }
  return best;
}

struct Special {
  int64_t pad, bos, eos;
};

// One row's next token from its candidates c (V), in place: mt.decode.greedy's bans, EOS forced at the limit
// (its value kept) or banned before the minimum, then the first largest entry.
int64_t pick(float* c, int64_t v, int64_t vocab, const Special& id, bool at_limit, bool too_short) {
  const float blocked = -std::numeric_limits<float>::infinity();
  c[id.pad] = c[id.bos] = blocked;
  for (int64_t i = vocab; i < v; ++i) c[i] = blocked;
  if (at_limit) {
    const float eos = c[id.eos];
    std::fill(c, c + v, blocked);
    c[id.eos] = eos;
  } else if (too_short) {
    c[id.eos] = blocked;
  }
  return first_argmax(c, v);
}

}  // namespace

// Greedy search of a batch of N sentences. Layers: w, heads, pre_ln, eps, rope_cos / rope_sin as decoder_step
// takes them; embedding (V, D) and its scale, positions (P, D) added to it (none: rotary positions); the final
// norm's gain and shift (none: Post-LN; no shift: RMSNorm) and eps; output: the projection, a packed oneDNN
// float32 weight or the (V, D) matrix; cross_k / cross_v: each layer's source keys and values (N, H, S, Dh),
// contiguous, which the call overwrites; source_mask (N, 1, 1, S) additive; max_len / min_len (N,) int64: pieces
// at most, and before EOS is allowed; vocab_size: ids at or past it are never produced; scores: pick from the
// log-probs and sum them (else from the logits); special: the PAD, BOS and EOS ids.
// -> tokens (N, max(max_len) + 1) int64, each row's pieces then PAD; lengths (N,) int64 (pieces, EOS excluded);
// logprob (N,) float32 (0 without scores).
std::vector<Tensor> greedy_decode(const std::vector<Tensor>& w, int64_t heads, bool pre_ln, double eps,
                                  const c10::optional<Tensor>& rope_cos, const c10::optional<Tensor>& rope_sin,
                                  const Tensor& embedding, double scale, const c10::optional<Tensor>& positions,
                                  const c10::optional<Tensor>& norm_gain, const c10::optional<Tensor>& norm_shift,
                                  double norm_eps, const Tensor& output, bool packed,
                                  const std::vector<Tensor>& cross_k, const std::vector<Tensor>& cross_v,
                                  const Tensor& source_mask, const Tensor& max_len, const Tensor& min_len,
                                  int64_t vocab_size, bool scores, const std::vector<int64_t>& special) {
  const int64_t n0 = source_mask.size(0), d = embedding.size(1), layers = cross_k.size();
  TORCH_CHECK(special.size() == 3, "special: the PAD, BOS and EOS ids");
  const Special id{special[0], special[1], special[2]};
  TORCH_CHECK(embedding.scalar_type() == at::kFloat && embedding.is_contiguous(), "embedding: contiguous float32");
  TORCH_CHECK(max_len.scalar_type() == at::kLong && min_len.scalar_type() == at::kLong && max_len.numel() == n0 &&
                  min_len.numel() == n0,
              "max_len, min_len: int64, one a sentence");
  TORCH_CHECK(source_mask.scalar_type() == at::kFloat && source_mask.is_contiguous() && source_mask.dim() == 4,
              "source_mask: contiguous float32 (N, 1, 1, S)");
  const Tensor longest_t = max_len.contiguous(), shortest_t = min_len.contiguous();
  const int64_t *longest = longest_t.data_ptr<int64_t>(), *shortest = shortest_t.data_ptr<int64_t>();
  const int64_t capacity = n0 ? *std::max_element(longest, longest + n0) + 1 : 1;
  const float* position_table = nullptr;
  if (positions.has_value()) {
    TORCH_CHECK(positions->scalar_type() == at::kFloat && positions->is_contiguous() && positions->size(1) == d &&
                    positions->size(0) >= capacity,
                "positions: contiguous float32 (P, D) covering the longest output");
    position_table = positions->data_ptr<float>();
  }
  for (const Tensor& t : cross_k) TORCH_CHECK(t.is_contiguous() && t.size(0) == n0, "cross_k: contiguous (N, ...)");
  for (const Tensor& t : cross_v) TORCH_CHECK(t.is_contiguous() && t.size(0) == n0, "cross_v: contiguous (N, ...)");

  const auto opts = embedding.options();
  const int64_t dh = d / heads, src = n0 ? cross_k.at(0).size(2) : 0;
  std::vector<Tensor> self_k, self_v;  // (N, H, capacity, 1, Dh): step s of a row written at step s, read after
  for (int64_t l = 0; l < layers; ++l) {
    self_k.push_back(at::empty({n0, heads, capacity, 1, dh}, opts));
    self_v.push_back(at::empty({n0, heads, capacity, 1, dh}, opts));
  }
  Tensor tokens = at::full({n0, capacity}, id.pad, at::kLong), lengths = at::zeros({n0}, at::kLong);
  Tensor logprob = at::zeros({n0}, at::kFloat);
  int64_t *out_tokens = tokens.data_ptr<int64_t>(), *out_lengths = lengths.data_ptr<int64_t>();
  float* out_logprob = logprob.data_ptr<float>();

  std::vector<int64_t> sentence(n0), last(n0, id.bos);  // row r decodes sentence[r], whose last token is last[r]
  std::vector<float> summed(n0, 0.f);
  for (int64_t r = 0; r < n0; ++r) sentence[r] = r;
  int64_t n = n0;
  for (int64_t step = 0; n > 0; ++step) {
    Tensor x = at::empty({n, 1, d}, opts);  // (n, 1, D)
    embed(embedding.data_ptr<float>(), position_table, last.data(), n, step, static_cast<float>(scale), d, x.data_ptr<float>());
    std::vector<Tensor> k(layers), v(layers), ck(layers), cv(layers);
    for (int64_t l = 0; l < layers; ++l) {
      k[l] = self_k[l].narrow(0, 0, n), v[l] = self_v[l].narrow(0, 0, n);
      ck[l] = cross_k[l].narrow(0, 0, n), cv[l] = cross_v[l].narrow(0, 0, n);
    }
    Tensor h = decoder_step(x, w, k, v, at::full({n}, step, at::kLong), 1, c10::nullopt, ck, cv,
                            source_mask.narrow(0, 0, n), heads, pre_ln, eps, rope_cos, rope_sin);  // (n, 1, D)
    if (norm_gain.has_value())
      h = norm_shift.has_value() ? at::layer_norm(h, {d}, norm_gain, norm_shift, norm_eps)
                                 : at::rms_norm(h, {d}, norm_gain, norm_eps);
    Tensor logits = project(h, output, packed);  // (n, V)
    Tensor candidates = (scores ? at::log_softmax(logits, 1) : logits).contiguous();
    const int64_t vocab = candidates.size(1), allowed = vocab_size >= 0 ? std::min(vocab_size, vocab) : vocab;
    float* c = candidates.data_ptr<float>();
    std::vector<int64_t> chosen(n);
    at::parallel_for(0, n, 8, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t s = sentence[r];
        chosen[r] = pick(c + r * vocab, vocab, allowed, id, step >= longest[s], step < shortest[s]);
      }
    });

    std::vector<bool> done(n);
    bool any_done = false;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t s = sentence[r], token = chosen[r];
      if (scores) summed[r] += c[r * vocab + token];
      last[r] = token;
      if (token == id.eos || step >= longest[s]) {  // (a row at its limit produces EOS unless EOS is -inf)
        out_lengths[s] = step, out_logprob[s] = summed[r];
        done[r] = any_done = true;
      } else {
        out_tokens[s * capacity + step] = token;
      }
    }
    if (!any_done) continue;

    // the rows left: each finished row's place taken by the last unfinished row behind it
    std::vector<int64_t> kept;
    for (int64_t r = 0; r < n; ++r)
      if (!done[r]) kept.push_back(r);
    const int64_t left = kept.size();
    std::vector<int64_t> to, from;
    int64_t mover = left - 1;
    for (int64_t i = 0; i < left; ++i)  // (as many finished rows before `left` as unfinished ones from it)
      if (done[i]) to.push_back(i), from.push_back(kept[mover--]);
    if (!to.empty()) {
      std::vector<Tensor> stores;
      std::vector<int64_t> steps;
      for (int64_t l = 0; l < layers; ++l) {
        stores.insert(stores.end(), {self_k[l], self_v[l], cross_k[l], cross_v[l]});
        steps.insert(steps.end(), {step + 1, step + 1, src, src});
      }
      stores.push_back(source_mask.view({n0, 1, 1, -1}));
      steps.push_back(1);
      move_rows(stores, steps, at::tensor(to, at::kLong), at::tensor(from, at::kLong));
      for (size_t m = 0; m < to.size(); ++m) {
        sentence[to[m]] = sentence[from[m]], last[to[m]] = last[from[m]], summed[to[m]] = summed[from[m]];
      }
    }
    n = left;
  }
  return {tokens, lengths, logprob};
}
