"""`eacgm gmm` as a user runs it: bad input is refused with exit code 2 and a message naming the
file and the line; -k auto picks the number of components by BIC; a seed gives the same model
whatever the number of threads."""
import json
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gmm_testlib import GmmTest, make_dataset, run, write_csv  # noqa: E402


class BadInput(GmmTest):
    def write(self, name, text):
        path = self.path(name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def assertBadInput(self, proc, *fragments):
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        for fragment in fragments:
            self.assertIn(fragment, proc.stderr)

    def fit(self, path, *args):
        return run("gmm", "fit", "--input", path, "-k", "1", "-o", self.path("m.json"), *args,
                   check=False)

    def test_csv_errors_name_the_line(self):
        cases = [
            ("ragged.csv", "a,b\n1,2\n3\n", ":3:", "expected 2 fields, found 1"),
            ("text.csv", "1,2\n3,abc\n", ":2:", "field 2 is not a number: 'abc'"),
            ("nan.csv", "a,b\n1,2\n\n3,nan\n", ":4:", "field 2 is not a finite number"),
            ("inf.csv", "1,-inf\n", ":1:", "not a finite number"),
            ("empty_field.csv", "1,,2\n", ":1:", "field 2 is empty"),
            ("mixed.csv", "a,2\n1,2\n", ":1:", "mixes numbers and text"),
            ("empty.csv", "", "empty.csv", "empty file"),
            ("blank.csv", "\n  \n", "blank.csv", "empty file"),
            ("header_only.csv", "a,b\n", "header_only.csv", "no data rows"),
        ]
        for name, text, where, message in cases:
            with self.subTest(name=name):
                path = self.write(name, text)
                proc = self.fit(path)
                self.assertBadInput(proc, message)
                self.assertIn(f"{path}{where}" if where.startswith(":") else where, proc.stderr)

    def test_missing_file(self):
        self.assertBadInput(self.fit(self.path("nope.csv")), "nope.csv", "cannot open")

    def test_bad_flags(self):
        data = self.write("ok.csv", "1\n2\n3\n")
        for args, message in (((("-k", "0")), "-k"), (("-k", "many"), "-k"),
                              (("-k", "1", "--n-init", "0"), "--n-init"),
                              (("-k", "1", "--covariance", "tied"), "covariance")):
            with self.subTest(args=args):
                proc = run("gmm", "fit", "--input", data, "-o", self.path("m.json"), *args,
                           check=False)
                self.assertBadInput(proc, message)
        for k in ("5", "auto --k-min 4"):
            proc = run("gmm", "fit", "--input", data, "-k", *k.split(), "-o",
                       self.path("m.json"), check=False)
            self.assertBadInput(proc, "too few")
        # An initial model fixes k and the covariance type.
        run("gmm", "fit", "--input", data, "-k", "1", "-o", self.path("init.json"), "-q")
        for args, message in ((("--covariance", "diag"), "initial model"),
                              (("-k", "2"), "initial model"), (("-k", "auto"), "--init")):
            with self.subTest(args=args):
                proc = run("gmm", "fit", "--input", data, "--init", self.path("init.json"), "-o",
                           self.path("m.json"), *args, check=False)
                self.assertBadInput(proc, message)

    def test_score_dimension_mismatch(self):
        train = self.write("train.csv", "1,2\n2,3\n3,5\n4,4\n")
        run("gmm", "fit", "--input", train, "-k", "1", "-o", self.path("m.json"), "-q")
        other = self.write("three.csv", "1,2,3\n")
        proc = run("gmm", "score", "--model", self.path("m.json"), "--input", other, check=False)
        self.assertBadInput(proc, f"{other}:1:", "3 fields per row", "2 features")

    def test_bad_model(self):
        data = self.write("ok.csv", "1\n2\n")
        for text, message in (("{", "not valid JSON"), ("{}", "\"covariance_type\" is missing"),
                              (json.dumps({"covariance_type": "full", "weights": [1],
                                           "means": [[0]], "covariances": [[[-1]]]}),
                               "not positive definite")):
            with self.subTest(text=text):
                model = self.write("bad.json", text)
                proc = run("gmm", "score", "--model", model, "--input", data, check=False)
                self.assertBadInput(proc, model, message)


class Behaviour(GmmTest):
    def test_auto_k_picks_the_true_number_by_bic(self):
        X, k = make_dataset("separated")
        model = self.fit(X, "-k", "auto", "--k-max", "6")
        self.assertEqual(model["n_components"], k)
        by_k = {entry["k"]: entry["bic"] for entry in model["fit"]["bic_by_k"]}
        self.assertEqual(sorted(by_k), [1, 2, 3, 4, 5, 6])
        self.assertEqual(min(by_k, key=by_k.get), k)
        self.assertAlmostEqual(model["bic"], by_k[k])

    def test_deterministic_for_a_seed_whatever_the_threads(self):
        X, k = make_dataset("overlapping")
        X = np.vstack([X] * 6)  # several parallel chunks
        runs = []
        for threads in (1, 2, 3):
            model = self.fit(X, "-k", k, "--seed", "42", "--n-init", "2", "--threads", threads)
            runs.append(model)
        for other in runs[1:]:
            for key in ("weights", "means", "covariances", "mean_log_likelihood", "bic"):
                self.assertEqual(runs[0][key], other[key], key)
        other_seed = self.fit(X, "-k", k, "--seed", "43", "--n-init", "2")
        self.assertNotEqual(other_seed["means"], runs[0]["means"])

    def test_model_file(self):
        X, k = make_dataset("separated")
        model = self.fit(X, "-k", k, "--covariance", "diag")
        self.assertEqual(model["format"], "eacgm-gmm")
        self.assertEqual(model["feature_names"], ["f0", "f1"])
        self.assertEqual(model["n_samples"], len(X))
        self.assertEqual(np.array(model["covariances"]).shape, (k, 2))
        self.assertTrue(model["fit"]["converged"])
        for key in ("mean_log_likelihood", "bic", "weights", "means"):
            self.assertIn(key, model)


if __name__ == "__main__":
    unittest.main()
