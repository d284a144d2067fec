/* CUDA runtime layer: one generic entry and one generic return handler for
 * every function of src/probes/probe_table.cpp's CUDA table; the attach
 * cookie says which row fired. */
#include "bpf/common.bpf.h"

/* Per table row, set by user space between open and load: which argument
 * word is a pointer whose pointee is read at return (0xff: none), and
 * whether the call's start is announced on its own. */
const volatile __u8 out_slot[EACGM_MAX_FUNCS];
const volatile __u8 emit_entry[EACGM_MAX_FUNCS];

SEC("uprobe")
int BPF_KPROBE(call_entry) { return eacgm_call_entry(ctx, EACGM_LAYER_CUDA, emit_entry); }

SEC("uretprobe")
int BPF_KRETPROBE(call_return) { return eacgm_call_return(ctx, EACGM_LAYER_CUDA, out_slot); }
