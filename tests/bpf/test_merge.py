"""bpf: `eacgm merge` on two real recordings of one NCCL job spanning two "nodes" (one simnccl_job
launcher per node, one NCCL id, ranks 0-1 and 2-3), each recorded by its own `eacgm record` at the
same time. Node B's session is then given a clock of its own on purpose: every instant 7 s later
and a realtime offset 40 ms wrong (NTP). The merge must find the shift from the collectives, say
the error left, and then every collective overlaps on every pair of ranks; record's cross-rank
analysis on the merged job names the slow rank, and its node; each API's call figures cover
every node's calls. Bad input is exit 2 with a one-line message and nothing written."""
import collections
import json
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import eacgm_testlib  # noqa: E402
from eacgm_testlib import EACGM, SIMNCCL_JOB  # noqa: E402

SKEW_NS = 7_000_000_000
NTP_ERROR_NS = 40_000_000
STEPS = 60  # 60 all-reduces and 6 broadcasts per rank


def eacgm(*args):
    return subprocess.run([EACGM, *args], capture_output=True, text=True, timeout=120)


def skew_session(path):
    """Moves every instant of a session 7 s later and makes its realtime offset 40 ms wrong."""
    db = sqlite3.connect(os.path.join(path, "events.sqlite"))
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        for column in ("start_ns", "end_ns", "ts_ns"):
            if column in [c[1] for c in db.execute(f"PRAGMA table_info({table})")]:
                db.execute(f"UPDATE {table} SET {column} = {column} + ?", (SKEW_NS,))
    for key in ("start_ns", "end_ns"):
        db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE key = ?",
                   (SKEW_NS, key))
    db.execute("UPDATE meta SET value = CAST(value AS INTEGER) - ? WHERE key = "
               "'realtime_offset_ns'", (SKEW_NS - NTP_ERROR_NS,))
    db.commit()
    db.close()


class Merge(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root to load BPF programs")
        cls.tmp = tempfile.mkdtemp(prefix="eacgm-merge-")
        nccl_id = subprocess.run([SIMNCCL_JOB, "--print-id"], capture_output=True, text=True,
                                 check=True).stdout.strip()
        cls.nodes = [os.path.join(cls.tmp, name) for name in ("node-a", "node-b")]
        results = [None, None]

        def record(k):
            results[k] = eacgm("record", "-o", cls.nodes[k], "--layers", "cuda,nccl,os", "--",
                               SIMNCCL_JOB, "--ranks", "4", "--nnodes", "2", "--node-rank", str(k),
                               "--nccl-id", nccl_id, "--steps", str(STEPS), "--slow-rank", "3",
                               "--slow-ms", "5")

        threads = [threading.Thread(target=record, args=(k,)) for k in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in results:
            assert r.returncode == 0, r.stderr
        # A copy as recorded, then node B's clock made its own.
        cls.same_clock = os.path.join(cls.tmp, "node-b-same-clock")
        shutil.copytree(cls.nodes[1], cls.same_clock)
        skew_session(cls.nodes[1])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def out(self, name):
        return os.path.join(self.tmp, name)

    def test_skewed_clocks_are_aligned_by_the_collectives(self):
        r = eacgm("merge", *self.nodes, "-o", self.out("merged"), "--json")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        summary = json.loads(r.stdout)
        with open(os.path.join(self.out("merged"), "summary.json")) as f:
            self.assertEqual(json.load(f), summary)
        a, b = summary["sessions"]
        self.assertEqual((a["method"], a["shift_ns"], a["node"]), ("reference", 0, "node-a"))
        self.assertEqual((b["method"], b["node"], b["conflicts"]), ("collectives", "node-b", 0))
        self.assertEqual(b["collectives_shared"], STEPS + STEPS // 10)
        # One machine recorded both: the true shift is -7 s exactly. Within the error stated, and
        # that error within the slow rank's delay (the others wait 5 ms inside each collective).
        self.assertLessEqual(abs(b["shift_ns"] + SKEW_NS), b["residual_ns"], b)
        self.assertLess(b["residual_ns"], 10_000_000, b)
        self.assertLess(abs(b["realtime_correction_ns"] + NTP_ERROR_NS), 10_000_000, b)

        nccl = summary["nccl"]
        self.assertEqual(nccl["collectives_across_sessions"], STEPS + STEPS // 10)
        self.assertEqual(nccl["overlapping_on_every_pair"], nccl["collectives_across_sessions"])
        # The merged database, checked on its own: every collective overlaps on every pair.
        db = sqlite3.connect(os.path.join(self.out("merged"), "events.sqlite"))
        late = db.execute(
            "SELECT COUNT(*) FROM (SELECT k.comm, k.seq, MAX(c.start_ns) AS s, "
            "MIN(c.start_ns + c.duration_ns) AS e, COUNT(*) AS n FROM collectives k "
            "JOIN calls c ON c.id = k.call_id GROUP BY k.comm, k.seq) WHERE s > e OR n != 4"
        ).fetchone()[0]
        self.assertEqual(late, 0)
        # Every call of both sessions, each with its session and node.
        for k, node in enumerate(self.nodes):
            src = sqlite3.connect(os.path.join(node, "events.sqlite"))
            self.assertEqual(db.execute("SELECT COUNT(*) FROM calls WHERE session = ? AND node = ?",
                                        (k, os.path.basename(node))).fetchone()[0],
                             src.execute("SELECT COUNT(*) FROM calls").fetchone()[0])
            src.close()
        self.assertEqual(db.execute("SELECT COUNT(*) FROM collectives").fetchone()[0],
                         4 * (STEPS + STEPS // 10))
        db.close()
        # record's cross-rank analysis on the merged job: rank 3, 5 ms late at every collective,
        # arrives last, and is the one straggler, named with its node.
        ranks = {r["rank"]: r for r in nccl["ranks"]}
        self.assertEqual(sorted(ranks), [0, 1, 2, 3])
        self.assertEqual((ranks[3]["node"], ranks[3]["session"]), ("node-b", 1))
        self.assertGreater(ranks[3]["arrived_last"], 0.9 * (STEPS + STEPS // 10), ranks[3])
        self.assertEqual([(a["kind"], a["rank"], a["node"], a["session"])
                          for a in nccl["anomalies"]], [("straggler", 3, "node-b", 1)],
                         nccl["anomalies"])
        self.assertEqual(nccl["anomalies"][0]["pid"], ranks[3]["pid"])
        # The job ended: no collective was left open, and hangs were judged (none).
        self.assertEqual((nccl["open_collectives"], nccl["hangs_judged"]), (0, True))
        # Each node's processes (its launcher and two ranks), named with their node; the verdict
        # on the whole job among the anomalies; the job exited 0 on both nodes.
        procs = collections.Counter((p["node"], p["role"]) for p in summary["processes"])
        self.assertEqual(procs, {("node-a", "launcher"): 1, ("node-a", "rank"): 2,
                                 ("node-b", "launcher"): 1, ("node-b", "rank"): 2})
        self.assertIn(("straggler", "job", "node-b"),
                      [(a["kind"], a["scope"], a["node"]) for a in summary["anomalies"]])
        self.assertEqual(summary["exit_code"], 0)
        self.assertAlmostEqual(summary["duration_s"],
                               (summary["end_ns"] - summary["start_ns"]) / 1e9)

        # One timeline: each process under its node's name, and each collective linked across the
        # ranks of both nodes by one flow, on the merged clock.
        trace = eacgm_testlib.Session(self.out("merged"), r).perfetto()
        if trace is not None:
            names = {p.track_descriptor.process.process_name for p in trace.packet
                     if p.HasField("track_descriptor") and p.track_descriptor.HasField("process")}
            for rank, node in ((0, "node-a"), (1, "node-a"), (2, "node-b"), (3, "node-b")):
                self.assertIn(f"{node}: simnccl_job (rank {rank})", names)
            flows = collections.Counter(f for p in trace.packet if p.HasField("track_event")
                                        for f in p.track_event.flow_ids)
            self.assertEqual(len(flows), STEPS + STEPS // 10)
            self.assertEqual(set(flows.values()), {4})

        text = eacgm("merge", *self.nodes, "-o", self.out("merged-text"))
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn(f"{STEPS + STEPS // 10} of {STEPS + STEPS // 10} collectives seen by two "
                      "sessions or more overlap on every pair of ranks", text.stdout)

    def test_per_api_figures_cover_every_node(self):
        # Each API's table over the whole job: counts, errors and bytes are the nodes' sums; the
        # percentiles are not (they do not add up), but taken over every node's calls in the
        # merged database, with summary.json's definition (nearest rank), so they lie between
        # the nodes' own.
        r = eacgm("merge", *self.nodes, "-o", self.out("merged-calls"), "--json")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        layers = json.loads(r.stdout)["layers"]
        own = []
        for node in self.nodes:
            with open(os.path.join(node, "summary.json")) as f:
                own.append(json.load(f)["layers"])
        names = [os.path.basename(n) for n in self.nodes]
        self.assertEqual(set(layers), set(own[0]) | set(own[1]))
        for layer, merged in layers.items():
            active = [n for n, o in zip(names, own) if o.get(layer, {}).get("status") == "active"]
            self.assertEqual(merged["nodes"], active, layer)
            self.assertEqual(merged["status"],
                             "active" if active else own[0][layer]["status"], layer)
        for layer in ("cuda", "nccl"):
            self.assertEqual(layers[layer]["nodes"], names)
            self.assertEqual(layers[layer]["status"], "active")

        def nearest_rank(values, p):
            values = sorted(values)
            rank = math.ceil(p / 100.0 * len(values))
            return values[min(max(rank, 1), len(values)) - 1]

        db = sqlite3.connect(os.path.join(self.out("merged-calls"), "events.sqlite"))
        checked = 0
        for layer in ("cuda", "nccl"):
            calls = layers[layer]["calls"]
            node_calls = [o[layer]["calls"] for o in own]
            self.assertEqual(set(calls), set(node_calls[0]) | set(node_calls[1]), layer)
            self.assertIn("cudaMalloc" if layer == "cuda" else "ncclAllReduce", calls)
            for api, figures in calls.items():
                mine = [c[api] for c in node_calls if api in c]
                for field in ("count", "errors", "bytes", "total_ns"):
                    self.assertEqual(figures[field], sum(m[field] for m in mine), (api, field))
                codes = collections.Counter()
                for m in mine:
                    codes.update(m.get("errors_by_code", {}))
                self.assertEqual(figures.get("errors_by_code", {}), dict(codes), api)
                durations = [d for (d,) in db.execute(
                    "SELECT duration_ns FROM calls WHERE layer = ? AND name = ? AND "
                    "inner_call = 0", (layer, api))]
                self.assertEqual(len(durations), figures["count"], api)
                for p in (50, 99):
                    key = f"p{p}_ns"
                    self.assertEqual(figures[key], nearest_rank(durations, p), (api, key))
                    self.assertGreaterEqual(figures[key], min(m[key] for m in mine), (api, key))
                    self.assertLessEqual(figures[key], max(m[key] for m in mine), (api, key))
                checked += 1
        db.close()
        self.assertGreater(checked, 4)

    def test_figures_keyed_by_pid_stay_with_their_node(self):
        # Device memory and the os layer are keyed by pid in a node's summary; pids of two nodes
        # can be the same, so the merged summary lists them per session, with the node.
        r = eacgm("merge", *self.nodes, "-o", self.out("merged-per-node"), "--json")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        summary = json.loads(r.stdout)
        names = [os.path.basename(n) for n in self.nodes]
        memory = summary["memory"]["per_session"]
        self.assertEqual([(m["node"], m["session"]) for m in memory],
                         [(names[0], 0), (names[1], 1)])
        for i, node in enumerate(self.nodes):
            with open(os.path.join(node, "summary.json")) as f:
                own = json.load(f)
            self.assertEqual({k: v for k, v in memory[i].items() if k not in ("node", "session")},
                             own["memory"])
            # Every rank of the node allocated device memory, and the merged entry says how much.
            self.assertEqual(len(own["memory"]["peak_device_bytes"]), 2)
            self.assertTrue(all(v > 0 for v in own["memory"]["peak_device_bytes"].values()))
            self.assertEqual(own["layers"]["os"]["status"], "active")
            os_layer = summary["layers"]["os"]["per_session"][i]
            self.assertEqual((os_layer["node"], os_layer["session"]), (names[i], i))
            self.assertEqual({k: v for k, v in os_layer.items() if k not in ("node", "session")},
                             own["layers"]["os"])

    def test_a_realtime_clock_the_collectives_allow_is_kept(self):
        r = eacgm("merge", self.nodes[0], self.same_clock, "-o", self.out("same"), "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        b = json.loads(r.stdout)["sessions"][1]
        self.assertEqual((b["method"], b["realtime_correction_ns"]), ("collectives", 0), b)
        self.assertLess(abs(b["shift_ns"]), 1_000_000, b)

    def test_bad_input(self):
        r = eacgm("merge", self.nodes[0], "-o", self.out("one"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("merge needs two sessions or more", r.stderr)
        self.assertFalse(os.path.exists(self.out("one")))
        r = eacgm("merge", self.nodes[0], self.out("missing"), "-o", self.out("x"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("missing: no such session directory", r.stderr)
        self.assertFalse(os.path.exists(self.out("x")))
        # Never over a session.
        r = eacgm("merge", *self.nodes, "-o", self.nodes[0])
        self.assertEqual(r.returncode, 2)
        self.assertIn("exists and is not an empty directory", r.stderr)
        corrupt = self.out("corrupt")
        os.makedirs(corrupt)
        with open(os.path.join(corrupt, "events.sqlite"), "w") as f:
            f.write("not a database")
        r = eacgm("merge", self.nodes[0], corrupt, "-o", self.out("y"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("corrupt/events.sqlite is not an eacgm session database", r.stderr)
        self.assertFalse(os.path.exists(self.out("y")))
        r = eacgm("merge", *self.nodes, "-o", self.out("z"), "--reference", "2")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--reference 2 names no session: there are 2", r.stderr)


class MergeHang(eacgm_testlib.SharedRecordingsTest):
    """A hang across nodes: node B's ranks (2 and 3) stop before their 10th step's all-reduce,
    while node A's ranks enter it and wait. Node A's own session sees ranks it does not trace
    missing; node B's sees nothing wrong (its ranks are in no collective). Merged, the hang is
    named on the whole job: the all-reduce node A's ranks wait in, ranks 2 and 3 missing, rank
    2 named with its node and its last completed collective."""

    HANG_STEP = 10
    shared_prefix = "eacgm-merge-hang-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        nccl_id = subprocess.run([SIMNCCL_JOB, "--print-id"], capture_output=True, text=True,
                                 check=True).stdout.strip()
        cls.nodes = [os.path.join(cls.shared, name) for name in ("node-a", "node-b")]
        procs = [subprocess.Popen(
            [EACGM, "record", "-q", "-o", cls.nodes[k], "--layers", "cuda,nccl", "--",
             SIMNCCL_JOB, "--ranks", "4", "--nnodes", "2", "--node-rank", str(k), "--nccl-id",
             nccl_id, "--steps", "40", "--hang-rank", "2,3", "--hang-step", str(cls.HANG_STEP)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in (0, 1)]
        # Node A's own recorder names the hang after its --hang-timeout (3 s): then the wait has
        # lasted long enough for the merge's too. Both recorders are stopped as a user would.
        deadline = time.monotonic() + 30
        seen = ""
        while "anomaly [hang]" not in seen and time.monotonic() < deadline:
            line = procs[0].stderr.readline()
            if not line:
                break
            seen += line
        for p in procs:
            p.send_signal(signal.SIGINT)
        cls.outputs = [p.communicate(timeout=60) for p in procs]
        assert "anomaly [hang]" in seen, seen + cls.outputs[0][1]

    def test_the_hang_is_named_on_the_whole_job(self):
        summaries = []
        for node in self.nodes:
            with open(os.path.join(node, "summary.json")) as f:
                summaries.append(json.load(f))
        # Node A: its two ranks wait in the all-reduce; node B: nothing open, no hang.
        open_a = summaries[0]["layers"]["nccl"]["open_collectives"]
        self.assertEqual(sorted(e["rank"] for e in open_a), [0, 1], open_a)
        self.assertEqual({(e["collective"], e["nranks"]) for e in open_a}, {("ncclAllReduce", 4)})
        self.assertEqual(summaries[1]["layers"]["nccl"]["open_collectives"], [])
        self.assertNotIn("hang", [a["kind"] for a in summaries[1]["anomalies"]])

        out = os.path.join(self.shared, "merged")
        r = eacgm("merge", *self.nodes, "-o", out, "--json")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        nccl = json.loads(r.stdout)["nccl"]
        self.assertEqual((nccl["open_collectives"], nccl["hangs_judged"]), (2, True))
        hangs = [a for a in nccl["anomalies"] if a["kind"] == "hang"]
        self.assertEqual(len(hangs), 1, nccl["anomalies"])
        hang = hangs[0]
        self.assertEqual((hang["rank"], hang["node"], hang["session"]), (2, "node-b", 1))
        self.assertEqual(hang["evidence"]["waiting_ranks"], [0, 1])
        self.assertEqual(hang["evidence"]["missing_ranks"], [2, 3])
        self.assertEqual(hang["evidence"]["seq"], open_a[0]["seq"])
        # Ranks 2 and 3 completed every collective before the one they never entered.
        for rank in ("2", "3"):
            self.assertEqual(hang["evidence"]["last_completed"][rank]["seq"],
                             open_a[0]["seq"] - 1)
        self.assertGreaterEqual(hang["evidence"]["waiting_s"], 3.0)

        # Among the merged summary's anomalies: node A's own view (ranks it does not trace
        # missing), and the verdict on the whole job.
        merged = json.loads(r.stdout)
        scopes = [(a["kind"], a["scope"], a["node"]) for a in merged["anomalies"]]
        self.assertIn(("hang", "node", "node-a"), scopes)
        self.assertIn(("hang", "job", "node-b"), scopes)
        text = eacgm("merge", *self.nodes, "-o", os.path.join(self.shared, "merged-text"))
        self.assertIn("anomaly [hang] [node node-b]: ncclAllReduce", text.stdout)
        # A longer timeout than the wait lasted: no hang.
        longer = eacgm("merge", *self.nodes, "-o", os.path.join(self.shared, "merged-long"),
                       "--hang-timeout", "600", "--json")
        self.assertEqual([a["kind"] for a in json.loads(longer.stdout)["nccl"]["anomalies"]
                          if a["kind"] == "hang"], [])


if __name__ == "__main__":
    eacgm_testlib.main()
