"""Shared helpers for the scikit-learn comparisons of `eacgm gmm`: generated datasets, CSV and
model files in both directions, and running the real binary (path from $EACGM_BIN).

Run with Debian's Python (/usr/bin/python3.11), which has python3-sklearn and python3-numpy."""
import json
import os
import subprocess
import tempfile
import unittest

import numpy as np

EACGM = os.environ.get("EACGM_BIN", "build/eacgm")
COVARIANCE_TYPES = ("full", "diag", "spherical")


DATASETS = ("separated", "overlapping", "anisotropic", "offset")


def make_dataset(name):
    """(X, k): a few shapes of data, each from a fixed seed."""
    rng = np.random.default_rng(DATASETS.index(name) + 1)
    if name == "separated":  # three far-apart blobs, 2-D
        k, d, n = 3, 2, 3000
        means = np.array([[0.0, 0.0], [12.0, 3.0], [-6.0, 11.0]])
        covs = [np.diag(rng.uniform(0.5, 2.0, d)) for _ in range(k)]
    elif name == "overlapping":  # four blobs that overlap, 3-D, correlated
        k, d, n = 4, 3, 4000
        means = rng.normal(0, 1.5, size=(k, d))
        covs = []
        for _ in range(k):
            a = rng.normal(size=(d, d))
            covs.append(a @ a.T * 0.5 + 0.3 * np.eye(d))
    elif name == "anisotropic":  # elongated full-covariance clusters, 4-D
        k, d, n = 5, 4, 5000
        means = rng.normal(0, 6, size=(k, d))
        covs = []
        for _ in range(k):
            a = rng.normal(size=(d, d)) * rng.uniform(0.2, 2.0, size=d)
            covs.append(a @ a.T + 0.1 * np.eye(d))
    elif name == "offset":  # far from the origin with small spread: tests cancellation
        k, d, n = 2, 3, 2000
        means = np.array([[1e4, -2e4, 5e3], [1e4 + 3, -2e4 + 1, 5e3 - 2]])
        covs = [np.diag([0.5, 0.2, 0.8]), np.diag([0.3, 0.6, 0.4])]
    else:
        raise ValueError(name)
    weights = rng.dirichlet(np.full(k, 4.0))
    counts = rng.multinomial(n, weights)
    X = np.vstack([rng.multivariate_normal(means[j], covs[j], size=counts[j]) for j in range(k)])
    rng.shuffle(X)
    return X, k


def write_csv(path, X, header=True):
    with open(path, "w") as f:
        if header:
            f.write(",".join(f"f{j}" for j in range(X.shape[1])) + "\n")
        for row in X:
            f.write(",".join(repr(float(v)) for v in row) + "\n")  # repr: exact round trip


def model_json(weights, means, covariances, covariance_type):
    return {
        "format": "eacgm-gmm",
        "version": 1,
        "covariance_type": covariance_type,
        "weights": np.asarray(weights).tolist(),
        "means": np.asarray(means).tolist(),
        "covariances": np.asarray(covariances).tolist(),  # sklearn's shapes are ours
    }


def run(*args, check=True):
    proc = subprocess.run([EACGM, *map(str, args)], capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"eacgm {' '.join(map(str, args))} exited {proc.returncode}:\n"
                             f"{proc.stdout}{proc.stderr}")
    return proc


class GmmTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(EACGM, os.X_OK):
            raise AssertionError(f"no eacgm binary at {EACGM}: build the eacgm target, or set "
                                 "EACGM_BIN")

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="eacgm-gmm-")
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp, name)

    def fit(self, X, *args, header=True):
        """Runs `eacgm gmm fit` on X; returns the model JSON."""
        data, out = self.path("X.csv"), self.path("model.json")
        write_csv(data, X, header=header)
        run("gmm", "fit", "--input", data, "-o", out, "-q", *args)
        with open(out) as f:
            return json.load(f)
