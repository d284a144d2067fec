#!/usr/bin/python3.11
"""How often serve is exactly right on a straggler job started after it (issue 18, point 9).

Each run starts `eacgm serve` on a fresh cgroup, then (once it serves) the simulated 4-rank NCCL
job in that cgroup, not held back: rank 2 is slowed by SLOW_MS from step SLOW_FROM on. A run is
exact when serve counted every all-reduce the ranks made (their own count) and its /anomalies
list holds exactly one NCCL verdict: a straggler naming rank 2 and its pid. Prints one line per
run and the tally; the exit code is 0 whatever the tally (it is a measurement, not a test).

    sudo bench/serve_straggler.py [-n RUNS] [--build build] [--steps 120] [--slow-ms 40]
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from eacgm_testlib import cgroup2_root  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def metric(text, name, **labels):
    """The value of one sample of `name` whose labels include `labels`, or None."""
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if all(have.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return None


def one_run(args, log_dir):
    cg = os.path.join(cgroup2_root() or sys.exit("serve_straggler: no cgroup2 mount"),
                      f"eacgm-bench-{uuid.uuid4().hex[:8]}")
    os.mkdir(cg)
    port = free_port()
    log = open(os.path.join(log_dir, f"serve-{port}.log"), "w+")
    serve = subprocess.Popen([os.path.join(args.build, "eacgm"), "serve", "--listen",
                              f"127.0.0.1:{port}", "--cgroup", cg],
                             stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 30
        while True:
            log.seek(0)
            if "eacgm: serving" in log.read():
                break
            if serve.poll() is not None or time.time() > deadline:
                return False, "serve did not start"
            time.sleep(0.05)
        env = dict(os.environ, SIMGPU_RULES="")
        job = subprocess.Popen(
            ["sh", "-c", f'echo $$ > {cg}/cgroup.procs; exec "$0" "$@"',
             os.path.join(args.build, "simgpu/bin/simnccl_job"), "--ranks", "4", "--steps",
             str(args.steps), "--slow-rank", "2", "--slow-ms", str(args.slow_ms),
             "--slow-from-step", str(args.slow_from)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        out, _ = job.communicate(timeout=300)
        if job.returncode != 0:
            return False, f"job failed: {out[-300:]}"
        ranks = {}
        for line in out.splitlines():
            m = re.match(r"^simnccl_job rank=(\d+) (.*)$", line)
            if m:
                ranks[int(m.group(1))] = dict(re.findall(r"(\w+)=(\S+)", m.group(2)))
        want = sum(int(r.get("ncclAllReduce", 0)) for r in ranks.values())
        # serve reads the last events and judges within a few scans.
        deadline = time.time() + 10
        while True:
            counted = metric(http_get(url + "/metrics"), "eacgm_calls_total", layer="nccl",
                             api="ncclAllReduce")
            listed = [a for a in json.loads(http_get(url + "/anomalies"))["anomalies"]
                      if a["layer"] == "nccl"]
            if (counted == want and listed) or time.time() > deadline:
                break
            time.sleep(0.5)
        verdicts = [(a["kind"], a.get("rank"), a.get("pid")) for a in listed]
        slow_pid = int(ranks[2]["pid"]) if 2 in ranks else None
        exact = counted == want and verdicts == [("straggler", 2, slow_pid)]
        return exact, f"all-reduces {counted}/{want}, verdicts {verdicts} (rank 2 pid {slow_pid})"
    finally:
        serve.send_signal(signal.SIGINT)
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
        log.close()
        try:
            os.rmdir(cg)
        except OSError:
            pass


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", "--runs", type=int, default=10)
    p.add_argument("--build", default="build")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--slow-ms", type=int, default=40)
    p.add_argument("--slow-from", type=int, default=60)
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("serve_straggler: run as root (serve loads BPF programs)")
    exact = 0
    with tempfile.TemporaryDirectory() as log_dir:
        for i in range(args.runs):
            ok, what = one_run(args, log_dir)
            exact += ok
            print(f"run {i + 1}: {'exact' if ok else 'WRONG'}: {what}", flush=True)
    print(f"serve_straggler: {exact} of {args.runs} runs exact")


if __name__ == "__main__":
    main()
