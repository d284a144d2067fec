"""bpf: `eacgm merge` on two real recordings of one NCCL job spanning two "nodes" (one simnccl_job
launcher per node, one NCCL id, ranks 0-1 and 2-3), each recorded by its own `eacgm record` at the
same time. Node B's session is then given a clock of its own on purpose: every instant 7 s later
and a realtime offset 40 ms wrong (NTP). The merge must find the shift from the collectives, say
the error left, and then every collective overlaps on every pair of ranks; record's cross-rank
analysis on the merged job names the slow rank, and its node. Bad input is exit 2 with a one-line message and nothing written."""
import collections
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
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
            results[k] = eacgm("record", "-o", cls.nodes[k], "--layers", "cuda,nccl", "--",
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
        self.assertIn("corrupt/events.sqlite: not a session database", r.stderr)
        self.assertFalse(os.path.exists(self.out("y")))
        r = eacgm("merge", *self.nodes, "-o", self.out("z"), "--reference", "2")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--reference 2 names no session: there are 2", r.stderr)


if __name__ == "__main__":
    eacgm_testlib.main()
