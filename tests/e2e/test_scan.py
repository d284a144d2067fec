"""e2e: `eacgm scan` on a corpus of real-looking scripts (tests/data/scan/): exact findings for
every built-in rule, the aliases and false friends (names in strings, comments and docstrings,
local variables, parameters and user functions that share a removed API's name), a file that
does not parse, version-specific syntax under several interpreters, the exit codes, rules given
at run time, and `--session` against a session directory built here by hand (summary.json and
events.sqlite with the columns eacgm writes). Needs no root and no BPF."""
import glob
import json
import os
import shutil
import sqlite3
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import eacgm_testlib  # noqa: E402
from eacgm_testlib import EACGM as EACGM_PATH, EacgmTest  # noqa: E402

# Absolute: the scans run from the corpus directory.
EACGM = os.path.abspath(EACGM_PATH)

DATA = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "data", "scan"))
# Debian's interpreter parses the corpus (a `match` statement needs 3.10+); `python3` on PATH is
# a pyenv build here, and pyenv's 3.8 to 3.13 are used where they exist.
PYTHON = "/usr/bin/python3.11" if os.path.exists("/usr/bin/python3.11") else shutil.which("python3")
PYENV = sorted(glob.glob("/root/.pyenv/versions/3.*/bin/python3"))

PT = "pytorch-1-to-2.rules"
TF15 = "tensorflow-2.15.rules"
TF16 = "tensorflow-2.16.rules"
K3 = "keras-3.rules"

# file -> {(line, api, rule file)}: every finding of the corpus, checked by hand against the
# source. false_friends.py has none; broken.py does not parse.
EXPECTED = {
    "torch_linalg.py": {
        (10, "torch.solve", PT), (15, "torch.lstsq", PT), (19, "torch.eig", PT),
        (20, "torch.symeig", PT), (25, "torch.matrix_rank", PT), (26, "torch.chain_matmul", PT),
        (27, "torch.qr", PT), (28, "torch.cholesky", PT), (29, "torch.norm", PT),
    },
    "aliases.py": {
        (4, "torch.lstsq", PT),  # from torch import lstsq as ls
        (13, "torch.lstsq", PT),  # T.lstsq
        (14, "torch.lstsq", PT),  # ls(b, a)
        (19, "torch.nn.functional.tanh", PT), (19, "torch.nn.functional.sigmoid", PT),
        (23, "torch.cuda.amp.autocast", PT),  # from torch.cuda import amp; amp.autocast()
        (28, "tensorflow.keras.layers.experimental.preprocessing.Rescaling", TF15),  # K = tf.keras
    },
    "train_amp.py": {
        (8, "torch.cuda.amp.custom_fwd", PT), (13, "torch.cuda.amp.custom_bwd", PT),
        (20, "torch.utils.data.DataLoader", PT),  # the prefetch_factor keyword's line
        (26, "torch.cuda.amp.GradScaler", PT), (28, "torch.cuda.amp.autocast", PT),
        (35, "torch.stft", PT), (37, "torch.nn.functional.upsample", PT), (42, "torch.load", PT),
        (45, "torch.testing.assert_allclose", PT), (48, "torch.set_default_tensor_type", PT),
    },
    "keras_pipeline.py": {
        (3, "tensorflow.keras.layers.experimental.preprocessing", TF15),
        (9, "tensorflow.keras.mixed_precision.experimental.set_policy", TF15),  # mp = tf.keras...
        (11, "tensorflow.keras.layers.experimental.preprocessing.Resizing", TF15),
        (12, "tensorflow.keras.layers.experimental.preprocessing.Rescaling", TF15),
        (18, "tensorflow.keras.utils.get_file", TF15),  # without cache_subdir; line 19 has it
        (25, "tensorflow.keras.mixed_precision.experimental.LossScaleOptimizer", TF15),
        (25, "tensorflow.keras.optimizers.legacy.Adam", TF16),
    },
    "tf1_estimator.py": {
        (2, "tensorflow.compat.v1", TF15), (7, "tensorflow.compat.v1.placeholder", TF15),
        (12, "tensorflow.estimator.DNNClassifier", TF16),
        (16, "tensorflow.keras.backend.get_session", TF16),
        (17, "tensorflow.keras.backend.set_learning_phase", TF16),
        (18, "tensorflow.keras.backend.function", TF16),
        (19, "tensorflow.keras.layers.experimental.RandomFourierFeatures", TF16),
        (20, "tensorflow.keras.layers.LocallyConnected2D", TF16),
        (26, "tensorflow.keras.backend.placeholder", TF16),
        (27, "tensorflow.keras.layers.experimental.EinsumDense", TF16),
    },
    "keras3_model.py": {
        (3, "keras.layers.ThresholdedReLU", K3), (8, "keras.layers.LocallyConnected1D", K3),
        (9, "keras.layers.ThresholdedReLU", K3), (10, "keras.constraints.RadialConstraint", K3),
        (11, "keras.layers.experimental.preprocessing.Normalization", K3),
        (16, "keras.backend.set_value", K3), (16, "keras.backend.get_value", K3),
        (18, "keras.optimizers.legacy.SGD", K3),
        (22, "keras.layers.experimental.RandomFourierFeatures", K3),
    },
    "match_311.py": {(7, "torch.lstsq", PT), (9, "torch.eig", PT)},
    "false_friends.py": set(),
}
BROKEN_LINE = 4


def scan(*args, cwd=DATA, python=PYTHON):
    command = [EACGM, "scan", *args]
    if python:
        command += ["--python", python]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)


def scan_json(*args, **kw):
    p = scan("--json", *args, **kw)
    if p.returncode not in (0, 1):
        raise AssertionError(f"exit {p.returncode}: {p.stderr}")
    return p, json.loads(p.stdout)


def found(report):
    out = {}
    for f in report["findings"]:
        out.setdefault(os.path.basename(f["file"]), set()).add((f["line"], f["api"], f["rule"]))
    return out


class Corpus(EacgmTest):
    def test_every_finding_of_the_corpus(self):
        p, report = scan_json(".")
        self.assertEqual(p.returncode, 1, p.stderr)
        got = found(report)
        for name, expected in EXPECTED.items():
            with self.subTest(file=name):
                self.assertEqual(got.get(name, set()), expected)
        self.assertEqual(set(got) - set(EXPECTED), set())
        self.assertEqual(report["files_scanned"], len(EXPECTED))
        self.assertEqual(report["warnings"], [{"file": "broken.py", "line": BROKEN_LINE,
                                               "message": report["warnings"][0]["message"]}])
        self.assertTrue(report["warnings"][0]["message"].startswith("SyntaxError"))

    def test_every_built_in_rule_is_exercised(self):
        # Each rule of the built-in files is hit by the corpus at least once.
        _, report = scan_json(".")
        hit = {(f["rule"], f["rule_line"]) for f in report["findings"]}
        rules_dir = os.path.join(DATA, "..", "..", "..", "src", "upgrade", "rules")
        for path in sorted(glob.glob(os.path.join(rules_dir, "*.rules"))):
            with open(path) as f:
                for number, line in enumerate(f, 1):
                    if line.startswith("rule "):
                        self.assertIn((os.path.basename(path), number), hit,
                                      f"{os.path.basename(path)}:{number}: {line.strip()}")

    def test_json_shape(self):
        _, report = scan_json("torch_linalg.py")
        self.assertEqual(list(report), ["findings", "files_scanned", "warnings"])
        first = report["findings"][0]
        for key in ("file", "line", "column", "api", "replacement", "rule", "severity",
                    "versions", "source", "function", "executed"):
            self.assertIn(key, first)
        self.assertEqual(first["file"], "torch_linalg.py")
        self.assertEqual((first["line"], first["column"]), (10, 12))
        self.assertEqual(first["api"], "torch.solve")
        self.assertEqual(first["function"], "solve_system")
        self.assertEqual(first["severity"], "error")
        self.assertEqual(first["versions"], "deprecated in 1.9, removed in 1.13")
        self.assertIn("https://github.com/pytorch/pytorch/pull/70986", first["source"])
        self.assertIsNone(first["executed"])
        # Every finding names its sources.
        for f in report["findings"]:
            self.assertTrue(f["sources"], f)
        # Ranked: errors before infos, then by line.
        severities = [f["severity"] for f in report["findings"]]
        self.assertEqual(severities, sorted(severities, key=["error", "warning", "info"].index))

    def test_text_output(self):
        p = scan("keras_pipeline.py", "broken.py")
        self.assertEqual(p.returncode, 1, p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(lines[0], "keras_pipeline.py:3: "
                         "tensorflow.keras.layers.experimental.preprocessing -> "
                         "tensorflow.keras.layers [error, tensorflow-2.15.rules]")
        self.assertIn("keras_pipeline.py:18: tensorflow.keras.utils.get_file -> "
                      "tensorflow.keras.utils.get_file(..., cache_subdir=\"datasets\") (name the "
                      "cache subdirectory) [warning, tensorflow-2.15.rules]", lines)
        self.assertEqual(lines[-1], "7 findings (6 errors, 1 warning, 0 infos) in 1 of 1 file "
                         "scanned; 1 file could not be parsed")
        self.assertIn(f"eacgm: warning: broken.py:{BROKEN_LINE}: SyntaxError", p.stderr)

    def test_directories_skipped(self):
        # Hidden directories, caches, installed packages and environments are not the job's code.
        tree = os.path.join(self.tmp, "project")
        os.makedirs(os.path.join(tree, "pkg"))
        shutil.copy(os.path.join(DATA, "torch_linalg.py"), os.path.join(tree, "pkg", "fit.py"))
        for skipped in (".git/hooks", "__pycache__", "lib/site-packages/x", "lib/dist-packages",
                        "venv/lib", "env/conda-meta"):
            os.makedirs(os.path.join(tree, skipped), exist_ok=True)
            with open(os.path.join(tree, skipped, "bad.py"), "w") as f:
                f.write("import torch\ntorch.lstsq(1, 2)\n")
        with open(os.path.join(tree, "venv", "pyvenv.cfg"), "w") as f:
            f.write("home = /usr/bin\n")
        with open(os.path.join(tree, "notes.txt"), "w") as f:
            f.write("torch.lstsq\n")
        _, report = scan_json(tree)
        self.assertEqual({f["file"] for f in report["findings"]}, {tree + "/pkg/fit.py"})
        self.assertEqual(report["files_scanned"], 1)
        # A file named explicitly is parsed whatever its name.
        script = os.path.join(tree, "run_training")
        shutil.copy(os.path.join(DATA, "match_311.py"), script)
        _, report = scan_json(script)
        self.assertEqual(len(report["findings"]), 2)


class Interpreters(EacgmTest):
    def test_each_python_version_finds_the_same(self):
        if not PYENV:
            self.skipTest("no pyenv interpreters (/root/.pyenv/versions/3.*)")
        _, reference = scan_json(".")
        reference = found(reference)
        for python in PYENV:
            version = tuple(int(x) for x in python.split("/")[-3].split(".")[:2])
            if version < (3, 8):
                continue
            with self.subTest(python=python):
                p, report = scan_json(".", python=python)
                got = found(report)
                expected = dict(reference)
                broken = {"broken.py"}
                if version < (3, 10):  # `match` is 3.10 syntax
                    expected.pop("match_311.py")
                    broken.add("match_311.py")
                self.assertEqual(got, expected)
                self.assertEqual({w["file"] for w in report["warnings"]}, broken)
                if version < (3, 10):
                    self.assertIn({"file": "match_311.py", "line": 5,
                                   "message": "SyntaxError: invalid syntax"}, report["warnings"])

    def test_too_old_or_not_python(self):
        for python, fragment in (("/bin/sh", "needs Python 3.8 or newer"),
                                 ("/root/.pyenv/versions/3.6.15/bin/python3",
                                  "needs Python 3.8 or newer; this is Python 3.6"),
                                 ("/root/.pyenv/versions/2.7.18/bin/python",
                                  "Unknown option: -I")):
            if not os.path.exists(python):
                continue
            with self.subTest(python=python):
                p = scan("torch_linalg.py", python=python)
                self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                self.assertIn(fragment, p.stderr)
                self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)


class ExitCodes(EacgmTest):
    def assertUsage(self, p, fragment):
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn(fragment, p.stderr)
        self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
        self.assertTrue(p.stderr.startswith("eacgm: error: "), p.stderr)

    def test_clean_code_exits_0(self):
        p = scan("false_friends.py")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "no findings in 1 file scanned\n")
        # A file that does not parse is a warning, not a finding.
        p = scan("false_friends.py", "broken.py")
        self.assertEqual(p.returncode, 0, p.stderr)
        # Nothing to scan is clean too, and says so.
        p = scan(self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "no findings in 0 files scanned\n")
        self.assertEqual(p.stderr, f"eacgm: warning: no *.py file under {self.tmp}\n")

    def test_findings_exit_1(self):
        self.assertEqual(scan("aliases.py").returncode, 1)

    def test_bad_input_exits_2(self):
        self.assertUsage(scan("no_such_file.py"), "no_such_file.py: no such file or directory")
        self.assertUsage(scan("aliases.py", python="/no/such/python3"),
                         "--python /no/such/python3: no such interpreter")
        p = subprocess.run([EACGM, "scan", "aliases.py"], capture_output=True, text=True,
                           cwd=DATA, env={"PATH": self.tmp}, timeout=60)
        self.assertUsage(p, "no python3 on PATH")
        self.assertUsage(scan("aliases.py", "--session", self.tmp),
                         f"{self.tmp} is not an eacgm session")
        self.assertUsage(scan("aliases.py", "--session", self.tmp + "/nope"),
                         "no such session directory")
        self.assertUsage(scan("aliases.py", "--rules", self.tmp), "no *.rules file")
        with open(os.path.join(self.tmp, "mine.rules"), "w") as f:
            f.write("rule numpy.float\n  replacement float\n  versions 1.24\n  severity fatal\n")
        self.assertUsage(scan("aliases.py", "--rules", self.tmp),
                         f"{self.tmp}/mine.rules:4: severity 'fatal'")
        p = scan()
        self.assertEqual(p.returncode, 2)
        self.assertIn("paths is required", p.stderr)


class RunTimeRules(EacgmTest):
    def test_rules_added_and_replaced(self):
        with open(os.path.join(self.tmp, "numpy-2.rules"), "w") as f:
            f.write("# NumPy 2 removals\n"
                    "rule numpy.linalg.lstsq\n  replacement numpy.linalg.lstsq(a, b, rcond=None)\n"
                    "  when no-keyword rcond 2\n  versions 2.0 changed its default\n"
                    "  severity warning\n  source https://numpy.org/doc/stable/release.html\n")
        with open(os.path.join(self.tmp, "keras-3.rules"), "w") as f:
            f.write("")  # replaces the built-in file: its rules are off
        _, report = scan_json(".", "--rules", self.tmp)
        got = found(report)
        self.assertNotIn("keras3_model.py", got)
        # Solver.lstsq holds np.linalg.lstsq but does not call it.
        self.assertEqual(got.get("false_friends.py", set()), set())
        self.assertEqual(got["torch_linalg.py"], EXPECTED["torch_linalg.py"])
        # A finding from a new package, through `import numpy as np`.
        with open(os.path.join(self.tmp, "uses_numpy.py"), "w") as f:
            f.write("import numpy as np\n\n\ndef fit(a, b):\n    return np.linalg.lstsq(a, b)\n")
        _, report = scan_json(os.path.join(self.tmp, "uses_numpy.py"), "--rules", self.tmp)
        self.assertEqual(found(report), {"uses_numpy.py": {(5, "numpy.linalg.lstsq",
                                                            "numpy-2.rules")}})


class Sessions(EacgmTest):
    """--session against a session written here: the summary.json contract (DESIGN.md) and the
    events.sqlite tables of src/sinks/sqlite_writer.cpp, with only what scan reads filled in."""

    def make_session(self, name="run1", functions=(), ops=(), db_functions=(), lines=()):
        path = os.path.join(self.tmp, name)
        os.makedirs(path)
        summary = {"version": "0.1.0", "command": ["python3", "train.py"], "exit_code": 0,
                   "layers": {"python": {"status": "active", "functions": {
                       key: {"count": 1, "total_ns": 1000} for key in functions}},
                       "torch": {"status": "active", "ops": {
                           op: {"count": 3, "total_ns": 10} for op in ops}}}}
        with open(os.path.join(path, "summary.json"), "w") as f:
            json.dump(summary, f)
        db = sqlite3.connect(os.path.join(path, "events.sqlite"))
        db.executescript("""
            CREATE TABLE calls(id INTEGER PRIMARY KEY, pid INTEGER NOT NULL,
              tid INTEGER NOT NULL, layer TEXT NOT NULL, name TEXT NOT NULL,
              start_ns INTEGER NOT NULL, duration_ns INTEGER NOT NULL, ret INTEGER NOT NULL,
              error TEXT, bytes INTEGER NOT NULL, depth INTEGER NOT NULL, args TEXT NOT NULL,
              py_function TEXT, py_file TEXT, py_line INTEGER, kernel TEXT);
            CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
            CREATE TABLE python_functions(function TEXT PRIMARY KEY, file TEXT,
              first_line INTEGER, count INTEGER, samples INTEGER NOT NULL,
              total_ns INTEGER NOT NULL, self_ns INTEGER NOT NULL);
            INSERT INTO meta VALUES ('schema_version', '1');
        """)
        for function, file, first_line in db_functions:
            db.execute("INSERT INTO python_functions VALUES (?, ?, ?, NULL, 5, 5000, 100)",
                       (function, file, first_line))
        for i, (layer, name, py_function, py_file, py_line) in enumerate(lines, 1):
            db.execute("INSERT INTO calls VALUES (?, 42, 42, ?, ?, 0, 10, 0, NULL, 0, 0, '{}', "
                       "?, ?, ?, NULL)", (i, layer, name, py_function, py_file, py_line))
        db.commit()
        db.close()
        return path

    def executed(self, report):
        return {(os.path.basename(f["file"]), f["line"], f["api"]): f["executed"]
                for f in report["findings"]}

    def test_executed_true_false_and_null(self):
        linalg = os.path.join(DATA, "torch_linalg.py")
        amp = os.path.join(DATA, "train_amp.py")
        session = self.make_session(
            # summary.json: keys below the script's directory, with qualnames
            functions=["torch_linalg.py:fit_least_squares", "train_amp.py:Scaled.forward",
                       "keras_pipeline.py:<module>"],
            # the operator torch.symeig ran (spectrum() itself was never sampled)
            ops=["aten::symeig", "aten::mm"],
            # python_functions: a name that differs, found by the file and first line
            db_functions=[("train_amp.py:renamed", amp, 41), ("other.py:x", "/elsewhere/x.py", 9)],
            # the Python frame behind two traced calls: a function, and a bare line
            lines=[("torch", "aten::mm", "torch_linalg.py:rank_and_products", linalg, 27),
                   ("torch", "aten::mm", None, linalg, 19)])
        _, report = scan_json(".", "--session", session)
        ran = self.executed(report)
        expect_true = {
            ("torch_linalg.py", 15, "torch.lstsq"),  # fit_least_squares, in summary.json
            ("torch_linalg.py", 19, "torch.eig"),  # the line of a traced call
            ("torch_linalg.py", 20, "torch.symeig"),  # aten::symeig
            # rank_and_products, the py_function of a traced call
            ("torch_linalg.py", 25, "torch.matrix_rank"), ("torch_linalg.py", 26,
                                                          "torch.chain_matmul"),
            ("torch_linalg.py", 27, "torch.qr"), ("torch_linalg.py", 28, "torch.cholesky"),
            ("torch_linalg.py", 29, "torch.norm"),
            # restore(), by its first line
            ("train_amp.py", 42, "torch.load"), ("train_amp.py", 45,
                                                 "torch.testing.assert_allclose"),
            # module-level code of a module that ran
            ("keras_pipeline.py", 3, "tensorflow.keras.layers.experimental.preprocessing"),
        }
        self.assertEqual({key for key, value in ran.items() if value is True}, expect_true)
        # Everything else was not seen: Scaled.forward ran, but its decorator runs in the class
        # body, not in forward; solve_system never ran.
        self.assertEqual({value for key, value in ran.items() if key not in expect_true}, {False})
        self.assertIs(ran[("train_amp.py", 8, "torch.cuda.amp.custom_fwd")], False)
        self.assertIs(ran[("torch_linalg.py", 10, "torch.solve")], False)
        # Executed first, then severity, then place.
        order = [(not f["executed"], ["error", "warning", "info"].index(f["severity"]),
                  f["file"], f["line"]) for f in report["findings"]]
        self.assertEqual(order, sorted(order))
        self.assertTrue(report["findings"][0]["executed"])
        # Text: says so on each line, and counts them.
        p = scan("torch_linalg.py", "--session", session)
        self.assertEqual(p.returncode, 1)
        lines = p.stdout.splitlines()
        self.assertTrue(lines[0].endswith("(ran in session)"), lines[0])
        self.assertIn("torch_linalg.py:10: torch.solve -> torch.linalg.solve(A, B) (arguments "
                      "swapped: torch.solve(B, A); no LU returned) [error, pytorch-1-to-2.rules] "
                      "(not seen in session)", lines)
        self.assertEqual(lines[-1], "9 findings (5 errors, 0 warnings, 4 infos) in 1 of 1 file "
                         "scanned; 8 ran in the session")
        # Without --session: null.
        _, report = scan_json("torch_linalg.py")
        self.assertEqual({f["executed"] for f in report["findings"]}, {None})

    def test_several_sessions_and_only_a_summary(self):
        first = self.make_session("a", functions=["torch_linalg.py:solve_system"])
        second = os.path.join(self.tmp, "b")
        os.makedirs(second)
        with open(os.path.join(second, "summary.json"), "w") as f:
            json.dump({"layers": {"torch": {"status": "active", "ops": {"aten::eig.default": {}}}}},
                      f)
        _, report = scan_json("torch_linalg.py", "--session", first, second)
        ran = {f["api"] for f in report["findings"] if f["executed"]}
        self.assertEqual(ran, {"torch.solve", "torch.eig"})
        # A summary that is not JSON, a database that is not eacgm's: exit 2.
        with open(os.path.join(second, "summary.json"), "w") as f:
            f.write("{ truncated")
        p = scan("torch_linalg.py", "--session", second)
        self.assertEqual(p.returncode, 2)
        self.assertIn("summary.json is not an eacgm session summary", p.stderr)
        third = os.path.join(self.tmp, "c")
        os.makedirs(third)
        sqlite3.connect(os.path.join(third, "events.sqlite")).execute("CREATE TABLE t(x)")
        p = scan("torch_linalg.py", "--session", third)
        self.assertEqual(p.returncode, 2)
        self.assertIn("is not an eacgm session database: it has no meta table", p.stderr)


if __name__ == "__main__":
    eacgm_testlib.main()
