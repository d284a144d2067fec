/* Walking CPython's own structures from BPF: which thread state belongs to a
 * thread, and that thread's frames. Included by common.bpf.h, because every
 * layer's call handler may tag its event with the caller's innermost Python
 * frame, and used whole by the python layer's stack sampler.
 *
 * The same walk runs in two contexts: a uprobe, where the thread is the
 * current task (bpf_probe_read_user), and the sleepable task iterator, which
 * samples any thread of a target, running or not (bpf_copy_from_user_task).
 * `task` is NULL in the first; every function is __always_inline, so each
 * program keeps only the read it may call.
 */
#ifndef EACGM_PYTHON_WALK_BPF_H
#define EACGM_PYTHON_WALK_BPF_H

/* Traced processes that run CPython (tgid -> where its runtime is). */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, struct eacgm_py_proc);
} py_procs SEC(".maps");

/* Per-version offsets, filled by user space from src/python/python_layouts.cpp. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, EACGM_PY_MAX_LAYOUTS);
  __type(key, __u32);
  __type(value, struct eacgm_py_layout);
} py_layouts SEC(".maps");

/* tid -> its PyThreadState, found once by walking the interpreter's thread
 * list and re-checked on every use (a thread state is freed when its thread
 * ends, and tids are reused). */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 65536);
  __type(key, __u32);
  __type(value, __u64);
} py_tstates SEC(".maps");

/* tid -> when its thread was last found to have no thread state: a thread
 * that never runs Python (a CUDA driver thread, a C++ worker) is looked for
 * five times a second, not on every sample or call. A thread that starts
 * running Python loses at most that much of its first samples. */
#define EACGM_PY_MISS_RETRY_NS 200000000ull

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 65536);
  __type(key, __u32);
  __type(value, __u64);
} py_tstate_misses SEC(".maps");

/* Code objects already described to user space, per process. */
struct eacgm_py_code_key {
  __u32 tgid;
  __u32 pad;
  __u64 code;
};

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 262144);
  __type(key, struct eacgm_py_code_key);
  __type(value, __u8);
} py_codes_seen SEC(".maps");

static __always_inline long eacgm_py_read(void* dst, __u32 size, __u64 src,
                                          struct task_struct* task) {
  if (task) return bpf_copy_from_user_task(dst, size, (const void*)src, task, 0);
  return bpf_probe_read_user(dst, size, (const void*)src);
}

/* The 8-byte word at base + off; 0 when unreadable or the field is absent. */
static __always_inline __u64 eacgm_py_word(__u64 base, __u32 off, struct task_struct* task) {
  __u64 v = 0;
  if (!base || off == EACGM_PY_NONE) return 0;
  if (eacgm_py_read(&v, sizeof(v), base + off, task) != 0) return 0;
  return v;
}

/* Does thread state `ts` belong to the thread (tid, fs base)? 3.11+ record
 * the kernel tid; before that only pthread_self(), which on x86-64 glibc is
 * the thread pointer, i.e. the fs base. */
static __always_inline int eacgm_py_tstate_is(__u64 ts, const struct eacgm_py_layout* l, __u32 tid,
                                              __u64 fsbase, struct task_struct* task) {
  if (l->tstate_native_thread_id != EACGM_PY_NONE)
    return eacgm_py_word(ts, l->tstate_native_thread_id, task) == tid;
  return fsbase && eacgm_py_word(ts, l->tstate_thread_id, task) == fsbase;
}

/* The thread's PyThreadState, or 0 when it has none (a thread that never
 * ran Python). */
static __always_inline __u64 eacgm_py_thread_state(const struct eacgm_py_proc* proc,
                                                   const struct eacgm_py_layout* l, __u32 tid,
                                                   __u64 fsbase, struct task_struct* task) {
  __u64* cached = bpf_map_lookup_elem(&py_tstates, &tid);
  if (cached && *cached && eacgm_py_tstate_is(*cached, l, tid, fsbase, task)) return *cached;
  __u64 now = bpf_ktime_get_ns();
  __u64* missed = bpf_map_lookup_elem(&py_tstate_misses, &tid);
  if (missed && now - *missed < EACGM_PY_MISS_RETRY_NS) return 0;
  __u64 interp = eacgm_py_word(proc->runtime, l->runtime_interpreters_head, task);
  __u64 ts = eacgm_py_word(interp, l->interp_threads_head, task);
  if (!ts) return 0; /* the interpreter is not initialised yet: nothing to remember */
  for (int i = 0; i < EACGM_PY_MAX_THREADS && ts; i++) {
    if (eacgm_py_tstate_is(ts, l, tid, fsbase, task)) {
      bpf_map_update_elem(&py_tstates, &tid, &ts, BPF_ANY);
      return ts;
    }
    ts = eacgm_py_word(ts, l->tstate_next, task);
  }
  bpf_map_update_elem(&py_tstate_misses, &tid, &now, BPF_ANY);
  return 0;
}

/* The thread's innermost frame (PyFrameObject or _PyInterpreterFrame). */
static __always_inline __u64 eacgm_py_top_frame(__u64 ts, const struct eacgm_py_layout* l,
                                                struct task_struct* task) {
  __u64 frame = eacgm_py_word(ts, l->tstate_frame, task);
  if (l->cframe_current_frame != EACGM_PY_NONE)
    frame = eacgm_py_word(frame, l->cframe_current_frame, task);
  return frame;
}

/* Is this frame Python code (not a C-stack shim frame of 3.12+)? */
static __always_inline int eacgm_py_is_code_frame(__u64 frame, const struct eacgm_py_layout* l,
                                                  struct task_struct* task) {
  if (l->frame_owner == EACGM_PY_NONE) return 1;
  __u8 owner = 0;
  if (eacgm_py_read(&owner, sizeof(owner), frame + l->frame_owner, task) != 0) return 0;
  return owner != l->frame_owner_cstack;
}

/* Copies a str object's text into dst (NUL-terminated): compact ASCII
 * strings only, which names and paths almost always are; others read "?". */
static __always_inline void eacgm_py_str(char* dst, __u32 cap, __u64 obj,
                                         const struct eacgm_py_layout* l,
                                         struct task_struct* task) {
  dst[0] = '?';
  dst[1] = 0;
  if (!obj) return;
  __u32 state = 0;
  if (eacgm_py_read(&state, sizeof(state), obj + l->unicode_state, task) != 0) return;
  if (!(state & (1u << 5)) || !(state & (1u << 6))) return; /* not compact ASCII */
  __u64 len = eacgm_py_word(obj, 16, task);                 /* PyASCIIObject.length */
  if (len == 0) {
    dst[0] = 0;
    return;
  }
  if (len > cap - 1) len = cap - 1;
  if (eacgm_py_read(dst, len, obj + l->unicode_ascii_data, task) != 0) {
    dst[0] = '?';
    dst[1] = 0;
    return;
  }
  dst[len] = 0;
}

/* Sends user space a code object's names and line table the first time this
 * process shows it. A full ring buffer only delays that to the next sight. */
static __always_inline void eacgm_py_describe(__u32 tgid, __u64 code,
                                              const struct eacgm_py_layout* l,
                                              struct task_struct* task) {
  struct eacgm_py_code_key key = {.tgid = tgid, .code = code};
  if (bpf_map_lookup_elem(&py_codes_seen, &key)) return;
  struct eacgm_py_code* e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    eacgm_count_drop();
    return;
  }
  e->hdr.kind = EACGM_EV_PY_CODE;
  e->hdr.tgid = tgid;
  e->hdr.tid = 0;
  e->hdr.layer = EACGM_LAYER_PYTHON;
  e->hdr.ts_ns = bpf_ktime_get_ns();
  e->code = code;
  __u32 first = 0;
  if (eacgm_py_read(&first, sizeof(first), code + l->code_firstlineno, task) != 0) first = 0;
  e->firstlineno = first;
  __u32 name_off = l->code_qualname != EACGM_PY_NONE ? l->code_qualname : l->code_name;
  eacgm_py_str(e->name, EACGM_PY_NAME_LEN, eacgm_py_word(code, name_off, task), l, task);
  eacgm_py_str(e->file, EACGM_PY_FILE_LEN, eacgm_py_word(code, l->code_filename, task), l, task);
  __u64 table = eacgm_py_word(code, l->code_linetable, task);
  __u64 size = eacgm_py_word(table, l->bytes_size, task);
  e->linetable_len = size > 0xffffffffull ? 0xffffffffu : (__u32)size;
  if (size > EACGM_PY_LINETABLE_LEN) size = EACGM_PY_LINETABLE_LEN;
  if (size == 0 || eacgm_py_read(e->linetable, size, table + l->bytes_data, task) != 0)
    e->linetable_len = 0;
  __u8 one = 1;
  bpf_map_update_elem(&py_codes_seen, &key, &one, BPF_ANY);
  bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/* Rodata of every layer object: tag calls with the caller's Python frame. */
const volatile __u8 py_attribution = 0;

/* The calling thread's innermost Python frame (uprobe context), for a call
 * event: code object and instruction word, both 0 when there is none. */
static __always_inline void eacgm_py_caller(__u64 id, __u64* code, __u64* instr) {
  *code = 0;
  *instr = 0;
  if (!py_attribution) return;
  __u32 tgid = id >> 32;
  struct eacgm_py_proc* proc = bpf_map_lookup_elem(&py_procs, &tgid);
  if (!proc) return;
  __u32 idx = proc->layout;
  struct eacgm_py_layout* l = bpf_map_lookup_elem(&py_layouts, &idx);
  if (!l || !l->version) return;
  struct task_struct* cur = bpf_get_current_task_btf();
  __u64 ts = eacgm_py_thread_state(proc, l, (__u32)id, cur->thread.fsbase, 0);
  __u64 frame = eacgm_py_top_frame(ts, l, 0);
  for (int i = 0; i < 4 && frame; i++) {
    if (eacgm_py_is_code_frame(frame, l, 0)) {
      __u64 c = eacgm_py_word(frame, l->frame_code, 0);
      if (!c) return;
      *code = c;
      *instr = eacgm_py_word(frame, l->frame_instr, 0);
      eacgm_py_describe(tgid, c, l, 0);
      return;
    }
    frame = eacgm_py_word(frame, l->frame_back, 0);
  }
}

#endif /* EACGM_PYTHON_WALK_BPF_H */
