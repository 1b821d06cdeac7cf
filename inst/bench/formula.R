# Benchmark of formula kernels (gk_formula()) against the built-in families:
# the gaussian written as a formula, exp(-sqdist(x, y) / (2 l^2)), against
# gk_kernel("gaussian", range = l), K %*% b with D = 3, host data, warmed up
# (the first call compiles), medians of repeated calls (built-in and formula
# in alternating batches). The target: the
# formula within 10% of the built-in (ratio <= 1.10). A space-time formula
# and a formula k-min follow for reference. GPU rows where there is a GPU;
# CPU rows always (smaller sizes), unless GK_BENCH_FORMULA_BACKENDS leaves
# them out (e.g. "gpu"); GK_BENCH_FORMULA_SIZES picks the GPU sizes.
library(gpukernels)

bench_dir <- dirname(normalizePath(sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE)[1L])))
source(file.path(bench_dir, "bench_timing.R"))

l <- 0.1
builtin <- gk_kernel("gaussian", range = l)
formula <- gk_formula(exp(-sqdist(x, y) / (2 * l^2)), l = l)
space_time <- gk_formula(exp(-sqdist(x[1:2], y[1:2]) / (2 * s^2)) * (1 + cos(2 * pi * abs(t_x - t_y) / p)),
                         s = 0.1, p = 1, coords = c("u", "v", "t"))

row <- function(case, backend, precision, m, n, t_builtin, t_formula) {
  data.frame(case = case, backend = backend, precision = precision,
             M = format(m, scientific = TRUE), N = format(n, scientific = TRUE),
             builtin_ms = if (is.na(t_builtin)) "-" else sprintf("%.3f", 1e3 * t_builtin),
             formula_ms = sprintf("%.3f", 1e3 * t_formula),
             formula_pairs_per_s = sprintf("%.3e", m * n / t_formula),
             ratio = if (is.na(t_builtin)) "-" else sprintf("%.3f", t_formula / t_builtin),
             stringsAsFactors = FALSE)
}

set.seed(1)
rows <- list()
cases <- list(cpu = c(2e3, 1e4))
if (gk_has_gpu()) {
  print(gk_info())
  cases$gpu <- c(1e4, 1e5, 4e5)
}
# GK_BENCH_FORMULA_SIZES (e.g. "1e4,1e5") keeps the GPU rows of those sizes only.
sizes <- Sys.getenv("GK_BENCH_FORMULA_SIZES")
if (nzchar(sizes) && !is.null(cases$gpu)) cases$gpu <- as.numeric(strsplit(sizes, ",")[[1L]])
only <- strsplit(Sys.getenv("GK_BENCH_FORMULA_BACKENDS", "cpu,gpu"), ",")[[1L]]
for (backend in intersect(names(cases), only)) {
  for (precision in if (backend == "gpu") c("single", "double") else "double") {
    for (size in cases[[backend]]) {
      x <- matrix(runif(3 * size), size, 3)
      b <- runif(size)
      # the two agree (to the formula's rounding)
      a1 <- kernel_matvec(x, x, b, builtin, precision = precision, backend = backend)
      a2 <- kernel_matvec(x, x, b, formula, precision = precision, backend = backend)
      stopifnot(max(abs(a1 - a2)) <= (if (precision == "double") 1e-11 else 1e-3) * max(abs(a1)))
      batches <- if (size >= 1e5) 3 else 5
      both <- time_pair(function() kernel_matvec(x, x, b, builtin, precision = precision, backend = backend),
                        function() kernel_matvec(x, x, b, formula, precision = precision, backend = backend),
                        batches = if (size >= 1e5) 3 else 15)
      tb <- both[1L]
      tf <- both[2L]
      rows <- record_row(rows, row("gaussian as formula", backend, precision, size, size, tb, tf))
      if (size == max(cases[[backend]])) {
        ts <- time_call(function() kernel_matvec(x, x, b, space_time, precision = precision,
                                                 backend = backend), batches = batches)
        rows <- record_row(rows, row("space-time formula", backend, precision, size, size, NA, ts))
        l1 <- gk_formula(sum(abs(x - y)))
        tk <- time_call(function() kernel_reduce(x, x, kernel = l1, reduction = "kmin", k = 10,
                                                 precision = precision, backend = backend),
                        batches = batches)
        rows <- record_row(rows, row("L1 k-min (k = 10)", backend, precision, size, size, NA, tk))
      }
    }
  }
}
print(do.call(rbind, rows), row.names = FALSE)
