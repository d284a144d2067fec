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

/* serve's notice of new processes. Without it, serve finds a job by scanning
 * /proc every half second, and a job's first calls come before that. With it,
 * ld.so's rendezvous in any process that is not a target yet is looked at:
 * once the loader's list of objects is consistent, if one of them is a file
 * whose name starts with one of user space's prefixes (libcudart.so,
 * libnccl.so, ...), the process becomes a target and is stopped like a
 * target's dlopen, before its constructors or first call run. User space
 * adopts it (or passes it over: another cgroup) and resumes it. */
const volatile __u8 notice_new = 0;
/* &_r_debug - &_dl_debug_state in ld.so: where the loader's list is, found
 * from the probed address (a uprobe handler sees the probed instruction's
 * address in ip). */
const volatile __s64 r_debug_from_probe = 0;
const volatile char notice_prefix[EACGM_NOTICE_PREFIXES][EACGM_NOTICE_PREFIX_LEN] = {};
/* serve --cgroup: only processes in that cgroup (or below) are noticed, so a
 * job elsewhere on the node is never stopped for a notice it would be passed
 * over at. User space puts the cgroup in notice_cgroup's slot 0. */
const volatile __u8 notice_in_cgroup = 0;
struct {
  __uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u32);
} notice_cgroup SEC(".maps");

/* Processes noticed once, by their start time (a pid is reused): never
 * looked at again. The taken are targets; the passed over are left alone for
 * good, and so are their children even when another agent resumed them
 * before user space passed them over (user space drops those). */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, __u64);
} noticed SEC(".maps");

struct eacgm_notice_name {
  char path[EACGM_NOTICE_NAME_LEN];
};
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct eacgm_notice_name);
} notice_name SEC(".maps");

struct eacgm_notice_walk {
  __u64 entry; /* the next struct link_map */
  struct eacgm_notice_name* name;
  __u32 base; /* where the file name starts in name->path */
  int found;
};

static long eacgm_notice_base_step(__u32 i, struct eacgm_notice_walk* w) {
  if (i >= EACGM_NOTICE_NAME_LEN) return 1;
  const char c = w->name->path[i];
  if (c == 0) return 1;
  if (c == '/') w->base = i + 1;
  return 0;
}

/* One object of the loader's list (glibc's struct link_map: l_name at 8,
 * l_next at 24), under bpf_loop. */
static long eacgm_notice_step(__u32 i, struct eacgm_notice_walk* w) {
  (void)i;
  __u64 name = 0, next = 0;
  if (!w->entry || bpf_probe_read_user(&name, sizeof(name), (void*)(w->entry + 8)) ||
      bpf_probe_read_user(&next, sizeof(next), (void*)(w->entry + 24)))
    return 1;
  w->entry = next;
  if (!name || bpf_probe_read_user_str(w->name->path, sizeof(w->name->path), (void*)name) <= 1)
    return 0;
  w->base = 0;
  bpf_loop(EACGM_NOTICE_NAME_LEN, eacgm_notice_base_step, w, 0);
  const __u32 base = w->base;
#pragma unroll
  for (int p = 0; p < EACGM_NOTICE_PREFIXES; ++p) {
    if (notice_prefix[p][0] == 0) continue;
    int same = 1;
#pragma unroll
    for (int k = 0; k < EACGM_NOTICE_PREFIX_LEN; ++k) {
      const char want = notice_prefix[p][k];
      if (want == 0) break;
      if (w->name->path[(base + k) & (EACGM_NOTICE_NAME_LEN - 1)] != want) {
        same = 0;
        break;
      }
    }
    if (same) {
      w->found = 1;
      return 1;
    }
  }
  return 0;
}

/* Whether the loader's list, now consistent, holds a file user space asked
 * to be told of. glibc's struct r_debug: r_map at 8, r_state at 24
 * (RT_CONSISTENT is 0). */
static __always_inline int eacgm_maps_noticed_library(struct pt_regs* ctx) {
  const __u64 r_debug = PT_REGS_IP(ctx) + r_debug_from_probe;
  int state = -1;
  __u64 head = 0;
  if (bpf_probe_read_user(&state, sizeof(state), (void*)(r_debug + 24)) || state != 0) return 0;
  if (bpf_probe_read_user(&head, sizeof(head), (void*)(r_debug + 8))) return 0;
  __u32 zero = 0;
  struct eacgm_notice_walk w = {.entry = head, .name = 0, .base = 0, .found = 0};
  w.name = bpf_map_lookup_elem(&notice_name, &zero);
  if (!w.name) return 0;
  bpf_loop(EACGM_NOTICE_MAX_OBJECTS, eacgm_notice_step, &w, 0);
  return w.found;
}

/* ld.so calls _dl_debug_state() (a breakpoint for debuggers) after it has
 * mapped the objects of dlopen() and at start-up, before relocating them or
 * running their constructors. Stopping the target there lets user space
 * attach to any newly mapped library before its first call; user space
 * resumes it with SIGCONT. */
SEC("uprobe")
int BPF_KPROBE(on_dl_debug_state) {
  __u64 id = bpf_get_current_pid_tgid();
  __u32 tgid = id >> 32;
  __u32 kind = EACGM_EV_DL_STOP;
  if (!eacgm_is_target(tgid)) {
    if (!notice_new) return 0;
    if (notice_in_cgroup && bpf_current_task_under_cgroup(&notice_cgroup, 0) != 1) return 0;
    struct task_struct* task = bpf_get_current_task_btf();
    const __u64 started = BPF_CORE_READ(task, group_leader, start_time);
    const __u64* seen = bpf_map_lookup_elem(&noticed, &tgid);
    if ((seen && *seen == started) || !eacgm_maps_noticed_library(ctx)) return 0;
    if (bpf_map_update_elem(&noticed, &tgid, &started, BPF_ANY)) return 0;
    __u8 one = 1;
    /* Another thread of it got there first. */
    if (bpf_map_update_elem(&targets, &tgid, &one, BPF_NOEXIST)) return 0;
    kind = EACGM_EV_DL_NOTICE;
  }
  if (stop_on_dlopen)
    bpf_send_signal_thread(EACGM_SIGSTOP); /* stops at once: see torch.bpf.c */
  else if (kind == EACGM_EV_DL_STOP)
    return 0;
  /* The target waits: the reader is woken at once, not at its next poll (call events before
   * this one never wake it, so the adaptive wake-up would not either). */
  emit_proc(kind, tgid, (__u32)id, 0, 0, BPF_RB_FORCE_WAKEUP);
  return 0;
}
