// The torch layer's argument checks, each naming the op and the bad value: ArgumentError (a ValueError and a
// RuntimeError), DTypeError, or NotImplementedError for what ccl does not do. Every op's check runs them on every
// tensor before anything is issued (process_group_ccl.hpp); they return what they computed, so that nothing is
// worked out twice.
#pragma once

#include "reduction.hpp"

#include <ccl_core/types.hpp>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstddef>
#include <vector>

namespace ccl_torch {

// `t` is a defined dense tensor (its device is checked when the op picks its collectives).
void check_dense(const at::Tensor& t, const char* op, const char* what);
void check_same_dtype(const at::Tensor& a, const at::Tensor& b, const char* op);
void check_same_numel(const at::Tensor& t, int64_t expected, const char* op, const char* what, const char* why);
// A dense tensor of a dtype ccl moves; its ccl-core dtype.
ccl_core::DType check_movable(const at::Tensor& t, const char* op, const char* what);
// A movable tensor that `rop` can reduce; the reduction's plan.
Reduction check_reducible(const at::Tensor& t, const c10d::ReduceOp& rop, const char* op);
// The one tensor of a list that must hold exactly one.
const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* op);
void check_root(int64_t root, int size, const char* op);
void check_peer(int peer, int rank, int size, const char* op);
// output = size x input, one dtype.
void check_allgather_pair(const at::Tensor& output, const at::Tensor& input, int size, const char* op);
// input = size x output, one dtype, reducible; the reduction's plan.
Reduction check_reduce_scatter_pair(const at::Tensor& output, const at::Tensor& input, const c10d::ReduceOp& rop,
                                    int size, const char* op);
// Elements (of the ccl-core dtype: complex counts twice) that each rank's part of `t` holds, split along its first
// dimension by `splits` (evenly when empty).
std::vector<std::size_t> check_split_counts(const at::Tensor& t, const std::vector<int64_t>& splits, int size,
                                            const char* op, const char* which);

}  // namespace ccl_torch
