/* Maps and helpers every BPF layer shares.
 *
 * Each layer is its own object file, but all of them must see one target set,
 * one ring buffer, one drop counter and one per-thread call stack. Each object
 * declares the maps identically here; user space creates them once (with the
 * core object) and hands the same file descriptors to every other object with
 * bpf_map__reuse_fd() before load.
 */
#ifndef EACGM_COMMON_BPF_H
#define EACGM_COMMON_BPF_H

#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/events.h"

char LICENSE[] SEC("license") = "GPL";

/* tgid -> 1 for every process being traced. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536);
  __type(key, __u32);
  __type(value, __u8);
} targets SEC(".maps");

/* The one ring buffer all layers write to. Size set by user space. */
struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 16 * 1024 * 1024);
} events SEC(".maps");

/* Failed ring buffer reservations, per CPU: losing an event is never silent. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} drops SEC(".maps");

struct eacgm_frame {
  __u64 start_ns;
  __u64 sp; /* the stack pointer at entry: where the return address is (see eacgm_call_return) */
  __u64 args[EACGM_CALL_ARGS];
  __u64 extra;   /* the extra word (events.h EACGM_CALL_WORDS): must follow args */
  __u64 py_code; /* the caller's innermost Python frame (python_walk.bpf.h) */
  __u64 py_instr;
  __u32 func_id;
  __u32 layer;
  __u32 flags;     /* EACGM_CALL_* of the call's event */
  __u32 announced; /* events.h eacgm_call.announced */
};

/* Entry and return are paired here, per thread: one finished call is one
 * event. Calls nest (a torch operator calling cudaLaunchKernel), so this is a
 * stack. It lives in the thread's task storage: found from the task itself in
 * a few loads, where a hash map keyed by tid costs a hash and a bucket walk at
 * every probe, and freed by the kernel with the thread. */
struct eacgm_call_stack {
  __u32 depth;        /* open calls in `frames`; calls nested deeper are not timed */
  __u32 py_absent_at; /* see eacgm_py_caller */
  __u32 announced;    /* the thread's entries of EACGM_ROW_EMIT_ENTRY rows, lost ones too */
  __u32 pad;
  struct eacgm_frame frames[EACGM_MAX_DEPTH];
};

struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct eacgm_call_stack);
} call_stacks SEC(".maps");

static __always_inline int eacgm_is_target(__u32 tgid) {
  return bpf_map_lookup_elem(&targets, &tgid) != 0;
}

static __always_inline void eacgm_count_drop(void) {
  __u32 zero = 0;
  __u64* n = bpf_map_lookup_elem(&drops, &zero);
  if (n) __sync_fetch_and_add(n, 1);
}

#include "layers/python/python_walk.bpf.h"

/* bpf_get_current_pid_tgid()'s value, read from the task: two loads instead
 * of a helper call. Every kernel call and return is dear on these machines
 * (retpolines, AMD's Safe RET: ~30 ns each, docs/PERFORMANCE.md), and the call
 * handlers have the task at hand anyway. */
static __always_inline __u64 eacgm_task_id(struct task_struct* task) {
  return (__u64)task->tgid << 32 | (__u32)task->pid;
}

/* The calling thread's call stack. Stacks exist only for threads of targets
 * (created on their first traced call, freed with the thread), so a thread
 * that has one needs no `targets` lookup: one task storage lookup per probe
 * in the steady state. */
static __always_inline struct eacgm_call_stack* eacgm_thread_stack(struct task_struct* task,
                                                                   __u32 tgid) {
  struct eacgm_call_stack* st = bpf_task_storage_get(&call_stacks, task, 0, 0);
  if (st) return st;
  if (!eacgm_is_target(tgid)) return 0;
  return bpf_task_storage_get(&call_stacks, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

/* How many of the thread's open frames are still live when a frame at stack
 * pointer `sp` is: a frame entered deeper on the stack (a lower stack
 * pointer) is over, its return skipped (longjmp; a call past the kernel's
 * return-probe depth limit). The kernel drops its own return records by the
 * same rule. */
static __always_inline __u32 eacgm_live_depth(struct eacgm_call_stack* st, __u64 sp) {
  __u32 d = st->depth;
  for (int i = 0; i < EACGM_MAX_DEPTH && d > 0 && d <= EACGM_MAX_DEPTH; i++) {
    if (st->frames[(d - 1) & (EACGM_MAX_DEPTH - 1)].sp >= sp) break;
    d--;
  }
  return d;
}

/* Call events never wake the reader: it polls every EACGM_READER_POLL_MS
 * (events.h), and poll() returns at once while data is waiting. Waking it per
 * event cost more than everything else a probe does, and deciding when to
 * wake it (bpf_ringbuf_query) cost a helper call per event. */
static __always_inline void eacgm_submit_call(struct eacgm_call* e) {
  bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/* A row's entry read (events.h EACGM_ENTRY_READ): arguments passed in memory
 * copied into the frame's words. Each size is a constant of its own branch, and
 * each branch checks that its words end inside args and extra, where the
 * verifier can see it. */
#define EACGM_READ_WORDS_CASE(n)                                                \
  case n: {                                                                     \
    __u64 at = into;                                                            \
    barrier_var(at);                                                            \
    if (at <= EACGM_CALL_WORDS - n)                                             \
      bpf_probe_read_user((__u64*)f->args + at, n * sizeof(__u64), (void*)src); \
    break;                                                                      \
  }

static __always_inline void eacgm_entry_read(struct eacgm_frame* f, __u64 sp, __u32 read) {
  __u32 from = (read >> 8) & 0xf;
  __u64 src = from == EACGM_READ_STACK ? sp + 8 : f->args[from & 7];
  /* A NULL struct pointer faults like any bad address: the read zeroes its
   * words, which would otherwise keep whatever the registers held. */
  src += (__u64)((read >> 12) & 0xff) * sizeof(__u64);
  __u64 into = (read >> 4) & 0xf;
  switch (read & 0xf) {
    EACGM_READ_WORDS_CASE(1)
    EACGM_READ_WORDS_CASE(2)
    EACGM_READ_WORDS_CASE(3)
    EACGM_READ_WORDS_CASE(4)
    EACGM_READ_WORDS_CASE(5)
    EACGM_READ_WORDS_CASE(6)
    EACGM_READ_WORDS_CASE(7)
    EACGM_READ_WORDS_CASE(8)
    EACGM_READ_WORDS_CASE(9)
  }
}

/* Function entry: remember the start time and the argument words. The cookie
 * is the row of the layer's probe table; the row's flags say whether the
 * stack words are needed and whether the start is announced at once (a call
 * that never returns, like a hung collective, must still be seen). */
static __always_inline int eacgm_call_entry(struct pt_regs* ctx, __u32 layer,
                                            const volatile __u8* row_flags,
                                            const volatile __u32* entry_read, __u32 inner_of) {
  struct task_struct* task = bpf_get_current_task_btf();
  __u64 id = eacgm_task_id(task);
  struct eacgm_call_stack* st = eacgm_thread_stack(task, id >> 32);
  if (!st) return 0;
  __u64 sp = PT_REGS_SP(ctx);
  /* An open frame at this entry's stack pointer is a tail call's caller. */
  __u32 d = eacgm_live_depth(st, sp);
  if (d >= EACGM_MAX_DEPTH) {
    st->depth = d;
    return 0;
  }
  /* A call made inside an open call of layer `inner_of` is that call's own
   * work (cudaLaunchKernel runs cuLaunchKernel): marked EACGM_CALL_INNER, so
   * that one launch is counted as one launch. */
  /* The index checked where the verifier sees it: the compiler would drop a
   * mask it can prove redundant, and the verifier cannot follow that proof. */
  __u64 slot = d; /* 64 bits: a u32 would be zero-extended again after the check */
  barrier_var(slot);
  if (slot >= EACGM_MAX_DEPTH) return 0;
  __u32 call_flags = 0;
  if (inner_of && slot > 0) {
    __u64 below = slot - 1;
    barrier_var(below);
    if (below < EACGM_MAX_DEPTH && st->frames[below].layer == inner_of) {
      call_flags = EACGM_CALL_INNER;
    }
  }
  st->depth = d + 1;
  struct eacgm_frame* f = &st->frames[slot];
  f->flags = call_flags;
  f->sp = sp;
  f->func_id = (__u32)bpf_get_attach_cookie(ctx);
  f->layer = layer;
  f->args[0] = PT_REGS_PARM1(ctx);
  f->args[1] = PT_REGS_PARM2(ctx);
  f->args[2] = PT_REGS_PARM3(ctx);
  f->args[3] = PT_REGS_PARM4(ctx);
  f->args[4] = PT_REGS_PARM5(ctx);
  f->args[5] = ctx->r9; /* libbpf 1.1 has no PT_REGS_PARM6 */
  f->args[6] = 0;
  f->args[7] = 0;
  f->extra = 0;
  __u8 flags = row_flags[f->func_id & (EACGM_MAX_FUNCS - 1)];
  /* At entry the stack pointer holds the return address and the stack
   * arguments follow it. Reading memory is the dearest step of this handler,
   * so only rows that ask for it pay for it. */
  __u32 read = entry_read[f->func_id & (EACGM_MAX_FUNCS - 1)];
  if (read) eacgm_entry_read(f, sp, read);
  eacgm_py_caller(id, &st->py_absent_at, &f->py_code, &f->py_instr);
  f->start_ns = bpf_ktime_get_ns();
  if (!(flags & EACGM_ROW_EMIT_ENTRY)) {
    f->announced = 0;
    return 0;
  }
  /* Counted before the event is reserved: a full ring buffer loses the event, not the count. */
  f->announced = ++st->announced;
  struct eacgm_call* e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    eacgm_count_drop();
    return 0;
  }
  e->hdr.kind = EACGM_EV_CALL_BEGIN;
  e->hdr.tgid = id >> 32;
  e->hdr.tid = (__u32)id;
  e->hdr.layer = layer;
  e->hdr.ts_ns = f->start_ns;
  e->duration_ns = 0;
#pragma unroll
  for (int i = 0; i < EACGM_CALL_ARGS; i++) e->args[i] = f->args[i];
  e->out_value = f->extra;
  e->ret = 0;
  e->func_id = f->func_id;
  e->depth = d;
  e->py_code = f->py_code;
  e->py_instr = f->py_instr;
  e->flags = f->flags;
  e->announced = f->announced;
  eacgm_submit_call(e);
  return 0;
}

/* Function return: find the frame this return closes, read the out-pointer
 * if the table asks for it, and emit one event for the finished call. The
 * frame is known by its stack pointer: `ret` has popped the return address,
 * so the stack pointer is the entry's plus 8, on the int3 and the syscall
 * uretprobe trampolines alike. Frames below it were skipped and are dropped;
 * a return whose frame is not here (entered before we attached, or nested
 * too deep to be timed) is ignored and pops nothing. A thread without
 * a call stack is not a target (see eacgm_thread_stack). */
/* The name a call gave a handle (EACGM_ROW_NAMES rows), sent with the call's
 * own event: every later use of the handle comes after both. */
static __always_inline void eacgm_send_name(struct eacgm_frame* f, __u64 id, __u32 layer,
                                            __u64 out_value, __s64 ret, __u8 slots) {
  struct eacgm_name* n = bpf_ringbuf_reserve(&events, sizeof(*n), 0);
  if (!n) {
    eacgm_count_drop();
    return;
  }
  __u8 key_slot = slots >> 4;
  n->hdr.kind = EACGM_EV_NAME;
  n->hdr.tgid = id >> 32;
  n->hdr.tid = (__u32)id;
  n->hdr.layer = layer;
  n->hdr.ts_ns = f->start_ns;
  n->key = key_slot == EACGM_NAME_KEY_OUT ? out_value : f->args[key_slot & 7];
  n->ret = ret;
  n->func_id = f->func_id;
  n->pad = 0;
  if (bpf_probe_read_user_str(n->name, sizeof(n->name), (void*)f->args[slots & 7]) < 0)
    n->name[0] = 0;
  bpf_ringbuf_submit(n, BPF_RB_NO_WAKEUP);
}

static __always_inline int eacgm_call_return(struct pt_regs* ctx, __u32 layer,
                                             const volatile __u8* out_slot,
                                             const volatile __u8* row_flags,
                                             const volatile __u8* name_slots) {
  __u64 now = bpf_ktime_get_ns();
  struct task_struct* task = bpf_get_current_task_btf();
  __u64 id = eacgm_task_id(task);
  __u32 tid = (__u32)id;
  struct eacgm_call_stack* st = bpf_task_storage_get(&call_stacks, task, 0, 0);
  if (!st) return 0;
  __u64 entry_sp = PT_REGS_SP(ctx) - 8;
  __u32 d = eacgm_live_depth(st, entry_sp);
  st->depth = d;
  if (d == 0 || d > EACGM_MAX_DEPTH) return 0;
  d--;
  struct eacgm_frame* f = &st->frames[d & (EACGM_MAX_DEPTH - 1)];
  if (f->sp != entry_sp || f->layer != layer) return 0; /* not ours: never misattribute */
  st->depth = d;
  __u32 func_id = f->func_id;

  struct eacgm_call* e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    eacgm_count_drop();
    return 0;
  }
  e->hdr.kind = EACGM_EV_CALL;
  e->hdr.tgid = id >> 32;
  e->hdr.tid = tid;
  e->hdr.layer = layer;
  e->hdr.ts_ns = f->start_ns;
  e->duration_ns = now - f->start_ns;
#pragma unroll
  for (int i = 0; i < EACGM_CALL_ARGS; i++) e->args[i] = f->args[i];
  e->out_value = f->extra;
  __u8 slot = out_slot[func_id & (EACGM_MAX_FUNCS - 1)];
  if (slot < EACGM_CALL_ARGS && f->args[slot & 7]) {
    if (bpf_probe_read_user(&e->out_value, sizeof(e->out_value), (void*)f->args[slot & 7]) != 0)
      e->out_value = 0;
  }
  e->ret = (__s64)PT_REGS_RC(ctx);
  e->func_id = func_id;
  e->depth = d;
  e->py_code = f->py_code;
  e->py_instr = f->py_instr;
  e->flags = f->flags;
  e->announced = f->announced;
  if (row_flags[func_id & (EACGM_MAX_FUNCS - 1)] & EACGM_ROW_NAMES)
    eacgm_send_name(f, id, layer, e->out_value, e->ret,
                    name_slots[func_id & (EACGM_MAX_FUNCS - 1)]);
  eacgm_submit_call(e);
  return 0;
}

/* The whole BPF side of a layer traced through a probe table: per table row
 * (set by user space between open and load) which argument word is a pointer
 * whose pointee is read at return (0xff: none), the row's EACGM_ROW_* flags,
 * where a naming row's name and handle are and what memory it reads at entry;
 * one generic entry and one generic return program, the attach cookie saying
 * which row fired. Calls
 * made inside an open call of layer `inner_of` (0: none) are marked inner. */
#define EACGM_TABLE_LAYER_INNER_OF(layer_id, inner_of)                        \
  const volatile __u8 out_slot[EACGM_MAX_FUNCS];                              \
  const volatile __u8 row_flags[EACGM_MAX_FUNCS];                             \
  const volatile __u8 name_slots[EACGM_MAX_FUNCS];                            \
  const volatile __u32 entry_read[EACGM_MAX_FUNCS];                           \
  SEC("uprobe")                                                               \
  int BPF_KPROBE(call_entry) {                                                \
    return eacgm_call_entry(ctx, layer_id, row_flags, entry_read, inner_of);  \
  }                                                                           \
  SEC("uretprobe")                                                            \
  int BPF_KRETPROBE(call_return) {                                            \
    return eacgm_call_return(ctx, layer_id, out_slot, row_flags, name_slots); \
  }
/* ... a layer built on no other traced layer. */
#define EACGM_TABLE_LAYER(layer_id) EACGM_TABLE_LAYER_INNER_OF(layer_id, 0)

#endif /* EACGM_COMMON_BPF_H */
