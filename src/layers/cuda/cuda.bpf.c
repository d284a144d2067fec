/* CUDA runtime layer (libcudart): the rows of src/layers/cuda/probes.cpp. */
#include "bpf/common.bpf.h"

EACGM_TABLE_LAYER(EACGM_LAYER_CUDA)
