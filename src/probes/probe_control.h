// What the recorder asks of the probes as targets come and go: load a layer's programs, probe a
// library, guard an unwinder, register an interpreter, leave a process alone. The Tracer does it
// with BPF in the kernel; a unit test fakes it (tests/unit/recorder_test.cpp), so that what the
// recorder decides is tested without a kernel or root.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "layers/torch/torch_ops.h"
#include "probes/probe_table.h"

namespace eacgm {

class ProbeControl {
 public:
  virtual ~ProbeControl() = default;

  // Loads the programs of those of `layers` that are table layers not loaded yet, concurrently,
  // ahead of probing libraries of several of them (attach_library loads a layer's programs
  // itself when they are missing). A layer that fails is in layer_problem() from then on and
  // probes nothing; the first failure is returned.
  virtual Result<void> load_layers(const std::set<Layer>& layers) = 0;
  // Probes `path` for `layer` unless that file (by inode) is already probed.
  // Returns whether it was newly probed.
  virtual Result<bool> attach_library(Layer layer, const std::string& path) = 0;
  // The torch layer's return probes would make a C++ exception thrown through an operator
  // kill the job (src/layers/torch/torch.bpf.c); this probes the start of unwinding in the unwinder
  // `path` so that they step aside first. Once per file (by inode); returns whether newly probed.
  // Before the torch layer's programs are loaded (by its first library) there is nothing to
  // guard: false, and the file is guarded when a process that maps libtorch is probed.
  virtual Result<bool> attach_unwind_guard(const std::string& path) = 0;
  // A process serve's notice made a target that is not to be traced: no longer a target (the
  // kernel does not notice it again).
  virtual void pass_over(uint32_t pid) = 0;
  // Consumes whatever is in the ring buffer without waiting; returns how many records.
  virtual int drain() = 0;
  // Why an enabled layer could not be set up, or nullopt when it works or was not needed yet.
  virtual std::optional<std::string> layer_problem(Layer layer) const = 0;
  // The torch layer's rows, made as its libraries are probed (decoder: func_id -> operator).
  virtual const TorchOpTable& torch_ops() const = 0;
  // --overhead-budget: attaches (true) or releases (false) the cycled rows' probes of every
  // library, now and for libraries probed later.
  virtual Result<void> set_cycled_probes(bool on) = 0;
  // The char devices (kernel dev_t: major << 20 | minor) whose ioctls the os layer times;
  // replaces the previous set.
  virtual Result<void> set_ioctl_devices(const std::set<uint32_t>& rdevs) = 0;

  // The python layer. Registers a process running CPython: where its _PyRuntime is and which
  // layout (index into python_layouts()) to walk it with; its threads are sampled from then on.
  virtual Result<void> add_python_process(uint32_t pid, uint64_t runtime, uint32_t layout) = 0;
  virtual void remove_python_process(uint32_t pid) = 0;
  // Times garbage collections, and with `calls` counts every function call, through the
  // interpreter file's USDT probes (once per file, by inode). Returns whether it was newly
  // attached.
  virtual Result<bool> attach_python_usdt(const std::string& path, bool calls) = 0;
  struct PythonCallCount {
    uint32_t pid = 0;
    uint64_t file_ptr = 0;  // the USDT probe's file and name strings (see eacgm_py_function)
    uint64_t name_ptr = 0;
    uint64_t count = 0;
  };
  virtual std::vector<PythonCallCount> python_call_counts() const = 0;
  // Samples every registered process's threads `hz` times a second from now on.
  virtual void start_python_sampler(double hz) = 0;

  // The torch layer: operator calls whose return probe a C++ exception unwound past (their
  // duration is lost; attach_unwind_guard).
  virtual uint64_t calls_unwound() const = 0;
};

}  // namespace eacgm
