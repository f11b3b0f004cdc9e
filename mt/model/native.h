// mt.model.native: the functions of the C++ extension that its source files call across each other.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

at::Tensor decoder_step(const at::Tensor& x, const std::vector<at::Tensor>& w, const std::vector<at::Tensor>& self_k,
                        const std::vector<at::Tensor>& self_v, const at::Tensor& at, int64_t group,
                        const std::vector<at::Tensor>& cross_k,
                        const std::vector<at::Tensor>& cross_v, const at::Tensor& source_mask, int64_t heads,
                        bool pre_ln, double eps, int64_t activation, const c10::optional<at::Tensor>& rope_cos,
                        const c10::optional<at::Tensor>& rope_sin, const c10::optional<at::Tensor>& self_slots);

void move_rows(const std::vector<at::Tensor>& stores, const std::vector<int64_t>& steps, const at::Tensor& to,
               const at::Tensor& source);

// The decoder's tensors and settings both searches take first (native_search.cpp)
#define MT_DECODER_ARGS                                                                                            \
  const std::vector<at::Tensor>&w, int64_t heads, bool pre_ln, double eps, int64_t activation,                     \
      const c10::optional<at::Tensor>&rope_cos, const c10::optional<at::Tensor>&rope_sin,                          \
      const at::Tensor &embedding, double scale, const c10::optional<at::Tensor>&positions,                        \
      const c10::optional<at::Tensor>&norm_gain, const c10::optional<at::Tensor>&norm_shift, double norm_eps,      \
      const at::Tensor &output, bool packed, const c10::optional<at::Tensor>&logits_bias

std::vector<at::Tensor> greedy_decode(MT_DECODER_ARGS, const std::vector<at::Tensor>& cross_k,
                                      const std::vector<at::Tensor>& cross_v, const at::Tensor& source_mask,
                                      const std::vector<int64_t>& max_len, const std::vector<int64_t>& min_len,
                                      int64_t vocab_size, const std::vector<int64_t>& special, bool scores,
                                      const std::vector<int64_t>& forced);

std::vector<std::vector<std::pair<std::vector<int64_t>, double>>> beam_decode(
    MT_DECODER_ARGS, const std::vector<at::Tensor>& cross_k, const std::vector<at::Tensor>& cross_v,
    const at::Tensor& source_mask, const std::vector<int64_t>& max_len, const std::vector<int64_t>& min_len,
    int64_t vocab_size, const std::vector<int64_t>& special, int64_t beam, int64_t nbest, int64_t penalty,
    double alpha, int64_t stopping, const std::vector<int64_t>& forced);
