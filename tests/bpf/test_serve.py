"""bpf: `eacgm serve` scraped by a real Prometheus (Debian's `prometheus`,
started here on loopback with a 1 s scrape interval). The simulated
multi-rank NCCL job runs while serve traces it; Prometheus must then hold the
exact call counts the ranks printed and the straggler anomaly naming the
injected slow rank. Two serve instances, each limited to its own cgroup v2,
stand for two nodes: `eacgm cluster` must name the node with the slow rank.

Most jobs here are held (after mapping the traced libraries, before their
first call) until serve reports the process, so that each test knows when
serve follows it. `ServeNotice` starts jobs unheld: the kernel tells serve of a
process as ld.so maps a traced library, before its first call, so exact counts
need no hold. Each test puts its jobs in cgroups of its own, so jobs of
tests running in parallel are never counted. Under `--overhead-budget`, serve
exports the budget and the share of the time the frequent calls were traced."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import eacgm_testlib  # noqa: E402
from eacgm_testlib import (EACGM, SIM_LIB_DIR, cgroup2_root, SIMNCCL_JOB, SIMTRAIN, EacgmTest,  # noqa: E402
                           bpf_links_of, links_left, require_root)

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
NCCL_APIS = ["ncclCommInitRank", "ncclAllReduce", "ncclBroadcast", "ncclGroupStart",
             "ncclGroupEnd", "ncclSend", "ncclRecv", "ncclCommDestroy"]

# Maps the simulated libraries (as the job will), says so, waits for a line
# on stdin, then becomes the job: same pid, already traced.
HOLD = """
import ctypes, os, sys
ctypes.CDLL(os.path.join(sys.argv[1], "libnccl.so.2"))
ctypes.CDLL(os.path.join(sys.argv[1], "libcudart.so.13"))
print("held", flush=True)
sys.stdin.readline()
os.execv(sys.argv[2], sys.argv[2:])
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def parse_metrics(text):
    """{(name, frozenset(labels)): value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, f"not a sample line: {line!r}"
        labels = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def rank_lines(stdout):
    """{rank: {"pid": pid, api: count}} from the job's per-rank ground truth lines."""
    ranks = {}
    for line in stdout.splitlines():
        if line.startswith("simnccl_job rank="):
            fields = dict(f.split("=", 1) for f in line.split()[1:])
            ranks[int(fields["rank"])] = fields
    return ranks


class Prometheus:
    def __init__(self, tmp, targets):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: eacgm\n    static_configs:\n"
                    f"      - targets: {json.dumps(targets)}\n")
        self.log = open(os.path.join(tmp, "prometheus.log"), "w+")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp}/tsdb",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if "Ready" in http_get(self.url + "/-/ready"):
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("prometheus did not start:\n" + self.tail())

    def tail(self):
        self.log.seek(0)
        return self.log.read()[-3000:]

    def query(self, promql):
        body = json.loads(http_get(self.url + "/api/v1/query?" +
                                   urllib.parse.urlencode({"query": promql})))
        assert body["status"] == "success", body
        return body["data"]["result"]

    def values(self, promql, label):
        return {r["metric"].get(label, ""): float(r["value"][1]) for r in self.query(promql)}

    def wait_for(self, promql, label, expected, timeout=20):
        """Polls until the query's values equal `expected` ({label value: value}):
        Prometheus sees serve's counters one scrape later. Returns the last values."""
        deadline = time.time() + timeout
        got = None
        while time.time() < deadline:
            got = self.values(promql, label)
            if got == expected:
                break
            time.sleep(0.5)
        return got

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class ServeFixture(EacgmTest):
    """serve instances, each limited to a cgroup of its own, jobs held until traced, and a
    Prometheus; everything stopped and removed after each test."""

    def setUp(self):
        require_root(self)
        if not os.path.exists(PROMETHEUS):
            self.skipTest("prometheus is not installed (scripts/install-deps.sh installs it)")
        self.cg_root = cgroup2_root()
        if self.cg_root is None:
            self.skipTest("no cgroup v2 hierarchy is mounted")
        super().setUp()
        self.cgroups, self.serves, self.jobs, self.prometheus = [], [], [], None

    def tearDown(self):
        for job in self.jobs:
            if job.poll() is None:
                job.kill()
                job.wait()
            job.stdout.close()
            if not job.stdin.closed:
                job.stdin.close()
        for serve in self.serves:
            if serve.poll() is None:
                serve.kill()
                serve.wait()
            serve.log.close()
        if self.prometheus:
            self.prometheus.stop()
        for cg in self.cgroups:
            for _ in range(50):
                try:
                    os.rmdir(cg)
                    break
                except OSError:
                    time.sleep(0.1)
        super().tearDown()

    def cgroup(self):
        path = os.path.join(self.cg_root, f"eacgm-test-{uuid.uuid4().hex[:8]}")
        os.mkdir(path)
        self.cgroups.append(path)
        return path

    def serve(self, port, cgroup, layers=("--layers", "cuda,nccl")):
        """serve on `port` for `cgroup`; layers=() leaves serve its default layers."""
        name = f"serve-{port}"
        err = open(os.path.join(self.tmp, name + ".log"), "w+")
        p = subprocess.Popen([EACGM, "serve", "--listen", f"127.0.0.1:{port}", "--cgroup", cgroup,
                              *layers], stdout=err, stderr=subprocess.STDOUT)
        p.log = err
        p.url = f"http://127.0.0.1:{port}"
        self.serves.append(p)
        deadline = time.time() + 30
        while time.time() < deadline:
            err.seek(0)
            if "eacgm: serving" in err.read():
                return p
            self.assertIsNone(p.poll(), self.log_of(p))
            time.sleep(0.1)
        raise AssertionError("serve did not start:\n" + self.log_of(p))

    def log_of(self, p):
        p.log.seek(0)
        return p.log.read()[-4000:]

    def metrics(self, serve):
        return parse_metrics(http_get(serve.url + "/metrics"))

    def traced_pids(self, serve):
        return {int(dict(labels)["pid"]) for (name, labels) in self.metrics(serve)
                if name == "eacgm_process_info"}

    def held_job(self, cgroup, serve, args, env=None):
        """Starts simnccl_job in `cgroup`, released once `serve` traces it."""
        def enter_cgroup():
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

        job = subprocess.Popen(["/usr/bin/python3.11", "-c", HOLD, SIM_LIB_DIR, SIMNCCL_JOB, *args],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               preexec_fn=enter_cgroup, env=env)
        self.jobs.append(job)
        self.assertEqual(job.stdout.readline(), "held\n")
        deadline = time.time() + 10
        while job.pid not in self.traced_pids(serve):
            self.assertLess(time.time(), deadline, "serve never traced the job:\n" + self.log_of(serve))
            time.sleep(0.1)
        return job

    def release(self, job):
        job.stdin.write("go\n")
        job.stdin.close()

    def finish_job(self, job):
        out = job.stdout.read()
        self.assertEqual(job.wait(timeout=60), 0, out)
        ranks = rank_lines(out)
        self.assertTrue(ranks, out)
        return ranks

    def expected_counts(self, ranks, apis):
        return {api: float(sum(int(r.get(api, 0)) for r in ranks.values())) for api in apis}



class ServeTest(ServeFixture):
    def test_exact_counters_and_straggler_in_prometheus(self):
        # serve's default layers: the os layer is on, and changes no count and no verdict.
        cg = self.cgroup()
        port = free_port()
        serve = self.serve(port, cg, layers=())
        links = bpf_links_of(serve.pid)
        self.assertTrue(links)
        self.prometheus = Prometheus(self.tmp, [f"127.0.0.1:{port}"])
        job = self.held_job(cg, serve, ["--ranks", "4", "--steps", "40", "--slow-rank", "2",
                                        "--slow-ms", "20"])
        active = {dict(labels)["layer"]: value
                  for (name, labels), value in self.metrics(serve).items()
                  if name == "eacgm_layer_active"}
        self.assertEqual(active.get("os"), 1.0, active)
        self.release(job)
        ranks = self.finish_job(job)
        self.assertEqual(sorted(ranks), [0, 1, 2, 3])

        # Exact NCCL counts: the ranks' own ground truth (4 x 40 all-reduces...).
        nccl = self.expected_counts(ranks, NCCL_APIS)
        self.assertEqual(nccl["ncclAllReduce"], 160)
        got = self.prometheus.wait_for('eacgm_calls_total{layer="nccl"}', "api", nccl)
        self.assertEqual(got, nccl, self.log_of(serve))
        # Every CUDA API serve exports is one the ranks counted, with their count.
        cuda_got = self.prometheus.values('eacgm_calls_total{layer="cuda"}', "api")
        self.assertTrue({"cudaMalloc", "cudaFree", "cudaLaunchKernel",
                         "cudaStreamSynchronize"} <= set(cuda_got), cuda_got)
        self.assertEqual(cuda_got, self.expected_counts(ranks, cuda_got))
        self.assertEqual(self.prometheus.values('eacgm_call_errors_total{layer="nccl"}', "api"),
                         {api: 0.0 for api in NCCL_APIS})
        self.assertEqual(
            self.prometheus.values('eacgm_call_bytes_total{api="ncclAllReduce"}', "api"),
            {"ncclAllReduce": 160 * 4194304.0})
        # Histogram count == counter, per API.
        self.assertEqual(
            self.prometheus.values(
                'sum by (api) (eacgm_call_duration_seconds_count{layer="nccl"})', "api"), nccl)
        self.assertEqual(
            self.prometheus.values('eacgm_call_duration_seconds_bucket{api="ncclAllReduce",'
                                   'le="+Inf"}', "api"), {"ncclAllReduce": 160.0})
        self.assertEqual(self.prometheus.values("eacgm_events_dropped_total", "job"), {"eacgm": 0.0})
        # What tracing cost, refreshed with the counts: at least an entry and a return per call
        # the ranks made (other jobs on the shared simulated library may add their own).
        deadline = time.time() + 10
        while True:
            m = self.metrics(serve)
            hits = {dict(labels)["layer"]: value for (name, labels), value in m.items()
                    if name == "eacgm_probe_hits_total"}
            if hits.get("nccl", 0) >= 2 * sum(nccl.values()) or time.time() > deadline:
                break
            time.sleep(0.5)
        self.assertGreaterEqual(hits.get("nccl", 0), 2 * sum(nccl.values()), hits)
        self.assertGreaterEqual(hits.get("cuda", 0), 2 * sum(cuda_got.values()), hits)
        added = [v for (name, _), v in m.items() if name == "eacgm_estimated_added_seconds_total"]
        self.assertEqual(len(added), 1, m)
        self.assertGreater(added[0], 0)
        self.assertTrue(any(name == "eacgm_agent_cpu_seconds_total" and v > 0
                            for (name, _), v in m.items()))

        # The straggler: one anomaly, naming the injected slow rank and its pid.
        # (Only the NCCL layer's verdicts are checked: the per-process GMM
        # detector may flag a rank's changing call rate, which is its business.)
        anomalies = self.prometheus.query('eacgm_anomaly_timestamp_seconds{layer="nccl"}')
        self.assertEqual([(a["metric"]["kind"], a["metric"]["rank"]) for a in anomalies],
                         [("straggler", "2")], anomalies)
        self.assertEqual(int(anomalies[0]["metric"]["pid"]), int(ranks[2]["pid"]))
        self.assertEqual(self.prometheus.values('eacgm_anomalies_total{layer="nccl"}', "kind"),
                         {"straggler": 1.0})
        listed = json.loads(http_get(serve.url + "/anomalies"))["anomalies"]
        self.assertEqual([(a["kind"], a["rank"], a["pid"]) for a in listed if a["layer"] == "nccl"],
                         [("straggler", 2, int(ranks[2]["pid"]))])
        health = json.loads(http_get(serve.url + "/healthz"))
        self.assertEqual(health["status"], "ok")

        # Dead processes are released: their series go away.
        deadline = time.time() + 10
        while self.traced_pids(serve) and time.time() < deadline:
            time.sleep(0.2)
        self.assertEqual(self.traced_pids(serve), set())

        # SIGTERM: a clean exit, every probe removed.
        serve.send_signal(signal.SIGTERM)
        self.assertEqual(serve.wait(timeout=30), 0, self.log_of(serve))
        self.assertFalse(links_left(links), "links left behind after SIGTERM")

    def test_two_nodes_cluster_names_the_node_with_the_slow_rank(self):
        cg_a, cg_b = self.cgroup(), self.cgroup()
        port_a, port_b = free_port(), free_port()
        node_a, node_b = self.serve(port_a, cg_a), self.serve(port_b, cg_b)
        self.prometheus = Prometheus(self.tmp, [f"127.0.0.1:{port_a}", f"127.0.0.1:{port_b}"])
        healthy = self.held_job(cg_a, node_a, ["--ranks", "2", "--steps", "30"])
        slow = self.held_job(cg_b, node_b, ["--ranks", "4", "--steps", "40", "--slow-rank", "1",
                                            "--slow-ms", "20"])
        # Each node traces only its own cgroup.
        self.assertNotIn(slow.pid, self.traced_pids(node_a))
        self.assertNotIn(healthy.pid, self.traced_pids(node_b))
        self.release(healthy)
        self.release(slow)
        ranks_a, ranks_b = self.finish_job(healthy), self.finish_job(slow)

        by_node = self.prometheus.wait_for(
            'sum by (instance) (eacgm_calls_total{api="ncclAllReduce"})', "instance",
            {f"127.0.0.1:{port_a}": 60.0, f"127.0.0.1:{port_b}": 160.0})
        self.assertEqual(by_node, {f"127.0.0.1:{port_a}": 60.0, f"127.0.0.1:{port_b}": 160.0})
        self.assertEqual(len(ranks_a), 2)

        deadline = time.time() + 15
        while time.time() < deadline and not self.prometheus.query(
                'eacgm_anomaly_timestamp_seconds{kind="straggler"}'):
            time.sleep(0.5)
        out = subprocess.run([EACGM, "cluster", "--prometheus", self.prometheus.url, "--json"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        report = json.loads(out.stdout)
        self.assertEqual(sorted(n["node"] for n in report["nodes"]),
                         sorted([f"127.0.0.1:{port_a}", f"127.0.0.1:{port_b}"]))
        self.assertEqual([(s["node"], s["rank"], s["pid"]) for s in report["stragglers"]],
                         [(f"127.0.0.1:{port_b}", 1, int(ranks_b[1]["pid"]))], report)
        self.assertEqual(report["hangs"], [])
        self.assertEqual([o for o in report["other"] if o["layer"] == "nccl"], [])
        text = subprocess.run([EACGM, "cluster", "--prometheus", self.prometheus.url],
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn(f"straggler: rank 1, pid {ranks_b[1]['pid']} on node 127.0.0.1:{port_b}",
                      text.stdout)


def read_all(f):
    f.seek(0)
    return f.read()


def rank_pids(launcher_pid):
    """{global rank: pid} of a simnccl_job launcher's rank processes, from their environment."""
    with open(f"/proc/{launcher_pid}/task/{launcher_pid}/children") as f:
        children = [int(p) for p in f.read().split()]
    ranks = {}
    for pid in children:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        ranks[int(env[b"RANK"])] = pid
    return ranks


class ServeBudget(ServeFixture):
    def test_overhead_budget_exports_the_traced_share(self):
        # simtrain's launches cost it several times the budget while traced
        # (test_overhead_budget.py): serve traces them part of the time and says how much.
        cg = self.cgroup()
        serve = self.serve(free_port(), cg, layers=("--layers", "cuda", "--overhead-budget", "3%"))

        def enter_cgroup():
            with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

        job = subprocess.Popen([SIMTRAIN, "--ranks", "1", "--steps", "4000", "--step-us", "1000",
                                "--launch-repeat", "40"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               preexec_fn=enter_cgroup)
        self.jobs.append(job)
        deadline = time.time() + 30
        traced = None
        while time.time() < deadline and job.poll() is None:
            m = self.metrics(serve)
            traced = m.get(("eacgm_traced_ratio", frozenset()))
            if traced is not None and traced < 0.9:
                break
            time.sleep(0.5)
        self.assertIsNotNone(traced, self.log_of(serve))
        self.assertLess(traced, 0.9, self.log_of(serve))
        self.assertGreater(traced, 0)
        self.assertEqual(m[("eacgm_overhead_budget_ratio", frozenset())], 0.03)
        self.assertEqual(job.wait(timeout=60), 0)


class ServeNotice(ServeFixture):
    """A job started after serve, not held: the kernel notices its launcher as ld.so maps
    libnccl and libcudart (bpf/core.bpf.c), before its first call, so every call of every rank
    is counted and the straggler verdict is the slowed rank's, run after run."""

    def test_jobs_started_after_serve_are_counted_exactly_and_judged_right(self):
        cg = self.cgroup()
        serve = self.serve(free_port(), cg)

        def enter_cgroup():
            with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

        expected = {}
        for run in range(3):
            job = subprocess.Popen([SIMNCCL_JOB, "--ranks", "4", "--steps", "120",
                                    "--slow-rank", "2", "--slow-ms", "40",
                                    "--slow-from-step", "60"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                   preexec_fn=enter_cgroup)
            self.jobs.append(job)
            ranks = self.finish_job(job)
            self.assertEqual(sorted(ranks), [0, 1, 2, 3])
            for api, n in self.expected_counts(ranks, NCCL_APIS).items():
                expected[api] = expected.get(api, 0) + n
            self.assertEqual(expected["ncclAllReduce"], 480 * (run + 1))
            deadline = time.time() + 10
            while True:
                m = self.metrics(serve)
                got = {dict(labels)["api"]: value for (name, labels), value in m.items()
                       if name == "eacgm_calls_total" and dict(labels)["layer"] == "nccl"}
                if got == expected or time.time() > deadline:
                    break
                time.sleep(0.2)
            self.assertEqual(got, expected, f"run {run}:\n" + self.log_of(serve))
            pids = {int(r["pid"]): rank for rank, r in ranks.items()}
            deadline = time.time() + 10
            while True:
                listed = json.loads(http_get(serve.url + "/anomalies"))["anomalies"]
                stragglers = [(a["rank"], a["pid"]) for a in listed
                              if a["kind"] == "straggler" and a["pid"] in pids]
                if stragglers or time.time() > deadline:
                    break
                time.sleep(0.2)
            self.assertEqual(stragglers, [(2, int(ranks[2]["pid"]))],
                             f"run {run}: {json.dumps(listed, indent=1)}")
        self.assertEqual(self.metrics(serve)[("eacgm_events_dropped_total", frozenset())], 0)

    def test_a_job_outside_the_cgroup_is_never_stopped(self):
        # serve's notice stops a process as it maps a traced library, to trace it from its first
        # call. With --cgroup, a job elsewhere on the node must not pay that pause: the kernel
        # side looks only at processes in the cgroup. `record` (its os layer sees every signal
        # its job gets) runs a job outside while serve watches an empty cgroup.
        cg = self.cgroup()
        serve = self.serve(free_port(), cg)
        s = self.record([SIMTRAIN, "--ranks", "2", "--steps", "5"], "--layers", "cuda,os")
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(s.count("cudaLaunchKernel"), 2 * 5 * 5)
        from_serve = s.rows("SELECT pid, name FROM os_events WHERE kind = 'signal' AND "
                            "json_extract(detail, '$.sender_pid') = ?", serve.pid)
        self.assertEqual(from_serve, [], self.log_of(serve))
        self.assertEqual(self.traced_pids(serve), set())

    def test_a_job_noticed_as_serve_dies_is_resumed_by_the_guardian(self):
        # serve frozen: the kernel still notices the job and stops it, and serve never hears of
        # it. Killed then, serve leaves the job to its guardian, which reads the targets map.
        cg = self.cgroup()
        serve = self.serve(free_port(), cg)
        os.kill(serve.pid, signal.SIGSTOP)

        def enter_cgroup():
            with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

        job = subprocess.Popen([SIMNCCL_JOB, "--ranks", "2", "--steps", "5"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               preexec_fn=enter_cgroup)
        self.jobs.append(job)

        def state():
            with open(f"/proc/{job.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]

        deadline = time.time() + 10
        while state() != "T":
            self.assertLess(time.time(), deadline, "the job was never stopped at its loader")
            time.sleep(0.05)
        time.sleep(0.3)
        self.assertEqual(state(), "T")  # nobody resumes it while serve is frozen
        serve.kill()
        serve.wait()
        out, _ = job.communicate(timeout=30)
        self.assertEqual(job.returncode, 0, out)
        self.assertEqual(sorted(rank_lines(out)), [0, 1])
        # The guardian says so after its last sweep, some 3 s after serve's end.
        deadline = time.time() + 10
        while "its guardian resumed" not in self.log_of(serve) and time.time() < deadline:
            time.sleep(0.2)
        self.assertIn("its guardian resumed", self.log_of(serve))


class CrossNodeTest(ServeFixture):
    """A 4-rank job spanning two nodes, launched as torchrun launches a multi-node job: one
    launcher per node (ranks 0 and 1 on node A, 2 and 3 on node B), one NCCL id for both. Each
    node is a serve limited to its own cgroup; one Prometheus scrapes both. `eacgm cluster` must
    name the hung node, the hung rank, the slow node and the slow rank, exactly, and nothing on a
    healthy job: verdicts that neither node can give alone."""

    HANG_TIMEOUT_S = 3

    def start_job(self, job_id, args):
        """Both nodes' launchers of one job, released together once each node's serve traces its
        own; returns them with the job's environment marker (TORCHELASTIC_RUN_ID)."""
        nccl_id = subprocess.run([SIMNCCL_JOB, "--print-id"], capture_output=True, text=True,
                                 check=True, timeout=30).stdout.strip()
        env = dict(os.environ, TORCHELASTIC_RUN_ID=job_id)
        launchers = [self.held_job(cg, node, ["--ranks", "4", "--nnodes", "2", "--node-rank",
                                              str(k), "--nccl-id", nccl_id, *args], env=env)
                     for k, (cg, node) in enumerate(self.nodes)]
        for launcher in launchers:
            self.release(launcher)
        return launchers

    def wait_hung(self, launchers, nranks_waiting):
        """Until the ranks of both launchers exist and the waiting ones sit inside a collective."""
        deadline = time.time() + 30
        while time.time() < deadline:
            inside = sum(1 for node in self.serves for (name, _), v in self.metrics(node).items()
                         if name == "eacgm_nccl_rank_inside_seconds" and v > 0)
            if inside >= nranks_waiting:
                break
            time.sleep(0.2)
        pids = {}
        for launcher in launchers:
            pids.update(rank_pids(launcher.pid))
        self.assertEqual(sorted(pids), [0, 1, 2, 3])
        return pids

    def cluster(self):
        out = subprocess.run([EACGM, "cluster", "--prometheus", self.prometheus.url, "--json",
                              "--hang-timeout", str(self.HANG_TIMEOUT_S)],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout)

    def test_hung_and_straggling_nodes_and_ranks_across_nodes(self):
        cg_a, cg_b = self.cgroup(), self.cgroup()
        port_a, port_b = free_port(), free_port()
        self.nodes = [(cg_a, self.serve(port_a, cg_a)), (cg_b, self.serve(port_b, cg_b))]
        node_a, node_b = f"127.0.0.1:{port_a}", f"127.0.0.1:{port_b}"
        self.prometheus = Prometheus(self.tmp, [node_a, node_b])
        run = uuid.uuid4().hex[:6]
        jobs = {kind: f"{kind}-{run}" for kind in
                ("node-hung", "rank-hung", "node-slow", "rank-slow", "healthy")}

        # Two hung jobs, side by side (hung ranks take no CPU): node B's ranks stop before the
        # third all-reduce; in the other, only rank 3 does.
        node_hung = self.start_job(jobs["node-hung"], ["--steps", "100", "--hang-rank", "2,3",
                                                       "--hang-step", "3"])
        rank_hung = self.start_job(jobs["rank-hung"], ["--steps", "100", "--hang-rank", "3",
                                                       "--hang-step", "3"])
        node_hung_pids = self.wait_hung(node_hung, 2)
        rank_hung_pids = self.wait_hung(rank_hung, 5)
        # Then, one at a time (they are judged by their timing): node B 15 ms late at every
        # collective, rank 1 15 ms late, and a healthy job.
        finished = {}
        # Each lasts about 4 s, so that Prometheus (scraping every second) holds several samples
        # of every rank's counters: the healthy job is paced by host work between steps.
        for kind, args in (("node-slow", ["--slow-rank", "2,3", "--slow-ms", "15"]),
                           ("rank-slow", ["--slow-rank", "1", "--slow-ms", "15"]),
                           ("healthy", ["--step-us", "15000"])):
            launchers = self.start_job(jobs[kind], ["--steps", "250", *args])
            ranks = {}
            for launcher in launchers:
                ranks.update(self.finish_job(launcher))
            self.assertEqual(sorted(ranks), [0, 1, 2, 3])
            finished[kind] = {r: int(fields["pid"]) for r, fields in ranks.items()}

        def of_job(findings, kind):
            return [f for f in findings if f["job_id"] == jobs[kind]]

        def who(ranks):
            return sorted((r["node"], r["rank"], r["pid"]) for r in ranks)

        # Prometheus sees the last job one scrape later, the hangs once they last the timeout.
        deadline = time.time() + 30
        while True:
            report = self.cluster()
            hangs, stragglers = report["cross_node_hangs"], report["cross_node_stragglers"]
            if (of_job(hangs, "node-hung") and of_job(hangs, "rank-hung") and
                    of_job(stragglers, "rank-slow") and of_job(stragglers, "node-slow")) or \
                    time.time() > deadline:
                break
            time.sleep(1)

        [h] = of_job(hangs, "node-hung")
        self.assertEqual((h["kind"], h["seq"], h["nranks"], h["whole_node"]),
                         ("missing", 3, 4, node_b), h)
        self.assertEqual(who(h["culprits"]), [(node_b, 2, node_hung_pids[2]),
                                              (node_b, 3, node_hung_pids[3])], h)
        self.assertEqual([c["last_completed_seq"] for c in h["culprits"]], [2, 2])
        self.assertEqual(who(h["waiting"]), [(node_a, 0, node_hung_pids[0]),
                                             (node_a, 1, node_hung_pids[1])], h)
        self.assertGreaterEqual(h["waited_s"], self.HANG_TIMEOUT_S)
        self.assertIn(f"never entered it: every rank of node {node_b}", h["message"])

        [h] = of_job(hangs, "rank-hung")
        self.assertEqual((h["kind"], h["seq"], h["whole_node"]), ("missing", 3, None), h)
        self.assertEqual(who(h["culprits"]), [(node_b, 3, rank_hung_pids[3])], h)

        waits = self.prometheus.query(
            "increase(eacgm_nccl_rank_collective_seconds_total[3m]) / "
            "increase(eacgm_nccl_rank_collectives_total[3m])")
        series = waits  # every label, for the messages below
        waits = sorted((w["metric"].get("job_id", ""), w["metric"].get("rank", ""), w["value"][1])
                       for w in waits)
        self.assertTrue(of_job(stragglers, "node-slow"), (waits, stragglers))
        [s] = of_job(stragglers, "node-slow")
        self.assertEqual(s["whole_node"], node_b, s)
        self.assertEqual(who(s["stragglers"]), [(node_b, 2, finished["node-slow"][2]),
                                                (node_b, 3, finished["node-slow"][3])], s)
        # The others wait for it about as long as it is late.
        self.assertGreater(s["others_mean_wait_s"] - s["straggler_mean_wait_s"], 0.010, s)

        self.assertTrue(of_job(stragglers, "rank-slow"), (waits, stragglers))
        [s] = of_job(stragglers, "rank-slow")
        self.assertEqual(s["whole_node"], None, s)
        self.assertEqual(who(s["stragglers"]), [(node_a, 1, finished["rank-slow"][1])], s)

        # The healthy job was judged (every rank's waits are in Prometheus), and found healthy.
        self.assertEqual(len([w for w in waits if w[0] == jobs["healthy"] and w[2] != "NaN"]), 4,
                         [w["metric"] for w in series])
        for kind in ("node-slow", "rank-slow", "healthy"):
            self.assertEqual(of_job(hangs, kind), [], kind)
        for kind in ("node-hung", "rank-hung", "healthy"):
            self.assertEqual(of_job(stragglers, kind), [], kind)

        # The text says the same.
        text = subprocess.run([EACGM, "cluster", "--prometheus", self.prometheus.url,
                               "--hang-timeout", str(self.HANG_TIMEOUT_S)],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn(f"cross-node hang: job {jobs['node-hung']}", text.stdout)
        self.assertIn(f"cross-node straggler: node {node_b} (ranks 2, 3) of job "
                      f"{jobs['node-slow']}", text.stdout)

        # The hung jobs end: their series go, and with them the verdicts; --watch says so.
        watch_log = open(os.path.join(self.tmp, "watch.log"), "w+")
        watch = subprocess.Popen([EACGM, "cluster", "--prometheus", self.prometheus.url, "--watch",
                                  "--interval", "1", "--hang-timeout", str(self.HANG_TIMEOUT_S)],
                                 stdout=watch_log, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.time() + 15
            while f"cross-node hang: job {jobs['rank-hung']}" not in read_all(watch_log):
                self.assertLess(time.time(), deadline, read_all(watch_log))
                time.sleep(0.2)
            for launcher in node_hung + rank_hung:
                launcher.terminate()
                launcher.wait(timeout=30)
            deadline = time.time() + 20
            while read_all(watch_log).count("- over: cross-node hang") < 2:
                self.assertLess(time.time(), deadline, read_all(watch_log))
                time.sleep(0.2)
        finally:
            watch.send_signal(signal.SIGINT)
            self.assertEqual(watch.wait(timeout=10), 0, read_all(watch_log))
        log = read_all(watch_log)
        watch_log.close()
        self.assertIn(f"- over: cross-node hang: job {jobs['node-hung']}", log)
        self.assertIn(f"- over: cross-node hang: job {jobs['rank-hung']}", log)
        # The waiting ranks outlive the culprits by a moment (then "untraced" is right); at the
        # end nothing is left of either job.
        deadline = time.time() + 20
        while True:
            left = [h for h in self.cluster()["cross_node_hangs"]
                    if h["job_id"] in (jobs["node-hung"], jobs["rank-hung"])]
            if not left or time.time() > deadline:
                break
            time.sleep(1)
        self.assertEqual(left, [])


class ServeErrors(EacgmTest):
    """Bad input is exit code 2 with a message that names the problem."""

    def setUp(self):
        require_root(self)
        super().setUp()

    def serve_fails(self, *args):
        p = subprocess.run([EACGM, "serve", *args], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stderr)
        return p.stderr

    def test_bad_listen_address(self):
        self.assertIn("expected HOST:PORT", self.serve_fails("--listen", "9412"))
        self.assertIn("is not an IP address", self.serve_fails("--listen", "nowhere:9412"))
        self.assertIn("is not a port number", self.serve_fails("--listen", "127.0.0.1:70000"))

    def test_bad_torch_ops_and_budget(self):
        # The same flags, checked the same way, as record and attach.
        self.assertIn("--torch-ops", self.serve_fails("--torch-ops", "aten::(", "--listen",
                                                      "127.0.0.1:0"))
        for bad in ("0", "101%", "abc"):
            self.assertIn("--overhead-budget", self.serve_fails("--overhead-budget", bad))

    def test_port_in_use(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            port = s.getsockname()[1]
            err = self.serve_fails("--listen", f"127.0.0.1:{port}")
        self.assertIn(f"cannot listen on 127.0.0.1:{port}: Address already in use", err)

    def test_nonexistent_cgroup(self):
        err = self.serve_fails("--listen", "127.0.0.1:0", "--cgroup", "/no-such-cgroup-eacgm")
        self.assertIn("--cgroup /no-such-cgroup-eacgm: no such cgroup", err)

    def test_cluster_without_prometheus(self):
        port = free_port()  # nothing listens there
        p = subprocess.run([EACGM, "cluster", "--prometheus", f"http://127.0.0.1:{port}"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 1, p.stderr)
        # The whole reason and what to check, not httplib's one word ("...: Connection").
        self.assertIn(f"cannot reach Prometheus at http://127.0.0.1:{port}: nothing accepted a "
                      f"connection at http://127.0.0.1:{port}: refused, or the host is unreachable "
                      "(httplib error: Connection). Check that the URL is right", p.stderr)
        self.assertIn(f"`curl http://127.0.0.1:{port}/-/ready`", p.stderr)
        self.assertTrue(p.stderr.rstrip().endswith("no firewall or proxy is in the way."), p.stderr)
        p = subprocess.run([EACGM, "cluster", "--prometheus", "http://no-such-host.invalid:9090"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("the host name 'no-such-host.invalid' does not resolve", p.stderr)
        p = subprocess.run([EACGM, "cluster", "--prometheus", "prom:9090"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stderr)


if __name__ == "__main__":
    eacgm_testlib.main()
