# Independent reference: each kernel written out from its formula in R.
reference_kernel <- function(name, d, variance = 1, smoothness = NA) {
  switch(name,
    gaussian = variance * exp(-d^2 / 2),
    exponential = variance * exp(-d),
    matern = ifelse(d == 0, variance,
                    variance * 2^(1 - smoothness) / gamma(smoothness) * d^smoothness *
                      besselK(d, smoothness)),
    cauchy = variance / (1 + d^2),
    inverse_multiquadric = variance / sqrt(1 + d^2),
    squared_distance = variance * d^2)
}

scaled_dist <- function(x, y, range) {
  xs <- sweep(x, 2, range, "/")
  ys <- sweep(y, 2, range, "/")
  sqrt(pmax(outer(rowSums(xs^2), rowSums(ys^2), "+") - 2 * xs %*% t(ys), 0))
}

test_that("gk_kernel validates its parameters", {
  expect_error(gk_kernel("nope"), "unknown kernel")
  expect_error(gk_kernel("matern"), "needs `smoothness`")
  expect_error(gk_kernel("gaussian", range = 0), "positive")
  expect_error(gk_kernel("gaussian", range = -1), "positive")
  expect_error(gk_kernel("gaussian", range = NA), "positive")
  expect_error(gk_kernel("gaussian", variance = 0), "variance")
  expect_error(gk_kernel("gaussian", smoothness = 1), "matern kernel only")
  expect_error(gk_kernel("matern", smoothness = -1), "smoothness")
  expect_s3_class(gk_kernel("imq"), "gk_kernel")
  expect_equal(gk_kernel("sqdist")$name, "squared_distance")
  expect_output(print(gk_kernel("matern", range = 0.2, smoothness = 1.5)), "matern")
})

test_that("kernel_eval matches the formulas, including general Matern smoothness", {
  d <- c(0, 1e-8, 1e-3, 0.1, 0.7, 1, 3.3, 10, 40)
  for (nu in c(0.5, 1.5, 2.5, 0.3, 0.8, 1, 2, 3.7, 12)) {
    k <- gk_kernel("matern", smoothness = nu, variance = 1.7)
    expect_lt(rel_err(kernel_eval(k, d), reference_kernel("matern", d, 1.7, nu)), 1e-12)
  }
  for (name in c("gaussian", "exponential", "cauchy", "inverse_multiquadric", "squared_distance")) {
    expect_equal(kernel_eval(gk_kernel(name, variance = 2), d), reference_kernel(name, d, 2),
                 tolerance = 1e-14)
  }
  expect_equal(kernel_eval("linear", c(-2, 0, 3)), c(-2, 0, 3))
  expect_error(kernel_eval("gaussian", -1), "non-negative")
  expect_error(kernel_eval("gaussian", NA), "without NA")
})

test_that("kernel_matrix agrees with brute force R on every backend", {
  kernels <- list(gk_kernel("gaussian", range = 0.4), gk_kernel("exponential", range = c(0.3, 0.5, 1)),
                  gk_kernel("matern", range = 0.3, smoothness = 1.5, variance = 2),
                  gk_kernel("matern", range = 0.3, smoothness = 0.9),
                  gk_kernel("cauchy"), gk_kernel("imq", range = 2), gk_kernel("sqdist"))
  for (backend in test_backends()) {
    for (m in c(1, 37, 300)) {
      n <- m + 5
      x <- matrix(runif(m * 3), m, 3)
      y <- matrix(rnorm(n * 3), n, 3)
      for (k in kernels) {
        range <- rep_len(k$range, 3)
        ref <- reference_kernel(k$name, scaled_dist(x, y, range), k$variance, k$smoothness)
        expect_lt(rel_err(kernel_matrix(x, y, k, backend = backend), ref), 1e-10)
      }
      lin <- kernel_matrix(x, y, gk_kernel("linear", variance = 3), backend = backend)
      expect_lt(rel_err(lin, 3 * x %*% t(y)), 1e-12)
    }
  }
})

test_that("kernel_matrix gives the same answer on GPU and CPU", {
  skip_if_no_gpu()
  x <- matrix(runif(2 * 513), 513, 2)
  k <- gk_kernel("matern", range = 0.1, smoothness = 2.2)
  expect_lt(rel_err(kernel_matrix(x, kernel = k, backend = "gpu"),
                    kernel_matrix(x, kernel = k, backend = "cpu")), 1e-12)
})

test_that("kernel_matrix rejects bad input", {
  x <- matrix(runif(6), 3, 2)
  expect_error(kernel_matrix(x, matrix(runif(3), 1, 3)), "same dimension")
  expect_error(kernel_matrix(rbind(x, NA)), "NA")
  expect_error(kernel_matrix(rbind(x, Inf)), "infinite")
  expect_error(kernel_matrix(matrix(numeric(0), 0, 2)), "empty")
  expect_error(kernel_matrix(matrix("a", 2, 2)), "numeric matrix")
  expect_error(kernel_matrix(x, kernel = "nope"), "unknown kernel")
  expect_error(kernel_matrix(x, kernel = gk_kernel("gaussian", range = c(1, 2, 3))),
               "range has 3 values")
  expect_error(kernel_matrix(x, kernel = 3), "kernel name")
})

test_that("repeated GPU calls do not grow device memory", {
  skip_if_no_gpu()
  x <- matrix(runif(3 * 1000), 1000, 3)
  invisible(kernel_matrix(x, kernel = "gaussian", backend = "gpu"))  # warm-up: handles, context
  before <- gk_info()$devices$free_memory[gk_info()$current_device]
  for (i in 1:20) invisible(kernel_matrix(x, kernel = "gaussian", backend = "gpu"))
  after <- gk_info()$devices$free_memory[gk_info()$current_device]
  expect_lt(before - after, 4 * 2^20)
})
