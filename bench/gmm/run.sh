#!/usr/bin/env bash
# Reproduces docs/GMM.md "Performance": `eacgm gmm fit` (the whole process, CSV parse included)
# against scikit-learn's GaussianMixture.fit on 200,000 x 4 samples with 5 full-covariance
# components, and the scoring rate of `eacgm gmm score`.
#
#   bench/gmm/run.sh [path/to/eacgm] [bench.py options: --runs N --rows N --score-rows N --threads N]
#
# Needs Debian's python3.11 with python3-sklearn and python3-numpy (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
eacgm=${1:-${EACGM_BIN:-build/eacgm}}
[ $# -gt 0 ] && shift
if [ ! -x "$eacgm" ]; then
  echo "run.sh: no eacgm binary at '$eacgm' (build it, or pass its path)" >&2
  exit 2
fi
# On some processors this environment sets OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE (older
# OpenBLAS builds misbehave on them); they slow a current numpy down. Unset both, for this
# command only, so that scikit-learn runs as fast as it can here.
exec env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3.11 bench/gmm/bench.py \
  --eacgm "$eacgm" "$@"
