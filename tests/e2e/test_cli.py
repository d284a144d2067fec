"""e2e: whole `eacgm` runs as a user would make them, bad input included:
every mistake gets a clear message and exit code 2."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import eacgm_testlib  # noqa: E402
from eacgm_testlib import EACGM, SIM_CUDART, SIMTRAIN, CUDA_CALLS, EacgmTest, require_root  # noqa: E402


def run(*args, **kw):
    return subprocess.run([EACGM, *args], capture_output=True, text=True, timeout=60, **kw)


class BadInput(EacgmTest):
    def assertUsageError(self, proc, *fragments):
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        for fragment in fragments:
            self.assertIn(fragment, proc.stderr)

    def test_unknown_flag(self):
        self.assertUsageError(run("record", "--frobnicate", "-o", self.out(), "--", "true"),
                              "frobnicate")

    def test_no_subcommand(self):
        self.assertEqual(run().returncode, 2)

    def test_unknown_subcommand(self):
        # Not "A subcommand is required": the word is named and the valid ones listed.
        p = run("nosuchcommand")
        self.assertUsageError(p, "unknown command 'nosuchcommand'", "the commands are:")
        for command in ("record", "attach", "serve", "analyze", "doctor", "cluster"):
            self.assertIn(command, p.stderr.splitlines()[0])
        self.assertUsageError(run("model", "nosuch"), "unknown command 'nosuch' of 'eacgm model'",
                              "fit")
        # A command that needs one of its own, given none: the choices, not CLI11's sentence.
        self.assertUsageError(run("slo"), "'eacgm slo' needs a command: fit, check, rules")
        self.assertUsageError(run("model"), "'eacgm model' needs a command:", "fit")
        self.assertUsageError(run(), "eacgm needs a command:", "record")

    def test_numeric_flags_are_bounded(self):
        # Negative, NaN, infinite, overflowing and absurd values of every numeric flag of record,
        # attach, serve and analyze: one message, with the bounds in plain numbers (not %f's
        # 309-digit maximum of a double), before anything is loaded (no root needed).
        trace = ["-o", self.out(), "--"]
        cases = [
            (["record", "--hang-timeout", "-1", *trace, "true"],
             "--hang-timeout: -1 is out of range; expected 0.1 to 86400 seconds"),
            (["record", "--hang-timeout", "1e308", *trace, "true"], "1e308 is out of range"),
            (["record", "--hang-timeout", "nan", *trace, "true"], "'nan' is not a number"),
            (["record", "--hang-timeout", "inf", *trace, "true"], "inf is out of range"),
            (["record", "--python-slow-ms", "1e-9", *trace, "true"],
             "--python-slow-ms: 1e-9 is out of range; expected 1 to 3600000 milliseconds"),
            (["record", "--python-slow-ms", "1e999", *trace, "true"], "1e999 is out of range"),
            (["record", "--python-rate", "nan", *trace, "true"], "--python-rate: 'nan'"),
            (["record", "--gpu-rate", "-inf", *trace, "true"], "--gpu-rate: -inf is out of range"),
            (["attach", "-p", "1", "-d", "nan", "-o", self.out()], "--duration: 'nan'"),
            (["attach", "-p", "1", "-d", "1e308", "-o", self.out()], "--duration: 1e308"),
            (["attach", "-p", "99999999999", "-o", self.out()], "--pid: 99999999999 is out of range"),
            (["attach", "-p", "1", "--hang-timeout", "0", "-o", self.out()], "--hang-timeout: 0"),
            (["serve", "--hang-timeout", "-1"], "--hang-timeout: -1 is out of range"),
            (["serve", "--scan-interval", "nan"], "--scan-interval: 'nan'"),
            (["serve", "--gpu-rate", "1e308"], "--gpu-rate: 1e308"),
            (["analyze", self.tmp, "--threshold-quantile", "nan"], "--threshold-quantile: 'nan'"),
            (["analyze", self.tmp, "--threshold-margin", "-1"], "--threshold-margin: -1"),
            (["analyze", self.tmp, "--density", "0"], "--density: 0 is out of range"),
            (["analyze", self.tmp, "--warmup", "-1"], "--warmup: -1 is out of range"),
            (["analyze", self.tmp, "--persist", "1e308"], "--persist: 1e308"),
            (["model", "fit", self.tmp, "-o", self.out(), "--window", "inf"], "--window: inf"),
        ]
        for args, fragment in cases:
            with self.subTest(args=args):
                p = run(*args)
                self.assertUsageError(p, fragment)
                self.assertLess(len(p.stderr), 300, p.stderr)
        self.assertFalse(os.path.exists(self.out()))

    def test_no_command(self):
        require_root(self)
        self.assertUsageError(run("record", "-o", self.out()), "no command")

    def test_unknown_layer(self):
        self.assertUsageError(run("record", "-o", self.out(), "--layers", "gpux", "--", "true"),
                              "unknown layer")

    def test_serve_refuses_the_python_layer(self):
        self.assertUsageError(run("serve", "--layers", "cuda,python"), "python layer",
                              "record")

    def test_the_live_modes_share_their_flags(self):
        # record, attach and serve read one set of flags: each is accepted by all three and
        # judged by the same rule (checked before anything is loaded: no root needed), and the
        # python layer's are record's and attach's only.
        live = {
            "record": ["record", "-o", self.out(), "--", "true"],
            "attach": ["attach", "-p", "999999999", "-o", self.out()],
            "serve": ["serve", "--listen", "no-port-here"],
        }
        for mode, tail in live.items():
            with self.subTest(mode=mode):
                bad_regex = run(mode, "--torch-ops", "aten::(", *tail[1:])
                self.assertUsageError(bad_regex, "--torch-ops")
                budget = run(mode, "--overhead-budget", "0%", *tail[1:])
                self.assertUsageError(budget, "--overhead-budget")
                # Accepted: the run goes on to fail on what comes after the flags.
                shared = run(mode, "--ioctl-devices", "/dev/null", "--btf", "/nonexistent",
                             "--gpu-rate", "2", *tail[1:])
                self.assertNotIn("--ioctl-devices", shared.stderr)
                self.assertNotIn("--gpu-rate", shared.stderr)
        self.assertUsageError(run("serve", "--python-rate", "5"), "--python-rate")
        self.assertUsageError(run("serve", "--no-stop-on-dlopen"), "--no-stop-on-dlopen")

    def test_bad_python_options(self):
        self.assertUsageError(run("record", "-o", self.out(), "--python-rate", "0", "--",
                                  "true"), "python-rate")
        self.assertUsageError(run("record", "-o", self.out(), "--python-slow-ms", "-5", "--",
                                  "true"), "python-slow-ms")

    def test_nonexistent_pid(self):
        self.assertUsageError(run("attach", "-p", "999999999", "-o", self.out()), "no process")

    def test_unwritable_output_directory(self):
        require_root(self)
        self.assertUsageError(run("record", "-o", "/etc/passwd/session", "--", "true"),
                              "/etc/passwd/session")

    def test_missing_btf(self):
        require_root(self)
        self.assertUsageError(run("record", "-o", self.out(), "--btf", "/nonexistent/vmlinux",
                                  "--", "true"), "BTF")

    def test_corrupt_btf(self):
        require_root(self)
        bad = os.path.join(self.tmp, "vmlinux")
        with open(bad, "wb") as f:
            f.write(b"\x9f\xeb\x01\x00" + os.urandom(4096))
        self.assertUsageError(run("record", "-o", self.out(), "--btf", bad, "--", "true"), "BTF")

    def test_no_privileges(self):
        require_root(self)  # to become nobody
        proc = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                               "--inh-caps=-all", EACGM, "record", "-o", self.out(), "--", "true"],
                              capture_output=True, text=True, timeout=30)
        self.assertUsageError(proc, "needs root", "CAP_BPF")

    def test_command_that_does_not_exist(self):
        require_root(self)
        proc = run("record", "-o", self.out(), "--", "/nonexistent/program")
        self.assertEqual(proc.returncode, 127)
        self.assertIn("cannot run", proc.stderr)


class Commands(EacgmTest):
    def test_doctor_reports_each_check(self):
        proc = run("doctor")
        for fragment in ("BTF", "uprobes", "tracefs", "kprobes", "lockdown", "privileges", "cuda"):
            self.assertIn(fragment, proc.stdout)
        # Debian's interpreter is a dependency: the python layer names it, with its USDT probes.
        self.assertIn("/usr/bin/python3.11 (CPython 3.11, USDT probes)", proc.stdout)
        if os.geteuid() == 0:
            self.assertEqual(proc.returncode, 0, proc.stdout)
            self.assertIn("fentry", proc.stdout)
            if os.path.exists("/usr/local/cuda/lib64/libcudart.so.13"):
                self.assertIn("/usr/local/cuda", proc.stdout)

    def test_record_exit_code_is_the_jobs(self):
        require_root(self)
        s = self.record(["/bin/sh", "-c", "exit 7"])
        self.assertEqual(s.returncode, 7)
        self.assertEqual(s.summary["exit_code"], 7)
        self.assertEqual(s.summary["processes"][0]["exit"]["code"], 7)
        # A library is probed when a traced process maps it (the loader stop): a job that never
        # loads one pays nothing for its layer, which says so.
        self.assertEqual(s.summary["layers"]["cuda"]["status"], "unavailable")
        self.assertEqual(s.summary["layers"]["cuda"]["reason"],
                         "no traced process loaded libcudart.so")
        self.assertIn("[cuda] unavailable: no traced process loaded libcudart.so", s.stdout)
        if os.path.exists("/usr/local/cuda/lib64/libcudart.so.13"):
            # Without the loader stop the libraries the job could load are probed ahead, from
            # its search path; the job never mapped it.
            s = self.record(["/bin/sh", "-c", "exit 7"], "--no-stop-on-dlopen")
            self.assertEqual(s.returncode, 7)
            self.assertEqual(s.summary["layers"]["cuda"]["status"], "active")
            self.assertIs(s.summary["layers"]["cuda"]["loaded_by_job"], False)
            self.assertIn("[cuda] probes ready for 1 library; the job never loaded it", s.stdout)
            self.assertNotIn("[cuda] 1 library traced", s.stdout)

    def test_report_counts_a_library_the_job_loaded(self):
        require_root(self)
        s = self.record([CUDA_CALLS, "--lib", SIM_CUDART], "--layers", "cuda")
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertIs(s.summary["layers"]["cuda"]["loaded_by_job"], True)
        self.assertRegex(s.stdout, r"\[cuda\] [12] librar(y|ies) traced")

    def test_demo_training_job_names_the_leaking_ranks(self):
        require_root(self)
        # The README's demo: every rank leaks 1 MiB of device memory per step.
        s = self.record([SIMTRAIN, "--ranks", "2", "--steps", "200", "--leak-bytes", "1048576"])
        self.assertEqual(s.returncode, 0, s.stderr)
        ranks = {p["rank"]: p["pid"] for p in s.summary["processes"] if p["rank"] is not None}
        self.assertEqual(sorted(ranks), [0, 1])
        self.assertEqual(s.count("cudaLaunchKernel"), 2 * 200 * 5)
        self.assertIn("cudaLaunchKernel", s.stdout)  # the printed report
        leaks = sorted(a["pid"] for a in s.summary["anomalies"] if a["kind"] == "leak")
        self.assertEqual(leaks, sorted(ranks.values()))
        self.assertEqual(len(s.summary["anomalies"]), 2, s.summary["anomalies"])
        for pid in ranks.values():
            self.assertEqual(s.summary["memory"]["outstanding_device_bytes"][str(pid)], 200 << 20)
        self.assertSessionComplete(s)

    def test_healthy_training_job_has_no_anomaly(self):
        require_root(self)
        s = self.record([SIMTRAIN, "--ranks", "2", "--steps", "300"])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(s.summary["anomalies"], [])

    # `attach -d N` ends N seconds after it attached, give or take the loading and removing of the
    # probes (src/probes/tracer.cpp detach_probes: released together, the slow perf-event links
    # handed to the guardian).
    def test_attach_lasts_its_duration(self):
        require_root(self)
        # What loading and removing the probes takes on this machine (0.3 s on one, 0.9 s on one
        # three times slower): a whole `record` of a job that does nothing.
        started = time.monotonic()
        self.assertEqual(run("record", "-q", "-o", self.out("setup"), "--", "/bin/true").returncode,
                         0)
        setup = time.monotonic() - started
        job = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"])
        try:
            time.sleep(0.3)
            started = time.monotonic()
            p = run("attach", "-p", str(job.pid), "-d", "1", "-o", self.out(), "-q")
            wall = time.monotonic() - started
        finally:
            job.kill()
            job.wait()
        self.assertEqual(p.returncode, 0, p.stderr)
        # 1 s of tracing, and loading and removing the probes about as long as they take here.
        self.assertLess(wall, 1.0 + 1.5 * setup + 0.2, (setup, p.stderr))


class SessionDirectories(EacgmTest):
    """-o of record and attach: a session directory is eacgm's own, recorded into by one eacgm at
    a time, replaced whole when recorded again; a write that fails is never silent."""

    def setUp(self):
        require_root(self)
        super().setUp()

    @staticmethod
    def read(path):
        with open(path, "rb") as f:
            return f.read()

    def tree(self, path):
        return {os.path.relpath(os.path.join(d, n), path): self.read(os.path.join(d, n))
                for d, _, names in os.walk(path) for n in names}

    def test_refuses_a_directory_that_is_not_a_session(self):
        project = self.out("project")
        os.makedirs(os.path.join(project, "src"))
        with open(os.path.join(project, "train.py"), "w") as f:
            f.write("print('hi')\n")
        before = self.tree(project)
        p = run("record", "-o", project, "--", "true")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(f"-o {project}: the directory is not empty and holds no eacgm session "
                      "(it has src, train.py)", p.stderr)
        self.assertIn("Choose a new or empty directory", p.stderr)
        self.assertEqual(self.tree(project), before)  # nothing touched, not even a lock file

    def test_a_session_recorded_again_is_replaced_whole(self):
        out = self.out()
        first = self.record([CUDA_CALLS, "--lib", SIM_CUDART, "--crash"], "--layers", "cuda")
        self.assertEqual(first.returncode, 139, first.stderr)
        (crashed,) = [p for p in first.summary["processes"] if p.get("flight_recorder")]
        old_flight = os.path.join(out, crashed["flight_recorder"])
        self.assertTrue(os.path.exists(old_flight))
        notes = os.path.join(out, "notes.txt")  # not eacgm's: kept
        with open(notes, "w") as f:
            f.write("mine\n")
        second = self.record(["true"], "--layers", "cuda")
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assertIn(f"replacing the session recorded earlier in {out}", second.stderr)
        self.assertFalse(os.path.exists(old_flight))
        self.assertFalse(os.path.exists(os.path.join(out, "flight_recorder")))
        self.assertTrue(os.path.exists(notes))
        self.assertEqual(second.summary["processes"][0]["comm"], "true")
        self.assertEqual(second.summary["events"]["recorded"], 0)

    def test_a_second_recording_into_a_directory_is_refused(self):
        out, first = self.start_record(["sleep", "1.5"], "--layers", "cuda")
        lock = os.path.join(out, ".eacgm-session")
        deadline = time.time() + 10
        while not (os.path.exists(lock) and self.read(lock).strip()):
            self.assertLess(time.time(), deadline, "the first recording never took the lock")
            time.sleep(0.02)
        second = run("record", "-o", out, "--layers", "cuda", "--", "true")
        self.assertEqual(second.returncode, 2, second.stderr)
        self.assertIn(f"another eacgm (pid {first.pid}) is recording into this directory",
                      second.stderr)
        s = self.finish(out, first)
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(s.summary["command"], ["sleep", "1.5"])
        self.assertIs(s.summary["complete"], True)
        self.assertSessionComplete(s)

    def test_a_full_disk_is_reported_not_silent(self):
        disk = self.out("disk")
        os.makedirs(disk)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", disk], check=True)
        try:
            # 40,000 calls: about 4 MB of rows and slices for a 1 MiB disk.
            job = [CUDA_CALLS, "--lib", SIM_CUDART, "--sequence", "loop", "--count", "20000"]
            s = self.record(job, "--layers", "cuda", out=os.path.join(disk, "ok"))
            # The job succeeded, its session did not: the data-loss code, not the job's 0.
            self.assertEqual(s.returncode, 74, s.stderr)
            self.assertIs(s.summary["complete"], False)
            lost = {l["output"]: l for l in s.summary["lost"]}
            self.assertIn("events.sqlite", lost)
            for l in lost.values():
                self.assertEqual(l["calls"], 40000, l)
                self.assertGreater(l["calls_lost"], 0, l)
            self.assertIn(f"eacgm: error: the session in {disk}/ok is incomplete", s.stderr)
            self.assertIn("events.sqlite: ", s.stderr.splitlines()[-1])
            self.assertIn("WARNING: events.sqlite is incomplete", s.stdout)
            # A job that failed keeps its own exit code.
            s = self.record(job + ["--crash"], "--layers", "cuda", out=os.path.join(disk, "crash"))
            self.assertEqual(s.returncode, 139, s.stderr)
        finally:
            subprocess.run(["umount", disk], check=True)


if __name__ == "__main__":
    eacgm_testlib.main()
