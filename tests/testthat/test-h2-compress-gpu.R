# GPU compression and orthogonalization of H2 matrices against the CPU's and
# dense kernel matrices (rel2 and dense_of: helper-h2.R).

test_that("the GPU compresses like the CPU", {
  skip_if_no_gpu()
  set.seed(36)
  cases <- list(list(d = 2, n = 3000, leaf = 64, order = NULL),
                list(d = 3, n = 3000, leaf = 64, order = NULL),
                list(d = 3, n = 1100, leaf = 20, order = 4),    # leaves smaller than the rank
                list(d = 2, n = 2500, leaf = 100, order = 8))
  for (cs in cases) {
    n <- cs$n
    locs <- matrix(runif(cs$d * n), ncol = cs$d)
    k <- gk_kernel("matern", range = 0.2, smoothness = 1.5)
    X <- matrix(rnorm(2 * n), n, 2)
    for (precision in c("double", "single")) {
      eps <- if (precision == "double") 1e-10 else 1e-4
      cpu <- h2_matrix(locs, k, leaf_size = cs$leaf, order = cs$order, precision = precision,
                       backend = "cpu")
      gpu <- h2_matrix(locs, k, leaf_size = cs$leaf, order = cs$order, precision = precision,
                       backend = "gpu")
      # orthogonalization: same ranks, orthonormal on the GPU, same products
      Qc <- h2_orthogonalize(cpu)
      Qg <- h2_orthogonalize(gpu)
      expect_equal(h2_ranks(Qg), h2_ranks(Qc))
      expect_lt(.Call(gpukernels:::gk_r_h2_orthogonality, gpukernels:::h2_ptr(Qg)),
                if (precision == "double") 1e-11 else 1e-4)
      expect_lt(rel2(Qg %*% X, Qc %*% X), eps)
      expect_lt(rel2(Qg %*% X, gpu %*% X), eps)
      expect_equal(Qg$compression$norm_frobenius, Qc$compression$norm_frobenius,
                   tolerance = if (precision == "double") 1e-10 else 1e-5)
      for (tol in c(1e-3, 1e-5)) {
        Bc <- h2_compress(cpu, tol)
        Bg <- h2_compress(gpu, tol)
        rc <- h2_ranks(Bc)
        rg <- h2_ranks(Bg)
        if (precision == "double") {
          # the same algorithm in the same precision: the same ranks and products
          expect_equal(rg, rc)
          expect_lt(rel2(Bg %*% X, Bc %*% X), eps)
          expect_equal(Bg$compression$error_frobenius, Bc$compression$error_frobenius,
                       tolerance = 1e-6)
        } else {
          # the GPU computes in float, the CPU in double: ranks at the budget's edge may differ
          expect_lte(max(abs(rg - rc)), 1)
        }
        expect_lt(rel2(Bg %*% X, gpu %*% X), 2 * tol + eps)
        expect_lt(Bg$compression$error_frobenius, tol * 1.0001)
        expect_lt(sum(Bg$compression$bytes), sum(Bg$compression$bytes_before))
        expect_true(summary(Bg)$backend == "gpu")
        # a compressed GPU matrix compresses again
        C <- h2_compress(Bg, 1e-2)
        expect_lt(rel2(C %*% X, gpu %*% X), 2e-2 + 2 * tol)
      }
    }
  }
})

test_that("GPU orthogonalization (fused QR kernel, in place, geqrfBatched) agrees with the CPU", {
  skip_if_no_gpu()
  set.seed(45)
  # The kernel keeps up to 32, 64, 128 or 256 rows per warp; leaves with fewer
  # points than the rank have fewer rows than columns, as do the stacks above
  # them (2 x 20 rows under rank 64); order 5 in 3D (rank 125) has stacks of
  # 250 x 125, in the kernel's shared memory in float and in place in global
  # memory in double (245 KB, beyond a block's shared memory). geqrfBatched
  # takes stacks of more than 256 rows (the truncation test below: rank 196).
  # Every projection of the couplings computes the blocks on and above the
  # diagonal and mirrors the others.
  cases <- list(list(d = 3, n = 3000, leaf = 64, order = 4),   # 64 x 64 leaves, 128 x 64 stacks
                list(d = 3, n = 1777, leaf = 20, order = 4),   # 20 x 64 leaves; 40, 80, 128 x 64
                list(d = 3, n = 1700, leaf = 16, order = 3),   # 16 x 27 leaves; 32, 54 x 27
                list(d = 2, n = 2501, leaf = 30, order = 3),   # 30 x 9 leaves, 18 x 9 stacks
                list(d = 3, n = 2500, leaf = 64, order = 5))   # 64 x 125 leaves; 128, 250 x 125
  for (cs in cases) {
    n <- cs$n
    locs <- matrix(runif(cs$d * n), ncol = cs$d)
    k <- gk_kernel("matern", range = 0.2, smoothness = 1.5)
    X <- matrix(rnorm(2 * n), n, 2)
    for (precision in c("double", "single")) {
      eps <- if (precision == "double") 1e-10 else 1e-4
      args <- list(locs, k, nugget = 0.05, leaf_size = cs$leaf, order = cs$order,
                   precision = precision)
      A <- do.call(h2_matrix, c(args, backend = "gpu"))
      C <- do.call(h2_matrix, c(args, backend = "cpu"))
      ya <- A %*% X
      Qg <- h2_orthogonalize(A)
      Qc <- h2_orthogonalize(C)
      expect_equal(h2_ranks(Qg), h2_ranks(Qc))
      expect_lt(.Call(gpukernels:::gk_r_h2_orthogonality, gpukernels:::h2_ptr(Qg)),
                if (precision == "double") 1e-11 else 1e-4)
      expect_lt(rel2(Qg %*% X, ya), eps)
      expect_lt(rel2(Qg %*% X, Qc %*% X), eps)
      expect_equal(Qg$compression$norm_frobenius, Qc$compression$norm_frobenius,
                   tolerance = if (precision == "double") 1e-10 else 1e-5)
      tol <- if (precision == "double") 1e-5 else 1e-3
      Bg <- h2_compress(A, tol)
      Bc <- h2_compress(C, tol)
      rg <- h2_ranks(Bg)
      rc <- h2_ranks(Bc)
      expect_lte(max(abs(rg - rc)), 1)
      if (identical(rg, rc)) {
        expect_equal(Bg$compression$error_frobenius, Bc$compression$error_frobenius,
                     tolerance = if (precision == "double") 1e-6 else 1e-2)
      }
      expect_lte(Bg$compression$error_frobenius, tol * 1.0001)
      expect_lt(rel2(Bg %*% X, ya), 2 * tol + eps)
    }
  }
})

# h2_compress() of a GPU matrix through the host (LAPACK) path.
compress_on_host <- function(A, tol) {
  old <- options(gpukernels.h2_compress_on_host = TRUE)
  on.exit(options(old))
  h2_compress(A, tol)
}

# The GPU truncation (batched Jacobi SVDs, src/h2/h2_svd_cuda.cu) against the
# host path on the same matrix. Ranks can differ only where a level's discarded
# energy sits at the budget, which rounding decides, so they may differ by one
# and the rest is checked against the uncompressed matrix and the estimate.
check_gpu_truncation <- function(A, tol, eps, X, MA = NULL) {
  Bg <- h2_compress(A, tol)
  Bh <- compress_on_host(A, tol)
  rg <- h2_ranks(Bg)
  rh <- h2_ranks(Bh)
  expect_lte(max(abs(rg - rh)), 1)
  eg <- Bg$compression$error_frobenius
  expect_lte(eg, tol * 1.0001)
  if (identical(rg, rh)) {
    expect_equal(eg, Bh$compression$error_frobenius, tolerance = if (eps < 1e-6) 1e-6 else 1e-2)
  }
  ya <- A %*% X
  expect_lt(rel2(Bg %*% X, ya), 2 * tol + eps)
  expect_lt(rel2(Bg %*% X, Bh %*% X), 4 * tol + eps)
  if (!is.null(MA)) {
    # orthonormal singular vectors: the estimate is not below the true error
    expect_lte(rel2(as.matrix(Bg), MA), eg * 1.05 + eps)
  }
  # the result compresses again (its bases are orthonormalized anew)
  C <- h2_compress(Bg, 10 * tol)
  expect_lt(rel2(C %*% X, ya), 20 * tol + 2 * tol + eps)
  invisible(Bg)
}

test_that("the GPU truncation SVDs agree with the host's", {
  skip_if_no_gpu()
  set.seed(42)
  cases <- list(list(d = 2, n = 2000, leaf = 64, order = NULL),   # k = 64
                list(d = 3, n = 2500, leaf = 64, order = NULL),   # k = 64
                list(d = 3, n = 4100, leaf = 50, order = 4),      # leaves smaller than k
                list(d = 2, n = 3001, leaf = 40, order = 5),      # k = 25: an odd column count
                list(d = 3, n = 700, leaf = 16, order = 3))       # k = 27, leaves of 16
  for (cs in cases) {
    n <- cs$n
    locs <- matrix(runif(cs$d * n), ncol = cs$d)
    k <- gk_kernel("exponential", range = 0.2)
    X <- matrix(rnorm(2 * n), n, 2)
    for (precision in c("double", "single")) {
      A <- h2_matrix(locs, k, nugget = 0.05, leaf_size = cs$leaf, order = cs$order,
                     precision = precision, backend = "gpu")
      MA <- as.matrix(A)
      if (precision == "double") {
        for (tol in c(1e-3, 1e-6)) check_gpu_truncation(A, tol, 1e-10, X, MA)
      } else {
        for (tol in c(1e-2, 1e-4)) check_gpu_truncation(A, tol, 2e-5, X, MA)
      }
    }
  }
})

# The batched GPU SVD itself (src/h2/h2_svd_cuda.cu) against svd(), on
# several matrices per call: block Jacobi up to 256 rows (with the reduction
# to L for fewer rows than columns), the one-warp-per-pair kernel above.
gpu_svd <- function(W, single) {
  d <- dim(W)
  r <- .Call(gpukernels:::gk_r_h2_svd_gpu, as.double(W), as.integer(d), single)
  km <- min(d[1:2])
  list(d = matrix(r$d, km), u = array(r$u, c(d[1], km, d[3])))
}

# Singular values spread as 10^seq(0, log10(lo)), the last rank ones only
# (the rest exactly zero), in random orthogonal bases.
graded_matrix <- function(m, n, lo = 1e-12, rank = min(m, n)) {
  k <- min(m, n)
  s <- c(10^seq(0, log10(lo), length.out = rank), rep(0, k - rank))
  Q1 <- qr.Q(qr(matrix(rnorm(m * m), m)))[, 1:k, drop = FALSE]
  Q2 <- qr.Q(qr(matrix(rnorm(n * n), n)))[, 1:k, drop = FALSE]
  Q1 %*% (s * t(Q2))
}

test_that("the GPU batched SVD agrees with svd()", {
  skip_if_no_gpu()
  set.seed(45)
  # 200 x 125: the tallest of its width whose doubles fit one block's shared
  # memory (250 x 125, order 5's 2k x k, does not: those go to the host).
  # 300 x 20 and 260 x 64: more than 256 rows, the one-warp-per-pair kernel.
  shapes <- list(c(64, 64), c(128, 64), c(125, 125), c(200, 125), c(30, 64), c(58, 64),
                 c(7, 5), c(5, 7), c(63, 63), c(1, 3), c(300, 20), c(260, 64))
  for (sh in shapes) {
    m <- sh[1]; n <- sh[2]
    mats <- list(matrix(rnorm(m * n), m),
                 graded_matrix(m, n),
                 graded_matrix(m, n, 1e-3, max(1, min(m, n) %/% 3)),   # rank-deficient
                 {W <- matrix(rnorm(m * n), m); W[, unique(c(1, (n + 1) %/% 2, n))] <- 0; W})
    W <- array(unlist(mats), c(m, n, length(mats)))
    km <- min(m, n)
    for (single in c(FALSE, TRUE)) {
      eps <- if (single) 1e-6 else 1e-13
      r <- gpu_svd(W, single)
      for (i in seq_along(mats)) {
        Wi <- matrix(W[, , i], m, n)
        s <- svd(Wi, nu = 0, nv = 0)$d[1:km]
        d <- r$d[, i]
        u <- matrix(r$u[, , i], m, km)
        info <- sprintf("%d x %d, matrix %d, %s", m, n, i, if (single) "single" else "double")
        expect_true(all(diff(d) <= 0), info = info)
        expect_lte(max(abs(d - s)), 10 * eps * s[1], label = info)
        # relative accuracy above the input's rounding (float: 6e-8 ||W||)
        big <- s > (if (single) 1e-2 else 1e-6) * s[1]
        if (any(big))
          expect_lt(max(abs(d[big] - s[big]) / s[big]), if (single) 1e-3 else 1e-9, label = info)
        expect_lt(max(abs(crossprod(u) - diag(km))), 100 * eps, label = info)
        # U holds the singular vectors: ||u_j^T W|| = sigma_j
        expect_lte(max(abs(sqrt(colSums(crossprod(Wi, u)^2)) - d)), 10 * eps * s[1],
                   label = info)
      }
    }
  }
})

test_that("GPU truncation: matrices beyond a block's shared memory take the host path", {
  skip_if_no_gpu()
  set.seed(43)
  # order 14 in 2D: rank 196, leaves of 200 points, so the leaves' 196 x 196
  # matrices (300 KB in double) exceed every GPU's shared memory per block
  # (227 KB at most) and are factored on the host, the levels above (2 r x 196
  # with small r) on the GPU
  n <- 12000
  locs <- matrix(runif(2 * n), ncol = 2)
  k <- gk_kernel("exponential", range = 0.1)
  X <- matrix(rnorm(2 * n), n, 2)
  for (precision in c("double", "single")) {
    A <- h2_matrix(locs, k, leaf_size = 200, order = 14, precision = precision,
                   backend = "gpu")
    expect_equal(tail(h2_ranks(h2_orthogonalize(A)), 1), 196)
    tol <- if (precision == "double") 1e-5 else 1e-3
    check_gpu_truncation(A, tol, if (precision == "double") 1e-10 else 2e-5, X)
  }
})

# Two dense clusters far apart plus scattered points: the clusters' nodes have
# many coupling blocks (up to 54 per leaf below), the scattered ones one or none.
clumped_points <- function(n, d) {
  nc <- round(0.4 * n)
  rbind(matrix(rnorm(nc * d, 0.15, 0.02), ncol = d), matrix(rnorm(nc * d, 0.85, 0.02), ncol = d),
        matrix(runif((n - 2 * nc) * d), ncol = d))
}

# h2_compress(A, tol) with the GPU downsweep by the stack QR kernel (pieces NA)
# or by geqrfBatched in passes of `pieces` coupling blocks (the fallback for
# ranks beyond the kernel, here forced for every level); the orthogonal
# couplings projected in chunks of chunk_mb MB (NA: the default, 4 GB).
compress_with_pieces <- function(A, tol, pieces, chunk_mb = NA) {
  with_tunables(list(GK_H2_STACK_QR_MAX_RANK = if (is.na(pieces)) NA else 0,
                     GK_H2_STACK_PIECES = pieces, GK_H2_PROJECT_CHUNK_MB = chunk_mb),
                h2_compress(A, tol))
}

test_that("GPU compression: nodes with very different numbers of coupling blocks", {
  skip_if_no_gpu()
  set.seed(44)
  # The stack QR kernel streams stacks of every height; the geqrfBatched
  # fallback factors each level in passes over the nodes that still have
  # blocks (src/h2/h2_compress_cuda.cu): 1 and 3 blocks per pass give many
  # passes and first passes of every height; chunks of 1 MB of the orthogonal
  # couplings give both many chunks of rows of every length. Leaves of 20
  # under rank 25 (2D): the parents' rank is above the leaves'.
  cases <- list(list(d = 3, n = 3000, leaf = 32, order = 3),
                list(d = 2, n = 2501, leaf = 20, order = 5))
  for (cs in cases) {
    n <- cs$n
    locs <- clumped_points(n, cs$d)
    k <- gk_kernel("exponential", range = 0.2)
    X <- matrix(rnorm(2 * n), n, 2)
    for (precision in c("double", "single")) {
      eps <- if (precision == "double") 1e-10 else 2e-5
      cpu <- h2_matrix(locs, k, nugget = 0.05, leaf_size = cs$leaf, order = cs$order,
                       precision = precision, backend = "cpu")
      gpu <- h2_matrix(locs, k, nugget = 0.05, leaf_size = cs$leaf, order = cs$order,
                       precision = precision, backend = "gpu")
      ya <- gpu %*% X
      for (tol in c(1e-2, 1e-4)) {
        Bc <- h2_compress(cpu, tol)
        rc <- h2_ranks(Bc)
        expect_true(is.na(Bc$compression$seconds_generate_qr))   # timed apart on the GPU only
        ref <- NULL
        for (way in list(c(NA, NA), c(NA, 1), c(1, NA), c(3, NA), c(3, 1))) {
          Bg <- compress_with_pieces(gpu, tol, way[1], way[2])
          rg <- h2_ranks(Bg)
          cg <- Bg$compression
          expect_lte(max(abs(rg - rc)), 1)
          if (identical(rg, rc)) {
            expect_equal(cg$error_frobenius, Bc$compression$error_frobenius,
                         tolerance = if (precision == "double") 1e-6 else 1e-2)
          }
          expect_lte(cg$error_frobenius, tol * 1.0001)
          expect_lt(rel2(Bg %*% X, ya), 2 * tol + eps)
          expect_lt(rel2(Bg %*% X, Bc %*% X), 4 * tol + eps)
          expect_gt(cg$seconds_generate_qr, 0)
          expect_lte(cg$seconds_generate_qr, cg$seconds_generate)
          # kernel and passes change only the rounding of the R factors: the same singular values
          if (is.null(ref)) {
            ref <- Bg
          } else if (identical(rg, h2_ranks(ref))) {
            expect_equal(cg$error_frobenius, ref$compression$error_frobenius,
                         tolerance = if (precision == "double") 1e-6 else 1e-2)
          }
        }
      }
    }
  }
})

test_that("GPU compression: the dense blocks are shared and outlive either matrix", {
  skip_if_no_gpu()
  set.seed(39)
  n <- 6000
  locs <- matrix(runif(3 * n), ncol = 3)
  k <- gk_kernel("exponential", range = 0.2)
  x <- rnorm(n)
  for (precision in c("double", "single")) {
    A <- h2_matrix(locs, k, precision = precision, backend = "gpu")
    ya <- A %*% x
    before <- gpu_free_after_gc()
    B <- h2_compress(A, 1e-4)
    used <- before - gpu_free_after_gc()
    own <- gpukernels:::h2_bytes(B)[["low_rank"]]
    # B holds its bases, transfers and couplings, not a second copy of the dense blocks
    expect_lt(used, own + 16 * 2^20)
    yb <- B %*% x
    rm(A)
    invisible(gc())
    expect_equal(B %*% x, yb, tolerance = 1e-12)   # A's dense blocks still there for B
    A <- h2_matrix(locs, k, precision = precision, backend = "gpu")
    B <- h2_orthogonalize(A)
    rm(B)
    invisible(gc())
    expect_equal(A %*% x, ya, tolerance = 1e-12)   # and for A when B is gone
  }
})

test_that("GPU compression: bad inputs leave the matrix unchanged", {
  skip_if_no_gpu()
  set.seed(40)
  locs <- matrix(runif(3 * 2000), ncol = 3)
  A <- h2_matrix(locs, gk_kernel("exponential", range = 0.2), backend = "gpu")
  x <- rnorm(2000)
  y <- A %*% x
  ranks <- h2_ranks(A)
  for (bad in list(0, -1, NA, NaN, Inf, 1, "a", c(1e-3, 1e-4), NULL)) {
    expect_error(h2_compress(A, bad), "tol")
  }
  expect_identical(A %*% x, y)
  expect_identical(h2_ranks(A), ranks)
})
