/* Event records shared by the BPF programs and the C++ reader.
 *
 * Every layer writes into one ring buffer; each record starts with
 * `struct eacgm_header`, whose `kind` says which struct follows. The C++ side
 * static_asserts the sizes and offsets (src/reader/decoder.cpp), so a
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
 * two more words, by default the first two stack words (cudaLaunchKernel
 * passes sharedMem and stream there). */
#define EACGM_CALL_ARGS 8
/* ... and one extra word, filled only by a row's entry read and delivered in
 * the event's `out_value` (rows that read one through an out-pointer have no
 * extra word): cuLaunchKernel's ninth argument, its stream. */
#define EACGM_CALL_WORDS (EACGM_CALL_ARGS + 1)
/* Maximum nesting of traced calls on one thread that is paired in BPF. */
#define EACGM_MAX_DEPTH 16
/* Upper bound on probe table rows per layer (cookie values). */
#define EACGM_MAX_FUNCS 4096
/* Per-row flags of a probe table (rodata `row_flags`, set by user space). */
#define EACGM_ROW_EMIT_ENTRY 0x1 /* announce the call's start: it may never return */
#define EACGM_ROW_NAMES 0x4      /* the call names a handle: send struct eacgm_name at return */
/* A row's `entry_read` word (rodata beside row_flags; 0: none): memory copied
 * at entry into the captured words, for arguments passed in memory: the stack
 * arguments past the sixth, or fields of a struct an argument points to
 * (cuLaunchKernelEx's CUlaunchConfig, cuMemcpy2D's CUDA_MEMCPY2D).
 *   bits 0-3    words to copy, 1..EACGM_CALL_WORDS
 *   bits 4-7    the first captured word written; the copy ends at or before
 *               the extra word
 *   bits 8-11   where from: the argument slot holding a pointer, or
 *               EACGM_READ_STACK for the stack arguments
 *   bits 12-19  how far past that address, in 8-byte words
 * A copy that faults leaves its words 0. */
#define EACGM_READ_STACK 0xf
#define EACGM_ENTRY_READ(words, into, from, offset_words) \
  ((words) | (into) << 4 | (from) << 8 | (offset_words) << 12)
/* A row's `name_slots` byte (rodata beside row_flags): the argument holding the
 * C string in the low nibble, the argument holding the handle it names in the
 * high nibble, EACGM_NAME_KEY_OUT there for the out-pointer's pointee. */
#define EACGM_NAME_KEY_OUT 0xf
/* Bytes kept of a name (mangled C++ kernel names run long). */
#define EACGM_NAME_LEN 256
/* Call events are submitted without waking the reader, which polls at least
 * this often. 20 ms of the fastest calls measured (two processes, ~1 M
 * calls/s) fill ~2.7 MiB of the 16 MiB ring buffer. */
#define EACGM_READER_POLL_MS 20
/* serve's notice of new processes (core.bpf.c): at most this many library
 * file-name prefixes, each at most this long with its NUL; a loaded object's
 * path is read up to EACGM_NOTICE_NAME_LEN bytes, and the loader's list of
 * objects walked up to EACGM_NOTICE_MAX_OBJECTS entries. */
#define EACGM_NOTICE_PREFIXES 8
#define EACGM_NOTICE_PREFIX_LEN 24
#define EACGM_NOTICE_NAME_LEN 256
#define EACGM_NOTICE_MAX_OBJECTS 1024
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
  /* os layer (src/layers/os/os.bpf.c) */
  EACGM_EV_SIGNAL = 7,   /* a signal was generated for a target: struct eacgm_signal */
  EACGM_EV_OOM_KILL = 8, /* the OOM killer chose a target: struct eacgm_oom */
  EACGM_EV_MMAP = 9,     /* a finished mmap, munmap or mremap: struct eacgm_mmap */
  EACGM_EV_IOCTL = 10,   /* a finished ioctl on a watched device: struct eacgm_ioctl */
  /* python layer (src/layers/python/python.bpf.c) */
  EACGM_EV_PY_SAMPLE = 11, /* one thread's Python stack: struct eacgm_py_sample */
  EACGM_EV_PY_CODE = 12,   /* a code object seen for the first time: struct eacgm_py_code */
  EACGM_EV_PY_FUNCTION =
      13,              /* a (file, name) pair the USDT probes saw first: struct eacgm_py_function */
  EACGM_EV_PY_GC = 14, /* one garbage collection: struct eacgm_py_gc */
  /* torch layer (src/layers/torch/torch.bpf.c) */
  EACGM_EV_UNWIND_STOP = 15, /* a thread began unwinding across return probes and was stopped:
                                struct eacgm_unwind_stop */
  /* a traced call gave a handle a name (a kernel's, from __cudaRegisterFunction,
   * cuModuleGetFunction, cuLibraryGetKernel): struct eacgm_name */
  EACGM_EV_NAME = 16,
  /* serve: a process eacgm did not trace yet mapped a library of a traced
   * layer, became a target and was stopped (core.bpf.c): struct eacgm_proc */
  EACGM_EV_DL_NOTICE = 17,
};

enum eacgm_layer {
  EACGM_LAYER_CUDA = 1,
  EACGM_LAYER_NCCL = 2,
  EACGM_LAYER_TORCH = 3,
  EACGM_LAYER_PYTHON = 4,
  EACGM_LAYER_OS = 5,
  EACGM_LAYER_GPU = 6,    /* NVML sampled from user space: no BPF program, no events */
  EACGM_LAYER_DRIVER = 7, /* the CUDA driver API, libcuda.so.1 */
  EACGM_LAYER_ID_END,     /* one past the highest id: a new layer's id goes above */
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
  __s64 ret; /* return register, sign-extended from 32 bits by user space when the ABI says so */
  __u32 func_id; /* row of the layer's probe table (the attach cookie) */
  __u32 depth;   /* traced calls already open on this thread when this one started */
  /* The innermost Python frame of the calling thread when the call started
   * (python layer on, thread known to run Python): its code object and
   * instruction word (struct eacgm_py_frame); 0 otherwise. */
  __u64 py_code;
  __u64 py_instr;
  __u32 flags; /* EACGM_CALL_* */
  /* For a row that announces its start (EACGM_ROW_EMIT_ENTRY): which of the thread's
   * announcing calls this is, counting from 1 at its first traced one, the same in the call's
   * begin and end events; 0 for other rows. Counted in the kernel, so a gap between two of a
   * thread's events says how many of its announcing calls user space never saw (both events
   * lost to a full ring buffer), and numbering by it cannot drift. */
  __u32 announced;
};

/* The call ran inside an open call of the layer its own layer is built on
 * (cuLaunchKernel inside cudaLaunchKernel): that call's inner part, kept in
 * the timeline and the database but never counted a second time. */
#define EACGM_CALL_INNER 0x1

/* Sent just before the call event of a row with EACGM_ROW_NAMES. */
struct eacgm_name {
  struct eacgm_header hdr; /* ts_ns: the call's start */
  __u64 key;               /* the handle named: a host stub, a CUfunction, a CUkernel */
  __s64 ret;               /* the call's return value: a failed call names nothing */
  __u32 func_id;           /* row of the layer's probe table */
  __u32 pad;
  char name[EACGM_NAME_LEN]; /* NUL-terminated, cut at EACGM_NAME_LEN - 1 bytes */
};

struct eacgm_proc {
  struct eacgm_header hdr;
  __u32 ppid;      /* parent tgid for fork, 0 otherwise */
  __s32 exit_code; /* task->exit_code for exit: (code << 8) | signal, as wait(2) */
  char comm[EACGM_COMM_LEN];
};

/* Most return addresses one unwind stop puts back: the kernel's
 * MAX_URETPROBE_DEPTH, the most return probes a thread can have pending. */
#define EACGM_UNWIND_SLOTS 64

/* A thread of a target is about to unwind its stack (a C++ throw, a forced
 * unwind) with return probes pending, and is stopped. User space writes each
 * orig[i] to the stack slot slot[i] where slot[i] is not 0 (newest first: of
 * two entries for one slot the first is right), then resumes it. */
struct eacgm_unwind_stop {
  struct eacgm_header hdr;
  __u32 open_calls; /* traced calls it was in: they will not return to a probe */
  __u32 n;          /* entries used in slot[] and orig[]; slot 0: none */
  __u64 slot[EACGM_UNWIND_SLOTS];
  __u64 orig[EACGM_UNWIND_SLOTS];
};

/* The os layer. */

/* Components of a cgroup path carried by an OOM event (leaf first) and the
 * bytes kept of each name. */
#define EACGM_CGROUP_DEPTH 8
#define EACGM_CGROUP_NAME_LEN 64

struct eacgm_signal {
  struct eacgm_header hdr; /* tgid/tid: the receiving process and thread */
  __s32 sig;
  __s32 code;        /* si_code: SI_USER 0, SI_TKILL -6, SI_KERNEL 0x80, > 0 for faults */
  __s32 result;      /* TRACE_SIGNAL_*: 0 delivered, 1 ignored, 2 already pending, 3/4 failed */
  __u32 group;       /* sent to the whole thread group */
  __u32 sender_tgid; /* the task that was running when it was sent (current) */
  __u32 sender_tid;
  char sender_comm[EACGM_COMM_LEN];
};

struct eacgm_oom {
  struct eacgm_header hdr; /* tgid/tid: the victim */
  __u64 total_vm_bytes;
  __u64 anon_rss_bytes;
  __u64 file_rss_bytes;
  __u64 shmem_rss_bytes;
  __u64 cgroup_id; /* kernfs node id of the victim's memory cgroup */
  __u32 uid;
  __s32 oom_score_adj;
  __u32 cgroup_level;     /* depth of that cgroup below its hierarchy's root */
  __u32 cgroup_hierarchy; /* 0: the cgroup v2 hierarchy, otherwise a v1 hierarchy id */
  __u32 cgroup_names;     /* components filled in `cgroup` */
  __u32 killer_tgid;      /* the process whose allocation invoked the OOM killer */
  char comm[EACGM_COMM_LEN];
  char killer_comm[EACGM_COMM_LEN];
  char cgroup[EACGM_CGROUP_DEPTH][EACGM_CGROUP_NAME_LEN]; /* path components, leaf first */
};

enum eacgm_mmap_op {
  EACGM_MMAP = 0,
  EACGM_MUNMAP = 1,
  EACGM_MREMAP = 2,
};

struct eacgm_mmap {
  struct eacgm_header hdr; /* ts_ns: syscall entry */
  __u64 duration_ns;
  __u64 addr;     /* mmap, mremap: the address returned (0 on failure); munmap: the address */
  __u64 len;      /* mmap, munmap: the length; mremap: the new length */
  __u64 old_addr; /* mmap: the address hint; mremap: the old address */
  __u64 old_len;  /* mremap: the old length */
  __s64 ret;      /* the syscall's return value (-errno on failure) */
  __u32 op;       /* enum eacgm_mmap_op */
  __u32 prot;
  __u32 flags;
  __s32 fd;
};

struct eacgm_ioctl {
  struct eacgm_header hdr; /* ts_ns: syscall entry */
  __u64 duration_ns;
  __u64 request;
  __u64 arg;
  __s64 ret;
  __s32 fd;
  __u32 rdev; /* the device, in the kernel's dev_t encoding: major << 20 | minor */
};

/* The python layer.
 *
 * CPython's own structures are walked from BPF: _PyRuntime -> interpreter ->
 * thread states -> frames -> code objects. Their layout differs per minor
 * version; user space fills one `eacgm_py_layout` per supported version
 * (src/python/python_layouts.cpp) and registers each traced interpreter
 * process with the address of its _PyRuntime and the layout to use. */
#define EACGM_PY_NONE 0xffffffffu /* a field the version does not have */
#define EACGM_PY_MAX_LAYOUTS 16
#define EACGM_PY_MAX_FRAMES 32  /* frames kept per sample, innermost first */
#define EACGM_PY_MAX_THREADS 64 /* thread states walked to find one thread's */
#define EACGM_PY_NAME_LEN 128
#define EACGM_PY_FILE_LEN 256
#define EACGM_PY_LINETABLE_LEN 4096

struct eacgm_py_layout {
  __u32 version; /* major * 100 + minor (311); 0 marks an unused slot */
  /* _PyRuntimeState */
  __u32 runtime_interpreters_head;
  /* PyInterpreterState */
  __u32 interp_threads_head;
  /* PyThreadState */
  __u32 tstate_next;
  __u32 tstate_thread_id;        /* pthread_self(): on x86-64 glibc, the thread pointer (fs base) */
  __u32 tstate_native_thread_id; /* the kernel tid (3.11+); EACGM_PY_NONE: match thread_id */
  __u32 tstate_frame;            /* 3.8-3.10 frame, 3.11-3.12 cframe, 3.13 current_frame */
  __u32 cframe_current_frame; /* 3.11-3.12 (_PyCFrame); EACGM_PY_NONE: tstate_frame is the frame */
  /* frames: PyFrameObject (3.8-3.10), _PyInterpreterFrame (3.11+) */
  __u32 frame_back;         /* f_back, previous */
  __u32 frame_code;         /* f_code, f_executable (3.13) */
  __u32 frame_instr;        /* 3.8-3.10 f_lasti (int); 3.11-3.12 prev_instr; 3.13 instr_ptr */
  __u32 frame_owner;        /* the owner byte (3.12+); EACGM_PY_NONE before */
  __u32 frame_owner_cstack; /* owner value of frames that belong to the C stack (skipped) */
  /* PyCodeObject */
  __u32 code_filename;
  __u32 code_name;
  __u32 code_qualname; /* 3.11+; EACGM_PY_NONE: co_name stands for it */
  __u32 code_firstlineno;
  __u32 code_linetable; /* co_lnotab (3.8-3.9), co_linetable (3.10+): a bytes object */
  __u32 code_code;      /* 3.11+: offset of the first instruction (co_code_adaptive); else NONE */
  /* str and bytes */
  __u32 unicode_state;      /* PyASCIIObject.state (bit 5 compact, bit 6 ascii) */
  __u32 unicode_ascii_data; /* sizeof(PyASCIIObject): where a compact ASCII string's bytes start */
  __u32 bytes_size;         /* PyVarObject.ob_size */
  __u32 bytes_data;         /* PyBytesObject.ob_sval */
};

/* A traced process that runs CPython: where its interpreter state is. */
struct eacgm_py_proc {
  __u64 runtime; /* address of _PyRuntime in the process */
  __u32 layout;  /* index into the py_layouts map */
  __u32 pad;
};

struct eacgm_py_frame {
  __u64 code;  /* PyCodeObject* */
  __u64 instr; /* the layout's frame_instr word: f_lasti (low 32 bits) or an instruction pointer */
};

/* A sampled thread's scheduler state, in the classes the stall detector tells apart. */
enum eacgm_py_thread_state {
  EACGM_PY_RUNNING = 0,         /* on a CPU or waiting for one */
  EACGM_PY_SLEEPING = 1,        /* waiting for something: a lock, I/O, a sleep, a device */
  EACGM_PY_UNINTERRUPTIBLE = 2, /* waiting in the kernel: a page fault, disk I/O, reclaim */
  EACGM_PY_STOPPED = 3,         /* stopped: job control, a tracer, eacgm's loader stop */
};

struct eacgm_py_sample {
  struct eacgm_header hdr; /* tid: the sampled thread; ts_ns: when it was sampled */
  __u32 nframes;           /* filled entries of frames */
  __u32 truncated;         /* the stack was deeper than EACGM_PY_MAX_FRAMES */
  __u32 thread_state;      /* enum eacgm_py_thread_state: what the thread was doing */
  __u32 pad;
  __u64 voluntary_switches; /* task->nvcsw: it changes each time the thread goes to wait */
  __u64 run_delay_ns;       /* task->sched_info.run_delay: time spent waiting for a CPU so far (0
                               without CONFIG_SCHED_INFO) */
  struct eacgm_py_frame frames[EACGM_PY_MAX_FRAMES]; /* innermost first */
};

struct eacgm_py_code {
  struct eacgm_header hdr;
  __u64 code; /* the PyCodeObject* this describes, in process hdr.tgid */
  __u32 firstlineno;
  __u32 linetable_len; /* the line table's size; at most EACGM_PY_LINETABLE_LEN bytes were copied */
  char name[EACGM_PY_NAME_LEN]; /* co_qualname (3.11+) or co_name */
  char file[EACGM_PY_FILE_LEN]; /* co_filename as given */
  __u8 linetable[EACGM_PY_LINETABLE_LEN];
};

/* The USDT probes pass a function's file and name as C strings that live
 * as long as its code object: counts are kept in BPF by that pair of
 * pointers, and each pair's strings are sent once. */
struct eacgm_py_function {
  struct eacgm_header hdr;
  __u64 file_ptr;
  __u64 name_ptr;
  char name[EACGM_PY_NAME_LEN];
  char file[EACGM_PY_FILE_LEN];
};

struct eacgm_py_gc {
  struct eacgm_header hdr; /* ts_ns: gc__start */
  __u64 duration_ns;
  __s64 collected; /* objects collected (gc__done's argument) */
  __s32 generation;
  __u32 pad;
};

#endif /* EACGM_BPF_EVENTS_H */
