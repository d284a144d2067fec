/* CUDA runtime layer: the rows of src/probes/probe_table.cpp's CUDA table. */
#include "bpf/common.bpf.h"

EACGM_TABLE_LAYER(EACGM_LAYER_CUDA)
