/* PyTorch layer: one row per ATen operator entry point (at::_ops::<op>::call)
 * found in libtorch. Unlike the CUDA and NCCL tables, the rows are made at
 * run time from the library's own symbols (src/layers/torch/torch_ops.cpp); the
 * BPF side is the same generic entry/return pair, the cookie naming the row.
 * No row reads an out-pointer or announces its start, so both per-row arrays
 * stay at their "none" values. */
#include "bpf/common.bpf.h"

EACGM_TABLE_LAYER(EACGM_LAYER_TORCH)

/* Traced calls a C++ exception (or a thread's cancellation) left instead of
 * returning, per CPU: they have no duration and are not in the calls. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} calls_unwound SEC(".maps");

/* Set by user space between open and load: whether a thread may be stopped
 * at the start of unwinding (Tracer::Options::stop_on_dlopen). */
const volatile __u8 stop_on_unwind = 1;

#define EACGM_SIGSTOP 19

/* ATen operators throw (c10::Error for a shape mismatch, caught in Python).
 * A return probe replaces the return address on the stack with the kernel's
 * uretprobe trampoline, which has no unwind information: the unwinder stops
 * there and the C++ runtime calls std::terminate, killing the job. So when a
 * thread of a target starts unwinding (_Unwind_RaiseException and the
 * others Tracer::attach_unwind_guard names), the return addresses the kernel replaced in it are
 * read from the kernel's own record (uprobe_task.return_instances: the slot
 * and the original address, newest first) and the thread is stopped; user
 * space writes them back (src/layers/torch/unwind_stop.cpp) and resumes it. A BPF
 * program cannot write them itself where the kernel is locked down
 * (bpf_probe_write_user), as on these machines. Only slots above the stack
 * pointer that still hold the trampoline are taken: a record the kernel has
 * not yet dropped for an abandoned frame is neither. Those calls then
 * return, or are unwound, without their return probe: none of the thread's
 * open frames will see one, so its call stack is emptied and the calls are
 * counted in calls_unwound. */
SEC("uprobe")
int BPF_KPROBE(on_unwind_start) {
  struct task_struct* task = bpf_get_current_task_btf();
  struct eacgm_call_stack* st = bpf_task_storage_get(&call_stacks, task, 0, 0);
  if (!st || !stop_on_unwind) return 0; /* not a target thread that made a traced call */
  struct uprobe_task* ut = task->utask;
  struct mm_struct* mm = task->mm;
  if (!ut || !mm) return 0;
  struct xol_area* area = mm->uprobes_state.xol_area;
  if (!area) return 0; /* no return probe was ever set up in this process */
  __u64 trampoline = area->vaddr;
  __u64 sp = PT_REGS_SP(ctx);
  struct eacgm_unwind_stop* e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    eacgm_count_drop();
    return 0;
  }
  /* Entries that do not qualify are kept with slot 0: a count carried
   * through the loop would multiply the verifier's states. */
  __u32 n = 0, found = 0;
  struct return_instance* ri = ut->return_instances;
  for (int i = 0; i < EACGM_UNWIND_SLOTS && ri; i++) {
    __u64 slot = ri->stack;
    __u64 now = 0;
    __u32 take =
        slot > sp && bpf_probe_read_user(&now, sizeof(now), (void*)slot) == 0 && now == trampoline;
    e->slot[i & (EACGM_UNWIND_SLOTS - 1)] = take ? slot : 0;
    e->orig[i & (EACGM_UNWIND_SLOTS - 1)] = ri->orig_ret_vaddr;
    found |= take;
    n = i + 1;
    ri = ri->next;
  }
  if (!found) { /* no return probe of this thread is on the way out */
    bpf_ringbuf_discard(e, BPF_RB_NO_WAKEUP);
    return 0;
  }
  __u64 id = eacgm_task_id(task);
  e->hdr.kind = EACGM_EV_UNWIND_STOP;
  e->hdr.tgid = id >> 32;
  e->hdr.tid = (__u32)id;
  e->hdr.layer = EACGM_LAYER_TORCH;
  e->hdr.ts_ns = bpf_ktime_get_ns();
  e->open_calls = st->depth;
  e->n = n;
  /* To this thread: a stop sent to the process while another is pending is
   * merged into it, and the thread that one woke may take its time to act on
   * it while this one runs on into the unwinder. A thread's own SIGSTOP still
   * stops the whole process. */
  bpf_send_signal_thread(EACGM_SIGSTOP);
  /* The job waits for the reader: wake it even behind unread call events,
   * which never wake it (a plain submit would wait for it to catch up). */
  bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
  if (st->depth) {
    __u32 zero = 0;
    __u64* count = bpf_map_lookup_elem(&calls_unwound, &zero);
    if (count) *count += st->depth;
    st->depth = 0;
  }
  return 0;
}
