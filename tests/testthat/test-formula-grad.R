# kernel_grad(): symbolic derivatives of formulas (R's D()) reduced by the
# engines, against central differences of the brute-force sum.
old_cache <- options(gpukernels.cache_dir = file.path(tempdir(), "gk-formula-cache"))

# S = sum(u * (F %*% b)) from a reference function r(a, b, params).
grad_sum <- function(r, x, y, b, u, params) {
  F <- formula_matrix(function(a, c) r(a, c, params), x, y)
  sum(u * (F %*% b))
}

central <- function(fun, v) {
  g <- v
  for (q in seq_along(v)) {
    h <- 1e-5 * max(1, abs(v[q]))
    up <- v
    down <- v
    up[q] <- v[q] + h
    down[q] <- v[q] - h
    g[q] <- (fun(up) - fun(down)) / (2 * h)
  }
  g
}

grad_cases <- list(
  gaussian_periodic = list(
    f = gk_formula(exp(-sqdist(x, y) / (2 * s^2)) * (1 + cos(2 * pi * abs(x3 - y3) / p)),
                   s = 0.6, p = 1.3),
    r = function(a, c, q) exp(-sum((a - c)^2) / (2 * q$s^2)) * (1 + cos(2 * pi * abs(a[3] - c[3]) / q$p)),
    dim = 3),
  rational_quadratic = list(
    f = gk_formula((1 + sqdist(x, y) / (2 * al * l^2))^(-al), al = 1.4, l = 0.7),
    r = function(a, c, q) (1 + sum((a - c)^2) / (2 * q$al * q$l^2))^(-q$al), dim = 2),
  asymmetric = list(
    f = gk_formula(tanh(k * dot(x, y) + y1^2) + pmax(x2 - y1, 0.1 * x1) * c0, k = 0.8, c0 = 2),
    r = function(a, c, q) tanh(q$k * sum(a * c) + c[1]^2) + max(a[2] - c[1], 0.1 * a[1]) * q$c0,
    dim = 2)
)

test_that("gradients with respect to x, y, b and parameters match central differences", {
  set.seed(7)
  for (backend in test_backends()) for (case in grad_cases) {
    m <- 6
    n <- 9
    x <- matrix(runif(m * case$dim, -1, 1), m, case$dim)
    y <- matrix(runif(n * case$dim, -1, 1), n, case$dim)
    b <- matrix(rnorm(n * 2), n, 2)
    u <- matrix(rnorm(m * 2), m, 2)
    params <- case$f$params
    g <- kernel_grad(x, y, b, kernel = case$f, wrt = c("x", "y", "b", names(params)), u = u,
                     backend = backend)
    S <- function(x, y, b, params) grad_sum(case$r, x, y, b, u, params)
    want_x <- central(function(v) S(matrix(v, m), y, b, params), c(x))
    expect_lt(rel_err(c(g$x), want_x), 1e-6)
    want_y <- central(function(v) S(x, matrix(v, n), b, params), c(y))
    expect_lt(rel_err(c(g$y), want_y), 1e-6)
    want_b <- central(function(v) S(x, y, matrix(v, n), params), c(b))
    expect_lt(rel_err(c(g$b), want_b), 1e-6)
    for (p in names(params)) {
      want <- central(function(v) S(x, y, b, replace(params, p, v)), params[[p]])
      expect_lt(rel_err(g[[p]], want), 1e-6)
    }
    expect_identical(dim(g$x), dim(x))
    expect_identical(dim(g$y), dim(y))
  }
})

test_that("the derivative of abs, ifelse and step functions follows the chain rule", {
  d <- gpukernels:::gk_formula_deriv(quote(abs(x1 - y1) * ifelse(x1 > 0, x1^2, sign(x1))), "x1")
  at <- function(e, x1, y1) eval(e, list(x1 = x1, y1 = y1))
  expect_equal(at(d, 0.5, 0.2), 1 * 0.25 + 0.3 * 1)
  expect_equal(at(d, -0.5, 0.2), -1 * -1 + 0)
})

test_that("kernel_grad() refuses what it cannot differentiate", {
  f <- gk_formula(exp(-sqdist(x, y) / l), l = 1)
  x <- matrix(runif(10), 5, 2)
  expect_error(kernel_grad(x, kernel = gk_kernel("gaussian")), "differentiates formulas")
  expect_error(kernel_grad(x, kernel = f, wrt = "z"), "`wrt` = \"z\" is neither")
  expect_error(kernel_grad(x, kernel = f, b = rnorm(4)), "`b` has 4 rows but nrow\\(y\\) is 5")
  expect_error(kernel_grad(x, kernel = f, u = matrix(1, 5, 2)), "`u` has 2 columns but `b` has 1")
  expect_error(kernel_grad(x, kernel = f, wrt = character()), "`wrt` must name")
})

options(old_cache)
