# H2 matrices against dense kernel matrices (kernel_matrix(), itself tested
# against R formulas in test-kernel.R; a few entries are re-checked here).

perturbed_grid <- function(n, d) {
  s <- ceiling(n^(1 / d))
  g <- as.matrix(expand.grid(rep(list(seq_len(s)), d)))[sample(s^d, n), , drop = FALSE]
  (g - 0.5 + 0.8 * (matrix(runif(n * d), n, d) - 0.5)) / s
}

test_that("2D exponential H2 products match the dense kernel matrix", {
  set.seed(11)
  n <- 3001
  locs <- matrix(runif(2 * n), ncol = 2)
  k <- gk_kernel("exponential", range = 0.1)
  K <- kernel_matrix(locs, kernel = k, backend = "cpu")
  i <- c(1, 17, 3001); j <- c(5, 2999, 40)
  d <- sqrt(rowSums((locs[i, ] - locs[j, ])^2))
  expect_equal(K[cbind(i, j)], exp(-d / 0.1), tolerance = 1e-14)
  x <- runif(n)
  exact <- drop(K %*% x)
  for (backend in test_backends()) {
    A <- h2_matrix(locs, k, order = 8, backend = backend)
    expect_equal(dim(A), c(n, n))
    expect_equal(summary(A)$rank, 64)
    expect_lt(rel2(drop(A %*% x), exact), 1e-4)
    strict <- h2_matrix(locs, k, order = 8, eta = 1, backend = backend)
    expect_lt(rel2(drop(strict %*% x), exact), 1e-6)
  }
})

test_that("3D exponential H2 products match the dense kernel matrix", {
  set.seed(12)
  n <- 2500
  locs <- perturbed_grid(n, 3)
  k <- gk_kernel("exponential", range = 0.2)
  x <- runif(n)
  exact <- drop(kernel_matrix(locs, kernel = k, backend = "cpu") %*% x)
  for (backend in test_backends()) {
    A <- h2_matrix(locs, k, order = 4, backend = backend)
    expect_lt(rel2(drop(A %*% x), exact), 2e-3)
  }
})

test_that("several right-hand sides, x %*% A, nugget and other kernels", {
  set.seed(13)
  n <- 1500
  locs <- matrix(runif(2 * n), ncol = 2)
  kernels <- list(gk_kernel("matern", range = 0.15, smoothness = 1.5, variance = 2),
                  gk_kernel("matern", range = 0.15, smoothness = 0.8),
                  gk_kernel("gaussian", range = 0.1),
                  gk_kernel("exponential", range = c(0.1, 0.3)))
  X <- matrix(rnorm(n * 3), n, 3)
  for (backend in test_backends()) {
    for (k in kernels) {
      K <- kernel_matrix(locs, kernel = k, backend = "cpu") + diag(0.3, n)
      A <- h2_matrix(locs, k, nugget = 0.3, backend = backend)
      Y <- A %*% X
      expect_equal(dim(Y), c(n, 3L))
      expect_lt(rel2(Y, K %*% X), 1e-4)
      expect_equal(Y[, 2], drop(A %*% X[, 2]), tolerance = 1e-12)
      expect_lt(rel2(t(X) %*% A, t(X) %*% K), 1e-4)
    }
  }
})

test_that("points in unusual shapes: a line, clusters, duplicates, tiny n", {
  set.seed(14)
  k <- gk_kernel("matern", range = 0.2, smoothness = 2.5)
  t <- runif(700)
  shapes <- list(
    line = cbind(t, 2 * t),
    line3 = cbind(t, 0.5, 1 - t),
    clustered = rbind(matrix(rnorm(600, sd = 0.01), ncol = 2),
                      matrix(rnorm(600, mean = 3, sd = 0.2), ncol = 2),
                      c(10, 10)),
    duplicated = matrix(rep(runif(300), each = 3), ncol = 2),
    constant = matrix(0.3, 200, 3),
    small = matrix(runif(21), ncol = 3),
    one = matrix(c(0.1, 0.2), 1, 2))
  for (backend in test_backends()) {
    for (name in names(shapes)) {
      locs <- shapes[[name]]
      x <- rnorm(nrow(locs))
      K <- kernel_matrix(locs, kernel = k, backend = "cpu")
      A <- h2_matrix(locs, k, leaf_size = 32, backend = backend)
      # order 4 (the 3D default) interpolates to about 1e-4, order 8 (2D) to 1e-7
      expect_lt(rel2(drop(A %*% x), drop(K %*% x)), if (ncol(locs) == 3) 1e-3 else 1e-5)
    }
  }
})

test_that("as.matrix, print and summary describe the matrix", {
  set.seed(15)
  locs <- matrix(runif(600), ncol = 3)
  k <- gk_kernel("exponential", range = 0.3)
  A <- h2_matrix(locs, k, nugget = 0.1, leaf_size = 16, backend = "cpu")
  M <- as.matrix(A)
  expect_lt(rel_err(M, kernel_matrix(locs, kernel = k) + diag(0.1, 200)), 5e-3)
  expect_lt(max(abs(M - t(M))), 5e-3)
  s <- summary(A)
  expect_equal(s$n, 200)
  expect_equal(s$levels, 5)
  expect_gt(s$dense_bytes, 0)
  expect_output(print(A), "h2matrix> 200 x 200")
  expect_output(print(A), "build time")
  expect_output(show(A), "h2matrix> 200 x 200")
  expect_lt(h2_error(A)$probe, 5e-3)   # N(0, 1) probes: the same bound as the dense check above
  expect_error(as.matrix(h2_matrix(matrix(runif(20002 * 2), ncol = 2), k, backend = "cpu")),
               "n <= 10000")
})

test_that("single precision agrees with double precision", {
  set.seed(16)
  n <- 2000
  locs <- matrix(runif(2 * n), ncol = 2)
  k <- gk_kernel("exponential", range = 0.1)
  X <- matrix(runif(2 * n), n, 2)
  exact <- kernel_matrix(locs, kernel = k, backend = "cpu") %*% X
  for (backend in test_backends()) {
    A <- h2_matrix(locs, k, precision = "single", backend = backend)
    expect_lt(rel2(A %*% X, exact), 1e-5)
  }
})

test_that("the GPU and the CPU give the same products", {
  skip_if_no_gpu()
  set.seed(17)
  for (d in 2:3) {
    n <- 3000
    locs <- matrix(runif(d * n), ncol = d)
    k <- gk_kernel("matern", range = 0.2, smoothness = 1.5)
    X <- matrix(rnorm(2 * n), n, 2)
    cpu <- h2_matrix(locs, k, backend = "cpu") %*% X
    gpu <- h2_matrix(locs, k, backend = "gpu") %*% X
    expect_lt(rel2(gpu, cpu), 1e-12)
    gpu32 <- h2_matrix(locs, k, backend = "gpu", precision = "single") %*% X
    expect_lt(rel2(gpu32, cpu), 1e-5)
    # more right-hand sides and larger leaves than the small-block kernels take
    # (cuBLAS batched products), and the same object reused
    X6 <- matrix(rnorm(6 * n), n, 6)
    big <- h2_matrix(locs, k, leaf_size = 100, backend = "gpu")
    ref <- h2_matrix(locs, k, leaf_size = 100, backend = "cpu") %*% X6
    expect_lt(rel2(big %*% X6, ref), 1e-12)
    expect_lt(rel2(big %*% X6[, 1:2], ref[, 1:2]), 1e-12)
    expect_lt(rel2(big %*% X6, ref), 1e-12)
  }
})

test_that("small GPU products (split rows, one launch per phase) match the CPU, run to run", {
  skip_if_no_gpu()
  set.seed(19)
  k <- gk_kernel("exponential", range = 0.1)
  for (d in 2:3) {
    # n = 2^14: too few block rows for the GPU, so long rows are split
    for (n in c(3000, 2^14)) {
      locs <- matrix(runif(d * n), ncol = d)
      X <- matrix(rnorm(3 * n), n, 3)
      ref <- h2_matrix(locs, k, backend = "cpu") %*% X
      for (precision in c("double", "single")) {
        A <- h2_matrix(locs, k, backend = "gpu", precision = precision)
        tol <- if (precision == "double") 1e-12 else 1e-5
        Y <- A %*% X
        y <- drop(A %*% X[, 2])
        expect_lt(rel2(Y, ref), tol)
        expect_lt(rel2(y, ref[, 2]), tol)
        # partial sums are added in a fixed order: the same bits every run
        expect_identical(A %*% X, Y)
        expect_identical(drop(A %*% X[, 2]), y)
        # the cuBLAS path still runs (timing only)
        for (nrhs in c(1L, 3L))
          # Internal functions here: native timings and row products with no export.
          expect_gt(.Call(gpukernels:::gk_r_h2_time, gpukernels:::h2_ptr(A), nrhs, 1L, TRUE), 0)
      }
    }
  }
  # ranks that differ between levels (compression) in the one-launch coupling
  locs <- matrix(runif(2 * 3000), ncol = 2)
  X <- matrix(rnorm(2 * 3000), 3000, 2)
  A <- h2_matrix(locs, k, backend = "gpu")
  B <- h2_compress(A, 1e-6)
  YB <- B %*% X
  expect_lt(rel2(YB, A %*% X), 2e-6 + 1e-12)
  expect_identical(B %*% X, YB)
})

test_that("GPU products of R vectors: staged in pieces, NA checked on the GPU", {
  skip_if_no_gpu()
  set.seed(20)
  n <- 3001
  locs <- perturbed_grid(n, 3)
  k <- gk_kernel("exponential", range = 0.2)
  X4 <- scale(matrix(rnorm(4 * n), n, 4), scale = FALSE)   # mean zero
  exact <- dense_of(locs, k, 0.1) %*% X4
  cpu <- h2_matrix(locs, k, nugget = 0.1, backend = "cpu") %*% X4
  expect_lt(rel2(cpu, exact), 1e-2)   # order 4 in 3D, mean-zero vectors
  # 1000 columns, 24 MB: three pieces of the 8 MiB staging, the last one partial,
  # with piece boundaries inside columns
  X <- X4[, rep(1:4, 250)]
  for (storage in c("stored", "on_the_fly")) for (precision in c("double", "single")) {
    A <- h2_matrix(locs, k, nugget = 0.1, backend = "gpu", storage = storage,
                   precision = precision)
    tol <- if (precision == "double") 1e-12 else 1e-5
    info <- paste(storage, precision)
    expect_lt(rel2(A %*% X4, exact), 1.5 * rel2(cpu, exact))
    expect_lt(rel2(A %*% X4[, 3], cpu[, 3]), tol)
    Y <- A %*% X
    expect_equal(dim(Y), c(n, 1000L))
    expect_lt(rel2(Y, cpu[, rep(1:4, 250)]), tol)
    for (bad in c(NA, NaN, Inf, -Inf)) {
      x <- X4[, 1]
      x[sample(n, 1)] <- bad
      expect_error(A %*% x, "NA, NaN or infinite", info = info)
      Xb <- X
      Xb[n, 1000] <- bad   # the last entry of the last piece
      expect_error(A %*% Xb, "NA, NaN or infinite", info = info)
    }
    # an error leaves nothing behind: the next products are right, and
    # repeated ones hold no more memory (collected first: the matrices made
    # before, freed during the products, would change gk_memory() too)
    invisible(gc())
    r <- repeated_products(A, X, 3)
    expect_lt(rel2(r$last, cpu[, rep(1:4, 250)]), tol)
    # the on-the-fly sums may add in another order from run to run
    if (storage == "stored") expect_identical(r$first, r$last)
    else expect_lt(rel2(r$first, r$last), tol)
  }
})

test_that("bad input gives clear errors", {
  locs <- matrix(runif(200), ncol = 2)
  k <- gk_kernel("exponential", range = 0.1)
  bad <- locs
  bad[3, 1] <- NA
  expect_error(h2_matrix(bad, k), "NA")
  bad[3, 1] <- Inf
  expect_error(h2_matrix(bad, k), "infinite")
  expect_error(h2_matrix(runif(10), k), "2 or 3 dimensions")
  expect_error(h2_matrix(matrix(runif(40), ncol = 4), k), "2 or 3 dimensions")
  expect_error(h2_matrix(matrix(numeric(0), ncol = 2), k), "empty")
  expect_error(h2_matrix(locs, gk_kernel("exponential", range = 0)), "positive")
  expect_error(h2_matrix(locs, gk_kernel("exponential", range = -1)), "positive")
  expect_error(h2_matrix(locs, gk_kernel("exponential", range = c(1, 2, 3))), "range")
  expect_error(h2_matrix(locs, "linear"), "supports")
  expect_error(h2_matrix(locs, k, nugget = -1), "nugget")
  expect_error(h2_matrix(locs, k, leaf_size = 0), "leaf_size")
  expect_error(h2_matrix(locs, k, leaf_size = 2.5), "leaf_size")
  expect_error(h2_matrix(locs, k, eta = 0), "eta")
  expect_error(h2_matrix(locs, k, order = 0), "order")
  expect_error(h2_matrix(locs, k, order = 40), "order")
  expect_error(h2_matrix(locs, k, precision = "half"), "precision")
  expect_error(h2_matrix(locs, k, backend = "tpu"), "backend")
  A <- h2_matrix(locs, k, backend = "cpu")
  expect_error(A %*% runif(99), "non-conformable")
  expect_error(A %*% c(NA, runif(99)), "NA")
  expect_error(A %*% cbind(runif(100), c(runif(99), -Inf)), "infinite")
  expect_error(A %*% cbind(runif(100), c(NaN, runif(99))), "NaN")
  expect_error(A %*% c(TRUE, NA, rep(FALSE, 98)), "NA")
  expect_error(A %*% letters[1:100], "numeric")
  expect_error(h2_error(locs), "h2matrix")
  expect_error(h2_error(A, 0), "probes")
  expect_equal(dim(A %*% matrix(0, 100, 0)), c(100L, 0L))
})

test_that("GPU memory is released when h2matrix objects are collected", {
  skip_if_no_gpu()
  set.seed(18)
  locs <- matrix(runif(3 * 20000), ncol = 3)
  k <- gk_kernel("exponential", range = 0.2)
  A <- h2_matrix(locs, k, backend = "gpu")
  invisible(A %*% matrix(runif(20000 * 8), ncol = 8))
  rm(A)
  before <- gpu_free_after_gc()
  for (i in 1:5) {
    A <- h2_matrix(locs, k, backend = "gpu")
    for (j in 1:3) invisible(A %*% matrix(runif(20000 * j * 3), ncol = j * 3))
    rm(A)
  }
  expect_lt(before - gpu_free_after_gc(), 32 * 2^20)
})

test_that("rows of an H2 product equal those rows of the whole product", {
  set.seed(71)
  n <- 1111L
  locs <- matrix(runif(2 * n), ncol = 2)
  k <- gk_kernel("exponential", range = 0.1)
  backends <- c("cpu", if (gk_has_gpu()) "gpu")
  for (b in backends) {
    A <- h2_matrix(locs, k, nugget = 0.01, backend = b)
    blocks <- list(matrix(rnorm(n)), matrix(rnorm(3 * n), n))
    whole <- A %*% do.call(cbind, blocks)
    for (rows in list(sort(sample(n, 37)), 1L, n, integer())) {
      got <- .Call(gpukernels:::gk_r_h2_matmul_rows, gpukernels:::h2_ptr(A), blocks, rows)
      expect_equal(got, whole[rows, , drop = FALSE], tolerance = 1e-13, info = b)
    }
    bad <- blocks
    bad[[2]][5, 2] <- NaN
    expect_error(.Call(gpukernels:::gk_r_h2_matmul_rows, gpukernels:::h2_ptr(A), bad, 1:3), "NaN")
  }
})

test_that("a build from the points' tree (h2_matrix(tol =)'s) is the build from the points", {
  set.seed(72)
  new <- gpukernels:::h2_matrix_new
  cases <- list(list(n = 1501L, d = 3L, k = gk_kernel("exponential", range = 0.2)),
                list(n = 999L, d = 2L, k = gk_kernel("matern", range = c(0.1, 0.2),
                                                     smoothness = 1.5)),
                list(n = 70L, d = 3L, k = gk_kernel("gaussian", range = 0.3)),
                list(n = 1L, d = 2L, k = gk_kernel("exponential", range = 0.1)))
  for (cs in cases) {
    locs <- matrix(runif(cs$n * cs$d), ncol = cs$d)
    x <- matrix(rnorm(2 * cs$n), cs$n, 2)
    for (b in test_backends()) {
      tree <- .Call(gpukernels:::gk_r_h2_tree, locs, cs$k, 32L, 2, 1L)
      for (o in 2:4) {
        for (storage in c("stored", "on_the_fly")) {
          A <- h2_matrix(locs, cs$k, nugget = 0.1, leaf_size = 32, eta = 2, order = o,
                         storage = storage, backend = b)
          B <- new(A$locs, A$kernel, 0.1, 32, o, 2, "double", b, storage, tree)
          what <- sprintf("n = %d, order %d, %s, %s", cs$n, o, storage, b)
          if (b == "cpu") expect_identical(B %*% x, A %*% x, info = what)
          else expect_equal(B %*% x, A %*% x, tolerance = 1e-13, info = what)   # atomics
          timed <- c("build_seconds", "tree_seconds")
          ia <- gpukernels:::h2_info(A)
          ib <- gpukernels:::h2_info(B)
          expect_identical(ib[setdiff(names(ib), timed)], ia[setdiff(names(ia), timed)],
                           info = what)
          expect_identical(unclass(B)[-1], unclass(A)[-1], info = what)   # all but `native`
        }
      }
      # a tree of other settings (eta, leaves, kernel) is refused; so are a
      # freed tree and a pointer that is not a tree
      other <- "internal: the H2 tree was built for other points or settings"
      expect_error(new(locs, cs$k, 0, 32, 3, 3, "double", b, "stored", tree), other)
      expect_error(new(locs, cs$k, 0, 64, 3, 2, "double", b, "stored", tree), other)
      k2 <- gk_kernel("cauchy", range = 0.2)
      expect_error(new(locs, k2, 0, 32, 3, 2, "double", b, "stored", tree), other)
      expect_error(new(locs[c(1, 1), ], cs$k, 0, 32, 3, 2, "double", b, "stored", tree), other)
      .Call(gpukernels:::gk_r_h2_tree_free, tree)
      expect_error(new(locs, cs$k, 0, 32, 3, 2, "double", b, "stored", tree), "tree was freed")
      A <- h2_matrix(locs, cs$k, backend = b)
      expect_error(new(locs, cs$k, 0, 32, 3, 2, "double", b, "stored",
                       .subset2(A, "native")$ptr), "not valid")
    }
  }
})
