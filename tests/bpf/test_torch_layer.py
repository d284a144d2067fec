"""bpf: the torch layer on Debian's python3-torch (1.13, CPU) run by /usr/bin/python3.11.

Known scripts make known ATen operator calls; the counts eacgm records must be exact, nested
operators must carry their depth and self time, --torch-ops must filter, and a job without
torch must say the layer is unavailable and why. The nesting asserted here was checked against
torch.autograd.profiler on the same library: aten::linear on a 2-D input with a bias calls
aten::t and aten::addmm; aten::softmax (softmax.int) calls aten::_softmax."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import eacgm_testlib  # noqa: E402
from eacgm_testlib import EacgmTest, require_root, EACGM  # noqa: E402

PYTHON = "/usr/bin/python3.11"
TORCH_CPU = "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13"


def have_torch():
    return os.path.exists(TORCH_CPU) and subprocess.run(
        [PYTHON, "-c", "import torch"], capture_output=True).returncode == 0


# Each script prints "done" last, so a failure to run shows as a missing line, not as counts.
MM_SCRIPT = """
import torch
a = torch.randn(16, 32)
b = torch.randn(32, 8)
for _ in range({n}):
    torch.mm(a, b)
print("done")
"""

NESTED_SCRIPT = """
import torch
import torch.nn.functional as F
x = torch.randn(8, 16)
w = torch.randn(32, 16)
b = torch.randn(32)
for _ in range({linear}):
    F.linear(x, w, b)
for _ in range({softmax}):
    torch.softmax(x, 1)
for _ in range({mm}):
    torch.mm(x, w.t())
print("done")
"""


# Shapes that do not fit make aten::mm, and aten::addmm under aten::linear, raise c10::Error,
# which Python catches; then the same operators run on shapes that fit.
THROW_SCRIPT = """
import torch
import torch.nn.functional as F
a, b, bad = torch.randn(16, 32), torch.randn(32, 8), torch.randn(7, 8)
x, w, wbad, bias = torch.randn(8, 16), torch.randn(32, 16), torch.randn(32, 5), torch.randn(32)
failed = 0
for _ in range({bad}):
    for op, args in ((torch.mm, (a, bad)), (F.linear, (x, wbad, bias))):
        try:
            op(*args)
        except RuntimeError:
            failed += 1
for _ in range({good}):
    torch.mm(a, b)
    F.linear(x, w, bias)
print("failed", failed)
print("done")
"""

# The same failure on four threads at once: the bindings release the GIL around the operator, so
# the throws overlap (each takes milliseconds: c10::Error symbolises a backtrace).
THREADED_THROW_SCRIPT = """
import threading
import torch
a, bad = torch.randn(16, 32), torch.randn(7, 8)
failed = []
def work():
    n = 0
    for _ in range({bad}):
        try:
            torch.mm(a, bad)
        except RuntimeError:
            n += 1
    failed.append(n)
threads = [threading.Thread(target=work) for _ in range({threads})]
for t in threads: t.start()
for t in threads: t.join()
print("failed", sum(failed))
print("done")
"""


class TorchLayer(EacgmTest):
    def setUp(self):
        require_root(self)
        if not have_torch():
            self.skipTest("Debian python3-torch is not installed (scripts/install-deps.sh)")
        super().setUp()

    def run_script(self, script, *flags, out=None):
        s = self.record([PYTHON, "-c", script], "--layers", "torch", *flags, out=out, timeout=180)
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertIn("done", s.stdout)
        self.assertEqual(s.summary["layers"]["torch"]["status"], "active", s.summary["layers"])
        self.assertEqual(s.summary["events"]["dropped"], 0)
        return s

    def ops(self, s):
        return s.summary["layers"]["torch"]["ops"]

    def test_explicit_mm_calls_are_counted_exactly(self):
        n = 37
        s = self.run_script(MM_SCRIPT.format(n=n))
        ops = self.ops(s)
        self.assertEqual(ops["aten::mm"]["count"], n)
        mm = ops["aten::mm"]
        self.assertGreater(mm["p50_ns"], 0)
        self.assertGreaterEqual(mm["p99_ns"], mm["p50_ns"])
        self.assertGreaterEqual(mm["total_ns"], n * mm["p50_ns"] // 2)
        # aten::mm calls no operator of the default set: all of its time is its own.
        self.assertEqual(mm["self_ns"], mm["total_ns"])
        self.assertTrue(any("libtorch_cpu.so" in lib
                            for lib in s.summary["layers"]["torch"]["libraries"]))
        rows = s.rows("SELECT layer, depth FROM calls WHERE name='aten::mm'")
        self.assertEqual(len(rows), n)
        self.assertEqual(set(rows), {("torch", 0)})
        self.assertSessionComplete(s)

    def test_nested_operators_have_depth_and_self_time(self):
        linear, softmax = 11, 7
        s = self.run_script(NESTED_SCRIPT.format(linear=linear, softmax=softmax, mm=0),
                            "--torch-ops", "linear|addmm|softmax|_softmax")
        ops = self.ops(s)
        self.assertEqual({k: v["count"] for k, v in ops.items()},
                         {"aten::linear": linear, "aten::addmm": linear,
                          "aten::softmax.int": softmax, "aten::_softmax": softmax})
        # Each child lies inside a parent of the same thread, one level deeper.
        for parent, child in (("aten::linear", "aten::addmm"),
                              ("aten::softmax.int", "aten::_softmax")):
            parents = s.rows("SELECT tid, start_ns, start_ns + duration_ns, depth FROM calls "
                             "WHERE name=? ORDER BY start_ns", parent)
            children = s.rows("SELECT tid, start_ns, start_ns + duration_ns, depth FROM calls "
                              "WHERE name=? ORDER BY start_ns", child)
            self.assertEqual(len(parents), len(children))
            for (ptid, pstart, pend, pdepth), (ctid, cstart, cend, cdepth) in zip(parents, children):
                self.assertEqual((pdepth, cdepth), (0, 1))
                self.assertEqual(ptid, ctid)
                self.assertTrue(pstart <= cstart and cend <= pend, (parent, child))
            # Self time is the parent's total less exactly its traced children's.
            self.assertEqual(ops[parent]["self_ns"],
                             ops[parent]["total_ns"] - ops[child]["total_ns"])
            self.assertEqual(ops[child]["self_ns"], ops[child]["total_ns"])
            self.assertLess(ops[parent]["self_ns"], ops[parent]["total_ns"])
        self.assertSessionComplete(s)

    def test_perfetto_slices_nest_under_the_thread(self):
        s = self.run_script(NESTED_SCRIPT.format(linear=3, softmax=0, mm=0),
                            "--torch-ops", "linear|addmm")
        t = s.perfetto()
        if t is None:
            self.skipTest("this build made no Python module for the Perfetto protos")
        # Packets are in begin order per thread (see perfetto_writer.cpp), so the
        # slices read linear, addmm, end, end three times over.
        sequence = []
        for p in t.packet:
            if not p.HasField("track_event"):
                continue
            e = p.track_event
            if e.type == 1:
                sequence.append(e.name)
            elif e.type == 2:
                sequence.append("end")
        self.assertEqual(sequence, ["aten::linear", "aten::addmm", "end", "end"] * 3)

    def test_torch_ops_filter(self):
        s = self.run_script(NESTED_SCRIPT.format(linear=5, softmax=4, mm=6), "--torch-ops", "mm")
        self.assertEqual({k: v["count"] for k, v in self.ops(s).items()}, {"aten::mm": 6})
        s = self.run_script(NESTED_SCRIPT.format(linear=5, softmax=4, mm=6),
                            "--torch-ops", r"aten::softmax\.int", out=self.out("second"))
        self.assertEqual({k: v["count"] for k, v in self.ops(s).items()}, {"aten::softmax.int": 4})

    def test_all_operators(self):
        s = self.run_script(NESTED_SCRIPT.format(linear=2, softmax=0, mm=0), "--torch-ops", "all")
        ops = self.ops(s)
        self.assertGreater(len(ops), 4)
        self.assertEqual(ops["aten::linear"]["count"], 2)
        self.assertEqual(ops["aten::addmm"]["count"], 2)
        # With every operator traced, linear's children include aten::t (and its transpose),
        # so linear's own time is less than its total and addmm sits one level below it.
        self.assertEqual(s.rows("SELECT DISTINCT depth FROM calls WHERE name='aten::linear'"),
                         [(0,)])
        self.assertEqual(s.rows("SELECT DISTINCT depth FROM calls WHERE name='aten::addmm'"),
                         [(1,)])
        (t_in_linear,) = s.rows(
            "SELECT COUNT(*) FROM calls c JOIN calls p ON c.tid = p.tid AND c.name = 'aten::t' "
            "AND p.name = 'aten::linear' AND c.depth = 1 AND c.start_ns >= p.start_ns "
            "AND c.start_ns + c.duration_ns <= p.start_ns + p.duration_ns")[0]
        self.assertEqual(t_in_linear, 2)
        self.assertLess(ops["aten::linear"]["self_ns"], ops["aten::linear"]["total_ns"])

    def test_backward_thread_is_marked_autograd(self):
        # CPU backward runs on the thread that calls backward(): here a Python thread, which
        # then runs threshold_backward (relu's) and is marked; the main thread only runs
        # forward operators and is not.
        script = """
import threading, torch
x = torch.randn(8, 16, requires_grad=True)
w = torch.randn(32, 16)
def step():
    torch.relu(torch.nn.functional.linear(x, w)).sum().backward()
t = threading.Thread(target=step)
t.start(); t.join()
torch.relu(torch.nn.functional.linear(x, w))
print("done")
"""
        s = self.run_script(script)
        threads = s.summary["layers"]["torch"]["threads"]
        pid = s.summary["processes"][0]["pid"]
        main = [t for t in threads if t["tid"] == pid]
        workers = [t for t in threads if t["tid"] != pid]
        self.assertEqual(len(main), 1, threads)
        self.assertEqual(len(workers), 1, threads)
        self.assertFalse(main[0]["autograd"])
        self.assertEqual(main[0]["backward_ops"], 0)
        self.assertTrue(workers[0]["autograd"])
        self.assertEqual(self.ops(s)["aten::threshold_backward"]["count"], 1)
        self.assertEqual(workers[0]["backward_ops"], 1)
        (name,) = s.rows("SELECT name FROM threads WHERE tid=?", workers[0]["tid"])[0]
        self.assertTrue(name.endswith(" (autograd)"), name)

    def test_exceptions_through_operators_leave_the_job_running(self):
        # Under return probes, an exception unwinding through an operator used to make the C++
        # runtime terminate the job (the unwinder cannot step over the kernel's trampoline).
        bad, good = 30, 20
        s = self.run_script(THROW_SCRIPT.format(bad=bad, good=good),
                            "--torch-ops", "mm|linear|addmm")
        self.assertIn(f"failed {2 * bad}", s.stdout)
        self.assertEqual({k: v["count"] for k, v in self.ops(s).items()},
                         {"aten::mm": good, "aten::linear": good, "aten::addmm": good})
        # Each failure left open calls: aten::mm, or aten::linear with aten::addmm inside it.
        self.assertEqual(s.summary["layers"]["torch"]["calls_unwound"], 3 * bad)
        # The calls after them pair and nest as ever: nothing was left on the thread's stack.
        self.assertEqual(set(s.rows("SELECT name, depth FROM calls")),
                         {("aten::mm", 0), ("aten::linear", 0), ("aten::addmm", 1)})
        self.assertSessionComplete(s)

    def test_exceptions_on_several_threads_at_once(self):
        # A second thread may begin to unwind before the first one's stop reaches it: eacgm must
        # not resume the process before that thread's return addresses are back too.
        bad, threads = 40, 4
        s = self.run_script(THREADED_THROW_SCRIPT.format(bad=bad, threads=threads),
                            "--torch-ops", "mm")
        self.assertIn(f"failed {bad * threads}", s.stdout)
        self.assertEqual(s.summary["layers"]["torch"]["calls_unwound"], bad * threads)
        self.assertSessionComplete(s)

    def test_bad_filter_is_a_usage_error(self):
        for spec in ["(", "[a-", ""]:
            p = subprocess.run([EACGM, "record", "-o", self.out(), "--layers", "torch",
                                "--torch-ops", spec, "--", "true"],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, spec)
            self.assertIn("--torch-ops", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(self.out(), "summary.json")))

    def test_job_without_torch_is_unavailable(self):
        s = self.record([PYTHON, "-c", "print('done')"], "--layers", "torch")
        self.assertEqual(s.returncode, 0, s.stderr)
        torch = s.summary["layers"]["torch"]
        self.assertEqual(torch["status"], "unavailable")
        self.assertIn("libtorch_cpu.so", torch["reason"])
        self.assertNotIn("ops", torch)


if __name__ == "__main__":
    eacgm_testlib.main()
