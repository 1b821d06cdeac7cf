# Kriging standard errors from the nearest observations (se.method =
# "vecchia") and conditional simulation, against dense references in R.

# A fit at given parameters (no search), on `backend`.
fit_at <- function(dat, kernel, nugget, backend = "cpu", method = "dense") {
  gp_fit(dat$locs, dat$y, dat$X, kernel = kernel$name, smoothness = kernel$smoothness,
         fixed = list(variance = kernel$variance, range = kernel$range, nugget = nugget),
         method = method, backend = backend)
}

# Simple-kriging variances of the latent process at `new` from the
# observations `use[[j]]` (all when NULL), plus the exact mean coefficients'
# term, by dense solves in R.
kriging_var_ref <- function(dat, fit, new, newX, use = NULL) {
  kk <- fit$kernel
  ref <- dense_reference(dat$locs, dat$y, dat$X, kk, fit$nugget)
  C <- kernel_matrix(dat$locs, new, kk, backend = "cpu")
  vb <- solve(t(dat$X) %*% ref$Si %*% dat$X)
  vapply(seq_len(nrow(new)), function(j) {
    idx <- if (is.null(use)) seq_len(nrow(dat$locs)) else use[[j]]
    c0 <- C[idx, j]
    w <- solve(ref$S[idx, idx, drop = FALSE], c0)
    u <- newX[j, ] - drop(crossprod(dat$X, ref$Si %*% C[, j]))
    kk$variance - sum(c0 * w) + sum(u * (vb %*% u))
  }, 0)
}

test_that("Vecchia kriging variances are those of the nearest observations", {
  k <- gk_kernel("matern", range = 0.15, smoothness = 1.5, variance = 2)
  dat <- sim_data(211, kernel = k, nugget = 0.05, seed = 41)
  fit <- fit_at(dat, k, 0.05)
  new <- matrix(runif(2 * 23), ncol = 2)
  new[1, ] <- dat$locs[7, ]                        # at an observation
  newX <- cbind(1, new[, 1])
  for (m in c(1L, 17L)) {
    p <- predict(fit, new, newX = newX, se.fit = TRUE, se.method = "vecchia", neighbors = m)
    d2 <- outer(rowSums(new^2), rowSums(dat$locs^2), "+") - 2 * new %*% t(dat$locs)
    use <- lapply(seq_len(nrow(new)), function(j) order(d2[j, ])[seq_len(m)])
    expect_equal(p$se.fit, sqrt(kriging_var_ref(dat, fit, new, newX, use)), tolerance = 1e-9,
                 info = m)
    expect_match(p$se.method, sprintf("vecchia \\(%d neighbours\\)", m))
  }
  # the exact standard errors are never larger (conditioning on fewer points)
  exact <- predict(fit, new, newX = newX, se.fit = TRUE, se.method = "exact")
  expect_equal(exact$se.fit, sqrt(kriging_var_ref(dat, fit, new, newX)), tolerance = 1e-9)
  p <- predict(fit, new, newX = newX, se.fit = TRUE, se.method = "vecchia", neighbors = 30)
  expect_true(all(p$se.fit >= exact$se.fit * (1 - 1e-9)))
  expect_equal(p$fit, exact$fit, tolerance = 1e-12)   # the mean is exact either way
})

test_that("with every observation as a neighbour, Vecchia kriging is exact", {
  k <- gk_kernel("exponential", range = 0.3, variance = 0.7)
  dat <- sim_data(45, kernel = k, nugget = 0.1, seed = 42)
  fit <- fit_at(dat, k, 0.1)
  new <- matrix(runif(2 * 9), ncol = 2)
  newX <- cbind(1, new[, 1])
  exact <- predict(fit, new, newX = newX, se.fit = TRUE, se.method = "exact")
  p <- predict(fit, new, newX = newX, se.fit = TRUE, se.method = "vecchia", neighbors = 64,
               se.check = 4)
  expect_equal(p$se.fit, exact$se.fit, tolerance = 1e-9)
  expect_equal(nrow(p$check), 4)
  expect_equal(p$check$exact, exact$se.fit[p$check$index], tolerance = 1e-9)
  expect_equal(p$check$vecchia, p$se.fit[p$check$index])
  one <- predict(fit, new[3, , drop = FALSE], newX = newX[3, , drop = FALSE], se.fit = TRUE,
                 se.method = "vecchia")
  expect_equal(one$se.fit, exact$se.fit[3], tolerance = 1e-9)
})

test_that("Vecchia kriging is equivariant to the data's scale", {
  k <- gk_kernel("matern", range = 0.2, smoothness = 2.5, variance = 1)
  dat <- sim_data(120, kernel = k, nugget = 0.02, seed = 43)
  new <- matrix(runif(2 * 11), ncol = 2)
  newX <- cbind(1, new[, 1])
  p0 <- predict(fit_at(dat, k, 0.02), new, newX = newX, se.fit = TRUE, se.method = "vecchia",
                neighbors = 20)
  for (c in c(1e-150, 1e150)) {
    dc <- dat
    dc$y <- dat$y * c
    kc <- gk_kernel("matern", range = 0.2, smoothness = 2.5, variance = c^2)
    p <- predict(fit_at(dc, kc, 0.02 * c^2), new, newX = newX, se.fit = TRUE,
                 se.method = "vecchia", neighbors = 20)
    expect_equal(p$se.fit / c, p0$se.fit, tolerance = 1e-8, info = c)
  }
})

test_that("the GPU's Vecchia kriging variances equal the CPU's", {
  skip_if_no_gpu()
  k <- gk_kernel("matern", range = 0.1, smoothness = 0.7, variance = 1.3)
  dat <- sim_data(1037, dim = 3, kernel = k, nugget = 0.03, seed = 44)
  new <- matrix(runif(3 * 777), ncol = 3)
  newX <- cbind(1, new[, 1])
  fits <- list(cpu = fit_at(dat, k, 0.03), gpu = fit_at(dat, k, 0.03, backend = "gpu"))
  p <- lapply(fits, predict, newlocs = new, newX = newX, se.fit = TRUE, se.method = "vecchia",
              neighbors = 64)
  expect_equal(p$gpu$se.fit, p$cpu$se.fit, tolerance = 1e-9)
  d2 <- outer(rowSums(new[1:5, ]^2), rowSums(dat$locs^2), "+") - 2 * new[1:5, ] %*% t(dat$locs)
  use <- lapply(1:5, function(j) order(d2[j, ])[1:64])
  expect_equal(p$gpu$se.fit[1:5],
               sqrt(kriging_var_ref(dat, fits$cpu, new[1:5, ], newX[1:5, ], use)),
               tolerance = 1e-9)
})

test_that("conditional simulation has the kriging mean and covariance", {
  k <- gk_kernel("matern", range = 0.25, smoothness = 1.5, variance = 1)
  dat <- sim_data(150, kernel = k, nugget = 0.05, seed = 45)
  fit <- fit_at(dat, k, 0.05)
  new <- matrix(runif(2 * 13), ncol = 2)
  new[2, ] <- dat$locs[3, ]
  newX <- cbind(1, new[, 1])
  ref <- dense_reference(dat$locs, dat$y, dat$X, fit$kernel, fit$nugget)
  C <- kernel_matrix(dat$locs, new, fit$kernel, backend = "cpu")
  mean_ref <- drop(newX %*% ref$beta + t(C) %*% ref$Si %*% ref$r)
  V <- kernel_matrix(new, kernel = fit$kernel, backend = "cpu") - t(C) %*% ref$Si %*% C
  nsim <- 6000
  for (method in c("exact", "vecchia")) {
    set.seed(46)
    draws <- gp_simulate(fit, new, nsim = nsim, method = method, newX = newX)
    expect_equal(dim(draws), c(13, nsim))
    # sampling error of a mean: sd / sqrt(nsim); of a covariance: about
    # sqrt((V_ii V_jj + V_ij^2) / nsim); 5 of them
    expect_true(all(abs(rowMeans(draws) - mean_ref) < 5 * sqrt(diag(V) / nsim) + 1e-12),
                info = method)
    se_cov <- sqrt((outer(diag(V), diag(V)) + V^2) / nsim)
    expect_true(all(abs(cov(t(draws)) - V) < 5 * se_cov + 1e-12), info = method)
  }
  expect_length(gp_simulate(fit, new[1:2, ], newX = newX[1:2, ]), 2)
})

test_that("conditional simulation and Vecchia predictions reject bad input", {
  k <- gk_kernel("exponential", range = 0.3)
  dat <- sim_data(40, kernel = k, nugget = 0.1, seed = 47)
  fit <- fit_at(dat, k, 0.1)
  new <- matrix(runif(6), ncol = 2)
  expect_error(gp_simulate(fit), "`newlocs` is missing")
  expect_error(gp_simulate(fit, new[, 1]), "`newlocs` has 1 columns but the fit has 2")
  expect_error(gp_simulate(fit, new, nugget = 1), "fit's nugget")
  expect_error(gp_simulate(fit, new, newX = cbind(1, new[, 1]), nsim = 0), "nsim")
  expect_error(gp_simulate(fit, new, newX = cbind(1, new[, 1]), neighbors = 65), "neighbors")
  expect_error(gp_simulate(fit, rbind(new, NA), newX = cbind(1, c(new[, 1], 0))), "newlocs")
  expect_error(gp_simulate(fit, new), "newX")
  newX <- cbind(1, new[, 1])
  expect_error(predict(fit, new, newX = newX, se.fit = TRUE, se.method = "nearest"), "se.method")
  expect_error(predict(fit, new, newX = newX, se.fit = TRUE, neighbors = 0), "neighbors")
  expect_error(predict(fit, new, newX = newX, se.fit = TRUE, se.check = -1), "se.check")
  expect_error(predict(fit, new, newX = newX[, 1]), "`newX` must be a finite numeric 3 x 2")
  expect_error(predict(fit, new, newX = newX * NA), "`newX` must be a finite")
  expect_error(gp_simulate(matrix(runif(4), 2), gk_kernel("gaussian"), newX = 1), "unused")
})
