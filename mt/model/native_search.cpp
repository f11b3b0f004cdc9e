// mt.model.native: greedy and beam search of a batch with every step in C++ (one call a batch, no Python a step).
//
// The loops of mt.decode.greedy and mt.decode.beam for a batch decoded whole (no refill): each step embeds the rows'
// last tokens, runs every decoder layer (decoder_step), the final norm and the output projection with any logits bias
// (the same ATen and oneDNN calls as the Python path, so the logits are the same; a -inf bias entry is a token never
// produced), bans PAD, BOS and the ids past the tokenizer's vocabulary, forces EOS at a sentence's length limit and
// bans it before its minimum. Greedy search takes each row's first largest entry (of the logits, or with scores of the
// log-probs); beam search keeps each sentence's best 2K candidates, finishes its EOS ones among the top K, continues
// the best K others and stops a sentence by the rules of mt.decode.stopping. Sentences that are done leave: the last
// ones move into their places (move_rows, mt.decode.common.fill_from_the_end), so the batch shrinks without copying its
// cache. Beam search keeps a sentence's K beams in K slots of one cache row (mt.model.beam_cache): a beam reads its
// ancestors' slots through the self-attention mask, so beams that swap or repeat move no keys.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "native.h"

using at::Tensor;

namespace {

constexpr float kBlocked = -std::numeric_limits<float>::infinity();

// mt.model.packed_linear.padded_rows: the row count a packed product runs at
int64_t padded_rows(int64_t rows) {
  if (rows <= 64) return (rows + 7) / 8 * 8;
  const int64_t bit_length = 64 - __builtin_clzll(static_cast<uint64_t>(rows));
  const int64_t step = int64_t{1} << (bit_length - 4);
  return (rows + step - 1) / step * step;
}

// x (n, D) = embedding[tokens[r]] * scale + positions[step] for the first n tokens (the Python step's two float32
// operations, unfused)
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

struct Special {
  int64_t pad, bos, eos;
};

// The decoder's tensors and settings, and one step of it: tokens in, logits out.
struct Decoder {
  const std::vector<Tensor>& w;
  int64_t heads;
  bool pre_ln;
  double eps;
  int64_t activation;
  const c10::optional<Tensor>& rope_cos;
  const c10::optional<Tensor>& rope_sin;
  const Tensor& embedding;
  float scale;
  const c10::optional<Tensor>& positions;
  const c10::optional<Tensor>& norm_gain;
  const c10::optional<Tensor>& norm_shift;
  double norm_eps;
  const Tensor& output;
  bool packed;
  const c10::optional<Tensor>& logits_bias;  // (V,), added to the logits; none: no bias

  int64_t d() const { return embedding.size(1); }

  void check(int64_t steps) const {
    TORCH_CHECK(embedding.scalar_type() == at::kFloat && embedding.is_contiguous(), "embedding: contiguous float32");
    TORCH_CHECK(!positions.has_value() || (positions->scalar_type() == at::kFloat && positions->is_contiguous() &&
                                           positions->size(1) == d() && positions->size(0) >= steps),
                "positions: contiguous float32 (P, D) covering the longest output");
    TORCH_CHECK(!logits_bias.has_value() ||
                    (logits_bias->scalar_type() == at::kFloat && logits_bias->is_contiguous() &&
                     logits_bias->dim() == 1 && logits_bias->size(0) == embedding.size(0)),
                "logits_bias: contiguous float32 (V,)");
  }

  // The output projection as Decoder.project makes it: h (n, 1, D) -> logits (n, V). A packed weight runs
  // mt.model.packed_linear.packed_linear's oneDNN call (rows padded with zeros), then adds any logits bias; a plain
  // one F.linear with the bias.
  Tensor project(const Tensor& h) const {
    if (!packed) return at::linear(h, output, logits_bias).view({h.size(0), -1});
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
    const int64_t rows = h.size(0), padding = padded_rows(rows) - rows;
    const Tensor x = padding ? at::constant_pad_nd(h.view({rows, -1}), {0, 0, 0, padding}, 0) : h;
    std::vector<c10::IValue> stack{x, output, c10::IValue(), std::string("none"),
                                   c10::List<c10::optional<at::Scalar>>(), std::string("")};
    op.callBoxed(&stack);
    const Tensor logits = stack.at(0).toTensor().view({rows + padding, -1}).narrow(0, 0, rows);
    return logits_bias.has_value() ? logits + *logits_bias : logits;
  }

  // Logits (N, V) of one step at `step` of N = cache rows x group rows fed `tokens`; the caches as decoder_step
  // takes them (each layer's new keys and values written into self_k / self_v), slots its slot table.
  Tensor logits(const int64_t* tokens, int64_t rows, int64_t step, int64_t group,
                const c10::optional<Tensor>& slots, const std::vector<Tensor>& self_k,
                const std::vector<Tensor>& self_v, const std::vector<Tensor>& cross_k,
                const std::vector<Tensor>& cross_v, const Tensor& source_mask) const {
    Tensor x = at::empty({rows, 1, d()}, embedding.options());  // (N, 1, D)
    embed(embedding.data_ptr<float>(), positions.has_value() ? positions->data_ptr<float>() : nullptr, tokens, rows,
          step, scale, d(), x.data_ptr<float>());
    Tensor h = decoder_step(x, w, self_k, self_v, at::full({rows / group}, step, at::kLong), group, cross_k, cross_v,
                            source_mask, heads, pre_ln, eps, activation, rope_cos, rope_sin, slots);  // (N, 1, D)
    if (norm_gain.has_value())
      h = norm_shift.has_value() ? at::layer_norm(h, {d()}, norm_gain, norm_shift, norm_eps)
                                 : at::rms_norm(h, {d()}, norm_gain, norm_eps);
    return project(h);
  }
};

// A batch's caches, one row a sentence: each layer's self-attention store (N, H, capacity, slots, Dh) and source
// keys and values (N, H, S, Dh), and the source mask (N, 1, 1, S); the first `rows` rows are in use.
struct Caches {
  std::vector<Tensor> self_k, self_v, cross_k, cross_v;
  Tensor source_mask;
  int64_t rows;

  Caches(const Decoder& dec, int64_t capacity, int64_t slots, const std::vector<Tensor>& ck,
         const std::vector<Tensor>& cv, const Tensor& mask)
      : cross_k(ck), cross_v(cv), source_mask(mask), rows(mask.size(0)) {
    TORCH_CHECK(mask.scalar_type() == at::kFloat && mask.is_contiguous() && mask.dim() == 4,
                "source_mask: contiguous float32 (N, 1, 1, S)");
    for (const Tensor& t : ck) TORCH_CHECK(t.is_contiguous() && t.size(0) == rows, "cross_k: contiguous (N, ...)");
    for (const Tensor& t : cv) TORCH_CHECK(t.is_contiguous() && t.size(0) == rows, "cross_v: contiguous (N, ...)");
    // (written before they are read: a step writes every row's slots, and attention reads no masked key)
    for (size_t l = 0; l < ck.size(); ++l) {
      self_k.push_back(at::empty({rows, dec.heads, capacity, slots, dec.d() / dec.heads}, dec.embedding.options()));
      self_v.push_back(at::empty_like(self_k.back()));
    }
  }

  std::vector<Tensor> first(const std::vector<Tensor>& all) const {
    std::vector<Tensor> out;
    for (const Tensor& t : all) out.push_back(t.narrow(0, 0, rows));
    return out;
  }

  Tensor logits(const Decoder& dec, const int64_t* tokens, int64_t step, int64_t group,
                const c10::optional<Tensor>& slots) const {
    return dec.logits(tokens, rows * group, step, group, slots, first(self_k), first(self_v), first(cross_k),
                      first(cross_v), source_mask.narrow(0, 0, rows));
  }

  // Rows `from[m]` move to rows `to[m]` (the self-attention stores' first `steps` steps), then `left` are in use.
  void move(const std::vector<int64_t>& to, const std::vector<int64_t>& from, int64_t steps, int64_t left) {
    if (!to.empty()) {
      std::vector<Tensor> stores;
      std::vector<int64_t> valid;
      const int64_t src = source_mask.size(3);
      for (size_t l = 0; l < self_k.size(); ++l) {
        stores.insert(stores.end(), {self_k[l], self_v[l], cross_k[l], cross_v[l]});
        valid.insert(valid.end(), {steps, steps, src, src});
      }
      stores.push_back(source_mask);
      valid.push_back(1);
      move_rows(stores, valid, at::tensor(to, at::kLong), at::tensor(from, at::kLong));
    }
    rows = left;
  }
};

// mt.decode.common.fill_from_the_end: of `done` rows, the kept ones in `left` places, each done row's place taken by
// the last kept row behind it: the moves (to, from) and the rows kept.
int64_t fill_from_the_end(const std::vector<bool>& done, std::vector<int64_t>& to, std::vector<int64_t>& from) {
  std::vector<int64_t> kept;
  for (size_t r = 0; r < done.size(); ++r)
    if (!done[r]) kept.push_back(r);
  const int64_t left = kept.size();
  int64_t mover = left - 1;
  for (int64_t i = 0; i < left; ++i)  // (as many done rows before `left` as kept ones from it)
    if (done[i]) to.push_back(i), from.push_back(kept[mover--]);
  return left;
}

// Moves (to, from) applied to per-row values, `width` a row
template <typename T>
void move_values(std::vector<T>& values, const std::vector<int64_t>& to, const std::vector<int64_t>& from,
                 int64_t width) {
  for (size_t m = 0; m < to.size(); ++m)
    std::copy_n(values.begin() + from[m] * width, width, values.begin() + to[m] * width);
}

// One row's candidates c (V), in place: PAD, BOS and ids past `vocab` banned; at the limit only EOS allowed (its
// value kept), before the minimum EOS banned; a forced token (>= 0) the only one allowed, scored 0
// (mt.decode.common.ban_, force_eos_, ban_eos_, force_first_).
void restrict_row(float* c, int64_t v, int64_t vocab, const Special& id, bool at_limit, bool too_short,
                  int64_t forced = -1) {
  if (forced >= 0) {
    std::fill(c, c + v, kBlocked);
    c[forced] = 0.f;
    return;
  }
  c[id.pad] = c[id.bos] = kBlocked;
  for (int64_t i = vocab; i < v; ++i) c[i] = kBlocked;
  if (at_limit) {
    const float eos = c[id.eos];
    std::fill(c, c + v, kBlocked);
    c[id.eos] = eos;
  } else if (too_short) {
    c[id.eos] = kBlocked;
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

// Entry i = x of a row offered to its top k so far (values, ids: `held` of them, best first; ties keep the first).
inline void offer(float x, int64_t i, int64_t k, float* values, int64_t* ids, int64_t& held) {
  if (held == k && !(x > values[k - 1])) return;
  int64_t at = held < k ? held++ : k - 1;
  while (at > 0 && x > values[at - 1]) {
    values[at] = values[at - 1], ids[at] = ids[at - 1];
    --at;
  }
  values[at] = x, ids[at] = i;
}

// The k largest entries of c (v), best first, ties to the lower index: values and ids (k each). Once k are held,
// 8 entries at a time are compared with the k-th value, and only those above it are offered (a few a row).
void top_k(const float* c, int64_t v, int64_t k, float* values, int64_t* ids) {
  int64_t held = 0, i = 0;
  for (; i < v && held < k; ++i) offer(c[i], i, k, values, ids, held);
#ifdef __AVX2__
  for (; i + 8 <= v; i += 8) {
    int above = _mm256_movemask_ps(
        _mm256_cmp_ps(_mm256_loadu_ps(c + i), _mm256_set1_ps(values[k - 1]), _CMP_GT_OQ));
    for (; above; above &= above - 1) {
      const int lane = __builtin_ctz(above);
      offer(c[i + lane], i + lane, k, values, ids, held);
    }
  }
#endif
  for (; i < v; ++i) offer(c[i], i, k, values, ids, held);
  for (; held < k; ++held) values[held] = kBlocked, ids[held] = 0;
}

}  // namespace

// Greedy search of a batch of N sentences. The decoder: w, heads, pre_ln, eps, activation, rope_cos / rope_sin as
// decoder_step takes them; embedding (V, D) and its scale, positions (P, D) added to it (none: rotary positions); the
// final norm's gain and shift (none: Post-LN; no shift: RMSNorm) and eps; output: the projection, a packed oneDNN
// float32 weight or the (V, D) matrix; logits_bias (V,) added to its logits (none: no bias; -inf: never produced).
// cross_k / cross_v: each layer's source keys and values (N, H, S, Dh), contiguous, and source_mask (N, 1, 1, S)
// additive, contiguous: the call overwrites them. max_len / min_len (N,) int64: pieces at most, and before EOS is
// allowed; vocab_size: ids at or past it are never produced (-1: none); special: the PAD, BOS and EOS ids; scores: pick
// from the log-probs and sum them (else from the logits); forced (N,): each sentence's forced first token, scored 0
// and kept in its pieces (-1: none). -> tokens (N, max(max_len) + 1) int64, each row's pieces then
// PAD; lengths (N,) int64 (pieces, EOS excluded); logprob (N,) float32 (0 without scores).
std::vector<Tensor> greedy_decode(MT_DECODER_ARGS, const std::vector<Tensor>& cross_k,
                                  const std::vector<Tensor>& cross_v, const Tensor& source_mask,
                                  const std::vector<int64_t>& max_len, const std::vector<int64_t>& min_len,
                                  int64_t vocab_size, const std::vector<int64_t>& special, bool scores,
                                  const std::vector<int64_t>& forced) {
  const Decoder dec{w, heads, pre_ln, eps, activation, rope_cos, rope_sin, embedding, static_cast<float>(scale),
                    positions, norm_gain, norm_shift, norm_eps, output, packed, logits_bias};
  const int64_t n0 = source_mask.size(0);
  TORCH_CHECK(special.size() == 3 && static_cast<int64_t>(max_len.size()) == n0 &&
                  static_cast<int64_t>(min_len.size()) == n0 && static_cast<int64_t>(forced.size()) == n0,
              "special: PAD, BOS, EOS; max_len, min_len, forced: one a sentence");
  const Special id{special[0], special[1], special[2]};
  const int64_t capacity = n0 ? *std::max_element(max_len.begin(), max_len.end()) + 1 : 1;
  dec.check(capacity);
  Caches caches(dec, capacity, 1, cross_k, cross_v, source_mask);

  Tensor tokens = at::full({n0, capacity}, id.pad, at::kLong), lengths = at::zeros({n0}, at::kLong);
  Tensor logprob = at::zeros({n0}, at::kFloat);
  int64_t *out_tokens = tokens.data_ptr<int64_t>(), *out_lengths = lengths.data_ptr<int64_t>();
  float* out_logprob = logprob.data_ptr<float>();
  std::vector<int64_t> sentence(n0), last(n0, id.bos);  // row r decodes sentence[r], whose last token is last[r]
  std::iota(sentence.begin(), sentence.end(), 0);
  std::vector<float> summed(n0, 0.f);

  for (int64_t step = 0; caches.rows > 0; ++step) {
    const int64_t n = caches.rows;
    Tensor logits = caches.logits(dec, last.data(), step, 1, c10::nullopt);  // (n, V)
    Tensor candidates = (scores ? at::log_softmax(logits, 1) : logits).contiguous();
    const int64_t vocab = candidates.size(1), allowed = vocab_size >= 0 ? std::min(vocab_size, vocab) : vocab;
    float* c = candidates.data_ptr<float>();
    std::vector<int64_t> chosen(n);
    at::parallel_for(0, n, 8, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t s = sentence[r];
        restrict_row(c + r * vocab, vocab, allowed, id, step >= max_len[s], step < min_len[s],
                     step == 0 ? forced[s] : -1);
        chosen[r] = first_argmax(c + r * vocab, vocab);
      }
    });

    std::vector<bool> done(n);
    bool any_done = false;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t s = sentence[r], token = chosen[r];
      if (scores) summed[r] += c[r * vocab + token];
      last[r] = token;
      if (token == id.eos || step >= max_len[s]) {  // (a row at its limit produces EOS unless EOS is -inf)
        out_lengths[s] = step, out_logprob[s] = summed[r];
        done[r] = any_done = true;
      } else {
        out_tokens[s * capacity + step] = token;
      }
    }
    if (!any_done) continue;
    std::vector<int64_t> to, from;
    const int64_t left = fill_from_the_end(done, to, from);
    caches.move(to, from, step + 1, left);
    move_values(sentence, to, from, 1), move_values(last, to, from, 1), move_values(summed, to, from, 1);
  }
  return {tokens, lengths, logprob};
}

namespace {

// mt.decode.length_penalty.length_penalty: 0 none, 1 gnmt, 2 length
double length_penalty(int64_t length, int64_t penalty, double alpha) {
  if (penalty == 1) return std::pow((5.0 + length) / 6.0, alpha);
  if (penalty == 2) return std::pow(static_cast<double>(length), alpha);
  return 1.0;
}

struct Hyp {
  std::vector<int64_t> tokens;
  float logprob;
  double score;
};

// mt.decode.stopping.Finished for one sentence: its K best finished hypotheses and the stopping rule
// (0 exact, 1 topk_eos, 2 fairseq).
struct Finished {
  std::vector<Hyp> hyps;

  void add(std::vector<int64_t> tokens, float logprob, int64_t beam, int64_t penalty, double alpha) {
    const double score = static_cast<double>(logprob) / length_penalty(tokens.size() + 1, penalty, alpha);
    hyps.push_back({std::move(tokens), logprob, score});
    if (static_cast<int64_t>(hyps.size()) > beam) {  // the first of the lowest scores goes
      auto worst = hyps.begin();
      for (auto h = hyps.begin(); h != hyps.end(); ++h)
        if (h->score < worst->score) worst = h;
      hyps.erase(worst);
    }
  }

  bool done(int64_t step, float best_live, bool top_is_eos, int64_t max_len, int64_t min_len, int64_t beam,
            int64_t nbest, int64_t penalty, double alpha, int64_t stopping) const {
    if (step >= max_len || best_live == kBlocked) return true;
    const int64_t count = hyps.size();
    if (count < nbest) return false;
    if (stopping == 1 && top_is_eos) return true;
    if (stopping == 2 && count >= beam) return true;
    std::vector<double> scores;
    for (const Hyp& h : hyps) scores.push_back(h.score);
    std::sort(scores.begin(), scores.end(), std::greater<double>());
    const double longest = length_penalty(max_len + 1, penalty, alpha);
    const double shortest = length_penalty(std::max(step + 1, min_len) + 1, penalty, alpha);
    return scores[nbest - 1] >= static_cast<double>(best_live) / std::max(shortest, longest);
  }
};

}  // namespace

// Beam search (mt.decode.beam) of a batch of N sentences with `beam` beams each: the decoder, the caches, max_len,
// min_len, vocab_size and special as greedy_decode takes them; nbest (<= beam) hypotheses a sentence for the stopping
// rule; penalty (0 none, 1 gnmt, 2 length) and alpha; stopping (0 exact, 1 topk_eos, 2 fairseq). The vocabulary
// must hold at least 2 x beam ids. -> each sentence's finished hypotheses (at most `beam`, in the order they
// finished): their pieces (EOS excluded) and summed log-probs.
std::vector<std::vector<std::pair<std::vector<int64_t>, double>>> beam_decode(
    MT_DECODER_ARGS, const std::vector<Tensor>& cross_k, const std::vector<Tensor>& cross_v, const Tensor& source_mask,
    const std::vector<int64_t>& max_len, const std::vector<int64_t>& min_len, int64_t vocab_size,
    const std::vector<int64_t>& special, int64_t beam, int64_t nbest, int64_t penalty, double alpha,
    int64_t stopping, const std::vector<int64_t>& forced) {
  const Decoder dec{w, heads, pre_ln, eps, activation, rope_cos, rope_sin, embedding, static_cast<float>(scale),
                    positions, norm_gain, norm_shift, norm_eps, output, packed, logits_bias};
  const int64_t n0 = source_mask.size(0), k = beam, k2 = 2 * beam;
  TORCH_CHECK(special.size() == 3 && static_cast<int64_t>(max_len.size()) == n0 &&
                  static_cast<int64_t>(min_len.size()) == n0 && static_cast<int64_t>(forced.size()) == n0,
              "special: PAD, BOS, EOS; max_len, min_len, forced: one a sentence");
  TORCH_CHECK(beam >= 1 && 1 <= nbest && nbest <= beam, "need 1 <= nbest <= beam");
  const Special id{special[0], special[1], special[2]};
  const int64_t capacity = n0 ? *std::max_element(max_len.begin(), max_len.end()) + 1 : 1;
  dec.check(capacity);
  Caches caches(dec, capacity, k, cross_k, cross_v, source_mask);

  std::vector<Finished> finished(n0);
  // per sentence row b: its sentence; per beam b * K + j: cumulative log-prob, last token, pieces, and the slot
  // it reads at each step. At step 0 the K beams are the same [BOS]: only the first is alive (the others -inf).
  std::vector<int64_t> sentence(n0);
  std::iota(sentence.begin(), sentence.end(), 0);
  std::vector<float> scores(n0 * k, kBlocked);
  for (int64_t b = 0; b < n0; ++b) scores[b * k] = 0.f;
  std::vector<int64_t> last(n0 * k, id.bos), pieces(n0 * k * capacity);
  std::vector<int32_t> slots(n0 * k * capacity);
  std::vector<int64_t> next_pieces(k * capacity);
  std::vector<int32_t> next_slots(k * capacity);

  for (int64_t step = 0; caches.rows > 0; ++step) {
    const int64_t n = caches.rows, rows = n * k;
    for (int64_t r = 0; r < rows; ++r) slots[r * capacity + step] = r % k;  // each beam writes its own slot
    const Tensor table = at::from_blob(slots.data(), {rows, capacity}, at::kInt);  // (n K, capacity), no copy
    Tensor logits = caches.logits(dec, last.data(), step, k, table);  // (n K, V)
    Tensor lprobs = at::log_softmax(logits, 1).contiguous();
    const int64_t vocab = lprobs.size(1), allowed = vocab_size >= 0 ? std::min(vocab_size, vocab) : vocab;
    TORCH_CHECK(vocab >= k2, "beam search needs a vocabulary of at least 2 x beam ids");
    float* lp = lprobs.data_ptr<float>();
    std::vector<float> top_values(rows * k2);
    std::vector<int64_t> top_ids(rows * k2);
    at::parallel_for(0, rows, 4, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t s = sentence[r / k];
        restrict_row(lp + r * vocab, vocab, allowed, id, step >= max_len[s], step < min_len[s],
                     step == 0 ? forced[s] : -1);
        top_k(lp + r * vocab, vocab, k2, top_values.data() + r * k2, top_ids.data() + r * k2);
      }
    });

    std::vector<bool> done(n);
    bool any_done = false;
    std::vector<float> cand(k * k2);
    std::vector<int64_t> order(k * k2);
    for (int64_t b = 0; b < n; ++b) {
      const int64_t s = sentence[b];
      for (int64_t j = 0; j < k * k2; ++j) cand[j] = scores[b * k + j / k2] + top_values[(b * k) * k2 + j];
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return cand[x] > cand[y]; });
      auto token = [&](int64_t rank) { return top_ids[(b * k) * k2 + order[rank]]; };
      auto parent = [&](int64_t rank) { return order[rank] / k2; };
      for (int64_t j = 0; j < k; ++j) {  // EOS among the top K: finished
        if (token(j) != id.eos || !std::isfinite(cand[order[j]])) continue;
        const int64_t* history = pieces.data() + (b * k + parent(j)) * capacity;
        finished[s].add(std::vector<int64_t>(history, history + step), cand[order[j]], k, penalty, alpha);
      }
      // the live beam: the best K others, in rank order
      int64_t filled = 0;
      for (int64_t j = 0; j < k2 && filled < k; ++j) {
        if (token(j) == id.eos) continue;
        const int64_t from = (b * k + parent(j)) * capacity;
        std::copy_n(pieces.data() + from, step, next_pieces.data() + filled * capacity);
        next_pieces[filled * capacity + step] = token(j);
        std::copy_n(slots.data() + from, step + 1, next_slots.data() + filled * capacity);
        scores[b * k + filled] = cand[order[j]], last[b * k + filled] = token(j);
        ++filled;
      }
      TORCH_CHECK(filled == k, "fewer than K candidates other than EOS");
      for (int64_t j = 0; j < k; ++j) {  // each beam's steps so far (the rest of its row is not read)
        std::copy_n(next_pieces.data() + j * capacity, step + 1, pieces.data() + (b * k + j) * capacity);
        std::copy_n(next_slots.data() + j * capacity, step + 1, slots.data() + (b * k + j) * capacity);
      }
      done[b] = finished[s].done(step, scores[b * k], token(0) == id.eos, max_len[s], min_len[s], k, nbest, penalty,
                                 alpha, stopping);
      any_done = any_done || done[b];
    }
    if (!any_done) continue;
    std::vector<int64_t> to, from;
    const int64_t left = fill_from_the_end(done, to, from);
    caches.move(to, from, step + 1, left);
    move_values(sentence, to, from, 1), move_values(scores, to, from, k), move_values(last, to, from, k);
    move_values(pieces, to, from, k * capacity), move_values(slots, to, from, k * capacity);
  }
  std::vector<std::vector<std::pair<std::vector<int64_t>, double>>> out(n0);
  for (int64_t s = 0; s < n0; ++s)
    for (const Hyp& h : finished[s].hyps) out[s].emplace_back(h.tokens, static_cast<double>(h.logprob));
  return out;
}
