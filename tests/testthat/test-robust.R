# Edge cases of issue 17 / issue 9: large Matern smoothness, sizes passed to
# C, accuracy far from the origin, extreme scales, messages and error calls.

# Independent reference for the Matern correlation at large nu: the integral
# K_nu(d) = int_0^inf exp(-d cosh t) cosh(nu t) dt by R's integrate(), with the
# integrand shifted by its logarithm at the peak t* = asinh(nu / d) (all in
# R's lgamma; adequate to ~1e-9 at nu = 1e5).
matern_by_quadrature <- function(d, nu) {
  log_c <- (1 - nu) * log(2) - lgamma(nu) + nu * log(d)
  t_peak <- asinh(nu / d)
  log_f <- function(t) log_c - d * cosh(t) + nu * t + log1p(exp(-2 * nu * t)) - log(2)
  top <- log_f(t_peak)
  w <- 1 / sqrt(sqrt(nu^2 + d^2))
  lo <- max(0, t_peak - 40 * w)
  val <- stats::integrate(function(t) exp(log_f(t) - top), lo, t_peak + 40 * w,
                          rel.tol = 1e-12, subdivisions = 1000L)$value
  exp(top) * val
}

test_that("the general Matern agrees with besselK at moderate smoothness", {
  set.seed(11)
  for (nu in c(0.3, 0.7, 3.3, 19, 21, 47.5)) {
    d <- c(1e-6, runif(20, 0, 3 * sqrt(nu) + 3), 60)
    ref <- 2^(1 - nu) / gamma(nu) * d^nu * besselK(d, nu)
    got <- kernel_eval(gk_kernel("matern", smoothness = nu), d)
    keep <- is.finite(ref) & ref > 1e-280
    expect_lt(max(abs(got[keep] - ref[keep]) / ref[keep]), 1e-11, label = paste("nu =", nu))
  }
})

test_that("large Matern smoothness is evaluated correctly and quickly", {
  for (nu in c(1e3, 1e5)) {
    d <- c(1e-3, 0.5, sqrt(nu), 3 * sqrt(nu), 6 * sqrt(nu))
    ref <- vapply(d, matern_by_quadrature, 0, nu = nu)
    got <- kernel_eval(gk_kernel("matern", smoothness = nu), d)
    expect_lt(max(abs(got - ref) / ref), 1e-8, label = paste("nu =", nu))
  }
  # The example of issue 17: about 1, not 0.
  expect_equal(kernel_eval(gk_kernel("matern", smoothness = 1e5), 1e-3), 1, tolerance = 1e-10)
  # nu -> Inf approaches the gaussian exp(-d^2 / (4 nu)).
  d <- c(0.1, 1e3, 2e3, 4e3)
  expect_equal(kernel_eval(gk_kernel("matern", smoothness = 1e7), d), exp(-d^2 / 4e7),
               tolerance = 1e-3)
  # An H2 matrix with nu = 1e6 builds in seconds (it took minutes) and is right.
  set.seed(12)
  locs <- matrix(runif(1200), ncol = 2)
  k <- gk_kernel("matern", range = 0.1, smoothness = 1e6)
  elapsed <- system.time(A <- h2_matrix(locs, k, backend = "cpu"))[["elapsed"]]
  expect_lt(elapsed, 60)
  z <- rnorm(600)
  ref <- drop(kernel_matrix(locs, kernel = k, backend = "cpu") %*% z)
  d2 <- as.matrix(dist(locs / 0.1))^2
  ref_r <- drop(exp(-d2 / (4 * (1e6 - 1))) %*% z)
  expect_lt(rel_err(ref, ref_r), 1e-6)
  expect_lt(rel_err(drop(A %*% z), ref), 1e-6)
})

test_that("sizes passed to C are checked without coercion warnings", {
  for (bad in list(1e10, Inf, NA, -1, 0, 1.5, "a", c(1, 2))) {
    expect_error(expect_no_warning(gk_set_device(bad)), "single whole number", info = format(bad))
  }
  withr_threads <- function(value, code) {
    old <- options(gpukernels.threads = value)
    on.exit(options(old))
    code
  }
  x <- matrix(runif(6), 3, 2)
  for (bad in list(1e10, Inf, NA, -1, 2.5, "4")) {
    expect_error(expect_no_warning(withr_threads(bad, kernel_matrix(x, backend = "cpu"))),
                 "gpukernels.threads", info = format(bad))
  }
  expect_equal(withr_threads(1, kernel_matrix(x, backend = "cpu")),
               kernel_matrix(x, backend = "cpu"))
})

test_that("H2 requests larger than the dense matrix point to kernel_matrix()", {
  locs <- matrix(runif(3000), ncol = 3)
  expect_error(h2_matrix(locs, "exponential", order = 16, backend = "cpu"), "kernel_matrix\\(")
  # The ordinary sizes of the other tests are not refused.
  A <- h2_matrix(locs[1:200, ], gk_kernel("exponential", range = 0.3), backend = "cpu")
  expect_true(inherits(A, "h2matrix"))
})

# Far from the origin: references on the same (rounded) inputs, centred in R
# exactly (Sterbenz: differences of nearby doubles are exact).
far_reference <- function(x, y, range) {
  c0 <- y[1, ]
  xc <- sweep(x, 2, c0)
  yc <- sweep(y, 2, c0)
  outer(seq_len(nrow(xc)), seq_len(nrow(yc)),
        Vectorize(function(i, j) exp(-sum((xc[i, ] - yc[j, ])^2) / (2 * range^2))))
}

test_that("engines keep their accuracy far from the origin", {
  set.seed(13)
  for (offset in c(1e6, 1e12)) {
    for (sizes in list(c(1, 1), c(37, 53), c(130, 97))) {
      x <- matrix(runif(sizes[1] * 2), sizes[1], 2) + offset
      y <- matrix(runif(sizes[2] * 2), sizes[2], 2) + offset
      b <- rnorm(sizes[2])
      K <- far_reference(x, y, 0.1)
      k <- gk_kernel("gaussian", range = 0.1)
      for (backend in test_backends()) {
        expect_lt(max(abs(kernel_matrix(x, y, k, backend = backend) - K)), 1e-13)
        ref <- drop(K %*% b)
        got <- kernel_matvec(x, y, b, k, backend = backend)
        expect_lt(max(abs(got - ref)), 1e-12 * max(1, sum(abs(b))))
      }
    }
  }
  locs <- matrix(runif(1000), ncol = 2) + 1e12
  K <- far_reference(locs, locs, 0.1)
  z <- rnorm(500)
  k <- gk_kernel("gaussian", range = 0.1)
  for (backend in test_backends()) {
    # The same H2 matrix as for the exactly centred points (to rounding), and
    # so the same approximation error as at the origin.
    A <- h2_matrix(locs, k, backend = backend)
    A0 <- h2_matrix(sweep(locs, 2, locs[1, ]), k, backend = backend)
    expect_lt(rel_err(drop(A %*% z), drop(A0 %*% z)), 1e-10)
    expect_lt(rel_err(drop(A %*% z), drop(K %*% z)), 1e-4)
  }
})

# A single-precision device matrix as readRDS() gives it back (its values and
# a dead pointer): used on the CPU as the GPU stores it. Works without a GPU.
saved_single_device_matrix <- function(x) {
  # Internal functions here: objects edited or broken by hand, as no export makes them.
  structure(list(native = gpukernels:::gk_native_new(new("externalptr")), values = x,
                 dim = dim(x), precision = "single"), class = "gk_device_matrix")
}

# Points near `offset` in the first column and about the origin in the second
# (device matrices centre the first and store the second as it is).
far_points <- function(n, offset) cbind(runif(n) + offset, runif(n) - 0.5)

test_that("single device matrices keep the digits of points far from the origin", {
  set.seed(171)
  y <- cbind(far_points(40, 1e6), -runif(40) - 1e6, c(1, 3, runif(38, 1, 2)))
  stored <- as.matrix(saved_single_device_matrix(y))
  # Columns within a factor 2 of their first value are stored minus it (then
  # rounded): 6e-8 from y, not the 0.06 of rounding y itself at 1e6.
  centre <- c(y[1, 1], 0, y[1, 3], 0)
  expect_identical(stored, sweep(round_to_float(sweep(y, 2, centre)), 2, centre, "+"))
  expect_lt(max(abs(stored[, 1:3] - y[, 1:3])), 1e-7)
  expect_gt(max(abs(round_to_float(y[, 1]) - y[, 1])), 1e-3)   # what centring avoids
  # Reductions on the CPU use the stored values.
  x <- cbind(far_points(25, 1e6), -runif(25) - 1e6, runif(25, 1, 2))
  b <- rnorm(40)
  k <- gk_kernel("gaussian", range = 0.5)
  got <- kernel_matvec(x, saved_single_device_matrix(y), b, k, backend = "cpu")
  expect_lt(max(abs(got - drop(far_reference(x, stored, 0.5) %*% b))), 1e-12 * sum(abs(b)))
})

test_that("reductions on device matrices keep their accuracy far from the origin", {
  skip_if_no_gpu()
  set.seed(172)
  k <- gk_kernel("gaussian", range = 0.1)
  for (offset in c(1e6, 1e12)) {
    for (sizes in list(c(1, 1), c(37, 53), c(300, 517))) {
      x <- far_points(sizes[1], offset)
      y <- far_points(sizes[2], offset)
      b <- rnorm(sizes[2])
      a <- rnorm(sizes[1])
      K <- far_reference(x, y, 0.1)
      ref <- drop(K %*% b)
      tol <- 1e-12 * max(1, sum(abs(b)))
      dx <- gk_device_matrix(x)
      dy <- gk_device_matrix(y)
      expect_identical(as.matrix(dx), x)   # the centre is added back exactly
      # Device with device (different centres), and mixed with host operands.
      for (pair in list(list(dx, dy), list(x, dy), list(dx, y))) {
        expect_lt(max(abs(kernel_matvec(pair[[1]], pair[[2]], b, k) - ref)), tol)
        expect_lt(max(abs(kernel_matvec(pair[[1]], pair[[2]], b, k, precision = "single") - ref)),
                  1e-5 * max(1, sum(abs(b))))
      }
      expect_lt(max(abs(kernel_matvec(dx, dy, a, k, axis = 2) - drop(crossprod(K, a)))),
                1e-12 * max(1, sum(abs(a))))
      expect_lt(max(abs(kernel_matvec(dy, dy, b, k) - drop(far_reference(y, y, 0.1) %*% b))), tol)
      # Single storage: the centred values are rounded; GPU and R agree on them.
      dxs <- gk_device_matrix(x, precision = "single")
      dys <- gk_device_matrix(y, precision = "single")
      xs <- as.matrix(dxs)
      ys <- as.matrix(dys)
      expect_identical(xs, as.matrix(saved_single_device_matrix(x)))
      expect_identical(ys, as.matrix(saved_single_device_matrix(y)))
      expect_lt(max(abs(xs - x)), 1e-7)
      refs <- drop(far_reference(xs, ys, 0.1) %*% b)
      expect_lt(max(abs(kernel_matvec(dxs, dys, b, k) - refs)), tol)
      expect_lt(max(abs(kernel_matvec(x, dys, b, k) - drop(far_reference(x, ys, 0.1) %*% b))), tol)
      expect_lt(max(abs(kernel_matvec(dxs, dys, b, k, precision = "single") - refs)),
                1e-5 * max(1, sum(abs(b))))
      # Nearest neighbours (squared distances, range 1) as on the CPU.
      kn <- min(3L, sizes[2])
      nn <- knn(dx, dy, k = kn)
      nn_cpu <- knn(x, y, k = kn, backend = "cpu")
      expect_identical(nn$index, nn_cpu$index)
      expect_lt(max(abs(nn$distance - nn_cpu$distance)), 1e-10)
      # Weights far from 0 are centred too, and given back exactly.
      w <- matrix(runif(sizes[2], 1, 1.5))
      for (precision in c("double", "single")) {
        dw <- gk_device_matrix(w, precision = precision)
        wv <- as.matrix(dw)
        if (precision == "double") expect_identical(wv, w)
        expect_lt(max(abs(kernel_matvec(dx, dy, dw, k) - K %*% wv)), 1e-12 * sum(wv))
        expect_lt(max(abs(kernel_matvec(dx, dy, dw, k, precision = "single") - K %*% wv)),
                  1e-5 * sum(wv))
        expect_lt(rel_err(kernel_reduce(dx, dy, dw, k, reduction = "logsumexp"),
                          log(exp(K) %*% wv)), 1e-12)
      }
    }
  }
  # Inner products see the points themselves (their centres added back).
  x <- far_points(40, 1e3)
  y <- far_points(60, 1e3)
  b <- rnorm(60)
  lin <- gk_kernel("linear")
  ref <- kernel_reduce(x, y, b, lin, backend = "cpu")
  expect_lt(rel_err(kernel_reduce(gk_device_matrix(x), gk_device_matrix(y), b, lin), ref), 1e-10)
  dys <- gk_device_matrix(y, precision = "single")
  expect_lt(rel_err(kernel_reduce(x, dys, b, lin),
                    kernel_reduce(x, as.matrix(dys), b, lin, backend = "cpu")), 1e-10)
})

test_that("knn works near 1e154 and near 1e-160", {
  set.seed(14)
  for (backend in test_backends()) for (scale in c(1e154, 1e-160, 1e300)) {
    x <- matrix(runif(40), 20, 2) * scale
    y <- matrix(runif(60), 30, 2) * scale
    res <- knn(x, y, k = 3, backend = backend)
    # Reference in scaled arithmetic: distances of x / scale, times scale.
    d <- unname(as.matrix(dist(rbind(x, y) / scale))[1:20, 21:50] * scale)
    ref_index <- t(apply(d, 1, order))[, 1:3]
    expect_identical(res$index, ref_index)
    expect_true(all(is.finite(res$distance)))
    expect_equal(res$distance, t(apply(d, 1, sort))[, 1:3], tolerance = 1e-12)
  }
})

test_that("knn's coordinate scale is the power of two near the spread, only at the extremes", {
  # The rule, written out in R (as knn() had it before it moved to C).
  scale_ref <- function(x, y) {
    spread <- max(vapply(seq_len(ncol(x)), function(j) {
      r <- range(x[, j], y[, j])
      r[2L] / 2 - r[1L] / 2
    }, 0))
    if (spread == 0 || (spread < 2^399 && spread > 2^-401)) return(1)
    2^round(log2(spread))
  }
  set.seed(15)
  for (s in c(1, 1e-200, 1e-121, 1e121, 1e200, 1e305, 2^400, 2^-402)) {
    x <- matrix(rnorm(21), 7, 3) * s
    y <- matrix(rnorm(12) + 5, 4, 3) * s
    expect_identical(gpukernels:::knn_scale(x, y), scale_ref(x, y))
    expect_identical(gpukernels:::knn_scale(x[1, , drop = FALSE], x[1, , drop = FALSE]), 1)
  }
  # Spread in one coordinate only; an empty set scales by 1.
  x <- cbind(c(-1e300, 1e300), c(0, 0))
  expect_identical(gpukernels:::knn_scale(x, x), scale_ref(x, x))
  expect_identical(gpukernels:::knn_scale(x[0, , drop = FALSE], x), 1)
})

test_that("knn's distances do not alias its inputs or earlier results", {
  set.seed(16)
  x <- matrix(runif(60), 30, 2)
  first <- knn(x, x, k = 3, backend = "cpu")
  kept <- first$distance + 0
  second <- knn(x, x, k = 3, backend = "cpu")
  expect_identical(first$distance, kept)
  expect_identical(second$distance, kept)
  sq <- kernel_reduce(x, x, kernel = "sqdist", reduction = "kmin", k = 3, backend = "cpu")
  expect_equal(sqrt(sq$values), first$distance, tolerance = 1e-15)
})

test_that("extreme ranges: refused below the normal doubles, exact at tiny normal ones", {
  expect_error(gk_kernel("gaussian", range = 1e-320), "smallest normal double")
  x <- matrix(runif(6), 3, 2)
  K <- kernel_matrix(x, kernel = gk_kernel("exponential", range = 1e-300), backend = "cpu")
  expect_false(anyNA(K))
  expect_equal(unname(K), diag(3))
  expect_error(kernel_matrix(matrix(c(-1e300, 1e300), 2), kernel = gk_kernel("gaussian", range = 1e-10),
                             backend = "cpu"), "1e308 times the kernel's range")
  expect_error(kernel_matvec(matrix(c(-1e300, 1e300), 2), b = c(1, 1),
                             kernel = gk_kernel("gaussian", range = 1e-10), backend = "cpu"),
               "1e308 times the kernel's range")
})

test_that("messages name the type of a non-numeric matrix and check PCF inputs", {
  expect_error(kernel_matrix(matrix("a", 2, 2)), "not a character matrix")
  expect_error(kernel_matrix(matrix(TRUE, 2, 2)), "not a logical matrix")
  expect_error(kernel_matrix(matrix(1i, 2, 2)), "not a complex matrix")
  expect_error(knn(list(1, 2)), "not a list")
  expect_error(pcf_eval(matrix("a", 2, 2), 1), "`f` must be a numeric matrix")
  expect_error(pcf_eval(matrix(c(2, 1, 1, 1), 2), 1), "`f`.*strictly increasing")
  expect_error(pcf_mean(list(matrix(c(0, 1, 1, 1), 2), matrix(c(2, 1, 1, 1), 2))),
               "`x\\[\\[2\\]\\]`.*strictly increasing")
  expect_error(pcf_eval(list(matrix(c(0, NA, 1, 1), 2)), 1), "`f\\[\\[1\\]\\]`")
  expect_error(pcf_betti(cbind(c(0, NA), c(0, 0), c(1, 1)), 0), "NA in its dimension column")
})

test_that("errors raised in C carry no internal call", {
  e <- tryCatch(pcf_pdist(list(matrix(c(0, 1, 1, 1), 2), "a")), error = identity)
  expect_null(conditionCall(e))
  e <- tryCatch(kernel_matrix(matrix(c(-1e300, 1e300), 2),
                              kernel = gk_kernel("gaussian", range = 1e-10)), error = identity)
  expect_null(conditionCall(e))
  e <- tryCatch(gk_set_device(1), error = identity)
  if (!gk_has_gpu()) {
    expect_null(conditionCall(e))
    expect_no_match(conditionMessage(e), "\\.Call")
  }
})
