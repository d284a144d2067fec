"""bpf: the python layer on real interpreters.

Debian's /usr/bin/python3.11 has USDT probes: calls are counted exactly and garbage collections
timed. Every interpreter, with or without USDT (pyenv's builds have none), is sampled by walking
its own structures from BPF: a known 300 ms function must get about its time and be flagged as
a slow call, a 1 ms one must not. A CUDA call made through ctypes on the simulated runtime must
carry the Python line that made it."""
import glob
import os
import re
import subprocess
import sys
import textwrap

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import eacgm_testlib  # noqa: E402
from eacgm_testlib import EACGM, EacgmTest, Session, require_root, SIM_CUDART  # noqa: E402

DEBIAN_PYTHON = "/usr/bin/python3.11"


def pyenv_pythons():
    """pyenv's interpreters (built without USDT), newest patch release per minor version."""
    found = {}
    for path in sorted(glob.glob("/root/.pyenv/versions/3.*/bin/python3.*")):
        m = re.search(r"/versions/(3\.(\d+)\.\d+)/bin/python3\.\d+$", path)
        if m and 8 <= int(m.group(2)) <= 13:
            found[int(m.group(2))] = path
    return found


# Line numbers below are asserted: keep the script's layout.
TIMED_JOB = textwrap.dedent("""\
    import time

    def quick():
        time.sleep(0.001)

    def slow():
        time.sleep(0.3)

    def work(i):
        return i * 2

    for i in range(20):
        quick()
    slow()
    total = 0
    for i in range({calls}):
        total += work(i)
    print("done", total)
    """)
SLOW_LINE = 7  # time.sleep(0.3)

# Stopped from outside for 400 ms (job control; eacgm's own stops at library loads look alike).
STOPPED_JOB = textwrap.dedent("""\
    import ctypes, os, signal, subprocess, time

    def step():
        time.sleep(0.005)

    def pause():
        subprocess.Popen(["/bin/sh", "-c", f"sleep 0.4; kill -CONT {os.getpid()}"])
        os.kill(os.getpid(), signal.SIGSTOP)

    for _ in range(40):
        step()
    pause()
    for _ in range(40):
        step()
    print("done")
    """)

GC_JOB = textwrap.dedent("""\
    import gc
    gc.disable()
    for _ in range({n}):
        gc.collect()
    print("done")
    """)

CTYPES_JOB = textwrap.dedent("""\
    import ctypes
    lib = ctypes.CDLL({lib!r})

    def allocate(n):
        ptr = ctypes.c_void_p()
        return lib.cudaMalloc(ctypes.byref(ptr), n)

    for i in range({n}):
        allocate(1024)
    print("done")
    """)
ALLOCATE_LINE = 6  # lib.cudaMalloc(...)

# A forked child calls at once, before eacgm has registered it as a Python process: its first
# calls find no interpreter, the later ones must (the BPF side looks again after a registration).
FORKED_JOB = textwrap.dedent("""\
    import ctypes, os, time
    lib = ctypes.CDLL({lib!r})

    def allocate(n):
        ptr = ctypes.c_void_p()
        return lib.cudaMalloc(ctypes.byref(ptr), n)

    allocate(1024)
    child = os.fork()
    if child == 0:
        for i in range({n}):
            allocate(1024)
            time.sleep(0.005)
        os._exit(0)
    os.waitpid(child, 0)
    print("done")
    """)

# The same call made through a helper of an installed package: attributed to the caller's line.
LIBRARY_HELPER = "def call(fn, *args):\n    return fn(*args)\n"
CTYPES_VIA_LIBRARY_JOB = textwrap.dedent("""\
    import ctypes, sys
    sys.path.insert(0, {site!r})
    import fakepkg
    lib = ctypes.CDLL({lib!r})

    def allocate(n):
        ptr = ctypes.c_void_p()
        return fakepkg.call(lib.cudaMalloc, ctypes.byref(ptr), n)

    for i in range({n}):
        allocate(1024)
    print("done")
    """)
VIA_LIBRARY_LINE = 8

# A healthy paced loop: every sample finds step() waiting on one line, but each wait is new.
PACED_LOOP_JOB = textwrap.dedent("""\
    import time

    def step():
        time.sleep(0.004)

    for i in range(300):
        step()
    print("done")
    """)

ATTACH_JOB = textwrap.dedent("""\
    import time

    def wait_here():
        time.sleep(60)

    print("ready", flush=True)
    wait_here()
    """)


class PythonLayer(EacgmTest):
    def setUp(self):
        require_root(self)
        super().setUp()

    def job(self, text, name="job.py"):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def run_job(self, python, script, *flags, layers="python"):
        s = self.record([python, script], "--layers", layers, *flags, timeout=120)
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertIn("done", s.stdout)
        layer = s.summary["layers"]["python"]
        self.assertEqual(layer["status"], "active", s.summary["layers"])
        self.assertEqual(s.summary["events"]["dropped"], 0)
        return s, layer

    def slow_calls(self, s):
        return [a for a in s.summary["anomalies"] if a["kind"] == "slow_call"]

    def assert_timed_and_flagged(self, s, layer):
        functions = layer["functions"]
        slow = functions["job.py:slow"]
        # 99 Hz wall-clock samples: within a few periods of the real 300 ms.
        self.assertGreater(slow["total_ns"], 250e6, slow)
        self.assertLess(slow["total_ns"], 400e6, slow)
        self.assertEqual(slow["first_line"], 6)
        quick = functions.get("job.py:quick", {"total_ns": 0})
        self.assertLess(quick["total_ns"], 150e6, quick)  # 20 x 1 ms, some sleeps overshoot
        flagged = self.slow_calls(s)
        self.assertEqual([a["evidence"]["function"] for a in flagged], ["job.py:slow"],
                         s.summary["anomalies"])
        a = flagged[0]
        self.assertEqual(a["layer"], "python")
        self.assertEqual(a["evidence"]["line"], SLOW_LINE)
        self.assertGreater(a["evidence"]["duration_ms"], 250)
        self.assertLess(a["evidence"]["on_cpu_fraction"], 0.5)  # it was sleeping
        self.assertIn("job.py:<module>", a["evidence"]["stack"][0])

    def test_debian_python_counts_calls_exactly_and_flags_the_slow_function(self):
        calls = 123
        script = self.job(TIMED_JOB.format(calls=calls))
        s, layer = self.run_job(DEBIAN_PYTHON, script, "--python-calls")
        functions = layer["functions"]
        self.assertEqual(functions["job.py:work"]["count"], calls)
        self.assertEqual(functions["job.py:quick"]["count"], 20)
        self.assertEqual(functions["job.py:slow"]["count"], 1)
        self.assertEqual(layer["interpreters"][0]["version"], "3.11")
        self.assertTrue(layer["interpreters"][0]["usdt"])
        self.assert_timed_and_flagged(s, layer)
        rows = s.rows("SELECT count, total_ns FROM python_functions WHERE function = ?",
                      "job.py:work")
        self.assertEqual(rows[0][0], calls)

    def test_the_timeline_has_the_sampled_stack_under_the_thread(self):
        s, layer = self.run_job(DEBIAN_PYTHON, self.job(TIMED_JOB.format(calls=10)))
        t = s.perfetto()
        tracks = {p.track_descriptor.uuid: p.track_descriptor for p in t.packet
                  if p.HasField("track_descriptor")}
        python_tracks = [u for u, d in tracks.items() if d.name == "Python (sampled)"]
        self.assertEqual(len(python_tracks), 1, tracks)
        # Under the main thread's track.
        parent = tracks[tracks[python_tracks[0]].parent_uuid]
        self.assertEqual(parent.thread.tid, parent.thread.pid)
        # Rebuild the slices: BEGIN/END nest per track, in timestamp order.
        events = sorted(((p.timestamp, i, p.track_event) for i, p in enumerate(t.packet)
                         if p.HasField("track_event")
                         and p.track_event.track_uuid == python_tracks[0]),
                        key=lambda e: (e[0], e[1]))
        open_slices, slices = [], []
        for ts, _, ev in events:
            if ev.type == ev.TYPE_SLICE_BEGIN:
                open_slices.append((ev.name, ts, len(open_slices)))
            else:
                name, start, depth = open_slices.pop()
                slices.append((name, start, ts, depth))
        self.assertEqual(open_slices, [])
        slow = [x for x in slices if x[0] == "job.py:slow"]
        self.assertEqual(len(slow), 1, slices)
        name, start, end, depth = slow[0]
        self.assertGreater(end - start, 250e6)
        self.assertLess(end - start, 400e6)
        module = [x for x in slices if x[0] == "job.py:<module>" and x[3] == depth - 1]
        self.assertTrue(any(m[1] <= start and end <= m[2] for m in module), slices)

    def test_a_paced_loop_of_short_calls_is_not_a_slow_call(self):
        s, layer = self.run_job(DEBIAN_PYTHON, self.job(PACED_LOOP_JOB))
        self.assertEqual(self.slow_calls(s), [])
        self.assertGreater(layer["functions"]["job.py:step"]["total_ns"], 0.8e9)

    def test_a_thread_stopped_from_outside_is_not_a_slow_call(self):
        s, layer = self.run_job(DEBIAN_PYTHON, self.job(STOPPED_JOB), layers="python,os")
        self.assertEqual(s.summary["anomalies"], [])
        # Stopped time is nobody's: pause() ran for a moment before and after the stop.
        self.assertLess(layer["functions"].get("job.py:pause", {"total_ns": 0})["total_ns"], 100e6)
        self.assertGreater(layer["functions"]["job.py:step"]["total_ns"], 0.3e9)
        # import ctypes loads _ctypes and libffi: the loader stops are counted as eacgm's cost.
        overhead = s.summary["overhead"]
        self.assertGreaterEqual(overhead["target_pauses"], 2)
        self.assertGreater(overhead["target_paused_s"], 0)
        self.assertLess(overhead["target_paused_s"], 0.3)
        self.assertIn("while eacgm probed what it loaded", s.stdout)

    def test_without_python_calls_nothing_is_counted(self):
        script = self.job(TIMED_JOB.format(calls=10))
        s, layer = self.run_job(DEBIAN_PYTHON, script)
        self.assertNotIn("count", layer["functions"]["job.py:slow"])
        self.assert_timed_and_flagged(s, layer)

    def test_every_pyenv_version_is_sampled_without_usdt(self):
        pythons = pyenv_pythons()
        if not pythons:
            self.skipTest("no pyenv interpreters in /root/.pyenv/versions")
        script = self.job(TIMED_JOB.format(calls=10))
        for minor, python in sorted(pythons.items()):
            with self.subTest(python=python):
                s, layer = self.run_job(python, script, "--python-calls")
                self.assertEqual(layer["interpreters"][0]["version"], f"3.{minor}")
                self.assertFalse(layer["interpreters"][0]["usdt"])
                self.assertNotIn("count", layer["functions"]["job.py:slow"])
                self.assert_timed_and_flagged(s, layer)

    def test_gc_pauses_are_recorded(self):
        # The interpreter collects on its own at start-up and exit: a run without explicit
        # collections is the baseline, and each gc.collect() (a full, generation-2 collection;
        # automatic ones are disabled) adds exactly one.
        counts = []
        for n in (0, 7):
            s, layer = self.run_job(DEBIAN_PYTHON, self.job(GC_JOB.format(n=n), f"gc{n}.py"))
            full = layer["gc"].get("2", {"collections": 0, "total_ns": 0})
            rows = s.rows("SELECT count(*), min(duration_ns) FROM python_gc WHERE generation = 2")
            self.assertEqual(rows[0][0], full["collections"])
            counts.append(full["collections"])
        self.assertEqual(counts[1] - counts[0], 7, counts)
        self.assertGreater(full["total_ns"], 0)
        self.assertGreater(rows[0][1], 0)

    def test_cuda_call_is_attributed_to_the_python_line(self):
        n = 5
        script = self.job(CTYPES_JOB.format(lib=SIM_CUDART, n=n))
        s, layer = self.run_job(DEBIAN_PYTHON, script, layers="cuda,python")
        self.assertEqual(s.count("cudaMalloc"), n)
        rows = s.rows("SELECT py_function, py_file, py_line FROM calls WHERE name = 'cudaMalloc'")
        self.assertEqual(rows, [("job.py:allocate", script, ALLOCATE_LINE)] * n)
        sites = [a.string_value for p in s.perfetto().packet
                 for a in p.track_event.debug_annotations if a.name == "python"]
        self.assertEqual(sites, [f"job.py:allocate line {ALLOCATE_LINE}"] * n)

    def test_a_forked_child_is_attributed_once_it_is_registered(self):
        n = 60  # ~300 ms of calls; the fork is registered within a few ms
        script = self.job(FORKED_JOB.format(lib=SIM_CUDART, n=n))
        s, layer = self.run_job(DEBIAN_PYTHON, script, layers="cuda,python")
        rows = s.rows("SELECT pid, py_function, py_line FROM calls WHERE name = 'cudaMalloc' "
                      "ORDER BY start_ns")
        self.assertEqual(len(rows), n + 1, rows)
        self.assertEqual(rows[0][1:], ("job.py:allocate", ALLOCATE_LINE))
        child = rows[1:]
        self.assertEqual(len({r[0] for r in child}), 1, child)
        self.assertNotEqual(child[0][0], rows[0][0])
        attributed = [r for r in child if r[1:] == ("job.py:allocate", ALLOCATE_LINE)]
        # Once attributed, every later call is: the unattributed ones are the first few only.
        first = child.index(attributed[0]) if attributed else n
        self.assertEqual(child[first:], attributed, child)
        self.assertLess(first, n // 2, child)

    def test_a_call_made_inside_a_package_is_attributed_to_the_callers_line(self):
        n = 4
        site = os.path.join(self.tmp, "venv", "lib", "python3.11", "site-packages")
        os.makedirs(os.path.join(site, "fakepkg"))
        with open(os.path.join(site, "fakepkg", "__init__.py"), "w") as f:
            f.write(LIBRARY_HELPER)
        script = self.job(CTYPES_VIA_LIBRARY_JOB.format(site=site, lib=SIM_CUDART, n=n))
        s, layer = self.run_job(DEBIAN_PYTHON, script, layers="cuda,python")
        rows = s.rows("SELECT py_function, py_line FROM calls WHERE name = 'cudaMalloc'")
        self.assertEqual(rows, [("job.py:allocate", VIA_LIBRARY_LINE)] * n)

    def test_attach_samples_a_running_interpreter_and_leaves_it_running(self):
        job = subprocess.Popen([DEBIAN_PYTHON, self.job(ATTACH_JOB)], stdout=subprocess.PIPE,
                               text=True)
        try:
            self.assertEqual(job.stdout.readline().strip(), "ready")
            out = self.out()
            done = subprocess.run([EACGM, "attach", "-p", str(job.pid), "-d", "1", "-o", out,
                                   "--layers", "python"], capture_output=True, text=True,
                                  timeout=60)
            self.assertEqual(done.returncode, 0, done.stderr)
            s = Session(out, done)
            layer = s.summary["layers"]["python"]
            self.assertEqual(layer["status"], "active", s.summary["layers"])
            waited = layer["functions"]["job.py:wait_here"]
            self.assertGreater(waited["total_ns"], 0.7e9, waited)
            self.assertLess(waited["total_ns"], 1.3e9, waited)
            self.assertEqual(waited["self_ns"], waited["total_ns"])
            flagged = self.slow_calls(s)
            self.assertEqual([(a["evidence"]["function"], a["evidence"]["line"]) for a in flagged],
                             [("job.py:wait_here", 4)], s.summary["anomalies"])
            self.assertIsNone(job.poll())  # never harmed
        finally:
            job.kill()
            job.wait()

    def test_a_job_without_python_leaves_the_layer_unavailable(self):
        s = self.record(["/bin/true"], "--layers", "cuda,python")
        self.assertEqual(s.returncode, 0, s.stderr)
        layer = s.summary["layers"]["python"]
        self.assertEqual(layer["status"], "unavailable")
        self.assertIn("CPython", layer["reason"])


if __name__ == "__main__":
    eacgm_testlib.main()
