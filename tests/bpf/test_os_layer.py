"""bpf: the os layer, as root, on real kernel events: a process killed by
another names the sender; an allocation past a memory cgroup's limit is an OOM
kill with its cgroup; a MAP_POPULATE burst is a storm and a normal start-up is
not; two builds of libcudart in one process are a conflict; ioctls on a
device are counted exactly and a slow one is flagged."""
import json
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import eacgm_testlib  # noqa: E402
from eacgm_testlib import (CUDA_CALLS, REAL_CUDART, SIM_CUDART, SIMTRAIN, EacgmTest,  # noqa: E402
                           require_root)

OS_EVENTS = os.environ.get("OS_EVENTS_BIN", "build/tests/os_events")
PYTHON = "/usr/bin/python3.11"


def wait_for_file(path, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                text = f.read().strip()
            if text:
                return text
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


def anomalies(session, kind):
    return [a for a in session.summary["anomalies"] if a["kind"] == kind]


class MemoryCgroup:
    """A memory-limited cgroup for one test, cgroup v2 where the memory
    controller is there, else the v1 memory hierarchy (hybrid machines such as
    these have memory on v1 and an empty v2 at /sys/fs/cgroup/unified)."""

    def __init__(self, name, limit):
        self.name = name
        self.path = None
        self.version = None
        mounts = {}
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, right = line.split(" - ")
                mount_point = left.split()[4]
                fstype, _, options = right.split()
                mounts.setdefault(fstype, []).append((mount_point, options.split(",")))
        for root, _ in mounts.get("cgroup2", []):
            with open(os.path.join(root, "cgroup.controllers")) as f:
                if "memory" not in f.read().split():
                    continue
            subtree = os.path.join(root, "cgroup.subtree_control")
            with open(subtree) as f:
                enabled = "memory" in f.read().split()
            if not enabled:
                with open(subtree, "w") as f:
                    f.write("+memory")
            self.path, self.version = os.path.join(root, name), 2
            os.mkdir(self.path)
            self._write("memory.max", str(limit))
            if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                self._write("memory.swap.max", "0")
            return
        for root, options in mounts.get("cgroup", []):
            if "memory" not in options:
                continue
            self.path, self.version = os.path.join(root, name), 1
            os.mkdir(self.path)
            self._write("memory.limit_in_bytes", str(limit))
            try:  # with swap accounting, swap would otherwise absorb the excess
                self._write("memory.memsw.limit_in_bytes", str(limit))
            except OSError:
                pass
            return
        raise unittest.SkipTest("no memory cgroup controller on this machine")

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def procs_file(self):
        return os.path.join(self.path, "cgroup.procs")

    def remove(self):
        for _ in range(50):  # the killed process leaves the cgroup asynchronously
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)


class OsLayer(EacgmTest):
    def setUp(self):
        require_root(self)
        super().setUp()

    def test_process_killed_by_another_names_the_sender(self):
        pidfile = os.path.join(self.tmp, "pid")
        job = f"echo $$ > {pidfile}; exec {CUDA_CALLS} --lib {SIM_CUDART} --sequence loop " \
              "--count 1000000000"
        out, p = self.start_record(["/bin/sh", "-c", job])
        pid = int(wait_for_file(pidfile))
        time.sleep(1.0)  # let it make CUDA calls: the flight recorder keeps the last ones
        killer = subprocess.Popen(["/bin/kill", "-KILL", str(pid)])
        self.assertEqual(killer.wait(timeout=10), 0)
        s = self.finish(out, p)
        self.assertEqual(s.returncode, 128 + signal.SIGKILL, s.stderr)
        exit = s.process(pid)["exit"]
        self.assertEqual(exit["signal"], signal.SIGKILL)
        self.assertEqual(exit["sender"], {"pid": killer.pid, "comm": "kill"})
        self.assertEqual(exit["cause"], f"killed by SIGKILL from pid {killer.pid} (kill)")
        self.assertIsNone(exit["code"])
        self.assertEqual(s.summary["layers"]["os"]["status"], "active")
        sent = [x for x in s.summary["layers"]["os"]["signals"]
                if x["pid"] == pid and x["signal"] == signal.SIGKILL]
        self.assertEqual(len(sent), 1, s.summary["layers"]["os"]["signals"])
        self.assertEqual(sent[0]["sender"]["pid"], killer.pid)
        self.assertEqual(sent[0]["code"], "SI_USER")
        self.assertIn(f"from pid {killer.pid} (kill)", s.stdout)
        # SQLite keeps the signal with its sender.
        rows = s.rows("SELECT name, value, json_extract(detail, '$.sender_pid') FROM os_events "
                      "WHERE kind='signal' AND pid=?", pid)
        self.assertIn(("SIGKILL", signal.SIGKILL, killer.pid), rows)
        # The flight recorder: its last CUDA calls (64 kept per layer), then the signal.
        relative = s.process(pid)["flight_recorder"]
        self.assertEqual(relative, f"flight_recorder/{pid}.json")
        with open(os.path.join(s.path, relative)) as f:
            flight = json.load(f)
        self.assertEqual(flight["exit"]["sender"]["pid"], killer.pid)
        events = flight["events"]
        cuda = [e for e in events if e["layer"] == "cuda"]
        self.assertEqual(len(cuda), 64)
        self.assertTrue({"cudaMalloc", "cudaFree"} & {e["event"] for e in cuda})
        signals = [e for e in events if e["event"] == "signal"]
        self.assertEqual(signals[-1]["signal"], "SIGKILL")
        self.assertEqual(events[-1]["event"], "exit")
        times = [e["t_s"] for e in events]
        self.assertEqual(times, sorted(times))
        self.assertSessionComplete(s)

    def test_normal_exit_writes_no_flight_recorder(self):
        s = self.record([CUDA_CALLS, "--lib", SIM_CUDART])
        self.assertEqual(s.returncode, 0, s.stderr)
        proc = s.summary["processes"][0]
        self.assertNotIn("flight_recorder", proc)
        self.assertIsNone(proc["exit"]["sender"])
        self.assertFalse(os.path.exists(os.path.join(s.path, "flight_recorder")))

    def test_allocation_past_the_memory_cgroup_limit_is_an_oom_kill(self):
        name = f"eacgm-test-{os.getpid()}"
        cgroup = MemoryCgroup(name, 64 << 20)
        try:
            job = f"echo $$ > {cgroup.procs_file()} && exec {PYTHON} -c 'x = bytearray(300<<20)'"
            s = self.record(["/bin/sh", "-c", job], "--layers", "os")
        finally:
            cgroup.remove()
        self.assertEqual(s.returncode, 128 + signal.SIGKILL, s.stderr)
        proc = s.summary["processes"][0]
        self.assertEqual(proc["exit"]["signal"], signal.SIGKILL)
        cause = proc["exit"]["cause"]
        self.assertTrue(cause.startswith("killed by the OOM killer: anon-rss "), cause)
        self.assertTrue(cause.endswith(f"/{name}"), cause)
        self.assertIsNone(proc["exit"]["sender"])
        (oom,) = s.summary["layers"]["os"]["oom_kills"]
        self.assertEqual(oom["pid"], proc["pid"])
        self.assertEqual(oom["comm"], "python3.11")
        self.assertTrue(oom["cgroup"].endswith(f"/{name}"), oom["cgroup"])
        self.assertEqual(oom["cgroup_version"], cgroup.version)
        # Charged against 64 MiB: most of it anonymous, none of it above the limit.
        self.assertGreater(oom["anon_rss_bytes"], 32 << 20)
        self.assertLessEqual(oom["anon_rss_bytes"], 64 << 20)
        self.assertGreaterEqual(oom["total_vm_bytes"], 300 << 20)
        self.assertEqual(len(anomalies(s, "oom_kill")), 1)
        self.assertIn(f"flight_recorder/{proc['pid']}.json", proc["flight_recorder"])
        ((kind, name_col),) = s.rows("SELECT kind, name FROM os_events WHERE kind='oom_kill'")
        self.assertEqual(name_col, oom["cgroup"])

    def test_map_populate_burst_is_a_storm(self):
        s = self.record([OS_EVENTS, "populate", "500", "1000"], "--layers", "os")
        self.assertEqual(s.returncode, 0, s.stderr)
        pid = s.summary["processes"][0]["pid"]
        mmap = s.summary["layers"]["os"]["mmap"][str(pid)]
        self.assertEqual(mmap["populate"]["count"], 500)
        self.assertEqual(mmap["populate"]["bytes"], 500 * 4096)
        self.assertGreaterEqual(mmap["populate"]["peak_per_s"], 400)
        self.assertGreaterEqual(mmap["munmaps"], 500)
        (storm,) = anomalies(s, "mmap_storm")
        self.assertEqual(storm["layer"], "os")
        self.assertEqual(storm["pid"], pid)
        self.assertEqual(storm["evidence"]["flag"], "MAP_POPULATE")
        self.assertGreaterEqual(storm["evidence"]["rate_per_s"], 200)
        self.assertIn("MAP_POPULATE", storm["message"])
        ((count,),) = s.rows("SELECT value FROM os_events WHERE kind='mmap_populate' AND pid=?",
                             pid)
        self.assertEqual(count, 500)

    def test_normal_start_up_is_not_a_storm(self):
        imports = "import json, sqlite3, ctypes, asyncio, multiprocessing, decimal, email"
        for command in ([PYTHON, "-c", imports], [SIMTRAIN, "--ranks", "2", "--steps", "20"]):
            s = self.record(command)
            self.assertEqual(s.returncode, 0, s.stderr)
            self.assertEqual(anomalies(s, "mmap_storm"), [], command)
            mmap = s.summary["layers"]["os"]["mmap"]
            self.assertTrue(mmap, "no mmap seen at all")
            self.assertGreater(sum(m["mmaps"] for m in mmap.values()), 10)
            self.assertLess(max(m["populate"]["peak_per_s"] for m in mmap.values()), 50)

    def test_two_builds_of_libcudart_in_one_process(self):
        if not os.path.exists(REAL_CUDART):
            self.skipTest(f"{REAL_CUDART} not installed")
        script = ("import ctypes; ctypes.CDLL(%r); ctypes.CDLL(%r); print('loaded')"
                  % (SIM_CUDART, REAL_CUDART))
        s = self.record([PYTHON, "-c", script])
        self.assertEqual(s.returncode, 0, s.stderr)
        (conflict,) = anomalies(s, "library_conflict")
        self.assertEqual(conflict["layer"], "os")
        self.assertEqual(conflict["pid"], s.summary["processes"][0]["pid"])
        self.assertEqual(conflict["evidence"]["family"], "libcudart")
        paths = sorted(lib["path"] for lib in conflict["evidence"]["libraries"])
        self.assertEqual(paths, sorted([os.path.realpath(SIM_CUDART), os.path.realpath(REAL_CUDART)]))
        for lib in conflict["evidence"]["libraries"]:
            self.assertEqual(lib["version"], "13")
            self.assertEqual(lib["soname"], "libcudart.so.13")
        self.assertIn(os.path.realpath(REAL_CUDART), conflict["message"])
        # One build alone is no conflict.
        s = self.record([CUDA_CALLS, "--lib", SIM_CUDART])
        self.assertEqual(anomalies(s, "library_conflict"), [])

    def test_ioctl_latency_on_a_test_device(self):
        # /dev/zero has no ioctl handler: every call returns ENOTTY at once, so
        # the histogram measures the syscall path itself; and unlike /dev/null
        # no process has it as stdin, so nothing else adds calls to the count.
        s = self.record([OS_EVENTS, "ioctl", "/dev/zero", "25"], "--ioctl-devices", "/dev/zero")
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertIn("ioctl 25 errors 25", s.stdout)
        pid = s.summary["processes"][0]["pid"]
        ioctl = s.summary["layers"]["os"]["ioctl"]
        self.assertEqual(ioctl["devices"], {"/dev/zero": "1:5"})
        stats = ioctl["processes"][str(pid)]["/dev/zero"]
        self.assertEqual(stats["count"], 25)
        self.assertEqual(stats["errors"], 25)
        self.assertEqual(sum(b["count"] for b in stats["histogram"]), 25)
        self.assertGreater(stats["total_ns"], 0)
        self.assertLess(stats["max_ns"], 50_000_000)
        self.assertEqual(anomalies(s, "slow_ioctl"), [])
        # Not a watched device: not timed.
        s = self.record([OS_EVENTS, "ioctl", "/dev/zero", "25"])
        self.assertEqual(s.summary["layers"]["os"]["ioctl"]["processes"], {})

    def test_slow_ioctl_is_flagged(self):
        s = self.record([OS_EVENTS, "slow-ioctl", "120"], "--ioctl-devices", "/dev/urandom")
        self.assertEqual(s.returncode, 0, s.stderr)
        pid = s.summary["processes"][0]["pid"]
        stats = s.summary["layers"]["os"]["ioctl"]["processes"][str(pid)]["/dev/urandom"]
        self.assertEqual(stats["count"], 1)
        self.assertEqual(stats["slow"], 1)
        self.assertGreaterEqual(stats["max_ns"], 100_000_000)
        (slow,) = anomalies(s, "slow_ioctl")
        self.assertEqual(slow["pid"], pid)
        self.assertEqual(slow["evidence"]["device"], "/dev/urandom")
        self.assertGreaterEqual(slow["evidence"]["duration_ns"], 100_000_000)
        ((duration,),) = s.rows("SELECT value FROM os_events WHERE kind='slow_ioctl'")
        self.assertEqual(duration, stats["max_ns"])


if __name__ == "__main__":
    eacgm_testlib.main()
