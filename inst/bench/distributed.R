# Benchmark of the distributed paths (issue 15), for a machine with two GPUs:
#   1. pdist L1 float32, n = 5e4: one GPU in-process; both GPUs in-process
#      (devices = 1:2); two local future workers with one GPU each (in-memory
#      result, which travels back through the workers' sockets); two workers
#      writing a file-backed result. Target: >= 1.8x one GPU.
#   2. pcf_knn, n = 2e5, k = 10 (all GPUs, in-process).
#   3. file-backed pdist, n = 1e5, float storage (20 GB on disk) with the
#      two workers.
# Each row prints as it is measured, with the device, the times (median of
# `reps`) and the speed-up against one GPU; the engine's progress lines for
# the in-process runs say where the host's time goes (upload + kernels vs
# scatter).
#   Rscript inst/bench/distributed.R [quick]   (quick: small sizes, CPU-only machine)
library(gpukernels)
args <- commandArgs(trailingOnly = TRUE)
quick <- length(args) && args[1] == "quick"
stopifnot(requireNamespace("future", quietly = TRUE))

source(file.path(local({
  file <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  if (length(file)) dirname(file[1]) else "inst/bench"
}), "pcf_draw.R"))

# Workers load the package from the same library as this session.
Sys.setenv(R_LIBS = paste(.libPaths(), collapse = .Platform$path.sep))
ngpu <- if (gk_has_gpu()) nrow(gk_info()$devices) else 0L
backend <- if (ngpu > 0) "gpu" else "cpu"
cat("devices:", ngpu, "GPU(s); backend", backend, "; cores", parallel::detectCores(), "\n")
if (ngpu > 0) print(gk_info()$devices)
n_pdist <- if (quick) 2000 else 5e4
n_knn <- if (quick) 3000 else 2e5
n_file <- if (quick) 3000 else 1e5
reps <- if (quick) 1 else 2
workers <- max(2L, ngpu)
out_dir <- Sys.getenv("GK_BENCH_DIR", tempdir())

median_time <- function(f, reps) {
  median(vapply(seq_len(reps), function(i) { gc(FALSE); system.time(f())[["elapsed"]] }, 0))
}
rows <- list()
report <- function(case, n, setup, seconds, base = NA, note = "") {
  row <- data.frame(case = case, n = n, setup = setup, seconds = round(seconds, 3),
                    speedup_vs_1gpu = round(base / seconds, 2), note = note)
  print(row, row.names = FALSE)
  rows[[length(rows) + 1L]] <<- row
}

X <- draw_pcfs(max(n_pdist, n_knn, n_file))
options(gpukernels.progress = FALSE)
invisible(pcf_pdist(X[1:2000], precision = "single", backend = backend, workers = 1))  # warm-up

# 1. pdist L1 float32
Xp <- X[seq_len(n_pdist)]
one <- median_time(function() pcf_pdist(Xp, precision = "single", backend = backend,
                                        devices = if (ngpu) 1, workers = 1), reps)
report("pdist L1 single", n_pdist, if (ngpu) "1 GPU in-process" else "CPU in-process", one, one)
if (ngpu >= 2) {
  t <- median_time(function() pcf_pdist(Xp, precision = "single", devices = seq_len(ngpu),
                                        workers = 1), reps)
  report("pdist L1 single", n_pdist, paste(ngpu, "GPUs in-process"), t, one)
  cat("Where the time goes in-process (progress lines):\n")
  options(gpukernels.progress = TRUE)
  invisible(pcf_pdist(Xp, precision = "single", devices = seq_len(ngpu), workers = 1))
  options(gpukernels.progress = FALSE)
}
future::plan(future::multisession, workers = workers)
invisible(future::value(lapply(seq_len(workers), function(i)
  future::future(library(gpukernels), packages = "gpukernels"))))   # start the workers
t <- median_time(function() pcf_pdist(Xp, precision = "single", backend = backend), reps)
report("pdist L1 single", n_pdist, paste(workers, "workers x 1 GPU, in-memory"), t, one,
       "result travels back through sockets")
f <- file.path(out_dir, "gk_bench_pdist")
t <- median_time(function() pcf_dist_file(Xp, file = f, file_type = "float", precision = "single",
                                          backend = backend, overwrite = TRUE), reps)
report("pdist L1 single", n_pdist, paste(workers, "workers x 1 GPU, file (float)"), t, one,
       "full symmetric matrix written")
unlink(paste0(f, c(".bin", ".desc")))

# 2. pcf_knn, in-process on all GPUs, then over the workers
future::plan(future::sequential)
Xk <- X[seq_len(n_knn)]
t <- median_time(function() pcf_knn(Xk, k = 10, precision = "single", backend = backend), 1)
report("pcf_knn k=10 single", n_knn, paste(max(ngpu, 1), if (ngpu) "GPU(s)" else "CPU", "in-process"), t)
future::plan(future::multisession, workers = workers)
t <- median_time(function() pcf_knn(Xk, k = 10, precision = "single", backend = backend), 1)
report("pcf_knn k=10 single", n_knn, paste(workers, "workers"), t, NA, "each pair computed twice")

# 3. file-backed pdist
f <- file.path(out_dir, "gk_bench_pdist_large")
t <- median_time(function() pcf_dist_file(X[seq_len(n_file)], file = f, file_type = "float",
                                          precision = "single", backend = backend,
                                          overwrite = TRUE), 1)
report("pdist file float", n_file, paste(workers, "workers"), t, NA,
       sprintf("%.1f GB on disk", n_file^2 * 4 / 1e9))
unlink(paste0(f, c(".bin", ".desc")))
future::plan(future::sequential)

cat("\nSummary\n")
print(do.call(rbind, rows), row.names = FALSE)
