#!/usr/bin/env bash
# The default test tier on the newest numba, numpy and jax the package index has, whatever
# pyproject.toml's upper bounds say: run by hand (say monthly, or when numba releases) to learn
# whether an upper bound can be raised, which is then a one-line change of pyproject.toml.
#
#   benchmarks/newest.sh [pytest arguments]       e.g. benchmarks/newest.sh -n 2
#
# A fresh virtual environment under /tmp (removed at the end unless KEEP=1) gets dyn's
# dependencies within their bounds, then the newest numba, numpy, jax and jaxlib pip can install
# together (the bounds lifted for these four), and an empty numba cache of its own. It prints the
# versions it found, then runs the default tier on this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d /tmp/dyn-newest.XXXXXX)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install -q -e '.[test]'
"$venv/bin/pip" install -q --upgrade --upgrade-strategy eager numba llvmlite numpy jax jaxlib
"$venv/bin/python" -c 'import numba, numpy, jax, llvmlite
print("newest found: numba", numba.__version__, "llvmlite", llvmlite.__version__,
      "numpy", numpy.__version__, "jax", jax.__version__)'
"$venv/bin/pip" check || echo "pip check: the newest versions break a declared bound (above)"
export NUMBA_CACHE_DIR="$venv/numba-cache"  # another numba's kernels: a cache of their own
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
