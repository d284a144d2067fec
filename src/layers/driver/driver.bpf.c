/* CUDA driver layer (libcuda.so.1): the rows of src/layers/driver/probes.cpp.
 * NVIDIA's runtime is built on the driver, so a driver call made
 * inside a traced runtime call is that call's own work and is not traced again. */
#include "bpf/common.bpf.h"

EACGM_TABLE_LAYER_INNER_OF(EACGM_LAYER_DRIVER, EACGM_LAYER_CUDA)
