#!/bin/sh
# One batched run on the GPU machine (see ../shared/device/README.md): the whole
# test suite, the reduction benchmarks and latency, compute-sanitizer. Usage,
# from the device tool with carry [".device"]:
#   . .device/setup-r.sh && sh tools/device-check.sh [tests] [latency] [reduce] [sanitize] [kernels] [h2] [pcf]
#     [blocksparse] [h2compress] [gp] [distributed]
OUT=${OUT:-/tmp/gk-out}
mkdir -p "$OUT"
nvidia-smi -L
git rev-parse --short HEAD 2>/dev/null
for step in "$@"; do
  start=$(date +%s)
  case "$step" in
    tests)    # files 8 at once (GK_TEST_JOBS); with 4 GPUs or more, those that run
              # alone beside them on GPUs and cores of their own (tools/run-tests.R)
              GK_TEST_JOBS=${GK_TEST_JOBS:-8} Rscript tools/run-tests.R > "$OUT/tests.log" 2>&1
              tail -3 "$OUT/tests.log" ;;
    latency)  Rscript inst/bench/reduce_latency.R 2>&1 | tee "$OUT/latency.log" ;;
    reduce)   Rscript inst/bench/reduce.R 2>&1 | tee "$OUT/reduce.log" | tail -30 ;;
    h2)       Rscript inst/bench/h2.R 2>&1 | tee "$OUT/h2.log" | tail -30 ;;
    pcf)      Rscript inst/bench/pcf.R 2>&1 | tee "$OUT/pcf.log" | tail -30 ;;
    blocksparse) Rscript inst/bench/blocksparse.R 2>&1 | tee "$OUT/blocksparse.log" | tail -30 ;;
    h2compress) Rscript inst/bench/h2.R 20 onlycompress 2>&1 | tee "$OUT/h2compress.log" | tail -30 ;;
    gp)       GK_BENCH_BUDGET=400 Rscript inst/bench/gp.R 2>&1 | tee "$OUT/gp.log" | tail -30 ;;
    distributed) Rscript inst/bench/distributed.R 2>&1 | tee "$OUT/distributed.log" | tail -30 ;;
    sanitize) compute-sanitizer --leak-check full --error-exitcode 3 Rscript tools/sanitize.R \
                > "$OUT/sanitize.log" 2>&1; echo "sanitizer rc $?"; tail -5 "$OUT/sanitize.log" ;;
    kernels)  # GPU time of each kernel of two small reductions (nsys is not on that machine).
              ncu --metrics gpu__time_duration.sum Rscript -e 'library(gpukernels)
                x <- matrix(runif(3e4), 1e4, 3); b <- runif(1e4)
                for (p in c("single", "double"))
                  kernel_matvec(x, x, b, gk_kernel("gaussian", range = 0.1), precision = p)' \
                > "$OUT/kernels.log" 2>&1
              grep -E "reduce_tiles|combine_chunks|gpu__time" "$OUT/kernels.log" ;;
  esac
  echo "[$step: $(( $(date +%s) - start )) s]"
done
