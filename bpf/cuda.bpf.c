/* CUDA runtime layer: one generic entry and one generic return handler for
 * every function of src/probes/probe_table.cpp's CUDA table; the attach
 * cookie says which row fired. */
#include "bpf/common.bpf.h"

/* Per table row: which argument word is a pointer whose pointee is read at
 * return (0xff: none). Set by user space between open and load. */
const volatile __u8 out_slot[EACGM_MAX_FUNCS];

SEC("uprobe")
int BPF_KPROBE(cuda_entry) { return eacgm_call_entry(ctx, EACGM_LAYER_CUDA); }

SEC("uretprobe")
int BPF_KRETPROBE(cuda_return) { return eacgm_call_return(ctx, EACGM_LAYER_CUDA, out_slot); }
