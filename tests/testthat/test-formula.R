# gk_formula(): formulas translated to C, reduced by the engines, against
# brute-force R on fresh random points (helper-formula.R has the cases).
old_cache <- options(gpukernels.cache_dir = file.path(tempdir(), "gk-formula-cache"))

test_that("ten formulas match brute-force R in every reduction (sizes, axes, backends)", {
  set.seed(39)
  for (backend in test_backends()) for (case in formula_cases()) {
    for (sizes in list(c(37, 300), c(1, 5), c(260, 1))) {
      x <- matrix(runif(sizes[1] * case$dim, -1, 1), sizes[1], case$dim)
      y <- matrix(runif(sizes[2] * case$dim, -1, 1), sizes[2], case$dim)
      b <- matrix(rnorm(sizes[2] * 2), sizes[2], 2)
      F <- formula_matrix(case$r, x, y)
      got <- kernel_reduce(x, y, b, kernel = case$f, backend = backend)
      expect_lt(rel_err(got, F %*% b), 1e-12)
      # the transposed reduction evaluates F(x_i, y_j) with x and y swapped back
      bx <- rnorm(sizes[1])
      got <- kernel_matvec(x, y, bx, kernel = case$f, axis = 2, backend = backend)
      expect_lt(rel_err(got, drop(t(F) %*% bx)), 1e-12)
      expect_lt(rel_err(kernel_reduce(x, y, kernel = case$f, reduction = "min", backend = backend),
                        apply(F, 1, min)), 1e-12)
      expect_identical(kernel_reduce(x, y, kernel = case$f, reduction = "argmax", backend = backend),
                       apply(F, 1, which.max))
      w <- runif(sizes[2])
      expect_lt(rel_err(kernel_reduce(x, y, w, kernel = case$f, reduction = "logsumexp",
                                      backend = backend),
                        log(exp(F) %*% w)), 1e-12)
    }
  }
})

test_that("k smallest values of a formula (an L1 distance) match a sort", {
  set.seed(1)
  f <- gk_formula(sum(abs(x - y)))
  for (backend in test_backends()) {
    x <- matrix(runif(300), 100, 3)
    y <- matrix(runif(600), 200, 3)
    F <- formula_matrix(function(a, b) sum(abs(a - b)), x, y)
    nn <- kernel_reduce(x, y, kernel = f, reduction = "kmin", k = 7, backend = backend)
    expect_identical(nn$index, t(apply(F, 1, order))[, 1:7])
    expect_lt(rel_err(nn$values, t(apply(F, 1, sort))[, 1:7]), 1e-12)
  }
})

test_that("formulas reduce over empty sets and block-sparse ranges", {
  f <- gk_formula(exp(-sqdist(x, y)) * (1 + x1 * y1))
  x <- matrix(runif(40), 20, 2)
  for (backend in test_backends()) {
    expect_identical(kernel_matvec(x, x[0, , drop = FALSE], numeric(0), kernel = f, backend = backend),
                     rep(0, 20))
    mask <- matrix(c(TRUE, FALSE, TRUE, TRUE), 2, 2)
    cl <- matrix(c(1L, 11L, 10L, 20L), 2)
    ranges <- ranges_from_mask(cl, cl, mask)
    b <- rnorm(20)
    F <- formula_matrix(function(a, c) exp(-sum((a - c)^2)) * (1 + a[1] * c[1]), x, x)
    keep <- matrix(FALSE, 20, 20)
    keep[1:10, 1:10] <- keep[1:10, 11:20] <- keep[11:20, 11:20] <- TRUE
    got <- kernel_matvec(x, x, b, kernel = f, ranges = ranges, backend = backend)
    expect_lt(rel_err(got, (F * keep) %*% b), 1e-12)
  }
})

test_that("parameters change without compiling again, and equal bodies share one library", {
  f <- gk_formula(exp(-sqdist(x, y) / l), l = 0.5)
  x <- matrix(runif(30), 15, 2)
  a1 <- kernel_matvec(x, x, rep(1, 15), kernel = f, backend = "cpu")
  dlls <- length(gpukernels:::gk_state$formula_dlls)
  f2 <- gpukernels:::gk_formula_set(f, list(l = 2))
  a2 <- kernel_matvec(x, x, rep(1, 15), kernel = f2, backend = "cpu")
  expect_identical(length(gpukernels:::gk_state$formula_dlls), dlls)
  F2 <- exp(-as.matrix(dist(x))^2 / 2)
  expect_lt(rel_err(a2, rowSums(F2)), 1e-12)
  expect_false(isTRUE(all.equal(a1, a2)))
  # the same body under other parameter names
  g <- gk_formula(exp(-sqdist(x, y) / width), width = 2)
  expect_identical(length(gpukernels:::gk_state$formula_dlls), dlls)
  expect_lt(rel_err(kernel_matvec(x, x, rep(1, 15), kernel = g, backend = "cpu"), rowSums(F2)), 1e-12)
  expect_identical(length(gpukernels:::gk_state$formula_dlls), dlls)
})

test_that("the one-step path keeps each call's own formula form (parameters, axis, dimension)", {
  set.seed(7)
  f <- gk_formula(exp(-sqdist(x, y) / l) * (1 + x1 * y1), l = 0.5)
  for (backend in test_backends()) {
    # alternating calls: every change of parameter, axis, dimension or
    # precision must reach the engine, never the previous call's form
    for (round in 1:2) for (l in c(0.5, 2)) for (dim in c(2, 3)) for (axis in 1:2) {
      g <- gpukernels:::gk_formula_set(f, list(l = l))
      x <- matrix(runif(13 * dim, -1, 1), 13, dim)
      y <- matrix(runif(9 * dim, -1, 1), 9, dim)
      F <- formula_matrix(function(a, c) exp(-sum((a - c)^2) / l) * (1 + a[1] * c[1]), x, y)
      b <- rnorm(if (axis == 1) 9 else 13)
      want <- if (axis == 1) drop(F %*% b) else drop(t(F) %*% b)
      for (precision in if (backend == "gpu") c("double", "single") else "double") {
        got <- kernel_matvec(x, y, b, kernel = g, axis = axis, precision = precision,
                             backend = backend)
        expect_lt(rel_err(got, want), if (precision == "double") 1e-12 else 1e-5)
      }
      # integer points take the general path: the same sums
      xi <- matrix(sample(-3:3, 13 * dim, TRUE), 13, dim)
      Fi <- formula_matrix(function(a, c) exp(-sum((a - c)^2) / l) * (1 + a[1] * c[1]), xi, y)
      bi <- rnorm(9)
      expect_lt(rel_err(kernel_matvec(xi, y, bi, kernel = g, backend = backend),
                        drop(Fi %*% bi)), 1e-12)
    }
  }
})

test_that("malformed formulas give errors that name the offending part", {
  expect_error(gk_formula(exp(-sqdist(x, z))), "in `sqdist\\(x, z\\)`: `z` is neither a point")
  expect_error(gk_formula(exp(-besselK(x1, 1))), "in `besselK\\(x1, 1\\)`: unknown function besselK")
  expect_error(gk_formula(exp(-s * x1)), "`s` is neither")
  expect_error(gk_formula(exp(-s * x1), s = "a"), "parameter `s` must be one finite number")
  expect_error(gk_formula(exp(-s * x1), s = c(1, 2)), "one finite number")
  expect_error(gk_formula(x1 * b), "`b` is not a formula variable")
  expect_error(gk_formula(x1, x2 = 3), "names a point or coordinate")
  expect_error(gk_formula(exp(x1, 2)), "in `exp\\(x1, 2\\)`: exp\\(\\) takes 1 argument")
  expect_error(gk_formula(x[z]), "constant whole numbers")
  expect_error(gk_formula(z[1]), "only the points x and y can be indexed")
  expect_error(gk_formula(exp(x), 1), "give every parameter by name")
  expect_error(gk_formula(t_x - t_y, coords = c("a", "a")), "distinct names")
  x <- matrix(runif(20), 10, 2)
  expect_error(kernel_matvec(x, x, rep(1, 10), kernel = gk_formula(x - y), backend = "cpu"),
               "gives a vector of 2 values")
  expect_error(kernel_matvec(x, x, rep(1, 10), kernel = gk_formula(x3 * y1), backend = "cpu"),
               "in `x3 \\* y1`: coordinate 3 of points with 2 coordinates")
  expect_error(kernel_matvec(x, x, rep(1, 10), kernel = gk_formula(x[1:3] * y1), backend = "cpu"),
               "coordinate 3 of points with 2 coordinates")
  expect_error(kernel_eval(gk_formula(x1 * y1), 1), "formulas \\(gk_formula\\(\\)\\) are taken by")
  # kernel_matrix() takes them (on the CPU): F(x_i, y_j), not symmetric
  y2 <- matrix(runif(6), 3, 2)
  expect_equal(unname(kernel_matrix(x, y2, kernel = gk_formula(x1 * y2^2 + s, s = 0.5))),
               outer(x[, 1], y2[, 2]^2) + 0.5, tolerance = 1e-14)
  expect_error(gk_formula(exp(-s * x1), s = NaN), "one finite number \\(or NA\\)")
  expect_error(kernel_matvec(x, x, rep(1, 10), kernel = gk_formula(x1 * s, s = NA),
                             backend = "cpu"), "parameter `s` has no value")
  expect_error(kernel_matvec(x, x, rep(1, 10), kernel = gk_formula(x1 / s, s = 0), backend = "cpu"),
               "is not finite")
})

test_that("a C compile error becomes an R error with the compiler's message", {
  src <- "double gkf_broken(const double *x) { return x[0] +; }"
  so <- file.path(tempdir(), paste0("gkf_broken", .Platform$dynlib.ext))
  expect_error(gpukernels:::gk_formula_shlib("gkf_broken", src, so),
               "compiling the formula for the CPU failed[^\n]*\n.*(error|expected)")
  expect_false(file.exists(so))
})

test_that("the GPU translation of the formulas compiles under NVRTC (no GPU needed)", {
  skip_if_not(gk_info()$cuda, "a CPU-only build compiles no GPU kernels")
  for (case in formula_cases()) {
    expect_true(gpukernels:::gk_formula_gpu_check(case$f, case$dim, 90L))
    expect_true(gpukernels:::gk_formula_gpu_check(case$f, case$dim, 90L, single = TRUE, swap = TRUE))
  }
  f <- formula_cases()$wendland$f
  expect_true(gpukernels:::gk_formula_gpu_check(f, 7L, 90L, reduction = "kmin", k = 10L))
  expect_true(gpukernels:::gk_formula_gpu_check(f, 3L, 90L, reduction = "logsumexp", wrt = "x2"))
})

test_that("single precision on the GPU is close to double", {
  skip_if_no_gpu()
  f <- formula_cases()$space_time
  x <- matrix(runif(3000), 1000, 3)
  b <- rnorm(1000)
  want <- kernel_matvec(x, x, b, kernel = f$f, backend = "cpu")
  got <- kernel_matvec(x, x, b, kernel = f$f, backend = "gpu", precision = "single")
  expect_lt(rel_err(got, want), 1e-4)
})

test_that("the GPU's exponential matches the CPU's from 1e-306 to 1e306, and overflows to Inf", {
  skip_if_no_gpu()
  f <- gk_formula(exp(k * x1 * y1), k = 1)
  x <- matrix(seq(-30, 30, length.out = 61), ncol = 1)
  y <- matrix(c(1, 10, 23.5), ncol = 1)
  for (precision in c("double", "single")) {
    want <- kernel_reduce(x, y, kernel = f, reduction = "kmin", k = 3, backend = "cpu")$values
    got <- kernel_reduce(x, y, kernel = f, reduction = "kmin", k = 3, backend = "gpu",
                         precision = precision)$values
    if (precision == "double") expect_lt(max(abs(got / want - 1)), 1e-12)
    else expect_lt(max(abs(got / want - 1)[want < 1e38 & want > 1e-37]), 1e-4)
  }
  big <- gpukernels:::gk_formula_set(f, list(k = 1.2))
  got <- kernel_reduce(x, y, kernel = big, reduction = "max", backend = "gpu")
  want <- kernel_reduce(x, y, kernel = big, reduction = "max", backend = "cpu")
  expect_identical(is.infinite(got), is.infinite(want))
  expect_lt(max(abs(got / want - 1)[is.finite(want)]), 1e-12)
  expect_true(is.infinite(got[61]))
})

options(old_cache)
