"""An agent that dies, at any moment, leaves its targets running: eacgm's guardian resumes whatever
the BPF programs had paused (src/probes/target_guardian.h). The job starts processes in a loop,
so that it is paused at every start-up (the loader stop) while eacgm runs; eacgm is killed with
SIGKILL at several moments, from start-up (the job then runs untraced) to the middle of tracing,
four recordings at once."""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from eacgm_testlib import EACGM, EacgmTest, main, processes, require_root  # noqa: E402

# Runs /bin/true in a loop, counting, until the stop file exists.
JOB = r"""
import os, subprocess, sys
count, stop = sys.argv[1], sys.argv[2]
n = 0
while not os.path.exists(stop):
    subprocess.run(["/bin/true"])
    n += 1
    with open(count + ".tmp", "w") as f:
        f.write(str(n))
    os.rename(count + ".tmp", count)
"""

# The guardian sweeps until eacgm's exit has released its links, then 3 s more
# (target_guardian.cpp); far longer than this means it hangs.
GUARDIAN_BOUND_S = 60


def descendants(root):
    """pid -> state of `root` and every process below it."""
    procs = processes()
    tree, grew = {root}, True
    while grew:
        grew = False
        for pid, (_, _, ppid) in procs.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return {pid: procs[pid][1] for pid in tree if pid in procs}


def job_pid(agent_pid, marker):
    """The job under `agent_pid`: the process below it whose command line holds `marker` (before
    its exec, a copy of eacgm with eacgm's command line)."""
    for pid in set(descendants(agent_pid)) - {agent_pid}:
        try:
            # The guardian's first fork is a copy of eacgm too, briefly eacgm's child (named
            # before it forks the guardian).
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "eacgm-guardian":
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    return pid
        except OSError:
            pass
    return None


def guardian_writing_to(path):
    """The pid of the guardian whose stderr is the file `path` (each agent's stderr is its own
    file; the guardian is init's child, not the agent's), or None."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/comm") as f:
                if f.read().strip() != "eacgm-guardian":
                    continue
            if os.readlink(f"/proc/{name}/fd/2") == path:
                return int(name)
        except OSError:
            pass
    return None


def wait_gone(pid, bound_s):
    """Waits for `pid` to end (it is nobody's child here but init's); True when it did."""
    deadline = time.monotonic() + bound_s
    while pid and os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    return not (pid and os.path.exists(f"/proc/{pid}"))


def read_count(path):
    try:
        with open(path) as f:
            return int(f.read() or 0)
    except (OSError, ValueError):
        return 0


class AgentDeath(EacgmTest):
    def setUp(self):
        super().setUp()
        self.jobs = []  # (pid, stop file): killed whatever the outcome, the loops run forever
        self.addCleanup(self.end_jobs)

    def end_jobs(self):
        for pid, stop in self.jobs:
            for p in descendants(pid) if pid else {}:
                try:
                    os.kill(p, signal.SIGCONT)
                except OSError:
                    pass
        time.sleep(0.2)
        for pid, _ in self.jobs:
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def test_a_killed_agent_leaves_no_target_paused(self):
        require_root(self)
        # After the job's fork: at once (before the probes are ready: it runs untraced), while
        # eacgm attaches at its start-up, and while tracing.
        kill_after_s = [0.0, 0.3, 0.8, 1.5]
        runs = []
        for i, delay in enumerate(kill_after_s):
            count = os.path.join(self.tmp, f"count{i}")
            stop = os.path.join(self.tmp, f"stop{i}")
            err_path = os.path.join(self.tmp, f"stderr{i}")
            err = open(err_path, "w+")
            agent = subprocess.Popen(
                [EACGM, "record", "-o", self.out(f"s{i}"), "--", sys.executable, "-c", JOB,
                 count, stop], stdout=subprocess.DEVNULL, stderr=err)
            runs.append({"agent": agent, "delay": delay, "count": count, "stop": stop,
                         "stderr": err, "stderr_path": err_path, "job": None,
                         "killed": False})
        deadline = time.monotonic() + 30
        while not all(r["killed"] for r in runs) and time.monotonic() < deadline:
            for run in runs:
                if run["killed"]:
                    continue
                if run["job"] is None:
                    # The guardian comes first (Tracer::open); until it is up, its first fork,
                    # not yet named, looks like the job.
                    if not guardian_writing_to(run["stderr_path"]):
                        continue
                    run["job"] = job_pid(run["agent"].pid, run["count"])
                    run["forked_at"] = time.monotonic()
                    if run["job"]:
                        self.jobs.append((run["job"], run["stop"]))
                elif time.monotonic() >= run["forked_at"] + run["delay"]:
                    run["guardian"] = guardian_writing_to(run["stderr_path"])
                    run["agent"].send_signal(signal.SIGKILL)
                    run["agent"].wait()
                    run["killed"] = True
            time.sleep(0.01)
        for run in runs:
            with self.subTest(killed_after_s=run["delay"]):
                self.assertIsNotNone(run["job"], "the job had not started")
                self.assertIsNotNone(run["guardian"], "the agent had no guardian")
                self.assertTrue(wait_gone(run["guardian"], GUARDIAN_BOUND_S),
                                "the guardian did not end")
                # Nothing is left to resume it now: it must be running, and go on running.
                tree = descendants(run["job"])
                stopped = {pid: s for pid, s in tree.items() if s == "T"}
                self.assertEqual(stopped, {}, f"paused after eacgm died: {tree}")
                # It starts more processes (a loaded machine may take a while), then ends when
                # told.
                before = read_count(run["count"])
                deadline = time.monotonic() + 10
                while read_count(run["count"]) <= before and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertGreater(read_count(run["count"]), before,
                                   f"the job made no progress: {descendants(run['job'])}")
                open(run["stop"], "w").close()
        deadline = time.monotonic() + 10
        for run in runs:
            while os.path.exists(f"/proc/{run['job']}") and time.monotonic() < deadline:
                with open(f"/proc/{run['job']}/stat") as f:
                    if f.read().split(")")[-1].split()[0] == "Z":
                        break
                time.sleep(0.05)
            self.assertFalse(
                os.path.exists(f"/proc/{run['job']}") and
                descendants(run["job"]).get(run["job"]) not in (None, "Z"),
                "the job did not end once told to")
            run["stderr"].close()

    def test_a_target_paused_when_the_agent_dies_is_resumed(self):
        # The worst moment, made certain: eacgm frozen (SIGSTOP) while its job is paused at a
        # loader stop, so that it can resume nothing, then killed.
        require_root(self)
        count, stop = os.path.join(self.tmp, "count"), os.path.join(self.tmp, "stop")
        err_path = os.path.join(self.tmp, "stderr")
        err = open(err_path, "w+")
        agent = subprocess.Popen(
            [EACGM, "record", "-o", self.out(), "--", sys.executable, "-c", JOB, count, stop],
            stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 20
        while read_count(count) < 3 and time.monotonic() < deadline:  # tracing, and running
            time.sleep(0.05)
        job = job_pid(agent.pid, count)
        self.assertIsNotNone(job)
        self.jobs.append((job, stop))
        agent.send_signal(signal.SIGSTOP)
        paused = {}
        while not paused and time.monotonic() < deadline:
            paused = {p: s for p, s in descendants(job).items() if s == "T"}
            time.sleep(0.01)
        self.assertTrue(paused, "no target paused while eacgm was frozen")
        guardian = guardian_writing_to(err_path)
        self.assertIsNotNone(guardian, "the agent had no guardian")
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        self.assertTrue(wait_gone(guardian, GUARDIAN_BOUND_S), "the guardian did not end")
        tree = descendants(job)
        self.assertEqual({p: s for p, s in tree.items() if s == "T"}, {}, tree)
        open(stop, "w").close()
        err.seek(0)
        self.assertIn("its guardian resumed", err.read())
        err.close()

if __name__ == "__main__":
    main()
