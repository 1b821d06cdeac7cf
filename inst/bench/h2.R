# Benchmark of H2 covariance matrices (h2_matrix) on the GPU, after Boukaram,
# Turkiyyah & Keyes: exponential kernel on randomly perturbed regular grids in
# [0,1]^2 (range 0.1, order 8) and [0,1]^3 (range 0.2, order 4), rank 64,
# leaves of 64 points, n = 2^14 ... 2^20, double and single precision.
# Reports construction time, HMV time on the device (resident vectors, CUDA
# events, median of 10 after 2 warm-ups; cublas_ms: the same with cuBLAS batched
# GEMMs only, hmv16_ms: 16 right-hand sides at once), the time of `A %*% x` from R (which
# includes copying x and y), memory, the relative error on 100 sampled rows,
# and the achieved bandwidth: bytes of dense, coupling, basis and transfer data
# read per HMV (bases and transfers count twice, for the row and column trees,
# as in the paper) over the HMV time, as a fraction of the H100's 3.01 TB/s.
library(gpukernels)
if (!gk_has_gpu()) stop("this benchmark needs a GPU")
args <- commandArgs(trailingOnly = TRUE)
max_log2 <- if (length(args)) as.integer(args[1]) else 20L
peak <- 3.01e12

perturbed_grid <- function(n, d) {
  s <- ceiling(n^(1 / d))
  g <- as.matrix(expand.grid(rep(list(seq_len(s) - 1), d)))[sample(s^d, n), , drop = FALSE]
  (g + 0.5 + 0.8 * (matrix(runif(n * d), n, d) - 0.5)) / s
}

rows <- list()
set.seed(42)
for (d in 2:3) {
  kernel <- gk_kernel("exponential", range = if (d == 2) 0.1 else 0.2)
  for (p in 14:max_log2) {
    n <- 2^p
    locs <- perturbed_grid(n, d)
    for (precision in c("double", "single")) {
      h2_matrix(locs[1:1000, ], kernel, precision = precision, backend = "gpu")  # warm-up
      build <- system.time(A <- h2_matrix(locs, kernel, precision = precision,
                                          backend = "gpu"))[["elapsed"]]
      info <- gpukernels:::h2_info(A)
      hmv_ms <- .Call(gpukernels:::gk_r_h2_time, gpukernels:::h2_ptr(A), 1L, 10L, FALSE)
      cublas_ms <- .Call(gpukernels:::gk_r_h2_time, gpukernels:::h2_ptr(A), 1L, 5L, TRUE)
      hmv16_ms <- .Call(gpukernels:::gk_r_h2_time, gpukernels:::h2_ptr(A), 16L, 5L, FALSE)
      x <- runif(n)
      invisible(A %*% x)
      r_ms <- 1000 * median(replicate(5, system.time(A %*% x)[["elapsed"]]))
      err <- h2_error(A, 100)
      bytes <- info$bytes_per_entry * (2 * info$basis_entries + 2 * info$transfer_entries_read +
                                         info$coupling_entries + info$dense_entries)
      stored <- info$bytes_per_entry * (info$basis_entries + info$transfer_entries +
                                          info$coupling_entries + info$dense_entries)
      row <- data.frame(d = d, precision = precision, n = n, levels = info$levels,
                        build_s = round(build, 3), core_build_s = round(info$build_seconds, 3),
                        tree_s = round(info$tree_seconds, 3),
                        hmv_ms = round(hmv_ms, 3), cublas_ms = round(cublas_ms, 3),
                        hmv16_ms = round(hmv16_ms, 3),
                        r_matmul_ms = round(r_ms, 2), memory_MB = round(stored / 2^20),
                        dense_MB = round(info$bytes_per_entry * info$dense_entries / 2^20),
                        rel_error = signif(err, 3), GB_s = round(bytes / hmv_ms / 1e6),
                        frac_peak = round(bytes / (hmv_ms * 1e-3) / peak, 3))
      print(row, row.names = FALSE)
      rows[[length(rows) + 1]] <- row
      rm(A)
      invisible(gc())
    }
  }
}
cat("\nH2 benchmark (H100 copy ceiling 3.01 TB/s)\n")
print(do.call(rbind, rows), row.names = FALSE)
