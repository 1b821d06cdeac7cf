# Benchmark of the tiled kernel reductions: gaussian kernel sums (K %*% b) with
# D = 3, timed from R (upload, reduce, download; the call returns after the
# result is on the host), warmed up, medians of repeated runs. Prints one table
# with the fraction of the measured H100 exp ceilings (float32 3.8e12/s,
# float64 0.71e12/s), then the CPU engine's rate and a few other reductions.
library(gpukernels)

ceiling_exp <- c(single = 3.8e12, double = 0.71e12)

# The folder of this script, to source its shared helpers.
bench_dir <- dirname(normalizePath(sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE)[1L])))
source(file.path(bench_dir, "bench_timing.R"))

row <- function(case, precision, method, m, n, seconds, backend = "gpu") {
  rate <- m * n / seconds
  data.frame(case = case, backend = backend, precision = precision, method = method,
             M = format(m, scientific = TRUE), N = format(n, scientific = TRUE),
             time_ms = sprintf("%.3f", 1e3 * seconds), pairs_per_s = sprintf("%.3e", rate),
             fraction_of_ceiling = if (backend == "gpu") sprintf("%.2f", rate / ceiling_exp[[precision]]) else "-",
             stringsAsFactors = FALSE)
}

set.seed(1)
rows <- list()
kernel <- gk_kernel("gaussian", range = 0.1)
# `Rscript reduce.R knn`: only the k-smallest rows.
only_knn <- "knn" %in% commandArgs(TRUE)
if (gk_has_gpu()) {
  print(gk_info())
  for (precision in c("single", "double")) {
    for (size in if (only_knn) numeric(0) else c(1e4, 1e5, 1e6)) {
      x <- matrix(runif(3 * size), size, 3)
      b <- runif(size)
      batches <- if (size >= 1e6) 3 else 5
      t <- time_call(function() kernel_matvec(x, x, b, kernel, precision = precision),
                     batches = batches)
      rows <- record_row(rows, row("gaussian sum, host data", precision, "auto", size, size, t))
      if (size == 1e4) {
        dx <- gk_device_matrix(x, precision)
        db <- gk_device_matrix(b, precision)
        t <- time_call(function() kernel_matvec(dx, dx, db, kernel, precision = precision))
        rows <- record_row(rows, row("gaussian sum, device data", precision, "auto", size, size, t))
        t <- time_call(function() kernel_matvec(x, x, b, kernel, precision = precision, scheme = "1d"))
        rows <- record_row(rows, row("gaussian sum, host data", precision, "1d", size, size, t))
      }
    }
    if (!only_knn) {
      m <- 1e3
      n <- 1e7
      x <- matrix(runif(3 * m), m, 3)
      y <- gk_device_matrix(matrix(runif(3 * n), n, 3), precision)
      b <- gk_device_matrix(runif(n), precision)
      for (method in c("auto", "1d")) {
        t <- time_call(function() kernel_matvec(x, y, b, kernel, precision = precision, scheme = method))
        rows <- record_row(rows, row("gaussian sum, y on device", precision, method, m, n, t))
      }
      rm(y, b)
      gc()
    }
    # Other reductions, for reference (their ceilings differ: not the exp one).
    size <- 1e5
    x <- matrix(runif(3 * size), size, 3)
    for (k in c(1, 10, 32, 100)) {
      t <- time_call(function() knn(x, x, k = k, precision = precision), batches = 3)
      rows <- record_row(rows, row(sprintf("knn k = %d", k), precision, "auto", size, size, t))
    }
    # Where a knn call spends its time: the k-smallest reduction alone, from
    # host data and from points already on the GPU (no upload; the download
    # of the m x k values and indices remains).
    sqdist <- gk_kernel("squared_distance")
    t <- time_call(function() kernel_reduce(x, x, kernel = sqdist, reduction = "kmin", k = 10,
                                            precision = precision), batches = 3)
    rows <- record_row(rows, row("kmin k = 10, host data", precision, "auto", size, size, t))
    dx <- gk_device_matrix(x, precision)
    t <- time_call(function() kernel_reduce(dx, dx, kernel = sqdist, reduction = "kmin", k = 10,
                                            precision = precision), batches = 3)
    rows <- record_row(rows, row("kmin k = 10, device data", precision, "auto", size, size, t))
    rm(dx)
    t <- time_call(function() kernel_reduce(x, x, kernel = kernel, reduction = "logsumexp",
                                            precision = precision), batches = 3)
    rows <- record_row(rows, row("gaussian logsumexp", precision, "auto", size, size, t))
  }
}
size <- 1e4
x <- matrix(runif(3 * size), size, 3)
b <- runif(size)
t <- time_call(function() kernel_matvec(x, x, b, kernel, backend = "cpu"), batches = 3)
rows <- record_row(rows, row(sprintf("gaussian sum, %d CPU threads", gpukernels:::gk_cpu_threads()),
                                "double", "-", size, size, t, backend = "cpu"))
table <- do.call(rbind, rows)
print(table, row.names = FALSE, right = FALSE)
