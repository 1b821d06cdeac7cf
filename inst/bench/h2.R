# Benchmark of H2 covariance matrices (h2_matrix) on the GPU, after Boukaram,
# Turkiyyah & Keyes: exponential kernel on randomly perturbed regular grids in
# [0,1]^2 (range 0.1, order 8) and [0,1]^3 (range 0.2, order 4), rank 64,
# leaves of 64 points, n = 2^14 ... 2^20, double and single precision.
# Reports construction time, HMV time on the device (resident vectors, CUDA
# events, median of 10 after 2 warm-ups; cublas_ms: the same with cuBLAS batched
# GEMMs only, hmv16_ms: 16 right-hand sides at once), the time of `A %*% x` from R (which
# includes copying x and y), memory, the relative error of products with
# N(0, 1) vectors (h2_error(): 2 probes, exact rows from kernel_matvec() on
# 16384 sampled rows), and the achieved bandwidth: bytes of dense, coupling, basis and transfer data
# read per HMV (bases and transfers count twice, for the row and column trees,
# as in the paper) over the HMV time, as a fraction of the H100's 3.01 TB/s.
# Second part (compression, issue 11): h2_orthogonalize() and h2_compress() on
# the GPU (src/h2/h2_compress_cuda.cu) at tol = 1e-3 (3D) / 1e-7 (2D), float64
# (and float32 with "single"): times (after a warm-up compression; the phases
# generate / truncate / project of the compression; gen_qr_s: the batched QRs of
# the generation, by CUDA events; the tunables GK_H2_STACK_QR_MAX_RANK and
# GK_H2_STACK_PIECES in the environment set which levels take the geqrfBatched
# passes instead of the stack QR kernel and the coupling blocks per pass, see
# ?gk_info; orth_basis_s: the new bases and transfers of h2_orthogonalize(),
# its projections of the couplings not included), GFLOP/s of the work done, memory
# of the matrix and GPU memory taken by the compressed one (it shares the
# dense blocks), HMV time before and after, N(0, 1) errors against the exact
# kernel. Targets at 2^20 in 3D, float64: compression <= 0.4 s; at tol = 1e-3
# memory <= 1/3 of the uncompressed matrix and HMV <= 7.85 ms (1/2 of 15.7 ms).
# Third part (matrix-free, issue 12): 3D exponential at eta = 3 / order 4 and
# eta = 1.5 / order 4, storage = "on_the_fly", float64 and float32, n = 2^16,
# 2^18, 2^20: HMV ms (device timing), memory held on the GPU, the model's
# predictions, and the N(0, 1) error against the exact tiled product.
# Targets at 2^20: float64 <= 12 ms and float32 <= 3 ms at eta 3; float64 <= 30
# ms under 4 GB at eta 1.5.
# Fourth part (issue 11's tol = 1e-3 target, "otfcompress"): the on-the-fly
# form at eta 3, order 5 (whose stored form would not fit at 2^20: 119 GB)
# compressed on the GPU without ever storing its blocks, to tol = 4e-4 and
# 2e-4; the result stores its couplings and keeps its dense blocks on the fly.
# Times, GPU memory of the result against the default stored matrix (eta 3,
# order 4), HMV before and after, N(0, 1) errors; then h2_matrix(tol = 1e-3),
# which should find this route by itself. Target at 2^20: error <= 1e-3 with
# memory <= 1/3 of the stored matrix and HMV <= 7.85 ms.
# Fifth part (issue 38, "rmatmul"): what a user measures, `A %*% x` from R on
# the default matrix (storage = "auto") of the 3D points at 2^max_log2 against
# the device-level HMV (gk_r_h2_time): median of 20 single calls (fresh N(0, 1)
# vectors, made beforehand), the mean over a loop of 20 (R's collections
# included), 1 and 4 right-hand sides, float64 and float32; whether the memory
# held stays put over the calls. Target: R-level <= 1.3x the device level.
# Arguments: max log2 n (default 20), "nocompress" to skip the second part,
# "onlycompress" to skip the first, "single" to add float32 compressions,
# "hostcompress" to time the host (LAPACK) compression of GPU matrices instead,
# "onlyotf" to run the third part only, "nootf" to skip it, "otfcompress" to
# run the fourth part only, "rmatmul" to run the fifth part only.
library(gpukernels)
if (!gk_has_gpu()) stop("this benchmark needs a GPU")
args <- commandArgs(trailingOnly = TRUE)
max_log2 <- if (length(args) && !is.na(suppressWarnings(as.integer(args[1])))) as.integer(args[1]) else 20L
only_otf <- "onlyotf" %in% args
only_otf_compress <- "otfcompress" %in% args
only_rmatmul <- "rmatmul" %in% args
do_rmatmul <- only_rmatmul || (!"onlycompress" %in% args && !only_otf && !only_otf_compress)
do_hmv <- !"onlycompress" %in% args && !only_otf && !only_otf_compress && !only_rmatmul
do_compress <- !"nocompress" %in% args && !only_otf && !only_otf_compress && !only_rmatmul
do_otf <- !"nootf" %in% args && !"onlycompress" %in% args && !only_otf_compress && !only_rmatmul
options(gpukernels.h2_compress_on_host = "hostcompress" %in% args)
peak <- 3.01e12

perturbed_grid <- function(n, d) {
  s <- ceiling(n^(1 / d))
  g <- as.matrix(expand.grid(rep(list(seq_len(s) - 1), d)))[sample(s^d, n), , drop = FALSE]
  (g + 0.5 + 0.8 * (matrix(runif(n * d), n, d) - 0.5)) / s
}

rows <- list()
set.seed(42)
for (d in if (do_hmv) 2:3 else integer(0)) {
  kernel <- gk_kernel("exponential", range = if (d == 2) 0.1 else 0.2)
  for (p in 14:max_log2) {
    n <- 2^p
    locs <- perturbed_grid(n, d)
    for (precision in c("double", "single")) {
      h2_matrix(locs[1:1000, ], kernel, precision = precision, backend = "gpu",
                storage = "stored")  # warm-up
      build <- system.time(A <- h2_matrix(locs, kernel, precision = precision,
                                          backend = "gpu", storage = "stored"))[["elapsed"]]
      info <- gpukernels:::h2_info(A)
      hmv_ms <- .Call(gpukernels:::gk_r_h2_time, gpukernels:::h2_ptr(A), 1L, 10L, FALSE)
      cublas_ms <- .Call(gpukernels:::gk_r_h2_time, gpukernels:::h2_ptr(A), 1L, 5L, TRUE)
      hmv16_ms <- .Call(gpukernels:::gk_r_h2_time, gpukernels:::h2_ptr(A), 16L, 5L, FALSE)
      x <- runif(n)
      invisible(A %*% x)
      r_ms <- 1000 * median(replicate(5, system.time(A %*% x)[["elapsed"]]))
      err <- h2_error(A, probes = 2, iterations = 0, rows = min(n, 16384))$probe
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
if (length(rows)) {
  cat("\nH2 benchmark (H100 copy ceiling 3.01 TB/s)\n")
  print(do.call(rbind, rows), row.names = FALSE)
}

# ---- compression ------------------------------------------------------------
crows <- list()
gpu_free <- function() {
  invisible(gc())
  gk_info()$devices$free_memory[gk_info()$current_device]
}
if (do_compress) {   # warm-up: cuBLAS handles, first kernel loads
  W <- h2_matrix(perturbed_grid(4096, 3), gk_kernel("exponential", range = 0.2), backend = "gpu",
                 storage = "stored")
  invisible(h2_compress(W, 1e-3))
  rm(W)
}
precisions <- if ("single" %in% args) c("double", "single") else "double"
for (d in if (do_compress) 3:2 else integer(0)) for (precision in precisions) {
  kernel <- gk_kernel("exponential", range = if (d == 2) 0.1 else 0.2)
  tol <- if (d == 2) (if (precision == "double") 1e-7 else 1e-5) else 1e-3
  for (p in seq(14, max_log2, by = 2)) {
    n <- 2^p
    locs <- perturbed_grid(n, d)
    A <- h2_matrix(locs, kernel, precision = precision, backend = "gpu", storage = "stored")
    hmv_ms <- .Call(gpukernels:::gk_r_h2_time, gpukernels:::h2_ptr(A), 1L, 10L, FALSE)
    err_a <- h2_error(A, probes = 2, iterations = 0, rows = min(n, 16384))$probe
    Q <- h2_orthogonalize(A)
    oc <- Q$compression
    rm(Q)
    free_before <- gpu_free()
    B <- h2_compress(A, tol)
    gpu_MB_B <- (free_before - gpu_free()) / 2^20
    cmp <- B$compression
    hmv_b_ms <- .Call(gpukernels:::gk_r_h2_time, gpukernels:::h2_ptr(B), 1L, 10L, FALSE)
    err_b <- h2_error(B, probes = 2, iterations = 0, rows = min(n, 16384))$probe
    row <- data.frame(d = d, precision = precision, n = n, tol = tol,
                      orth_s = round(oc$seconds, 3),
                      orth_basis_s = round(oc$seconds_orthogonalize, 3),
                      orth_GFLOPs = round(oc$flops / oc$seconds / 1e9, 1),
                      compress_s = round(cmp$seconds, 3),
                      compress_GFLOPs = round(cmp$flops / cmp$seconds / 1e9, 1),
                      gen_s = round(cmp$seconds_generate, 3),
                      gen_qr_s = round(cmp$seconds_generate_qr, 3),
                      trunc_s = round(cmp$seconds_truncate, 3),
                      proj_s = round(cmp$seconds_project, 3),
                      ranks = paste(cmp$ranks[cmp$ranks > 1], collapse = "/"),
                      MB_before = round(sum(cmp$bytes_before) / 2^20),
                      MB_after = round(sum(cmp$bytes) / 2^20),
                      lowrank_MB_before = round(cmp$bytes_before[["low_rank"]] / 2^20),
                      lowrank_MB_after = round(cmp$bytes[["low_rank"]] / 2^20),
                      gpu_MB_taken = round(gpu_MB_B),
                      mem_ratio = round(sum(cmp$bytes) / sum(cmp$bytes_before), 3),
                      hmv_ms_before = round(hmv_ms, 3), hmv_ms_after = round(hmv_b_ms, 3),
                      frob_est = signif(cmp$error_frobenius, 3),
                      err_before = signif(err_a, 3), err_after = signif(err_b, 3))
    print(row, row.names = FALSE)
    crows[[length(crows) + 1]] <- row
    rm(A, B)
    invisible(gc())
  }
}
if (length(crows)) {
  cat(paste0("\nH2 compression on the GPU (cuBLAS batched QR and GEMMs; the truncation's ",
             "SVDs by batched Jacobi on the GPU); gpu_MB_taken: device memory the compressed matrix holds ",
             "(the dense blocks are shared with the original)\n"))
  print(do.call(rbind, crows), row.names = FALSE)
}

# ---- matrix-free (on the fly) ----------------------------------------------
orows <- list()
if (do_otf) {
  kernel <- gk_kernel("exponential", range = 0.2)
  for (p in intersect(c(16L, 18L, 20L), 14:max_log2)) {
    n <- 2^p
    locs <- perturbed_grid(n, 3)
    for (eta in c(3, 1.5)) {
      for (precision in c("double", "single")) {
        h2_matrix(locs[1:5000, ], kernel, eta = eta, order = 4, precision = precision,
                  backend = "gpu", storage = "on_the_fly")  # warm-up
        before <- gk_memory()[["gpu1"]]
        build <- system.time(A <- h2_matrix(locs, kernel, eta = eta, order = 4,
                                            precision = precision, backend = "gpu",
                                            storage = "on_the_fly"))[["elapsed"]]
        info <- gpukernels:::h2_info(A)
        hmv_ms <- .Call(gpukernels:::gk_r_h2_time, gpukernels:::h2_ptr(A), 1L, 10L, FALSE)
        hmv4_ms <- .Call(gpukernels:::gk_r_h2_time, gpukernels:::h2_ptr(A), 4L, 5L, FALSE)
        held <- gk_memory()[["gpu1"]] - before
        err <- h2_error(A, probes = 2, iterations = 0, rows = min(n, 16384))$probe
        row <- data.frame(n = n, eta = eta, precision = precision, build_s = round(build, 2),
                          hmv_ms = round(hmv_ms, 3), hmv4_ms = round(hmv4_ms, 3),
                          model_otf_ms = round(info$ms_on_the_fly, 2),
                          model_stored_ms = round(info$ms_stored, 2),
                          gpu_MB = round(held / 2^20),
                          stored_would_be_MB = round(info$bytes_per_entry *
                            (info$basis_entries + info$transfer_entries +
                               info$coupling_entries + info$dense_entries) / 2^20),
                          pairs_per_s = signif(info$kernel_pairs / (hmv_ms * 1e-3), 3),
                          rel_error = signif(err, 3))
        print(row, row.names = FALSE)
        orows[[length(orows) + 1]] <- row
        rm(A)
        invisible(gc())
      }
    }
  }
}
if (do_otf) {
  # The ceiling of the on-the-fly products: the dense engine's rate for the same
  # kernel (device operands, 2^17 points in 3D), in the same run.
  kernel <- gk_kernel("exponential", range = 0.2)
  locs <- perturbed_grid(2^17, 3)
  for (precision in c("double", "single")) {
    dl <- gk_device_matrix(locs / 0.2, precision)
    db <- gk_device_matrix(rnorm(nrow(locs)), precision)
    unit <- gk_kernel("exponential")
    kernel_matvec(dl, dl, db, unit, precision = precision)
    s <- median(vapply(1:5, function(i) system.time(kernel_matvec(dl, dl, db, unit,
                                                                  precision = precision))[["elapsed"]], 0))
    cat(sprintf("dense engine, exponential, %s, 2^17 x 2^17 on the device: %.1f ms, %.3g pairs/s\n",
                precision, 1e3 * s, nrow(locs)^2 / s))
    rm(dl, db)
  }
}
if (length(orows)) {
  cat("\nH2 on the fly (3D exponential, range 0.2, order 4; targets at 2^20: float64 <= 12 ms ",
      "and float32 <= 3 ms at eta 3, float64 <= 30 ms under 4 GB at eta 1.5)\n", sep = "")
  print(do.call(rbind, orows), row.names = FALSE)
}

# ---- on-the-fly forms compressed (issue 11's tol = 1e-3 target) --------------
if (only_otf_compress) {
  kernel <- gk_kernel("exponential", range = 0.2)
  hmv <- function(A) .Call(gpukernels:::gk_r_h2_time, gpukernels:::h2_ptr(A), 1L, 20L, FALSE)
  gpu_mb <- function() gk_memory()[["gpu1"]] / 2^20
  crows <- list()
  for (p in intersect(c(16L, 18L, 20L), 14:max_log2)) {
    n <- 2^p
    locs <- perturbed_grid(n, 3)
    m0 <- gpu_mb()
    A <- h2_matrix(locs, kernel, eta = 3, order = 5, backend = "gpu", storage = "on_the_fly")
    otf_mb <- gpu_mb() - m0
    info <- gpukernels:::h2_info(A)
    # the default stored matrix of these points (eta 3, order 4: rank 64, not 125)
    stored4 <- info$bytes_per_entry * (info$basis_entries * (64 / 125) +
      (info$transfer_entries + info$coupling_entries) * (64 / 125)^2 + info$dense_entries) / 2^20
    hmv_a <- hmv(A)
    err_a <- h2_error(A, probes = 4, iterations = 0, rows = min(n, 16384))$probe
    h2_compress(h2_matrix(locs[1:5000, ], kernel, eta = 3, order = 5, backend = "gpu",
                          storage = "on_the_fly"), 1e-3)   # warm-up
    for (tol in c(4e-4, 2e-4)) {
      m1 <- gpu_mb()
      secs <- system.time(B <- h2_compress(A, tol))[["elapsed"]]
      taken <- gpu_mb() - m1
      cmp <- B$compression
      err_b <- h2_error(B, probes = 4, iterations = 0, rows = min(n, 16384))$probe
      row <- data.frame(n = n, tol = tol, compress_s = round(secs, 3),
                        gen_s = round(cmp$seconds_generate, 3),
                        trunc_s = round(cmp$seconds_truncate, 3),
                        proj_s = round(cmp$seconds_project, 3),
                        gflops = round(cmp$flops / secs / 1e9),
                        ranks = paste(cmp$ranks[cmp$ranks > 1], collapse = "/"),
                        otf_MB = round(otf_mb), gpu_MB_after = round(taken),
                        stored_o4_MB = round(stored4), mem_ratio = round(taken / stored4, 3),
                        hmv_ms_otf = round(hmv_a, 2), hmv_ms_after = round(hmv(B), 2),
                        frob_est = signif(cmp$error_frobenius, 3),
                        err_otf = signif(err_a, 3), err_after = signif(err_b, 3))
      print(row, row.names = FALSE)
      crows[[length(crows) + 1]] <- row
      rm(B)
      invisible(gc())
    }
    rm(A)
    invisible(gc())
  }
  cat("\nOn-the-fly H2 (3D exponential, range 0.2, eta 3, order 5) compressed on the GPU; ",
      "mem_ratio: GPU memory of the result / the stored eta 3, order 4 matrix (target <= 1/3 ",
      "at 2^20 with err_after <= 1e-3 and hmv_ms_after <= 7.85)\n", sep = "")
  print(do.call(rbind, crows), row.names = FALSE)
  if (max_log2 >= 20) {
    locs <- perturbed_grid(2^20, 3)
    m0 <- gpu_mb()
    secs <- system.time(A <- h2_matrix(locs, kernel, tol = 1e-3, backend = "gpu"))[["elapsed"]]
    cat(sprintf("\nh2_matrix(tol = 1e-3) at 2^20: %.1f s, GPU MB %.0f, HMV %.2f ms\n", secs,
                gpu_mb() - m0, hmv(A)))
    print(A)
  }
}

# ---- A %*% x from R against the device (issue 38) ----------------------------
if (do_rmatmul) {
  n <- 2^max_log2
  locs <- perturbed_grid(n, 3)
  kernel <- gk_kernel("exponential", range = 0.2)
  rrows <- list()
  vectors <- list(lapply(1:4, function(i) rnorm(n)),
                  lapply(1:4, function(i) matrix(rnorm(n * 4), n)))
  for (precision in c("double", "single")) {
    A <- h2_matrix(locs, kernel, precision = precision, backend = "gpu")
    for (nrhs in c(1L, 4L)) {
      xs <- vectors[[if (nrhs == 1L) 1L else 2L]]
      dev_ms <- .Call(gpukernels:::gk_r_h2_time, gpukernels:::h2_ptr(A), nrhs, 10L, FALSE)
      invisible(A %*% xs[[1]])   # warm-up: workspace and staging
      held <- gk_memory()
      one <- vapply(1:20, function(i) {
        x <- xs[[i %% 4 + 1]]
        t0 <- Sys.time()
        y <- A %*% x
        1e3 * as.double(Sys.time() - t0, units = "secs")
      }, 0)
      loop_ms <- 1e3 * system.time(for (i in 1:20) y <- A %*% xs[[i %% 4 + 1]])[["elapsed"]] / 20
      row <- data.frame(n = n, precision = precision, otf = gpukernels:::h2_info(A)$on_the_fly,
                        nrhs = nrhs, device_ms = round(dev_ms, 2),
                        r_median_ms = round(median(one), 2), r_loop_ms = round(loop_ms, 2),
                        ratio = round(median(one) / dev_ms, 2),
                        memory_same = identical(gk_memory(), held))
      print(row, row.names = FALSE)
      rrows[[length(rrows) + 1]] <- row
    }
    rm(A)
    invisible(gc())
  }
  cat("\nA %*% x from R vs the device-level HMV (3D exponential, range 0.2, default storage; ",
      "target ratio <= 1.3)\n", sep = "")
  print(do.call(rbind, rrows), row.names = FALSE)
}
