# Benchmark of the PCF engine: pcf_pdist (L1) and the L2 kernel, end to end
# from R (the call returns once the dist object is filled), on random PCFs
# drawn as masspcf's own benchmark draws them: breakpoint count uniform on
# 10..1000, times 0 followed by sorted |N(0,1)|, all scaled by one |N(0,1)| per
# function, values N(0,1), last value 0.
#   Rscript inst/bench/pcf.R          single-GPU table (+ CPU at n = 5e3)
#   Rscript inst/bench/pcf.R multi    1 GPU vs all GPUs, pdist L1 float32
#   Rscript inst/bench/pcf.R quick    small sizes, for a machine without a GPU
library(gpukernels)
args <- commandArgs(trailingOnly = TRUE)
mode <- if (length(args)) args[1] else "full"

source(file.path(local({
  file <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  if (length(file)) dirname(file[1]) else "inst/bench"
}), "pcf_draw.R"))

# masspcf 0.4 on the same H100 (seconds), from the issue.
masspcf <- c("pdist/single/50000/gpu" = 12.9, "pdist/double/20000/gpu" = 4.4,
             "pdist/double/5000/cpu" = 6.6)

time_median <- function(f, reps) {
  times <- vapply(seq_len(reps), function(i) {
    gc(FALSE)
    system.time(f())[["elapsed"]]
  }, 0)
  median(times)
}

rows <- list()
run_case <- function(X, op, precision, backend, reps, devices = NULL, label = backend) {
  n <- length(X)
  lens <- vapply(X, nrow, 1L)
  f <- switch(op,
    pdist = function() pcf_pdist(X, p = 1, precision = precision, backend = backend, devices = devices),
    kernel = function() pcf_kernel(X, precision = precision, backend = backend, devices = devices))
  if (op == "pdist") { pairs <- n * (n - 1) / 2; steps <- (n - 1) * sum(as.numeric(lens)) }
  else { pairs <- n * (n + 1) / 2; steps <- (n + 1) * sum(as.numeric(lens)) }
  seconds <- time_median(f, reps)
  key <- paste(op, precision, format(n, scientific = FALSE), backend, sep = "/")
  ref <- if (key %in% names(masspcf)) masspcf[[key]] else NA
  threads <- if (backend == "cpu") gpukernels:::gk_cpu_threads() else NA
  peak <- if (precision == "single") 61e12 / 2 else 33.3e12 / 2   # FMA/s
  row <- data.frame(op = if (op == "pdist") "pdist L1" else "l2 kernel", precision = precision,
                    n = n, backend = label, seconds = seconds, pairs_per_s = pairs / seconds,
                    steps_per_s = steps / seconds,
                    steps_per_s_thread = if (is.na(threads)) NA else steps / seconds / threads,
                    pct_fma_peak = if (backend == "gpu") 100 * steps / seconds / peak else NA,
                    masspcf_s = ref, speedup_vs_masspcf = ref / seconds)
  print(row, row.names = FALSE, digits = 3)
  rows[[length(rows) + 1L]] <<- row
  invisible(row)
}

options(gpukernels.progress = FALSE)
print(gk_info())
if (mode == "quick") {
  X <- draw_pcfs(600)
  run_case(X, "pdist", "double", "cpu", 3)
  run_case(X, "pdist", "single", "cpu", 3)
} else if (mode == "multi") {
  X <- draw_pcfs(5e4)
  ngpu <- nrow(gk_info()$devices)
  run_case(X[1:2000], "pdist", "single", "gpu", 1)     # warm-up
  run_case(X, "pdist", "single", "gpu", 2, devices = 1, label = "gpu x1")
  run_case(X, "pdist", "single", "gpu", 2, devices = seq_len(ngpu), label = paste0("gpu x", ngpu))
} else {
  sizes <- c(5e3, 2e4, 5e4)
  X <- draw_pcfs(max(sizes))
  run_case(X[1:2000], "pdist", "single", "gpu", 1)     # warm-up
  for (n in sizes) {
    reps <- if (n >= 5e4) 2 else 3
    for (precision in c("single", "double")) run_case(X[seq_len(n)], "pdist", precision, "gpu", reps)
  }
  for (n in c(5e3, 2e4)) for (precision in c("single", "double"))
    run_case(X[seq_len(n)], "kernel", precision, "gpu", 2)
  run_case(X[1:5000], "pdist", "double", "cpu", 1)
  run_case(X[1:5000], "pdist", "single", "cpu", 1)
  cat("\nWhere the time goes at n = 5e4, single (progress lines):\n")
  options(gpukernels.progress = TRUE)
  print(system.time(pcf_pdist(X, precision = "single")))
  options(gpukernels.progress = FALSE)
}
cat("\nSummary\n")
print(do.call(rbind, rows), row.names = FALSE, digits = 3)
