/* PyTorch layer: one row per ATen operator entry point (at::_ops::<op>::call)
 * found in libtorch. Unlike the CUDA and NCCL tables, the rows are made at
 * run time from the library's own symbols (src/probes/torch_ops.cpp); the
 * BPF side is the same generic entry/return pair, the cookie naming the row.
 * No row reads an out-pointer or announces its start, so both per-row arrays
 * stay at their "none" values. */
#include "bpf/common.bpf.h"

EACGM_TABLE_LAYER(EACGM_LAYER_TORCH)
