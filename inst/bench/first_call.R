# A process's first large call against its later ones: pdist L1 float32 of
# 5e4 PCFs (pcf_draw.R), in memory or to a float file in the working
# directory, on the first GPU_COUNT GPUs, or in memory by GPU_COUNT future
# workers (plan(multisession), no-delay sockets) with a GPU each. The first
# call pays what the engine keeps between calls (page-locked staging, device
# buffers); a fresh process per run, so that the first call is a first call.
# A small call before (the GPU's context, the compiled kernels; the workers'
# package) is not measured. For comparing builds:
#   for r in 1 2; do for b in before after; do
#     R_LIBS=/tmp/$b Rscript inst/bench/first_call.R memory 1; done; done
# Arguments: memory|file|workers, GPU count (1); GK_BENCH_X: an .rds of the PCFs.
suppressPackageStartupMessages(library(gpukernels))
args <- commandArgs(trailingOnly = TRUE)
kind <- if (length(args) >= 1) args[1] else "memory"
gpus <- seq_len(if (length(args) >= 2) as.integer(args[2]) else 1L)
stopifnot(kind %in% c("memory", "file", "workers"), gk_has_gpu(), nrow(gk_info()$devices) >= length(gpus))
n <- 5e4
cache <- Sys.getenv("GK_BENCH_X")
X <- if (nzchar(cache) && file.exists(cache)) readRDS(cache) else {
  source(file.path("inst", "bench", "pcf_draw.R"))
  draw_pcfs(n)
}
base <- file.path(getwd(), "first_call")
one_call <- function(fns) {
  gc(FALSE)
  t <- system.time(suppressWarnings(
    if (kind == "workers") pcf_pdist(fns, precision = "single", workers = length(gpus))
    else if (kind == "memory") pcf_pdist(fns, precision = "single", devices = gpus, workers = 1)
    else pcf_dist_file(fns, file = base, file_type = "float", precision = "single",
                       overwrite = TRUE, devices = gpus, workers = 1)))[["elapsed"]]
  unlink(paste0(base, c(".bin", ".desc")))
  t
}
if (kind == "workers") {
  stopifnot(requireNamespace("future", quietly = TRUE))
  Sys.setenv(R_LIBS = paste(.libPaths(), collapse = .Platform$path.sep))   # the workers' library
  options(socketOptions = "no-delay")
  future::plan(future::multisession, workers = length(gpus))
}
one_call(X[1:2000])
seconds <- vapply(1:4, function(i) one_call(X), 0)
# Throughput: the result's values written (one triangle of n x n), per second.
values <- n * (n - 1) / 2
cat(sprintf("%-7s %d GPU  n = %g  %s\n", kind, length(gpus), n, format(Sys.time(), "%H:%M:%S")))
cat(sprintf("%-6s %8s %12s %16s\n", "call", "s", "Gvalues/s", "vs later median"))
for (i in seq_along(seconds))
  cat(sprintf("%-6d %8.2f %12.2f %16.2f\n", i, seconds[i], values / seconds[i] / 1e9,
              seconds[i] / median(seconds[-1])))
