# H2 matrices split over several GPUs (h2_matrix(devices = )): products equal
# those of the matrix on one GPU and the dense matrix's within the
# approximation; what such a matrix cannot do is a clear error.

gpu_count <- function() {
  if (!gk_has_gpu()) return(0L)
  nrow(gk_info()$devices)
}

skip_if_fewer_gpus <- function(count) {
  skip_if_not(gpu_count() >= count, paste("fewer than", count, "GPUs"))
}

test_that("without GPUs, devices is an error unless the backend is the CPU", {
  skip_if(gk_has_gpu())
  set.seed(11)
  locs <- matrix(runif(600), ncol = 2)
  expect_error(h2_matrix(locs, "exponential", devices = 1:2), "no GPU here")
  A <- h2_matrix(locs, gk_kernel("exponential", range = 0.2), backend = "cpu", devices = 1:2)
  x <- rnorm(300)
  expect_lt(rel2(as.vector(A %*% x), as.vector(dense_of(locs, A$kernel) %*% x)), 1e-5)
})

test_that("a matrix split over GPUs multiplies as on one GPU and as the dense matrix", {
  skip_if_fewer_gpus(2)
  set.seed(12)
  most <- min(gpu_count(), 4L)
  cases <- list(list(d = 2, n = 3001, k = gk_kernel("exponential", range = 0.1), leaf = 64),
                list(d = 3, n = 4099, k = gk_kernel("matern", range = 0.2, smoothness = 1.5),
                     leaf = 32),
                list(d = 2, n = 30, k = gk_kernel("gaussian", range = 0.3), leaf = 64),
                list(d = 3, n = 20000, k = gk_kernel("exponential", range = 0.2), leaf = 64))
  for (case in cases) for (precision in c("double", "single")) {
    locs <- matrix(runif(case$n * case$d), ncol = case$d)
    x <- matrix(rnorm(case$n * 3), case$n)   # mean zero: cancellation shows
    one <- h2_matrix(locs, case$k, nugget = 0.1, leaf_size = case$leaf, precision = precision,
                     backend = "gpu")
    y1 <- one %*% x
    tol <- if (precision == "double") 1e-12 else 2e-5
    for (g in unique(c(2L, most))) {
      split <- h2_matrix(locs, case$k, nugget = 0.1, leaf_size = case$leaf,
                         precision = precision, backend = "gpu", devices = seq_len(g))
      label <- sprintf("d %d, n %d, %s, %d GPUs", case$d, case$n, precision, g)
      expect_lt(rel2(split %*% x, y1), tol, label = label)
      expect_lt(rel2(as.vector(split %*% x[, 2]), y1[, 2]), tol, label = label)
      expect_lt(rel2(t(x[, 1]) %*% split, t(y1[, 1])), tol, label = label)
      if (case$n <= 5000) {
        exact <- dense_of(locs, case$k, 0.1) %*% x
        expect_lt(rel2(split %*% x, exact), if (case$d == 2) 1e-4 else 3e-3, label = label)
      }
      expect_equal(dim(split %*% x[, 0, drop = FALSE]), c(case$n, 0L))
    }
  }
})

test_that("a split matrix is summarised, freed, rebuilt and released", {
  skip_if_fewer_gpus(2)
  set.seed(13)
  locs <- matrix(runif(2 * 5000), ncol = 2)
  k <- gk_kernel("exponential", range = 0.1)
  A <- h2_matrix(locs, k, backend = "gpu", devices = 2:1)
  expect_output(print(A), "split over GPUs 2, 1")
  expect_equal(summary(A)$backend, "gpu")
  x <- rnorm(5000)
  y <- A %*% x
  products <- repeated_products(A, x, 3)
  expect_identical(products$last, y)
  gk_free(A)
  expect_identical(A %*% x, y)   # rebuilt, split as before
  invisible(gc())   # earlier tests' matrices, else collected while B is built
  held <- gk_memory()
  B <- h2_matrix(locs, k, backend = "gpu", devices = 1:2)
  grown <- gk_memory() - held
  expect_true(all(grown[c("gpu1", "gpu2")] > 0))
  gk_free(B)
  expect_identical(gk_memory(), held)
})

test_that("what a split matrix cannot do is a clear error", {
  skip_if_fewer_gpus(2)
  set.seed(14)
  locs <- matrix(runif(2 * 3000), ncol = 2)
  k <- gk_kernel("exponential", range = 0.1)
  expect_error(h2_matrix(locs, k, backend = "gpu", devices = 1:2, storage = "on_the_fly"),
               "split over several GPUs stores its blocks")
  expect_error(h2_matrix(locs, k, backend = "gpu", devices = 1:2, tol = 1e-4),
               "`tol` searches on one GPU")
  expect_error(h2_matrix(locs, k, backend = "gpu", devices = c(1, gpu_count() + 1)),
               "distinct GPU numbers")
  expect_error(h2_matrix(locs, k, backend = "gpu", devices = c(1, 1)), "distinct GPU numbers")
  A <- h2_matrix(locs, k, backend = "gpu", devices = 1:2)
  expect_error(h2_compress(A, tol = 1e-4), "split over several GPUs")
  accuracy <- summary(A, accuracy = TRUE)$accuracy   # through products: as on one GPU
  expect_lt(accuracy$probe, 1e-4)
  x <- rnorm(3000)
  x[17] <- NA
  expect_error(A %*% x, "NA, NaN or infinite")
  X <- matrix(rnorm(3000 * 2), 3000)
  X[2999, 2] <- -Inf
  expect_error(A %*% X, "NA, NaN or infinite")
  X[2999, 2] <- NaN
  expect_error(X[, 2] %*% A, "NA, NaN or infinite")
  expect_error(A %*% rnorm(10), "non-conformable")
})

test_that("devices naming one GPU builds the matrix there", {
  skip_if_fewer_gpus(2)
  set.seed(15)
  locs <- matrix(runif(2 * 3000), ncol = 2)
  k <- gk_kernel("exponential", range = 0.1)
  before <- gk_info()$current_device
  invisible(gc())
  held <- gk_memory()
  other <- if (before == 1L) 2L else 1L
  A <- h2_matrix(locs, k, backend = "gpu", devices = other)
  expect_identical(gk_info()$current_device, before)
  grown <- gk_memory() - held
  expect_gt(grown[[paste0("gpu", other)]], 0)
  expect_equal(grown[[paste0("gpu", before)]], 0)
  x <- rnorm(3000)
  expect_lt(rel2(A %*% x, h2_matrix(locs, k, backend = "gpu") %*% x), 1e-12)
})
