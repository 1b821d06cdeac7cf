#!/usr/bin/env bash
# Side by side with the anchors (KeOps 2.3, masspcf 0.4) on the same data in
# one device call: data.R writes the arrays, anchors.py times the anchors,
# gpukernels.R times this package and prints the merged table. README.md in
# this folder gives the device invocation and what to carry.
#
#   inst/bench/anchors/run.sh [--anchors DIR] [--parts keops,masspcf] [--work DIR]
#                             [--skip-masspcf-build] [--reps N]
#
# --anchors  a copy of ../shared/anchors (keops/keopscore, keops/pykeops,
#            masspcf/); default $GK_ANCHORS or ../anchors beside the checkout.
# --parts    keops, masspcf or both (default both; masspcf's build takes about
#            4 minutes, so a KeOps-only call fits in 10 minutes); knn: KeOps'
#            and gpukernels' knn cases alone (k = 1, 10, 32, 100).
# --work     data, logs and the table (default $OUT/anchors or /tmp/gk-anchors).
# --build    where masspcf is built (default ../anchors-build beside the
#            checkout: an ignored folder that survives calls on a warm machine).
# --skip-masspcf-build  use the modules already in the build folder.
# --build-only  build masspcf and stop (a call that overlaps the build with
#            other work; a later call on the warm machine times it).
# Needs Rscript with gpukernels installed; python3 with numpy (and torch for
# KeOps). Whatever is missing is reported, and its part skipped.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
anchors="${GK_ANCHORS:-$repo/../anchors}"
parts="keops,masspcf"
work="${OUT:+$OUT/anchors}"
work="${work:-/tmp/gk-anchors}"
build="$repo/../anchors-build"
skip_build=0
build_only=0
reps="${REPS:-5}"
while [ $# -gt 0 ]; do
  case "$1" in
    --anchors) anchors="$2"; shift 2 ;;
    --parts) parts="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --skip-masspcf-build) skip_build=1; shift ;;
    --build-only) build_only=1; shift ;;
    --reps) reps="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
export REPS="$reps"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
data="$work/data"
rm -rf "$data"
mkdir -p "$data"
log="$work/log"
mkdir -p "$log"
say() { echo "[anchors $(date +%H:%M:%S)] $*"; }

command -v Rscript >/dev/null || { echo "Rscript not found (. .device/setup-r.sh first)" >&2; exit 1; }
Rscript -e 'library(gpukernels)' >/dev/null 2>&1 || { echo "gpukernels is not installed for Rscript" >&2; exit 1; }
have_python=1
python3 -c 'import numpy' 2>/dev/null || { say "python3 with numpy not found: the anchors are skipped"; have_python=0; }

say "data ($parts) -> $data"
Rscript "$here/data.R" "$data" "$parts" > "$log/data.log" 2>&1 || { tail -20 "$log/data.log"; exit 1; }

masspcf_py=""
case ",$parts," in *,masspcf,*)
  if [ ! -f "$anchors/masspcf/CMakeLists.txt" ]; then
    say "masspcf sources not found under $anchors/masspcf: masspcf skipped"
  else
    mkdir -p "$build"
    build="$(cd "$build" && pwd)"
    modules() { find "$build/cmake" -maxdepth 3 -name "_mpcf_$1*.so" 2>/dev/null; }
    if [ "$skip_build" = 0 ] || [ -z "$(modules cuda)" ]; then
      say "building masspcf for sm_90 in $build (about 4 minutes)"
      # A copy of the sources with two settings changed: the plain CMake build
      # forces CMAKE_CUDA_ARCHITECTURES=native and the C++ tester (googletest
      # is not in the copy); build sm_90 only, without the tester.
      rm -rf "$build/src"
      mkdir -p "$build/src"
      cp -r "$anchors/masspcf/." "$build/src/"
      sed -i -e 's/set(CMAKE_CUDA_ARCHITECTURES native)/set(CMAKE_CUDA_ARCHITECTURES 90)/' \
             -e 's/set(BUILD_TESTER ON)/set(BUILD_TESTER OFF)/' "$build/src/CMakeLists.txt"
      # KeOps' pitfall applies here too: the machine's CXX wrapper links a
      # static libstdc++ into shared objects, which then crash beside torch.
      # Its CMakeLists.txt also prefers a pip-installed toolkit (torch's
      # nvidia/cu13, which has no nvcc) unless CUDAToolkit_ROOT is given: name
      # the toolkit of the nvcc on the PATH.
      nvcc_path="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
      cuda_root="$(cd "$(dirname "$nvcc_path")/.." && pwd)"
      ( cd "$build" && CXX=/usr/bin/g++ CC=/usr/bin/gcc SKIP_STUBGEN=1 SKIP_BACK_COPY=1 \
          CUDAToolkit_ROOT="$cuda_root" CUDACXX="$nvcc_path" \
          cmake -S src -B cmake -G Ninja -DCMAKE_BUILD_TYPE=Release \
            -DCUDAToolkit_ROOT="$cuda_root" -DCMAKE_CUDA_COMPILER="$nvcc_path" \
            -DCMAKE_CUDA_ARCHITECTURES=90 -DPython_EXECUTABLE="$(command -v python3)" \
          && cmake --build cmake -j "$(nproc)" ) > "$log/masspcf-build.log" 2>&1 \
        || { say "masspcf build failed (tail of $log/masspcf-build.log):"; tail -30 "$log/masspcf-build.log"; }
    fi
    if [ -n "$(modules cuda)" ]; then
      # The package folder with its modules, under a parent that also holds a
      # stub _gpu_detect: masspcf's own detection scans /sys/class/drm, finds
      # no NVIDIA device in the VM and would load the CPU module.
      masspcf_py="$build/py"
      rm -rf "$masspcf_py"
      mkdir -p "$masspcf_py"
      cp -r "$anchors/masspcf/masspcf" "$masspcf_py/"
      cp $(modules cuda) $(modules cpu) "$masspcf_py/masspcf/"
      cat > "$masspcf_py/_gpu_detect.py" <<'PY'
# Stub for masspcf's GPU detection (its sysfs scan finds no GPU in this VM).
def detect_nvidia_gpus():
    return [{"name": "NVIDIA GPU"}]
def has_nvidia_gpu():
    return True
def nvidia_gpu_count():
    return 1
PY
    else
      say "no built masspcf CUDA module in $build/cmake: masspcf skipped"
    fi
  fi ;;
esac

if [ "$build_only" = 1 ]; then
  say "build only: stopping here"
  exit 0
fi

if [ "$have_python" = 1 ]; then
  keops_cache="$(mktemp -d "$work/keops-cache.XXXXXX")"
  say "anchors ($parts), KeOps cache $keops_cache"
  # KeOps builds its JIT library with $CXX: the system g++, and a fresh cache
  # (a library built by the machine's wrapper keeps crashing once cached).
  CXX=/usr/bin/g++ KEOPS_CACHE_FOLDER="$keops_cache" \
    python3 "$here/anchors.py" --data "$data" --parts "$parts" --keops "$anchors/keops" \
      --masspcf "$masspcf_py" --reps "$reps" 2>&1 | tee "$log/anchors.log"
else
  printf 'case\tanchor\tseconds\tnote\n' > "$data/anchor_times.tsv"
fi

say "gpukernels ($parts)"
Rscript "$here/gpukernels.R" "$data" "$parts" 2>&1 | tee "$log/gpukernels.log"
cp "$data/table.md" "$work/table.md" 2>/dev/null
# The data files are large: keep only the small ones with the results.
find "$data" -type f \( -name '*.f64' -o -name '*.i32' \) ! -name 'anchor_*' -delete
say "table in $work/table.md"
