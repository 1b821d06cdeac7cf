# H2 products split over the GPUs of this machine (h2_matrix(devices = ),
# issue 37): the exponential kernel on a perturbed 3D grid (range 0.2, order
# 4, leaves of 64, eta 3; as h2.R), stored, for 1, 2, ... up to all GPUs.
# Each row: the build time, the median of 10 products A %*% x of a host
# vector after two warm-up products (wall clock: x into the tree's order,
# its uploads, the parts' products at once, their rows back), the speed-up
# over one GPU, the
# device time of each GPU's HMV alone (CUDA events, median of 10, vectors on
# the GPU: one after the other, not at once), the largest part's GPU memory,
# the matrix bytes read per second over the GPUs'
# copy ceiling (frac_peak; the products also move the vectors), and the
# relative difference from one GPU's product. GK_BENCH_SIZES: log2 of the
# sizes (default "18 20"); GK_BENCH_COLS: columns of x (default 1);
# GK_BENCH_BIG=1 adds 2^21 in double, whose 80 GB fit no single H100: only
# the split rows.
#   Rscript inst/bench/h2_devices.R
library(gpukernels)
stopifnot(gk_has_gpu())
gpus <- nrow(gk_info()$devices)
counts <- unique(c(1L, 2L ^ seq_len(floor(log2(gpus))), gpus))
counts <- counts[counts <= gpus]
sizes <- as.integer(strsplit(Sys.getenv("GK_BENCH_SIZES", "18 20"), "[ ,]+")[[1]])
cols <- as.integer(Sys.getenv("GK_BENCH_COLS", "1"))
cat("devices:", gpus, "x", gk_info()$devices$name[1], "; date",
    format(Sys.time(), "%Y-%m-%d %H:%M"), "\n")

grid_points <- function(n) {
  side <- ceiling(n^(1 / 3))
  g <- as.matrix(expand.grid(seq_len(side), seq_len(side), seq_len(side)))[seq_len(n), ]
  (g - 1 + matrix(runif(3 * n, -0.4, 0.4), n)) / side
}

product_ms <- function(A, x, reps = 10) {
  for (i in 1:2) A %*% x
  median(vapply(seq_len(reps), function(i) {
    t0 <- Sys.time()
    A %*% x
    1e3 * as.double(difftime(Sys.time(), t0, units = "secs"))
  }, 0))
}

# The measured copy rate of one H100 (bytes read + written per second,
# ../shared/device/README.md); a product reads each GPU's matrix once.
copy_peak <- 3.01e12
kernel <- gk_kernel("exponential", range = 0.2)
rows <- list()
cases <- expand.grid(precision = c("double", "single"), log2n = sizes, stringsAsFactors = FALSE)
if (identical(Sys.getenv("GK_BENCH_BIG"), "1"))
  cases <- rbind(cases, data.frame(precision = "double", log2n = 21L))
for (k in seq_len(nrow(cases))) {
  n <- 2^cases$log2n[k]
  precision <- cases$precision[k]
  set.seed(1)
  locs <- grid_points(n)
  x <- if (cols == 1L) rnorm(n) else matrix(rnorm(n * cols), n)
  base_ms <- NA
  y_one <- NULL
  for (g in counts) {
    if (cases$log2n[k] >= 21 && g < 2) next
    held <- gk_memory()
    built <- system.time(A <- h2_matrix(locs, kernel, order = 4, precision = precision,
                                        storage = "stored", backend = "gpu",
                                        devices = seq_len(g)))[["elapsed"]]
    on_gpus <- (gk_memory() - held)[-1]
    per_gpu <- max(on_gpus) / 1e9
    ms <- product_ms(A, x)
    hmv <- .Call(gpukernels:::gk_r_h2_time, gpukernels:::h2_ptr(A), cols, 10L, FALSE)
    y <- as.vector(A %*% x)
    if (g == 1L) {
      base_ms <- ms
      y_one <- y
    }
    row <- data.frame(d = 3, precision = precision, n = n, cols = cols, gpus = g, build_s = round(built, 2),
                      product_ms = round(ms, 2), hmv_ms_parts = paste(round(hmv, 2), collapse = "/"),
                      speedup = if (is.na(base_ms)) NA else round(base_ms / ms, 2),
                      gb_per_gpu = round(per_gpu, 1),
                      frac_peak = round(sum(on_gpus) / (ms / 1e3) / (g * copy_peak), 3),
                      rel_diff_vs_1gpu = if (is.null(y_one)) NA else
                        signif(sqrt(sum((y - y_one)^2) / sum(y_one^2)), 2))
    print(row, row.names = FALSE)
    rows[[length(rows) + 1L]] <- row
    gk_free(A)
    rm(A)
    invisible(gc())
  }
}
cat("\nSummary\n")
print(do.call(rbind, rows), row.names = FALSE)
