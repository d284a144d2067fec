#!/bin/bash
# eacgm's probes against real GPU jobs, on a machine with an NVIDIA GPU, PyTorch, Triton and JAX,
# as root (CI has no GPU: this is run by hand, and what it showed is in docs/GPU_VALIDATION.md).
#
#   EACGM=path/to/eacgm PY=python3 OUT=dir tests/gpu/validate.sh
#
# Records, with every layer: tests/gpu/gpu_job.py --mode counted at two --n (the sessions' call
# counts must differ by exactly the difference, API by API), --mode jax likewise, --mode train
# healthy three times (interleaved with untraced runs, for the overhead), with a 400 ms stall,
# and under --overhead-budget 5%. Writes each
# session's summary.json, report and the job's output under $OUT/s, the machine's facts in
# $OUT/env.txt, and the comparison in $OUT/verdict.txt.
set -u
EACGM=${EACGM:-eacgm}
PY=${PY:-python3}
OUT=${OUT:-/tmp/eacgm-gpu-validate}
JOB=tests/gpu/gpu_job.py
LOW=100
HIGH=600
STEPS=${STEPS:-1000}
EXTRA=()
mkdir -p "$OUT/s"

{
  echo "== $(date -u) kernel $(uname -r)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  "$PY" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'
  ls -la /sys/kernel/btf/vmlinux
  [ -d /sys/kernel/tracing/events ] || mount -t tracefs nodev /sys/kernel/tracing
  mount | grep -E "tracefs|debugfs|bpf"
  find / -xdev \( -name 'libcudart.so*' -o -name 'libnccl.so*' -o -name 'libcuda.so*' \
    -o -name 'libnvidia-ml.so*' -o -name 'libcublas.so*' -o -name 'libtorch_cpu.so' \) \
    2>/dev/null | head -40
} > "$OUT/env.txt" 2>&1

record() {  # name, job arguments...
  local name=$1
  shift
  local t0
  t0=$(date +%s%N)
  timeout -s INT 150 "$EACGM" record -o "$OUT/s/$name" "${EXTRA[@]}" -- "$PY" "$JOB" "$@" \
    > "$OUT/s/$name.out" 2> "$OUT/s/$name.err"
  echo "rc=$? wall_ms=$((($(date +%s%N) - t0) / 1000000))" >> "$OUT/s/$name.err"
  cp "$OUT/s/$name/summary.json" "$OUT/s/$name.summary.json" 2> /dev/null
}

untraced() {  # name, job arguments...
  local name=$1
  shift
  timeout 150 "$PY" "$JOB" "$@" > "$OUT/s/$name.out" 2>&1
}

timeout 60 "$EACGM" record -o "$OUT/s/true" -- /bin/true > "$OUT/s/true.out" 2>&1
echo "rc=$?" >> "$OUT/s/true.out"
if [ -z "${TRAIN_ONLY:-}" ]; then  # TRAIN_ONLY=1: the training runs alone, traced alone
  record counted_low --mode counted --n $LOW
  record counted_high --mode counted --n $HIGH
  record jax_low --mode jax --n $LOW
  record jax_high --mode jax --n $HIGH
fi
# Healthy training traced and untraced, interleaved: no anomaly in any traced run, and the step
# loop's slowdown; then the 400 ms stall, found; then under --overhead-budget 5%.
for i in 1 2 3; do
  [ -n "${TRAIN_ONLY:-}" ] || untraced plain_$i --mode train --steps $STEPS
  record healthy_$i --mode train --steps $STEPS
done
record fault --mode train --steps $STEPS --fault slow_main
EXTRA=(--overhead-budget 5%)
record budget --mode train --steps $STEPS
EXTRA=()
timeout 120 "$EACGM" analyze "$OUT/s/fault" -o "$OUT/s/fault.analyze.json" \
  > "$OUT/s/fault.analyze.out" 2>&1

"$PY" - "$OUT" $((HIGH - LOW)) > "$OUT/verdict.txt" 2>&1 << 'EOF'
import glob, json, os, re, sys
out, diff = sys.argv[1], int(sys.argv[2])
def summary(name):
    try:
        with open(os.path.join(out, "s", name + ".summary.json")) as f:
            return json.load(f)
    except OSError as e:
        print(name, "no summary:", e)
        return None
def counts(s):
    c = {}
    for layer, l in (s or {}).get("layers", {}).items():
        for key in ("calls", "ops", "functions"):
            for api, st in (l.get(key) or {}).items():
                if isinstance(st, dict) and "count" in st:
                    c[f"{layer}:{api}"] = st["count"]
    return c
for pair in ("counted", "jax"):
    lo, hi = summary(pair + "_low"), summary(pair + "_high")
    clo, chi = counts(lo), counts(hi)
    print(f"== {pair}: calls in the high session less the low one (expected {diff} a call per iteration)")
    for k in sorted(set(clo) | set(chi)):
        d = chi.get(k, 0) - clo.get(k, 0)
        if d:
            print(f"  {k:60s} {clo.get(k, 0):8d} {chi.get(k, 0):8d} diff {d:7d} per_iter {d / diff:.3f}")
    for s, n in ((lo, "low"), (hi, "high")):
        if s:
            print(f"  {n}: layers", {k: v.get("status") + ("" if v.get("status") == "active" else ": " + v.get("reason", "")) for k, v in s["layers"].items()})
            print(f"  {n}: events", s.get("events"), "complete", s.get("complete"))
traced, plain = [], []
for name in ("healthy_1", "healthy_2", "healthy_3", "fault", "budget",
             "plain_1", "plain_2", "plain_3"):
    text = ""
    try:
        text = open(os.path.join(out, "s", name + ".out")).read()
    except OSError:
        pass
    rate = [float(x) for x in re.findall(r"steps_per_s=(\S+)", text)]
    if name.startswith("plain"):
        plain += rate
        print(f"== {name}: steps/s {rate}")
        continue
    if name.startswith("healthy"):
        traced += rate
    s = summary(name)
    if not s:
        continue
    print(f"== {name}: steps/s {rate}, anomalies {len(s['anomalies'])}")
    for a in s["anomalies"]:
        print("  ", a["kind"], a["message"][:300])
    print("   processes", [(p["pid"], p.get("role"), (p.get("exit") or {}).get("cause")) for p in s["processes"]])
    o = s["overhead"]
    print("   overhead", {k: o.get(k) for k in ("estimated_added_s", "estimated_slowdown_pct", "trap_ns_per_hit", "probe_hits", "target_paused_s")})
    if o.get("budget"):
        print("   budget", {k: v for k, v in o["budget"].items() if k != "untraced_s"})
        for layer in ("cuda", "driver", "torch"):
            l = s["layers"].get(layer, {})
            for api, c in (l.get("calls") or l.get("ops") or {}).items():
                if c.get("sampled") and c["count"] > 1000:
                    print(f"   sampled {layer}:{api} count {c['count']} estimated {c['estimated_count']}")
    py = s["layers"].get("python", {})
    print("   python waits_for_busy_threads", py.get("waits_for_busy_threads"), "kernel_waits", py.get("kernel_waits"))
    ioctl = s["layers"].get("os", {}).get("ioctl", {})
    print("   os slow ioctls", len(ioctl.get("slow", [])), "inside traced calls", ioctl.get("slow_inside_traced_calls"))
    drv = s["layers"].get("driver", {})
    print("   driver set-up", {k: (v["count"], v["total_ns"]) for k, v in (drv.get("calls") or {}).items() if k.startswith(("cuInit", "cuDevicePrimaryCtx", "cuCtxCreate"))}, "inner", {k: v for k, v in (drv.get("inner_calls") or {}).items() if k.startswith(("cuInit", "cuDevicePrimaryCtx", "cuCtxCreate"))})
if traced and plain:
    import statistics
    print(f"== step loop: untraced median {statistics.median(plain):.1f} steps/s, traced {statistics.median(traced):.1f}: slowdown {statistics.median(plain) / statistics.median(traced) - 1:.1%}")
EOF
cat "$OUT/verdict.txt"
