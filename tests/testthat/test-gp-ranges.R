# Ranges per coordinate or per group of coordinates (`ranges =`): the
# likelihood against the independent dense reference (helper-gp.R), its
# gradient in each group's log range against central differences, and fits
# that recover simulated ranges.

ranges_data <- function(n, ranges, seed, nugget = 0.1, scale = rep(1, length(ranges))) {
  set.seed(seed)
  locs <- sweep(matrix(runif(n * length(ranges)), ncol = length(ranges)), 2, scale, "*")
  k <- gk_kernel("matern", range = ranges, smoothness = 1.5, variance = 1.3)
  y <- 0.5 + gp_simulate(locs, k, nugget = nugget, backend = "cpu")
  list(locs = locs, y = y, X = matrix(1, n, 1), kernel = k, nugget = nugget)
}

# the log-likelihood at log ranges `lr` (one per group) by the reference
group_loglik <- function(dat, groups, lr) {
  k <- dat$kernel
  k$range <- exp(lr)[groups]
  dense_reference(dat$locs, dat$y, dat$X, k, dat$nugget)$loglik
}

test_that("dense likelihoods and group gradients match the reference", {
  cases <- list(list(n = 157, ranges = c(0.2, 0.5), groups = c(1, 2)),
                list(n = 211, ranges = c(0.3, 0.3, 2), groups = c(1, 1, 2)),
                list(n = 64, ranges = c(0.4, 0.2, 0.7), groups = "per_dimension"))
  for (case in cases) {
    dat <- ranges_data(case$n, case$ranges, seed = case$n)
    groups <- gpukernels:::gp_range_groups(case$groups, length(case$ranges))
    lr <- log(vapply(split(case$ranges, groups), `[`, 0, 1))
    ref <- group_loglik(dat, groups, lr)
    fd <- central_gradient(function(p) group_loglik(dat, groups, p), lr, 1e-5)
    for (backend in test_backends()) {
      got <- gp_loglik(dat$locs, dat$y, dat$X, kernel = dat$kernel, nugget = dat$nugget,
                       method = "dense", gradient = TRUE, ranges = case$groups,
                       backend = backend)
      expect_lt(abs(got$loglik - ref), 1e-8 * abs(ref))
      nm <- paste0("log_range", seq_along(lr))
      expect_named(got$gradient, c("log_variance", nm, "log_nugget"))
      expect_lt(max(abs(got$gradient[nm] - fd)), 1e-6 * max(1, abs(fd)))
    }
  }
})

test_that("one group over several ranges is the derivative in their common scale", {
  dat <- ranges_data(143, c(0.2, 0.6), seed = 3)
  common <- function(p) {
    k <- dat$kernel
    k$range <- c(0.2, 0.6) * exp(p)
    dense_reference(dat$locs, dat$y, dat$X, k, dat$nugget)$loglik
  }
  fd <- central_gradient(common, 0, 1e-5)
  got <- gp_loglik(dat$locs, dat$y, dat$X, kernel = dat$kernel, nugget = dat$nugget,
                   method = "dense", gradient = TRUE, ranges = "isotropic", backend = "cpu")
  expect_lt(abs(got$gradient[["log_range"]] - fd), 1e-6 * max(1, abs(fd)))
  # without `ranges`, a kernel with a range per dimension gives one per dimension
  got <- gp_loglik(dat$locs, dat$y, dat$X, kernel = dat$kernel, nugget = dat$nugget,
                   method = "dense", gradient = TRUE, backend = "cpu")
  expect_named(got$gradient, c("log_variance", "log_range1", "log_range2", "log_nugget"))
})

test_that("the Vecchia gradient in groups of ranges is that of its likelihood", {
  dat <- ranges_data(230, c(0.2, 2, 0.3), seed = 5, scale = c(1, 10, 1))
  groups <- c(1, 2, 1)
  ctl <- gp_control(neighbors = 12)
  vecchia <- function(lr) {
    k <- dat$kernel
    k$range <- exp(lr)[groups]
    gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = dat$nugget, method = "vecchia",
              control = ctl, backend = "cpu")$loglik
  }
  lr <- log(c(0.25, 2))
  k <- dat$kernel
  k$range <- exp(lr)[groups]
  for (backend in test_backends()) {
    got <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = dat$nugget, method = "vecchia",
                     gradient = TRUE, control = ctl, ranges = groups, backend = backend)
    fd <- central_gradient(vecchia, lr, 1e-5)
    expect_lt(max(abs(got$gradient[c("log_range1", "log_range2")] - fd)), 1e-6 * max(abs(fd)))
  }
})

test_that("iterative gradients in groups of ranges agree with dense within their errors", {
  dat <- ranges_data(600, c(0.15, 0.5), seed = 7)
  dense <- gp_loglik(dat$locs, dat$y, dat$X, kernel = dat$kernel, nugget = dat$nugget,
                     method = "dense", gradient = TRUE, backend = "cpu")
  for (backend in test_backends()) for (method in c("tiled", "h2")) {
    got <- gp_loglik(dat$locs, dat$y, dat$X, kernel = dat$kernel, nugget = dat$nugget,
                     method = method, gradient = TRUE, ranges = "per_dimension",
                     backend = backend)
    expect_lt(abs(got$loglik - dense$loglik), got$error + 1e-6)
    expect_true(all(abs(got$gradient - dense$gradient) <= 5 * got$gradient_se + 1e-3),
                label = paste(method, backend))
  }
})

test_that("fits recover per-dimension and space-time ranges within their errors", {
  # a range per dimension
  dat <- ranges_data(700, c(0.08, 0.3), seed = 11, nugget = 0.05)
  fit <- gp_fit(dat$locs, dat$y, ranges = "per_dimension", method = "dense", backend = "cpu")
  expect_named(coef(fit), c("variance", "range1", "range2", "nugget"))
  se <- sqrt(diag(vcov(fit)))[c("log_range1", "log_range2")]
  z <- (log(coef(fit)[c("range1", "range2")]) - log(c(0.08, 0.3))) / se
  expect_true(all(abs(z) < 4), label = paste(signif(z, 3), collapse = " "))
  expect_equal(fit$kernel$range, unname(coef(fit)[c("range1", "range2")]))
  # space (2 coordinates) and time (in other units): two groups
  dat <- ranges_data(600, c(0.2, 0.2, 5), seed = 12, nugget = 0.05, scale = c(1, 1, 50))
  fit <- gp_fit(dat$locs, dat$y, ranges = c(1, 1, 2), method = "dense", backend = "cpu")
  se <- sqrt(diag(vcov(fit)))[c("log_range1", "log_range2")]
  z <- (log(coef(fit)[c("range1", "range2")]) - log(c(0.2, 5))) / se
  expect_true(all(abs(z) < 4), label = paste(signif(z, 3), collapse = " "))
  expect_equal(fit$kernel$range, unname(coef(fit)[c("range1", "range1", "range2")]))
  # the Vecchia fit lands near the dense one
  vfit <- gp_fit(dat$locs, dat$y, ranges = c(1, 1, 2), method = "vecchia",
                 control = gp_control(neighbors = 30), backend = "cpu")
  expect_true(all(abs(log(coef(vfit)) - log(coef(fit))) < 3 * sqrt(diag(vcov(fit)))))
  # kriging with the fitted ranges is the dense reference's
  new <- cbind(runif(7), runif(7), runif(7, 0, 50))
  got <- predict(fit, new)
  k <- fit$kernel
  ref <- dense_reference(dat$locs, dat$y, dat$X, k, fit$nugget)
  scaled <- function(p) sweep(p, 2, k$range, "/")
  d <- sqrt(pmax(outer(rowSums(scaled(new)^2), rowSums(scaled(dat$locs)^2), "+") -
                 2 * scaled(new) %*% t(scaled(dat$locs)), 0))
  cross <- k$variance * (1 + d) * exp(-d)      # Matern 3/2 in the package's scale
  expect_equal(unname(drop(got)), drop(ref$beta + cross %*% (ref$Si %*% ref$r)),
               tolerance = 1e-8)
})

test_that("fixed values, bounds and starts name the groups' ranges", {
  dat <- ranges_data(200, c(0.2, 0.5), seed = 13)
  fit <- gp_fit(dat$locs, dat$y, ranges = "per_dimension", method = "dense", backend = "cpu",
                fixed = list(range2 = 0.5), start = list(variance = 1, range = c(0.3, 0.5),
                                                         nugget = 0.1))
  expect_equal(coef(fit)[["range2"]], 0.5)
  expect_equal(unname(vcov(fit)["log_range2", ]), rep(0, 4))
  # "range" bounds every group
  fit <- suppressWarnings(gp_fit(dat$locs, dat$y, ranges = "per_dimension", method = "dense",
                                 backend = "cpu", upper = list(range = 0.1)))
  expect_true("range2" %in% names(fit$at_bound))
  expect_true(all(coef(fit)[c("range1", "range2")] <= 0.1 + 1e-12))
  # a start kernel gives each group the mean of its ranges
  expect_equal(gpukernels:::gp_kernel_start(gk_kernel("matern", range = c(1, 3, 5), smoothness = 1.5),
                                            c(1, 1, 2))$range, c(2, 5))
})

test_that("bad range groups are clear errors", {
  dat <- ranges_data(30, c(0.2, 0.5), seed = 17)
  fit_with <- function(...) gp_fit(dat$locs, dat$y, method = "dense", backend = "cpu", ...)
  expect_error(fit_with(ranges = c(1, 2, 3)), "one group number per column")
  expect_error(fit_with(ranges = c(1, 3)), "without gaps")
  expect_error(fit_with(ranges = c(1, 1.5)), "one group number per column")
  expect_error(fit_with(ranges = c(1, NA)), "one group number per column")
  expect_error(fit_with(ranges = "sideways"), "ranges")
  expect_error(fit_with(ranges = "per_dimension", fixed = list(range3 = 1)), "range3")
  expect_error(gp_fit(cbind(runif(30, -10, 10), runif(30, -10, 10)), dat$y,
                      coords = "lonlat", ranges = "per_dimension", backend = "cpu"),
               "coords = \"euclidean\"")
  expect_error(gp_loglik(dat$locs, dat$y, kernel = dat$kernel, nugget = 0.1, ranges = c(1, 0),
                         backend = "cpu"), "one group number per column")
})

test_that("neighbours are searched in the coordinates scaled by the ranges", {
  # a range ten times longer along the second coordinate: raw nearest points
  # are not the most correlated ones
  dat <- ranges_data(900, c(0.05, 0.5), seed = 19, scale = c(1, 5))
  k <- dat$kernel
  scaled <- gpukernels:::gp_neighbor_points(dat$locs, k$range)
  expect_equal(scaled, sweep(dat$locs, 2, c(0.05, 0.5), "/"))
  expect_identical(gpukernels:::gp_neighbor_points(dat$locs, c(0.3, 0.3)), dat$locs)
  # the Vecchia likelihood stays close to the exact one (14 nats off with
  # neighbours in the raw coordinates)
  dense <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = dat$nugget, method = "dense",
                     backend = "cpu")$loglik
  vecchia <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = dat$nugget,
                       method = "vecchia", control = gp_control(neighbors = 30),
                       backend = "cpu")$loglik
  expect_lt(abs(vecchia - dense), 1)
  # kriging variances from 60 neighbours bound the exact ones closely
  fit <- gp_fit(dat$locs, dat$y, ranges = "per_dimension", method = "dense", backend = "cpu")
  new <- cbind(runif(25), runif(25, 0, 5))
  near <- predict(fit, new, se.fit = TRUE, se.method = "vecchia")$se.fit
  exact <- predict(fit, new, se.fit = TRUE, se.method = "exact")$se.fit
  expect_true(all(near >= exact * (1 - 1e-8)))
  expect_lt(max(near / exact), 1.02)
})
