"""`eacgm gmm score` against scikit-learn and numpy on the same parameters (a model we fitted,
loaded into a GaussianMixture): per-sample log-likelihood, most likely component, responsibilities
(--responsibilities) and the Mahalanobis distance to the most likely component, for every
covariance type. Also checks that the CSV it writes has one row per input row."""
import csv
import json
import os
import sys
import unittest

import numpy as np
from sklearn.mixture import GaussianMixture
from sklearn.mixture._gaussian_mixture import _compute_precision_cholesky

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gmm_testlib import COVARIANCE_TYPES, GmmTest, make_dataset, run, write_csv  # noqa: E402


def sklearn_model(model):
    covariance_type = model["covariance_type"]
    gm = GaussianMixture(len(model["weights"]), covariance_type=covariance_type)
    gm.weights_ = np.array(model["weights"])
    gm.means_ = np.array(model["means"])
    gm.covariances_ = np.array(model["covariances"])
    gm.precisions_cholesky_ = _compute_precision_cholesky(gm.covariances_, covariance_type)
    return gm


def full_covariance(model, c):
    cov = np.asarray(model["covariances"][c], dtype=float)
    d = len(model["means"][0])
    if cov.ndim == 0:
        return np.eye(d) * cov
    if cov.ndim == 1:
        return np.diag(cov)
    return cov


def mahalanobis(model, X, c):
    L = np.linalg.cholesky(full_covariance(model, c))
    z = np.linalg.solve(L, (X - np.asarray(model["means"][c])).T)
    return np.sqrt((z * z).sum(axis=0))


class Score(GmmTest):
    def test_matches_sklearn(self):
        X, k = make_dataset("overlapping")
        # Points far out as well: scoring is for anomalies.
        rng = np.random.default_rng(3)
        X = np.vstack([X, rng.normal(0, 40, size=(200, X.shape[1]))])
        for covariance_type in COVARIANCE_TYPES:
            with self.subTest(covariance_type=covariance_type):
                model = self.fit(X, "-k", k, "--covariance", covariance_type)
                data, out = self.path("X.csv"), self.path("scores.csv")
                run("gmm", "score", "--model", self.path("model.json"), "--input", data,
                    "-o", out, "--responsibilities")
                with open(out) as f:
                    rows = list(csv.reader(f))
                self.assertEqual(rows[0], ["log_likelihood", "component", "mahalanobis"] +
                                 [f"p{c}" for c in range(k)])
                self.assertEqual(len(rows) - 1, len(X))
                values = np.array(rows[1:], dtype=float)

                gm = sklearn_model(model)
                expected_ll = gm.score_samples(X)
                np.testing.assert_allclose(values[:, 0], expected_ll, rtol=1e-12, atol=1e-12)
                expected_component = gm.predict(X)
                np.testing.assert_array_equal(values[:, 1].astype(int), expected_component)
                expected_distance = np.array(
                    [mahalanobis(model, X[i:i + 1], c)[0] for i, c in enumerate(expected_component)])
                np.testing.assert_allclose(values[:, 2], expected_distance, rtol=1e-10)
                np.testing.assert_allclose(values[:, 3:], gm.predict_proba(X), rtol=1e-10,
                                           atol=1e-14)
                self.assertAlmostEqual(model["mean_log_likelihood"], gm.score(X),
                                       delta=1e-9)

    def test_stdout_and_header_check(self):
        X, k = make_dataset("separated")
        self.fit(X, "-k", k)
        # Without -o the scores go to stdout.
        proc = run("gmm", "score", "--model", self.path("model.json"), "--input",
                   self.path("X.csv"))
        lines = proc.stdout.splitlines()
        self.assertEqual(lines[0], "log_likelihood,component,mahalanobis")
        self.assertEqual(len(lines), len(X) + 1)
        # A header that names other features is refused; no header is fine.
        other = self.path("other.csv")
        with open(other, "w") as f:
            f.write("f1,f0\n1,2\n")
        proc = run("gmm", "score", "--model", self.path("model.json"), "--input", other,
                   check=False)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn(f"{other}:1:", proc.stderr)
        plain = self.path("plain.csv")
        write_csv(plain, X[:5], header=False)
        proc = run("gmm", "score", "--model", self.path("model.json"), "--input", plain)
        self.assertEqual(len(proc.stdout.splitlines()), 6)


if __name__ == "__main__":
    unittest.main()
