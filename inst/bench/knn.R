# knn() at N = M = 1e5, D = 3 (issue 38; KeOps' side is inst/bench/anchors,
# part "knn"): k = 1, 10, 32, 100 in both precisions, host data to host
# result (the scheme "1d" beside the automatic one for the local-memory lists),
# and optionally where a call spends its time. Warmed up, medians.
#   Rscript knn.R [N]    (env GK_BENCH_KNN_K="1,10" picks the k;
#   GK_BENCH_KNN_PARTS=1 adds the parts of a call; GK_BENCH_KNN_FILTER=1 the
#   double-precision cases without the float pre-filter;
#   GK_BENCH_KNN_PRECISIONS="double,single" the order)
library(gpukernels)
bench_dir <- dirname(normalizePath(sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE)[1L])))
source(file.path(bench_dir, "bench_timing.R"))

args <- commandArgs(TRUE)
size <- if (length(args) >= 1) as.numeric(args[1]) else 1e5
ks <- as.integer(strsplit(Sys.getenv("GK_BENCH_KNN_K", "1,10,32,100"), ",")[[1]])
set.seed(38)
x <- matrix(runif(3 * size), size, 3)
y <- matrix(runif(3 * size), size, 3)
sqdist <- gk_kernel("squared_distance")
rows <- list()
row <- function(case, precision, k, seconds) {
  data.frame(case = case, precision = precision, k = k, N = format(size, scientific = TRUE),
             time_ms = sprintf("%.2f", 1e3 * seconds),
             pairs_per_s = sprintf("%.3e", size * size / seconds), stringsAsFactors = FALSE)
}
if (!gk_has_gpu()) stop("knn.R times the GPU: no GPU here")
print(gk_info())
# GK_BENCH_KNN_AB="1,2,3": each case also with the kernels compiled for that
# many blocks per multiprocessor (the tunable GK_REDUCE_MIN_BLOCKS).
ab <- Sys.getenv("GK_BENCH_KNN_AB", "")
ab <- if (nzchar(ab)) as.integer(strsplit(ab, ",")[[1]]) else integer(0)
for (precision in strsplit(Sys.getenv("GK_BENCH_KNN_PRECISIONS", "single,double"), ",")[[1]]) {
  for (k in ks) {
    t <- time_call(function() knn(x, y, k = k, precision = precision), batches = 5)
    rows <- record_row(rows, row("knn(), host data", precision, k, t))
    if (k > 64) {   # the local-memory lists: the 2D split refills them per chunk
      t <- time_call(function() knn(x, y, k = k, precision = precision, scheme = "1d"), batches = 3)
      rows <- record_row(rows, row("knn(), host data, scheme 1d", precision, k, t))
    }
    for (mb in ab) {
      Sys.setenv(GK_REDUCE_MIN_BLOCKS = mb)
      t <- time_call(function() knn(x, y, k = k, precision = precision), batches = 3)
      rows <- record_row(rows, row(sprintf("knn(), kernels for %d blocks per SM", mb), precision, k, t))
      Sys.unsetenv("GK_REDUCE_MIN_BLOCKS")
    }
    if (precision == "double" && nzchar(Sys.getenv("GK_BENCH_KNN_FILTER"))) {
      Sys.setenv(GK_REDUCE_FLOAT_FILTER = 0)   # every pair in double
      t <- time_call(function() knn(x, y, k = k, precision = precision), batches = 3)
      rows <- record_row(rows, row("knn(), without the float pre-filter", precision, k, t))
      Sys.unsetenv("GK_REDUCE_FLOAT_FILTER")
    }
  }
}
if (nzchar(Sys.getenv("GK_BENCH_KNN_PARTS"))) {
  # Where a call spends its time: the reduction from points already on the
  # GPU (no checks, no upload), and R's price of fresh m x k results alone.
  for (precision in c("single", "double")) {
    dx <- gk_device_matrix(x, precision)
    dy <- gk_device_matrix(y, precision)
    for (k in ks) {
      red <- if (k == 1) "argmin" else "kmin"
      t <- time_call(function() kernel_reduce(dx, dy, kernel = sqdist, reduction = red, k = k,
                                              precision = precision), batches = 3)
      rows <- record_row(rows, row(paste(red, "from device points"), precision, k, t))
      if (precision == "single") {
        t <- time_call(function() list(index = matrix(0L, size, k), distance = matrix(0, size, k)),
                       batches = 3)
        rows <- record_row(rows, row("fresh m x k results alone (R)", "-", k, t))
      }
    }
    gk_free(dx)
    gk_free(dy)
  }
}
print(do.call(rbind, rows), row.names = FALSE, right = FALSE)
