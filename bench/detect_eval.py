#!/usr/bin/python3.11
"""Labelled evaluation of eacgm's anomaly detectors (docs/ANALYSIS.md, "Evaluation").

Records simulated jobs under `eacgm record`, healthy and with faults injected at a known moment
and entity, at several magnitudes, then scores every detector against that ground truth: the
live verdicts (summary.json, each timed when `record` printed it), the offline ones (`eacgm
analyze`), and two simple baselines computed here from events.sqlite (a 3-sigma rule and static
thresholds) on the same 1 s windows and warm-up as eacgm's window detectors.

  sudo /usr/bin/python3.11 bench/detect_eval.py --build build [--repeat 2] [--healthy-minutes M]
       [--quick] [--classes healthy,latency,stall,...] [--json out.json] [--keep DIR]
  /usr/bin/python3.11 bench/detect_eval.py --rescore out.json    # score saved runs again

Jobs (paced to ~4.5 ms steps; a fault starts about 13 s in, after the setup second and the 10
warm-up windows of eacgm's window detectors, and the run goes on for ~6 s after it):
  simtrain   2 ranks on the simulated CUDA runtime (--layers cuda)
  simnccl    simnccl_job, 4 ranks on the simulated CUDA runtime and NCCL (--layers cuda,nccl)
  gpu        simtrain with the simulated NVML as the gpu layer's library (--layers cuda,gpu)
  os         os_events making MAP_POPULATE mappings at a background rate (--layers os)
  python     /usr/bin/python3.11, a loop of a data-loader callback and a train step that calls
             the simulated CUDA runtime through ctypes (--layers cuda,python)
  real       the real workloads of the test suite (tests/workloads/, Debian's python3-torch):
             a CNN from a DataLoader with 2 workers, an MLP with 4 persistent workers and one
             without workers, a 2-rank gloo job under its launcher, threads, asyncio, a
             bash/subprocess chain, heavy imports (--layers torch,python,os)

Fault classes (magnitudes; the faulty entity):
  latency    one API of one rank 3x / 10x / 100x slower inside the runtime (that rank)
  stall      host work per step +3 / +6 / +12 ms on every rank, no call slower (both ranks)
  leak       64 KiB / 256 KiB / 1 MiB of device memory never freed per step, from the start
  late_leak  256 KiB / 1 MiB / 4 MiB per step, from the onset step (both ranks)
  slow_rank  one NCCL rank sleeps 2 / 5 / 20 ms before each collective (that rank)
  hang       one rank never enters a collective (that rank), or one rank blocks inside it so
             that every rank is stuck in it (every rank)
  throttle   NVML clock-event reasons set on one device for 3 s / 5 s / the rest of the run
             (that device)
  mmap_storm MAP_POPULATE mappings go from 12/s to 150 / 300 / 1000 per s (that process)
  py_stall   the data-loader callback sleeps 150 / 300 / 600 ms every 50 iterations (the process)
  real_slow  one 400 ms stall in a real workload, each where it strikes (the process): a slow
             function in the training loop, a slow `__getitem__` in a DataLoader worker, a
             blocking read, a gloo rank late to its collective, a slow consumer thread
  healthy    each job without a fault; --healthy-minutes adds longer healthy runs

Scoring: docs/ANALYSIS.md.
"""
import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

# Steps are paced so that the fault starts ~13 s in, after eacgm's setup second and 10 warm-up
# windows even on an idle machine, and every run then goes on for AFTER_S of faulty running.
STEP_S, STEP_US, ONSET_STEP = 0.0043, 4000, 3001  # simtrain: a traced step takes ~4.3 ms
NCCL_STEP_S, NCCL_STEP_US, NCCL_ONSET_STEP = 0.0045, 3500, 3201  # simnccl_job: 4 ranks' barriers
PY_STEP_S, PY_ONSET, PY_EVERY = 0.0045, 3000, 50  # the Python job's iterations
AFTER_S = 6.0
OS_ONSET_S = NVML_ONSET_S = 13  # os_events and the simulated NVML count time, not steps
TOLERANCE_NS = 200_000_000  # slack for "after the onset": sampling and clock reads
WINDOW_NS = 1_000_000_000
SETUP_WINDOWS, WARMUP_WINDOWS = 1, 10  # eacgm's window detectors: setup second, 10 warm-up windows
HANG_RECORD_S = 24  # a hung job never ends: stopped this long after it started

# What each eacgm detector is meant to find; anything else it reports is a false positive.
CLASS_DETECTOR = {"latency": "latency", "stall": "throughput", "leak": "leak", "late_leak": "leak",
                  "slow_rank": "straggler", "hang": "hang", "throttle": "throttle",
                  "mmap_storm": "mmap_storm", "py_stall": "slow_call", "real_slow": "slow_call"}
# Detectors scored on each class besides the class's own: where the fault changes what they see.
# The GMM and the baselines see CUDA/NCCL calls only: not NVML readings, not mmap rates.
SECONDARY = {
    "latency": ["gmm", "3sigma", "static"],
    "stall": ["gmm", "3sigma", "static"],
    "leak": ["gmm"],
    "late_leak": ["gmm"],
    "slow_rank": ["latency", "throughput", "gmm", "3sigma", "static"],
    "hang": ["throughput", "gmm", "3sigma", "static"],
    "throttle": [],
    "mmap_storm": [],
    "py_stall": ["throughput", "gmm", "3sigma", "static"],
    "real_slow": [],  # one call in a run of seconds: shorter than any window detector's warm-up
}
CLASSES = list(CLASS_DETECTOR)
LIVE_KINDS = ["latency", "throughput", "gmm", "leak", "straggler", "hang", "throttle",
              "mmap_storm", "slow_call"]
OFFLINE_KINDS = ["latency", "throughput", "gmm", "leak"]
BASELINES = ["3sigma", "static"]

PY_JOB = textwrap.dedent("""\
    import ctypes, sys, time

    lib = ctypes.CDLL(sys.argv[1])
    steps, stall_from, stall_every, stall_ms = (int(a) for a in sys.argv[2:6])

    class Dim3(ctypes.Structure):
        _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]

    lib.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p,
                                     ctypes.c_size_t, ctypes.c_void_p]
    arg = ctypes.c_int(0)
    args = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(arg), ctypes.c_void_p))

    def load_batch(i):
        # The data loader: in a faulty run it blocks from a known iteration on.
        if stall_ms and i >= stall_from and (i - stall_from) % stall_every == 0:
            if i == stall_from:
                print("stall_start_ns", time.monotonic_ns(), flush=True)
            time.sleep(stall_ms / 1000)
        return i

    def train_step(batch):
        ptr = ctypes.c_void_p()
        lib.cudaMalloc(ctypes.byref(ptr), 1 << 20)
        for _ in range(3):
            lib.cudaLaunchKernel(0x1234, Dim3(256, 1, 1), Dim3(256, 1, 1), args, 0, None)
        lib.cudaStreamSynchronize(None)
        lib.cudaFree(ptr)
        time.sleep(0.004)  # the step's host work

    for i in range(steps):
        train_step(load_batch(i))
    print("done", steps)
    """)


WORKLOADS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "workloads")
# The real workloads: name -> (script and arguments, the fault it takes in a real_slow run).
REAL = {
    "cnn2": (["train_cnn.py", "--workers", "2"], "slow_main"),
    "mlp4p": (["train_cnn.py", "--workers", "4", "--persistent", "--model", "mlp"], "slow_worker"),
    "mlp0": (["train_cnn.py", "--workers", "0", "--model", "mlp"], "blocking_read"),
    "gloo": (["gloo_allreduce.py", "--launch", "2"], None),  # --late-rank 1
    "threads": (["pipelines.py", "--shape", "threads"], "slow_consumer"),
    "asyncio": (["pipelines.py", "--shape", "asyncio"], None),
    "chain": (["pipelines.py", "--shape", "chain"], None),
    "imports": (["pipelines.py", "--shape", "imports"], None),
}
REAL_FAULTY = ["cnn2", "mlp4p", "mlp0", "gloo", "threads"]


class Paths:
    def __init__(self, build, work):
        self.eacgm = os.path.abspath(os.path.join(build, "eacgm"))
        self.simtrain = os.path.abspath(os.path.join(build, "simgpu/bin/simtrain"))
        self.simnccl = os.path.abspath(os.path.join(build, "simgpu/bin/simnccl_job"))
        self.cudart = os.path.abspath(os.path.join(build, "simgpu/lib/libcudart.so.13"))
        self.nvml = os.path.abspath(os.path.join(build, "simgpu/lib/libnvidia-ml.so.1"))
        self.os_events = os.path.abspath(os.path.join(build, "tests/os_events"))
        self.py_job = os.path.join(work, "pyjob.py")
        with open(self.py_job, "w") as f:
            f.write(PY_JOB)
        for p in (self.eacgm, self.simtrain, self.simnccl, self.cudart, self.nvml, self.os_events):
            if not os.path.exists(p):
                sys.exit(f"detect_eval: {p} not found: build first (cmake --build {build})")


# ------------------------------------------------------------------------------------------------
# Scenarios: (class, magnitude label, job, parameters). `fault` None is a healthy run.

def scenarios(classes, repeat, quick):
    """The runs, in an order that mixes classes (load drifts over a long run)."""
    pick = (lambda xs: [xs[(len(xs) - 1) // 2]]) if quick else (lambda xs: xs)
    apis = ["cudaStreamSynchronize", "cudaLaunchKernel", "cudaMemcpyAsync"]
    default_us = {"cudaStreamSynchronize": 50, "cudaLaunchKernel": 3, "cudaMemcpyAsync": 3}
    out = []
    for r in range(1 if quick else repeat):
        if "healthy" in classes:
            for job in ["simtrain", "simtrain", "simnccl", "gpu", "os", "python"]:
                out.append(dict(fault=None, mag="-", job=job))
            if "real_slow" in classes:  # the real workloads are slow to start: only when asked
                for workload in REAL:
                    out.append(dict(fault=None, mag=workload, job="real", workload=workload))
        if "latency" in classes:
            for i, x in enumerate(pick([3, 10, 100])):
                api = apis[(i + r) % 3]
                out.append(dict(fault="latency", mag=f"{x}x {api}", job="simtrain", api=api,
                                rank=(i + r) % 2, latency_us=x * default_us[api]))
        if "stall" in classes:
            for ms in pick([3, 6, 12]):
                out.append(dict(fault="stall", mag=f"+{ms} ms/step", job="simtrain", stall_ms=ms))
        if "leak" in classes:
            for kib in pick([64, 256, 1024]):
                out.append(dict(fault="leak", mag=f"{kib} KiB/step", job="simtrain",
                                leak=kib << 10))
        if "late_leak" in classes:
            for kib in pick([256, 1024, 4096]):
                out.append(dict(fault="late_leak", mag=f"{kib} KiB/step", job="simtrain",
                                leak=kib << 10))
        if "slow_rank" in classes:
            for i, ms in enumerate(pick([2, 5, 20])):
                out.append(dict(fault="slow_rank", mag=f"{ms} ms", job="simnccl", slow_ms=ms,
                                rank=(i + r) % 4))
        if "hang" in classes:
            for i, how in enumerate(pick(["missing rank", "inside collective"])):
                out.append(dict(fault="hang", mag=how, job="simnccl", how=how,
                                rank=(i + 2 * r) % 4))
        if "throttle" in classes:
            for i, (reason, secs) in enumerate(pick([("thermal", 3), ("hw_thermal", 5),
                                                     ("power", None)])):
                label = f"{reason} {secs} s" if secs else f"{reason} to the end"
                out.append(dict(fault="throttle", mag=label, job="gpu", reason=reason, secs=secs,
                                device=(i + r) % 2))
        if "mmap_storm" in classes:
            for rate in pick([150, 300, 1000]):
                out.append(dict(fault="mmap_storm", mag=f"{rate}/s", job="os", rate=rate))
        if "py_stall" in classes:
            for ms in pick([150, 300, 600]):
                out.append(dict(fault="py_stall", mag=f"{ms} ms", job="python", stall_ms=ms))
        if "real_slow" in classes:
            for workload in pick(REAL_FAULTY):
                out.append(dict(fault="real_slow", mag=workload, job="real", workload=workload))
    return out


def steps_for(onset, step_s, extra_s=0.0, seconds=None):
    """Steps of a run: to AFTER_S past the onset step, where a faulty step takes extra_s more;
    `seconds`: a healthy run of about that length instead."""
    if seconds is not None:
        return int(seconds / step_s)
    return onset + int(AFTER_S / (step_s + extra_s))


def job_command(paths, sc, seconds=None):
    """(command, layers, extra record flags, env additions) for one scenario. `seconds`: a
    longer healthy run."""
    extra = 0.0
    if sc["fault"] == "stall":
        extra = sc["stall_ms"] / 1e3
    elif sc["fault"] == "latency":
        per_step = 5 if sc["api"] == "cudaLaunchKernel" else 1
        extra = per_step * sc["latency_us"] / 1e6
    steps = steps_for(ONSET_STEP, STEP_S, extra, seconds)
    env, flags = {}, []
    job, fault = sc["job"], sc["fault"]
    if job in ("simtrain", "gpu"):
        cmd = [paths.simtrain, "--ranks", "2", "--steps", str(steps), "--step-us", str(STEP_US)]
        layers = "cuda"
        if fault == "latency":
            start = 5 * (ONSET_STEP - 1) + 1 if sc["api"] == "cudaLaunchKernel" else ONSET_STEP
            env["SIMGPU_RULES"] = (f"rank={sc['rank']} latency {sc['api']} {sc['latency_us']}us "
                                   f"from={start}")
        elif fault == "stall":
            cmd += ["--stall-from-step", str(ONSET_STEP), "--stall-ms", str(sc["stall_ms"])]
        elif fault == "leak":
            cmd += ["--leak-bytes", str(sc["leak"])]
        elif fault == "late_leak":
            cmd += ["--leak-bytes", str(sc["leak"]), "--leak-from-step", str(ONSET_STEP)]
        if job == "gpu":
            layers = "cuda,gpu"
            flags = ["--nvml-lib", paths.nvml]
            env["SIMGPU_DEVICE_COUNT"] = "2"
            rules = []
            if fault == "throttle":
                at = NVML_ONSET_S
                d = sc["device"]
                rule = f"nvml device={d} throttle {sc['reason']} at={at}s"
                if sc["secs"]:
                    rule += f" for={sc['secs']}s"
                rules.append(rule)
                if sc["reason"] != "power":
                    rules.append(f"nvml device={d} set temperature 91 at={at}s")
            env["SIMGPU_RULES"] = "; ".join(rules)
    elif job == "simnccl":
        # The slow rank sleeps before 1.3 collectives a step (an allreduce, a ring exchange every
        # 5th step, a broadcast every 10th), and every rank waits for it.
        extra = 1.3 * sc["slow_ms"] / 1e3 if fault == "slow_rank" else 0.0
        steps = steps_for(NCCL_ONSET_STEP, NCCL_STEP_S, extra, seconds)
        cmd = [paths.simnccl, "--ranks", "4", "--steps", str(steps), "--step-us",
               str(NCCL_STEP_US), "--bytes", "1048576"]
        layers = "cuda,nccl"
        if fault == "slow_rank":
            cmd += ["--slow-rank", str(sc["rank"]), "--slow-ms", str(sc["slow_ms"]),
                    "--slow-from-step", str(NCCL_ONSET_STEP)]
        elif fault == "hang" and sc["how"] == "missing rank":
            cmd += ["--hang-rank", str(sc["rank"]), "--hang-step", str(NCCL_ONSET_STEP)]
        elif fault == "hang":
            # Allreduce number K of a rank is the one of step K.
            env["SIMGPU_RULES"] = f"rank={sc['rank']} hang ncclAllReduce nth={NCCL_ONSET_STEP}"
    elif job == "os":
        layers = "os"
        # 12 MAP_POPULATE mappings a second is normal (seed 000); the storm follows.
        background_s = OS_ONSET_S if seconds is None else int(seconds)
        cmd = [paths.os_events, "populate", str(12 * background_s), str(1000 * background_s)]
        after = int(AFTER_S)
        if fault == "mmap_storm":
            cmd += [str(sc["rate"] * after), str(1000 * after)]
        elif seconds is None:
            cmd += [str(12 * after), str(1000 * after)]  # as long a run at the normal rate
    elif job == "real":
        args, fault_flag = REAL[sc.get("workload", "cnn2")]
        cmd = ["/usr/bin/python3.11", os.path.join(WORKLOADS, args[0]), *args[1:]]
        if seconds is not None and args[0] == "train_cnn.py":
            # A longer healthy run: epochs until then, each as a real job's, with a validation
            # pass and a checkpoint after its training steps.
            cmd += ["--seconds", str(seconds), "--batches", "150", "--eval-batches", "40",
                    "--checkpoint", os.path.join(tempfile.gettempdir(),
                                                 f"detect_eval_{os.getpid()}.ckpt")]
        if fault == "real_slow":
            cmd += ["--late-rank", "1"] if fault_flag is None else ["--fault", fault_flag]
        layers = "torch,python,os"
    elif job == "python":
        stall = sc.get("stall_ms", 0) if fault == "py_stall" else 0
        py_steps = steps_for(PY_ONSET, PY_STEP_S, stall / 1e3 / PY_EVERY, seconds)
        cmd = ["/usr/bin/python3.11", paths.py_job, paths.cudart, str(py_steps), str(PY_ONSET),
               str(PY_EVERY), str(stall)]
        layers = "cuda,python"
    else:
        raise ValueError(job)
    return cmd, layers, flags, env


# ------------------------------------------------------------------------------------------------
# Recording

def record(paths, out, cmd, layers, flags, env_extra, kill_after_s=None):
    """Runs `eacgm record`; returns (summary, stderr lines, stdout lines), each line with the
    CLOCK_MONOTONIC ns at which it arrived (the clock of events.sqlite)."""
    env = dict(os.environ)
    for var in ("SIMGPU_SCRIPT", "SIMGPU_RULES", "RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(var, None)
    env.update(env_extra)
    argv = [paths.eacgm, "record", "-q", "-o", out, "--layers", layers, *flags, "--", *cmd]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = {"out": [], "err": []}

    def reader(stream, key):
        for line in stream:
            lines[key].append((time.monotonic_ns(), line.rstrip("\n")))

    threads = [threading.Thread(target=reader, args=(p.stdout, "out")),
               threading.Thread(target=reader, args=(p.stderr, "err"))]
    for t in threads:
        t.start()
    try:
        p.wait(timeout=kill_after_s)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)  # record stops the job and writes the session
    p.wait(timeout=300)
    for t in threads:
        t.join()
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(out, "record.log"), "w") as f:
        f.writelines(f"{ts} {line}\n" for ts, line in lines["err"])
    return summary, lines["err"], lines["out"]


def reported_at(summary, err_lines):
    """When each summary anomaly was printed live (monotonic ns), in the summary's order."""
    printed = [ts for ts, line in err_lines if line.startswith("eacgm: anomaly [")]
    if len(printed) != len(summary["anomalies"]):
        return [None] * len(summary["anomalies"])
    return printed


class Db:
    def __init__(self, out):
        self.db = sqlite3.connect(os.path.join(out, "events.sqlite"))
        meta = dict(self.db.execute("SELECT key, value FROM meta"))
        self.start_ns = int(meta["start_ns"])
        self.end_ns = int(meta.get("end_ns") or 0)

    def nth_call_start(self, pid, name, n):
        row = self.db.execute("SELECT start_ns FROM calls WHERE pid=? AND name=? ORDER BY start_ns "
                              "LIMIT 1 OFFSET ?", (pid, name, n - 1)).fetchone()
        return row[0] if row else None

    def nth_call_end(self, pid, name, n):
        row = self.db.execute("SELECT start_ns + duration_ns FROM calls WHERE pid=? AND name=? "
                              "ORDER BY start_ns LIMIT 1 OFFSET ?", (pid, name, n - 1)).fetchone()
        return row[0] if row else None

    def first_call(self, pid):
        return self.db.execute("SELECT MIN(start_ns) FROM calls WHERE pid=?", (pid,)).fetchone()[0]

    def close(self):
        self.db.close()


def ground_truth(sc, summary, db, out_lines, nvml_log):
    """{entity: onset monotonic ns} for a run's faulty entities; entities are ("pid", P) or
    ("device", D)."""
    fault = sc["fault"]
    if fault is None:
        return {}
    ranks = {p["rank"]: p["pid"] for p in summary["processes"] if p["rank"] is not None}
    if fault in ("latency", "stall", "late_leak"):
        # The onset step's one cudaMemcpyAsync: the first call of the step the fault starts in.
        pids = [ranks[sc["rank"]]] if fault == "latency" else list(ranks.values())
        return {("pid", p): db.nth_call_start(p, "cudaMemcpyAsync", ONSET_STEP) for p in pids}
    if fault == "leak":
        return {("pid", p): db.first_call(p) for p in ranks.values()}
    if fault in ("slow_rank", "hang"):
        # The rank's backward launch of the onset step: the sleep (or the hang) comes next.
        onset = db.nth_call_end(ranks[sc["rank"]], "cudaLaunchKernel",
                                3 * (NCCL_ONSET_STEP - 1) + 2)
        if fault == "hang" and sc["how"] == "inside collective":
            return {("pid", p): onset for p in ranks.values()}
        return {("pid", ranks[sc["rank"]]): onset}
    if fault == "throttle":
        with open(nvml_log) as f:
            t0 = next(int(l.split("t0_ns=")[1]) for l in f if l.startswith("init "))
        return {("device", sc["device"]): t0 + NVML_ONSET_S * 1_000_000_000}
    if fault == "mmap_storm":
        start = next(int(l.split("start_ns=")[1].split()[0]) for _, l in out_lines
                     if l.startswith("phase 2 "))
        (pid,) = [p["pid"] for p in summary["processes"]]
        return {("pid", pid): start}
    if fault == "real_slow":
        # The workload's own line (tests/workloads/fault_mark.py), from the process it struck.
        first = next(l for _, l in out_lines if l.startswith("fault_start_ns="))
        fields = dict(f.split("=") for f in first.split())
        return {("pid", int(fields["pid"])): int(fields["fault_start_ns"])}
    if fault == "py_stall":
        start = next(int(l.split()[1]) for _, l in out_lines if l.startswith("stall_start_ns"))
        pids = [p["pid"] for p in summary["processes"] if "python" in (p.get("comm") or "")]
        return {("pid", pids[0]): start}
    raise ValueError(fault)


# ------------------------------------------------------------------------------------------------
# Verdicts: every alarm as {kind, entity, at_ns (when it was known), evidence_ns (the time its
# evidence ends, for "after the onset")}

def entity_of(a):
    if a["kind"] == "throttle":
        return ("device", a["evidence"].get("device"))
    return ("pid", a.get("pid"))


def eacgm_alarms(anomalies, start_ns, printed=None):
    out = []
    for i, a in enumerate(anomalies):
        span = a.get("evidence", {}).get("window_s")
        window_end = None
        if isinstance(span, list):
            window_end = start_ns + int(span[1] * 1e9)
        elif isinstance(span, (int, float)) and a["kind"] == "leak":
            window_end = start_ns + int((a["t_s"] + span) * 1e9)
        at = printed[i] if printed and printed[i] is not None else window_end
        if at is None:
            at = start_ns + int(a["t_s"] * 1e9)
        evidence = window_end if window_end is not None else at
        if a["kind"] == "slow_call":  # one call: the fault's only if it began after the onset
            evidence = start_ns + int(a["t_s"] * 1e9)
        entities = [entity_of(a)]
        if a["kind"] == "hang" and a.get("evidence", {}).get("inside_collective"):
            # Every rank is stuck inside the collective: the one anomaly names each of them.
            entities = [("pid", p) for p in a["evidence"].get("waiting_pids", [])] or entities
        for entity in entities:
            out.append({"kind": a["kind"], "entity": entity, "at_ns": at,
                        "evidence_ns": evidence,
                        "rank": a.get("rank"), "what": a.get("evidence", {}).get("api")})
    return out


def baseline_alarms(db, rate_floor):
    """The 3-sigma rule and static thresholds on eacgm's windows: 1 s per process from its first
    call, the first second skipped, the next 10 the warm-up, windows the process did not live
    through dropped. An alarm is an episode: consecutive anomalous windows of one rule on one
    (process, API); it is known at the end of its first window."""
    ends = dict(db.db.execute("SELECT pid, end_ns FROM processes"))
    calls = {}
    for pid, name, start, dur in db.db.execute(
            "SELECT pid, name, start_ns, duration_ns FROM calls ORDER BY start_ns"):
        calls.setdefault(pid, []).append((name, start, dur))
    alarms = []
    for pid, rows in calls.items():
        origin = rows[0][1]
        end = ends.get(pid) or db.end_ns
        n = int((end - origin) // WINDOW_NS)  # whole windows the process lived through
        if n <= SETUP_WINDOWS + WARMUP_WINDOWS:
            continue
        per = [dict() for _ in range(n)]  # window -> api -> list of durations
        for name, start, dur in rows:
            w = (start - origin) // WINDOW_NS
            if w < n:
                per[w].setdefault(name, []).append(dur)
        warm = per[SETUP_WINDOWS:SETUP_WINDOWS + WARMUP_WINDOWS]
        apis = sorted({a for w in warm for a in w})
        anomalous = {}  # (rule, api) -> [window indexes]
        for api in apis:
            means = [statistics.fmean(w[api]) for w in warm if api in w]
            counts = [len(w.get(api, [])) for w in warm]
            durs = sorted(d for w in warm for d in w.get(api, []))
            lat = (statistics.fmean(means), statistics.pstdev(means)) if len(means) >= 3 else None
            rate = (statistics.fmean(counts), statistics.pstdev(counts))
            median = durs[len(durs) // 2] if len(durs) >= 5 else None
            for i in range(SETUP_WINDOWS + WARMUP_WINDOWS, n):
                ds = per[i].get(api, [])
                if lat and ds and statistics.fmean(ds) > lat[0] + 3 * lat[1]:
                    anomalous.setdefault(("3sigma", "latency", api), []).append(i)
                if len(ds) < rate[0] - 3 * rate[1]:
                    anomalous.setdefault(("3sigma", "rate", api), []).append(i)
                if median is not None and ds and max(ds) > 10 * median:
                    anomalous.setdefault(("static", "10x median", api), []).append(i)
        for i in range(SETUP_WINDOWS + WARMUP_WINDOWS, n):
            if sum(len(v) for v in per[i].values()) < rate_floor:
                anomalous.setdefault(("static", "rate floor", "*"), []).append(i)
        for (kind, rule, api), windows in anomalous.items():
            prev = None
            for i in windows:
                if prev is None or i != prev + 1:
                    at = origin + (i + 1) * WINDOW_NS
                    alarms.append({"kind": kind, "entity": ("pid", pid), "at_ns": at,
                                   "evidence_ns": at, "rule": rule, "what": api})
                prev = i
    return alarms


# ------------------------------------------------------------------------------------------------
# Scoring

def score(runs, source, kind, cls=None):
    """TP, FP, found/faulty, precision, recall, F1 and delays of one detector kind from one
    verdict source. With `cls`: over that class's runs and the healthy runs of its job;
    without: over every run, where an alarm is a TP only in a run of a class it applies to."""
    tp = fp = found = faulty = runs_faulty = runs_found = 0
    delays, by_mag = [], {}
    for r in runs:
        if cls is not None and r["fault"] not in (cls, None):
            continue
        if cls is not None and r["fault"] is None and r["job"] != job_of(cls):
            continue
        applies = r["fault"] is not None and (CLASS_DETECTOR[r["fault"]] == kind
                                              or kind in SECONDARY[r["fault"]])
        truth = {tuple(k): v for k, v in r["truth"]}
        if applies:
            faulty += len(truth)
            runs_faulty += 1
        first = {}
        onset = min(truth.values()) if truth else None
        # Run level: the fault was noticed at all, whichever entity the alarm named.
        runs_found += applies and any(a["kind"] == kind and a["evidence_ns"] >= onset - TOLERANCE_NS
                                      for a in r["alarms"][source])
        for a in r["alarms"][source]:
            if a["kind"] != kind:
                continue
            e = tuple(a["entity"])
            if applies and e in truth and a["evidence_ns"] >= truth[e] - TOLERANCE_NS:
                tp += 1
                first.setdefault(e, a["at_ns"] - truth[e])
            else:
                fp += 1
        found += len(first)
        delays += [max(0, d) / 1e9 for d in first.values()]
        if applies:
            m = by_mag.setdefault(r["mag"], [0, 0])
            m[0] += len(first)
            m[1] += len(truth)
    precision = tp / (tp + fp) if tp + fp else None
    recall = found / faulty if faulty else None
    f1 = (2 * precision * recall / (precision + recall)
          if precision is not None and recall is not None and precision + recall > 0 else
          (0.0 if recall is not None else None))
    delays.sort()
    return {"tp": tp, "fp": fp, "found": found, "faulty": faulty, "runs_found": runs_found,
            "runs_faulty": runs_faulty, "precision": precision,
            "recall": recall, "f1": f1,
            "median_delay_s": delays[len(delays) // 2] if delays else None,
            "max_delay_s": delays[-1] if delays else None, "by_magnitude": by_mag}


def job_of(cls):
    return {"latency": "simtrain", "stall": "simtrain", "leak": "simtrain",
            "late_leak": "simtrain", "slow_rank": "simnccl", "hang": "simnccl", "throttle": "gpu",
            "mmap_storm": "os", "py_stall": "python", "real_slow": "real"}[cls]


def false_alarms(runs):
    """Every alarm in a healthy run is a false alarm: per source and kind, and the healthy time."""
    healthy = [r for r in runs if r["fault"] is None]
    seconds = sum(r["duration_s"] for r in healthy)
    out = {"healthy_s": seconds, "runs": len(healthy), "by_job": {}, "alarms": {}}
    for r in healthy:
        j = out["by_job"].setdefault(r["job"], {"runs": 0, "seconds": 0.0})
        j["runs"] += 1
        j["seconds"] += r["duration_s"]
    for source in ("live", "offline", "baselines"):
        counts = {}
        for r in healthy:
            for a in r["alarms"][source]:
                counts[a["kind"]] = counts.get(a["kind"], 0) + 1
        out["alarms"][source] = counts
    return out


def fmt(v, pattern="{:.2f}"):
    return "-" if v is None else pattern.format(v)


def print_tables(runs, fa):
    print("\nPer class (the class's runs and the healthy runs of its job; entity-exact):")
    print(f"{'class':11s} {'detector':11s} {'source':8s} {'TP':>4s} {'FP':>4s} {'found':>7s} "
          f"{'prec':>5s} {'recall':>6s} {'F1':>5s} {'delay med/max s':>16s} {'runs':>7s}  "
          "recall by magnitude")
    tables = {}
    present = sorted({r["fault"] for r in runs if r["fault"]}, key=CLASSES.index)
    for cls in present:
        for kind in [CLASS_DETECTOR[cls]] + SECONDARY[cls]:
            source = "baselines" if kind in BASELINES else "live"
            s = score(runs, source, kind, cls)
            tables.setdefault(cls, {})[kind] = s
            mags = ", ".join(f"{m}: {a}/{b}" for m, (a, b) in s["by_magnitude"].items())
            print(f"{cls:11s} {kind:11s} {source:8s} {s['tp']:4d} {s['fp']:4d} "
                  f"{s['found']:3d}/{s['faulty']:<3d} {fmt(s['precision']):>5s} "
                  f"{fmt(s['recall']):>6s} {fmt(s['f1']):>5s} "
                  f"{fmt(s['median_delay_s'], '{:.1f}'):>7s}/{fmt(s['max_delay_s'], '{:.1f}'):<7s}"
                  f" {s['runs_found']:3d}/{s['runs_faulty']:<3d}  {mags}")
    print("\nPer detector over all runs (an alarm counts as TP only in a class it applies to):")
    overall = {}
    for source, kinds in (("live", LIVE_KINDS), ("offline", OFFLINE_KINDS),
                          ("baselines", BASELINES)):
        for kind in kinds:
            s = score(runs, source, kind)
            overall[f"{source}:{kind}"] = s
            print(f"{source:9s} {kind:11s} TP {s['tp']:4d} FP {s['fp']:4d}  found "
                  f"{s['found']:3d}/{s['faulty']:<3d} P {fmt(s['precision'])} "
                  f"R {fmt(s['recall'])} F1 {fmt(s['f1'])}")
    # `analyze` replays a session through the live code: its verdicts should be the live ones
    # (the leak detector's checks may fall a few ms apart: it judges when polled).
    def verdicts(alarms):
        return sorted((a["kind"], tuple(a["entity"]), a["evidence_ns"]) for a in alarms
                      if a["kind"] in OFFLINE_KINDS)

    def same(x, y):
        return len(x) == len(y) and all(a[:2] == b[:2] and abs(a[2] - b[2]) < TOLERANCE_NS
                                        for a, b in zip(x, y))

    differ = [r["name"] for r in runs if "cuda" in r["layers"]
              and not same(verdicts(r["alarms"]["live"]), verdicts(r["alarms"]["offline"]))]
    print(f"\nOffline (eacgm analyze) verdicts differ from the live ones in {len(differ)} runs"
          + (f": {', '.join(differ)}" if differ else ""))
    hours = fa["healthy_s"] / 3600
    print(f"\nHealthy running: {fa['healthy_s'] / 60:.1f} min in {fa['runs']} runs "
          + ", ".join(f"{j} {v['seconds'] / 60:.1f} min" for j, v in fa["by_job"].items()))
    for source, counts in fa["alarms"].items():
        total = sum(counts.values())
        rate = fmt(total / hours if hours else None, "{:.1f}")
        print(f"  {source:9s} false alarms: {total} ({rate} per hour) {counts}")
    return tables, overall


# ------------------------------------------------------------------------------------------------

def run_one(paths, work, i, sc, seconds, rate_floor):
    name = f"run{i:03d}-{sc['fault'] or 'healthy'}-{sc['job']}"
    out = os.path.join(work, name)
    cmd, layers, flags, env = job_command(paths, sc, seconds)
    nvml_log = None
    if sc["job"] == "gpu":
        nvml_log = os.path.join(work, name + ".nvml.log")
        env["SIMGPU_NVML_LOG"] = nvml_log
    kill = HANG_RECORD_S if sc["fault"] == "hang" else None
    t0 = time.time()
    summary, err, out_lines = record(paths, out, cmd, layers, flags, env, kill)
    if kill is None and summary.get("exit_code") != 0:
        # A job that failed is no evidence about its fault: stop rather than score it.
        sys.exit(f"detect_eval: {name}: the job exited with {summary.get('exit_code')}: "
                 f"{' '.join(cmd)}\n" + "\n".join(line for _, line in err[-10:]))
    db = Db(out)
    truth = ground_truth(sc, summary, db, out_lines, nvml_log)
    live = eacgm_alarms(summary["anomalies"], db.start_ns, reported_at(summary, err))
    offline = []
    if "cuda" in layers:
        report = os.path.join(out, "analyze.json")
        subprocess.run([paths.eacgm, "analyze", "-q", out, "-o", report], check=True)
        with open(report) as f:
            offline = eacgm_alarms(json.load(f)["anomalies"], db.start_ns)
    base = baseline_alarms(db, rate_floor)
    db.close()
    run = {"run": i, "name": name, "fault": sc["fault"], "mag": sc["mag"], "job": sc["job"],
           "scenario": {k: v for k, v in sc.items()}, "command": cmd, "layers": layers,
           "duration_s": summary["duration_s"], "exit_code": summary.get("exit_code"),
           "dropped": summary["events"]["dropped"],
           "truth": [[list(k), v] for k, v in truth.items()],
           "onset_s": {f"{k[0]} {k[1]}": (v - db.start_ns) / 1e9 for k, v in truth.items()},
           "alarms": {"live": live, "offline": offline, "baselines": base},
           "live_anomalies": summary["anomalies"]}
    def show(alarms):
        def what(a):
            return f", {a['what']}" if a.get("what") and a["kind"] not in BASELINES else ""
        return sorted(f"{a['kind']}({a['entity'][0]} {a['entity'][1]}{what(a)}"
                      f"@{(a['at_ns'] - db.start_ns) / 1e9:.1f})" for a in alarms)
    onset = ", ".join(f"{k[0]} {k[1]} @{(v - db.start_ns) / 1e9:.1f}" for k, v in truth.items())
    print(f"run {i:3d} {sc['fault'] or 'healthy':10s} {sc['mag']:28s} {sc['job']:8s} "
          f"{time.time() - t0:5.1f} s  onset [{onset}]\n"
          f"        live {show(live)}\n"
          f"        baselines: {len(base)} alarms {show(base)[:6]}"
          f"{' ...' if len(base) > 6 else ''}",
          flush=True)
    return run


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build",
                   help="build directory (eacgm, simgpu/, tests/os_events)")
    p.add_argument("--repeat", type=int, default=2, help="times the scenario set is run")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: one magnitude per class, one repeat")
    p.add_argument("--classes", default=",".join(["healthy"] + CLASSES),
                   help="comma-separated classes (default: all): healthy," + ",".join(CLASSES))
    p.add_argument("--healthy-minutes", type=float, default=0,
                   help="also run healthy jobs (every job in turn) for this many more minutes, "
                        "for false alarms per hour")
    p.add_argument("--healthy-run-s", type=float, default=60,
                   help="length of each of those extra healthy runs (s)")
    p.add_argument("--healthy-jobs", default="simtrain,simnccl,python,gpu,os",
                   help="the jobs of those runs, in turn; `real` is the real CNN job with 2 "
                        "DataLoader workers, new each epoch (needs python3-torch)")
    p.add_argument("--rate-floor", type=float, default=100,
                   help="static baseline: fewest calls per second of a worker that is not stalled")
    p.add_argument("--json", help="write all runs and scores here")
    p.add_argument("--rescore", metavar="JSON",
                   help="record nothing: score the runs of an earlier --json file again")
    p.add_argument("--keep", help="keep the sessions in this directory")
    a = p.parse_args()
    classes = [c for c in a.classes.split(",") if c]
    unknown = set(classes) - set(CLASSES) - {"healthy"}
    if unknown:
        p.error(f"unknown classes {sorted(unknown)}; known: healthy,{','.join(CLASSES)}")
    jobs = [j for j in a.healthy_jobs.split(",") if j]
    if set(jobs) - {"simtrain", "simnccl", "python", "gpu", "os", "real"}:
        p.error(f"unknown --healthy-jobs {a.healthy_jobs}")
    if not a.rescore and ("real_slow" in classes or "real" in a.healthy_jobs) and subprocess.run(
            ["/usr/bin/python3.11", "-c", "import torch"], capture_output=True).returncode != 0:
        p.error("the real workloads (real_slow) need Debian's python3-torch for /usr/bin/python3.11;"
                " install it (scripts/install-deps.sh) or leave real_slow out of --classes")
    if a.rescore:
        with open(a.rescore) as f:
            runs = [r for r in json.load(f)["runs"] if r["fault"] in classes + [None]]
        print_tables(runs, false_alarms(runs))
        return 0
    if os.geteuid() != 0:
        p.error("needs root (eacgm record loads BPF programs)")
    work = a.keep or tempfile.mkdtemp(prefix="eacgm-eval-")
    os.makedirs(work, exist_ok=True)
    paths = Paths(a.build, work)
    started = time.time()
    runs = []
    for sc in scenarios(classes, a.repeat, a.quick):
        runs.append(run_one(paths, work, len(runs), sc, None, a.rate_floor))
    extra_s, k = 0.0, 0
    while extra_s < a.healthy_minutes * 60:
        sc = dict(fault=None, mag=f"{a.healthy_run_s:.0f} s", job=jobs[k % len(jobs)])
        run = run_one(paths, work, len(runs), sc, a.healthy_run_s, a.rate_floor)
        runs.append(run)
        extra_s += run["duration_s"]
        k += 1
    fa = false_alarms(runs)
    tables, overall = print_tables(runs, fa)
    print(f"\n{len(runs)} runs in {(time.time() - started) / 60:.1f} min; sessions in {work}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"argv": sys.argv, "runs": runs, "per_class": tables, "per_detector": overall,
                       "false_alarms": fa, "wall_s": time.time() - started}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
