"""The GMM benchmark of docs/GMM.md ("Performance"): `eacgm gmm fit` as a whole process (CSV
parse included) against scikit-learn's GaussianMixture.fit on the same data with the same
settings, and the scoring rate of `eacgm gmm score`. It measures; it does not pass or fail.

Run it through bench/gmm/run.sh, which unsets OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE for this
command only (see docs/GMM.md)."""
import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np


def make_data(path, n, seed, header=True):
    """n × 4 samples from 5 Gaussians with full, random covariances (fixed seed)."""
    rng = np.random.default_rng(seed)
    k, d = 5, 4
    setup = np.random.default_rng(42)  # the same mixture for every file
    means = setup.normal(0, 6, size=(k, d))
    covs = []
    for _ in range(k):
        a = setup.normal(size=(d, d))
        covs.append(a @ a.T + 0.5 * np.eye(d))
    weights = setup.dirichlet(np.full(k, 5.0))
    counts = rng.multinomial(n, weights)
    X = np.vstack([rng.multivariate_normal(means[j], covs[j], size=counts[j]) for j in range(k)])
    rng.shuffle(X)
    # Ten significant digits, as measurements usually come.
    np.savetxt(path, X, delimiter=",", fmt="%.10g", header="a,b,c,d" if header else "",
               comments="")
    return X


def cpu_info():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model or platform.processor()}, {os.cpu_count()} CPUs"


def blas_info():
    try:
        from threadpoolctl import threadpool_info
        import sklearn.mixture  # noqa: F401  (loads the libraries threadpoolctl reports)
        return ", ".join(f"{i['internal_api']} {i.get('architecture') or ''} "
                         f"{i['num_threads']} threads".replace("  ", " ")
                         for i in threadpool_info()) or "no threadpool library loaded"
    except ImportError:
        return "threadpoolctl not installed"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--eacgm", required=True, help="the eacgm binary")
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each (median)")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--score-rows", type=int, default=2_000_000)
    parser.add_argument("--threads", type=int, default=0, help="eacgm --threads (0: all)")
    args = parser.parse_args()

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture
    warnings.simplefilter("ignore", ConvergenceWarning)

    settings = dict(k=5, covariance="full", n_init=1, max_iter=100, tol=1e-3, reg_covar=1e-6)
    with tempfile.TemporaryDirectory(prefix="eacgm-gmm-bench-") as tmp:
        data = os.path.join(tmp, "train.csv")
        X = make_data(data, args.rows, seed=1)
        model = os.path.join(tmp, "model.json")
        print(f"machine: {cpu_info()}; load average {os.getloadavg()[0]:.2f} at start")
        print(f"numpy {np.__version__}: {blas_info()}")
        print(f"data: {args.rows} x 4, {os.path.getsize(data) / 1e6:.1f} MB of CSV; "
              f"k={settings['k']} full, n_init=1, max_iter=100, tol=1e-3, reg_covar=1e-6")

        # Interleaved, so that both see the same background load. Wall-clock time, and CPU time
        # (all threads; less sensitive to other work on the machine).
        ours, theirs, our_ll, their_ll, our_iter, their_iter = [], [], [], [], [], []
        our_cpu, their_cpu = [], []

        def children_cpu():
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            return usage.ru_utime + usage.ru_stime

        fit_cmd = [args.eacgm, "gmm", "fit", "--input", data, "-k", str(settings["k"]),
                   "--covariance", "full", "--n-init", "1", "--max-iter", "100", "--tol", "1e-3",
                   "--reg-covar", "1e-6", "--threads", str(args.threads), "-o", model, "-q"]
        for run in range(args.runs):
            start, start_cpu = time.perf_counter(), children_cpu()
            subprocess.run(fit_cmd + ["--seed", str(run)], check=True)
            ours.append(time.perf_counter() - start)
            our_cpu.append(children_cpu() - start_cpu)
            with open(model) as f:
                fitted = json.load(f)
            our_ll.append(fitted["mean_log_likelihood"])
            our_iter.append(fitted["fit"]["n_iter"])

            start, start_cpu = time.perf_counter(), time.process_time()
            gm = GaussianMixture(settings["k"], covariance_type="full", n_init=1, max_iter=100,
                                 tol=1e-3, reg_covar=1e-6, random_state=run).fit(X)
            theirs.append(time.perf_counter() - start)
            their_cpu.append(time.process_time() - start_cpu)
            their_ll.append(gm.score(X))
            their_iter.append(gm.n_iter_)

        ours_s, theirs_s = statistics.median(ours), statistics.median(theirs)
        print()
        print("fit (median of %d runs):" % args.runs)
        print(f"  eacgm gmm fit, whole process: {ours_s * 1e3:8.1f} ms   "
              f"(runs: {', '.join(f'{t * 1e3:.0f}' for t in ours)})")
        print(f"  sklearn GaussianMixture.fit:  {theirs_s * 1e3:8.1f} ms   "
              f"(runs: {', '.join(f'{t * 1e3:.0f}' for t in theirs)})")
        print(f"  ratio: {theirs_s / ours_s:.1f}x")
        our_cpu_s, their_cpu_s = statistics.median(our_cpu), statistics.median(their_cpu)
        print(f"  CPU time (all threads): eacgm {our_cpu_s * 1e3:.1f} ms, sklearn "
              f"{their_cpu_s * 1e3:.1f} ms, ratio {their_cpu_s / our_cpu_s:.1f}x")
        print(f"  mean log-likelihood: eacgm median {statistics.median(our_ll):.5f} "
              f"(min {min(our_ll):.5f}), sklearn median {statistics.median(their_ll):.5f} "
              f"(max {max(their_ll):.5f})")
        print(f"  EM iterations: eacgm {our_iter}, sklearn {their_iter}")

        # Scoring: the rate of the scoring step inside `eacgm gmm score` (--timing), and of the
        # whole process with its CSV input and output.
        score_data = os.path.join(tmp, "score.csv")
        Y = make_data(score_data, args.score_rows, seed=2)
        inside, whole = [], []
        for run in range(args.runs):
            start = time.perf_counter()
            proc = subprocess.run([args.eacgm, "gmm", "score", "--model", model, "--input",
                                   score_data, "-o", os.devnull, "--timing", "--threads",
                                   str(args.threads)], check=True, capture_output=True, text=True)
            whole.append(args.score_rows / (time.perf_counter() - start))
            rate = re.search(r"([0-9.]+) M samples/s", proc.stderr)
            inside.append(float(rate.group(1)) * 1e6)
        start = time.perf_counter()
        gm.score_samples(Y)
        sk_rate = args.score_rows / (time.perf_counter() - start)
        print()
        print(f"score ({args.score_rows} x 4, median of {args.runs} runs):")
        print(f"  eacgm scoring step:            {statistics.median(inside) / 1e6:6.1f} M samples/s")
        print(f"  eacgm gmm score, whole process: {statistics.median(whole) / 1e6:6.1f} M samples/s "
              "(CSV in and out)")
        print(f"  sklearn score_samples:         {sk_rate / 1e6:6.1f} M samples/s")
        print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
