"""Check (2) against scikit-learn: each from its own initialisation (sklearn: k-means; ours:
k-means++ then Lloyd, from --seed), the mean log-likelihood `eacgm gmm fit` reaches on the
training data is at least sklearn's minus 0.01, for every covariance type on every dataset and a
few seeds, with the same number of components, n_init, max_iter, tol and reg_covar."""
import os
import sys
import unittest
import warnings

from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gmm_testlib import COVARIANCE_TYPES, DATASETS, GmmTest, make_dataset  # noqa: E402

SLACK = 0.01
SEEDS = (0, 1, 2)


class OwnInitialisation(GmmTest):
    def test_at_least_as_good(self):
        for name in DATASETS:
            X, k = make_dataset(name)
            for covariance_type in COVARIANCE_TYPES:
                for seed in SEEDS:
                    with self.subTest(name=name, covariance_type=covariance_type, seed=seed):
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore", ConvergenceWarning)
                            sk = GaussianMixture(k, covariance_type=covariance_type,
                                                 random_state=seed).fit(X)
                        ours = self.fit(X, "-k", k, "--covariance", covariance_type,
                                        "--seed", seed)
                        sk_score = sk.score(X)
                        self.assertGreaterEqual(
                            ours["mean_log_likelihood"], sk_score - SLACK,
                            f"{name}/{covariance_type}/seed {seed}: ours "
                            f"{ours['mean_log_likelihood']:.6f}, sklearn {sk_score:.6f}")


if __name__ == "__main__":
    unittest.main()
