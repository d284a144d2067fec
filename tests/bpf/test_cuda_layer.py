"""bpf: load the real BPF programs as root, run programs that make known CUDA
runtime calls, and assert exactly what eacgm recorded: counts, decoded
arguments, return codes, memory, processes."""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import eacgm_testlib  # noqa: E402
from eacgm_testlib import (BASIC_SEQUENCE, BASIC_SEQUENCE_DRIVER_CALLS, CUDA_CALLS, REAL_CUDART, SIM_CUDART, EacgmTest,  # noqa: E402
                           require_root, bpf_links_of, links_left, wait_for_child, wait_for_line,
                           EACGM)


def printed_calls(stdout):
    """cuda_calls prints `call NAME ret=CODE` for every call it makes."""
    calls = []
    for line in stdout.splitlines():
        if line.startswith("call "):
            name, ret = line.split()[1], int(line.split("ret=")[1])
            calls.append((name, ret))
    return calls


class SimulatedRuntime(EacgmTest):
    def setUp(self):
        require_root(self)
        super().setUp()

    def test_basic_sequence_counts_bytes_and_memory(self):
        s = self.record([CUDA_CALLS, "--lib", SIM_CUDART])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual([n for n, _ in printed_calls(s.stdout)], BASIC_SEQUENCE)
        expected = {name: BASIC_SEQUENCE.count(name) for name in BASIC_SEQUENCE}
        self.assertEqual({k: v["count"] for k, v in s.calls().items()}, expected)
        for name, stats in s.calls().items():
            self.assertEqual(stats["errors"], 0, name)
            self.assertGreater(stats["p99_ns"], 0, name)
            self.assertGreaterEqual(stats["p99_ns"], stats["p50_ns"], name)
        self.assertEqual(s.calls()["cudaMalloc"]["bytes"], 1048576 + 2097152 + 4096)
        self.assertEqual(s.calls()["cudaMemcpy"]["bytes"], 4096)
        self.assertEqual(s.calls()["cudaMemset"]["bytes"], 512)
        # The runtime's own driver calls are recorded too, each inside its runtime call, and never
        # counted again as memory (the figures above) or as calls of the cuda layer.
        self.assertEqual(s.summary["layers"]["driver"].get("inner_calls"),
                         BASIC_SEQUENCE_DRIVER_CALLS)
        self.assertEqual(s.calls("driver"), {})
        self.assertEqual(s.rows("SELECT COUNT(*) FROM calls WHERE layer = 'driver' AND "
                                "(inner_call = 0 OR depth = 0)"), [(0,)])
        recorded = len(BASIC_SEQUENCE) + sum(BASIC_SEQUENCE_DRIVER_CALLS.values())
        self.assertEqual(s.summary["events"],
                         {"recorded": recorded, "dropped": 0, "undecodable": 0})
        self.assertEqual(s.summary["exit_code"], 0)
        pid = s.summary["processes"][0]["pid"]
        self.assertEqual(s.summary["memory"]["outstanding_device_bytes"], {str(pid): 4096})
        self.assertEqual(s.summary["memory"]["peak_device_bytes"], {str(pid): 1048576 + 2097152 + 4096})
        self.assertEqual(s.summary["layers"]["cuda"]["status"], "active")
        self.assertSessionComplete(s)

    def test_decoded_arguments(self):
        s = self.record([CUDA_CALLS, "--lib", SIM_CUDART])
        self.assertEqual(s.returncode, 0, s.stderr)
        import json
        (args,) = s.rows("SELECT args FROM calls WHERE name='cudaLaunchKernel'")[0]
        args = json.loads(args)
        self.assertEqual(args["gridDim"], "(4,2,1)")
        self.assertEqual(args["blockDim"], "(128,1,1)")
        self.assertEqual(args["sharedMem"], 256)
        self.assertEqual(args["stream"], "0x5678")
        self.assertEqual(args["func"], "0x1234")
        (args,) = s.rows("SELECT args FROM calls WHERE name='cudaMemcpy'")[0]
        args = json.loads(args)
        self.assertEqual(args["kind"], "cudaMemcpyHostToDevice")
        self.assertEqual(args["count"], 4096)
        (args,) = s.rows("SELECT args FROM calls WHERE name='cudaMemset'")[0]
        self.assertEqual(json.loads(args)["value"], 7)
        # The pointers cudaMalloc returned are the ones cudaFree released.
        mallocs = [json.loads(a)["devPtr"] for (a,) in
                   s.rows("SELECT args FROM calls WHERE name='cudaMalloc' ORDER BY start_ns")]
        frees = [json.loads(a)["devPtr"] for (a,) in
                 s.rows("SELECT args FROM calls WHERE name='cudaFree' ORDER BY start_ns")]
        self.assertEqual(frees, mallocs[:2])
        self.assertTrue(all(int(p, 16) != 0 for p in mallocs))

    def test_library_loaded_late_from_an_unlisted_path(self):
        # A copy outside every search path, opened after a delay: only the
        # loader probe can find it, and it must be traced from its first call.
        hidden = os.path.join(self.tmp, "vendor", "libcudart.so.13")
        os.makedirs(os.path.dirname(hidden))
        shutil.copy(SIM_CUDART, hidden)
        s = self.record([CUDA_CALLS, "--lib", hidden, "--late-ms", "300"])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(s.count("cudaMalloc"), 3)
        self.assertEqual(sum(v["count"] for v in s.calls().values()), len(BASIC_SEQUENCE))
        # Named as the job knows the file, not through /proc/PID/root.
        self.assertEqual(s.summary["layers"]["cuda"]["libraries"], [os.path.realpath(hidden)])

    def test_overhead_counts_every_probe_hit(self):
        # A private copy: the probes of a file fire in every process that calls it, and the
        # suite runs other jobs on the shared simulated runtime beside this one.
        private = os.path.join(self.tmp, "own", "libcudart.so.13")
        os.makedirs(os.path.dirname(private))
        shutil.copy(SIM_CUDART, private)
        s = self.record([CUDA_CALLS, "--lib", private], "--layers", "cuda")
        self.assertEqual(s.returncode, 0, s.stderr)
        o = s.summary["overhead"]
        # One entry and one return per call, nothing else in this file.
        self.assertEqual(o["probe_hits"]["cuda"], 2 * len(BASIC_SEQUENCE))
        self.assertGreater(o["bpf_ns_by_layer"]["cuda"], 0)
        self.assertGreater(o["trap_ns_per_hit"], 0)
        self.assertIn(o["trap_ns_source"], ("measured", "cached for this boot"))
        # Every cuda hit trapped; of the core programs only the loader stop's uprobe does.
        least = o["probe_hits"]["cuda"] * o["trap_ns_per_hit"] + o["bpf_ns"]
        most = least + o["probe_hits"]["core"] * o["trap_ns_per_hit"]
        self.assertGreaterEqual(o["estimated_added_s"] * 1e9, least - 1)
        self.assertLessEqual(o["estimated_added_s"] * 1e9, most + 1)
        self.assertGreater(o["agent_cpu_s"], 0)
        self.assertGreater(o["agent_peak_rss_bytes"], 1 << 20)
        self.assertIn("overhead: ~", s.stdout)

    def test_child_process_is_traced(self):
        s = self.record([CUDA_CALLS, "--lib", SIM_CUDART, "--fork"])
        self.assertEqual(s.returncode, 0, s.stderr)
        pids = [p["pid"] for p in s.summary["processes"]]
        self.assertEqual(len(pids), 2)
        per_pid = dict(s.rows("SELECT pid, COUNT(*) FROM calls WHERE layer = 'cuda' GROUP BY pid"))
        self.assertEqual(per_pid, {pid: len(BASIC_SEQUENCE) for pid in pids})
        per_pid = dict(s.rows("SELECT pid, COUNT(*) FROM calls WHERE layer = 'driver' GROUP BY pid"))
        self.assertEqual(per_pid, {pid: sum(BASIC_SEQUENCE_DRIVER_CALLS.values()) for pid in pids})
        child = [p for p in s.summary["processes"] if p["ppid"] in pids][0]
        self.assertEqual(child["exit"]["code"], 0)
        self.assertEqual(s.summary["memory"]["outstanding_device_bytes"],
                         {str(pid): 4096 for pid in pids})

    def test_two_copies_of_the_library(self):
        copy = os.path.join(self.tmp, "other", "libcudart.so.13")
        os.makedirs(os.path.dirname(copy))
        shutil.copy(SIM_CUDART, copy)
        script = f"{CUDA_CALLS} --lib {SIM_CUDART} && {CUDA_CALLS} --lib {copy}"
        s = self.record(["/bin/sh", "-c", script])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(s.count("cudaMalloc"), 6)
        libs = "\n".join(s.summary["layers"]["cuda"]["libraries"])
        self.assertIn(copy, libs)

    def test_crashing_target_keeps_what_was_collected(self):
        s = self.record([CUDA_CALLS, "--lib", SIM_CUDART, "--crash"])
        self.assertEqual(s.returncode, 128 + signal.SIGSEGV, s.stderr)
        proc = s.summary["processes"][0]
        self.assertEqual(proc["exit"]["signal"], signal.SIGSEGV)
        self.assertIn("SIGSEGV", proc["exit"]["cause"])
        self.assertEqual(sum(v["count"] for v in s.calls().values()), len(BASIC_SEQUENCE))
        self.assertSessionComplete(s)

    def test_error_codes_from_scripted_faults(self):
        script = os.path.join(self.tmp, "faults.txt")
        with open(script, "w") as f:
            f.write("fail cudaMalloc nth=2 error=2\n")
        env = dict(os.environ, SIMGPU_SCRIPT=script)
        s = self.record([CUDA_CALLS, "--lib", SIM_CUDART], env=env)
        self.assertEqual(s.returncode, 0, s.stderr)
        m = s.calls()["cudaMalloc"]
        self.assertEqual((m["count"], m["errors"]), (3, 1))
        self.assertEqual(m["errors_by_code"], {"cudaErrorMemoryAllocation": 1})
        self.assertEqual(m["bytes"], 1048576 + 4096)  # the failed one allocated nothing
        self.assertIn("cudaErrorMemoryAllocation", s.stdout)

    def test_ctrl_c_forwards_and_writes_a_complete_session(self):
        out, p = self.start_record([CUDA_CALLS, "--lib", SIM_CUDART, "--sequence", "loop",
                                    "--count", "1000000000"])
        wait_for_child(p.pid, "cuda_calls")
        time.sleep(1.0)  # thousands of loops, traced
        p.send_signal(signal.SIGINT)
        s = self.finish(out, p)
        self.assertEqual(s.returncode, 128 + signal.SIGINT, s.stderr)
        self.assertTrue(s.summary["interrupted"])
        self.assertEqual(s.summary["processes"][0]["exit"]["signal"], signal.SIGINT)
        mallocs, frees = s.count("cudaMalloc"), s.count("cudaFree")
        self.assertGreater(mallocs, 100)
        self.assertLessEqual(abs(mallocs - frees), 1)
        self.assertSessionComplete(s)

    def test_second_ctrl_c_stops_at_once(self):
        ignore = ("import signal,time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                  "time.sleep(60)")
        out, p = self.start_record(["/usr/bin/python3.11", "-c", ignore])
        # Once the job runs (a loaded machine may take seconds to get there), and once it has
        # had time to ignore SIGINT.
        wait_for_child(p.pid, "python3.11")
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        time.sleep(0.5)
        started = time.time()
        p.send_signal(signal.SIGINT)
        s = self.finish(out, p, timeout=10)
        self.assertLess(time.time() - started, 5)
        self.assertEqual(s.returncode, 130)
        self.assertTrue(s.summary["interrupted"])
        subprocess.run(["pkill", "-f", "SIG_IGN"], check=False)

    def test_attach_to_running_process(self):
        target = subprocess.Popen([CUDA_CALLS, "--lib", SIM_CUDART, "--wait-signal"],
                                  stdout=subprocess.PIPE, text=True)
        wait_for_line(target.stdout, "ready")
        out, attach = self.start([EACGM, "attach", "-p", str(target.pid), "-d", "20", "-o",
                                  self.out()], self.out())
        self.wait_for_stderr(attach, "eacgm: attached")
        ours = bpf_links_of(attach.pid)
        self.assertTrue(ours, "attach holds no BPF links")
        target.send_signal(signal.SIGUSR1)
        self.assertEqual(target.wait(timeout=10), 0)
        target.stdout.close()
        s = self.finish(out, attach)
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(s.count("cudaMalloc"), 3)
        self.assertEqual(sum(v["count"] for v in s.calls().values()), len(BASIC_SEQUENCE))
        self.assertEqual(s.process(target.pid)["exit"]["code"], 0)
        self.assertFalse(links_left(ours), "probes left behind after attach")


class RealNvidiaRuntime(EacgmTest):
    """The real libcudart from /usr/local/cuda: no GPU here, so every call
    fails with cudaErrorInsufficientDriver (35), and that code is captured."""

    def setUp(self):
        require_root(self)
        if not os.path.exists(REAL_CUDART):
            self.skipTest(f"{REAL_CUDART} not installed")
        super().setUp()

    def test_every_call_and_return_code_is_captured(self):
        s = self.record([CUDA_CALLS, "--lib", REAL_CUDART])
        self.assertEqual(s.returncode, 0, s.stderr)
        printed = printed_calls(s.stdout)
        self.assertEqual([n for n, _ in printed], BASIC_SEQUENCE)
        for name in set(BASIC_SEQUENCE):
            codes = [r for n, r in printed if n == name]
            stats = s.calls()[name]
            self.assertEqual(stats["count"], len(codes), name)
            self.assertEqual(stats["errors"], sum(1 for r in codes if r != 0), name)
        rets = sorted(r for (r,) in s.rows("SELECT ret FROM calls"))
        self.assertEqual(rets, sorted(r for _, r in printed))
        self.assertIn(35, rets)
        (err,) = s.rows("SELECT error FROM calls WHERE ret=35 LIMIT 1")[0]
        self.assertEqual(err, "cudaErrorInsufficientDriver")
        import json
        (args,) = s.rows("SELECT args FROM calls WHERE name='cudaLaunchKernel'")[0]
        self.assertEqual(json.loads(args)["gridDim"], "(4,2,1)")
        self.assertEqual(json.loads(args)["stream"], "0x5678")

    def test_extended_launches_and_per_thread_stream_variants(self):
        """cudaLaunchKernelExC's shape and stream come from its cudaLaunchConfig_t; the
        per-thread default stream variants (nvcc --default-stream per-thread) are traced."""
        import json
        script = os.path.join(self.tmp, "job.py")
        with open(script, "w") as f:
            f.write(f"""import ctypes
lib = ctypes.CDLL({REAL_CUDART!r})
u, p, n = ctypes.c_uint, ctypes.c_void_p, ctypes.c_size_t
# cudaLaunchConfig_t: gridDim (8,4,2), blockDim (64,2,1), 2048 bytes, stream 0xabc, no attrs.
config = (ctypes.c_uint * 14)(8, 4, 2, 64, 2, 1, 2048, 0, 0xabc, 0, 0, 0, 0, 0)
lib.cudaLaunchKernelExC(ctypes.byref(config), p(0x1234), None)
lib.cudaLaunchKernelExC_ptsz(ctypes.byref(config), p(0x1234), None)
lib.cudaMemcpy_ptds(p(0x1000), p(0x2000), n(4096), ctypes.c_int(1))
lib.cudaMemsetAsync_ptsz(p(0x1000), ctypes.c_int(0), n(512), p(0x5678))
""")
        s = self.record(["/usr/bin/python3.11", script], "--layers", "cuda")
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual({k: v["count"] for k, v in s.calls().items()},
                         {"cudaLaunchKernelExC": 1, "cudaLaunchKernelExC_ptsz": 1,
                          "cudaMemcpy_ptds": 1, "cudaMemsetAsync_ptsz": 1})
        for name in ("cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz"):
            (args,) = s.rows("SELECT args FROM calls WHERE name = ?", name)[0]
            args = json.loads(args)
            self.assertEqual({k: args[k] for k in ("func", "gridDim", "blockDim",
                                                    "dynamicSmemBytes", "stream")},
                             {"func": "0x1234", "gridDim": "(8,4,2)", "blockDim": "(64,2,1)",
                              "dynamicSmemBytes": 2048, "stream": "0xabc"}, name)
        (args,) = s.rows("SELECT args FROM calls WHERE name = 'cudaMemcpy_ptds'")[0]
        self.assertEqual(json.loads(args)["kind"], "cudaMemcpyHostToDevice")


if __name__ == "__main__":
    eacgm_testlib.main()
