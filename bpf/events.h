/* Event records shared by the BPF programs and the C++ reader.
 *
 * Every layer writes into one ring buffer; each record starts with
 * `struct eacgm_header`, whose `kind` says which struct follows. The C++ side
 * static_asserts the sizes and offsets (src/reader/event_layout.h), so a
 * change here that is not mirrored there fails the build instead of
 * silently misdecoding.
 *
 * Plain C with fixed-width types only: this header is compiled by clang for
 * the BPF target (where vmlinux.h provides __u32 and friends) and by g++.
 */
#ifndef EACGM_BPF_EVENTS_H
#define EACGM_BPF_EVENTS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define EACGM_COMM_LEN 16
/* Integer arguments captured per call: the six SysV argument registers and
 * the first two stack words (cudaLaunchKernel passes sharedMem and stream
 * there). */
#define EACGM_CALL_ARGS 8
/* Maximum nesting of traced calls on one thread that is paired in BPF. */
#define EACGM_MAX_DEPTH 16
/* Upper bound on probe table rows per layer (cookie values). */
#define EACGM_MAX_FUNCS 4096
/* Maximum number of CPUs whose drop counters are reported. */
#define EACGM_MAX_CPUS 1024

enum eacgm_event_kind {
  EACGM_EV_CALL = 1,      /* one finished traced call: struct eacgm_call */
  EACGM_EV_PROC_FORK = 2, /* a target forked: struct eacgm_proc */
  EACGM_EV_PROC_EXEC = 3, /* a target exec'd: struct eacgm_proc */
  EACGM_EV_PROC_EXIT = 4, /* a target's last thread exited: struct eacgm_proc */
  EACGM_EV_DL_STOP = 5,   /* a target mapped new code and was stopped: struct eacgm_proc */
  /* a traced call has started (only for rows that ask: calls that may never
   * return, like a hung collective); struct eacgm_call, duration and ret 0 */
  EACGM_EV_CALL_BEGIN = 6,
};

enum eacgm_layer {
  EACGM_LAYER_CUDA = 1,
  EACGM_LAYER_NCCL = 2,
  EACGM_LAYER_TORCH = 3,
  EACGM_LAYER_PYTHON = 4,
  EACGM_LAYER_OS = 5,
};

struct eacgm_header {
  __u32 kind;  /* enum eacgm_event_kind */
  __u32 tgid;  /* process id as user space sees it */
  __u32 tid;   /* thread id */
  __u32 layer; /* enum eacgm_layer, 0 for process events */
  __u64 ts_ns; /* bpf_ktime_get_ns() at the event (call start for calls) */
};

struct eacgm_call {
  struct eacgm_header hdr;
  __u64 duration_ns;
  __u64 args[EACGM_CALL_ARGS];
  /* For functions that return a value through a pointer argument
   * (cudaMalloc's devPtr), the pointed-to 8 bytes read at return. */
  __u64 out_value;
  __s64 ret;      /* return register, sign-extended from 32 bits by user space when the ABI says so */
  __u32 func_id;  /* row of the layer's probe table (the attach cookie) */
  __u32 depth;    /* traced calls already open on this thread when this one started */
};

struct eacgm_proc {
  struct eacgm_header hdr;
  __u32 ppid;      /* parent tgid for fork, 0 otherwise */
  __s32 exit_code; /* task->exit_code for exit: (code << 8) | signal, as wait(2) */
  char comm[EACGM_COMM_LEN];
};

#endif /* EACGM_BPF_EVENTS_H */
