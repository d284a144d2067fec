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

/* How many times user space has registered a process in py_procs (one u32,
 * written after the py_procs update). A thread whose process was not in
 * py_procs keeps the count it looked at in its call stack and looks again
 * only once the count has moved: the calls of a process that runs no Python
 * cost one array read (which the verifier inlines) instead of a hash lookup. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u32);
} py_procs_added SEC(".maps");

/* Per-version offsets, filled by user space from src/layers/python/python_layouts.cpp. */
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
  __uint(max_entries, 8192);
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
  __uint(max_entries, 8192);
  __type(key, __u32);
  __type(value, __u64);
} py_tstate_misses SEC(".maps");

/* Code objects already described to user space, per process. LRU maps are
 * allocated whole when created (a 262,144-entry one took 0.7 s of system
 * time at every start); one evicted is described again, which is harmless.
 * A code object freed (a module's, once imported) leaves its address to the
 * next one allocated there: the sampler checks the name and file pointers it
 * was described with and describes the object again when they changed, or
 * every later function at that address would bear the first one's name. */
struct eacgm_py_code_key {
  __u32 tgid;
  __u32 pad;
  __u64 code;
};

struct eacgm_py_code_seen {
  __u64 fingerprint; /* co_filename ^ co_qualname pointers when described */
  __u8 kind;         /* EACGM_PY_CODE_* */
  __u8 pad[7];
};

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, struct eacgm_py_code_key);
  __type(value, struct eacgm_py_code_seen);
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

/* One step of the thread-state walk in a uprobe (the current task): run by
 * bpf_loop, so the verifier checks one step instead of every unrolled one,
 * which keeps the call handlers of every layer quick to load. */
struct eacgm_py_tstate_walk {
  const struct eacgm_py_layout* layout;
  __u64 ts;
  __u64 fsbase;
  __u32 tid;
  __u32 found;
};

static __attribute__((unused)) long eacgm_py_tstate_step(__u32 i, struct eacgm_py_tstate_walk* w) {
  if (!w->ts) return 1;
  if (eacgm_py_tstate_is(w->ts, w->layout, w->tid, w->fsbase, 0)) {
    w->found = 1;
    return 1;
  }
  w->ts = eacgm_py_word(w->ts, w->layout->tstate_next, 0);
  return 0;
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
  int found = 0;
  if (task) {
    /* The sampler: bpf_loop's callback could not take the task along. */
    for (int i = 0; i < EACGM_PY_MAX_THREADS && ts; i++) {
      if (eacgm_py_tstate_is(ts, l, tid, fsbase, task)) {
        found = 1;
        break;
      }
      ts = eacgm_py_word(ts, l->tstate_next, task);
    }
  } else {
    struct eacgm_py_tstate_walk w = {.layout = l, .ts = ts, .fsbase = fsbase, .tid = tid};
    bpf_loop(EACGM_PY_MAX_THREADS, eacgm_py_tstate_step, &w, 0);
    found = w.found;
    ts = w.ts;
  }
  if (found) {
    bpf_map_update_elem(&py_tstates, &tid, &ts, BPF_ANY);
    return ts;
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

/* What py_codes_seen says of a code object. */
#define EACGM_PY_CODE_USER 1
#define EACGM_PY_CODE_LIBRARY 2 /* the standard library's or an installed package's */

/* Is the file (a NUL-terminated co_filename) the standard library's or an
 * installed package's? The same rule as is_library_file() in
 * src/layers/python/python_profile.cpp: "<frozen ...>", ".../lib/python3...",
 * "...-packages/...". "<string>" and "<stdin>" are the user's. The scan runs
 * under bpf_loop: unrolled, its 240 steps cost every layer's call handler
 * 0.4 s of verification at load. */
struct eacgm_py_file_scan {
  const char* file;
  int library;
};

static __attribute__((unused)) long eacgm_py_file_scan_step(__u32 i, struct eacgm_py_file_scan* s) {
  if (i >= EACGM_PY_FILE_LEN - 16) return 1;
  const char* f = s->file + i;
  if (f[0] == 0) return 1;
  if (f[0] == '-' && f[1] == 'p' && f[2] == 'a' && f[3] == 'c' && f[4] == 'k' && f[5] == 'a' &&
      f[6] == 'g' && f[7] == 'e' && f[8] == 's' && f[9] == '/') {
    s->library = 1;
    return 1;
  }
  if (f[0] == '/' && f[1] == 'l' && f[2] == 'i' && f[3] == 'b' && f[4] == '/' && f[5] == 'p' &&
      f[6] == 'y' && f[7] == 't' && f[8] == 'h' && f[9] == 'o' && f[10] == 'n' && f[11] == '3') {
    s->library = 1;
    return 1;
  }
  return 0;
}

static __always_inline int eacgm_py_is_library_file(const char* f) {
  if (f[0] == '<') return f[1] == 'f' && f[2] == 'r' && f[3] == 'o' && f[4] == 'z';
  struct eacgm_py_file_scan s = {.file = f, .library = 0};
  bpf_loop(EACGM_PY_FILE_LEN - 16, eacgm_py_file_scan_step, &s, 0);
  return s.library;
}

/* The word at byte offset `at` (0, 8, 16 or 24) of four: by branches, as the
 * verifier refuses a read from the stack at a computed offset. */
static __always_inline __u64 eacgm_py_pick(const __u64* w, __u32 at) {
  if (at == 0) return w[0];
  if (at == 8) return w[1];
  if (at == 16) return w[2];
  return w[3];
}

/* A code object's name and file pointers, read in one go: in every CPython
 * layout co_filename, co_name and co_qualname are neighbours (within 24
 * bytes), and every traced call checks them (see eacgm_py_describe). */
static __always_inline void eacgm_py_code_names(__u64 code, const struct eacgm_py_layout* l,
                                                struct task_struct* task, __u64* name,
                                                __u64* file) {
  __u32 name_off = l->code_qualname != EACGM_PY_NONE ? l->code_qualname : l->code_name;
  __u32 lo = name_off < l->code_filename ? name_off : l->code_filename;
  __u64 words[4] = {};
  *name = 0;
  *file = 0;
  if (name_off - lo > 24 || l->code_filename - lo > 24) { /* a layout of another shape */
    *name = eacgm_py_word(code, name_off, task);
    *file = eacgm_py_word(code, l->code_filename, task);
    return;
  }
  if (!code || eacgm_py_read(words, sizeof(words), code + lo, task) != 0) return;
  *name = eacgm_py_pick(words, name_off - lo);
  *file = eacgm_py_pick(words, l->code_filename - lo);
}

/* Sends user space a code object's names and line table the first time this
 * process shows it, and says whether it is library code (EACGM_PY_CODE_*;
 * 0 when unknown: a full ring buffer only delays the description to the next
 * sight). An object seen before is described again when its address now holds
 * another code object: freed code is reused at once (a .pth file's exec'd
 * `<string>` module, then the script's own function at the same address), so
 * trusting the address alone charges calls to a dead function. */
static __always_inline __u8 eacgm_py_describe(__u32 tgid, __u64 code,
                                              const struct eacgm_py_layout* l,
                                              struct task_struct* task) {
  struct eacgm_py_code_key key = {.tgid = tgid, .code = code};
  struct eacgm_py_code_seen* known = bpf_map_lookup_elem(&py_codes_seen, &key);
  __u64 name = 0, file = 0;
  eacgm_py_code_names(code, l, task, &name, &file);
  if (known && known->fingerprint == (name ^ file)) return known->kind;
  struct eacgm_py_code* e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    eacgm_count_drop();
    return 0;
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
  eacgm_py_str(e->name, EACGM_PY_NAME_LEN, name, l, task);
  eacgm_py_str(e->file, EACGM_PY_FILE_LEN, file, l, task);
  __u64 table = eacgm_py_word(code, l->code_linetable, task);
  __u64 size = eacgm_py_word(table, l->bytes_size, task);
  e->linetable_len = size > 0xffffffffull ? 0xffffffffu : (__u32)size;
  if (size > EACGM_PY_LINETABLE_LEN) size = EACGM_PY_LINETABLE_LEN;
  if (size == 0 || eacgm_py_read(e->linetable, size, table + l->bytes_data, task) != 0)
    e->linetable_len = 0;
  struct eacgm_py_code_seen seen = {
      .fingerprint = name ^ file,
      .kind = eacgm_py_is_library_file(e->file) ? EACGM_PY_CODE_LIBRARY : EACGM_PY_CODE_USER};
  bpf_map_update_elem(&py_codes_seen, &key, &seen, BPF_ANY);
  bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
  return seen.kind;
}

/* eacgm_py_describe for the current task (a uprobe), as a global function:
 * the verifier checks a global function once, on its own, where an inlined
 * one is checked again for every state its caller reaches it in. Inlined in
 * eacgm_py_caller_step, the description's paths (two strings, the line
 * table, the library scan) multiplied with the walk's: call_entry took
 * 73,202 verified instructions and ~0.3 s to load per table layer; now 7,865
 * (bpftool -d prog loadall on a copy of the cuda object with py_attribution
 * set). It costs one BPF-to-BPF call per frame looked at. */
__attribute__((noinline)) int eacgm_py_describe_current(__u32 tgid, __u64 code,
                                                        const struct eacgm_py_layout* l) {
  if (!l) return 0; /* a global function's pointer arguments may be NULL */
  return eacgm_py_describe(tgid, code, l, 0);
}

/* Rodata of every layer object: tag calls with the caller's Python frame. */
const volatile __u8 py_attribution = 0;

/* Frames looked at for the caller's own code, innermost first. */
#define EACGM_PY_CALLER_FRAMES 8

struct eacgm_py_caller_walk {
  const struct eacgm_py_layout* layout;
  __u64 frame;
  __u64 code; /* the frame chosen so far */
  __u64 instr;
  __u32 tgid;
  __u32 pad;
};

/* One frame of eacgm_py_caller's walk, under bpf_loop (see eacgm_py_tstate_step). */
static __attribute__((unused)) long eacgm_py_caller_step(__u32 i, struct eacgm_py_caller_walk* w) {
  const struct eacgm_py_layout* l = w->layout;
  if (!w->frame) return 1;
  if (eacgm_py_is_code_frame(w->frame, l, 0)) {
    __u64 c = eacgm_py_word(w->frame, l->frame_code, 0);
    if (!c) return 1;
    __u64 at = eacgm_py_word(w->frame, l->frame_instr, 0);
    if (!w->code) { /* the innermost: the answer if all are library code */
      w->code = c;
      w->instr = at;
    }
    if (eacgm_py_describe_current(w->tgid, c, l) != EACGM_PY_CODE_LIBRARY) {
      w->code = c;
      w->instr = at;
      return 1;
    }
  }
  w->frame = eacgm_py_word(w->frame, l->frame_back, 0);
  return 0;
}

/* The Python frame behind a call (uprobe context): the innermost frame of the
 * calling thread that is not library code (a torch operator is attributed to
 * the training script's line, not to torch/nn/functional.py), or the
 * innermost frame when all of the first few are. Code object and
 * instruction word, both 0 when the thread runs no Python. `absent_at` is the
 * thread's memory of py_procs_added when its process was last not found. */
static __always_inline void eacgm_py_caller(__u64 id, __u32* absent_at, __u64* code, __u64* instr) {
  *code = 0;
  *instr = 0;
  if (!py_attribution) return;
  __u32 zero = 0;
  __u32* added = bpf_map_lookup_elem(&py_procs_added, &zero);
  if (!added) return;
  /* Read once, before the lookup: a registration racing it is seen at the next call. */
  __u32 now_added = *added;
  if (now_added == *absent_at) return;
  __u32 tgid = id >> 32;
  struct eacgm_py_proc* proc = bpf_map_lookup_elem(&py_procs, &tgid);
  if (!proc) {
    *absent_at = now_added;
    return;
  }
  __u32 idx = proc->layout;
  struct eacgm_py_layout* l = bpf_map_lookup_elem(&py_layouts, &idx);
  if (!l || !l->version) return;
  struct task_struct* cur = bpf_get_current_task_btf();
  __u64 ts = eacgm_py_thread_state(proc, l, (__u32)id, cur->thread.fsbase, 0);
  struct eacgm_py_caller_walk w = {
      .layout = l, .frame = eacgm_py_top_frame(ts, l, 0), .tgid = tgid};
  if (!w.frame) return;
  bpf_loop(EACGM_PY_CALLER_FRAMES, eacgm_py_caller_step, &w, 0);
  *code = w.code;
  *instr = w.instr;
}

#endif /* EACGM_PYTHON_WALK_BPF_H */
