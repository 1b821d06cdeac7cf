#!/bin/sh
# One batched run on the GPU machine (see ../shared/device/README.md): the whole
# test suite, the reduction benchmarks and latency, compute-sanitizer. Usage,
# from the device tool with carry [".device"]:
#   . .device/setup-r.sh && sh tools/device-check.sh [tests] [latency] [reduce] [sanitize] [profile]
OUT=${OUT:-/tmp/gk-out}
mkdir -p "$OUT"
nvidia-smi -L
git rev-parse --short HEAD 2>/dev/null
for step in "$@"; do
  start=$(date +%s)
  case "$step" in
    tests)    Rscript tools/run-tests.R > "$OUT/tests.log" 2>&1; tail -3 "$OUT/tests.log" ;;
    latency)  Rscript inst/bench/reduce_latency.R 2>&1 | tee "$OUT/latency.log" ;;
    reduce)   Rscript inst/bench/reduce.R 2>&1 | tee "$OUT/reduce.log" | tail -30 ;;
    h2)       Rscript inst/bench/h2.R 2>&1 | tee "$OUT/h2.log" | tail -30 ;;
    pcf)      Rscript inst/bench/pcf.R 2>&1 | tee "$OUT/pcf.log" | tail -30 ;;
    sanitize) compute-sanitizer --leak-check full --error-exitcode 3 Rscript tools/sanitize.R \
                > "$OUT/sanitize.log" 2>&1; echo "sanitizer rc $?"; tail -5 "$OUT/sanitize.log" ;;
    profile)  if command -v nsys >/dev/null; then
                nsys profile -t cuda -o "$OUT/latency" --force-overwrite true \
                  Rscript inst/bench/reduce_latency.R > "$OUT/nsys.log" 2>&1
                nsys stats -r cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum \
                  "$OUT/latency.nsys-rep" > "$OUT/nsys-stats.txt" 2>&1
                rm -f "$OUT/latency.nsys-rep" "$OUT"/latency.sqlite
                head -60 "$OUT/nsys-stats.txt"
              else echo "no nsys"; fi ;;
  esac
  echo "[$step: $(( $(date +%s) - start )) s]"
done
