# Scale folding of formulas of one squared distance (R/formula_fold.R): the
# folded bodies (one per sign of the folded parameter) against brute-force R
# and against the unfolded body (kernel_matrix(), which never folds).
old_cache <- options(gpukernels.cache_dir = file.path(tempdir(), "gk-formula-cache"))

fold_of <- function(f, dim, wrt = NULL, swap = FALSE) {
  ns <- asNamespace("gpukernels")
  e <- ns$gk_formula_expand(f, dim)
  if (!is.null(wrt)) e <- ns$gk_formula_deriv(e, wrt)
  if (swap) e <- ns$gk_formula_swap(e, dim)
  ns$gk_formula_fold(ns$gk_formula_optimize(e))
}

test_that("formulas of one squared distance fold; others do not", {
  g <- gk_formula(exp(-sqdist(x, y) / (2 * s^2)), s = 0.3)
  m <- gk_formula((1 + norm(x - y) / r) * exp(-norm(x - y) / r), r = 0.2)
  st <- gk_formula(exp(-sqdist(x[1:2], y[1:2]) / s) * cos(abs(x3 - y3)), s = 1)
  expect_false(is.null(fold_of(g, 3)))
  expect_false(is.null(fold_of(g, 3, swap = TRUE)))
  expect_false(is.null(fold_of(g, 3, wrt = "s")))
  expect_false(is.null(fold_of(m, 2)))
  expect_null(fold_of(g, 3, wrt = "x2"))   # x2 - y2 outside the distance
  expect_null(fold_of(st, 3))
  expect_null(fold_of(gk_formula(1 / (1 + sqdist(x, y))), 2))   # nothing to save
  # the gaussian becomes the built-in's body: 2^(-S') without a multiply or an overflow test
  native <- gpukernels:::gk_formula_native(g, 3, "gpu", fold = TRUE)
  expect_match(native$source, "gk_exp2_nonpos(t_9)", fixed = TRUE)
  expect_false(grepl("a.params", native$source, fixed = TRUE))
  expect_equal(native$scale, sqrt(64 / (2 * 0.3^2 * log(2))))
  expect_null(gpukernels:::gk_formula_native(g, 3, "gpu")$scale)
})

test_that("the folded bodies compile under NVRTC (no GPU needed)", {
  skip_if_not(gk_info()$cuda, "a CPU-only build compiles no GPU kernels")
  g <- gk_formula(exp(-sqdist(x, y) / (2 * s^2)), s = 0.3)
  m <- gk_formula((1 + norm(x - y) / r) * exp(-norm(x - y) / r), r = 0.2)
  for (single in c(FALSE, TRUE)) {
    expect_true(gpukernels:::gk_formula_gpu_check(g, 3L, 90L, single = single, fold = TRUE))
    expect_true(gpukernels:::gk_formula_gpu_check(m, 2L, 90L, single = single, fold = TRUE,
                                                  wrt = "r"))
  }
  pos <- gk_formula(exp(a * sqdist(x, y)), a = 0.5)
  expect_true(gpukernels:::gk_formula_gpu_check(pos, 2L, 90L, fold = TRUE))
})

test_that("folded sums match brute-force R and the unfolded body, for either sign", {
  set.seed(44)
  f <- gk_formula(exp(a * sqdist(x, y)) * (1 + c * sqdist(x, y)), a = -3, c = 0.5)
  m <- gk_formula((1 + sqrt(3) * norm(x - y) / r) * exp(-sqrt(3) * norm(x - y) / r), r = 0.3)
  for (backend in test_backends()) {
    for (sizes in list(c(37, 300), c(1, 5), c(260, 1))) {
      x <- matrix(runif(sizes[1] * 3, -1, 1), sizes[1], 3)
      y <- matrix(runif(sizes[2] * 3, -1, 1), sizes[2], 3)
      b <- rnorm(sizes[2])
      bx <- rnorm(sizes[1])
      # a < 0, a > 0 (the other body) and a = 0 (unfolded), then back
      for (a in c(-3, 0.5, 0, -3)) {
        fa <- gpukernels:::gk_formula_set(f, list(a = a))
        F <- formula_matrix(function(u, v) {
          s <- sum((u - v)^2)
          exp(a * s) * (1 + 0.5 * s)
        }, x, y)
        expect_lt(rel_err(kernel_matvec(x, y, b, kernel = fa, backend = backend), F %*% b), 1e-12)
        expect_lt(rel_err(kernel_matvec(x, y, bx, kernel = fa, axis = 2, backend = backend),
                          drop(t(F) %*% bx)), 1e-12)
        expect_lt(rel_err(kernel_matvec(x, y, b, kernel = fa, backend = backend),
                          kernel_matrix(x, y, kernel = fa) %*% b), 1e-12)
      }
      F <- formula_matrix(function(u, v) {
        d <- sqrt(3 * sum((u - v)^2)) / 0.3
        (1 + d) * exp(-d)
      }, x, y)
      expect_lt(rel_err(kernel_matvec(x, y, b, kernel = m, backend = backend), F %*% b), 1e-12)
      expect_lt(rel_err(kernel_reduce(x, y, kernel = m, reduction = "min", backend = backend),
                        apply(F, 1, min)), 1e-12)
    }
  }
})

test_that("folded formulas keep their digits far from the origin, and their gradients", {
  set.seed(45)
  g <- gk_formula(exp(-sqdist(x, y) / (2 * s^2)), s = 0.2)
  x <- matrix(runif(120), 40, 3) + 1e4
  y <- matrix(runif(150), 50, 3) + 1e4
  b <- rnorm(50)
  F <- formula_matrix(function(u, v) exp(-sum((u - v)^2) / (2 * 0.2^2)), x, y)
  for (backend in test_backends()) {
    expect_lt(rel_err(kernel_matvec(x, y, b, kernel = g, backend = backend), F %*% b), 1e-10)
    # d/ds of sum_i a_i sum_j F_ij b_j, a folded derivative body, against central differences
    a <- rnorm(40)
    got <- kernel_grad(x, y, b, kernel = g, wrt = "s", u = a, backend = backend)$s
    h <- 1e-5
    up <- sum(a * kernel_matvec(x, y, b, gpukernels:::gk_formula_set(g, list(s = 0.2 + h)),
                                backend = backend))
    down <- sum(a * kernel_matvec(x, y, b, gpukernels:::gk_formula_set(g, list(s = 0.2 - h)),
                                  backend = backend))
    expect_lt(abs(got - (up - down) / (2 * h)), 1e-6 * abs(got))
  }
})

test_that("GPU: formula GPs (dense and tiled, device solver) equal the CPU's", {
  skip_if_no_gpu()
  set.seed(46)
  n <- 400
  locs <- matrix(runif(2 * n), n, 2)
  m <- gk_formula((1 + norm(x - y) / r) * exp(-norm(x - y) / r), r = 0.15)
  y <- gp_simulate(locs, gk_kernel("matern", range = 0.15, smoothness = 1.5), nugget = 0.1,
                   backend = "cpu")
  for (method in c("dense", "tiled")) {
    a <- gp_loglik(locs, y, kernel = m, nugget = 0.1, method = method, gradient = TRUE,
                   backend = "cpu")
    b <- gp_loglik(locs, y, kernel = m, nugget = 0.1, method = method, gradient = TRUE,
                   backend = "gpu")
    tol <- if (method == "dense") 1e-8 * abs(a$loglik) else a$error + b$error
    expect_lt(abs(b$loglik - a$loglik), tol)
    expect_equal(b$gradient, a$gradient, tolerance = if (method == "dense") 1e-6 else 0.05)
  }
})

options(old_cache)
