# Numerics at the edges of double and float (issue 9): sums of dt |f - g|^p
# that overflow or underflow where the distance is an ordinary number, float
# sums that overflow, and time grids that float cannot represent.

# Reference in scaled arithmetic: the largest difference M and the longest
# interval W are factored out before raising to p (a different scaling from
# the engines', which factor out the largest term).
pcf_ref_pair_scaled <- function(f, g, p) {
  t <- sort(unique(c(0, f[, 1], g[, 1])))
  k <- length(t)
  w <- diff(t)
  d <- abs(pcf_ref_value(f, t) - pcf_ref_value(g, t))[-k]
  keep <- w > 0 & d > 0
  if (!any(keep)) return(0)
  M <- max(d[keep])
  W <- max(w[keep])
  M * W^(1 / p) * sum((w[keep] / W) * (d[keep] / M)^p)^(1 / p)
}

pcf_ref_scaled <- function(X, Y, p) {
  outer(seq_along(X), seq_along(Y),
        Vectorize(function(i, j) pcf_ref_pair_scaled(X[[i]], Y[[j]], p)))
}

scale_values <- function(X, s) lapply(X, function(f) cbind(t = f[, 1], v = f[, 2] * s))

test_that("L2 and Lp distances of values near 1e200 and near 1e-200 are finite and exact", {
  set.seed(91)
  for (s in c(1e200, 1e-200, 1e300)) {
    X <- scale_values(random_pcfs(13, sizes = c(1, 4, 9)), s)
    Y <- scale_values(random_pcfs(5, sizes = c(2, 17)), s)
    for (p in c(2, 3, 1000)) {
      ref <- pcf_ref_scaled(X, Y, p)
      ref_sym <- pcf_ref_scaled(X, X, p)
      expect_true(all(is.finite(ref)) && all(ref > 0))
      for (backend in test_backends()) {
        D <- pcf_cdist(X, Y, p = p, backend = backend)
        expect_lt(rel_err(D, ref), 1e-12)
        d <- pcf_pdist(X, p = p, backend = backend)
        expect_lt(rel_err(as.matrix(d), ref_sym), 1e-12)
      }
    }
  }
})

test_that("p = 1000 neither overflows (differences > 1) nor underflows (small differences)", {
  set.seed(92)
  for (s in c(1e-3, 1, 50)) {
    X <- scale_values(random_pcfs(11, sizes = c(1, 5, 12), shared = FALSE), s)
    for (p in c(300, 1000)) {
      ref <- pcf_ref_scaled(X, X, p)
      for (backend in test_backends()) {
        for (precision in c("double", "single")) {
          tol <- if (precision == "double") 1e-12 else 1e-5
          d <- pcf_pdist(X, p = p, precision = precision, backend = backend)
          expect_lt(rel_err(as.matrix(d), ref), tol)
          # each distance, not only the largest, is right (0 between equal functions)
          pos <- ref > 0
          expect_lt(max(abs(as.matrix(d)[pos] / ref[pos] - 1)), tol)
          expect_true(all(as.matrix(d)[!pos] == 0))
        }
      }
    }
  }
})

test_that("single precision sums in double: no Inf where the double result is finite", {
  set.seed(93)
  # values up to 3e38 (within float) over intervals of length up to 200:
  # the L1 and L2 sums pass FLT_MAX (3.4e38) though every input is a float
  X <- lapply(random_pcfs(9, sizes = c(2, 6, 10)), function(f) {
    cbind(t = f[, 1] * 40, v = pmax(-3, pmin(3, f[, 2])) * 1e38)
  })
  for (p in c(1, 2, 3)) {
    ref <- pcf_ref_scaled(X, X, p)
    expect_gt(max(ref), 3.4e38)
    for (backend in test_backends()) {
      d <- as.matrix(pcf_pdist(X, p = p, precision = "single", backend = backend))
      expect_true(all(is.finite(d)))
      expect_lt(rel_err(d, ref), 1e-6)
    }
  }
})

test_that("single precision warns when float cannot represent the breakpoints", {
  set.seed(94)
  # breakpoints 1e8 + 0.5 k: float spacing near 1e8 is 8, so intervals vanish
  X <- lapply(1:5, function(i) cbind(t = 1e8 + 0.5 * (0:6), v = c(rnorm(6), 0)))
  ref <- pcf_ref_scaled(X, X, 1)
  expect_true(all(ref[row(ref) != col(ref)] > 0))
  for (backend in test_backends()) {
    expect_lt(rel_err(as.matrix(pcf_pdist(X, backend = backend)), ref), 1e-12)
    expect_warning(pcf_pdist(X, precision = "single", backend = backend),
                   "single precision cannot represent the breakpoints of `x\\[\\[1\\]\\]`")
    w <- character()
    withCallingHandlers(pcf_cdist(X[1:2], X[3:4], precision = "single", backend = backend),
                        warning = function(cnd) {
                          w <<- c(w, conditionMessage(cnd))
                          invokeRestart("muffleWarning")
                        })
    expect_length(w, 2L)
    expect_match(w, "`[xy]\\[\\[1\\]\\]`")
    expect_warning(pcf_kernel(lapply(X, function(f) { f[nrow(f), 2] <- 0; f }),
                              precision = "single", backend = backend), "cannot represent")
    # Y alone can be the one that float cannot hold
    ok <- list(cbind(t = c(0, 1), v = c(1, 0)))
    expect_warning(pcf_cdist(ok, X[1], precision = "single", backend = backend),
                   "`y\\[\\[1\\]\\]`")
    # a grid of floats near 1e8 (multiples of 8) is represented: no warning, exact
    Z <- lapply(1:4, function(i) cbind(t = 1e8 + 8 * (0:5), v = c(rnorm(5), 0)))
    expect_silent(dz <- pcf_pdist(Z, precision = "single", backend = backend))
    zf <- lapply(Z, function(f) cbind(t = f[, 1], v = round_to_float(f[, 2])))
    expect_lt(rel_err(as.matrix(dz), pcf_ref_scaled(zf, zf, 1)), 1e-12)
    # a positive first breakpoint that float rounds to 0
    expect_warning(pcf_pdist(list(cbind(t = 1e-50, v = 0), cbind(t = 1, v = 0)),
                             precision = "single", backend = backend), "cannot represent")
  }
})
