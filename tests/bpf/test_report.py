"""bpf: `eacgm report` and `eacgm compare -o`, opened in a real browser (Debian's headless
Chromium). Real recordings of simulated jobs with known ground truth: a 4-rank NCCL job whose rank
2 is 3 ms late to every step, on two simulated GPUs; a 2-rank training job that leaks device
memory; two runs of one job, the second with cudaLaunchKernel 1.5x slower. The page must be one
self-contained file, its script must run to its end without an error, and what it draws must be
the recording's facts: the ranks of the heatmap, the straggler's share of last arrivals, one
anomaly marker per anomaly, one GPU series per device, the exact call counts of the tables, the
regression's two distributions. A screenshot is written where EACGM_REPORT_SCREENSHOT_DIR says
(docs/images holds one)."""
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import eacgm_testlib  # noqa: E402
from eacgm_testlib import EACGM, SIM_LIB_DIR, SIMNCCL_JOB, SIMTRAIN  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SIM_NVML = os.path.join(SIM_LIB_DIR, "libnvidia-ml.so.1")
OS_EVENTS = os.environ.get("OS_EVENTS_BIN", "build/tests/os_events")
SLOW_RANK = 2
RANKS = 4


def run(*args, env=None, timeout=120):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=env)


def browser_dom(path, extra_script=None):
    """The DOM after the page's scripts ran in headless Chromium. `extra_script` is appended to
    a copy of the page first (to click a button, or to throw)."""
    if extra_script is not None:
        with open(path) as f:
            html = f.read()
        path = path + ".probe.html"
        with open(path, "w") as f:
            f.write(html.replace("</body>", f"<script>{extra_script}</script></body>"))
    proc = run(CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--virtual-time-budget=5000", "--dump-dom", "file://" + os.path.abspath(path),
               timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def section(dom, section_id):
    """The HTML of one <section id=...> of the page."""
    m = re.search(r'<section id="%s">(.*?)</section>' % re.escape(section_id), dom, re.S)
    assert m, f"no section {section_id}"
    return m.group(1)


def figures(html):
    return re.findall(r'<figure class="chart".*?</figure>', html, re.S)


def table_rows(html, css_class):
    m = re.search(r'<table class="sortable %s">.*?<tbody>(.*?)</tbody>' % css_class, html, re.S)
    assert m, f"no table {css_class}"
    rows = []
    for row in re.findall(r"<tr>(.*?)</tr>", m.group(1), re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        rows.append([re.sub(r"<[^>]+>", "", c) for c in cells])
    return rows


class Report(eacgm_testlib.SharedRecordingsTest):
    shared_prefix = "eacgm-report-"

    @classmethod
    def setUpClass(cls):
        if CHROMIUM is None:
            raise unittest.SkipTest("needs Debian's chromium (scripts/install-deps.sh installs it)")
        super().setUpClass()
        env = dict(os.environ, SIMGPU_DEVICE_COUNT="2",
                   SIMGPU_RULES="nvml set temperature 71; nvml set power 250.5")
        for var in ("SIMGPU_SCRIPT", "SIMGPU_DISABLE", "RANK", "LOCAL_RANK"):
            env.pop(var, None)
        cls.nccl = cls.record("nccl", [SIMNCCL_JOB, "--ranks", str(RANKS), "--steps", "300",
                                       "--slow-rank", str(SLOW_RANK), "--slow-ms", "3",
                                       "--step-us", "2000"],
                              ["--nvml-lib", SIM_NVML, "--gpu-rate", "20"], env)
        # The os layer alone (no traced call): 50 MAP_POPULATE mappings over 300 ms.
        cls.mappings = cls.record("mappings", [OS_EVENTS, "populate", "50", "300"],
                                  ["--layers", "os"])
        cls.leak = cls.record("leak", [SIMTRAIN, "--ranks", "2", "--steps", "200",
                                       "--leak-bytes", str(1 << 20)], ["--layers", "cuda"])
        job = [SIMTRAIN, "--ranks", "2", "--steps", "400", "--step-us", "2000"]
        cls.base = cls.record("base", job, ["--layers", "cuda"])
        cls.slow = cls.record("slow", job, ["--layers", "cuda"],
                              dict(os.environ, SIMGPU_RULES="latency cudaLaunchKernel 4500ns"))

    @classmethod
    def record(cls, name, job, flags, env=None):
        out = os.path.join(cls.shared, name)
        proc = run(EACGM, "record", "-q", "-o", out, *flags, "--", *job, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        with open(os.path.join(out, "summary.json")) as f:
            return out, json.load(f)

    def report(self, session, name):
        page = os.path.join(self.shared, name)
        proc = run(EACGM, "report", session, "-o", page)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn(page, proc.stdout)
        return page

    def assertCleanPage(self, page, dom):
        with open(page) as f:
            html = f.read()
        # Self-contained: nothing is fetched when it is opened.
        for pattern in (r"<link\b", r"\bsrc\s*=", r"@import", r"url\(\s*['\"]?(https?:|//)",
                        r"https?://(?!www\.w3\.org/2000/svg)"):
            self.assertIsNone(re.search(pattern, html), pattern)
        # The script ran to its end, with no error.
        self.assertRegex(dom, r'<html[^>]*data-script-errors="0"')
        self.assertRegex(dom, r'<html[^>]*data-ready="yes"')
        sections = re.findall(r'<section id="([^"]+)">', dom)
        toc = re.findall(r'<nav id="toc">(.*?)</nav>', dom, re.S)[0]
        self.assertEqual(re.findall(r'href="#([^"]+)"', toc), sections)
        return sections

    def test_nccl_job_page_draws_the_recording(self):
        session, summary = self.nccl
        page = self.report(session, "nccl.html")
        dom = browser_dom(page)
        sections = self.assertCleanPage(page, dom)
        for s in ("anomalies", "layer-cuda", "layer-nccl", "collectives", "gpu", "top",
                  "processes"):
            self.assertIn(s, sections)
        pids = {p["rank"]: p["pid"] for p in summary["processes"] if p.get("rank") is not None}
        self.assertEqual(sorted(pids), list(range(RANKS)))

        # The heatmap: one row per rank, each named with its process.
        collectives = section(dom, "collectives")
        rows = re.findall(r'<g class="heat-row" data-row="\d+"><text[^>]*>([^<]*)</text>',
                          collectives)
        self.assertEqual(rows, [f"rank {r} (pid {pids[r]})" for r in range(RANKS)])
        ranks = {int(r[0]): r for r in table_rows(collectives, "ranks")}
        self.assertEqual(sorted(ranks), list(range(RANKS)))
        # 300 all-reduces, 30 broadcasts a rank (simnccl_job's train sequence), each numbered.
        for r in ranks.values():
            self.assertEqual(r[2], "330")
        # The slow rank is last to arrive at (nearly) every collective; the others almost never.
        last = {r: float(v[5].rstrip(" %")) for r, v in ranks.items()}
        self.assertGreaterEqual(last[SLOW_RANK], 90, ranks)
        for r in range(RANKS):
            if r != SLOW_RANK:
                self.assertLess(last[r], 10, ranks)

        # One marker per anomaly of the layer, on both of the layer's charts.
        nccl_anomalies = [a for a in summary["anomalies"] if a["layer"] == "nccl"]
        self.assertTrue(any(a["kind"] == "straggler" and a["rank"] == SLOW_RANK
                            for a in nccl_anomalies), summary["anomalies"])
        charts = figures(section(dom, "layer-nccl"))
        self.assertEqual(len(charts), 2)
        for chart in charts:
            self.assertEqual(len(re.findall(r'<g class="marker"', chart)), len(nccl_anomalies))
        self.assertEqual(len(table_rows(dom, "anomalies")), len(summary["anomalies"]))
        # The calls chart has one series per rank.
        self.assertEqual(len(re.findall(r'<g class="series"', charts[0])), RANKS)

        # NVML: five readings, one series per simulated device, the scripted temperature.
        gpu = figures(section(dom, "gpu"))
        self.assertEqual(len(gpu), 5)
        for chart in gpu:
            self.assertEqual(re.findall(r"<title>(GPU \d)</title>", chart), ["GPU 0", "GPU 1"])
            # Readings at 20 Hz over about 3 s, joined into one line a device.
            for d in re.findall(r'<path d="([^"]*)"', chart):
                self.assertGreater(d.count("L"), 20, d[:200])

        # The tables carry summary.json's exact figures.
        apis = {r[0]: r for r in table_rows(section(dom, "top"), "apis")}
        launch = summary["layers"]["cuda"]["calls"]["cudaLaunchKernel"]["count"]
        self.assertEqual(launch, RANKS * 900)
        self.assertEqual(apis["cudaLaunchKernel"][2], str(launch))
        self.assertEqual(apis["ncclAllReduce"][2], str(RANKS * 300))

        # A screenshot, for the docs and for a person reading the CI log.
        shot_dir = os.environ.get("EACGM_REPORT_SCREENSHOT_DIR", self.shared)
        os.makedirs(shot_dir, exist_ok=True)
        shot = os.path.join(shot_dir, "report.png")
        proc = run(CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                   "--window-size=1000,1500", f"--screenshot={shot}",
                   "file://" + os.path.abspath(page), timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertGreater(os.path.getsize(shot), 20000)

    def test_leak_page_marks_the_leak_on_device_memory(self):
        session, summary = self.leak
        page = self.report(session, "leak.html")
        dom = browser_dom(page)
        self.assertCleanPage(page, dom)
        leaks = [a for a in summary["anomalies"] if a["kind"] == "leak"]
        self.assertEqual(sorted(a["pid"] for a in leaks),
                         sorted(p["pid"] for p in summary["processes"] if p["role"] == "rank"))
        memory = figures(section(dom, "memory"))
        self.assertEqual(len(memory), 1)
        self.assertEqual(len(re.findall(r'<g class="marker"', memory[0])), len(leaks))
        self.assertEqual(len(re.findall(r'<g class="series"', memory[0])), 2)
        # No NCCL, no GPU readings in this recording: no empty sections for them.
        sections = re.findall(r'<section id="([^"]+)">', dom)
        self.assertNotIn("collectives", sections)
        self.assertNotIn("gpu", sections)

    def test_a_session_without_calls_shows_its_mappings(self):
        session, summary = self.mappings
        page = self.report(session, "mappings.html")
        dom = browser_dom(page)
        sections = self.assertCleanPage(page, dom)
        self.assertNotIn("top", sections)  # no call was traced: no call tables
        rows = table_rows(section(dom, "mappings"), "mappings")
        (pid,) = [p["pid"] for p in summary["processes"] if p["comm"] == "os_events"]
        row = [r for r in rows if f"(pid {pid})" in r[0]]
        self.assertEqual(len(row), 1, rows)
        self.assertEqual(row[0][4], "50")  # MAP_POPULATE mappings, exactly
        mmap = summary["layers"]["os"]["mmap"][str(pid)]
        self.assertEqual(row[0][1], str(mmap["mmaps"]))

    def test_page_script_hides_a_series_and_sorts_a_table(self):
        page = self.report(self.leak[0], "leak-click.html")
        click = ('document.querySelector("#memory .legend button").click();'
                 'document.querySelector("table.apis th:nth-child(3)").click();')
        dom = browser_dom(page, click)
        self.assertRegex(dom, r'<html[^>]*data-script-errors="0"')
        memory = section(dom, "memory")
        self.assertRegex(memory, r'<button[^>]*data-series="0"[^>]*class="off"|'
                                 r'<button[^>]*class="off"[^>]*data-series="0"')
        self.assertRegex(memory, r'<g class="series" data-series="0"[^>]*style="display: none;"')
        self.assertNotRegex(memory, r'<g class="series" data-series="1"[^>]*display: none')
        calls = [int(r[2]) for r in table_rows(section(dom, "top"), "apis")]
        self.assertEqual(calls, sorted(calls, reverse=True))
        self.assertGreater(len(calls), 3)

    def test_an_error_in_the_page_is_counted(self):
        # The harness itself can fail: a script that throws is seen.
        page = self.report(self.leak[0], "leak-throws.html")
        dom = browser_dom(page, "null.nothing();")
        self.assertRegex(dom, r'<html[^>]*data-script-errors="1"')

    def test_compare_page_shows_both_distributions(self):
        page = os.path.join(self.shared, "compare.html")
        proc = run(EACGM, "compare", "-o", page, self.base[0], self.slow[0])
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)  # a regression
        self.assertIn(page, proc.stdout + proc.stderr)
        dom = browser_dom(page)
        sections = self.assertCleanPage(page, dom)
        self.assertIn("regressions", sections)
        regressions = section(dom, "regressions")
        rows = table_rows(regressions, "regressions")
        whats = {(r[0], r[1], r[3]) for r in rows}
        self.assertIn(("cuda", "cudaLaunchKernel", "latency"), whats)
        # Each regression drawn: base and candidate side by side, one dot a window.
        charts = re.findall(r'<figure class="chart" data-chart="distributions">.*?</figure>',
                            regressions, re.S)
        self.assertTrue(charts)
        launch = [c for c in charts if "cudaLaunchKernel" in c and "latency" in c][0]
        groups = re.findall(r'<g class="distribution" data-series="(\d)"[^>]*><text[^>]*>'
                            r'([^<]*)</text>', launch)
        self.assertEqual([g[1].split(" ")[0] for g in groups], ["base", "candidate"])
        self.assertGreater(len(re.findall(r"<circle", launch)), 20)

    def test_bad_input_is_one_line_and_writes_nothing(self):
        page = os.path.join(self.shared, "none.html")
        proc = run(EACGM, "report", self.shared, "-o", page)
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
        self.assertIn("not a session directory", proc.stderr)
        self.assertFalse(os.path.exists(page))
        proc = run(EACGM, "report", self.leak[0], "-o", os.path.join(self.shared, "no", "dir.html"))
        self.assertEqual(proc.returncode, 2)
        self.assertIn("cannot write", proc.stderr)
        proc = run(EACGM, "compare", "-o", os.path.join(self.shared, "no", "c.html"), self.base[0],
                   self.slow[0])
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertIn("cannot write", proc.stderr)


if __name__ == "__main__":
    eacgm_testlib.main()
