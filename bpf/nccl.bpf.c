/* NCCL layer: the rows of src/probes/probe_table.cpp's NCCL table. */
#include "bpf/common.bpf.h"

EACGM_TABLE_LAYER(EACGM_LAYER_NCCL)
