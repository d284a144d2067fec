/* NCCL layer: the rows of src/layers/nccl/probes.cpp. */
#include "bpf/common.bpf.h"

EACGM_TABLE_LAYER(EACGM_LAYER_NCCL)
