# The exact (dense) likelihood on the GPU (src/gp/gp_dense_cuda.cu): the
# same numbers as the CPU's R code, which test-gp.R checks against the
# independent references of helper-gp.R.

dense_both <- function(locs, y, X, kernel, nugget, ...) {
  lapply(c(cpu = "cpu", gpu = "gpu"), function(b) {
    gp_loglik(locs, y, X, kernel = kernel, nugget = nugget, method = "dense", backend = b, ...)
  })
}

test_that("the GPU's dense likelihood, gradient and Fisher information equal the CPU's", {
  skip_if_no_gpu()
  cases <- list(
    list(n = 257, dim = 2, k = gk_kernel("exponential", range = 0.2, variance = 1.3)),
    list(n = 1000, dim = 2, k = gk_kernel("matern", range = 0.1, smoothness = 1.5)),
    list(n = 300, dim = 3, k = gk_kernel("matern", range = 0.3, smoothness = 0.8, variance = 2)),
    list(n = 123, dim = 1, k = gk_kernel("gaussian", range = 0.05, variance = 0.7)))
  for (case in cases) {
    set.seed(case$n)
    locs <- matrix(runif(case$n * case$dim), ncol = case$dim)
    X <- cbind(1, rnorm(case$n))
    y <- rnorm(case$n) + drop(X %*% c(0.5, -1))
    smooth <- case$k$name == "matern"
    got <- dense_both(locs, y, X, case$k, 0.03, gradient = TRUE, smoothness_gradient = smooth)
    info <- paste(case$k$name, case$n)
    expect_equal(got$gpu$loglik, got$cpu$loglik, tolerance = 1e-10, info = info)
    expect_equal(got$gpu$beta, got$cpu$beta, tolerance = 1e-9, info = info)
    expect_equal(got$gpu$gradient, got$cpu$gradient, tolerance = 1e-8, info = info)
    expect_equal(got$gpu$alpha, got$cpu$alpha, tolerance = 1e-8, info = info)
    # the Fisher information through R_t = L^-1 D_t L^-T on the GPU, through
    # Sigma^-1 D_t on the CPU
    fisher <- lapply(c(cpu = "cpu", gpu = "gpu"), function(b) {
      # Internal functions here: one method's evaluation, which gp_loglik() picks itself.
      gpukernels:::gp_evaluate(gpukernels:::gp_problem(locs, y, X, "dense", gp_control(), b),
                               case$k, 0.03, gradient = TRUE, fisher = TRUE, smoothness = smooth)
    })
    expect_equal(fisher$gpu$fisher, fisher$cpu$fisher, tolerance = 1e-8, info = info)
    expect_equal(fisher$gpu$gradient, got$cpu$gradient, tolerance = 1e-8, info = info)
  }
})

test_that("the GPU's dense likelihood matches the independent reference, any design", {
  skip_if_no_gpu()
  k <- gk_kernel("matern", range = 0.15, smoothness = 1.5, variance = 1.7)
  dat <- sim_data(401, kernel = k, nugget = 0.05, seed = 31)
  ref <- dense_reference(dat$locs, dat$y, dat$X, k, 0.05)
  got <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = 0.05, method = "dense",
                   backend = "gpu")
  expect_equal(got$loglik, ref$loglik, tolerance = 1e-8)
  expect_equal(unname(got$beta), unname(ref$beta), tolerance = 1e-8)
  # a zero mean (X with no columns), one and two locations
  for (n in c(1L, 2L, 40L)) {
    set.seed(n)
    locs <- matrix(runif(2 * n), ncol = 2)
    y <- rnorm(n)
    X0 <- matrix(0, n, 0)
    got <- dense_both(locs, y, X0, k, 0.1, gradient = TRUE)
    expect_equal(got$gpu$loglik, got$cpu$loglik, tolerance = 1e-10, info = n)
    expect_equal(got$gpu$gradient, got$cpu$gradient, tolerance = 1e-8, info = n)
    S <- kernel_matrix(locs, kernel = k, backend = "cpu") + diag(0.1, n)
    exact <- -0.5 * (n * log(2 * pi) + determinant(S)$modulus + sum(y * solve(S, y)))
    expect_equal(got$gpu$loglik, as.numeric(exact), tolerance = 1e-10, info = n)
  }
})

test_that("a fit and its kriging on the GPU's dense method equal the CPU's", {
  skip_if_no_gpu()
  k <- gk_kernel("exponential", range = 0.2, variance = 1.5)
  dat <- sim_data(500, kernel = k, nugget = 0.1, seed = 41)
  start <- list(variance = 1, range = 0.1, nugget = 0.2)
  fits <- lapply(c(cpu = "cpu", gpu = "gpu"), function(b) {
    gp_fit(dat$locs, dat$y, dat$X, kernel = "exponential", start = start, method = "dense",
           backend = b)
  })
  expect_equal(coef(fits$gpu), coef(fits$cpu), tolerance = 1e-5)
  expect_equal(vcov(fits$gpu), vcov(fits$cpu), tolerance = 1e-5)
  newlocs <- matrix(runif(2 * 3001), ncol = 2)   # more than one chunk of new points at small n
  newX <- cbind(1, newlocs[, 1])
  p <- lapply(fits, predict, newlocs = newlocs, newX = newX, se.fit = TRUE)
  expect_equal(p$gpu$fit, p$cpu$fit, tolerance = 1e-8)
  expect_equal(p$gpu$se.fit, p$cpu$se.fit, tolerance = 1e-8)
})

test_that("the GPU's dense method fails clearly", {
  skip_if_no_gpu()
  k <- gk_kernel("gaussian", range = 0.5)
  set.seed(5)
  locs <- matrix(runif(200), ncol = 2)
  locs[2, ] <- locs[1, ] + 1e-9              # numerically duplicated for a smooth kernel
  y <- rnorm(100)
  for (b in c("cpu", "gpu")) {
    expect_error(gp_loglik(locs, y, kernel = k, nugget = 0, method = "dense", backend = b),
                 "not positive definite .*larger nugget", info = b)
  }
  big <- matrix(runif(2 * 46341), ncol = 2)
  expect_error(gp_loglik(big, rnorm(46341), kernel = k, nugget = 0.1, method = "dense",
                         backend = "gpu"), "1 to 46340 locations.*tiled")
})

test_that("method = \"auto\" takes the dense method up to 20000 points on a GPU", {
  expect_equal(gpukernels:::gp_method("auto", 10000L, 2L, gp_control(), "gpu"), "dense")
  expect_equal(gpukernels:::gp_method("auto", 20001L, 3L, gp_control(), "gpu"), "tiled")
  expect_equal(gpukernels:::gp_method("auto", 20001L, 2L, gp_control(), "gpu"), "tiled")
  expect_equal(gpukernels:::gp_method("auto", 50000L, 2L, gp_control(), "gpu"), "h2")
  expect_equal(gpukernels:::gp_method("auto", 5000L, 2L, gp_control(dense_max = 100), "gpu"),
               "tiled")
  expect_error(gp_control(dense_max = -1), "dense_max")
  expect_error(gp_control(h2_min = -1), "h2_min")
})

# Runs `code` with the CPU timings of method = "auto" set to `times` (NULL:
# none, so they are measured), and puts the session's back.
with_auto_times <- function(times, code) {
  state <- gpukernels:::gk_state
  old <- state$gp_auto_times
  state$gp_auto_times <- times
  on.exit(state$gp_auto_times <- old)
  code
}

test_that("method = \"auto\" on the CPU goes by the measured times", {
  gp_method <- gpukernels:::gp_method
  # dense 0.1 s and h2 1.6 s at 800 points: equal at 3200 (n^3 against n)
  times <- list(h22 = list(n = 800L, dense = 0.1, h2 = 1.6),
                tiled3 = list(n = 800L, dense = 0.1, tiled = 0.4),   # equal at 3200 (n^2)
                tiled2 = list(n = 800L, dense = 0.1, tiled = 0.2))   # equal at 1600
  with_auto_times(times, {
    expect_equal(gp_method("auto", 800L, 2L, gp_control(), "cpu"), "dense")
    expect_equal(gp_method("auto", 3000L, 2L, gp_control(), "cpu"), "dense")
    expect_equal(gp_method("auto", 3400L, 2L, gp_control(), "cpu"), "h2")
    expect_equal(gp_method("auto", 3000L, 3L, gp_control(), "cpu"), "dense")
    expect_equal(gp_method("auto", 3400L, 3L, gp_control(), "cpu"), "tiled")
    expect_equal(gp_method("auto", 1e6, 2L, gp_control(), "cpu"), "h2")
    # h2_min given: tiled below it, by its own timings
    expect_equal(gp_method("auto", 1500L, 2L, gp_control(h2_min = 1e5), "cpu"), "dense")
    expect_equal(gp_method("auto", 1700L, 2L, gp_control(h2_min = 1e5), "cpu"), "tiled")
    expect_equal(gp_method("auto", 1e5, 2L, gp_control(h2_min = 1e5), "cpu"), "h2")
    # dense_max given: the fixed rule, h2 in 2D beyond it (h2_min 0 on the CPU)
    expect_equal(gp_method("auto", 4000L, 2L, gp_control(dense_max = 5000), "cpu"), "dense")
    expect_equal(gp_method("auto", 4000L, 2L, gp_control(dense_max = 1000), "cpu"), "h2")
    expect_equal(gp_method("auto", 4000L, 3L, gp_control(dense_max = 1000), "cpu"), "tiled")
    expect_equal(gp_method("auto", 4000L, 2L, gp_control(dense_max = 1000, h2_min = 5000),
                           "cpu"), "tiled")
    # an explicit method is kept
    expect_equal(gp_method("dense", 1e4, 2L, gp_control(), "cpu"), "dense")
  })
  # measured once (here: for 1-dimensional points), without touching the user's stream
  with_auto_times(NULL, {
    set.seed(4)
    before <- .Random.seed
    elapsed <- system.time(got <- gp_method("auto", 2000L, 1L, gp_control(), "cpu"))[["elapsed"]]
    expect_identical(.Random.seed, before)
    times <- gpukernels:::gk_state$gp_auto_times$tiled1
    expect_named(times, c("n", "dense", "tiled"))
    expect_true(all(unlist(times[-1]) > 0))
    expect_lt(elapsed, 30)
    r <- 2000 / times$n
    want <- if (times$dense * r^3 <= times$tiled * r^2) "dense" else "tiled"
    expect_equal(got, want)
    # the second time from the stored timings
    expect_lt(system.time(gp_method("auto", 2000L, 1L, gp_control(), "cpu"))[["elapsed"]], 0.05)
  })
})
