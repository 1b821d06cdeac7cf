# Benchmark of the distributed paths (issues 15 and 37): pdist L1 float32 of
# n = 5e4 PCFs (a 10 GB `dist`) on 1, 2, ... GPUs of this machine:
#   - in-process: one GPU, then devices = 1:G for G = 2, 4, ... up to all;
#   - G future workers (plan(multisession), `workers = G`) with one GPU each,
#     handing their blocks over in place (this process writes them into its
#     result from the workers' shared staging); and the same plan with the
#     default `workers`, which keeps
#     the call in this process on all its GPUs;
#   - the full symmetric matrix as a float file (pcf_dist_file()), on one
#     and on G GPUs in-process, under plan(multisession) (which leaves the
#     file to this process) and by G workers of plan(cluster) on localhost
#     (GK_BENCH_FILE=0 leaves it out; the file goes to GK_BENCH_DIR, by
#     default tempdir(); medians of the same reps: a call's first writes of
#     fresh memory can be slower by a second);
#   - optional: results through the futures' sockets (GK_BENCH_SOCKETS=1),
#     pcf_knn k = 10 at n = 2e5 (GK_BENCH_KNN=1).
# GK_BENCH_GPUS / GK_BENCH_WORKERS ("1 2 4", or "none"): the in-process GPU
# counts and worker counts to run (default: 1, 2, 4, ... up to all GPUs); GK_BENCH_BASE
# (seconds): the 1 GPU time to compare against instead of measuring it;
# GK_BENCH_X (a file): the drawn PCFs, read from it or saved there.
# Workers are started (plan(multisession)) and warmed before any timing:
# the times are those of calls on running workers. For each count, the
# future package's own cost is printed first: launching that many empty
# futures and their round trip.
# Each row prints as it is measured: the setup, the median time of `reps`
# after a warm-up (workers warmed too: package, CUDA context), the speed-up
# against one GPU in-process, and the pairs per second. The engine's progress
# lines of one more run per setup say where the time goes (GPU, host packing
# and scatter per GPU; for workers: result and inputs ready, the workers' own time and
# their waits for free slots, this process's scatter, and how long starting
# and warming the workers took).
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
flag <- function(name, default = "0") identical(Sys.getenv(name, default), "1")
ngpu <- if (gk_has_gpu()) nrow(gk_info()$devices) else 0L
backend <- if (ngpu > 0) "gpu" else "cpu"
# The host threads the engines use (OMP_NUM_THREADS bounds them): too few
# for the GPUs' packing and result writes show as their waits for the host.
cat("devices:", ngpu, "GPU(s); backend", backend, "; cores", parallel::detectCores(),
    "; host threads", asNamespace("gpukernels")$gk_cpu_threads(),
    "; date", format(Sys.time(), "%Y-%m-%d %H:%M"), "\n")
if (ngpu > 0) print(gk_info()$devices[, intersect(c("name", "memory_gb", "free_gb"),
                                                   names(gk_info()$devices))])
n_pdist <- as.numeric(Sys.getenv("GK_BENCH_N", if (quick) 2000 else 5e4))
n_knn <- if (quick) 3000 else 2e5
reps <- as.integer(Sys.getenv("GK_BENCH_REPS", if (quick) 1 else 3))
counts <- if (ngpu >= 2) unique(c(2L ^ seq_len(floor(log2(ngpu))), ngpu)) else 2L
listed <- function(name, default) {
  v <- Sys.getenv(name)
  if (identical(v, "none")) return(integer(0))
  if (nzchar(v)) as.integer(strsplit(v, "[ ,]+")[[1]]) else default
}
gpu_counts <- setdiff(listed("GK_BENCH_GPUS", c(1L, if (ngpu >= 2) counts)), 1L)
worker_counts <- listed("GK_BENCH_WORKERS", counts)
base_given <- as.numeric(Sys.getenv("GK_BENCH_BASE", NA))
out_dir <- Sys.getenv("GK_BENCH_DIR", tempdir())
with_file <- flag("GK_BENCH_FILE", "1") && requireNamespace("bigmemory", quietly = TRUE)
if (with_file) cat("files in", out_dir, ":", system2("df", c("-hT", shQuote(out_dir)), stdout = TRUE)[2], "\n")
pairs <- n_pdist * (n_pdist - 1) / 2

median_time <- function(f, reps) {
  times <- vapply(seq_len(reps), function(i) { gc(FALSE); system.time(f())[["elapsed"]] }, 0)
  if (reps > 1) cat("  reps:", sprintf("%.3f", times), "\n")
  median(times)
}
rows <- list()
report <- function(setup, seconds, base = NA, note = "") {
  if (is.na(base)) base <- one
  row <- data.frame(case = "pdist L1 single", n = n_pdist, setup = setup,
                    seconds = round(seconds, 2), speedup_vs_1gpu = round(base / seconds, 2),
                    gpairs_per_s = signif(pairs / seconds / 1e9, 3), note = note)
  print(row, row.names = FALSE)
  rows[[length(rows) + 1L]] <<- row
}
# One more run with the engine's progress lines (where the time goes);
# GK_BENCH_LINES=workers: for the workers' rows only.
phases <- function(f, workers = FALSE) {
  if (!workers && identical(Sys.getenv("GK_BENCH_LINES"), "workers")) return(invisible())
  gc(FALSE)   # as before the timed runs: else the timeline starts with freeing the last result
  options(gpukernels.progress = TRUE)
  # To the console: with progressr installed the engine's lines go to its
  # handlers, which show nothing in a script.
  state <- asNamespace("gpukernels")$gk_state
  routed <- state$progressr
  state$progressr <- FALSE
  on.exit({
    options(gpukernels.progress = FALSE)
    state$progressr <- routed
  })
  invisible(f())
}

x_file <- Sys.getenv("GK_BENCH_X")
n_draw <- if (flag("GK_BENCH_KNN")) max(n_pdist, n_knn) else n_pdist
X <- if (nzchar(x_file) && file.exists(x_file)) readRDS(x_file) else draw_pcfs(n_draw)
if (length(X) < n_draw) X <- draw_pcfs(n_draw)
if (nzchar(x_file) && !file.exists(x_file)) saveRDS(X, x_file, compress = FALSE)
Xp <- X[seq_len(n_pdist)]
options(gpukernels.progress = FALSE)
pdist <- function(...) suppressWarnings(pcf_pdist(Xp, precision = "single", backend = backend, ...))
invisible(suppressWarnings(pcf_pdist(X[seq_len(min(2000, length(X)))], precision = "single", backend = backend, workers = 1)))  # warm-up

# 1. in-process: one GPU, then G GPUs
one_dev <- if (ngpu) 1L
one <- NA
if (is.na(base_given)) {
  one <- median_time(function() pdist(devices = one_dev, workers = 1), reps)
  report(if (ngpu) "1 GPU in-process" else "CPU in-process", one, one)
  phases(function() pdist(devices = one_dev, workers = 1))
} else {
  one <- base_given
  cat("1 GPU in-process: not measured,", one, "s given (GK_BENCH_BASE)\n")
}
file_base <- file.path(out_dir, "gk_bench_pdist")
to_file <- function(...) {
  on.exit(unlink(paste0(file_base, c(".bin", ".desc"))))
  suppressWarnings(pcf_dist_file(Xp, file = file_base, file_type = "float", precision = "single",
                backend = backend, overwrite = TRUE, ...))
  invisible()
}
if (with_file && is.na(base_given)) {
  one_file <- median_time(function() to_file(devices = one_dev, workers = 1), reps)
  report(paste(if (ngpu) "1 GPU" else "CPU", "in-process, file (float)"), one_file,
         note = "full symmetric matrix")
}
with_file <- with_file && exists("one_file")   # the file rows compare with one_file
if (ngpu >= 2) {
  for (g in gpu_counts) {
    t <- median_time(function() pdist(devices = seq_len(g), workers = 1), reps)
    report(paste(g, "GPUs in-process"), t, one)
    phases(function() pdist(devices = seq_len(g), workers = 1))
    if (with_file) {   # one mapping of the file, for the workers' rows
      t <- median_time(function() to_file(devices = seq_len(g), workers = 1), reps)
      report(paste(g, "GPUs in-process, file (float)"), t, one,
             sprintf("full symmetric matrix; %.2fx vs 1 GPU to a file", one_file / t))
    }
  }
}

# 2. G future workers, one GPU each, writing into the shared result. The
# connections to the workers are made with R's socket options at plan()
# time: with options(socketOptions = "no-delay") this session's end sends
# each future at once instead of waiting on the worker's delayed ACK (Linux:
# 40 ms). GK_BENCH_NODELAY: "both" (default), "0" (R's default) or "1".
socket_modes <- switch(Sys.getenv("GK_BENCH_NODELAY", "both"), "0" = FALSE, "1" = TRUE, c(FALSE, TRUE))
for (g in worker_counts) for (no_delay in socket_modes) {
  sockets <- options(socketOptions = if (no_delay) "no-delay")
  label <- paste0(g, " workers x 1 GPU", if (no_delay) ", no-delay")
  started <- system.time(future::plan(future::multisession, workers = g))[["elapsed"]]
  # Warm the workers: package, CUDA context (one GPU each); the first call
  # pays them, the second shows what a warm call of the same size costs.
  warm <- vapply(1:2, function(w) system.time(invisible(suppressWarnings(
    pcf_pdist(X[1:(200 * g)], precision = "single", backend = backend, workers = g))))[["elapsed"]], 0)
  cat(sprintf("%s: started %.2f s, first small call %.2f s (package, GPU context), second %.2f s\n",
              label, started, warm[1], warm[2]))
  # The future package's own cost on running workers: g empty futures
  # launched (as gk_run_tasks launches them), then resolved (median of 5).
  empty <- function() {
    t0 <- proc.time()[["elapsed"]]
    fs <- lapply(seq_len(g), function(k) future::future(NULL, globals = FALSE, seed = NULL,
                                                        lazy = FALSE))
    t1 <- proc.time()[["elapsed"]]
    invisible(future::value(fs))
    c(t1 - t0, proc.time()[["elapsed"]] - t0)
  }
  cost <- apply(vapply(1:5, function(i) empty(), numeric(2)), 1, median)
  cat(sprintf("%s: future's own cost: %d empty futures launched in %.3f s, resolved after %.3f s\n",
              label, g, cost[1], cost[2]))
  t <- median_time(function() pdist(workers = g), reps)
  report(paste0(label, ", shared memory"), t, one, "blocks handed over in place")
  phases(function() pdist(workers = g), workers = TRUE)
  t <- median_time(function() pdist(), reps)
  report(paste0(label, ", default workers"), t, one,
         sprintf("this process, all %d GPUs", max(ngpu, 1L)))
  if (flag("GK_BENCH_SOCKETS")) {
    options(gpukernels.future_shared = FALSE)
    t <- median_time(function() pdist(workers = g), 1)
    report(paste0(label, ", through futures"), t, one, "data and results by socket")
    options(gpukernels.future_shared = TRUE)
  }
  if (with_file) {
    # Under a plan of this machine alone the file is written by this process
    # on all its GPUs; workers of a cluster plan (here on localhost) write it.
    t <- median_time(function() to_file(), reps)
    report(paste0(label, ", file (float), this process"), t, one,
           sprintf("full symmetric matrix; %.2fx vs 1 GPU to a file", one_file / t))
    future::plan(future::cluster, workers = g)
    invisible(suppressWarnings(pcf_pdist(X[1:(200 * g)], precision = "single", backend = backend)))
    t <- median_time(function() to_file(), reps)
    report(paste0(label, ", file (float), cluster workers"), t, one,
           sprintf("full symmetric matrix; %.2fx vs 1 GPU to a file", one_file / t))
  }
  future::plan(future::sequential)
  options(sockets)
}

# 3. pcf_knn (optional)
if (flag("GK_BENCH_KNN")) {
  Xk <- X[seq_len(n_knn)]
  t <- median_time(function() pcf_knn(Xk, k = 10, precision = "single", backend = backend), 1)
  cat("pcf_knn k = 10, n =", n_knn, "in-process, all GPUs:", round(t, 2), "s\n")
  future::plan(future::multisession, workers = max(counts))
  t <- median_time(function() pcf_knn(Xk, k = 10, precision = "single", backend = backend,
                                      workers = max(counts)), 1)
  cat("pcf_knn k = 10, n =", n_knn, max(counts), "workers:", round(t, 2), "s\n")
  future::plan(future::sequential)
}

cat("\nSummary\n")
print(do.call(rbind, rows), row.names = FALSE)
