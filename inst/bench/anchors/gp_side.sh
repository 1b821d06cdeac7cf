#!/usr/bin/env bash
# GPyTorch and gpukernels on the same GP data in one device call (issue 36):
#   inst/bench/anchors/gp_side.sh ANCHORS [SIZES] [PY_SIZES]
# ANCHORS: a copy of ../shared/anchors (gpytorch/, keops/); SIZES for
# gpukernels (default 2e4,1e5,1e6), PY_SIZES for GPyTorch (default 2e4,1e5:
# at 1e6 one evaluation of its KeOps path takes minutes). Needs Rscript with
# gpukernels, python3 with torch. The tables (tsv) go to $OUT. GP_PY_ARGS: more
# options of gp_gpytorch.py (e.g. "--reps 1 --eval-limit 300" for a 1e6 run).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
anchors="$1"
sizes="${2:-20000,100000,1000000}"
py_sizes="${3:-20000,100000}"
work=/tmp/gp_side         # the data: large, kept out of $OUT
mkdir -p "$work"
Rscript "$here/gp_side.R" data "$work" "$sizes" || exit 1
export PYTHONPATH="$anchors/gpytorch${PYTHONPATH:+:$PYTHONPATH}"
kc="$(mktemp -d)"
CXX=/usr/bin/g++ KEOPS_CACHE_FOLDER="$kc" timeout "${GP_PY_LIMIT:-200}" \
  python3 "$here/gp_gpytorch.py" --data "$work" --sizes "$py_sizes" --keops "$anchors/keops" ${GP_PY_ARGS:-} \
  2>&1 | grep -v Warning | tail -30
Rscript "$here/gp_side.R" time "$work" "$sizes"
[ -n "${OUT:-}" ] && cp "$work"/*.tsv "$OUT"/
