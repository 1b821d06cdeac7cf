# Gaussian-process likelihood, gradient, fit, kriging and simulation against
# independent dense references written here in plain R.

test_that("dense log-likelihood matches an independent reference (with Bessel Matern)", {
  for (nu in c(0.5, 1.5, 0.8)) {
    k <- gk_kernel("matern", range = 0.15, smoothness = nu, variance = 1.7)
    dat <- sim_data(301, kernel = k, nugget = 0.05, seed = 10 + nu * 10)
    ref <- dense_reference(dat$locs, dat$y, dat$X, k, 0.05)
    got <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = 0.05, method = "dense",
                     backend = "cpu")
    expect_equal(got$loglik, ref$loglik, tolerance = 1e-8)
    expect_equal(unname(got$beta), unname(ref$beta), tolerance = 1e-8)
  }
})

test_that("tiled log-likelihood matches dense within its reported error and 1 nat (n = 2000)", {
  for (case in list(list(k = gk_kernel("matern", range = 0.1, smoothness = 1.5, variance = 2),
                         nugget = 0.01),
                    list(k = gk_kernel("exponential", range = 0.2), nugget = 1e-3))) {
    dat <- sim_data(2000, kernel = case$k, nugget = case$nugget, seed = 2)
    dense <- gp_loglik(dat$locs, dat$y, dat$X, kernel = case$k, nugget = case$nugget,
                       method = "dense", gradient = TRUE, backend = "cpu")
    it <- gp_loglik(dat$locs, dat$y, dat$X, kernel = case$k, nugget = case$nugget,
                    method = "tiled", gradient = TRUE, backend = "cpu")
    err <- abs(it$loglik - dense$loglik)
    expect_lt(err, 1)
    expect_lt(err, it$error)
    expect_gt(it$se, 0)
    expect_lte(it$cg_iterations, 60)
    expect_equal(unname(it$beta), unname(dense$beta), tolerance = 1e-5)
    # gradient within 4 of its standard errors (plus a little for the solves)
    expect_true(all(abs(it$gradient - dense$gradient) < 4 * it$gradient_se + 0.05))
  }
})

test_that("dense gradient matches finite differences of the dense log-likelihood", {
  k <- gk_kernel("matern", range = 0.2, smoothness = 2.5, variance = 1.3)
  dat <- sim_data(400, kernel = k, nugget = 0.02, seed = 5)
  ll <- function(p) {
    gp_loglik(dat$locs, dat$y, dat$X, kernel = gk_kernel("matern", range = exp(p[2]),
              smoothness = 2.5, variance = exp(p[1])), nugget = exp(p[3]), method = "dense",
              backend = "cpu")$loglik
  }
  fd <- central_gradient(ll, log(c(1.3, 0.2, 0.02)), 1e-4)
  g <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = 0.02, method = "dense",
                 gradient = TRUE, backend = "cpu")$gradient
  expect_equal(unname(g), fd, tolerance = 1e-5)
})

test_that("range-derivative kernels match numerical derivatives of the kernel", {
  d <- c(0, 0.01, 0.3, 1, 2.5, 7)
  for (k in list(gk_kernel("gaussian"), gk_kernel("exponential"), gk_kernel("cauchy"),
                 gk_kernel("imq"), gk_kernel("matern", smoothness = 0.5),
                 gk_kernel("matern", smoothness = 1.5), gk_kernel("matern", smoothness = 2.5),
                 gk_kernel("matern", smoothness = 0.7), gk_kernel("matern", smoothness = 3.2))) {
    # Internal functions here: derivative kernels and solver pieces that have no export.
    dk <- gpukernels:::gp_dlogrange_kernel(k)
    got <- .Call(gpukernels:::gk_r_kernel_eval, dk, d^2)
    # d k / d log(range) at distance r: k(r / range) with range = e^t, at t = 0
    h <- 1e-6
    fd <- (kernel_eval(k, d * exp(-h)) - kernel_eval(k, d * exp(h))) / (2 * h)
    expect_equal(got, fd, tolerance = 1e-6, info = paste(k$name, k$smoothness))
  }
})

test_that("smoothness gradients match finite differences of the independent dense reference", {
  for (nu in c(1.2, 1.5)) {    # 1.5: closed form at nu, Bessel functions at nu e^(+-h)
    k <- gk_kernel("matern", range = 0.15, smoothness = nu, variance = 1.3)
    dat <- sim_data(250, kernel = k, nugget = 0.05, seed = 31)
    ll <- function(p) {
      kp <- gk_kernel("matern", range = exp(p[2]), smoothness = exp(p[4]), variance = exp(p[1]))
      dense_reference(dat$locs, dat$y, dat$X, kp, exp(p[3]))$loglik
    }
    fd <- central_gradient(ll, log(c(1.3, 0.15, 0.05, nu)), 1e-4)
    dense <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = 0.05, method = "dense",
                       gradient = TRUE, smoothness_gradient = TRUE, backend = "cpu")
    expect_named(dense$gradient, c("log_variance", "log_range", "log_nugget", "log_smoothness"))
    expect_equal(unname(dense$gradient), fd, tolerance = 1e-5, info = nu)
    tiled <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = 0.05, method = "tiled",
                       gradient = TRUE, smoothness_gradient = TRUE, backend = "cpu")
    expect_true(all(abs(tiled$gradient - dense$gradient) < 4 * tiled$gradient_se + 0.05),
                info = nu)
  }
  locs <- matrix(runif(40), ncol = 2)
  expect_error(gp_loglik(locs, rnorm(20), kernel = gk_kernel("exponential"), nugget = 0.1,
                         gradient = TRUE, smoothness_gradient = TRUE), "matern")
  expect_error(gp_fit(locs, rnorm(20), kernel = "exponential", estimate_smoothness = TRUE),
               "matern")
})

test_that("MLE with the smoothness free: dense matches the reference optimum, tiled matches dense", {
  k <- gk_kernel("matern", range = 0.12, smoothness = 1, variance = 1)
  dat <- sim_data(250, kernel = k, nugget = 0.05, seed = 33)
  start <- list(variance = 0.8, range = 0.1, nugget = 0.08, smoothness = 1.3)
  dense <- gp_fit(dat$locs, dat$y, dat$X, kernel = "matern", start = start,
                  estimate_smoothness = TRUE, method = "dense", backend = "cpu")
  nll <- function(p) {
    kp <- gk_kernel("matern", range = exp(p[2]), smoothness = exp(p[4]), variance = exp(p[1]))
    -dense_reference(dat$locs, dat$y, dat$X, kp, exp(p[3]))$loglik
  }
  ref <- optim(log(unlist(start)), nll, method = "BFGS", control = list(reltol = 1e-12))
  expect_lt(max(abs(coef(dense) / exp(ref$par) - 1)), 0.01)
  expect_equal(dense$loglik, -ref$value, tolerance = 1e-6)
  it <- gp_fit(dat$locs, dat$y, dat$X, kernel = "matern", start = start,
               estimate_smoothness = TRUE, method = "tiled", backend = "cpu")
  expect_named(coef(it), c("variance", "range", "nugget", "smoothness"))
  expect_lt(max(abs(coef(it) / coef(dense) - 1)), 0.02)
  expect_equal(dim(vcov(it)), c(4L, 4L))
  expect_equal(sqrt(diag(vcov(it))), sqrt(diag(vcov(dense))), tolerance = 0.15)
  expect_equal(attr(logLik(it), "df"), 6L)
  expect_output(print(dense), "smoothness estimated")
  expect_equal(it$kernel$smoothness, coef(it)[["smoothness"]])
})

test_that("gp_fit reports one progressr step per evaluation and stops on an interrupt", {
  skip_if_not_installed("progressr")
  old <- options(progressr.enable = TRUE, gpukernels.progress = NULL)
  on.exit(options(old), add = TRUE)
  set.seed(1)
  locs <- matrix(runif(400), ncol = 2)
  y <- gp_simulate(locs, gk_kernel("matern", range = 0.2, smoothness = 1.5), nugget = 0.1)
  steps <- 0
  lines <- character()
  fit <- withCallingHandlers(gp_fit(locs, y, verbose = TRUE, backend = "cpu"),
    progression = function(p) {
      if (identical(p$type, "update")) {
        steps <<- steps + p$amount
        lines <<- c(lines, p$message)
      }
    })
  expect_equal(steps, fit$evaluations)
  expect_length(lines, fit$evaluations)
  expect_match(lines[1], "gp_fit +1: loglik")
  # Ctrl-C in the 6th evaluation: an interrupt condition with the best of the first 5
  calls <- 0
  lls <- numeric()
  interrupt_at_6 <- function() {
    calls <<- calls + 1
    if (calls == 6) {
      signalCondition(structure(list(message = "", call = NULL),
                                class = c("interrupt", "condition")))
    }
  }
  record <- function(value) lls <<- c(lls, value$loglik)
  suppressMessages(trace("gp_evaluate", where = asNamespace("gpukernels"), print = FALSE,
                         tracer = bquote(.(interrupt_at_6)()),
                         exit = bquote(.(record)(returnValue()))))
  on.exit(suppressMessages(untrace("gp_evaluate", where = asNamespace("gpukernels"))),
          add = TRUE)
  stopped <- tryCatch(gp_fit(locs, y, verbose = FALSE, backend = "cpu"),
                      interrupt = function(e) e)
  expect_s3_class(stopped, "interrupt")
  expect_equal(stopped$evaluations, 5L)
  # (gp_fit works on y / sd(y - mean(y)) inside: the traced values are on that scale)
  expect_equal(stopped$loglik, max(lls[1:5]) - length(y) * log(sd(y)), tolerance = 1e-10)
})

test_that("tiled MLE gives the dense MLE within a fraction of a standard error", {
  # n = 1000, not the issue's 2000: measured on the 2-core development machine
  # (shared), this test took 45 s at n = 1000 and 188 s at n = 2000 (dense
  # fit 99 s, tiled 89 s), over the ~60 s a test may cost. At 2000 the
  # estimates agreed within 1.3% (variance), 0.4% (range), 0.01% (nugget).
  k <- gk_kernel("matern", range = 0.15, smoothness = 1.5, variance = 1)
  dat <- sim_data(1000, kernel = k, nugget = 0.05, seed = 7)
  start <- list(variance = 0.7, range = 0.1, nugget = 0.08)
  dense <- gp_fit(dat$locs, dat$y, dat$X, kernel = "matern", smoothness = 1.5, start = start,
                  method = "dense", backend = "cpu")
  it <- gp_fit(dat$locs, dat$y, dat$X, kernel = "matern", smoothness = 1.5, start = start,
               method = "tiled", backend = "cpu")
  # Both fits run to their own maximum (gp_fit's gradient stopping rule): what
  # is left is the tiled log-likelihood's stochastic error (50 probes), which
  # moved the variance by 3.9% here, a tenth of its standard error (range 1.6%,
  # nugget 0.05%); the earlier, looser stopping rule happened to stop within 2%.
  expect_lt(max(abs(log(coef(it) / coef(dense))) / sqrt(diag(vcov(dense)))), 0.25)
  expect_lt(max(abs(coef(it) / coef(dense) - 1)), 0.05)
  expect_equal(unname(it$beta), unname(dense$beta), tolerance = 0.02)
  # the estimates are near the truth, and the Fisher information agrees with dense
  expect_lt(max(abs(log(coef(dense) / c(1, 0.15, 0.05)))), 1)
  expect_equal(sqrt(diag(vcov(it))), sqrt(diag(vcov(dense))), tolerance = 0.15)
  expect_s3_class(logLik(it), "logLik")
  expect_output(print(summary(dense)), "Fisher information")
  expect_equal(dim(vcov(dense, log = FALSE)), c(3L, 3L))
})

test_that("kriging means and variances match dense kriging", {
  k <- gk_kernel("exponential", range = 0.2, variance = 1.5)
  dat <- sim_data(600, kernel = k, nugget = 0.1, seed = 11)
  start <- list(variance = 1.5, range = 0.2, nugget = 0.1)
  newlocs <- matrix(runif(2 * 37), ncol = 2)
  newX <- cbind(1, newlocs[, 1])
  # the GPU cases solve on the device: gp_cg_solver with the exact tiled
  # operator, and the dense factor kept there (gk_r_gp_dense_krige)
  runs <- list(c("dense", "cpu"), c("tiled", "cpu"), if (gk_has_gpu()) c("tiled", "gpu"),
               if (gk_has_gpu()) c("dense", "gpu"))
  for (run in Filter(Negate(is.null), runs)) {
    method <- run[[1]]
    fit <- suppressWarnings(gp_fit(dat$locs, dat$y, dat$X, kernel = "exponential", start = start,
                                   method = method, optim_control = list(maxit = 0),
                                   backend = run[[2]]))
    p <- predict(fit, newlocs, newX = newX, se.fit = TRUE, se.method = "exact")
    kk <- fit$kernel
    ref <- dense_reference(dat$locs, dat$y, dat$X, kk, fit$nugget)
    C <- kernel_matrix(dat$locs, newlocs, kk, backend = "cpu")
    mean_ref <- drop(newX %*% ref$beta + t(C) %*% ref$Si %*% ref$r)
    U <- t(newX) - t(dat$X) %*% ref$Si %*% C
    var_ref <- kk$variance - colSums(C * (ref$Si %*% C)) +
      colSums(U * (solve(t(dat$X) %*% ref$Si %*% dat$X) %*% U))
    expect_equal(p$fit, mean_ref, tolerance = 1e-5, info = method)
    expect_equal(p$se.fit, sqrt(var_ref), tolerance = 1e-5, info = method)
  }
  expect_error(predict(fit, newlocs), "newX")
})

test_that("a larger tiled likelihood (n = 5000) stays within 1 nat of the dense one", {
  k <- gk_kernel("matern", range = 0.05, smoothness = 1.5, variance = 1)
  set.seed(21)
  n <- 5000
  locs <- matrix(runif(2 * n), ncol = 2)
  y <- gp_simulate(locs, k, nugget = 0.01, method = "vecchia", backend = "cpu")
  dense <- gp_loglik(locs, y, kernel = k, nugget = 0.01, method = "dense", backend = "cpu")
  it <- gp_loglik(locs, y, kernel = k, nugget = 0.01, method = "tiled", backend = "cpu")
  expect_lt(abs(it$loglik - dense$loglik), min(1, it$error))
})

test_that("gp_simulate: exact samples have the right covariance; Vecchia is close", {
  k <- gk_kernel("exponential", range = 0.3, variance = 2)
  set.seed(4)
  locs <- matrix(runif(10), ncol = 2)
  S <- kernel_matrix(locs, kernel = k) + diag(0.1, 5)
  for (method in c("exact", "vecchia")) {
    set.seed(8)
    z <- gp_simulate(locs, k, nugget = 0.1, nsim = 20000, method = method, neighbors = 4)
    expect_equal(dim(z), c(5L, 20000L))
    expect_lt(max(abs(tcrossprod(z) / 20000 - S)), 0.1)
  }
  expect_length(gp_simulate(locs, k, nugget = 0.1), 5L)
})

test_that("bad inputs give clear errors", {
  k <- gk_kernel("exponential", range = 0.2)
  locs <- matrix(runif(40), ncol = 2)
  y <- rnorm(20)
  expect_error(gp_loglik(locs, y[-1], kernel = k, nugget = 0.1), "has 19 values")
  y_na <- y
  y_na[3] <- NA
  expect_error(gp_loglik(locs, y_na, kernel = k, nugget = 0.1), "NA")
  expect_error(gp_loglik(locs, y, kernel = k, nugget = -1), "non-negative")
  expect_error(gp_loglik(locs, y, kernel = gk_kernel("exponential", range = -1), nugget = 0.1),
               "positive")
  expect_error(gp_loglik(locs, y, kernel = gk_kernel("exponential", variance = 0), nugget = 0.1),
               "variance")
  expect_error(gp_loglik(locs, y, kernel = "linear", nugget = 0.1), "covariance kernel")
  expect_error(gp_loglik(locs, y, X = matrix(1, 19, 1), kernel = k, nugget = 0.1), "rows")
  dup <- rbind(locs, locs[1:3, ])
  y_dup <- rnorm(23)
  for (method in c("dense", "tiled")) {
    expect_error(gp_loglik(dup, y_dup, kernel = k, nugget = 0, method = method, backend = "cpu"),
                 "duplicated")
  }
  expect_s3_class(gp_loglik(dup, y_dup, kernel = k, nugget = 0.1, method = "tiled",
                            backend = "cpu"), "gp_loglik")
  expect_error(gp_loglik(locs, y, kernel = k, nugget = 0.1, method = "h2",
                         control = gp_control()), NA)
  expect_error(gp_loglik(cbind(locs, locs), y, kernel = k, nugget = 0.1, method = "h2"),
               "2 or 3 dimensions")
  expect_error(gp_fit(locs, y, start = list(variance = 1, range = 0)), "range")
  expect_error(gp_simulate(locs, k, nsim = 0), "nsim")
  expect_error(gp_control(probes = 1), "probes")
  expect_error(gp_control(neighbors = 65), "at most 64")
  expect_error(gp_simulate(locs, k, method = "vecchia", neighbors = 100), "at most 64")
  expect_s3_class(gp_control(neighbors = 64), "gp_control")
})

test_that("h2 log-likelihood agrees with dense (2D)", {
  k <- gk_kernel("exponential", range = 0.1)
  dat <- sim_data(2000, kernel = k, nugget = 0.01, seed = 9)
  dense <- gp_loglik(dat$locs, dat$y, kernel = k, nugget = 0.01, method = "dense",
                     backend = "cpu")
  h2 <- gp_loglik(dat$locs, dat$y, kernel = k, nugget = 0.01, method = "h2", gradient = TRUE,
                  backend = "cpu")
  expect_lt(abs(h2$loglik - dense$loglik), 1)
  expect_lt(abs(h2$loglik - dense$loglik), h2$error)
  expect_true(is.finite(h2$h2_bias) && h2$h2_bias_se >= 0)
  expect_true(all(is.finite(h2$gradient)))
  # a coarse H2 matrix: its effect on the log-likelihood is counted in `error`
  coarse <- gp_loglik(dat$locs, dat$y, kernel = k, nugget = 0.01, method = "h2",
                      control = gp_control(h2 = list(order = 4L, eta = 3), h2_check_rows = 2000L),
                      backend = "cpu")
  expect_lt(abs(coarse$loglik - dense$loglik), coarse$error)
  expect_gt(abs(coarse$h2_bias), 3 * coarse$h2_bias_se)
  # a coarser one is not positive definite at this nugget: a clear error, not a number
  expect_error(gp_loglik(dat$locs, dat$y, kernel = k, nugget = 0.01, method = "h2",
                         control = gp_control(h2 = list(order = 2L, eta = 3)), backend = "cpu"),
               "not positive definite.*more accurate H2 matrix")
  expect_equal(gpukernels:::gp_method("auto", 60000L, 2L, gp_control(), "cpu"), "h2")
  expect_equal(gpukernels:::gp_method("auto", 60000L, 3L, gp_control(), "gpu"), "tiled")
  # the CPU's measured choice is tested in test-gp-dense.R; a given dense_max is a fixed rule
  expect_equal(gpukernels:::gp_method("auto", 3000L, 2L, gp_control(dense_max = 4000), "cpu"),
               "dense")
})

test_that("GPU and CPU give the same likelihood and gradient", {
  skip_if_no_gpu()
  k <- gk_kernel("matern", range = 0.1, smoothness = 1.5)
  dat <- sim_data(3000, kernel = k, nugget = 0.01, seed = 12)
  # the neighbour search asks knn() for at most 64 candidates on both backends
  for (m in c(10L, 40L, 64L)) {
    expect_identical(gpukernels:::gp_neighbors(dat$locs, m, "gpu"),
                     gpukernels:::gp_neighbors(dat$locs, m, "cpu"), info = m)
  }
  km <- gk_kernel("matern", range = 0.1, smoothness = 1.2)
  cpu <- gp_loglik(dat$locs, dat$y, dat$X, kernel = km, nugget = 0.01, method = "tiled",
                   gradient = TRUE, smoothness_gradient = TRUE, backend = "cpu")
  gpu <- gp_loglik(dat$locs, dat$y, dat$X, kernel = km, nugget = 0.01, method = "tiled",
                   gradient = TRUE, smoothness_gradient = TRUE, backend = "gpu")
  expect_equal(gpu$loglik, cpu$loglik, tolerance = 1e-8)
  expect_equal(gpu$gradient, cpu$gradient, tolerance = 1e-6)
  for (method in c("tiled", "h2")) {
    cpu <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = 0.01, method = method,
                     gradient = TRUE, backend = "cpu")
    gpu <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = 0.01, method = method,
                     gradient = TRUE, backend = "gpu")
    expect_equal(gpu$loglik, cpu$loglik, tolerance = 1e-8, info = method)
    expect_equal(gpu$gradient, cpu$gradient, tolerance = 1e-6, info = method)
    # the H2 error check (on the GPU from the probes' device copy)
    expect_equal(gpu$h2_bias, cpu$h2_bias, tolerance = 1e-6, info = method)
    expect_equal(gpu$h2_bias_se, cpu$h2_bias_se, tolerance = 1e-6, info = method)
  }
})

test_that("the GPU solver (vectors on the device) matches block CG on the host", {
  skip_if_no_gpu()
  k <- gk_kernel("exponential", range = 0.1)
  cases <- list(c(n = 1003, method = "h2"), c(n = 2503, method = "h2"),
                c(n = 1003, method = "tiled"), c(n = 777, method = "tiled"))
  for (case in cases) {   # sizes not multiples of the solver's, the H2 or the reduction blocks
    n <- as.integer(case[["n"]])
    set.seed(n)
    locs <- matrix(runif(2 * n), ncol = 2)
    ctl <- gp_control(probes = 3L)
    prob <- gpukernels:::gp_problem(locs, rnorm(n), matrix(1, n, 1), case[["method"]], ctl, "gpu")
    pre <- gpukernels:::gp_preconditioner(prob, k, 0.01)
    op <- gpukernels:::gp_operator(prob, k, 0.01)
    expect_true(inherits(op$sigma, "h2matrix") || !is.null(op$tiled))   # the device path runs
    A <- function(V) pre$G(op$mult(pre$Gt(V)))
    # mean-zero columns of different scales, a zero column (never active), one column,
    # and 70 columns (the preconditioner's row-major products from 8 active columns,
    # in two passes of 64 columns)
    wide <- cbind(rnorm(n), 0,
                  matrix(rnorm(n * 68), n) * rep(10^seq(-2, 2, length.out = 68), each = n))
    for (B in list(cbind(rnorm(n), 0, matrix(rnorm(n * 9), n) * 10^(0:8 - 4)),
                   matrix(rnorm(n), n), wide)) {
      track <- if (ncol(B) > 1) c(1L, 4L) else 1L
      gpu <- gpukernels:::gp_cg_solver(prob, op, pre, A)(B, track = track, gt_b = TRUE, x = TRUE)
      host <- gpukernels:::gp_block_cg(A, B, ctl$tol, ctl$maxit, track = track)
      expect_true(gpu$converged)
      expect_lte(max(abs(gpu$iterations - host$iterations)), 1)
      if (ncol(B) > 1) expect_identical(gpu$iterations[2], 0L)
      expect_equal(gpu$x, host$x, tolerance = 1e-8, info = n)
      # G' x and G' b on the device: as the host's G' (the same sums in the same order)
      expect_equal(gpu$gt_x, pre$Gt(gpu$x), tolerance = 1e-14)
      expect_equal(gpu$gt_b, pre$Gt(B), tolerance = 1e-14)
      # the residuals reach the tolerance on the operator itself
      res <- sqrt(colSums((A(gpu$x) - B)^2)) / pmax(sqrt(colSums(B^2)), 1e-300)
      expect_true(all(res[colSums(B^2) > 0] < 10 * ctl$tol), info = n)
      used <- seq_len(min(gpu$iterations[1], host$iterations[1]))
      expect_equal(gpu$alpha[used, ], host$alpha[used, ], tolerance = 1e-8)
      expect_equal(gpu$beta[used, ], host$beta[used, ], tolerance = 1e-6)
      expect_true(all(is.na(gpu$alpha[-seq_len(max(gpu$iterations)), ])))
      if (ncol(B) > 1) {
        # right-hand sides kept on the GPU (as the probes are) solve as host ones
        on_gpu <- list(B[, 1, drop = FALSE], gpukernels:::gk_device_block(B[, -1, drop = FALSE]))
        dev <- gpukernels:::gp_cg_solver(prob, op, pre, A)(on_gpu, track = track, gt_b = TRUE, x = TRUE)
        expect_identical(dev$x, gpu$x)
        expect_identical(dev$gt_b, gpu$gt_b)
        # and the operator's sampled rows of them
        rows <- c(1L, 7L, n)
        expect_equal(op$mult_rows(on_gpu, rows), op$mult_rows(list(B), rows), tolerance = 1e-14)
        # a tolerance per column (as the probes get): the same stops as on the host
        tols <- rep(c(1e-8, 1e-3), length.out = ncol(B))
        dev_t <- gpukernels:::gp_cg_solver(prob, op, pre, A)(B, tol = tols)
        host_t <- gpukernels:::gp_block_cg(A, B, tols, ctl$maxit)
        expect_lte(max(abs(dev_t$iterations - host_t$iterations)), 1)
        expect_lt(max(dev_t$iterations[tols == 1e-3]), max(dev_t$iterations[tols == 1e-8]))
      }
    }
  }
  # an H2 operator less accurate than the nugget: the same clear error as on the host
  locs <- matrix(runif(3 * 3000), ncol = 3)
  km <- gk_kernel("matern", range = 0.2, smoothness = 1.5)
  expect_error(gp_loglik(locs, rnorm(3000), kernel = km, nugget = 1e-4, method = "h2",
                         backend = "gpu", control = gp_control(h2 = list(order = 1, eta = 1))),
               "not positive definite.*H2 approximation.*method = \"tiled\"")
})

test_that("the probes are Rademacher signs, repeatable from the seed", {
  for (dims in list(c(1L, 1L), c(17L, 3L), c(1000L, 50L))) {
    set.seed(5)
    z <- gpukernels:::gp_rademacher(dims[1], dims[2])
    expect_identical(dim(z), dims)
    expect_true(all(z %in% c(-1, 1)))
    set.seed(5)
    expect_identical(gpukernels:::gp_rademacher(dims[1], dims[2]), z)
  }
  # balanced (5 sigma), not constant across columns or rows, and the stream moves on
  expect_lt(abs(mean(z)), 5 / sqrt(length(z)))
  expect_gt(min(apply(z, 2, stats::sd)), 0.8)
  expect_false(identical(gpukernels:::gp_rademacher(1000, 50), z))
  expect_identical(dim(gpukernels:::gp_rademacher(0, 3)), c(0L, 3L))
})

test_that("block conjugate gradients solve each column, zero columns included", {
  set.seed(62)
  n <- 203
  M <- crossprod(matrix(rnorm(n * n), n)) / n + diag(n)
  B <- cbind(rnorm(n), 0, M %*% rnorm(n), rnorm(n) * 1e-3)   # a zero column stays inactive
  B_before <- B + 0
  cg <- gpukernels:::gp_block_cg(function(V) M %*% V, B, tol = 1e-10, maxit = 500,
                                 track = c(1L, 3L))
  expect_true(cg$converged)
  expect_equal(cg$x, solve(M, B), tolerance = 1e-8)
  expect_identical(cg$iterations[2], 0L)
  expect_true(all(cg$iterations[-2] > 0))
  # B is not modified (the engine updates its own copies in place)
  expect_identical(B, B_before)
  # the tracked coefficients are the CG ones: alpha > 0, beta > 0 while running
  used <- seq_len(cg$iterations[1])
  expect_true(all(cg$alpha[used, 1] > 0) && all(cg$beta[used, 1] > 0))
  expect_true(all(is.na(cg$alpha[-seq_len(max(cg$iterations)), ])))
  # a tolerance per column: each column stops at its own, the looser ones first
  B2 <- cbind(rnorm(n), rnorm(n), rnorm(n))
  tols <- c(1e-10, 1e-3, 1e-6)
  cg <- gpukernels:::gp_block_cg(function(V) M %*% V, B2, tol = tols, maxit = 500)
  res <- sqrt(colSums((M %*% cg$x - B2)^2)) / sqrt(colSums(B2^2))
  expect_true(all(res <= tols))
  expect_true(res[1] < 1e-3 * res[2])
  expect_lt(cg$iterations[2], cg$iterations[3])
  expect_lt(cg$iterations[3], cg$iterations[1])
})

test_that("the probes' looser tolerance leaves the likelihood and gradient as they were", {
  k <- gk_kernel("matern", range = 0.1, smoothness = 1.5)
  dat <- sim_data(1500, kernel = k, nugget = 0.01, seed = 21)
  fit <- function(pt) {
    gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = 0.01, method = "tiled",
              gradient = TRUE, control = gp_control(probe_tol = pt), backend = "cpu")
  }
  tight <- fit(1e-8)
  loose <- fit(gp_control()$probe_tol)
  expect_lte(loose$cg_iterations, tight$cg_iterations)   # the largest over the columns
  expect_lt(abs(loose$loglik - tight$loglik), 0.01 * tight$se)
  expect_true(all(abs(loose$gradient - tight$gradient) < 0.1 * pmax(tight$gradient_se, 1e-3)))
  expect_error(gp_control(probe_tol = 0), "probe_tol")
  expect_error(gp_control(probe_tol = NA), "probe_tol")
})

test_that("the GP's H2 defaults: eta = 2 in 2D unless eta or tol is given", {
  d <- gpukernels:::gp_h2_defaults
  expect_identical(d(2L, list()), list(precision = "double", eta = 2))
  expect_identical(d(2L, list(eta = 3)), list(precision = "double"))
  expect_identical(d(2L, list(tol = 1e-5)), list(precision = "double"))
  expect_identical(d(3L, list()), list(precision = "double"))
  # on a GPU the blocks are stored where they fit, unless storage or tol is given
  expect_identical(d(2L, list(), "gpu"),
                   list(precision = "double", eta = 2, storage = "stored_if_fits"))
  expect_identical(d(3L, list(storage = "auto"), "gpu"), list(precision = "double"))
  expect_identical(d(3L, list(tol = 1e-5), "gpu"), list(precision = "double"))
})

test_that("the neighbours: 60 for the iterative methods' preconditioner, 40 for vecchia", {
  expect_null(gp_control()$neighbors)
  set.seed(33)
  n <- 300
  locs <- matrix(runif(2 * n), ncol = 2)
  X <- matrix(1, n, 1)
  for (method in c("tiled", "h2", "vecchia")) {
    prob <- gpukernels:::gp_problem(locs, rnorm(n), X, method, gp_control(), "cpu")
    m <- if (method == "vecchia") 40L else 60L
    expect_identical(prob$control$neighbors, m, info = method)
    expect_identical(ncol(prob$nbr), m, info = method)
    # row i has its min(m, i - 1) nearest preceding points
    expect_identical(as.integer(rowSums(prob$nbr > 0)), pmin(m, seq_len(n) - 1L), info = method)
  }
  prob <- gpukernels:::gp_problem(locs, rnorm(n), X, "h2", gp_control(neighbors = 12), "cpu")
  expect_identical(ncol(prob$nbr), 12L)
  expect_error(gp_control(neighbors = NA), "neighbors")
})

test_that("the probes are kept on the GPU by the problem, not by a fit", {
  skip_if_no_gpu()
  k <- gk_kernel("exponential", range = 0.2)
  dat <- sim_data(700, kernel = k, nugget = 0.05, seed = 31)
  ctl <- gp_control(probes = 4L)
  prob <- gpukernels:::gp_problem(dat$locs, dat$y, dat$X, "tiled", ctl, "gpu")
  expect_identical(as.matrix(prob$probes_device), prob$probes)
  expect_null(gpukernels:::gp_problem(dat$locs, dat$y, dat$X, "tiled", ctl, "cpu")$probes_device)
  fit <- gp_fit(dat$locs, dat$y, kernel = "exponential", method = "tiled", control = ctl,
                backend = "gpu")
  expect_null(fit$prob$probes_device)
  pred <- predict(fit, dat$locs[1:5, , drop = FALSE], se.fit = TRUE)   # needs no probes
  expect_true(all(is.finite(pred$fit)) && all(pred$se.fit >= 0))
})

test_that("Lanczos quadrature: exact after n steps, NA for an indefinite operator", {
  set.seed(64)
  n <- 6
  Q <- qr.Q(qr(matrix(rnorm(n * n), n)))
  b <- rnorm(n)
  for (lam in list(c(0.5, 1, 2, 3, 4, 5), c(-0.3, 1, 2, 3, 4, 5))) {
    M <- Q %*% diag(lam) %*% t(Q)
    cg <- gpukernels:::gp_block_cg(function(V) M %*% V, matrix(b), tol = 1e-14, maxit = n,
                                   track = 1L)
    q <- gpukernels:::gp_lanczos_logquad(cg$alpha[, 1], cg$beta[, 1], cg$iterations[1], sum(b^2))
    if (all(lam > 0)) {
      expect_equal(q, sum(b * (Q %*% (log(lam) * crossprod(Q, b)))), tolerance = 1e-8)
    } else {
      expect_true(is.na(q))   # a Ritz value <= 0: the caller stops with the indefinite error
    }
  }
})

test_that("an operator that is not positive definite stops CG at once with a clear error", {
  set.seed(63)
  # an indefinite matrix: after negative curvature at iteration k, CG runs to iteration 5 k + 50 at most
  # (not maxit) and says why it stopped
  n <- 300
  Q <- qr.Q(qr(matrix(rnorm(n * n), n)))
  M <- Q %*% diag(c(runif(100, -2, -0.01), runif(n - 100, 0.01, 2))) %*% t(Q)
  B <- matrix(rnorm(n * 2), n)
  calls <- 0L
  expect_error(gpukernels:::gp_block_cg(function(V) { calls <<- calls + 1L; M %*% V }, B,
                                        tol = 1e-10, maxit = 5000),
               "not positive definite \\(negative curvature at iteration")
  expect_lt(calls, 5000)
  # a positive definite one converges as before (no false alarm)
  P <- crossprod(M) + diag(n)
  expect_true(gpukernels:::gp_block_cg(function(V) P %*% V, B, tol = 1e-10, maxit = 5000)$converged)
  # an H2 operator far less accurate than the nugget (3D, order 1): the error names
  # what to change, and comes before maxit iterations
  locs <- matrix(runif(3 * 3000), ncol = 3)
  k <- gk_kernel("matern", range = 0.2, smoothness = 1.5)
  t0 <- proc.time()[["elapsed"]]
  expect_error(gp_loglik(locs, rnorm(3000), kernel = k, nugget = 1e-4, method = "h2",
                         backend = "cpu", control = gp_control(h2 = list(order = 1, eta = 1))),
               "not positive definite.*H2 approximation.*method = \"tiled\"")
  expect_lt(proc.time()[["elapsed"]] - t0, 60)
})

test_that("on the GPU the h2 likelihood's neighbour search runs alongside the H2 build", {
  skip_if_no_gpu()
  k <- gk_kernel("matern", range = 0.1, smoothness = 1.5)
  dat <- sim_data(3001, kernel = k, nugget = 0.01, seed = 31)
  # Internal functions here: the problem without the overlap, evaluated as gp_loglik() does.
  ns <- asNamespace("gpukernels")
  prob <- ns$gp_problem(dat$locs, dat$y, dat$X, "h2", gp_control(), "gpu", 0.1)
  expect_null(prob$neighbors_job)
  ref <- ns$gp_evaluate(prob, k, 0.01, gradient = TRUE)
  got <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = 0.01, method = "h2",
                   gradient = TRUE, backend = "gpu")
  expect_equal(got$loglik, ref$loglik, tolerance = 1e-10)
  expect_equal(got$gradient, ref$gradient, tolerance = 1e-8)
  expect_equal(got$alpha, ref$alpha, tolerance = 1e-8)
  expect_true(got$timing[["neighbors"]] >= 0)
  # duplicated locations and no nugget: the same error, once the search is joined
  locs <- dat$locs
  locs[7, ] <- locs[3, ]
  expect_error(gp_loglik(locs, dat$y, dat$X, kernel = k, nugget = 0, method = "h2",
                         backend = "gpu"), "duplicated locations and the nugget is 0")
})
