# H2 matrices on the fly on the GPU against the CPU's and the stored form
# (rel2, otf_kernels and the comparison helpers: helper-h2.R).

test_that("GPU on the fly equals the CPU (double, single, several rhs)", {
  skip_if_no_gpu()
  set.seed(1207)
  for (d in 2:3) {
    n <- if (d == 2) 3001 else 2777
    locs <- matrix(runif(n * d), ncol = d)
    X <- matrix(rnorm(n * 9), n, 9)   # more columns than the engine's chunk of 8
    for (k in otf_kernels()[1:6]) {
      cpu <- h2_matrix(locs, k, nugget = 0.2, eta = 2, backend = "cpu", storage = "on_the_fly")
      gpu <- h2_matrix(locs, k, nugget = 0.2, eta = 2, backend = "gpu", storage = "on_the_fly")
      stored <- h2_matrix(locs, k, nugget = 0.2, eta = 2, backend = "gpu", storage = "stored")
      Yc <- cpu %*% X
      expect_lt(max(abs(gpu %*% X - Yc)) / max(abs(Yc)), 1e-12)
      expect_lt(max(abs(gpu %*% X[, 1] - Yc[, 1])) / max(abs(Yc)), 1e-12)
      expect_lt(max(abs(stored %*% X - Yc)) / max(abs(Yc)), 1e-12)
      g32 <- h2_matrix(locs, k, nugget = 0.2, eta = 2, backend = "gpu", storage = "on_the_fly",
                       precision = "single")
      expect_lt(rel2(g32 %*% X, Yc), 1e-5)
    }
  }
})

test_that("GPU on the fly equals the CPU with empty levels, couplings from level 1 and one leaf", {
  skip_if_no_gpu()
  set.seed(1211)
  n <- 700
  clumps <- rbind(matrix(runif(3 * n), ncol = 3) * 0.02,
                  matrix(runif(3 * n), ncol = 3) * 0.02 + 1)
  k <- gk_kernel("matern", range = 0.8, smoothness = 1.5)
  for (locs in list(clumps, clumps[1:20, ])) {
    X <- matrix(rnorm(nrow(locs) * 5), nrow(locs), 5)
    args <- list(locs, k, nugget = 0.3, eta = 1.5, leaf_size = 32, storage = "on_the_fly")
    cpu <- do.call(h2_matrix, c(args, backend = "cpu"))
    blocks <- gpukernels:::h2_info(cpu)$level_coupling_blocks   # 0 2 0 0 0 6 454; 0
    if (nrow(locs) > 32) expect_identical(which(blocks > 0)[1:2], c(2L, 6L))
    else expect_identical(blocks, 0L)
    Yc <- cpu %*% X
    g64 <- do.call(h2_matrix, c(args, backend = "gpu"))
    expect_lt(max(abs(g64 %*% X - Yc)) / max(abs(Yc)), 1e-12)
    expect_lt(max(abs(g64 %*% X[, 2] - Yc[, 2])) / max(abs(Yc)), 1e-12)
    g32 <- do.call(h2_matrix, c(args, backend = "gpu", precision = "single"))
    expect_lt(rel2(g32 %*% X, Yc), 1e-5)
    expect_lt(rel2(g32 %*% X[, 2], Yc[, 2]), 1e-5)
  }
})

test_that("GPU symmetric products equal the CPU's and evaluate about half the pairs", {
  skip_if_no_gpu()
  set.seed(1212)
  k <- gk_kernel("exponential", range = 0.15)
  for (d in 2:3) for (leaf in c(64L, 45L)) {   # leaves of 45: clusters below the engine's 64 rows
    n <- if (d == 2) 4001 else 3333
    locs <- matrix(runif(n * d), ncol = d)
    X <- matrix(rnorm(n * 3), n, 3)
    args <- list(locs, k, nugget = 0.2, eta = 2, leaf_size = leaf, storage = "on_the_fly")
    C <- do.call(h2_matrix, c(args, backend = "cpu"))
    Yc <- C %*% X
    for (precision in c("double", "single")) {
      tol <- if (precision == "double") 1e-12 else 1e-5
      A <- do.call(h2_matrix, c(args, backend = "gpu", precision = precision))
      sym1 <- A %*% X[, 2]
      symX <- A %*% X   # several right-hand sides: every pair evaluated
      label <- sprintf("%dD leaves %d %s", d, leaf, precision)
      expect_lt(max(abs(sym1 - Yc[, 2])) / max(abs(Yc)), tol, label = label)
      expect_lt(max(abs(symX - Yc)) / max(abs(Yc)), tol, label = label)
      # The evaluations the summary counts (and the model prices): about half
      # of the CPU's, which evaluates every pair.
      ratio <- summary(A)$storage$kernel_pairs / summary(C)$storage$kernel_pairs
      expect_lt(ratio, 0.65, label = label)
      expect_gt(ratio, 0.45, label = label)
    }
  }
})

test_that("GPU on-the-fly matrices free, rebuild and do not grow memory", {
  skip_if_no_gpu()
  set.seed(1208)
  n <- 5000
  locs <- matrix(runif(n * 3), ncol = 3)
  A <- h2_matrix(locs, gk_kernel("exponential", range = 0.1), backend = "gpu",
                 storage = "on_the_fly")
  x <- rnorm(n)
  p <- repeated_products(A, x, 10)
  y <- p$first
  expect_equal(p$last, y, tolerance = 1e-14)
  gk_free(A)
  expect_equal(A %*% x, y, tolerance = 1e-13)
  expect_lt(rel2(h2_compress(A, 1e-6) %*% x, y), 1e-5)
})


test_that("GPU compression of an on-the-fly matrix keeps its dense blocks on the fly, as the CPU's", {
  skip_if_no_gpu()
  set.seed(1216)
  on_host <- function(A, tol) {   # the GPU matrix through the host (LAPACK) path
    old <- options(gpukernels.h2_compress_on_host = TRUE)
    on.exit(options(old))
    h2_compress(A, tol)
  }
  for (d in 2:3) {
    n <- if (d == 2) 3001 else 2777
    locs <- matrix(runif(n * d), ncol = d)
    k <- gk_kernel("exponential", range = 0.2)
    K <- brute_force(locs, "exponential", 0.2, 0.05)
    X <- matrix(rnorm(n * 2), n, 2)
    exact <- K %*% X
    for (precision in c("double", "single")) {
      eps <- if (precision == "double") 1e-10 else 1e-4
      label <- sprintf("%dD %s", d, precision)
      args <- list(locs, k, nugget = 0.05, eta = 2, precision = precision)
      gpu <- do.call(h2_matrix, c(args, backend = "gpu", storage = "on_the_fly"))
      cpu <- do.call(h2_matrix, c(args, backend = "cpu", storage = "on_the_fly"))
      gstored <- do.call(h2_matrix, c(args, backend = "gpu", storage = "stored"))
      yg <- gpu %*% X
      Qg <- h2_orthogonalize(gpu)
      Qc <- h2_orthogonalize(cpu)
      expect_form(Qg, "dense_on_the_fly")
      expect_identical(summary(Qg)$backend, "gpu")
      expect_equal(h2_ranks(Qg), h2_ranks(Qc))
      expect_lt(.Call(gpukernels:::gk_r_h2_orthogonality, gpukernels:::h2_ptr(Qg)),
                if (precision == "double") 1e-11 else 1e-4, label = label)
      expect_lt(rel2(Qg %*% X, Qc %*% X), eps, label = label)
      expect_lt(rel2(Qg %*% X, yg), eps, label = label)
      expect_equal(Qg$compression$norm_frobenius, Qc$compression$norm_frobenius,
                   tolerance = if (precision == "double") 1e-10 else 1e-5)
      for (tol in if (precision == "double") c(1e-3, 1e-5) else c(1e-2, 1e-4)) {
        Bg <- h2_compress(gpu, tol)
        Bc <- h2_compress(cpu, tol)
        Bs <- h2_compress(gstored, tol)
        expect_form(Bg, "dense_on_the_fly")
        expect_identical(summary(Bg)$backend, "gpu")
        rg <- h2_ranks(Bg)
        rc <- h2_ranks(Bc)
        if (precision == "double") {
          expect_equal(rg, rc)
          expect_lt(rel2(Bg %*% X, Bc %*% X), eps, label = label)
          expect_lt(rel2(Bg %*% X, Bs %*% X), eps, label = label)
          expect_equal(Bg$compression$error_frobenius, Bc$compression$error_frobenius,
                       tolerance = 1e-6)
        } else {
          expect_lte(max(abs(rg - rc)), 1)
          expect_lt(rel2(Bg %*% X, Bc %*% X), 4 * tol + eps, label = label)
          expect_lt(rel2(Bg %*% X, Bs %*% X), 4 * tol + eps, label = label)
        }
        expect_lte(Bg$compression$error_frobenius, tol * 1.0001)
        expect_lt(rel2(Bg %*% X, yg), 2 * tol + eps, label = label)
        expect_lte(rel2(Bg %*% X, exact), rel2(yg, exact) + 2 * tol + eps, label = label)
        b <- gpukernels:::h2_bytes(Bg)
        expect_identical(b[["dense"]], 0)
        if (identical(rg, h2_ranks(Bs))) {
          expect_identical(b[["low_rank"]], gpukernels:::h2_bytes(Bs)[["low_rank"]])
        }
        expect_output(print(Bg), "dense blocks on the fly, compressed couplings stored")
        # again, on the GPU and through the host: still form 2
        C <- h2_compress(Bg, 1e-2)
        expect_form(C, "dense_on_the_fly")
        expect_lt(rel2(C %*% X, yg), 2e-2 + 2 * tol + eps, label = label)
        Bh <- on_host(gpu, tol)
        expect_form(Bh, "dense_on_the_fly")
        expect_identical(summary(Bh)$backend, "gpu")
        expect_lte(max(abs(h2_ranks(Bh) - rg)), 1)
        expect_lt(rel2(Bh %*% X, Bg %*% X), 4 * tol + eps, label = label)
        expect_form(on_host(Bg, 1e-2), "dense_on_the_fly")
      }
    }
  }
})

test_that("GPU compressions of an on-the-fly matrix hold no dense blocks and do not grow memory", {
  skip_if_no_gpu()
  set.seed(1217)
  n <- 20000
  locs <- matrix(runif(3 * n), ncol = 3)
  k <- gk_kernel("exponential", range = 0.2)
  x <- rnorm(n)
  for (precision in c("double", "single")) {
    A <- h2_matrix(locs, k, precision = precision, backend = "gpu", storage = "on_the_fly")
    ya <- A %*% x
    B <- NULL   # the last iteration's, collected now rather than during the count
    before <- gpu_free_after_gc()
    held <- gk_memory()
    B <- h2_compress(A, 1e-4)
    yb <- B %*% x
    used <- before - gpu_free_after_gc()
    # its bases, transfers, couplings and ranges, no dense blocks
    expect_lt(used, sum(gpukernels:::h2_bytes(B)) + 16 * 2^20)
    expect_lt(rel2(yb, ya), 2e-4 + 1e-5)
    gk_free(B)
    expect_equal(gk_memory(), held)
    # the input gone, B (rebuilt from its settings) still multiplies
    B <- h2_compress(A, 1e-4)
    rm(A)
    invisible(gc())
    expect_equal(B %*% x, yb, tolerance = if (precision == "double") 1e-12 else 1e-5)
    A <- h2_matrix(locs, k, precision = precision, backend = "gpu", storage = "on_the_fly")
    invisible(h2_compress(A, 1e-3) %*% x)
    before <- gpu_free_after_gc()
    for (i in 1:4) invisible(h2_compress(A, 1e-3) %*% x)
    expect_lt(before - gpu_free_after_gc(), 32 * 2^20)
  }
})

test_that("GPU compression of an on-the-fly matrix: chunks of its couplings in row order", {
  skip_if_no_gpu()
  set.seed(1219)
  # 1 MB chunks: the couplings of a level evaluated and projected in many
  # chunks of rows (src/h2/h2_compress_cuda.cu, coupling_chunks), with the
  # stack QR kernel and with the geqrfBatched passes (GK_H2_STACK_QR_MAX_RANK
  # = 0), against the default chunks (one per level here) and the CPU.
  n <- 3001
  for (cs in list(list(d = 3, order = 3, leaf = 32), list(d = 2, order = 7, leaf = 16))) {
    locs <- matrix(runif(cs$d * n), ncol = cs$d)
    k <- gk_kernel("matern", range = 0.3, smoothness = 1.5)
    X <- matrix(rnorm(2 * n), n, 2)
    for (precision in c("double", "single")) {
      eps <- if (precision == "double") 1e-10 else 2e-5
      cpu <- h2_compress(h2_matrix(locs, k, order = cs$order, leaf_size = cs$leaf,
                                   precision = precision, backend = "cpu",
                                   storage = "on_the_fly"), 1e-4)
      A <- h2_matrix(locs, k, order = cs$order, leaf_size = cs$leaf, precision = precision,
                     backend = "gpu", storage = "on_the_fly")
      # 1 MB chunks with the kernel, the default chunks, 1 MB chunks with the passes
      ways <- list(list(GK_H2_PROJECT_CHUNK_MB = 1, GK_H2_STACK_QR_MAX_RANK = NA),
                   list(GK_H2_PROJECT_CHUNK_MB = NA, GK_H2_STACK_QR_MAX_RANK = NA),
                   list(GK_H2_PROJECT_CHUNK_MB = 1, GK_H2_STACK_QR_MAX_RANK = 0))
      res <- lapply(ways, function(way) with_tunables(way, h2_compress(A, 1e-4)))
      rc <- h2_ranks(cpu)
      for (B in res) {
        expect_lte(max(abs(h2_ranks(B) - rc)), 1)
        expect_lt(rel2(B %*% X, cpu %*% X), 4e-4 + eps)
        expect_lte(B$compression$error_frobenius, 1e-4 * 1.0001)
        expect_true(gpukernels:::h2_info(B)$on_the_fly)
        expect_false(gpukernels:::h2_info(B)$couplings_on_the_fly)
      }
      expect_equal(res[[1]]$compression$norm_frobenius, res[[2]]$compression$norm_frobenius,
                   tolerance = if (precision == "double") 1e-10 else 1e-4)
      if (identical(h2_ranks(res[[1]]), h2_ranks(res[[2]])))
        expect_lt(rel2(res[[1]] %*% X, res[[2]] %*% X), eps * 10)
    }
  }
})
