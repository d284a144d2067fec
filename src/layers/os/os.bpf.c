/* The os layer: why a traced process stopped or stalled, seen from the
 * kernel. Tracepoints only (no kprobes or fentry on these machines):
 *
 *   tp_btf/signal_generate  every signal sent to a target, with the sender
 *   tp_btf/mark_victim      the OOM killer chose a target: its memory, its cgroup
 *   syscalls mmap/munmap/mremap  entry and exit paired per thread: one event per call
 *   syscalls ioctl          timed only on the char devices user space lists
 *
 * The per-syscall tracepoints (not raw_syscalls) keep the cost on the
 * calls we want: every other syscall of the machine runs no program.
 */
#include "bpf/common.bpf.h"

#define EACGM_S_IFMT 0170000
#define EACGM_S_IFCHR 0020000
#define EACGM_SI_USER 0
#define EACGM_SI_KERNEL 0x80
#define EACGM_PAGE_SHIFT 12 /* x86-64 */
#define EACGM_MAX_ERRNO 4095

/* x86-64 syscall numbers: tags for the pending entry of a thread. */
#define EACGM_NR_MMAP 9
#define EACGM_NR_MUNMAP 11
#define EACGM_NR_IOCTL 16
#define EACGM_NR_MREMAP 25

/* mmap and ioctl events can come by the hundred thousand a second; waking
 * the reader for each costs more than the event (measured: a watched ioctl
 * went from +5 us to +1 us). The reader polls every EACGM_READER_POLL_MS, and any
 * other event (an exit, a signal) wakes it and drains these first, in order. */
#define EACGM_RB_QUIET BPF_RB_NO_WAKEUP

/* Char devices whose ioctls are timed, by kernel dev_t (major << 20 | minor).
 * User space fills it from the --ioctl-devices pattern and refreshes it as
 * device files appear (nvidia-uvm is created by the first CUDA process). */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 1024);
  __type(key, __u32);
  __type(value, __u8);
} ioctl_devices SEC(".maps");

/* A syscall entered by a target thread and not yet returned. Syscalls do
 * not nest, so one slot per thread is the whole stack. LRU: a thread killed
 * inside a syscall (the OOM killer's victim in a MAP_POPULATE) never
 * reaches sys_exit, and its slot must not live forever. */
struct os_pending {
  __u64 start_ns;
  __u64 args[5];
  __u32 nr;
  __u32 rdev;
};

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, struct os_pending);
} os_pending SEC(".maps");

/* kernfs_node's parent before it became __parent (6.15). */
struct kernfs_node___old {
  struct kernfs_node* parent;
} __attribute__((preserve_access_index));

static __always_inline struct kernfs_node* kn_parent(struct kernfs_node* kn) {
  if (bpf_core_field_exists(kn->__parent)) return BPF_CORE_READ(kn, __parent);
  return BPF_CORE_READ((struct kernfs_node___old*)kn, parent);
}

/* Copies the syscall's first `nargs` arguments (a constant). A syscall's
 * tracepoint record holds only its own arguments, and the kernel refuses
 * to attach a program that reads past the record (munmap has 2, ioctl 3). */
static __always_inline int remember(struct trace_event_raw_sys_enter* ctx, __u32 nr, __u32 tid,
                                    __u32 rdev, int nargs) {
  struct os_pending p = {};
  p.start_ns = bpf_ktime_get_ns();
  /* One load per argument at a constant offset: the verifier refuses a
   * context pointer that was moved (which an unrolled loop produces). */
  p.args[0] = ctx->args[0];
  p.args[1] = ctx->args[1];
  if (nargs > 2) p.args[2] = ctx->args[2];
  if (nargs > 3) p.args[3] = ctx->args[3];
  if (nargs > 4) p.args[4] = ctx->args[4];
  p.nr = nr;
  p.rdev = rdev;
  bpf_map_update_elem(&os_pending, &tid, &p, BPF_ANY);
  return 0;
}

static __always_inline int enter(struct trace_event_raw_sys_enter* ctx, __u32 nr, int nargs) {
  __u64 id = bpf_get_current_pid_tgid();
  if (!eacgm_is_target(id >> 32)) return 0;
  return remember(ctx, nr, (__u32)id, 0, nargs);
}

static __always_inline int is_error(__s64 ret) { return (__u64)ret >= (__u64)-EACGM_MAX_ERRNO; }

static __always_inline int exit_mmap(struct trace_event_raw_sys_exit* ctx, __u32 nr) {
  __u64 now = bpf_ktime_get_ns();
  __u64 id = bpf_get_current_pid_tgid();
  __u32 tid = (__u32)id;
  struct os_pending* p = bpf_map_lookup_elem(&os_pending, &tid);
  if (!p) return 0;
  if (p->nr != nr) {
    /* entered before we attached, or a stale slot: never misattribute */
    bpf_map_delete_elem(&os_pending, &tid);
    return 0;
  }
  struct eacgm_mmap* e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    eacgm_count_drop();
    bpf_map_delete_elem(&os_pending, &tid);
    return 0;
  }
  __s64 ret = ctx->ret;
  e->hdr.kind = EACGM_EV_MMAP;
  e->hdr.tgid = id >> 32;
  e->hdr.tid = tid;
  e->hdr.layer = EACGM_LAYER_OS;
  e->hdr.ts_ns = p->start_ns;
  e->duration_ns = now - p->start_ns;
  e->ret = ret;
  e->prot = 0;
  e->flags = 0;
  e->fd = -1;
  e->old_addr = 0;
  e->old_len = 0;
  if (nr == EACGM_NR_MMAP) {
    e->op = EACGM_MMAP;
    e->addr = is_error(ret) ? 0 : (__u64)ret;
    e->len = p->args[1];
    e->old_addr = p->args[0];
    e->prot = (__u32)p->args[2];
    e->flags = (__u32)p->args[3];
    e->fd = (__s32)p->args[4];
  } else if (nr == EACGM_NR_MUNMAP) {
    e->op = EACGM_MUNMAP;
    e->addr = p->args[0];
    e->len = p->args[1];
  } else {
    e->op = EACGM_MREMAP;
    e->addr = is_error(ret) ? 0 : (__u64)ret;
    e->old_addr = p->args[0];
    e->old_len = p->args[1];
    e->len = p->args[2];
    e->flags = (__u32)p->args[3];
  }
  bpf_ringbuf_submit(e, EACGM_RB_QUIET);
  bpf_map_delete_elem(&os_pending, &tid);
  return 0;
}

SEC("tracepoint/syscalls/sys_enter_mmap")
int on_mmap_enter(struct trace_event_raw_sys_enter* ctx) { return enter(ctx, EACGM_NR_MMAP, 5); }

SEC("tracepoint/syscalls/sys_exit_mmap")
int on_mmap_exit(struct trace_event_raw_sys_exit* ctx) { return exit_mmap(ctx, EACGM_NR_MMAP); }

SEC("tracepoint/syscalls/sys_enter_munmap")
int on_munmap_enter(struct trace_event_raw_sys_enter* ctx) {
  return enter(ctx, EACGM_NR_MUNMAP, 2);
}

SEC("tracepoint/syscalls/sys_exit_munmap")
int on_munmap_exit(struct trace_event_raw_sys_exit* ctx) { return exit_mmap(ctx, EACGM_NR_MUNMAP); }

SEC("tracepoint/syscalls/sys_enter_mremap")
int on_mremap_enter(struct trace_event_raw_sys_enter* ctx) {
  return enter(ctx, EACGM_NR_MREMAP, 5);
}

SEC("tracepoint/syscalls/sys_exit_mremap")
int on_mremap_exit(struct trace_event_raw_sys_exit* ctx) { return exit_mmap(ctx, EACGM_NR_MREMAP); }

/* The char device behind the calling task's descriptor `fd` (kernel dev_t),
 * or 0 when it is not an open char device. Resolved here rather than from
 * /proc/PID/fd in user space: no race with close(), descriptors opened
 * before tracing began are covered, and ioctls on other files (a tty, a
 * socket) never leave the kernel. */
static __always_inline __u32 fd_char_device(__s32 fd) {
  if (fd < 0) return 0;
  struct task_struct* task = (struct task_struct*)bpf_get_current_task();
  struct fdtable* fdt = BPF_CORE_READ(task, files, fdt);
  if (!fdt) return 0;
  __u32 max_fds = BPF_CORE_READ(fdt, max_fds);
  if ((__u32)fd >= max_fds) return 0;
  struct file** fds = BPF_CORE_READ(fdt, fd);
  struct file* file = 0;
  if (bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]) != 0 || !file) return 0;
  struct inode* inode = BPF_CORE_READ(file, f_inode);
  if (!inode) return 0;
  __u16 mode = BPF_CORE_READ(inode, i_mode);
  if ((mode & EACGM_S_IFMT) != EACGM_S_IFCHR) return 0;
  return BPF_CORE_READ(inode, i_rdev);
}

SEC("tracepoint/syscalls/sys_enter_ioctl")
int on_ioctl_enter(struct trace_event_raw_sys_enter* ctx) {
  __u64 id = bpf_get_current_pid_tgid();
  if (!eacgm_is_target(id >> 32)) return 0;
  __u32 rdev = fd_char_device((__s32)ctx->args[0]);
  if (!rdev || !bpf_map_lookup_elem(&ioctl_devices, &rdev)) return 0;
  return remember(ctx, EACGM_NR_IOCTL, (__u32)id, rdev, 3);
}

SEC("tracepoint/syscalls/sys_exit_ioctl")
int on_ioctl_exit(struct trace_event_raw_sys_exit* ctx) {
  __u64 now = bpf_ktime_get_ns();
  __u64 id = bpf_get_current_pid_tgid();
  __u32 tid = (__u32)id;
  struct os_pending* p = bpf_map_lookup_elem(&os_pending, &tid);
  if (!p) return 0;
  if (p->nr != EACGM_NR_IOCTL) {
    bpf_map_delete_elem(&os_pending, &tid);
    return 0;
  }
  struct eacgm_ioctl* e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    eacgm_count_drop();
    bpf_map_delete_elem(&os_pending, &tid);
    return 0;
  }
  e->hdr.kind = EACGM_EV_IOCTL;
  e->hdr.tgid = id >> 32;
  e->hdr.tid = tid;
  e->hdr.layer = EACGM_LAYER_OS;
  e->hdr.ts_ns = p->start_ns;
  e->duration_ns = now - p->start_ns;
  e->fd = (__s32)p->args[0];
  e->request = p->args[1];
  e->arg = p->args[2];
  e->ret = ctx->ret;
  e->rdev = p->rdev;
  bpf_ringbuf_submit(e, EACGM_RB_QUIET);
  bpf_map_delete_elem(&os_pending, &tid);
  return 0;
}

/* Every signal generated for a target. The sender is `current`: for
 * kill(2), tgkill(2) and sigqueue(3) that is the process that called it;
 * for signals the kernel raises (SI_KERNEL, fault codes > 0) it is whoever
 * was running, which user space does not present as a sender. */
SEC("tp_btf/signal_generate")
int BPF_PROG(on_signal_generate, int sig, struct kernel_siginfo* info, struct task_struct* task,
             int group, int result) {
  __u32 tgid = BPF_CORE_READ(task, tgid);
  if (!eacgm_is_target(tgid)) return 0;
  struct eacgm_signal* e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    eacgm_count_drop();
    return 0;
  }
  __u64 id = bpf_get_current_pid_tgid();
  e->hdr.kind = EACGM_EV_SIGNAL;
  e->hdr.tgid = tgid;
  e->hdr.tid = BPF_CORE_READ(task, pid);
  e->hdr.layer = EACGM_LAYER_OS;
  e->hdr.ts_ns = bpf_ktime_get_ns();
  e->sig = sig;
  /* SEND_SIG_NOINFO (0) and SEND_SIG_PRIV (1) are not pointers: the
   * tracepoint's own fast-assign maps them the same way. */
  if ((unsigned long)info == 0)
    e->code = EACGM_SI_USER;
  else if ((unsigned long)info == 1)
    e->code = EACGM_SI_KERNEL;
  else
    e->code = BPF_CORE_READ(info, si_code);
  e->result = result;
  e->group = group != 0;
  e->sender_tgid = id >> 32;
  e->sender_tid = (__u32)id;
  bpf_get_current_comm(e->sender_comm, sizeof(e->sender_comm));
  bpf_ringbuf_submit(e, 0);
  return 0;
}

/* The cgroup that charges the task's memory: the memory controller's
 * (a v1 hierarchy on hybrid systems), or the v2 cgroup without one. */
static __always_inline struct cgroup* memory_cgroup(struct task_struct* task) {
  struct css_set* cgroups = BPF_CORE_READ(task, cgroups);
  if (!cgroups) return 0;
  if (bpf_core_enum_value_exists(enum cgroup_subsys_id, memory_cgrp_id)) {
    __u32 index = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
    struct cgroup_subsys_state* css = 0;
    void* slot = (void*)cgroups + bpf_core_field_offset(struct css_set, subsys) +
                 (index & 15) * sizeof(void*);
    if (bpf_probe_read_kernel(&css, sizeof(css), slot) == 0 && css) {
      struct cgroup* cg = BPF_CORE_READ(css, cgroup);
      if (cg) return cg;
    }
  }
  return BPF_CORE_READ(cgroups, dfl_cgrp);
}

SEC("tp_btf/mark_victim")
int BPF_PROG(on_mark_victim, struct task_struct* task, __u32 uid) {
  __u32 tgid = BPF_CORE_READ(task, tgid);
  if (!eacgm_is_target(tgid)) return 0;
  struct eacgm_oom* e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    eacgm_count_drop();
    return 0;
  }
  __u64 id = bpf_get_current_pid_tgid();
  e->hdr.kind = EACGM_EV_OOM_KILL;
  e->hdr.tgid = tgid;
  e->hdr.tid = BPF_CORE_READ(task, pid);
  e->hdr.layer = EACGM_LAYER_OS;
  e->hdr.ts_ns = bpf_ktime_get_ns();
  e->uid = uid;
  e->oom_score_adj = BPF_CORE_READ(task, signal, oom_score_adj);
  e->killer_tgid = id >> 32;
  bpf_get_current_comm(e->killer_comm, sizeof(e->killer_comm));
  BPF_CORE_READ_STR_INTO(&e->comm, task, comm);

  /* The same counters the tracepoint's own format prints
   * (get_mm_counter: the percpu counter's central value). */
  e->total_vm_bytes = 0;
  e->anon_rss_bytes = 0;
  e->file_rss_bytes = 0;
  e->shmem_rss_bytes = 0;
  struct mm_struct* mm = BPF_CORE_READ(task, mm);
  if (mm) {
    e->total_vm_bytes = BPF_CORE_READ(mm, total_vm) << EACGM_PAGE_SHIFT;
    __s64 anon = BPF_CORE_READ(mm, rss_stat[MM_ANONPAGES].count);
    __s64 file = BPF_CORE_READ(mm, rss_stat[MM_FILEPAGES].count);
    __s64 shmem = BPF_CORE_READ(mm, rss_stat[MM_SHMEMPAGES].count);
    e->anon_rss_bytes = anon > 0 ? (__u64)anon << EACGM_PAGE_SHIFT : 0;
    e->file_rss_bytes = file > 0 ? (__u64)file << EACGM_PAGE_SHIFT : 0;
    e->shmem_rss_bytes = shmem > 0 ? (__u64)shmem << EACGM_PAGE_SHIFT : 0;
  }

  e->cgroup_id = 0;
  e->cgroup_level = 0;
  e->cgroup_hierarchy = 0;
  e->cgroup_names = 0;
  struct cgroup* cg = memory_cgroup(task);
  if (cg) {
    e->cgroup_level = BPF_CORE_READ(cg, level);
    e->cgroup_hierarchy = BPF_CORE_READ(cg, root, hierarchy_id);
    struct kernfs_node* kn = BPF_CORE_READ(cg, kn);
    e->cgroup_id = BPF_CORE_READ(kn, id);
    /* Path components from the leaf up; the root's own name is not part
     * of the path. Deeper paths lose their top (user space says so). */
#pragma unroll
    for (int i = 0; i < EACGM_CGROUP_DEPTH; i++) {
      if (!kn) break;
      struct kernfs_node* parent = kn_parent(kn);
      if (!parent) break;
      const char* name = BPF_CORE_READ(kn, name);
      bpf_probe_read_kernel_str(e->cgroup[i], EACGM_CGROUP_NAME_LEN, name);
      e->cgroup_names = i + 1;
      kn = parent;
    }
  }
  bpf_ringbuf_submit(e, 0);
  return 0;
}
