// mt.model.native: the functions of the C++ extension that its source files call across each other.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

at::Tensor decoder_step(const at::Tensor& x, const std::vector<at::Tensor>& w, const std::vector<at::Tensor>& self_k,
                        const std::vector<at::Tensor>& self_v, const at::Tensor& at, int64_t group,
                        const c10::optional<at::Tensor>& self_mask, const std::vector<at::Tensor>& cross_k,
                        const std::vector<at::Tensor>& cross_v, const at::Tensor& source_mask, int64_t heads,
                        bool pre_ln, double eps, const c10::optional<at::Tensor>& rope_cos,
                        const c10::optional<at::Tensor>& rope_sin);

void move_rows(const std::vector<at::Tensor>& stores, const std::vector<int64_t>& steps, const at::Tensor& to,
               const at::Tensor& source);

std::vector<at::Tensor> greedy_decode(
    const std::vector<at::Tensor>& w, int64_t heads, bool pre_ln, double eps, const c10::optional<at::Tensor>& rope_cos,
    const c10::optional<at::Tensor>& rope_sin, const at::Tensor& embedding, double scale,
    const c10::optional<at::Tensor>& positions, const c10::optional<at::Tensor>& norm_gain,
    const c10::optional<at::Tensor>& norm_shift, double norm_eps, const at::Tensor& output, bool packed,
    const std::vector<at::Tensor>& cross_k, const std::vector<at::Tensor>& cross_v, const at::Tensor& source_mask,
    const at::Tensor& max_len, const at::Tensor& min_len, int64_t vocab_size, bool scores,
    const std::vector<int64_t>& special);
