#!/usr/bin/python3.11
"""Labelled evaluation of eacgm's anomaly detectors (docs/ANALYSIS.md).

Records the simulated training job (simtrain on simgpu) under `eacgm record` many times, healthy
and with faults injected at a known step, then scores every detector against that ground truth:
the live verdicts (summary.json) and the offline ones (`eacgm analyze`).

  sudo /usr/bin/python3.11 bench/detect_eval.py --build build-analysis [--repeat 2] [--json out.json]

Fault classes (each in rank 0 or rank 1, from step 3001 of 4000, about 12.5 s into a ~17 s run):
  latency     one API of one rank gets slower inside the runtime (SIMGPU_RULES latency ... from=N):
              cudaLaunchKernel 500 us (~150x), cudaStreamSynchronize 2 ms (~40x),
              cudaMemcpyAsync 1 ms (~100x)
  stall       every rank's host work per step grows by 12 ms (simtrain --stall-from-step): calls
              per second fall ~75 % while no call gets slower (a data-loader / Python stall)
  leak        1 MiB of device memory never freed per step, from the start (--leak-bytes)
Scoring, per detector kind: an anomaly is a true positive when its run has the matching fault
(latency->latency, throughput->stall, leak->leak; gmm->any fault), it names a faulty process, and
its window ends after the onset; anything else is a false positive. Recall counts faulty processes
found. Delay: end of the reporting window minus the onset.
"""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

STEPS, STEP_US, ONSET_STEP = 4000, 4000, 3001
KINDS = ["latency", "throughput", "gmm", "leak"]
MATCH = {"latency": {"latency"}, "throughput": {"stall"}, "leak": {"leak"},
         "gmm": {"latency", "stall", "leak"}}


def scenarios(repeat):
    out = []
    for i in range(repeat):
        out += [("healthy", None, None, {}, [])] * 3
        out += [
            ("latency", 1, "cudaLaunchKernel", {"SIMGPU_RULES": f"rank=1 latency cudaLaunchKernel 500us from={5 * (ONSET_STEP - 1) + 1}"}, []),
            ("latency", 0, "cudaStreamSynchronize", {"SIMGPU_RULES": f"rank=0 latency cudaStreamSynchronize 2ms from={ONSET_STEP}"}, []),
            ("latency", 1, "cudaMemcpyAsync", {"SIMGPU_RULES": f"rank=1 latency cudaMemcpyAsync 1ms from={ONSET_STEP}"}, []),
            ("stall", None, None, {}, ["--stall-from-step", str(ONSET_STEP), "--stall-ms", "12"]),
            ("leak", None, None, {}, ["--leak-bytes", "1048576"]),
        ]
    return out


def record(eacgm, simtrain, out, env_extra, args):
    env = dict(os.environ, **env_extra)
    cmd = [eacgm, "record", "-q", "-o", out, "--layers", "cuda", "--", simtrain, "--ranks", "2",
           "--steps", str(STEPS), "--step-us", str(STEP_US), *args]
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=300)
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


def onset_s(out, pid, fault):
    """Seconds from the session start to the first affected call of `pid`."""
    db = sqlite3.connect(os.path.join(out, "events.sqlite"))
    (start,) = db.execute("SELECT value FROM meta WHERE key='start_ns'").fetchone()
    if fault == "leak":
        row = db.execute("SELECT MIN(start_ns) FROM calls WHERE pid=?", (pid,)).fetchone()
    else:  # the step where the fault starts: its one cudaMemcpyAsync
        row = db.execute("SELECT start_ns FROM calls WHERE pid=? AND name='cudaMemcpyAsync' "
                         "ORDER BY start_ns LIMIT 1 OFFSET ?", (pid, ONSET_STEP - 1)).fetchone()
    db.close()
    return (row[0] - int(start)) / 1e9


def score(runs, source):
    """Precision, recall, F1 and delays per detector kind over `runs` for one verdict source."""
    result = {}
    healthy_s = sum(r["duration_s"] for r in runs if r["fault"] == "healthy")
    for kind in KINDS:
        tp = fp = found = faulty = 0
        delays = []
        healthy_alarms = 0
        for r in runs:
            matching = r["fault"] in MATCH[kind]
            if matching:
                faulty += len(r["faulty"])
            hit = set()
            for a in r[source]:
                if a["kind"] != kind:
                    continue
                pid = a["pid"]
                # Window detectors give [start, end] of the reporting windows; the leak detector
                # the seconds of history it judged, from t_s.
                span = a["evidence"].get("window_s", 0)
                end = span[1] if isinstance(span, list) else a["t_s"] + span
                if matching and pid in r["faulty"] and end >= r["faulty"][pid]:
                    tp += 1
                    if pid not in hit:
                        delays.append(max(0.0, end - r["faulty"][pid]))
                    hit.add(pid)
                else:
                    fp += 1
                    healthy_alarms += r["fault"] == "healthy"
            found += len(hit)
        precision = tp / (tp + fp) if tp + fp else None
        recall = found / faulty if faulty else None
        f1 = (2 * precision * recall / (precision + recall)
              if precision is not None and recall is not None and precision + recall > 0 else None)
        result[kind] = {"tp": tp, "fp": fp, "found": found, "faulty": faulty,
                        "precision": precision, "recall": recall, "f1": f1,
                        "median_delay_s": sorted(delays)[len(delays) // 2] if delays else None,
                        "max_delay_s": max(delays) if delays else None,
                        "false_alarms_per_healthy_hour": healthy_alarms / healthy_s * 3600 if healthy_s else None}
    return result


def fmt(v, pattern="{:.2f}"):
    return "-" if v is None else pattern.format(v)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="build directory (eacgm, simgpu/bin/simtrain)")
    p.add_argument("--repeat", type=int, default=2, help="times the scenario set is run")
    p.add_argument("--json", help="write all runs and scores here")
    p.add_argument("--keep", help="keep the sessions in this directory")
    a = p.parse_args()
    eacgm = os.path.abspath(os.path.join(a.build, "eacgm"))
    simtrain = os.path.abspath(os.path.join(a.build, "simgpu/bin/simtrain"))
    work = a.keep or tempfile.mkdtemp(prefix="eacgm-eval-")
    os.makedirs(work, exist_ok=True)
    runs = []
    for i, (fault, rank, api, env, args) in enumerate(scenarios(a.repeat)):
        out = os.path.join(work, f"run{i:02d}-{fault}")
        t0 = time.time()
        summary = record(eacgm, simtrain, out, env, args)
        ranks = {p["rank"]: p["pid"] for p in summary["processes"] if p["rank"] is not None}
        if fault == "healthy":
            faulty = {}
        elif rank is None:
            faulty = {pid: onset_s(out, pid, fault) for pid in ranks.values()}
        else:
            faulty = {ranks[rank]: onset_s(out, ranks[rank], fault)}
        report = os.path.join(out, "analyze.json")
        subprocess.run([eacgm, "analyze", "-q", out, "-o", report], check=True)
        with open(report) as f:
            offline = json.load(f)["anomalies"]
        run = {"run": i, "fault": fault, "api": api, "rank": rank, "faulty": faulty,
               "duration_s": summary["duration_s"], "live": summary["anomalies"], "offline": offline}
        runs.append(run)
        kinds = lambda xs: sorted(f"{x['kind']}(rank {x['rank']})" for x in xs)
        print(f"run {i:2d} {fault:8s} {api or '':22s} rank {rank if rank is not None else '*'}: "
              f"{time.time() - t0:4.1f} s, live {kinds(run['live'])}, offline {kinds(offline)}",
              flush=True)
    scores = {src: score(runs, src) for src in ("live", "offline")}
    print("\nsource   detector    TP  FP  found/faulty  precision  recall   F1    median/max delay   false alarms/healthy h")
    for src, by_kind in scores.items():
        for kind, s in by_kind.items():
            print(f"{src:8s} {kind:10s} {s['tp']:3d} {s['fp']:3d}   {s['found']:3d}/{s['faulty']:<3d}     "
                  f"{fmt(s['precision']):>6s}   {fmt(s['recall']):>6s}  {fmt(s['f1']):>5s}   "
                  f"{fmt(s['median_delay_s'], '{:.1f}')} / {fmt(s['max_delay_s'], '{:.1f}')} s"
                  f"          {fmt(s['false_alarms_per_healthy_hour'], '{:.1f}')}")
    healthy = sum(r["duration_s"] for r in runs if r["fault"] == "healthy")
    print(f"\n{len(runs)} runs, {healthy / 60:.1f} min of healthy running; sessions in {work}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": runs, "scores": scores}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
