/* eacgm's call handlers (eacgm_call_entry and eacgm_call_return in bpf/common.bpf.h), copied and
 * cut into steps, to see what each part costs on top of the bare uprobe pair. Same maps, same
 * helpers; `step`, set between open and load, says how far the handlers go, and the verifier
 * drops the code past it:
 *   0  nothing (bare_probe.bpf.c)
 *   1  + pid/tgid and the `targets` hash lookup, at entry and at return
 *   2  + the per-thread call stack: task storage lookup (created on a thread's first call),
 *        push and pop, six argument registers, attach cookie, bpf_ktime_get_ns at entry and at
 *        return
 *   3  + the two stack-argument words, read with bpf_probe_read_user at entry
 *   4  + the event: ring buffer reserve, fill, submit with `submit_flags`, or, if `wakeup_bytes`
 *        is set, with BPF_RB_NO_WAKEUP except for the event that makes the unread data reach
 *        `wakeup_bytes` (then the reader must also poll on a timer)
 * Step 4 with submit_flags 0 is eacgm's handler pair, less the out-pointer read at return, which
 * cudaStreamSynchronize's probe table row does not ask for. Flags 0 let the kernel wake the reader
 * whenever it has caught up: once per event when it keeps up. The events ring buffer holds
 * 16 MiB, as in eacgm. */
#include "bpf/common.bpf.h"

const volatile __u32 step = 4;
const volatile __u64 submit_flags = 0; /* BPF_RB_NO_WAKEUP: never wake the reader */
const volatile __u64 wakeup_bytes = 0;

/* Space an event takes in the ring buffer: an 8-byte header, rounded up to 8 bytes. */
#define EVENT_SPACE ((sizeof(struct eacgm_call) + 8 + 7) / 8 * 8)

SEC("uprobe")
int BPF_KPROBE(step_entry) {
  if (step < 1) return 0;
  __u64 id = bpf_get_current_pid_tgid();
  if (!eacgm_is_target(id >> 32)) return 0;
  if (step < 2) return 0;
  struct eacgm_call_stack* st = eacgm_thread_stack(bpf_get_current_task_btf(), id >> 32);
  if (!st) return 0;
  __u32 d = st->depth;
  st->depth = d + 1;
  if (d >= EACGM_MAX_DEPTH) return 0;
  struct eacgm_frame* f = &st->frames[d & (EACGM_MAX_DEPTH - 1)];
  f->func_id = (__u32)bpf_get_attach_cookie(ctx);
  f->layer = EACGM_LAYER_CUDA;
  f->args[0] = PT_REGS_PARM1(ctx);
  f->args[1] = PT_REGS_PARM2(ctx);
  f->args[2] = PT_REGS_PARM3(ctx);
  f->args[3] = PT_REGS_PARM4(ctx);
  f->args[4] = PT_REGS_PARM5(ctx);
  f->args[5] = ctx->r9;
  f->args[6] = 0;
  f->args[7] = 0;
  if (step >= 3 &&
      bpf_probe_read_user(&f->args[6], 2 * sizeof(__u64), (void*)(PT_REGS_SP(ctx) + 8)) != 0) {
    f->args[6] = 0;
    f->args[7] = 0;
  }
  f->start_ns = bpf_ktime_get_ns();
  return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(step_return) {
  if (step < 1) return 0;
  __u64 now = bpf_ktime_get_ns();
  __u64 id = bpf_get_current_pid_tgid();
  if (!eacgm_is_target(id >> 32)) return 0;
  if (step < 2) return 0;
  struct eacgm_call_stack* st =
      bpf_task_storage_get(&call_stacks, bpf_get_current_task_btf(), 0, 0);
  if (!st || st->depth == 0) return 0;
  __u32 d = st->depth - 1;
  st->depth = d;
  if (d >= EACGM_MAX_DEPTH) return 0;
  struct eacgm_frame* f = &st->frames[d & (EACGM_MAX_DEPTH - 1)];
  __u32 func_id = (__u32)bpf_get_attach_cookie(ctx);
  if (f->func_id != func_id || f->layer != EACGM_LAYER_CUDA) return 0;
  if (step < 4) return 0;

  struct eacgm_call* e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    eacgm_count_drop();
    return 0;
  }
  e->hdr.kind = EACGM_EV_CALL;
  e->hdr.tgid = id >> 32;
  e->hdr.tid = (__u32)id;
  e->hdr.layer = EACGM_LAYER_CUDA;
  e->hdr.ts_ns = f->start_ns;
  e->duration_ns = now - f->start_ns;
#pragma unroll
  for (int i = 0; i < EACGM_CALL_ARGS; i++) e->args[i] = f->args[i];
  e->out_value = 0;
  e->ret = (__s64)PT_REGS_RC(ctx);
  e->func_id = func_id;
  e->depth = d;
  __u64 flags = submit_flags;
  if (wakeup_bytes) {
    __u64 unread = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA); /* includes this event */
    flags = unread >= wakeup_bytes && unread - EVENT_SPACE < wakeup_bytes ? BPF_RB_FORCE_WAKEUP
                                                                          : BPF_RB_NO_WAKEUP;
  }
  bpf_ringbuf_submit(e, flags);
  return 0;
}
