/* Python layer: what Python code a target runs.
 *
 *   iter.s/task  py_sample: one thread's Python stack, for every thread of a
 *                registered interpreter, each time user space runs the
 *                iterator (its sampling rate). A task iterator reaches
 *                sleeping threads too, so the time is wall-clock time: a
 *                function blocked in I/O is seen as much as a busy one.
 *   usdt         python:function__return counts calls per function, in
 *                BPF; python:gc__start/gc__done time each collection. Only
 *                interpreters built with USDT probes have them (Debian's).
 *                function__entry is not used: on 3.11 it fires only when the
 *                eval loop is entered from C (cpython#98894).
 */
#include "bpf/common.bpf.h"
/* usdt.bpf.h needs vmlinux.h's types first. */
// clang-format off
#include <bpf/usdt.bpf.h>
// clang-format on

/* Calls per function, keyed by the C strings the USDT probe passes (they
 * live as long as the function's code object). */
struct eacgm_py_function_key {
  __u32 tgid;
  __u32 pad;
  __u64 file;
  __u64 name;
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __uint(max_entries, 65536);
  __type(key, struct eacgm_py_function_key);
  __type(value, __u64);
} py_calls SEC(".maps");

struct eacgm_py_gc_start {
  __u64 ts_ns;
  __s32 generation;
  __u32 pad;
};

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __type(value, struct eacgm_py_gc_start);
} py_gc_pending SEC(".maps");

/* The sample being built: on a per-CPU scratch (sleepable programs run with
 * migration disabled), then copied into the ring buffer whole. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct eacgm_py_sample);
} py_scratch SEC(".maps");

/* The frame walk runs under bpf_loop: the verifier checks one step, not
 * every unrolled one (which exceeds its budget). */
struct py_walk {
  struct task_struct* task;
  struct eacgm_py_layout* layout;
  __u64 frame;
  __u32 tgid;
  __u32 pad;
};

static long py_walk_step(__u32 i, struct py_walk* w) {
  __u32 zero = 0;
  struct eacgm_py_sample* e = bpf_map_lookup_elem(&py_scratch, &zero);
  if (!e || !w->frame) return 1;
  if (e->nframes >= EACGM_PY_MAX_FRAMES) {
    e->truncated = 1;
    return 1;
  }
  if (eacgm_py_is_code_frame(w->frame, w->layout, w->task)) {
    __u64 code = eacgm_py_word(w->frame, w->layout->frame_code, w->task);
    if (code) {
      __u32 n = e->nframes & (EACGM_PY_MAX_FRAMES - 1);
      e->frames[n].code = code;
      e->frames[n].instr = eacgm_py_word(w->frame, w->layout->frame_instr, w->task);
      e->nframes = n + 1;
    }
  }
  w->frame = eacgm_py_word(w->frame, w->layout->frame_back, w->task);
  return 0;
}

/* Names for code objects this process has not shown before, all of them, so
 * that every frame of the sample can be named (the timeline names a frame when
 * it enters the stack). After the first seconds almost every code object has
 * been described and this is one map lookup and two reads (whether the
 * address still holds the object described) per frame. */
static long py_describe_step(__u32 i, struct py_walk* w) {
  __u32 zero = 0;
  struct eacgm_py_sample* e = bpf_map_lookup_elem(&py_scratch, &zero);
  if (!e || i >= e->nframes) return 1;
  struct eacgm_py_code_key key = {.tgid = w->tgid,
                                  .code = e->frames[i & (EACGM_PY_MAX_FRAMES - 1)].code};
  eacgm_py_describe(w->tgid, key.code, w->layout, w->task);
  return 0;
}

SEC("iter.s/task")
int py_sample(struct bpf_iter__task* ctx) {
  struct task_struct* task = ctx->task;
  if (!task) return 0;
  __u32 tgid = task->tgid;
  __u32 tid = task->pid;
  struct eacgm_py_proc* proc = bpf_map_lookup_elem(&py_procs, &tgid);
  if (!proc) return 0;
  __u32 idx = proc->layout;
  struct eacgm_py_layout* l = bpf_map_lookup_elem(&py_layouts, &idx);
  if (!l || !l->version) return 0;
  __u64 ts = eacgm_py_thread_state(proc, l, tid, task->thread.fsbase, task);
  __u64 frame = eacgm_py_top_frame(ts, l, task);
  if (!frame) return 0; /* no Python on this thread now */
  __u32 zero = 0;
  struct eacgm_py_sample* e = bpf_map_lookup_elem(&py_scratch, &zero);
  if (!e) return 0;
  e->hdr.kind = EACGM_EV_PY_SAMPLE;
  e->hdr.tgid = tgid;
  e->hdr.tid = tid;
  e->hdr.layer = EACGM_LAYER_PYTHON;
  e->hdr.ts_ns = bpf_ktime_get_ns();
  /* TASK_RUNNING is 0; __TASK_STOPPED 0x4 and __TASK_TRACED 0x8; TASK_UNINTERRUPTIBLE 0x2 */
  __u32 state = task->__state;
  e->thread_state = state == 0           ? EACGM_PY_RUNNING
                    : (state & 0xc) != 0 ? EACGM_PY_STOPPED
                    : (state & 0x2) != 0 ? EACGM_PY_UNINTERRUPTIBLE
                                         : EACGM_PY_SLEEPING;
  e->pad = 0;
  e->voluntary_switches = task->nvcsw;
  /* A kernel without CONFIG_SCHED_INFO has no sched_info: the program still loads. */
  e->run_delay_ns = bpf_core_field_exists(task->sched_info) ? task->sched_info.run_delay : 0;
  e->truncated = 0;
  e->nframes = 0;
  struct py_walk w = {.task = task, .layout = l, .frame = frame, .tgid = tgid, .pad = 0};
  /* Shim frames (3.12+) take a step but no slot: twice the slots in steps. */
  bpf_loop(2 * EACGM_PY_MAX_FRAMES, py_walk_step, &w, 0);
  bpf_loop(EACGM_PY_MAX_FRAMES, py_describe_step, &w, 0);
  if (bpf_ringbuf_output(&events, e, sizeof(*e), BPF_RB_NO_WAKEUP) != 0) eacgm_count_drop();
  return 0;
}

/* Copies a C string argument of a USDT probe (the current task's memory). */
static __always_inline void copy_arg_str(char* dst, __u32 cap, __u64 src) {
  if (!src || bpf_probe_read_user_str(dst, cap, (const void*)src) < 0) {
    dst[0] = '?';
    dst[1] = 0;
  }
}

SEC("usdt")
int py_function_return(struct pt_regs* ctx) {
  __u64 id = bpf_get_current_pid_tgid();
  if (!eacgm_is_target(id >> 32)) return 0;
  long file = 0, name = 0;
  if (bpf_usdt_arg(ctx, 0, &file) != 0 || bpf_usdt_arg(ctx, 1, &name) != 0) return 0;
  struct eacgm_py_function_key key = {.tgid = id >> 32, .file = file, .name = name};
  __u64* count = bpf_map_lookup_elem(&py_calls, &key);
  if (count) {
    __sync_fetch_and_add(count, 1);
    return 0;
  }
  __u64 one = 1;
  if (bpf_map_update_elem(&py_calls, &key, &one, BPF_NOEXIST) != 0) {
    /* Another CPU inserted it first, or the map is full (then the call is lost). */
    count = bpf_map_lookup_elem(&py_calls, &key);
    if (count) __sync_fetch_and_add(count, 1);
    return 0;
  }
  struct eacgm_py_function* e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    /* Without its names the count cannot be reported: forget it, so the next
     * call tries again. */
    bpf_map_delete_elem(&py_calls, &key);
    eacgm_count_drop();
    return 0;
  }
  e->hdr.kind = EACGM_EV_PY_FUNCTION;
  e->hdr.tgid = id >> 32;
  e->hdr.tid = (__u32)id;
  e->hdr.layer = EACGM_LAYER_PYTHON;
  e->hdr.ts_ns = bpf_ktime_get_ns();
  e->file_ptr = file;
  e->name_ptr = name;
  copy_arg_str(e->name, sizeof(e->name), name);
  copy_arg_str(e->file, sizeof(e->file), file);
  bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
  return 0;
}

SEC("usdt")
int py_gc_start(struct pt_regs* ctx) {
  __u64 id = bpf_get_current_pid_tgid();
  if (!eacgm_is_target(id >> 32)) return 0;
  long generation = 0;
  if (bpf_usdt_arg(ctx, 0, &generation) != 0) generation = -1;
  struct eacgm_py_gc_start start = {.ts_ns = bpf_ktime_get_ns(), .generation = (__s32)generation};
  __u32 tid = (__u32)id;
  bpf_map_update_elem(&py_gc_pending, &tid, &start, BPF_ANY);
  return 0;
}

SEC("usdt")
int py_gc_done(struct pt_regs* ctx) {
  __u64 now = bpf_ktime_get_ns();
  __u64 id = bpf_get_current_pid_tgid();
  __u32 tid = (__u32)id;
  struct eacgm_py_gc_start* start = bpf_map_lookup_elem(&py_gc_pending, &tid);
  if (!start) return 0; /* not a target, or started before we attached */
  long collected = 0;
  if (bpf_usdt_arg(ctx, 0, &collected) != 0) collected = -1;
  struct eacgm_py_gc* e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    eacgm_count_drop();
    bpf_map_delete_elem(&py_gc_pending, &tid);
    return 0;
  }
  e->hdr.kind = EACGM_EV_PY_GC;
  e->hdr.tgid = id >> 32;
  e->hdr.tid = tid;
  e->hdr.layer = EACGM_LAYER_PYTHON;
  e->hdr.ts_ns = start->ts_ns;
  e->duration_ns = now - start->ts_ns;
  e->collected = collected;
  e->generation = start->generation;
  e->pad = 0;
  bpf_map_delete_elem(&py_gc_pending, &tid);
  bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
  return 0;
}
