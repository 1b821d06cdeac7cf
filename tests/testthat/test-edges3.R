# Edge inputs, round 3 (issue 34): silent wrong results at extreme scales,
# hand-edited objects, messages that name the user's argument, warning calls.

# Independent Matern reference: R's exponentially scaled besselK, in logs, so
# that d^nu K_nu(d) is 0 (not Inf * 0) far away.
matern_ref <- function(d, nu) {
  vapply(d, function(di) {
    if (di == 0) return(1)
    if (!is.finite(di)) return(0)   # farther than the largest double
    exp((1 - nu) * log(2) - lgamma(nu) + nu * log(di) +
          log(besselK(di, nu, expon.scaled = TRUE)) - di)
  }, numeric(1))
}

test_that("Matern is 0, not NaN, at huge scaled distances (kernel_eval)", {
  d <- c(0, 0.3, 2, 40, 700, 1e10, 1e150, 1.2e154, 1.4e154, 1e155, 1e200, 1e300,
         .Machine$double.xmax)
  for (nu in c(0.5, 0.7, 1.5, 2.5, 3.2)) {
    got <- kernel_eval(gk_kernel("matern", smoothness = nu), d)
    expect_false(anyNA(got))
    expect_equal(got, matern_ref(d, nu), tolerance = 1e-10, info = paste("nu =", nu))
    expect_identical(got[d >= 1e10], rep(0, sum(d >= 1e10)))
  }
  # large nu keeps its gaussian-like tail and is 0 far away
  expect_identical(kernel_eval(gk_kernel("matern", smoothness = 1e5), 1e300), 0)
})

test_that("Matern is 0 far away in kernel_matrix and kernel_reduce (CPU)", {
  x <- matrix(c(0, 1e155), ncol = 1)
  K <- kernel_matrix(x, kernel = gk_kernel("matern", smoothness = 0.7), backend = "cpu")
  expect_equal(unname(K), diag(2))
  x <- matrix(c(0, 1), ncol = 1)
  K <- kernel_matrix(x, kernel = gk_kernel("matern", range = 1e-160, smoothness = 2.5),
                     backend = "cpu")
  expect_equal(unname(K), diag(2))
  set.seed(34)
  P <- rbind(matrix(runif(10), 5), c(1e300, 1e300))
  for (nu in c(0.7, 1.5, 2.5)) {
    k <- gk_kernel("matern", range = 0.3, smoothness = nu)
    ref <- matern_ref(as.matrix(dist(P / 0.3)), nu)
    dim(ref) <- c(6, 6)
    b <- seq_len(6) / 6
    got <- kernel_reduce(P, P, b = b, kernel = k, reduction = "sum", backend = "cpu")
    expect_equal(drop(got), drop(ref %*% b), tolerance = 1e-10, info = paste("nu =", nu))
    got <- kernel_reduce(P, P, b = b, kernel = k, reduction = "logsumexp", backend = "cpu")
    expect_equal(drop(got), log(drop(exp(ref) %*% b)), tolerance = 1e-10)
    expect_false(anyNA(kernel_matrix(P, kernel = k, backend = "cpu")))
    got <- kernel_reduce(P, P, b = b, kernel = k, reduction = "sum", precision = "single",
                         backend = "cpu")
    expect_equal(drop(got), drop(ref %*% b), tolerance = 1e-5)
  }
})

test_that("Matern is 0 far away in the GPU reductions and kernel matrices", {
  skip_if_no_gpu()
  set.seed(35)
  P <- rbind(matrix(runif(10), 5), c(1e300, 1e300))
  b <- seq_len(6) / 6 - 0.4
  for (nu in c(0.5, 0.7, 1.5, 2.5)) {
    k <- gk_kernel("matern", range = 0.3, smoothness = nu)
    ref <- matern_ref(as.matrix(dist(P / 0.3)), nu)
    dim(ref) <- c(6, 6)
    got <- kernel_reduce(P, P, b = b, kernel = k, reduction = "sum", precision = "double",
                         backend = "gpu")
    expect_equal(drop(got), drop(ref %*% b), tolerance = 1e-10, info = paste("nu =", nu))
    got <- kernel_reduce(P, P, reduction = "logsumexp", kernel = k, precision = "double",
                         backend = "gpu")
    expect_equal(drop(got), log(rowSums(exp(ref))), tolerance = 1e-10,
                 info = paste("logsumexp nu =", nu))
    # float32 cannot hold a point 3e300 ranges away: an error, not Inf - Inf
    expect_error(kernel_reduce(P, P, b = b, kernel = k, precision = "single", backend = "gpu"),
                 "too far apart for single precision")
    expect_error(kernel_reduce(P[1:5, ], P[1:5, ], b = b[1:5], precision = "single",
                               kernel = gk_kernel("matern", range = 1e-40, smoothness = nu),
                               backend = "gpu"),
                 "too far apart for single precision")
    expect_equal(unname(kernel_matrix(P, kernel = k, backend = "gpu")), ref, tolerance = 1e-10)
  }
  expect_error(kernel_reduce(P[1:5, ], P[1:5, ], b = c(1, -2, 3e300, 4, 5), precision = "single",
                             backend = "gpu"), "beyond single precision's range")
  # float32 overflows the squared distance long before float64 does
  x <- matrix(c(0, 0.1, 3e19), ncol = 1)
  for (nu in c(1.5, 2.5)) {
    k <- gk_kernel("matern", smoothness = nu)
    ref <- matern_ref(as.matrix(dist(x)), nu)
    dim(ref) <- c(3, 3)
    got <- kernel_reduce(x, x, b = c(1, -2, 3), kernel = k, precision = "single", backend = "gpu")
    expect_equal(drop(got), drop(ref %*% c(1, -2, 3)), tolerance = 1e-5)
  }
})

test_that("Matern H2 products stay finite with a point 1e300 away", {
  set.seed(3)
  locs <- rbind(matrix(runif(400), ncol = 2), c(1e300, 1e300))
  k <- gk_kernel("matern", range = 0.2, smoothness = 1.5)
  A <- h2_matrix(locs, k, backend = "cpu")
  x <- rnorm(nrow(locs))
  y <- drop(A %*% x)
  expect_true(all(is.finite(y)))
  ref <- matern_ref(as.matrix(dist(locs / 0.2)), 1.5)
  dim(ref) <- rep(nrow(locs), 2)
  expect_lt(sqrt(sum((y - ref %*% x)^2) / sum((ref %*% x)^2)), 1e-3)
})

test_that("the range-derivative families are 0 (not NaN) far away", {
  d <- c(0.5, 3, 1e200, 1e300)
  fam <- function(name, nu = NULL) {
    k <- gk_kernel(name, smoothness = nu)
    k$family_code <- 16L + k$family_code
    k
  }
  # -d k'(d), by the formulas of gk_kernel.h
  refs <- list(
    gaussian = d^2 * exp(-d^2 / 2), exponential = d * exp(-d),
    cauchy = 2 * d^2 / (1 + d^2)^2, inverse_multiquadric = d^2 / (1 + d^2)^1.5)
  refs$gaussian[3:4] <- 0            # the same, without Inf * 0
  refs$cauchy[3:4] <- 2 / d[3:4]^2
  refs$inverse_multiquadric[3:4] <- 1 / d[3:4]
  for (name in names(refs)) {
    got <- kernel_eval(fam(name), d)
    expect_equal(got, refs[[name]], tolerance = 1e-12, info = name)
  }
  for (nu in c(0.5, 1.5, 2.5, 0.7)) {
    got <- kernel_eval(fam("matern", nu), d)
    ref <- c(exp((1 - nu) * log(2) - lgamma(nu) + (nu + 1) * log(d[1:2]) +
                   log(besselK(d[1:2], nu - 1, expon.scaled = TRUE)) - d[1:2]), 0, 0)
    expect_equal(got, ref, tolerance = 1e-9, info = paste("nu =", nu))
  }
})

test_that("gp_loglik with points 1e300 apart is finite (Matern)", {
  set.seed(4)
  locs <- rbind(matrix(runif(40), ncol = 2), c(1e300, 1e300))
  y <- rnorm(nrow(locs))
  k <- gk_kernel("matern", range = 0.2, smoothness = 1.5)
  ll <- gp_loglik(locs, y, kernel = k, nugget = 0.1, method = "dense", backend = "cpu")
  expect_true(is.finite(ll$loglik))
  # the far point is independent of the rest, as it is at 1e10 (where every
  # distance is finite and the correlation already 0)
  near <- locs
  near[nrow(locs), ] <- 1e10
  ref <- gp_loglik(near, y, kernel = k, nugget = 0.1, method = "dense", backend = "cpu")
  expect_equal(ll$loglik, ref$loglik, tolerance = 1e-12)
})

test_that("knn keeps the order of distances across 600 orders of magnitude", {
  set.seed(5)
  x <- rbind(matrix(runif(10), 5) * 1e-300, c(1e300, 1e300))
  brute <- function(x, y, k) {
    # exact distances from halves scaled per pair (no overflow, no underflow)
    D <- outer(seq_len(nrow(x)), seq_len(nrow(y)), Vectorize(function(i, j) {
      h <- x[i, ] / 2 - y[j, ] / 2
      m <- max(abs(h))
      if (m == 0) 0 else 2 * m * sqrt(sum((h / m)^2))
    }))
    idx <- t(apply(D, 1, function(r) order(r, seq_along(r))[seq_len(k)]))
    if (k == 1) idx <- matrix(idx, ncol = 1)
    list(index = idx, distance = matrix(D[cbind(rep(seq_len(nrow(x)), k), c(idx))], ncol = k))
  }
  for (k in 1:3) {
    ref <- brute(x, x, k)
    got <- knn(x, k = k, backend = "cpu")
    expect_equal(unname(got$index), unname(ref$index), info = paste("k =", k))
    expect_equal(got$distance, ref$distance, tolerance = 1e-12)
    # the general path (workers = FALSE skips the one-call path)
    got <- knn(x, x, k = k, backend = "cpu", workers = FALSE, scheme = "auto")
    expect_equal(unname(got$index), unname(ref$index))
  }
  expect_true(all(knn(x, k = 2, backend = "cpu")$distance[1:5, 2] > 0))
  # y different from x, and with duplicated points (true zeros keep index order)
  y <- rbind(x[c(3, 3), ], matrix(runif(6), 3) * 1e-301, c(-1e300, 1e300))
  ref <- brute(x, y, 3)
  got <- knn(x, y, k = 3, backend = "cpu")
  expect_equal(unname(got$index), unname(ref$index))
  expect_equal(got$distance, ref$distance, tolerance = 1e-12)
  # ordinary data is unchanged
  z <- matrix(runif(200), ncol = 2)
  expect_equal(unname(knn(z, k = 4, backend = "cpu")$index), unname(brute(z, z, 4)$index))
})

test_that("hand-edited gk_kernel objects give clear errors naming `kernel`", {
  x <- matrix(runif(20), 10)
  k <- gk_kernel("matern", range = 0.5, smoothness = 1.5)
  edits <- list(
    list(range = -1, "range"), list(range = 0, "range"), list(range = NA_real_, "range"),
    list(range = "1", "range"), list(family_code = 99L, "family_code"),
    list(smoothness = NA_real_, "smoothness"), list(smoothness = -1, "smoothness"),
    list(variance = NA_real_, "variance"), list(variance = 0, "variance"),
    list(variance = "2", "variance"))
  for (e in edits) {
    bad <- k
    bad[[names(e)[1]]] <- e[[1]]
    pattern <- paste0("`kernel` is not a valid gk_kernel.*", e[[2]])
    expect_error(kernel_eval(bad, 1), pattern, info = names(e)[1])
    expect_error(kernel_matrix(x, kernel = bad, backend = "cpu"), pattern)
    expect_error(kernel_reduce(x, kernel = bad, backend = "cpu"), pattern)
    expect_error(h2_matrix(x, bad, backend = "cpu"), pattern)
  }
  g <- gk_kernel("gaussian")
  g$variance <- NA_real_
  expect_error(kernel_matvec(x, b = rep(1, 10), kernel = g, backend = "cpu"), "variance")
  g <- gk_kernel("gaussian")
  g$family_code <- 2L   # matern without a smoothness: name and code disagree
  expect_error(kernel_eval(g, 1), "name")
  # integer fields are fine
  g <- gk_kernel("gaussian")
  g$range <- 2L
  expect_equal(kernel_eval(g, 1), exp(-0.5))
  # the C entries check types themselves (internal callers)
  bad <- unclass(gk_kernel("gaussian"))
  bad$range <- "1"
  # Internal functions here: the C checks that guard internal callers, past R's checks.
  expect_error(.Call(gpukernels:::gk_r_kernel_matrix, x, x, bad, "cpu", 1L), "range")
  bad$range <- -1
  expect_error(.Call(gpukernels:::gk_r_kernel_matrix, x, x, bad, "cpu", 1L), "range")
  bad <- unclass(gk_kernel("gaussian"))
  bad$family_code <- 99L
  expect_error(.Call(gpukernels:::gk_r_kernel_eval, bad, 1), "family_code")
  bad$family_code <- "0"
  expect_error(.Call(gpukernels:::gk_r_kernel_eval, bad, 1), "family_code")
})

test_that("messages name the user's argument", {
  set.seed(6)
  P <- matrix(runif(40), 20)
  Q <- matrix(runif(40), 20)
  for (cell in list(0, -1, NA_real_, c(0.1, 0.1, 0.1), "a")) {
    e <- tryCatch(kernel_reduce(P, Q, cutoff = 0.2, cell = cell, backend = "cpu"),
                  error = identity)
    expect_s3_class(e, "error")
    expect_match(conditionMessage(e), "`cell`")
    expect_no_match(conditionMessage(e), "size")
  }
  # a 1-point H2 matrix: the error is exact, not a solve() failure
  A <- h2_matrix(matrix(0.5, 1, 2), gk_kernel("exponential"), backend = "cpu")
  e <- h2_error(A)
  expect_equal(e$probe, 0, tolerance = 1e-12)
  expect_equal(e$n_probes, 1)
  A <- h2_matrix(matrix(runif(6), 3), gk_kernel("exponential"), backend = "cpu")
  expect_equal(h2_error(A)$n_probes, 3)
  # gp_fit: one point, identical points
  expect_error(gp_fit(matrix(0.5, 1, 2), 1, backend = "cpu"), "`locs` has 1 point")
  expect_error(gp_fit(matrix(0.5, 30, 2), rnorm(30), backend = "cpu"),
               "all 30 points of `locs` are the same location")
  expect_error(gp_fit(matrix(0.5, 1, 2), 1, backend = "cpu"), "at least 2 distinct")
})

test_that("predict() of an edited gp_fit names its `alpha`", {
  set.seed(7)
  locs <- matrix(runif(60), ncol = 2)
  y <- drop(sin(5 * locs[, 1])) + rnorm(30, sd = 0.1)
  # the nugget is fixed: 30 points may put its estimate on a bound (a warning
  # that is not what this test is about)
  fit <- gp_fit(locs, y, kernel = "exponential", backend = "cpu", method = "dense",
                fixed = list(nugget = 0.01))
  new <- matrix(runif(4), ncol = 2)
  p <- predict(fit, new)
  expect_length(p, 2)
  bad <- fit
  bad$alpha <- bad$alpha[1:5]
  expect_error(predict(bad, new), "`object` is not a valid gp_fit.*`alpha` must hold 30")
  bad$alpha <- as.character(fit$alpha)
  expect_error(predict(bad, new), "`alpha`")
})

test_that("hand-edited gk_ranges and pcf_list objects give clear errors", {
  set.seed(8)
  x <- matrix(runif(40), 20)
  r <- ranges_from_mask(cbind(c(1, 11), c(10, 20)), cbind(c(1, 11), c(10, 20)),
                        matrix(TRUE, 2, 2))
  expect_equal(kernel_reduce(x, ranges = r, backend = "cpu"),
               kernel_reduce(x, backend = "cpu"))
  bad <- unclass(r)
  bad$.axis1$ranges_i <- as.double(bad$.axis1$ranges_i)
  bad <- structure(bad, class = "gk_ranges")
  e <- tryCatch(kernel_reduce(x, ranges = bad, backend = "cpu"), error = identity)
  expect_match(conditionMessage(e), "`ranges` is not a valid gk_ranges")
  expect_no_match(conditionMessage(e), "INTEGER|REAL|VECTOR_ELT")
  # the C check itself
  expect_error(.Call(gpukernels:::gk_r_reduce_ranges_pairs, list(1.5, 1L, 1:2)),
               "`ranges` is not a valid gk_ranges")
  expect_error(.Call(gpukernels:::gk_r_reduce_ranges_pairs, 1:3),
               "`ranges` is not a valid gk_ranges")
  X <- structure(1:4, class = "pcf_list")
  for (f in list(function(X) pcf_pdist(X), function(X) pcf_knn(X, k = 1),
                 function(X) pcf_kernel(X))) {
    e <- tryCatch(f(X), error = identity)
    expect_s3_class(e, "error")
    expect_match(conditionMessage(e), "`x`.*not a list of PCFs")
    expect_no_match(conditionMessage(e), "INTEGER|REAL|VECTOR_ELT")
  }
  expect_error(.Call(gpukernels:::gk_r_pcf_validate, 1:4), "`x` must be a list of PCFs")
  k <- gk_kernel("gaussian")
  k$range <- "1"
  e <- tryCatch(kernel_eval(k, 1), error = identity)
  expect_match(conditionMessage(e), "`kernel`.*`range`")
})

test_that("warnings name the user's call or none, never internal helpers", {
  X <- list(cbind(t = c(0, 1, 1 + 1e-9), v = c(1, 2, 0)), cbind(t = c(0, 2), v = c(1, 0)))
  w <- NULL
  withCallingHandlers(pcf_pdist(X, precision = "single", backend = "cpu"),
                      warning = function(cond) {
                        w <<- cond
                        invokeRestart("muffleWarning")
                      })
  expect_s3_class(w, "warning")
  expect_match(conditionMessage(w), "single precision")
  call_text <- paste(deparse(conditionCall(w)), collapse = " ")
  expect_no_match(call_text, "gk_|\\.Call")
})

test_that("asking for GPUs that do not exist is an error, not a silent CPU run", {
  skip_if(gk_build_info()$device_count > 0, "a GPU is present")
  x <- matrix(runif(20), 10)
  w <- rnorm(10)
  expect_error(kernel_matvec(x, b = w, devices = 1:2), "`devices` asks for GPU 1, 2")
  expect_error(kernel_reduce(x, b = w, devices = 1), "no GPU")
  expect_error(knn(x, k = 1, devices = 1), "no GPU")
  X <- list(cbind(t = c(0, 1), v = c(1, 0)), cbind(t = c(0, 2), v = c(1, 0)))
  expect_error(pcf_pdist(X, devices = 1), "no GPU")
  expect_error(pcf_knn(X, k = 1, devices = 1), "no GPU")
  expect_length(kernel_matvec(x, b = w), 10)   # without `devices`: the CPU, as before
  # an explicit CPU backend ignores `devices`, as documented
  expect_equal(kernel_matvec(x, b = w, devices = 1:2, backend = "cpu"),
               kernel_matvec(x, b = w, backend = "cpu"))
  expect_equal(as.matrix(pcf_pdist(X, devices = 1, backend = "cpu")),
               as.matrix(pcf_pdist(X, backend = "cpu")))
})

test_that("print() of a compressed H2 matrix says compression time", {
  set.seed(9)
  A <- h2_matrix(matrix(runif(1200), ncol = 2), gk_kernel("exponential", range = 0.2),
                 backend = "cpu")
  expect_output(print(A), "build time")
  B <- h2_compress(A, tol = 1e-4)
  out <- capture.output(print(B))
  expect_true(any(grepl("compression time", out)))
  expect_false(any(grepl("build time", out)))
  out <- capture.output(print(h2_orthogonalize(A)))
  expect_true(any(grepl("orthogonalization time", out)))
})

test_that("h2_error samples rows by default when n is large, and says so", {
  set.seed(10)
  A <- h2_matrix(matrix(runif(1200), ncol = 2), gk_kernel("exponential", range = 0.2),
                 backend = "cpu")
  e <- h2_error(A)
  expect_false(e$sampled)
  expect_equal(e$rows, 600)
  expect_false(is.na(e$norm2))
  expect_output(print(e), "on 600 rows")
  ns <- asNamespace("gpukernels")
  old <- get("h2_error_all_rows_max", ns)
  old_rows <- get("h2_error_sampled_rows", ns)
  assignInNamespace("h2_error_all_rows_max", 500, ns)
  assignInNamespace("h2_error_sampled_rows", 200, ns)
  on.exit({
    assignInNamespace("h2_error_all_rows_max", old, ns)
    assignInNamespace("h2_error_sampled_rows", old_rows, ns)
  })
  s <- h2_error(A)
  expect_true(s$sampled)
  expect_equal(s$rows, 200)
  expect_true(is.na(s$norm2))
  expect_output(print(s), "200 randomly sampled rows")
  # the sampled estimate measures the same products: the exact relative error
  # of those rows, against a dense reference
  set.seed(11)
  full <- h2_error(A, rows = NULL, iterations = 0)
  expect_false(full$sampled)
  expect_lt(abs(log(s$frobenius / full$frobenius)), log(3))
  expect_output(print(summary(A, accuracy = TRUE)), "sampled rows")
})
