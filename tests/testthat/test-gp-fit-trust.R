# gp_fit() as a statistician can trust it (issue 33): estimates at the exact
# MLE of an independent base-R reference, fits equivariant to the data's
# scales, bounds that are reported, interrupts that reach the caller.

# -log-likelihood (profiled GLS mean) by Cholesky, Matern through besselK,
# at p = log(variance, range, nugget[, smoothness]).
ref_nll <- function(p, locs, y, X, nu = NULL) {
  th <- exp(p)
  if (is.null(nu)) nu <- th[[4]]
  d <- as.matrix(dist(locs)) / th[[2]]
  corr <- ifelse(d == 0, 1, 2^(1 - nu) / gamma(nu) * d^nu * besselK(pmax(d, 1e-300), nu))
  S <- th[[1]] * corr + diag(th[[3]], nrow(locs))
  R <- chol(S)
  Ry <- backsolve(R, y, transpose = TRUE)
  RX <- backsolve(R, X, transpose = TRUE)
  r <- Ry - RX %*% qr.solve(RX, Ry)          # whitened GLS residuals
  0.5 * (length(y) * log(2 * pi) + 2 * sum(log(diag(R))) + sum(r^2))
}

# The reference MLE: BFGS on the log scale with a tight reltol, then Newton
# steps with central-difference gradient and Hessian.
ref_mle <- function(f, p0) {
  p <- optim(p0, f, method = "BFGS", control = list(reltol = 1e-13, maxit = 1000))$par
  h <- 1e-4
  k <- length(p)
  E <- diag(h, k)
  for (it in 1:4) {
    g <- vapply(1:k, function(i) (f(p + E[, i]) - f(p - E[, i])) / (2 * h), 0)
    H <- matrix(0, k, k)
    for (i in 1:k) for (j in 1:k) {
      H[i, j] <- (f(p + E[, i] + E[, j]) - f(p + E[, i] - E[, j]) -
                  f(p - E[, i] + E[, j]) + f(p - E[, i] - E[, j])) / (4 * h^2)
    }
    p <- p - solve(H, g)
  }
  p
}

test_that("dense estimates are within 1e-6 of an independent MLE", {
  k <- gk_kernel("matern", range = 0.12, smoothness = 1.5, variance = 1)
  dat <- sim_data(200, kernel = k, nugget = 0.05, seed = 3)
  fit <- gp_fit(dat$locs, dat$y, dat$X, kernel = "matern", smoothness = 1.5, method = "dense",
                backend = "cpu")
  expect_match(fit$convergence, "^converged$")
  expect_true(all(abs(fit$projected_gradient) <= fit$gtol))
  f <- function(p) ref_nll(p, dat$locs, dat$y, dat$X, nu = 1.5)
  p <- ref_mle(f, log(coef(fit)) + 0.02)
  expect_lt(max(abs(coef(fit) / exp(p) - 1)), 1e-6)
  expect_equal(fit$loglik, -f(p), tolerance = 1e-10)

  # smoothness estimated (nu = 0.8: Bessel functions, not half-integer)
  k <- gk_kernel("matern", range = 0.1, smoothness = 0.8, variance = 1)
  dat <- sim_data(150, kernel = k, nugget = 0.05, seed = 8)
  fit <- gp_fit(dat$locs, dat$y, dat$X, kernel = "matern", smoothness = 1.2,
                estimate_smoothness = TRUE, method = "dense", backend = "cpu")
  f <- function(p) ref_nll(p, dat$locs, dat$y, dat$X)
  p <- ref_mle(f, log(coef(fit)) + 0.02)
  expect_named(coef(fit), c("variance", "range", "nugget", "smoothness"))
  expect_lt(max(abs(coef(fit) / exp(p) - 1)), 1e-6)
})

test_that("the fit is equivariant to y * c and locs * c", {
  k <- gk_kernel("matern", range = 0.12, smoothness = 1.5, variance = 1)
  dat <- sim_data(150, kernel = k, nugget = 0.05, seed = 4)
  fit0 <- gp_fit(dat$locs, dat$y, dat$X, kernel = "matern", method = "dense", backend = "cpu")
  new <- matrix(runif(10), ncol = 2)
  p0 <- predict(fit0, new, newX = cbind(1, new[, 1]), se.fit = TRUE)
  for (c in c(1e-150, 1e150)) {
    fit <- gp_fit(dat$locs, dat$y * c, dat$X, kernel = "matern", method = "dense",
                  backend = "cpu")
    expect_equal(unname(coef(fit) / (coef(fit0) * c(c^2, 1, c^2))), rep(1, 3), tolerance = 1e-8,
                 info = c)
    expect_equal(fit$beta / c, fit0$beta, tolerance = 1e-8, info = c)
    expect_equal(fit$loglik, fit0$loglik - 150 * log(c), tolerance = 1e-10, info = c)
    expect_equal(vcov(fit), vcov(fit0), tolerance = 1e-6, info = c)
    expect_length(fit$at_bound, 0)
    p <- predict(fit, new, newX = cbind(1, new[, 1]), se.fit = TRUE)
    expect_equal(p$fit / c, p0$fit, tolerance = 1e-8, info = c)
    expect_equal(p$se.fit / c, p0$se.fit, tolerance = 1e-6, info = c)
  }
  for (c in c(1e-6, 1e6)) {
    fit <- gp_fit(dat$locs * c, dat$y, dat$X, kernel = "matern", method = "dense",
                  backend = "cpu")
    expect_equal(unname(coef(fit) / (coef(fit0) * c(1, c, 1))), rep(1, 3), tolerance = 1e-8,
                 info = c)
    expect_equal(fit$loglik, fit0$loglik, tolerance = 1e-10, info = c)
    p <- predict(fit, new * c, newX = cbind(1, new[, 1]), se.fit = TRUE)
    expect_equal(p$fit, p0$fit, tolerance = 1e-6, info = c)
  }
  # the iterative methods too (their probes and point order do not depend on the scale)
  it0 <- gp_fit(dat$locs, dat$y, dat$X, kernel = "matern", method = "tiled", backend = "cpu")
  it <- gp_fit(dat$locs * 1e6, dat$y * 1e-150, dat$X, kernel = "matern", method = "tiled",
               backend = "cpu")
  expect_equal(unname(coef(it) / (coef(it0) * c(1e-300, 1e6, 1e-300))), rep(1, 3),
               tolerance = 1e-6)
})

test_that("a tiny nugget is estimated, not stopped silently on a hidden bound", {
  k <- gk_kernel("matern", range = 0.15, smoothness = 1.5, variance = 1)
  dat <- sim_data(250, kernel = k, nugget = 1e-6, seed = 5)
  fit <- expect_silent(gp_fit(dat$locs, dat$y, dat$X, kernel = "matern", method = "dense",
                              backend = "cpu"))
  expect_length(fit$at_bound, 0)
  expect_match(fit$convergence, "^converged$")
  expect_true(all(abs(fit$projected_gradient) <= fit$gtol))
  # the old box was log(start) +/- 12: start nugget 0.1 * var(resid)
  expect_lt(coef(fit)[["nugget"]], 1e-4)
  f <- function(p) ref_nll(p, dat$locs, dat$y, dat$X, nu = 1.5)
  expect_equal(fit$loglik, -f(log(coef(fit))), tolerance = 1e-10)
  p <- ref_mle(f, log(coef(fit)) + 0.01)
  expect_lt(max(abs(coef(fit) / exp(p) - 1)), 1e-5)
})

test_that("bounds and fixed values are honoured, and a fit on a bound says so", {
  k <- gk_kernel("matern", range = 0.15, smoothness = 1.5, variance = 1)
  dat <- sim_data(150, kernel = k, nugget = 1e-4, seed = 6)
  expect_warning(fit <- gp_fit(dat$locs, dat$y, dat$X, method = "dense", backend = "cpu",
                               lower = list(nugget = 0.01)),
                 "nugget ended at its lower bound 0.01")
  expect_equal(coef(fit)[["nugget"]], 0.01)
  expect_equal(fit$at_bound, c(nugget = "lower"))
  expect_match(fit$convergence, "converged at a bound: nugget \\(lower\\)")
  expect_output(print(fit), "nugget ended at its lower bound")
  expect_equal(fit$lower[["nugget"]], 0.01)
  expect_warning(fit <- gp_fit(dat$locs, dat$y, dat$X, method = "dense", backend = "cpu",
                               upper = c(range = 0.05)), "range ended at its upper bound")
  expect_equal(coef(fit)[["range"]], 0.05)
  # the documented defaults: relative to the residual variance and the spread of locs
  fit <- gp_fit(dat$locs, dat$y, dat$X, method = "dense", backend = "cpu")
  s2 <- var(lm.fit(dat$X, dat$y)$residuals)
  d <- mean(apply(dat$locs, 2, sd))
  expect_equal(fit$lower, c(variance = 1e-8 * s2, range = 1e-6 * d, nugget = 1e-10 * s2))
  expect_equal(fit$upper, c(variance = 1e8 * s2, range = 1e6 * d, nugget = 1e4 * s2))

  fx <- gp_fit(dat$locs, dat$y, dat$X, method = "dense", backend = "cpu",
               fixed = list(nugget = 0.02))
  expect_equal(coef(fx)[["nugget"]], 0.02)
  expect_equal(unname(vcov(fx)[3, ]), c(0, 0, 0))
  expect_true(all(abs(fx$projected_gradient) <= fx$gtol))
  expect_output(print(fx), "fixed: nugget = 0.02")
  expect_true(all(is.na(summary(fx)$table["nugget", c(3, 4, 5)])))
  f <- function(p) ref_nll(c(p, log(0.02)), dat$locs, dat$y, dat$X, nu = 1.5)
  p <- ref_mle(f, log(coef(fx)[1:2]) + 0.01)
  expect_lt(max(abs(coef(fx)[1:2] / exp(p) - 1)), 1e-6)
  # a fixed smoothness is the kernel's
  fs <- gp_fit(dat$locs, dat$y, dat$X, method = "dense", backend = "cpu",
               estimate_smoothness = TRUE, fixed = list(smoothness = 0.5))
  expect_equal(fs$kernel$smoothness, 0.5)
  expect_named(coef(fs), c("variance", "range", "nugget"))
  expect_error(gp_fit(dat$locs, dat$y, lower = c(nugget = 1), upper = c(nugget = 0.5)),
               "below")
  expect_error(gp_fit(dat$locs, dat$y, lower = c(sill = 1)), "unknown")
  expect_error(gp_fit(dat$locs, dat$y, fixed = c(range = 0)), "positive")
})

test_that("an interrupt reaches the caller with the best parameters so far", {
  set.seed(1)
  locs <- matrix(runif(400), ncol = 2)
  y <- gp_simulate(locs, gk_kernel("matern", range = 0.2, smoothness = 1.5), nugget = 0.1,
                   backend = "cpu")
  calls <- 0
  at <- 6
  lls <- numeric()
  interrupt_at <- function() {
    calls <<- calls + 1
    if (calls == at) {
      signalCondition(structure(list(message = "", call = NULL),
                                class = c("interrupt", "condition")))
    }
  }
  record <- function(value) lls <<- c(lls, value$loglik)
  suppressMessages(trace("gp_evaluate", where = asNamespace("gpukernels"), print = FALSE,
                         tracer = bquote(.(interrupt_at)()),
                         exit = bquote(.(record)(returnValue()))))
  on.exit(suppressMessages(untrace("gp_evaluate", where = asNamespace("gpukernels"))),
          add = TRUE)
  cond <- tryCatch(gp_fit(locs, y, backend = "cpu"), interrupt = function(e) e)
  expect_s3_class(cond, "gp_fit_interrupt")
  expect_s3_class(cond, "interrupt")
  expect_equal(cond$evaluations, 5L)
  expect_named(cond$parameters, c("variance", "range", "nugget"))
  expect_match(conditionMessage(cond), "interrupted; best parameters so far: variance = ")
  # the traced values are on the fit's internal scale, y / sd(residuals)
  expect_equal(cond$loglik, max(lls[1:5]) - 200 * log(sd(y)), tolerance = 1e-10)
  th <- cond$parameters
  ll <- gp_loglik(locs, y, kernel = gk_kernel("matern", variance = th[["variance"]],
                                              range = th[["range"]], smoothness = 1.5),
                  nugget = th[["nugget"]], method = "dense", backend = "cpu")
  expect_equal(ll$loglik, cond$loglik, tolerance = 1e-10)

  # in the start-value fit on a subset (n > 2000): not swallowed
  calls <- 0
  at <- 2
  big <- matrix(runif(2 * 2001), ncol = 2)
  yb <- rnorm(2001)
  # the subset fit's evaluations are progress steps too
  skip_if_not_installed("progressr")
  old <- options(progressr.enable = TRUE, gpukernels.progress = NULL,
                 gpukernels.progress_after = 0)
  on.exit(options(old), add = TRUE)
  steps <- 0
  expect_no_warning(cond <- withCallingHandlers(
    tryCatch(gp_fit(big, yb, method = "tiled", backend = "cpu"), interrupt = function(e) e),
    progression = function(p) if (identical(p$type, "update")) steps <<- steps + p$amount))
  expect_s3_class(cond, "gp_fit_interrupt")
  expect_equal(calls, 2)
  expect_equal(steps, 1)
  expect_named(cond$parameters, c("variance", "range", "nugget"))
})

test_that("a real Ctrl-C stops gp_fit, start-value fit included", {
  skip_on_os("windows")
  # n > 2000: without `start`, the signal comes during the start-value fit on a
  # subset; with `start`, during the fit itself
  run <- run_interrupted(
    c(subset_fit = "gp_fit(locs, y, method = 'tiled', backend = 'cpu')",
      main_fit = paste("gp_fit(locs, y, method = 'tiled', backend = 'cpu',",
                       "start = list(variance = 1, range = 0.1, nugget = 0.5))")),
    setup = paste("set.seed(2); locs <- matrix(runif(2 * 2500), ncol = 2);",
                  "y <- sin(8 * locs[, 1]) + cos(6 * locs[, 2]) + rnorm(2500, sd = 0.3)"),
    delay = 3)
  for (name in c("subset_fit", "main_fit")) {
    res <- run$results[[name]]
    expect_identical(res$outcome, "interrupt", info = name)
    # generous for a loaded machine; uncaught, these fits ran for minutes
    expect_lt(res$latency, 5, label = paste(name, "seconds from the signal to the end"))
  }
})

test_that("a quick fit shows no progress; a slow one does, from its start", {
  skip_if_not_installed("progressr")
  old <- options(progressr.enable = TRUE, gpukernels.progress = NULL)
  on.exit(options(old), add = TRUE)
  set.seed(2)
  locs <- matrix(runif(200), ncol = 2)
  y <- rnorm(100)
  count_steps <- function(expr) {
    steps <- 0
    withCallingHandlers(expr, progression = function(p) {
      if (identical(p$type, "update")) steps <<- steps + p$amount
    })
    steps
  }
  options(gpukernels.progress_after = 3600)
  expect_equal(count_steps(gp_fit(locs, y, backend = "cpu", method = "dense",
                                  fixed = list(nugget = 0.1))), 0)
  options(gpukernels.progress_after = 0)
  fit <- NULL
  steps <- count_steps(fit <- gp_fit(locs, y, backend = "cpu", method = "dense",
                                     fixed = list(nugget = 0.1)))
  expect_gt(steps, 0)
})
