"""bpf: the gpu layer in whole `eacgm record` runs (root, real BPF programs for the other layers)
against the simulated NVML (tests/fixtures/simgpu, libnvidia-ml.so.1): scripted readings reach
summary.json, events.sqlite and the Perfetto trace exactly; an XID is reported live within a
second of when it happens; unsupported readings are left out without error; without NVML the
layer says why and the CUDA layer works as before."""
import ctypes
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import eacgm_testlib  # noqa: E402
from eacgm_testlib import (BASIC_SEQUENCE, CUDA_CALLS, EACGM, SIM_CUDART, SIM_LIB_DIR,  # noqa: E402
                           EacgmTest, Session, require_root)

SIM_NVML = os.path.join(SIM_LIB_DIR, "libnvidia-ml.so.1")
GIB = 1 << 30


def nvml_env(rules, devices=1, **extra):
    env = dict(os.environ)
    for var in ("SIMGPU_SCRIPT", "SIMGPU_DISABLE", "SIMGPU_NVML_MEMORY", "RANK", "LOCAL_RANK"):
        env.pop(var, None)
    env.update(SIMGPU_RULES=rules, SIMGPU_DEVICE_COUNT=str(devices), **extra)
    return env


def constant(value):
    return {"min": value, "max": value, "mean": value}


def real_nvml_present():
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return False


class GpuLayer(EacgmTest):
    def setUp(self):
        require_root(self)
        super().setUp()

    def test_scripted_readings_reach_every_output_exactly(self):
        rules = ("nvml set temperature 71; nvml set power 250.5; "
                 "nvml device=1 set memory_used 2GiB; nvml device=1 unsupported fan")
        # The job "uses" GPU 0 with 1 GiB at 40% SM (the simulated NVML reads its environment),
        # lives ~1.5 s, then makes the basic CUDA sequence.
        job = ["env", "SIMGPU_NVML_MEMORY=1GiB", "SIMGPU_NVML_SM_UTIL=40", CUDA_CALLS,
               "--lib", SIM_CUDART, "--late-ms", "1500"]
        s = self.record(job, "--nvml-lib", SIM_NVML, "--gpu-rate", "20",
                        env=nvml_env(rules, devices=2))
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertNotIn("error", s.stderr)
        gpu = s.summary["layers"]["gpu"]
        self.assertEqual(gpu["status"], "active", gpu)
        self.assertEqual(gpu["driver"], "999.0.0-simgpu")
        self.assertEqual(gpu["nvml_version"], "13.999.0.0-simgpu")
        self.assertEqual(gpu["rate_hz"], 20)
        devices = gpu["devices"]
        self.assertEqual([d["index"] for d in devices], [0, 1])
        for d in devices:
            self.assertEqual(d["name"], "SimGPU 80GB")
            self.assertEqual(d["uuid"], f"GPU-51a6e000-0000-4000-8000-{d['index']:012x}")
            self.assertEqual(d["temperature_c"], constant(71))
            self.assertEqual(d["power_w"], constant(250.5))
            self.assertEqual(d["power_limit_w"], constant(700))
            self.assertEqual(d["memory_total_bytes"], 80 * GIB)
            # 20 Hz for the whole session (a little slack for start and stop), at least while
            # the job lived (1.5 s or more): a loaded machine may take seconds more to start
            # and end, and give the sampler's thread less than its share meanwhile.
            self.assertGreaterEqual(d["samples"], 0.5 * 20 * 1.5, d)
            self.assertLessEqual(d["samples"], 20 * s.summary["duration_s"] + 3, d)
        self.assertEqual(devices[0]["fan_pct"], constant(30))
        self.assertEqual(devices[0]["unsupported"], [])
        # Unsupported: absent, listed, and no error or anomaly about it.
        self.assertNotIn("fan_pct", devices[1])
        self.assertEqual(devices[1]["unsupported"], ["fan_pct"])
        self.assertEqual(devices[1]["memory_used_bytes"], constant(2 * GIB))
        self.assertEqual(s.summary["anomalies"], [])

        # The join: the traced job on GPU 0, with the memory and SM share it was given.
        pid = s.summary["processes"][0]["pid"]
        procs = devices[0]["processes"]
        self.assertEqual([p["pid"] for p in procs], [pid], devices[0])
        self.assertEqual(procs[0]["comm"], "cuda_calls")
        self.assertEqual(procs[0]["memory_used_bytes"], constant(GIB))
        self.assertEqual(procs[0]["sm_util_pct"], constant(40))
        self.assertGreater(procs[0]["samples"], 5)
        self.assertEqual(devices[1]["processes"], [])
        # Device memory = what its processes use, unless scripted.
        self.assertEqual(devices[0]["memory_used_bytes"]["max"], GIB)

        # The CUDA layer in the same run, unchanged.
        self.assertEqual(s.count("cudaMalloc"), 3)
        self.assertEqual(sum(v["count"] for v in s.calls().values()), len(BASIC_SEQUENCE))
        self.assertSessionComplete(s)

        # SQLite: one row per sample, exactly the scripted values.
        for d in devices:
            rows = s.rows("SELECT temperature_c, power_w, fan_pct, memory_used_bytes "
                          "FROM gpu_samples WHERE device = ?", d["index"])
            self.assertEqual(len(rows), d["samples"])
            self.assertEqual({r[0] for r in rows}, {71})
            self.assertEqual({r[1] for r in rows}, {250.5})
            self.assertEqual({r[2] for r in rows}, {None} if d["index"] == 1 else {30})
        self.assertEqual({r[0] for r in s.rows(
            "SELECT memory_used_bytes FROM gpu_samples WHERE device = 1")}, {2 * GIB})
        self.assertEqual(s.rows("SELECT DISTINCT pid, traced FROM gpu_process_samples "
                                "WHERE device = 0"), [(pid, 1)])
        # Memory and utilisation come from two NVML calls: a process starting or exiting
        # between them has one reading without the other (NULL) in that sample, as with NVIDIA's.
        self.assertEqual(s.rows("SELECT DISTINCT memory_used_bytes FROM gpu_process_samples "
                                "WHERE memory_used_bytes IS NOT NULL"), [(GIB,)])
        self.assertEqual(s.rows("SELECT DISTINCT sm_util_pct FROM gpu_process_samples "
                                "WHERE sm_util_pct IS NOT NULL"), [(40,)])
        ((incomplete,),) = s.rows("SELECT COUNT(*) FROM gpu_process_samples "
                                  "WHERE memory_used_bytes IS NULL OR sm_util_pct IS NULL")
        self.assertLessEqual(incomplete, 2)
        self.assertEqual(s.rows("SELECT device, name, unsupported FROM gpu_devices ORDER BY device"),
                         [(0, "SimGPU 80GB", "[]"), (1, "SimGPU 80GB", '["fan_pct"]')])
        self.assertEqual(s.rows("SELECT status FROM layers WHERE layer = 'gpu'"), [("active",)])

        # Perfetto: a counter track per device and metric, one value per sample.
        t = s.perfetto()
        if t is None:
            return
        tracks = {p.track_descriptor.uuid: p.track_descriptor for p in t.packet
                  if p.HasField("track_descriptor")}
        values = {}
        for p in t.packet:
            if p.HasField("track_event") and p.track_event.type == 4:  # TYPE_COUNTER
                name = tracks[p.track_event.track_uuid].name
                values.setdefault(name, []).append(p.track_event.double_counter_value)
        for d in devices:
            i = d["index"]
            self.assertEqual(values[f"GPU {i} temperature (°C)"], [71.0] * d["samples"])
            self.assertEqual(values[f"GPU {i} power (W)"], [250.5] * d["samples"])
        self.assertIn("GPU 0 fan (%)", values)
        self.assertNotIn("GPU 1 fan (%)", values)
        # The job's GPU memory on its own process track.
        proc_tracks = [u for u, d in tracks.items() if d.name == "GPU 0 memory (bytes)"]
        self.assertEqual(len(proc_tracks), 1)
        self.assertEqual(tracks[proc_tracks[0]].parent_uuid, (pid << 32) | 0xFFFFFFFF)
        self.assertEqual(set(values["GPU 0 memory (bytes)"]), {float(GIB)})

    def test_xid_is_reported_live_within_a_second(self):
        log = os.path.join(self.tmp, "nvml.log")
        env = nvml_env("nvml device=1 xid 79 at=1500ms", devices=2, SIMGPU_NVML_LOG=log)
        # stderr to a file polled every 10 ms; times on CLOCK_MONOTONIC like the fixture's log.
        stderr_path = os.path.join(self.tmp, "live-stderr.txt")
        with open(stderr_path, "w+") as err:
            proc = subprocess.Popen([EACGM, "record", "-q", "-o", self.out(), "--nvml-lib",
                                     SIM_NVML, "--", "sleep", "4"], stdout=subprocess.DEVNULL,
                                    stderr=err, env=env)
            seen_ns = None
            deadline = time.monotonic() + 30
            while seen_ns is None and time.monotonic() < deadline and proc.poll() is None:
                err.seek(0)
                if "eacgm: anomaly [xid]" in err.read():
                    seen_ns = time.monotonic_ns()  # CLOCK_MONOTONIC, like the fixture's log
                    break
                time.sleep(0.01)
            still_running = proc.poll() is None
            proc.wait(timeout=30)
            err.seek(0)
            stderr = err.read()
        self.assertIsNotNone(seen_ns, stderr)
        self.assertTrue(still_running, "the XID was only reported when the session ended")
        with open(log) as f:
            events = [l for l in f if l.startswith("event ") and "data=79" in l]
        self.assertEqual(len(events), 1, events)
        scheduled_ns = int(events[0].split("scheduled_ns=")[1].split()[0])
        latency_s = (seen_ns - scheduled_ns) / 1e9
        print(f"\nXID scripted at +1.5 s after nvmlInit; eacgm's stderr line seen {latency_s:.3f} s "
              f"later", file=sys.stderr)
        self.assertGreaterEqual(latency_s, 0)
        self.assertLess(latency_s, 1.0)
        self.assertIn("XID 79", stderr)

        s = Session(self.out(), subprocess.CompletedProcess([], 0, "", stderr))
        xids = [a for a in s.summary["anomalies"] if a["kind"] == "xid"]
        self.assertEqual(len(xids), 1, s.summary["anomalies"])
        a = xids[0]
        self.assertEqual(a["layer"], "gpu")
        self.assertEqual(a["evidence"]["xid"], 79)
        self.assertEqual(a["evidence"]["device"], 1)
        self.assertEqual(a["evidence"]["description"], "GPU has fallen off the bus")
        self.assertTrue(a["suggestion"])
        # Its time: when NVML delivered it, on the session's clock.
        (start_ns,) = s.rows("SELECT value FROM meta WHERE key = 'start_ns'")[0]
        self.assertAlmostEqual(a["t_s"], (scheduled_ns - int(start_ns)) / 1e9, delta=0.3)
        (ts_ns,) = s.rows("SELECT ts_ns FROM gpu_events WHERE kind = 'xid' AND code = 79")[0]
        self.assertGreaterEqual(ts_ns, scheduled_ns)
        self.assertLess(ts_ns - scheduled_ns, 300_000_000)
        dev = s.summary["layers"]["gpu"]["devices"][1]
        self.assertEqual(dev["events"], {"xid": 1})
        self.assertEqual(s.summary["layers"]["gpu"]["devices"][0]["events"], {})

    def test_throttling_that_lasts_is_an_anomaly_a_blip_is_not(self):
        rules = ("nvml device=0 throttle thermal at=500ms; nvml device=0 set temperature 92; "
                 "nvml device=1 throttle thermal at=500ms for=1s")
        s = self.record(["sleep", "3.5"], "--nvml-lib", SIM_NVML, env=nvml_env(rules, devices=2))
        self.assertEqual(s.returncode, 0, s.stderr)
        throttles = [a for a in s.summary["anomalies"] if a["kind"] == "throttle"]
        self.assertEqual(len(throttles), 1, s.summary["anomalies"])
        a = throttles[0]
        self.assertEqual(a["evidence"]["device"], 0)
        self.assertEqual(a["evidence"]["reasons"], ["sw_thermal_slowdown"])
        self.assertEqual(a["evidence"]["temperature_c"], 92)
        self.assertGreaterEqual(a["evidence"]["lasted_s"], 2.0)
        self.assertIn("eacgm: anomaly [throttle]", s.stderr)
        devs = s.summary["layers"]["gpu"]["devices"]
        self.assertGreater(devs[0]["clock_events"]["throttled_s"], 2.0)
        self.assertAlmostEqual(devs[1]["clock_events"]["throttled_s"], 1.0, delta=0.3)
        # The SM clock halves while throttled (the simulation's model of it).
        self.assertEqual(devs[0]["sm_clock_mhz"]["min"], 990)
        # Throttled from 0.5 s after NVML's start (the simulation's clock starts there, which a
        # loaded machine reaches seconds after the session's own start).
        self.assertEqual(s.rows("SELECT DISTINCT clock_event_reasons FROM gpu_samples "
                                "WHERE device = 0 AND ts_ns > (SELECT MIN(ts_ns) FROM "
                                "gpu_samples) + 1000000000"), [(0x20,)])

    def test_no_nvml_is_unavailable_and_cuda_still_works(self):
        missing = os.path.join(self.tmp, "nowhere", "libnvidia-ml.so.1")
        s = self.record([CUDA_CALLS, "--lib", SIM_CUDART], "--nvml-lib", missing)
        self.assertEqual(s.returncode, 0, s.stderr)
        gpu = s.summary["layers"]["gpu"]
        self.assertEqual(gpu["status"], "unavailable")
        self.assertIn(missing, gpu["reason"])
        self.assertEqual(set(gpu), {"status", "reason"})
        self.assertIn("the gpu layer is unavailable", s.stderr)
        self.assertIn("[gpu] unavailable", s.stdout)
        self.assertEqual(s.count("cudaMalloc"), 3)
        self.assertEqual(sum(v["count"] for v in s.calls().values()), len(BASIC_SEQUENCE))
        self.assertEqual(s.rows("SELECT COUNT(*) FROM gpu_samples"), [(0,)])
        self.assertSessionComplete(s)

    def test_default_on_a_machine_without_nvml(self):
        if real_nvml_present():
            self.skipTest("this machine has NVIDIA's libnvidia-ml.so.1")
        s = self.record([CUDA_CALLS, "--lib", SIM_CUDART])
        self.assertEqual(s.returncode, 0, s.stderr)
        gpu = s.summary["layers"]["gpu"]
        self.assertEqual(gpu["status"], "unavailable")
        self.assertIn("libnvidia-ml.so.1", gpu["reason"])
        self.assertNotIn("warning", s.stderr)  # the normal case on a GPU-less machine: no noise
        self.assertEqual(s.count("cudaMalloc"), 3)

    def test_nvml_without_driver_is_unavailable(self):
        s = self.record(["true"], "--nvml-lib", SIM_NVML, env=nvml_env("", SIMGPU_DISABLE="1"))
        self.assertEqual(s.returncode, 0, s.stderr)
        gpu = s.summary["layers"]["gpu"]
        self.assertEqual(gpu["status"], "unavailable")
        self.assertEqual(gpu["reason"], "nvmlInit failed: Driver Not Loaded (9)")

    def test_layer_can_be_left_out(self):
        s = self.record(["true"], "--layers", "cuda", "--nvml-lib", SIM_NVML,
                        env=nvml_env("nvml xid 79 at=0"))
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertNotIn("gpu", s.summary["layers"])
        self.assertEqual(s.summary["anomalies"], [])


if __name__ == "__main__":
    eacgm_testlib.main()
