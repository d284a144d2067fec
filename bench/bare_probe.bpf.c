/* The floor: an entry uprobe and a return uretprobe that do nothing.
 *
 * Whatever a real handler costs is added on top of what the kernel spends to
 * hit a uprobe (breakpoint trap, instruction emulation or single-step) and a
 * uretprobe (return address hijack, trampoline trap) and to run an empty BPF
 * program twice. bench/probe_overhead compares eacgm's handlers to this. */
/* The kernel's types must come before libbpf's headers. */
/* clang-format off */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
/* clang-format on */

char LICENSE[] SEC("license") = "GPL";

SEC("uprobe")
int BPF_KPROBE(bare_entry) { return 0; }

SEC("uretprobe")
int BPF_KRETPROBE(bare_return) { return 0; }
