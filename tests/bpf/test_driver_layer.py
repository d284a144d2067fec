"""bpf: the CUDA driver layer (libcuda.so.1), where cuBLAS, cuDNN, NCCL, Triton, TensorFlow and
JAX launch. Loads the real BPF programs as root and asserts exactly what eacgm recorded:

- NVIDIA's own driver stub from /usr/local/cuda (every call fails with
  CUDA_ERROR_STUB_LIBRARY, but the probes fire with the real arguments): counts, decoded
  launch shapes, CUresult names, and that a failed call names no kernel;
- the simulated driver (tests/fixtures/simgpu/driver): kernels by name on the driver path
  (modules, libraries, CUkernel handles, cuGetProcAddress), the virtual memory API, and
- NVIDIA's layering: a runtime launch that runs on the driver is one launch, named by the
  host stub __cudaRegisterFunction registered."""
import json
import os
import shutil
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import eacgm_testlib  # noqa: E402
from eacgm_testlib import SIM_BIN_DIR, SIM_LIB_DIR, EacgmTest, require_root  # noqa: E402

STUB_DRIVER = "/usr/local/cuda/lib64/stubs/libcuda.so"
DRIVER_CALLS = os.path.join(SIM_BIN_DIR, "driver_calls")
DEBIAN_PYTHON = "/usr/bin/python3.11"
VEC_ADD = "_Z6vecAddPfS_S_i"
GEMM = "_Z4gemmILi128EEvPKfS1_Pfiii"
RELU = "_Z7reluFwdPfi"
STUB_LIBRARY = "CUDA_ERROR_STUB_LIBRARY"

# Calls NVIDIA's stub through ctypes with known arguments; each call returns 34.
STUB_JOB = textwrap.dedent("""\
    import ctypes
    lib = ctypes.CDLL({lib!r})
    u, p = ctypes.c_uint, ctypes.c_void_p
    for i in range(5):
        lib.cuLaunchKernel(p(0x1234), u(4), u(2), u(1), u(128), u(1), u(1), u(256), p(0x5678),
                           None, None)
    for i in range(2):
        lib.cuLaunchKernel_ptsz(p(0x4321), u(1), u(1), u(1), u(32), u(1), u(1), u(0), None,
                                None, None)
    ptr = ctypes.c_uint64(0)
    for i in range(3):
        lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(4096))
    lib.cuMemsetD32_v2(ctypes.c_uint64(0x7000), u(7), ctypes.c_size_t(100))
    lib.cuStreamSynchronize(None)
    lib.cuStreamSynchronize(p(0x5678))
    f = ctypes.c_void_p(0)
    lib.cuModuleGetFunction(ctypes.byref(f), p(0x99), b"_Z9neverSeenv")
    # CUlaunchConfig: grid (8,4,2), block (64,2,1), 1024 bytes shared, stream 0xabc.
    config = (u * 14)(8, 4, 2, 64, 2, 1, 1024, 0, 0xabc, 0, 0, 0, 0, 0)
    lib.cuLaunchKernelEx(ctypes.byref(config), p(0x2468), None, None)
    # CUDA_MEMCPY2D (16 words): WidthInBytes 640 and Height 48 are words 14 and 15;
    # CUDA_MEMCPY3D (25 words): WidthInBytes, Height, Depth are words 22 to 24.
    copy2d = (ctypes.c_uint64 * 16)(*([0] * 14 + [640, 48]))
    lib.cuMemcpy2D_v2(ctypes.byref(copy2d))
    copy3d = (ctypes.c_uint64 * 25)(*([0] * 22 + [256, 4, 3]))
    lib.cuMemcpy3D_v2(ctypes.byref(copy3d))
    lib.cuMemcpy2D_v2(None)
    print("done")
    """)


def driver_env(**extra):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = SIM_LIB_DIR
    env.update(extra)
    return env


class DriverLayer(EacgmTest):
    def setUp(self):
        require_root(self)
        super().setUp()

    def kernels(self, s, layer):
        """{mangled name or None: launches} of a layer's kernels in summary.json."""
        top = s.summary["kernels"].get(layer, {}).get("by_launches", [])
        return {k["mangled"]: k["launches"] for k in top}

    def private_copy(self, path, name):
        """A private copy of a library: a file's probes fire in every process that calls it, and
        the suite runs other jobs beside this one."""
        copy = os.path.join(self.tmp, "own", name)
        os.makedirs(os.path.dirname(copy), exist_ok=True)
        shutil.copy(path, copy)
        return copy

    @unittest.skipUnless(os.path.exists(STUB_DRIVER), "no CUDA toolkit driver stub")
    def test_nvidia_stub_calls_are_counted_with_their_arguments(self):
        lib = self.private_copy(STUB_DRIVER, "libcuda.so.1")
        script = os.path.join(self.tmp, "job.py")
        with open(script, "w") as f:
            f.write(STUB_JOB.format(lib=lib))
        s = self.record([DEBIAN_PYTHON, script], "--layers", "driver")
        self.assertEqual(s.returncode, 0, s.stderr)
        calls = s.calls("driver")
        self.assertEqual({k: v["count"] for k, v in calls.items()},
                         {"cuLaunchKernel": 5, "cuLaunchKernel_ptsz": 2, "cuMemAlloc_v2": 3,
                          "cuMemsetD32_v2": 1, "cuStreamSynchronize": 2,
                          "cuModuleGetFunction": 1, "cuLaunchKernelEx": 1, "cuMemcpy2D_v2": 2,
                          "cuMemcpy3D_v2": 1})
        for name, st in calls.items():
            self.assertEqual(st["errors"], st["count"], name)
            self.assertEqual(st["errors_by_code"], {STUB_LIBRARY: st["count"]}, name)
            self.assertEqual(st["bytes"], 0, name)  # a failed call moved nothing
        self.assertIn(lib, "\n".join(s.summary["layers"]["driver"]["libraries"]))
        args = [json.loads(a) for (a,) in s.rows(
            "SELECT args FROM calls WHERE name = 'cuLaunchKernel' ORDER BY start_ns")]
        self.assertEqual(args, [{"f": "0x1234", "grid": "(4,2,1)", "block": "(128,1,1)",
                                 "sharedMemBytes": 256, "hStream": "0x5678"}] * 5)
        # Arguments passed in memory: cuLaunchKernelEx's shape and stream from its
        # CUlaunchConfig, the extent of 2D and 3D copies from their structs (a NULL struct: 0).
        (ex,) = s.rows("SELECT args FROM calls WHERE name = 'cuLaunchKernelEx'")[0]
        ex = json.loads(ex)
        self.assertEqual({k: ex[k] for k in ("f", "grid", "block", "sharedMemBytes", "hStream")},
                         {"f": "0x2468", "grid": "(8,4,2)", "block": "(64,2,1)",
                          "sharedMemBytes": 1024, "hStream": "0xabc"})
        copies = [json.loads(a) for (a,) in s.rows(
            "SELECT args FROM calls WHERE name = 'cuMemcpy2D_v2' ORDER BY start_ns")]
        self.assertEqual([(c["WidthInBytes"], c["Height"]) for c in copies], [(640, 48), (0, 0)])
        self.assertEqual(copies[1]["pCopy"], "0x0")
        (copy3d,) = s.rows("SELECT args FROM calls WHERE name = 'cuMemcpy3D_v2'")[0]
        copy3d = json.loads(copy3d)
        self.assertEqual((copy3d["WidthInBytes"], copy3d["Height"], copy3d["Depth"]), (256, 4, 3))
        (error,) = s.rows("SELECT DISTINCT error FROM calls WHERE layer = 'driver'")
        self.assertEqual(error, (STUB_LIBRARY,))
        (args,) = s.rows("SELECT args FROM calls WHERE name = 'cuMemsetD32_v2'")[0]
        self.assertEqual(json.loads(args)["N"], 100)
        # Launches of handles never named, and a failed cuModuleGetFunction names nothing.
        self.assertEqual(self.kernels(s, "driver"), {None: 8})
        self.assertEqual(s.summary["kernels"]["names_known"], 0)
        self.assertSessionComplete(s)

    def test_driver_launches_are_named_by_module_and_library(self):
        n = 10
        for flags, variant in (([], "cuLaunchKernel"), (["--ptsz"], "cuLaunchKernel_ptsz"),
                               (["--ex"], "cuLaunchKernelEx"),
                               (["--cooperative"], "cuLaunchCooperativeKernel"),
                               (["--library"], "cuLaunchKernel")):
            with self.subTest(flags=flags):
                s = self.record([DRIVER_CALLS, "launches", str(n), *flags], "--layers", "driver",
                                out=self.out("-".join(["s", *flags])), env=driver_env())
                self.assertEqual(s.returncode, 0, s.stderr)
                self.assertEqual(s.count(variant, "driver"), n, s.calls("driver"))
                self.assertEqual(self.kernels(s, "driver"), {VEC_ADD: n // 2, GEMM: n // 2})
                top = s.summary["kernels"]["driver"]["by_launches"]
                names = {k["mangled"]: k["name"] for k in top}
                self.assertEqual(names[VEC_ADD], "vecAdd(float*, float*, float*, int)")
                self.assertEqual(names[GEMM],
                                 "void gemm<128>(float const*, float const*, float*, int, int, "
                                 "int)")
                rows = s.rows("SELECT kernel, COUNT(*) FROM calls WHERE name = ? GROUP BY kernel",
                              variant)
                self.assertEqual(sorted(rows), sorted([(VEC_ADD, n // 2), (GEMM, n // 2)]))
                (launches,) = s.rows("SELECT SUM(launches) FROM kernels WHERE layer = 'driver'")[0]
                self.assertEqual(launches, n)
                shapes = top[0]["shapes"]
                self.assertEqual(sum(shapes.values()), n // 2)
                self.assertTrue(all(k.endswith("block (128,1,1)") for k in shapes), shapes)
                # Every launch of the job is on its one created stream, whichever path.
                args = [json.loads(a) for (a,) in s.rows(
                    "SELECT args FROM calls WHERE name = ? ORDER BY start_ns", variant)]
                streams = {a["hStream"] for a in args}
                self.assertEqual(len(streams), 1, streams)
                self.assertNotEqual(streams, {"0x0"})
                self.assertEqual([a["grid"] for a in args],
                                 [f"({i % 7 + 1},2,1)" for i in range(n)])
                self.assertEqual({a["sharedMemBytes"] for a in args}, {256})
                t = s.perfetto()
                if t is not None:
                    slices = [p.track_event.name for p in t.packet
                              if p.HasField("track_event") and p.track_event.type == 1]
                    self.assertEqual(slices.count("vecAdd(float*, float*, float*, int)"), n // 2)

    def test_launches_found_through_get_proc_address_are_traced(self):
        # cuBLAS, cuDNN and NCCL reach the driver through cuGetProcAddress, not the PLT.
        s = self.record([DRIVER_CALLS, "launches", "6", "--via-getprocaddress"], "--layers",
                        "driver", env=driver_env())
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(s.count("cuLaunchKernel", "driver"), 6)
        self.assertEqual(self.kernels(s, "driver"), {VEC_ADD: 3, GEMM: 3})

    def test_driver_memory_and_virtual_memory_are_accounted(self):
        n = 4
        s = self.record([DRIVER_CALLS, "memory", str(n)], "--layers", "driver", env=driver_env())
        self.assertEqual(s.returncode, 0, s.stderr)
        calls = s.calls("driver")
        self.assertEqual(calls["cuMemAlloc_v2"]["count"], n + 1)
        self.assertEqual(calls["cuMemAlloc_v2"]["bytes"], n * (1 << 20) + 4096)
        self.assertEqual(calls["cuMemFree_v2"]["count"], n)
        self.assertEqual(calls["cuMemcpyHtoD_v2"]["bytes"], n * (1 << 20))
        self.assertEqual(calls["cuMemcpyDtoH_v2"]["bytes"], n * (1 << 20))
        self.assertEqual(calls["cuMemsetD32_v2"]["bytes"], n * 4 * 1024)
        for name in ("cuMemAllocAsync", "cuMemFreeAsync", "cuMemAllocHost_v2", "cuMemFreeHost",
                     "cuMemCreate", "cuMemMap", "cuMemUnmap", "cuMemRelease"):
            self.assertEqual(calls[name]["count"], 1, name)
            self.assertEqual(calls[name]["errors"], 0, name)
        self.assertEqual(calls["cuMemCreate"]["bytes"], 2 << 20)
        self.assertEqual(calls["cuMemMap"]["bytes"], 2 << 20)
        pid = str(s.summary["processes"][0]["pid"])
        # Only the one leaked cuMemAlloc is left; the handle's 2 MiB counted while it lived.
        self.assertEqual(s.summary["memory"]["outstanding_device_bytes"], {pid: 4096})
        self.assertGreaterEqual(s.summary["memory"]["peak_device_bytes"][pid], 2 << 20)

    def test_copies_sized_by_a_struct_move_their_whole_extent(self):
        # cuMemcpy2D/3D pass their extent in a struct, cuMemAllocPitch as two arguments.
        s = self.record([DRIVER_CALLS, "copies"], "--layers", "driver", env=driver_env())
        self.assertEqual(s.returncode, 0, s.stderr)
        calls = s.calls("driver")
        self.assertEqual({k: (v["count"], v["bytes"], v["errors"]) for k, v in calls.items()
                          if k != "cuMemFree_v2"},
                         {"cuInit": (1, 0, 0),  # setting the GPU up, always traced
                          "cuDevicePrimaryCtxRetain": (1, 0, 0),
                          "cuMemAllocPitch_v2": (1, 640 * 48, 0),
                          "cuMemcpy2D_v2": (1, 640 * 48, 0),
                          "cuMemcpy2DAsync_v2": (1, 640 * 48, 0),
                          "cuMemAlloc_v2": (2, 2 << 16, 0),
                          "cuMemcpy3D_v2": (1, 256 * 4 * 3, 0),
                          "cuMemcpyPeer": (1, 1 << 16, 0)})
        self.assertEqual(calls["cuMemFree_v2"]["count"], 3)
        pid = str(s.summary["processes"][0]["pid"])
        # The pitched allocation is freed like any other: nothing is left outstanding.
        self.assertEqual(s.summary["memory"]["outstanding_device_bytes"], {pid: 0})
        self.assertEqual(s.summary["memory"]["peak_device_bytes"], {pid: 640 * 48 + (2 << 16)})

    def test_failed_driver_calls_are_named_by_their_cuda_result(self):
        s = self.record([DRIVER_CALLS, "errors"], "--layers", "driver", env=driver_env())
        self.assertEqual(s.returncode, 0, s.stderr)
        calls = s.calls("driver")
        self.assertEqual(calls["cuLaunchKernel"]["errors_by_code"],
                         {"CUDA_ERROR_INVALID_HANDLE": 1})
        self.assertEqual(calls["cuModuleGetFunction"]["errors_by_code"],
                         {"CUDA_ERROR_NOT_FOUND": 1})
        self.assertEqual(calls["cuMemFree_v2"]["errors_by_code"], {"CUDA_ERROR_INVALID_VALUE": 1})

    def test_a_runtime_launch_on_the_driver_is_one_launch(self):
        n = 8
        env = driver_env(SIMGPU_RUNTIME_USES_DRIVER="1")
        s = self.record([DRIVER_CALLS, "runtime", str(n)], "--layers", "cuda,driver", env=env)
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(s.count("cudaLaunchKernel"), n)
        self.assertEqual(s.count("cudaMalloc"), 1)
        # The driver calls the runtime made are its own work: kept, marked inner, never counted
        # as calls of their own (the simulated runtime makes exactly these: driver/selftest.sh).
        driver = s.summary["layers"]["driver"]
        self.assertEqual(driver.get("calls", {}), {})
        self.assertEqual(driver["inner_calls"], {
            "cuLaunchKernel": n, "cuMemAlloc_v2": 1, "cuMemFree_v2": 1, "cuCtxSynchronize": 1,
            "cuLibraryLoadData": 1, "cuLibraryGetKernel": 2, "cuInit": 1})
        self.assertEqual(self.kernels(s, "cuda"), {VEC_ADD: n // 2, RELU: n // 2})
        self.assertNotIn("driver", s.summary["kernels"])
        pid = str(s.summary["processes"][0]["pid"])
        self.assertEqual(s.summary["memory"]["outstanding_device_bytes"], {pid: 0})
        self.assertEqual(s.summary["memory"]["peak_device_bytes"], {pid: 1 << 20})
        # In the database and the timeline each driver launch sits inside its runtime launch,
        # named by the kernel the runtime loaded for it.
        rows = s.rows("SELECT depth, kernel FROM calls WHERE name = 'cuLaunchKernel' AND inner_call = 1")
        self.assertEqual(sorted(rows), sorted([(1, VEC_ADD)] * (n // 2) + [(1, RELU)] * (n // 2)))
        self.assertEqual(s.rows("SELECT COUNT(*) FROM calls WHERE inner_call = 1 AND layer != 'driver'"),
                         [(0,)])
        self.assertSessionComplete(s)
        # Without the runtime layer the same job's launches are seen on the driver, once each.
        s = self.record([DRIVER_CALLS, "runtime", str(n)], "--layers", "driver",
                        out=self.out("driver-only"), env=env)
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(s.count("cuLaunchKernel", "driver"), n)
        self.assertEqual(s.count("cuMemAlloc_v2", "driver"), 1)

    def test_the_demo_training_job_on_the_driver_counts_each_launch_once(self):
        # simtrain registers its kernels as nvcc's constructors do; with the runtime on the
        # driver, every runtime call below runs its driver call, as NVIDIA's runtime does.
        steps, ranks = 20, 2
        env = driver_env(SIMGPU_RUNTIME_USES_DRIVER="1")
        s = self.record([os.path.join(SIM_BIN_DIR, "simtrain"), "--ranks", str(ranks),
                         "--steps", str(steps)], env=env)
        self.assertEqual(s.returncode, 0, s.stderr)
        launches = ranks * steps * 5
        self.assertEqual(s.count("cudaLaunchKernel"), launches)
        self.assertEqual(s.count("cudaMalloc"), ranks * (1 + 3 * steps))
        driver = s.summary["layers"]["driver"]
        # Only the runtime's set-up, once a process at its first kernel registration, outside
        # any runtime call: the rest is inside runtime calls.
        self.assertEqual({k: v["count"] for k, v in driver.get("calls", {}).items()},
                         {"cuInit": ranks})
        inner = driver["inner_calls"]
        self.assertEqual(inner["cuLaunchKernel"], launches)
        self.assertEqual(inner["cuMemAlloc_v2"], ranks * (1 + 3 * steps))
        self.assertEqual(inner["cuStreamSynchronize"], ranks * steps)
        # Each of the five kernels by its registered name, launched once per step per rank.
        names = {k["name"]: k["launches"] for k in s.summary["kernels"]["cuda"]["by_launches"]}
        self.assertEqual(names, {n: ranks * steps for n in (
            "embedding_fwd(int*)", "gemm_fwd(int*)", "softmax_fwd(int*)", "gemm_bwd(int*)",
            "adam_step(int*)")})
        self.assertNotIn("driver", s.summary["kernels"])
        # Device memory once: the 256 MiB of weights and one step's 10.5 MiB at the peak.
        peak = (256 << 20) + (8 << 20) + (2 << 20) + (512 << 10)
        self.assertEqual(set(s.summary["memory"]["peak_device_bytes"].values()), {peak})
        self.assertEqual(set(s.summary["memory"]["outstanding_device_bytes"].values()), {0})
        self.assertEqual(s.summary.get("anomalies", []), [])
        self.assertSessionComplete(s)


if __name__ == "__main__":
    eacgm_testlib.main()
