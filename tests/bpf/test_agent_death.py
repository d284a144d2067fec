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
from eacgm_testlib import EACGM, EacgmTest, main, require_root  # noqa: E402

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

# How long after its death the guardian may take: it sweeps for 3 s (target_guardian.cpp).
GUARDIAN_WINDOW_S = 3.5


def descendants(root):
    """pid -> state of `root` and every process below it."""
    parents, states = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        parents[int(name)] = int(fields[1])
        states[int(name)] = fields[0]
    tree, grew = {root}, True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return {pid: states[pid] for pid in tree if pid in states}


def job_pid(agent_pid, marker):
    """The job under `agent_pid`: the process below it whose command line holds `marker` (before
    its exec, a copy of eacgm with eacgm's command line)."""
    for pid in set(descendants(agent_pid)) - {agent_pid}:
        try:
            # The guardian's first fork is a copy of eacgm too, briefly eacgm's child.
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "eacgm-guardian":
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    return pid
        except OSError:
            pass
    return None


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
            err = open(os.path.join(self.tmp, f"stderr{i}"), "w+")
            agent = subprocess.Popen(
                [EACGM, "record", "-o", self.out(f"s{i}"), "--", sys.executable, "-c", JOB,
                 count, stop], stdout=subprocess.DEVNULL, stderr=err)
            runs.append({"agent": agent, "delay": delay, "count": count, "stop": stop,
                         "stderr": err, "job": None, "killed": False})
        deadline = time.monotonic() + 30
        while not all(r["killed"] for r in runs) and time.monotonic() < deadline:
            for run in runs:
                if run["killed"]:
                    continue
                if run["job"] is None:
                    run["job"] = job_pid(run["agent"].pid, run["count"])
                    run["forked_at"] = time.monotonic()
                    if run["job"]:
                        self.jobs.append((run["job"], run["stop"]))
                elif time.monotonic() >= run["forked_at"] + run["delay"]:
                    run["agent"].send_signal(signal.SIGKILL)
                    run["agent"].wait()
                    run["killed"] = True
            time.sleep(0.01)
        time.sleep(GUARDIAN_WINDOW_S)
        for run in runs:
            with self.subTest(killed_after_s=run["delay"]):
                self.assertIsNotNone(run["job"], "the job had not started")
                tree = descendants(run["job"])
                stopped = {pid: s for pid, s in tree.items() if s == "T"}
                self.assertEqual(stopped, {}, f"paused after eacgm died: {tree}")
                # And it goes on: it starts more processes, then ends when told.
                before = read_count(run["count"])
                time.sleep(0.3)
                self.assertGreater(read_count(run["count"]), before)
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
        err = open(os.path.join(self.tmp, "stderr"), "w+")
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
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        time.sleep(GUARDIAN_WINDOW_S)
        tree = descendants(job)
        self.assertEqual({p: s for p, s in tree.items() if s == "T"}, {}, tree)
        open(stop, "w").close()
        err.seek(0)
        self.assertIn("its guardian resumed", err.read())
        err.close()

if __name__ == "__main__":
    main()
