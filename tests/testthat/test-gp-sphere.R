# Locations on the sphere (coords = "lonlat"): chordal distances from the
# haversine formula, independently of the package's 3D conversion.

chordal_distances <- function(a, b, radius) {
  rad <- pi / 180
  dlat <- outer(a[, 2], b[, 2], "-") * rad
  dlon <- outer(a[, 1], b[, 1], "-") * rad
  h <- sin(dlat / 2)^2 + outer(cos(a[, 2] * rad), cos(b[, 2] * rad)) * sin(dlon / 2)^2
  2 * radius * sqrt(pmin(h, 1))   # 2R sin(theta / 2), theta the central angle
}

# the package's Matern 3/2 (?gk_kernel: distances in units of the range)
matern32 <- function(d, k) k$variance * (1 + d / k$range) * exp(-d / k$range)

lonlat_data <- function(n, seed) {
  set.seed(seed)
  list(locs = cbind(runif(n, -180, 180), asin(runif(n, -1, 1)) * 180 / pi))
}

test_that("lon/lat likelihoods use chordal distances on every method and backend", {
  k <- gk_kernel("matern", range = 2000, smoothness = 1.5, variance = 1.2)
  dat <- lonlat_data(700, 71)
  D <- chordal_distances(dat$locs, dat$locs, 6371)
  S <- matern32(D, k) + diag(0.05, 700)
  set.seed(72)
  y <- drop(crossprod(chol(S), rnorm(700))) + 2
  Si <- solve(S)
  beta <- sum(Si %*% y) / sum(Si)
  r <- y - beta
  ref <- -0.5 * (700 * log(2 * pi) + determinant(S)$modulus + sum(r * (Si %*% r)))
  for (backend in test_backends()) for (method in c("dense", "tiled", "h2")) {
    got <- gp_loglik(dat$locs, y, kernel = k, nugget = 0.05, method = method,
                     coords = "lonlat", backend = backend)
    tol <- if (method == "dense") 1e-8 else got$error
    expect_lt(abs(got$loglik - as.numeric(ref)), max(tol, 1e-8 * abs(ref)))
  }
  # the radius is the unit of the range
  got <- gp_loglik(dat$locs, y, kernel = gk_kernel("matern", range = 2000 / 6371,
                                                   smoothness = 1.5, variance = 1.2),
                   nugget = 0.05, method = "dense", coords = "lonlat", radius = 1,
                   backend = "cpu")
  expect_equal(got$loglik, as.numeric(ref), tolerance = 1e-9)
})

test_that("a lon/lat fit predicts and simulates at new lon/lat locations", {
  k <- gk_kernel("matern", range = 1500, smoothness = 1.5, variance = 1)
  dat <- lonlat_data(300, 73)
  D <- chordal_distances(dat$locs, dat$locs, 6371)
  set.seed(74)
  y <- drop(crossprod(chol(matern32(D, k) + diag(0.02, 300)), rnorm(300)))
  fit <- gp_fit(dat$locs, y, kernel = "matern", smoothness = 1.5, coords = "lonlat",
                fixed = list(variance = 1, range = 1500, nugget = 0.02), backend = "cpu")
  new <- rbind(c(179.5, 10), c(-179.5, 10), c(0, 89.9), c(0, -89.9), c(360, 0))
  S <- matern32(D, k) + diag(0.02, 300)
  C <- matern32(chordal_distances(dat$locs, new, 6371), k)
  Si <- solve(S)
  beta <- sum(Si %*% y) / sum(Si)
  mean_ref <- beta + drop(t(C) %*% Si %*% (y - beta))
  u <- 1 - colSums(Si %*% C)
  var_ref <- 1 - colSums(C * (Si %*% C)) + u^2 / sum(Si)
  for (se_method in c("exact", "vecchia")) {
    p <- predict(fit, new, se.fit = TRUE, se.method = se_method, neighbors = 64)
    expect_equal(p$fit, mean_ref, tolerance = 1e-8, info = se_method)
    if (se_method == "exact") expect_equal(p$se.fit, sqrt(var_ref), tolerance = 1e-8)
    else expect_true(all(p$se.fit >= sqrt(var_ref) * (1 - 1e-9)))
  }
  # across the date line: 1 degree of longitude apart at 10 degrees north
  expect_equal(p$fit[1], p$fit[2], tolerance = 0.05)
  draws <- gp_simulate(fit, new, nsim = 3)
  expect_equal(dim(draws), c(5, 3))
  expect_error(predict(fit, cbind(new, 1)), "2 columns \\(longitude, latitude")
  expect_error(predict(fit, rbind(new, c(0, 91))), "latitudes outside")
})

test_that("bad coordinates and radii are clear errors", {
  dat <- lonlat_data(20, 75)
  k <- gk_kernel("exponential", range = 500)
  expect_error(gp_loglik(dat$locs, rnorm(20), kernel = k, nugget = 0.1, coords = "sphere"),
               "coords")
  expect_error(gp_loglik(dat$locs, rnorm(20), kernel = k, nugget = 0.1, coords = "lonlat",
                         radius = -1), "radius")
  expect_error(gp_loglik(cbind(dat$locs, 1), rnorm(20), kernel = k, nugget = 0.1,
                         coords = "lonlat"), "2 columns")
  bad <- dat$locs
  bad[3, 1] <- 400
  expect_error(gp_loglik(bad, rnorm(20), kernel = k, nugget = 0.1, coords = "lonlat"),
               "longitudes outside")
  expect_error(gp_simulate(bad, k, coords = "lonlat"), "longitudes outside")
  sim <- gp_simulate(dat$locs, k, nugget = 0.1, coords = "lonlat", nsim = 2)
  expect_equal(dim(sim), c(20, 2))
})
