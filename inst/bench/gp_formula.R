# Benchmark of formula kernels in the GP: gp_loglik() with the gradient,
# Matern 3/2 written as a formula against gk_kernel("matern", smoothness =
# 1.5), methods "dense" and "tiled", 2D, warmed up (the first call compiles
# the formula and its derivative), medians of repeated calls. The formula
# pays for a call per pair on the CPU (the built-in kernel is inlined) and
# for its Vecchia factor on the CPU ("tiled"). GPU rows where there is a GPU;
# CPU rows unless GK_BENCH_GP_FORMULA_BACKENDS leaves them out.
library(gpukernels)

bench_dir <- dirname(normalizePath(sub("^--file=", "", grep("^--file=", commandArgs(FALSE),
                                                            value = TRUE)[1L])))
source(file.path(bench_dir, "bench_timing.R"))

builtin <- gk_kernel("matern", range = 0.1, smoothness = 1.5)
formula <- gk_formula((1 + sqrt(sqdist(x, y)) / r) * exp(-sqrt(sqdist(x, y)) / r), r = 0.1)

set.seed(1)
sizes <- as.numeric(strsplit(Sys.getenv("GK_BENCH_GP_FORMULA_N", "2000"), ",")[[1L]])
backends <- intersect(c("cpu", if (gk_has_gpu()) "gpu"),
                      strsplit(Sys.getenv("GK_BENCH_GP_FORMULA_BACKENDS", "cpu,gpu"), ",")[[1L]])
rows <- list()
for (backend in backends) {
  for (n in sizes) {
    locs <- matrix(runif(2 * n), n, 2)
    y <- gp_simulate(locs, builtin, nugget = 0.1, backend = "cpu")
    for (method in c("dense", "tiled")) {
      run <- function(k) gp_loglik(locs, y, kernel = k, nugget = 0.1, method = method,
                                   gradient = TRUE, backend = backend)
      a <- run(builtin)
      b <- run(formula)
      stopifnot(abs(a$loglik - b$loglik) <= 1e-6 * abs(a$loglik) + a$error)
      tb <- time_call(function() run(builtin), min_batch = 0, batches = 3)
      tf <- time_call(function() run(formula), min_batch = 0, batches = 3)
      rows <- record_row(rows, data.frame(
        backend = backend, method = method, n = n, builtin_s = sprintf("%.3f", tb),
        formula_s = sprintf("%.3f", tf), ratio = sprintf("%.2f", tf / tb),
        loglik_diff = sprintf("%.1e", abs(a$loglik - b$loglik)), stringsAsFactors = FALSE))
    }
  }
}
print(do.call(rbind, rows), row.names = FALSE)
