/* Target tracking shared by every layer: which processes are traced, their
 * forks, execs and exits, and the stop that lets user space attach probes to
 * a library a target has just mapped before any of its code runs. */
#include "bpf/common.bpf.h"

#define EACGM_SIGSTOP 19

/* Set by user space between open and load. */
const volatile __u8 stop_on_dlopen = 1;

/* `wakeup`: 0 wakes the reader when it has caught up, BPF_RB_FORCE_WAKEUP always (for a
 * target that waits for the reader). */
static __always_inline void emit_proc(__u32 kind, __u32 tgid, __u32 tid, __u32 ppid,
                                      __s32 exit_code, __u64 wakeup) {
  struct eacgm_proc* e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    eacgm_count_drop();
    return;
  }
  e->hdr.kind = kind;
  e->hdr.tgid = tgid;
  e->hdr.tid = tid;
  e->hdr.layer = 0;
  e->hdr.ts_ns = bpf_ktime_get_ns();
  e->ppid = ppid;
  e->exit_code = exit_code;
  bpf_get_current_comm(e->comm, sizeof(e->comm));
  bpf_ringbuf_submit(e, wakeup);
}

/* Children of targets are targets: a launcher's ranks, a data loader's workers. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct* parent, struct task_struct* child) {
  __u32 ptgid = BPF_CORE_READ(parent, tgid);
  __u32 ctgid = BPF_CORE_READ(child, tgid);
  __u32 cpid = BPF_CORE_READ(child, pid);
  if (cpid != ctgid) return 0; /* a new thread, not a new process */
  if (!eacgm_is_target(ptgid)) return 0;
  __u8 one = 1;
  bpf_map_update_elem(&targets, &ctgid, &one, BPF_ANY);
  emit_proc(EACGM_EV_PROC_FORK, ctgid, cpid, ptgid, 0, 0);
  return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct* p) {
  __u32 tgid = BPF_CORE_READ(p, tgid);
  if (!eacgm_is_target(tgid)) return 0;
  emit_proc(EACGM_EV_PROC_EXEC, tgid, BPF_CORE_READ(p, pid), 0, 0, 0);
  return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct* p) {
  __u32 tgid = BPF_CORE_READ(p, tgid);
  __u32 tid = BPF_CORE_READ(p, pid);
  if (!eacgm_is_target(tgid)) return 0;
  /* The last thread out reports the process's exit; the group's exit code
   * is in every thread's exit_code by then. */
  if (BPF_CORE_READ(p, signal, live.counter) != 0) return 0;
  emit_proc(EACGM_EV_PROC_EXIT, tgid, tid, 0, BPF_CORE_READ(p, exit_code), 0);
  bpf_map_delete_elem(&targets, &tgid);
  return 0;
}

/* ld.so calls _dl_debug_state() (a breakpoint for debuggers) after it has
 * mapped the objects of dlopen() and at start-up, before relocating them or
 * running their constructors. Stopping the target there lets user space
 * attach to any newly mapped library before its first call; user space
 * resumes it with SIGCONT. */
SEC("uprobe")
int BPF_KPROBE(on_dl_debug_state) {
  __u64 id = bpf_get_current_pid_tgid();
  if (!stop_on_dlopen || !eacgm_is_target(id >> 32)) return 0;
  bpf_send_signal_thread(EACGM_SIGSTOP); /* this thread stops at once: see torch.bpf.c */
  /* The target waits: the reader is woken at once, not at its next poll (call events before
   * this one never wake it, so the adaptive wake-up would not either). */
  emit_proc(EACGM_EV_DL_STOP, id >> 32, (__u32)id, 0, 0, BPF_RB_FORCE_WAKEUP);
  return 0;
}
