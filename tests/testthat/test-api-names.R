# The API review of issue 35: the new names work, and each old name still
# works for one release with one deprecation warning per call.

draw_pcfs <- function(n) {
  lapply(seq_len(n), function(i) {
    k <- sample(2:6, 1)
    pcf(c(0, sort(runif(k - 1, 0, 3))), c(rnorm(k - 1), 0))
  })
}

test_that("scheme replaces method in kernel_reduce(), kernel_matvec() and knn()", {
  set.seed(1)
  x <- matrix(runif(40), 20, 2)
  b <- rnorm(20)
  k <- gk_kernel("gaussian", range = 0.3)
  ref <- kernel_reduce(x, x, b, k, scheme = "1d", backend = "cpu")
  expect_warning(old <- kernel_reduce(x, x, b, k, method = "1d", backend = "cpu"),
                 "deprecated.*`method` -> `scheme`", class = "deprecatedWarning")
  expect_identical(old, ref)
  expect_warning(old <- kernel_matvec(x, x, b, k, method = "2d", backend = "cpu"), "deprecated")
  expect_identical(old, ref)
  nn <- knn(x, k = 3, scheme = "auto", backend = "cpu")
  expect_warning(old <- knn(x, k = 3, method = "auto", backend = "cpu"), "deprecated")
  expect_identical(old, nn)
  expect_error(knn(x, k = 3, method = "1d", scheme = "2d"), "not both")
  expect_error(kernel_reduce(x, scheme = "3d"), "`scheme` must be one of")
})

test_that("backend comes last and kernel_matvec() passes the rest on", {
  for (f in list(kernel_reduce, knn, kernel_matrix, h2_matrix, gp_fit, gp_loglik, pcf_pdist,
                 pcf_cdist, pcf_kernel, pcf_knn, pcf_dist_file)) {
    a <- setdiff(names(formals(f)), c("...", "method", "locs", "X", "Y", "type"))
    expect_identical(tail(a, 1), "backend")
  }
  set.seed(2)
  x <- matrix(runif(30), 15, 2)
  expect_identical(kernel_matvec(x, x, rep(1, 15), "gaussian", "cpu", scheme = "1d"),
                   kernel_matvec(x, b = rep(1, 15), backend = "cpu"))
})

test_that("PCF functions take x and y; X, Y and type still work with a warning", {
  set.seed(3)
  X <- draw_pcfs(8)
  Y <- draw_pcfs(5)
  expect_warning(d <- pcf_pdist(X = X, backend = "cpu"), "`X` -> `x`")
  expect_equal(d, pcf_pdist(x = X, backend = "cpu"), ignore_attr = "call")
  ref <- pcf_cdist(X, Y, p = 2, backend = "cpu")
  w <- testthat::capture_warnings(old <- pcf_cdist(X = X, Y = Y, p = 2, backend = "cpu"))
  expect_length(w, 1L)   # one warning per call, naming both
  expect_match(w, "`X` -> `x`, `Y` -> `y`")
  expect_identical(old, ref)
  expect_warning(old <- pcf_kernel(X = X, Y = Y, backend = "cpu"), "deprecated")
  expect_identical(old, pcf_kernel(X, Y, backend = "cpu"))
  expect_error(pcf_pdist(X, X = X), "not both")
  expect_warning(m <- pcf_mean(X = X), "deprecated")
  expect_identical(m, pcf_mean(X))
  expect_warning(l <- as_pcf_list(X = X), "deprecated")
  expect_identical(l, as_pcf_list(X))
})

test_that("pcf_knn() takes knn()'s order, and the old order still works", {
  set.seed(4)
  X <- draw_pcfs(12)
  Y <- draw_pcfs(6)
  among <- pcf_knn(X, k = 2, backend = "cpu")
  against <- pcf_knn(X, Y, k = 2, backend = "cpu")
  expect_identical(names(against), c("index", "distance"))
  expect_identical(pcf_knn(X, Y, 2, backend = "cpu"), against)
  expect_warning(old <- pcf_knn(X, 2, backend = "cpu"), "pcf_knn\\(X, k, Y\\)")
  expect_identical(old, among)
  expect_warning(old <- pcf_knn(X, 2, Y, backend = "cpu"), "deprecated")
  expect_identical(old, against)
  w <- testthat::capture_warnings(old <- pcf_knn(X = X, k = 2, Y = Y, backend = "cpu"))
  expect_length(w, 1L)
  expect_identical(old, against)
  expect_warning(old <- pcf_knn(X, 2, Y = Y, backend = "cpu"), "deprecated")
  expect_identical(old, against)
})

test_that("pcf_dist_file() takes file_type; type still works with a warning", {
  skip_if_not_installed("bigmemory")
  X <- draw_pcfs(6)
  f <- tempfile("dist")
  on.exit(unlink(paste0(f, c(".bin", ".desc"))))
  D <- pcf_dist_file(X, file = f, file_type = "float", backend = "cpu")
  expect_identical(bigmemory::typeof(D), "float")
  expect_warning(D <- pcf_dist_file(X, file = f, type = "double", overwrite = TRUE,
                                    backend = "cpu"), "`type` -> `file_type`")
  expect_identical(bigmemory::typeof(D), "double")
})

test_that("h2_matrix() takes x; locs still works with a warning", {
  set.seed(5)
  x <- matrix(runif(400), ncol = 2)
  k <- gk_kernel("exponential", range = 0.2)
  v <- rnorm(200)
  ref <- h2_matrix(x, k, backend = "cpu") %*% v
  expect_warning(A <- h2_matrix(locs = x, kernel = k, backend = "cpu"), "`locs` -> `x`")
  expect_identical(A %*% v, ref)
  expect_identical(h2_matrix(x, "exponential", backend = "cpu") %*% v,
                   h2_matrix(x, gk_kernel("exponential"), backend = "cpu") %*% v)
})

test_that("every function taking a kernel takes a gk_kernel() or a family name", {
  set.seed(6)
  x <- matrix(runif(60), 30, 2)
  y <- rnorm(30)
  k <- gk_kernel("exponential")
  expect_identical(kernel_matrix(x, kernel = "exponential", backend = "cpu"),
                   kernel_matrix(x, kernel = k, backend = "cpu"))
  expect_identical(gp_loglik(x, y, kernel = "exponential", nugget = 0.1, method = "dense",
                             backend = "cpu")$loglik,
                   gp_loglik(x, y, kernel = k, nugget = 0.1, method = "dense",
                             backend = "cpu")$loglik)
  expect_identical({ set.seed(1); gp_simulate(x, "exponential", nugget = 0.1, backend = "cpu") },
                   { set.seed(1); gp_simulate(x, k, nugget = 0.1, backend = "cpu") })
})

test_that("gp_fit() takes a gk_kernel(): its parameters are the starting values", {
  set.seed(7)
  locs <- matrix(runif(200), ncol = 2)
  y <- gp_simulate(locs, gk_kernel("exponential", range = 0.3), nugget = 0.05,
                   backend = "cpu")
  k <- gk_kernel("exponential", range = 0.25, variance = 0.8)
  f1 <- gp_fit(locs, y, kernel = k, method = "dense", backend = "cpu")
  f2 <- gp_fit(locs, y, kernel = "exponential", method = "dense", backend = "cpu",
               start = list(variance = 0.8, range = 0.25, nugget = 0.8 / 9))
  expect_equal(coef(f1), coef(f2))
  expect_error(gp_fit(locs, y, kernel = gk_kernel("exponential", range = c(1, 2)),
                      backend = "cpu"), "one range")
})
