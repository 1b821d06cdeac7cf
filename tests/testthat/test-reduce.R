reduce_kernels <- list(
  gk_kernel("gaussian", range = 0.7, variance = 1.3),
  gk_kernel("exponential", range = c(0.5, 1, 2)),
  gk_kernel("matern", range = 0.8, smoothness = 1.5, variance = 2),
  gk_kernel("matern", range = 0.8, smoothness = 0.9),
  gk_kernel("cauchy", range = 1.5),
  gk_kernel("imq"),
  gk_kernel("linear", variance = 0.5),
  gk_kernel("sqdist"))
run_case <- function(x, y, kernel, reduction, e, axis, backend, precision, method = "auto") {
  n_red <- if (axis == 1) nrow(y) else nrow(x)
  b <- weights_for(reduction, n_red, e)
  k <- min(3, n_red)
  got <- kernel_reduce(x, y, b = b, kernel = kernel, reduction = reduction, k = k, axis = axis,
                       precision = precision, scheme = method, backend = backend)
  Fm <- ref_kernel_values(x, y, kernel)
  if (axis == 2) Fm <- t(Fm)
  label <- sprintf("%s %s axis %d D %d E %d M %d N %d on %s/%s/%s", kernel$name, reduction,
                   axis, ncol(x), e, nrow(x), nrow(y), backend, precision, method)
  expect_reduction(got, Fm, reduction, b, k, precision, label)
}

test_that("every kernel x reduction agrees with brute force R, both axes", {
  for (backend in test_backends()) for (precision in test_precisions(backend)) {
    x <- matrix(runif(257 * 3), 257, 3)
    y <- matrix(rnorm(300 * 3), 300, 3)
    for (kernel in reduce_kernels) for (reduction in all_reductions) for (axis in 1:2) {
      run_case(x, y, kernel, reduction, e = if (axis == 1) 1 else 17, axis, backend, precision)
    }
  }
})

test_that("reductions handle D in {1, 3, 100}, E in {1, 17}, M = 1, N = 1", {
  shapes <- list(c(1, 300), c(300, 1), c(1, 1), c(255, 513), c(33, 1000))
  for (backend in test_backends()) for (precision in test_precisions(backend)) {
    for (dim in c(1, 3, 100)) for (shape in shapes) {
      if (dim == 100 && shape[1] * shape[2] > 1e5) next
      x <- matrix(runif(shape[1] * dim), shape[1], dim)
      y <- matrix(runif(shape[2] * dim), shape[2], dim)
      kernel <- gk_kernel("gaussian", range = sqrt(dim) / 2)
      for (reduction in all_reductions) for (e in c(1, 17)) {
        if (e == 17 && !reduction %in% c("sum", "logsumexp", "softmax_sum")) next
        run_case(x, y, kernel, reduction, e, axis = 1, backend, precision)
      }
    }
  }
})

test_that("the GPU 1D and 2D schemes agree with the CPU", {
  skip_if_no_gpu()
  x <- matrix(runif(70 * 3), 70, 3)
  y <- matrix(runif(5000 * 3), 5000, 3)
  kernel <- gk_kernel("matern", range = 0.3, smoothness = 2.5)
  for (method in c("1d", "2d")) for (precision in c("double", "single")) {
    for (reduction in all_reductions) {
      run_case(x, y, kernel, reduction, e = 11, axis = 1, "gpu", precision, method)
    }
  }
})

test_that("long GPU reductions run in slices that give the same answers", {
  skip_if_no_gpu()
  # Slices of about 50000 pairs: 3 to 40 launches here, the last one partial,
  # each carrying its state to the next, with 1D and 2D splits inside a slice.
  old <- Sys.getenv("GK_REDUCE_SLICE_PAIRS", NA)
  Sys.setenv(GK_REDUCE_SLICE_PAIRS = "50000")
  on.exit(if (is.na(old)) Sys.unsetenv("GK_REDUCE_SLICE_PAIRS") else
    Sys.setenv(GK_REDUCE_SLICE_PAIRS = old))
  kernel <- gk_kernel("matern", range = 0.4, smoothness = 1.5)
  for (shape in list(c(37, 3001), c(300, 1500), c(2, 60000))) {
    x <- matrix(runif(shape[1] * 3), shape[1], 3)
    y <- matrix(runif(shape[2] * 3), shape[2], 3)
    for (method in c("1d", "2d")) for (precision in c("double", "single")) {
      for (reduction in all_reductions) {
        run_case(x, y, kernel, reduction, e = if (reduction == "sum") 11 else 1, axis = 1,
                 "gpu", precision, method)
      }
    }
  }
  x <- matrix(runif(400 * 2), 400, 2)
  b <- rnorm(400)
  K <- exp(-as.matrix(dist(x))^2 / (2 * 0.3^2))
  expect_lt(rel_err(kernel_matvec(x, x, b, gk_kernel("gaussian", range = 0.3),
                                  backend = "gpu"), drop(K %*% b)), 1e-12)
})

test_that("float32 sums of 1e7 terms stay accurate", {
  skip_if_no_gpu()
  n <- 1e7
  y <- matrix(runif(n), n, 1)
  x <- matrix(c(0.25, 0.5), 2, 1)
  b <- runif(n)
  got <- kernel_matvec(x, y, b, gk_kernel("gaussian", range = 0.5), precision = "single")
  ref <- kernel_matvec(x, y, b, gk_kernel("gaussian", range = 0.5), precision = "double",
                       backend = "gpu")
  expect_lt(max(abs(got - ref) / abs(ref)), 1e-5)
})

test_that("float32 gaussian sums agree with float64 near, off and far from the origin", {
  skip_if_no_gpu()
  # 1e9 pairs through the float32 gaussian fast path (exp2 on pre-scaled points).
  m <- 40000
  n <- 25000
  k <- gk_kernel("gaussian", range = 0.1, variance = 2)
  for (shape in list(c(0, 1), c(1000, 1), c(0, 50))) {
    x <- matrix(shape[1] + shape[2] * runif(3 * m), m, 3)
    y <- matrix(shape[1] + shape[2] * runif(3 * n), n, 3)
    b <- runif(n)
    ref <- kernel_matvec(x, y, b, k, backend = "gpu")
    got <- kernel_matvec(x, y, b, k, precision = "single", backend = "gpu")
    expect_lt(max(abs(got - ref)) / max(abs(ref)), 1e-4)
  }
})

test_that("ties go to the smaller index, and knn reports Euclidean distances", {
  for (backend in test_backends()) {
    y <- rbind(c(0, 0), c(1, 0), c(0, 0), c(1, 0), c(2, 2))
    x <- rbind(c(0, 0), c(0.9, 0))
    nn <- knn(x, y, k = 4, backend = backend)
    expect_identical(nn$index, rbind(c(1L, 3L, 2L, 4L), c(2L, 4L, 1L, 3L)))
    expect_equal(nn$distance, rbind(c(0, 0, 1, 1), c(0.1, 0.1, 0.9, 0.9)), tolerance = 1e-12)
    expect_identical(kernel_reduce(x, y, kernel = "sqdist", reduction = "argmin",
                                   backend = backend), c(1L, 2L))
    expect_identical(kernel_reduce(x, y, kernel = "sqdist", reduction = "argmax",
                                   backend = backend), c(5L, 5L))
  }
})

test_that("GPU exponential-family sums match the CPU over the whole range, underflow included", {
  skip_if_no_gpu()
  # One y at the origin and b = 1: each result is one kernel value, at distances
  # from 0 to past the underflow of float64 (745) and float32 (104).
  d <- c(0, sort(runif(3)) * 1e-6, 10^seq(-5, log10(800), length.out = 500))
  x <- cbind(d, 0, 0)
  y <- matrix(0, 1, 3)
  kernels <- list(gk_kernel("exponential", range = 1, variance = 2.5),
                  gk_kernel("matern", range = 1, smoothness = 0.5),
                  gk_kernel("matern", range = 1, smoothness = 1.5, variance = 0.7),
                  gk_kernel("matern", range = 1, smoothness = 2.5))
  for (kernel in kernels) {
    cpu <- kernel_matvec(x, y, 1, kernel, backend = "cpu")
    for (precision in c("double", "single")) {
      gpu <- kernel_matvec(x, y, 1, kernel, precision = precision, backend = "gpu")
      label <- paste(kernel$name, kernel$smoothness, precision)
      # float32: the coordinates' rounding, the approximate square root and
      # exponential give a relative error growing with d (about 5e-7 (1 + d));
      # values below about 1e-35 may flush to zero.
      floor <- if (precision == "double") 1e-290 else 1e-30
      slope <- if (precision == "double") 1e-15 else 2e-6
      normal <- cpu > floor
      expect_true(all(abs(gpu[normal] / cpu[normal] - 1) <= slope * (1 + d[normal])), label = label)
      expect_lt(max(abs(gpu[!normal] - cpu[!normal])), floor, label = label)
      expect_true(all(gpu >= 0), label = label)
    }
  }
})

test_that("GPU float64 gaussian terms are within 1e-15 (1 + t) of the CPU's exp(-t), underflow included", {
  skip_if_no_gpu()
  # One y at the origin, b = 1: each result is one term exp(-d^2 / 2), through
  # the table-and-polynomial exponential, from t = 0 to past the underflow
  # (t = 745); the inputs' rounding grows the error with t.
  set.seed(41)
  d <- c(0, sort(runif(5)) * 1e-7, sort(runif(2000)) * 40, 38.5, 38.6, 38.7)
  x <- cbind(d, 0, 0)
  y <- matrix(0, 1, 3)
  kernel <- gk_kernel("gaussian", range = 1, variance = 1.5)
  cpu <- kernel_matvec(x, y, 1, kernel, backend = "cpu")
  gpu <- kernel_matvec(x, y, 1, kernel, backend = "gpu")
  t <- d^2 / 2
  normal <- cpu > 1e-300
  expect_true(all(abs(gpu[normal] / cpu[normal] - 1) <= 1e-15 * (1 + t[normal])))
  expect_lt(max(abs(gpu[!normal])), 1e-300)
  expect_true(any(!normal) && all(gpu >= 0))
  # The same terms through logsumexp's and softmax's exponentials, with
  # mean-zero weights: exp(F) b summed over two points per row.
  y2 <- rbind(c(0, 0, 0), c(0.5, 0, 0))
  b <- c(1.3, -0.7)
  for (reduction in c("logsumexp", "softmax_sum")) {
    bb <- if (reduction == "logsumexp") abs(b) else b
    cpu <- kernel_reduce(x[1:300, ], y2, bb, kernel, reduction = reduction, backend = "cpu")
    gpu <- kernel_reduce(x[1:300, ], y2, bb, kernel, reduction = reduction, backend = "gpu")
    expect_lt(max(abs(gpu - cpu) / pmax(abs(cpu), 1e-300)), 1e-14, label = reduction)
  }
})

test_that("knn's one-call path gives what the general path gives", {
  # Integer points take the general path (converted in R), the same points as
  # doubles the one-call path: indices identical (many ties), distances equal.
  set.seed(42)
  for (backend in test_backends()) for (precision in test_precisions(backend)) {
    yi <- matrix(sample(0:6, 3 * 1031, TRUE), ncol = 3)
    xi <- matrix(sample(0:6, 3 * 259, TRUE), ncol = 3)
    storage.mode(yi) <- storage.mode(xi) <- "integer"
    yd <- yi + 0
    xd <- xi + 0
    for (k in c(1, 4, 16, 23, 70)) {
      general <- knn(xi, yi, k = k, precision = precision, backend = backend)
      fast <- knn(xd, yd, k = k, precision = precision, backend = backend)
      expect_identical(fast$index, general$index, info = paste(backend, precision, k))
      expect_identical(fast$distance, general$distance, info = paste(backend, precision, k))
      self <- knn(xd, k = k, precision = precision, backend = backend)
      expect_identical(self$index, knn(xi, k = k, precision = precision, backend = backend)$index)
    }
    empty <- knn(xd[0, , drop = FALSE], yd, k = 3, precision = precision, backend = backend)
    expect_identical(dim(empty$index), c(0L, 3L))
    expect_identical(dim(empty$distance), c(0L, 3L))
  }
})

test_that("GPU knn keeps ties in index order across tiles, chunks and ranges", {
  skip_if_no_gpu()
  # Integer points: many exact ties (each distance repeats hundreds of times).
  y <- matrix(sample(0:3, 3 * 5003, TRUE), ncol = 3)
  x <- matrix(sample(0:3, 3 * 77, TRUE), ncol = 3)
  ranges <- ranges_from_mask(cbind(c(1L, 41L), c(40L, 77L)),
                             cbind(c(1L, 2001L, 4001L), c(2000L, 4000L, 5003L)),
                             matrix(c(TRUE, FALSE, TRUE, TRUE, TRUE, FALSE), 2))
  for (k in c(1, 5, 16, 40)) for (method in c("1d", "2d")) for (precision in c("double", "single")) {
    gpu <- knn(x, y, k = k, precision = precision, scheme = method, backend = "gpu")
    cpu <- knn(x, y, k = k, backend = "cpu")
    expect_identical(gpu$index, cpu$index, info = paste(k, method, precision))
    expect_equal(gpu$distance, cpu$distance, tolerance = 1e-6)
    gpu <- knn(x, y, k = k, precision = precision, scheme = method, backend = "gpu", ranges = ranges)
    cpu <- knn(x, y, k = k, backend = "cpu", ranges = ranges)
    expect_identical(gpu$index, cpu$index, info = paste(k, method, precision, "ranges"))
  }
})

test_that("knn agrees with brute force on random points", {
  for (backend in test_backends()) for (precision in test_precisions(backend)) {
    x <- matrix(rnorm(400 * 3), 400, 3)
    y <- matrix(rnorm(777 * 3), 777, 3)
    nn <- knn(x, y, k = 7, precision = precision, backend = backend)
    d <- sqrt(pmax(ref_kernel_values(x, y, gk_kernel("sqdist")), 0))
    ref <- t(apply(d, 1, function(r) sort(r)[1:7]))
    expect_lt(max(abs(nn$distance - ref)), if (precision == "single") 1e-4 else 1e-12)
    picked <- matrix(d[cbind(rep(1:400, 7), as.vector(nn$index))], ncol = 7)
    expect_lt(max(abs(picked - ref)), if (precision == "single") 1e-4 else 1e-12)
  }
})

test_that("kernel_matvec is K %*% b with vector and matrix b", {
  for (backend in test_backends()) {
    x <- matrix(runif(150 * 2), 150, 2)
    y <- matrix(runif(90 * 2), 90, 2)
    k <- gk_kernel("matern", range = 0.2, smoothness = 1.5, variance = 1)
    K <- ref_kernel_values(x, y, k)
    b <- rnorm(90)
    a <- kernel_matvec(x, y, b, k, backend = backend)
    expect_true(is.null(dim(a)))
    expect_lt(rel_err(a, as.vector(K %*% b)), 1e-12)
    B <- matrix(rnorm(90 * 4), 90, 4)
    expect_lt(rel_err(kernel_matvec(x, y, B, k, backend = backend), K %*% B), 1e-12)
    bt <- rnorm(150)
    expect_lt(rel_err(kernel_matvec(x, y, bt, k, axis = 2, backend = backend),
                      as.vector(t(K) %*% bt)), 1e-12)
  }
})

test_that("empty reductions give neutral elements", {
  for (backend in test_backends()) {
    x <- matrix(runif(6), 3, 2)
    y <- matrix(numeric(0), 0, 2)
    expect_equal(kernel_reduce(x, y, b = matrix(numeric(0), 0, 2), backend = backend),
                 matrix(0, 3, 2))
    expect_equal(kernel_reduce(x, y, reduction = "min", backend = backend), rep(Inf, 3))
    expect_equal(kernel_reduce(x, y, reduction = "max", backend = backend), rep(-Inf, 3))
    expect_identical(kernel_reduce(x, y, reduction = "argmin", backend = backend), rep(NA_integer_, 3))
    expect_equal(kernel_reduce(x, y, reduction = "logsumexp", backend = backend), rep(-Inf, 3))
    expect_true(all(is.nan(kernel_reduce(x, y, reduction = "softmax_sum", backend = backend))))
    expect_equal(length(kernel_reduce(y, x, b = rnorm(3), backend = backend)), 0L)
  }
})

test_that("bad inputs give clear errors", {
  x <- matrix(runif(6), 3, 2)
  y <- matrix(runif(8), 4, 2)
  expect_error(kernel_reduce(rbind(x, NA), y), "NA")
  expect_error(kernel_reduce(x, rbind(y, Inf)), "infinite")
  expect_error(kernel_reduce(x, matrix(runif(3), 1, 3)), "same dimension")
  expect_error(kernel_reduce(x, y, b = rnorm(3)), "4 rows but there are 4|has 3 rows")
  expect_error(kernel_reduce(x, y, b = c(1, NA, 2, 3)), "NA")
  expect_error(kernel_reduce(x, y, b = c(1, Inf, 2, 3)), "infinite")
  expect_error(kernel_reduce(x, y, b = c(1, -1, 2, 3), reduction = "logsumexp"), "non-negative")
  expect_error(kernel_reduce(x, y, b = rnorm(4), reduction = "min"), "takes no weights")
  expect_error(kernel_reduce(x, y, reduction = "kmin", k = 5), "larger than the number")
  expect_error(knn(x, y, k = 5), "larger than the number")
  expect_error(knn(x, y, k = 0), "`k` must be")
  expect_error(knn(x, y, k = 1.5), "`k` must be")
  expect_error(kernel_reduce(x, y, kernel = "nope"), "unknown kernel")
  expect_error(kernel_reduce(x, y, reduction = "median"), "`reduction` must be one of")
  expect_error(kernel_reduce(x, y, axis = 3), "`axis` must be 1 or 2")
  expect_error(kernel_reduce(x, y, precision = "half"), "precision")
  expect_error(kernel_reduce(x, y, scheme = "3d"), "`scheme` must be one of")
  expect_error(kernel_reduce("a", y), "numeric matrix")
  expect_error(kernel_matvec(x, y), "`b` is missing")
  expect_error(kernel_reduce(x, y, kernel = gk_kernel("gaussian", range = c(1, 2, 3))),
               "range has 3 values")
})

test_that("plain calls run in one .Call with the general path's answers; it declines the rest", {
  # kernel_reduce() first offers its arguments to gk_r_reduce_plain, which
  # returns NULL for what it does not take. The general path is the reference:
  # `devices` sends a call there, and the CPU backend ignores it.
  # Internal functions here: the entry point itself, to see what it declines (NULL), which
  # no exported function shows.
  plain <- function(x, y = x, b = NULL, kernel = gk_kernel("gaussian"),
                    reduction = eval(formals(kernel_reduce)$reduction), k = 1L, axis = 1L,
                    precision = "double", scheme = c("auto", "1d", "2d")) {
    spec <- gpukernels:::gk_reduce_spec(x, y, b, kernel, reduction, k, axis, precision,
                                        scheme, "cpu", 0L)
    .Call(gpukernels:::gk_r_reduce_plain, spec, gpukernels:::gk_reductions,
          gpukernels:::gk_reduce_methods)
  }
  general <- function(...) kernel_reduce(..., backend = "cpu", devices = 1L)
  x <- matrix(runif(12), 6, 2)
  y <- matrix(runif(10), 5, 2)
  k <- gk_kernel("matern", range = c(0.5, 2), smoothness = 1.5)
  taken <- list(
    list(x, y, rnorm(5), k), list(x, y, matrix(rnorm(10), 5), k), list(x, b = rnorm(6)),
    list(x[, 1], y[, 1], kernel = gk_kernel("gaussian", range = 0.3)),
    list(x, y, reduction = "min"), list(x, y, reduction = "argmax", scheme = "2d"),
    list(x, y, reduction = "kmin", k = 5), list(x, y, reduction = "kmin", k = 2L, axis = 2),
    list(x, y, abs(rnorm(5)), reduction = "logsumexp", precision = "single"),
    list(x, y, matrix(rnorm(15), 5), reduction = "softmax_sum", scheme = "1d"),
    list(x, y, rnorm(6), axis = 2L), list(x[0, ], y), list(x, y[0, ], numeric(0)),
    list(x, y, reduction = "argmin", b = NULL, k = "ignored"))
  for (args in taken) {
    fast <- do.call(plain, args)
    expect_false(is.null(fast))
    expect_identical(fast, do.call(general, args))
  }
  declined <- list(
    list(rbind(x, NA), y), list(x, rbind(y, Inf)), list(x, matrix(runif(3), 1, 3)),
    list(x, y, rnorm(4)), list(x, y, c(1, NaN, 2, 3, 4)), list(x, y, matrix(0, 5, 0)),
    list(x, y, c(1, -1, 2, 3, 4), reduction = "logsumexp"), list(x, y, 1:5),
    list(x, y, rnorm(5), reduction = "min"), list(x, y, reduction = "kmin", k = 6),
    list(x, y, reduction = "kmin", k = 1.5), list(x, y, reduction = "kmin", k = NA),
    list(x, y, reduction = "kmin", k = TRUE), list(x, y, reduction = "median"),
    list(x, y, reduction = NA_character_), list(x, y, reduction = c("sum", "min")),
    list(x, y, reduction = factor("sum")), list(x, y, axis = 3), list(x, y, axis = TRUE),
    list(x, y, axis = 1.5), list(x, y, axis = c(1, 2)), list(x, y, precision = "half"),
    list(x, y, precision = NA_character_), list(x, y, scheme = "3d"),
    list(x, y, kernel = gk_kernel("gaussian", range = c(1, 2, 3))), list(x, y, kernel = "gaussian"),
    list(matrix(1:6, 3), y), list(x[, 0], y[, 0]), list(structure(x, class = "foo"), y),
    list(array(runif(6)), y[, 1]))
  for (args in declined) expect_null(do.call(plain, args))
  # What the general path says of some of them.
  expect_error(kernel_reduce(x, y, matrix(0, 5, 0)), "`b` has no columns")
  expect_error(kernel_reduce(x[, 0], y[, 0]), "`x` has no columns")
  expect_error(kernel_reduce(x, y, reduction = "kmin", k = 1.5), "`k` must be a whole number")
  expect_error(kernel_reduce(x, y, axis = TRUE), "`axis` must be a whole number")
  expect_error(kernel_reduce(array(runif(6)), y[, 1]), "numeric matrix")
  expect_identical(kernel_reduce(matrix(1:6, 3), y, backend = "cpu"),
                   plain(matrix(as.double(1:6), 3), y))
})

test_that("device matrices round-trip and are accepted wherever a matrix is", {
  skip_if_no_gpu()
  x <- matrix(runif(500 * 3), 500, 3)
  y <- matrix(runif(700 * 3), 700, 3)
  b <- matrix(rnorm(700 * 2), 700, 2)
  dx <- gk_device_matrix(x)
  dy <- gk_device_matrix(y, precision = "single")
  db <- gk_device_matrix(b)
  expect_identical(as.matrix(dx), x)
  expect_lt(max(abs(as.matrix(dy) - y)), 1e-6)
  expect_equal(dim(dy), c(700L, 3L))
  expect_output(print(dy), "700 x 3 \\(single\\)")
  k <- gk_kernel("gaussian", range = 0.3)
  ref <- ref_kernel_values(x, as.matrix(dy), k) %*% b
  expect_lt(rel_err(kernel_matvec(dx, dy, db, k), ref), 1e-12)
  expect_lt(rel_err(kernel_matvec(dx, dy, db, k, backend = "cpu"), ref), 1e-12)
  expect_lt(rel_err(kernel_matvec(dx, dy, b, k, precision = "single"), ref), 1e-4)
  expect_identical(knn(dx, dy, k = 2)$index, knn(x, as.matrix(dy), k = 2)$index)
  expect_error(gk_device_matrix(rbind(x, NA)), "NA")
})

test_that("device matrices need a GPU", {
  skip_if(gk_has_gpu(), "a GPU is present")
  expect_error(gk_device_matrix(matrix(1, 2, 2)), "no GPU can be used")
})

test_that("repeated GPU calls do not grow device memory", {
  skip_if_no_gpu()
  x <- matrix(runif(3000), 1000, 3)
  kernel_matvec(x, x, rnorm(1000))
  before <- gk_info()$devices$free_memory[1]
  for (i in 1:50) {
    kernel_matvec(x, x, rnorm(1000))
    knn(x, x, k = 3)
    d <- gk_device_matrix(x)
    rm(d)
  }
  gc()
  expect_gte(gk_info()$devices$free_memory[1], before - 2^20)
})
