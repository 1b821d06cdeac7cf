# Benchmark of block-sparse reductions: gaussian kernel sums with N = M = 1e6
# uniform points in the unit cube (D = 3), clustered in cells of side 0.1
# (1000 clusters of about 1000 points, close to the 1024 rows of a GPU block:
# about a fifth of the clusters need a second, nearly empty block) and of side
# 0.2 (125 clusters of about 8000 points), keeping the cluster pairs whose
# centroid distance is below the quantile that gives each kept fraction f.
# Each fraction is timed against the dense reduction in the same run (same
# points, same call from R), warmed up, medians: with host operands (upload,
# reduce, download) and with device operands (the engine alone).
# Target: time <= 1.2 x f x dense for f >= 5%, and the all-true mask within
# 5% of dense. Fraction of ceiling: kept pairs per second over the measured
# H100 exp ceilings (float32 3.8e12/s, float64 0.71e12/s).
library(gpukernels)

ceiling_exp <- c(single = 3.8e12, double = 0.71e12)
fractions <- c(0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1)

# The folder of this script, to source its shared helpers.
bench_dir <- dirname(normalizePath(sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE)[1L])))
source(file.path(bench_dir, "bench_timing.R"))

if (!gk_has_gpu()) stop("this benchmark needs a GPU")
print(gk_info())
set.seed(1)
n <- 1e6
x <- matrix(runif(3 * n), n, 3)
b <- runif(n)
kernel <- gk_kernel("gaussian", range = 0.1)
rows <- list()
# Cell sides from the command line (default both): Rscript blocksparse.R 0.1
cells <- as.numeric(commandArgs(TRUE))
if (!length(cells)) cells <- c(0.1, 0.2)
for (cell in cells) {
  setup <- system.time({
    s <- sort_clusters(x, grid_cluster(x, cell))
    cl <- cluster_ranges_centroids(s$x, s$labels)
  })[["elapsed"]]
  cat(sprintf("cell %.1f: clustering and sorting 1e6 points: %.2f s, %d clusters\n", cell, setup,
              nrow(cl$ranges)))
  d <- as.matrix(stats::dist(cl$centroids))
  size <- cl$ranges[, 2] - cl$ranges[, 1] + 1
  # Thresholds on centroid distance giving each kept fraction of point pairs.
  pair_weight <- outer(size, size) / n^2
  ord <- order(d)
  cum <- cumsum(pair_weight[ord])
  masks <- lapply(fractions, function(f) {
    if (f >= 1) return(matrix(TRUE, nrow(d), ncol(d)))
    d <= d[ord][which(cum >= f)[1L]]
  })
  ranges <- lapply(masks, function(keep) ranges_from_mask(cl$ranges, cl$ranges, keep))
  for (precision in c("single", "double")) {
    # Host operands (upload, reduce, download: what a user's call costs), and
    # device operands (points and weights resident: the engine alone).
    dx <- gk_device_matrix(s$x, precision)
    db <- gk_device_matrix(b, precision)
    for (operands in c("host", "device")) {
      xo <- if (operands == "host") s$x else dx
      bo <- if (operands == "host") b else db
      dense <- time_call(batches = 3, function() kernel_matvec(xo, xo, bo, kernel, precision = precision))
      rows <- record_row(rows, data.frame(cell = cell, precision = precision, operands = operands,
        mask = "dense", fraction = 1, time_ms = 1e3 * dense, pairs_per_s = n^2 / dense,
        ratio = 1, target = "-", fraction_of_ceiling = n^2 / dense / ceiling_exp[[precision]]))
      for (q in seq_along(fractions)) {
        r <- ranges[[q]]
        kept <- unclass(r)$kept_pairs
        f <- kept / n^2
        t <- time_call(batches = 3, function() kernel_matvec(xo, xo, bo, kernel, precision = precision, ranges = r))
        ratio <- t / (f * dense)
        target <- if (fractions[q] >= 1) (if (t <= 1.05 * dense) "met" else "missed")
                  else if (f >= 0.05) (if (ratio <= 1.2) "met" else "missed") else "-"
        rows <- record_row(rows, data.frame(cell = cell, precision = precision, operands = operands,
          mask = if (fractions[q] >= 1) "all-true" else "distance", fraction = f,
          time_ms = 1e3 * t, pairs_per_s = kept / t, ratio = ratio, target = target,
          fraction_of_ceiling = kept / t / ceiling_exp[[precision]]))
      }
    }
    rm(dx, db)
  }
}
table <- do.call(rbind, rows)
table$fraction <- sprintf("%.4f", table$fraction)
table$time_ms <- sprintf("%.1f", table$time_ms)
table$pairs_per_s <- sprintf("%.3e", table$pairs_per_s)
table$ratio <- sprintf("%.3f", table$ratio)
table$fraction_of_ceiling <- sprintf("%.2f", table$fraction_of_ceiling)
cat("\nratio = time / (kept fraction x dense time)\n")
options(width = 200)
print(table, row.names = FALSE, right = FALSE)

# Correctness spot check at 1e6: the kept rows of the 5% mask against the CPU
# on a sample of output rows would need the whole y; instead compare float32
# with float64 on the GPU.
r <- ranges[[which(fractions == 0.05)]]
a32 <- kernel_matvec(s$x, s$x, b, kernel, precision = "single", ranges = r)
a64 <- kernel_matvec(s$x, s$x, b, kernel, precision = "double", ranges = r)
cat(sprintf("5%% mask, float32 vs float64 max relative difference: %.2e\n",
            max(abs(a32 - a64)) / max(abs(a64))))
