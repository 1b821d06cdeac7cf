# Formula kernels (gk_formula()) in gp_loglik(), gp_fit() and predict():
# against the built-in kernels they equal, against an independent R
# likelihood built with outer(), gradients against central differences,
# Fisher information, a fit that recovers simulated parameters, kriging, and
# errors. Each formula (and each derivative) is compiled once per session.

# The formulas, and the same in plain R on coordinate vectors (pairs).
f_matern <- gk_formula((1 + sqrt(sqdist(x, y)) / r) * exp(-sqrt(sqdist(x, y)) / r), r = 0.2)
f_gauss <- gk_formula(exp(-sqdist(x, y) / (2 * s^2)), s = 0.15)
# gaussian times periodic in the first coordinate (not a kernel of the vocabulary)
f_per <- gk_formula(exp(-sqdist(x, y) / (2 * s^2)) * (1 + cos(2 * pi * abs(x[1] - y[1]) / p)) / 2,
                    s = 0.3, p = 0.5)
r_per <- function(x1, x2, y1, y2, th) {
  exp(-((x1 - y1)^2 + (x2 - y2)^2) / (2 * th[["s"]]^2)) *
    (1 + cos(2 * pi * abs(x1 - y1) / th[["p"]])) / 2
}
# a sum of two kernels with a signed weight (estimated on its own scale)
f_sum <- gk_formula(exp(-sqdist(x, y) / (2 * s^2)) + w^2 * exp(-sqrt(sqdist(x, y)) / r),
                    s = 0.2, w = -0.6, r = 0.4)
r_sum <- function(x1, x2, y1, y2, th) {
  d2 <- (x1 - y1)^2 + (x2 - y2)^2
  exp(-d2 / (2 * th[["s"]]^2)) + th[["w"]]^2 * exp(-sqrt(d2) / th[["r"]])
}

# The GP log-likelihood of y ~ N(X beta, v F + nugget I) by brute force.
formula_reference <- function(locs, y, X, rf, th, v = 1, nugget) {
  n <- nrow(locs)
  i <- rep(seq_len(n), n)
  j <- rep(seq_len(n), each = n)
  K <- v * matrix(rf(locs[i, 1], locs[i, 2], locs[j, 1], locs[j, 2], th), n, n)
  S <- K + diag(nugget, n)
  R <- chol(S)
  Si <- chol2inv(R)
  beta <- solve(t(X) %*% Si %*% X, t(X) %*% Si %*% y)
  r <- y - X %*% beta
  list(loglik = -0.5 * (n * log(2 * pi) + 2 * sum(log(diag(R))) + sum(r * (Si %*% r))),
       Si = Si, beta = drop(beta), r = drop(r), K = K)
}

formula_data <- function(n, seed, rf = r_per, th = c(s = 0.3, p = 0.5), v = 1.5, nugget = 0.05) {
  set.seed(seed)
  locs <- matrix(runif(2 * n), n, 2)
  X <- if (n > 2L) cbind(1, locs[, 2]) else matrix(1, n, 1L)
  ref <- formula_reference(locs, numeric(n), X, rf, th, v, nugget)
  S <- ref$K + diag(nugget, n)
  y <- drop(X %*% c(0.5, -1)[seq_len(ncol(X))] + crossprod(chol(S), rnorm(n)))
  list(locs = locs, y = y, X = X)
}

test_that("a formula equal to a built-in kernel gives its likelihood and gradient", {
  dat <- formula_data(157, seed = 1)
  cases <- list(list(f = f_matern, k = gk_kernel("matern", range = 0.2, smoothness = 1.5)),
                list(f = f_gauss, k = gk_kernel("gaussian", range = 0.15)))
  for (case in cases) {
    for (method in c("dense", "tiled")) {
      a <- gp_loglik(dat$locs, dat$y, dat$X, kernel = case$k, nugget = 0.1, method = method,
                     gradient = TRUE, backend = "cpu")
      b <- gp_loglik(dat$locs, dat$y, dat$X, kernel = case$f, nugget = 0.1, method = method,
                     gradient = TRUE, backend = "cpu")
      tol <- if (method == "dense") 1e-10 else 3 * a$se + 1e-8
      expect_lt(abs(b$loglik - a$loglik), tol)
      expect_equal(unname(b$gradient), unname(a$gradient),
                   tolerance = if (method == "dense") 1e-10 else 1e-6)
      expect_equal(names(b$gradient), c("log_variance", paste0("log_", names(case$f$params)),
                                        "log_nugget"))
    }
  }
})

test_that("dense likelihoods match the brute-force reference at several sizes", {
  th_per <- c(s = 0.3, p = 0.5)
  th_sum <- c(s = 0.2, w = -0.6, r = 0.4)
  for (n in c(1L, 2L, 7L, 33L, 101L)) {
    dat <- formula_data(n, seed = n)
    X <- dat$X
    for (case in list(list(f = f_per, rf = r_per, th = th_per),
                      list(f = f_sum, rf = r_sum, th = th_sum))) {
      ref <- formula_reference(dat$locs, dat$y, X, case$rf, case$th, 1, 0.05)
      got <- gp_loglik(dat$locs, dat$y, X, kernel = case$f, nugget = 0.05, method = "dense",
                       backend = "cpu")
      expect_lt(abs(got$loglik - ref$loglik), 1e-8 * max(1, abs(ref$loglik)))
      expect_equal(unname(got$beta), ref$beta, tolerance = 1e-8)
    }
  }
})

test_that("gradients match central differences (log and signed parameters)", {
  dat <- formula_data(61, seed = 3, rf = r_sum, th = c(s = 0.2, w = -0.6, r = 0.4))
  th <- c(s = 0.2, w = -0.6, r = 0.4)
  # parameters as the gradient has them: log s, w itself, log r; then log v, log nugget
  ll <- function(p) {
    t <- c(s = exp(p[[1]]), w = p[[2]], r = exp(p[[3]]))
    formula_reference(dat$locs, dat$y, dat$X, r_sum, t, exp(p[[4]]), exp(p[[5]]))$loglik
  }
  p0 <- c(log(0.2), -0.6, log(0.4), 0, log(0.05))
  fd <- central_gradient(ll, p0, 1e-5)
  g <- gp_loglik(dat$locs, dat$y, dat$X, kernel = f_sum, nugget = 0.05, method = "dense",
                 gradient = TRUE, backend = "cpu")$gradient
  expect_equal(names(g), c("log_variance", "log_s", "w", "log_r", "log_nugget"))
  expect_equal(unname(g), fd[c(4, 1, 2, 3, 5)], tolerance = 1e-6)
  tiled <- gp_loglik(dat$locs, dat$y, dat$X, kernel = f_sum, nugget = 0.05, method = "tiled",
                     gradient = TRUE, backend = "cpu")
  expect_true(all(abs(tiled$gradient - g) <= 4 * tiled$gradient_se + 1e-6))
  expect_lt(abs(tiled$loglik - ll(p0)), tiled$error + 1e-6)
})

test_that("a fit recovers simulated parameters; its information and kriging match R", {
  truth <- c(variance = 1.5, s = 0.3, p = 0.5, nugget = 0.05)
  dat <- formula_data(300, seed = 7)
  fit <- gp_fit(dat$locs, dat$y, dat$X, kernel = f_per, method = "dense", backend = "cpu",
                start = list(s = 0.25, p = 0.45))
  expect_match(fit$convergence, "^converged")
  expect_equal(names(coef(fit)), names(truth))
  se <- sqrt(diag(vcov(fit)))
  expect_true(all(abs(log(coef(fit)) - log(truth)) < 4 * se))
  # the Fisher information by brute force: 0.5 tr(Si D_i Si D_j), D by differences of K
  th <- coef(fit)
  K_at <- function(t) formula_reference(dat$locs, dat$y, dat$X, r_per, t[c("s", "p")],
                                        t[["variance"]], t[["nugget"]])$K
  ref <- formula_reference(dat$locs, dat$y, dat$X, r_per, th[c("s", "p")], th[["variance"]],
                           th[["nugget"]])
  D <- lapply(names(th), function(nm) {
    if (nm == "nugget") return(diag(th[["nugget"]], nrow(dat$locs)))
    up <- down <- th
    up[[nm]] <- th[[nm]] * exp(1e-5)
    down[[nm]] <- th[[nm]] * exp(-1e-5)
    (K_at(up) - K_at(down)) / 2e-5
  })
  SD <- lapply(D, function(M) ref$Si %*% M)
  info <- outer(1:4, 1:4, Vectorize(function(i, j) 0.5 * sum(SD[[i]] * t(SD[[j]]))))
  expect_equal(unname(vcov(fit)), unname(solve(info)), tolerance = 1e-5)
  expect_lt(abs(fit$loglik - ref$loglik), 1e-8 * abs(ref$loglik))
  # kriging at new points (one of them observed) against R
  new <- rbind(matrix(c(0.1, 0.9, 0.5, 0.5, 0.33, 0.2), ncol = 2, byrow = TRUE), dat$locs[5, ])
  newX <- cbind(1, new[, 2])
  pr <- predict(fit, new, newX = newX, se.fit = TRUE)
  i <- rep(seq_len(nrow(new)), nrow(dat$locs))
  j <- rep(seq_len(nrow(dat$locs)), each = nrow(new))
  C <- th[["variance"]] * matrix(r_per(new[i, 1], new[i, 2], dat$locs[j, 1], dat$locs[j, 2],
                                       th[c("s", "p")]), nrow(new))
  mean <- drop(newX %*% fit$beta + C %*% (ref$Si %*% ref$r))
  U <- t(newX) - t(dat$X) %*% ref$Si %*% t(C)
  var <- th[["variance"]] - rowSums((C %*% ref$Si) * C) +
    colSums(U * solve(t(dat$X) %*% ref$Si %*% dat$X, U))
  expect_equal(pr$fit, mean, tolerance = 1e-7)
  expect_equal(pr$se.fit, sqrt(pmax(var, 0)), tolerance = 1e-6)
  # held fixed: not estimated, zero rows in vcov
  fx <- gp_fit(dat$locs, dat$y, dat$X, kernel = f_per, method = "dense", backend = "cpu",
               fixed = list(p = 0.5))
  expect_equal(coef(fx)[["p"]], 0.5)
  expect_equal(unname(vcov(fx)["log_p", ]), rep(0, 4))
})

test_that("a tiled fit agrees with the dense one and predicts", {
  dat <- formula_data(150, seed = 11)
  dense <- gp_fit(dat$locs, dat$y, dat$X, kernel = f_per, method = "dense", backend = "cpu")
  tiled <- gp_fit(dat$locs, dat$y, dat$X, kernel = f_per, method = "tiled", backend = "cpu",
                  start = as.list(coef(dense)))
  se <- sqrt(diag(vcov(dense)))
  expect_true(all(abs(log(coef(tiled)) - log(coef(dense))) < se))
  new <- matrix(runif(8), 4, 2)
  a <- predict(dense, new, newX = cbind(1, new[, 2]), se.fit = TRUE)
  b <- predict(tiled, new, newX = cbind(1, new[, 2]), se.fit = TRUE, se.method = "vecchia")
  expect_equal(b$fit, a$fit, tolerance = 0.05)
  expect_true(all(b$se.fit >= 0.9 * a$se.fit))
})

test_that("bad formula uses give clear errors", {
  dat <- formula_data(20, seed = 5)
  f_na <- gk_formula(exp(-sqdist(x, y) / (2 * s^2)), s = NA)
  expect_error(gp_fit(dat$locs, dat$y, kernel = f_na, method = "dense", backend = "cpu"),
               "parameter `s` needs a starting value")
  expect_error(gp_loglik(dat$locs, dat$y, kernel = f_na, nugget = 0.1, backend = "cpu"),
               "`s` has no value")
  fit_na <- gp_fit(dat$locs, dat$y, kernel = f_na, method = "dense", backend = "cpu",
                   start = list(s = 0.3))
  expect_true(is.finite(coef(fit_na)[["s"]]))
  # squared distance is no covariance: Cholesky, or CG, fails with a message
  f_bad <- gk_formula(sqdist(x, y) * a, a = 1)
  expect_error(gp_loglik(dat$locs, dat$y, kernel = f_bad, nugget = 0.01, method = "dense",
                         backend = "cpu"), "not positive definite")
  expect_error(gp_loglik(dat$locs, dat$y, kernel = f_bad, nugget = 0.01, method = "tiled",
                         backend = "cpu"), "not positive definite|numerically singular")
  for (m in c("h2", "vecchia")) {
    expect_error(gp_loglik(dat$locs, dat$y, kernel = f_gauss, nugget = 0.1, method = m,
                           backend = "cpu"), "cannot take a formula kernel.*\"dense\" or \"tiled\"")
    expect_error(gp_fit(dat$locs, dat$y, kernel = f_gauss, method = m, backend = "cpu"),
                 "cannot take a formula kernel")
  }
  expect_error(gp_loglik(dat$locs, dat$y, kernel = gk_formula(exp(-sqdist(x, y) * variance),
                                                              variance = 1), nugget = 0.1),
               "GP's own variance")
  expect_error(gp_loglik(dat$locs, dat$y, kernel = gk_formula(exp(-abs(x[3] - y[3]))),
                         nugget = 0.1), "coordinate 3 of points with 2 coordinates")
  expect_error(gp_fit(dat$locs, dat$y, kernel = f_gauss, fixed = list(q = 1), backend = "cpu"),
               "unknown parameter.*\"q\"")
  expect_error(gp_fit(dat$locs, dat$y, kernel = f_gauss, lower = list(s = -1), backend = "cpu"),
               "`lower\\$s` must be a positive")
  expect_error(gp_fit(dat$locs, dat$y, kernel = f_gauss, ranges = "per_dimension"),
               "not formulas")
  expect_error(gp_loglik(dat$locs, dat$y, kernel = f_gauss, nugget = 0.1, ranges = "isotropic"),
               "not formulas")
})

test_that("GPU: formula likelihoods equal the CPU's", {
  skip_if_not(gk_has_gpu())
  dat <- formula_data(301, seed = 13)
  for (method in c("dense", "tiled")) {
    a <- gp_loglik(dat$locs, dat$y, dat$X, kernel = f_per, nugget = 0.05, method = method,
                   gradient = TRUE, backend = "cpu")
    b <- gp_loglik(dat$locs, dat$y, dat$X, kernel = f_per, nugget = 0.05, method = method,
                   gradient = TRUE, backend = "gpu")
    expect_lt(abs(b$loglik - a$loglik), 1e-8 * abs(a$loglik))
    expect_equal(b$gradient, a$gradient, tolerance = 1e-6)
  }
  fit <- gp_fit(dat$locs, dat$y, dat$X, kernel = f_per, method = "tiled", backend = "gpu")
  expect_match(fit$convergence, "^converged")
  expect_length(predict(fit, dat$locs[1:3, ], newX = dat$X[1:3, ]), 3L)
})
