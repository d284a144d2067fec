"""bpf: the NCCL layer on a multi-process job over the simulated libnccl.so.2
(whose collectives really wait for every rank) and on the real NVIDIA
library: exact counts and bytes, rank identity, and the cross-rank verdicts —
a straggler named alone, a hang named live, a healthy job with no anomaly."""
import collections
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import eacgm_testlib  # noqa: E402
from eacgm_testlib import (EACGM, REAL_NCCL, SIMNCCL_JOB, EacgmTest, Session,  # noqa: E402
                           require_root)

# ncclDataType_t 0..11 and their sizes (nccl.h).
DTYPE_SIZES = [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1]
DTYPE_NAMES = ["ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32", "ncclInt64", "ncclUint64",
               "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3",
               "ncclFloat8e5m2"]


class SimulatedNccl(EacgmTest):
    def setUp(self):
        require_root(self)
        super().setUp()

    def ranks(self, s):
        return {p["rank"]: p["pid"] for p in s.summary["processes"] if p["rank"] is not None}

    def test_every_datatype_counts_exact_bytes(self):
        s = self.record([SIMNCCL_JOB, "--ranks", "2", "--sequence", "dtypes"])
        self.assertEqual(s.returncode, 0, s.stderr)
        ar = s.calls("nccl")["ncclAllReduce"]
        self.assertEqual(ar["count"], 2 * 12)
        self.assertEqual(ar["errors"], 0)
        self.assertEqual(ar["bytes"], 2 * 1000 * sum(DTYPE_SIZES))
        rows = s.rows("SELECT c.bytes, c.args FROM calls c JOIN collectives k ON k.call_id = c.id "
                      "WHERE k.rank = 0 ORDER BY k.seq")
        self.assertEqual([b for b, _ in rows], [1000 * n for n in DTYPE_SIZES])
        self.assertEqual([json.loads(a)["datatype"] for _, a in rows], DTYPE_NAMES)
        self.assertEqual({json.loads(a)["op"] for _, a in rows}, {"ncclSum"})

    def test_healthy_job_exact_counts_ranks_and_no_anomaly(self):
        s = self.record([SIMNCCL_JOB, "--ranks", "4", "--steps", "50"])
        self.assertEqual(s.returncode, 0, s.stderr)
        counts = {k: v["count"] for k, v in s.calls("nccl").items()}
        self.assertEqual(counts, {"ncclCommInitRank": 4, "ncclAllReduce": 200, "ncclBroadcast": 20,
                                  "ncclGroupStart": 40, "ncclGroupEnd": 40, "ncclSend": 40,
                                  "ncclRecv": 40, "ncclCommDestroy": 4})
        self.assertEqual(s.calls("nccl")["ncclAllReduce"]["bytes"], 200 * 4194304)
        self.assertEqual(s.summary["anomalies"], [])
        self.assertEqual(sorted(self.ranks(s)), [0, 1, 2, 3])
        # Collective n is collective n on every rank: 55 sequence numbers, each on all 4 ranks.
        per_seq = dict(s.rows("SELECT seq, COUNT(DISTINCT rank) FROM collectives GROUP BY seq"))
        self.assertEqual(per_seq, {n: 4 for n in range(1, 56)})
        figures = s.summary["layers"]["nccl"]["ranks"]
        self.assertEqual(sorted(r["rank"] for r in figures), [0, 1, 2, 3])
        self.assertTrue(all(r["collectives"] == 55 for r in figures))
        self.assertTrue(all(r["bus_bandwidth_gbps"] > 0 for r in figures))
        # Perfetto links each collective across the four ranks with one flow id.
        t = s.perfetto()
        if t is not None:
            flows = collections.Counter(f for p in t.packet if p.HasField("track_event")
                                        for f in p.track_event.flow_ids)
            self.assertEqual(len(flows), 55)
            self.assertEqual(set(flows.values()), {4})
        self.assertSessionComplete(s)

    def test_rank_from_the_communicator_without_environment(self):
        s = self.record([SIMNCCL_JOB, "--ranks", "3", "--steps", "10", "--no-env-rank"])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(sorted(self.ranks(s)), [0, 1, 2])

    def test_straggler_is_named_alone(self):
        s = self.record([SIMNCCL_JOB, "--ranks", "4", "--steps", "40", "--slow-rank", "2",
                         "--slow-ms", "20"])
        self.assertEqual(s.returncode, 0, s.stderr)
        anomalies = s.summary["anomalies"]
        self.assertEqual([(a["kind"], a["rank"]) for a in anomalies], [("straggler", 2)],
                         json.dumps(anomalies, indent=1))
        a = anomalies[0]
        self.assertEqual(a["layer"], "nccl")
        self.assertEqual(a["pid"], self.ranks(s)[2])
        self.assertGreater(a["evidence"]["median_lateness_ns"], 15_000_000)
        self.assertIn("straggler", s.stdout)  # the printed report

    def test_hang_is_named_live_and_kept_on_sigterm(self):
        started = time.time()
        out, p = self.start_record([SIMNCCL_JOB, "--ranks", "4", "--steps", "50", "--hang-rank",
                                    "1", "--hang-step", "5"], "--hang-timeout", "2")
        # Step 5 is reached well within a second; the hang must be named by
        # timeout + 2 s after that.
        self.wait_for_stderr(p, "anomaly [hang]", timeout=6)
        self.assertLess(time.time() - started, 2 + 2 + 1.5)
        p.send_signal(signal.SIGTERM)
        s = self.finish(out, p)
        self.assertEqual(s.returncode, 128 + signal.SIGTERM, s.stderr)
        hangs = [a for a in s.summary["anomalies"] if a["kind"] == "hang"]
        self.assertEqual(len(hangs), 1, s.summary["anomalies"])
        e = hangs[0]["evidence"]
        self.assertEqual(e["missing_ranks"], [1])
        self.assertEqual(e["waiting_ranks"], [0, 2, 3])
        self.assertEqual(e["seq"], 5)
        self.assertEqual(e["collective"], "ncclAllReduce")
        self.assertEqual(e["last_completed"]["1"]["seq"], 4)
        self.assertEqual(hangs[0]["rank"], 1)
        self.assertEqual(hangs[0]["pid"], self.ranks(s)[1])
        self.assertSessionComplete(s)

    def test_a_hang_that_moves_on_is_marked_resolved(self):
        # Rank 2 enters all-reduce #10 and spends 4.5 s in it before it arrives (its host
        # stalled inside the call): every rank is inside the collective, so after the 2 s
        # timeout it is a hang inside it; then the job finishes, and the anomaly says it was a
        # stall of ~4.5 s, not a hang.
        env = dict(os.environ, SIMGPU_RULES="rank=2 delay ncclAllReduce 4500ms nth=10")
        s = self.record([SIMNCCL_JOB, "--ranks", "4", "--steps", "20"], "--hang-timeout", "2",
                        env=env)
        self.assertEqual(s.returncode, 0, s.stderr)
        hangs = [a for a in s.summary["anomalies"] if a["kind"] == "hang"]
        self.assertEqual(len(hangs), 1, s.summary["anomalies"])
        e = hangs[0]["evidence"]
        self.assertEqual(e["seq"], 10)
        self.assertTrue(e["inside_collective"])
        self.assertGreater(e["resolved_after_s"], 4.0)
        self.assertLess(e["resolved_after_s"], 6.0)
        self.assertIn("a stall, not a hang", hangs[0]["message"])
        self.assertIn("anomaly [hang] resolved", s.stderr)
        self.assertEqual([a["kind"] for a in s.summary["anomalies"]], ["hang"])

    def attach_to_job(self, *job_flags, seconds=3):
        """Starts the job untraced, attaches to its launcher (ranks included)
        once the ranks are well into their collectives, and detaches."""
        job = subprocess.Popen([SIMNCCL_JOB, "--ranks", "4", *job_flags],
                               stdout=subprocess.DEVNULL)
        try:
            time.sleep(0.7)
            out = self.out()
            s = subprocess.run([EACGM, "attach", "-p", str(job.pid), "-d", str(seconds), "-o", out],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(s.returncode, 0, s.stderr)
            self.assertIsNone(job.poll(), "the job ended before eacgm detached")
        finally:
            job.kill()
            job.wait()
        return Session(out, s)

    def test_straggler_is_named_after_attach(self):
        # The communicator was created before eacgm arrived: the ranks come
        # from RANK/WORLD_SIZE and are aligned on their collectives' ends.
        s = self.attach_to_job("--steps", "1000", "--slow-rank", "1", "--slow-ms", "15")
        anomalies = s.summary["anomalies"]
        self.assertEqual([(a["kind"], a["rank"]) for a in anomalies], [("straggler", 1)],
                         json.dumps(anomalies, indent=1))
        self.assertEqual(anomalies[0]["pid"], self.ranks(s)[1])
        self.assertEqual(anomalies[0]["evidence"]["communicator"], "world")

    def test_attach_numbers_the_same_collective_alike_on_every_rank(self):
        s = self.attach_to_job("--steps", "100000")
        self.assertEqual(s.summary["anomalies"], [])
        rows = s.rows("SELECT k.seq, k.rank, c.start_ns, c.start_ns + c.duration_ns "
                      "FROM collectives k JOIN calls c ON c.id = k.call_id WHERE k.comm = 'world'")
        by_seq = collections.defaultdict(dict)
        for seq, rank, start, end in rows:
            self.assertNotIn(rank, by_seq[seq], f"rank {rank} twice in collective {seq}")
            by_seq[seq][rank] = (start, end)
        complete = {seq: calls for seq, calls in by_seq.items() if len(calls) == 4}
        self.assertGreater(len(complete), 20, "too few collectives numbered on every rank")
        # No rank leaves a collective before every rank has entered it: the
        # calls numbered alike must all overlap. Calls of different
        # collectives numbered alike would not.
        for seq, calls in sorted(complete.items()):
            last_in = max(start for start, _ in calls.values())
            first_out = min(end for _, end in calls.values())
            self.assertLessEqual(last_in, first_out, f"collective {seq}: {calls}")


REAL_NCCL_SCRIPT = f"""
import ctypes
lib = ctypes.CDLL("{REAL_NCCL}")
class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]
ar = lib.ncclAllReduce
ar.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
               ctypes.c_void_p, ctypes.c_void_p]
print("ret ncclAllReduce", ar(None, None, 1000, 9, 2, None, None))
comm = ctypes.c_void_p(0)
print("ret ncclCommInitRank", lib.ncclCommInitRank(ctypes.byref(comm), 2, UniqueId(b"x" * 16), 1))
send = lib.ncclSend
send.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                 ctypes.c_void_p]
print("ret ncclSend", send(None, 10, 4, 1, None, None))
"""


class RealNvidiaNccl(EacgmTest):
    """The real libnccl.so.2: no GPU here, so calls fail, but the probes
    attach (one per address, despite its weak nccl* aliases) and decode."""

    def setUp(self):
        require_root(self)
        if not os.path.exists(REAL_NCCL):
            self.skipTest(f"{REAL_NCCL} not installed")
        super().setUp()

    def test_calls_are_decoded_with_their_errors(self):
        s = self.record(["/usr/bin/python3.11", "-c", REAL_NCCL_SCRIPT])
        self.assertEqual(s.returncode, 0, s.stderr)
        printed = {l.split()[1]: int(l.split()[2]) for l in s.stdout.splitlines()
                   if l.startswith("ret ")}
        calls = s.calls("nccl")
        self.assertEqual({k: v["count"] for k, v in calls.items()},
                         {"ncclAllReduce": 1, "ncclCommInitRank": 1, "ncclSend": 1})
        rows = {name: (ret, json.loads(args)) for name, ret, args in
                s.rows("SELECT name, ret, args FROM calls WHERE layer='nccl'")}
        for name, code in printed.items():
            self.assertEqual(rows[name][0], code, name)
            self.assertEqual(calls[name]["errors"], 1 if code else 0, name)
        self.assertEqual(rows["ncclAllReduce"][1]["datatype"], "ncclBfloat16")
        self.assertEqual(rows["ncclAllReduce"][1]["op"], "ncclMax")
        self.assertEqual(rows["ncclAllReduce"][1]["count"], 1000)
        self.assertEqual(rows["ncclCommInitRank"][1]["rank"], 1)
        self.assertEqual(rows["ncclCommInitRank"][1]["nranks"], 2)
        self.assertEqual(rows["ncclSend"][1]["peer"], 1)
        self.assertEqual(rows["ncclSend"][1]["datatype"], "ncclInt64")
        (err,) = s.rows("SELECT error FROM calls WHERE name='ncclAllReduce'")[0]
        self.assertEqual(err, "ncclInvalidArgument")


if __name__ == "__main__":
    eacgm_testlib.main()
