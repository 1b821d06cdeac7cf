# Great-circle distance on the sphere (distance = "great_circle", the
# exponential_great_circle kernel): references from the haversine formula on
# the longitudes and latitudes in degrees, independently of the package's 3D
# conversion and of its chord-to-arc formula.

great_circle_distances <- function(a, b, radius) {
  rad <- pi / 180
  dlat <- outer(a[, 2], b[, 2], "-") * rad
  dlon <- outer(a[, 1], b[, 1], "-") * rad
  h <- sin(dlat / 2)^2 + outer(cos(a[, 2] * rad), cos(b[, 2] * rad)) * sin(dlon / 2)^2
  2 * radius * asin(sqrt(pmin(h, 1)))   # R theta, theta the central angle
}

sphere_data <- function(n, seed) {
  set.seed(seed)
  cbind(runif(n, -180, 180), asin(runif(n, -1, 1)) * 180 / pi)
}

# the 3D points the package's engines see, made here independently
sphere_points <- function(ll, radius) {
  lon <- ll[, 1] * pi / 180
  lat <- ll[, 2] * pi / 180
  radius * cbind(cos(lat) * cos(lon), cos(lat) * sin(lon), sin(lat))
}

gc_reference <- function(ll, y, range, variance, nugget, radius = 6371) {
  n <- nrow(ll)
  S <- variance * exp(-great_circle_distances(ll, ll, radius) / range) + diag(nugget, n)
  Si <- solve(S)
  beta <- sum(Si %*% y) / sum(Si)
  r <- y - beta
  ll_value <- -0.5 * (n * log(2 * pi) + determinant(S)$modulus + sum(r * (Si %*% r)))
  list(loglik = as.numeric(ll_value), S = S, Si = Si, beta = beta)
}

test_that("the exponential_great_circle kernel is exp(-great-circle distance / range)", {
  radius <- 6371
  for (backend in test_backends()) for (n in c(1L, 7L, 301L)) {
    ll <- sphere_data(n, 80 + n)
    ll2 <- sphere_data(n + 2L, 90 + n)
    # antipodes of some points: the chord is the diameter
    ll2[1, ] <- c(ll[1, 1] + 180, -ll[1, 2])
    x <- sphere_points(ll, radius)
    y <- sphere_points(ll2, radius)
    k <- gk_kernel("exponential_great_circle", range = 1500, radius = radius, variance = 1.7)
    ref <- 1.7 * exp(-great_circle_distances(ll, ll2, radius) / 1500)
    info <- paste(backend, n)
    expect_lt(max(abs(kernel_matrix(x, y, k, backend = backend) - ref)), 1e-12, label = info)
    b <- matrix(rnorm((n + 2L) * 2), n + 2L)
    expect_lt(rel_err(kernel_matvec(x, y, b, k, backend = backend), ref %*% b), 1e-12,
              label = info)
    expect_lt(rel_err(kernel_reduce(x, y, kernel = k, reduction = "max", backend = backend),
                      apply(ref, 1, max)), 1e-12, label = info)
    single <- kernel_matvec(x, y, b, k, precision = "single", backend = backend)
    expect_lt(rel_err(single, ref %*% b), 1e-4, label = info)
    # transposed (axis = 2)
    expect_lt(rel_err(kernel_reduce(x, y, matrix(b[seq_len(n), 1]), k, axis = 2,
                                    backend = backend)[, 1], drop(crossprod(ref, b[seq_len(n), 1]))),
              1e-12, label = info)
  }
  # scaled chordal distances in, as every kernel takes them
  k <- gk_kernel("exponential_great_circle", range = 2, radius = 3)
  d <- c(0, 0.1, 1, 2.999, 3, 4)   # 2 rho = 3: beyond the diameter counts as antipodal
  g <- 2 * 1.5 * asin(pmin(1, d / 3))
  expect_equal(kernel_eval(k, d), exp(-g), tolerance = 1e-14)
})

test_that("the great-circle range derivative is s2 g exp(-g)", {
  ll <- sphere_data(53, 81)
  x <- sphere_points(ll, 6371)
  k <- gk_kernel("exponential_great_circle", range = 900, radius = 6371, variance = 2)
  dk <- gpukernels:::gp_dlogrange_kernel(k)
  g <- great_circle_distances(ll, ll, 6371) / 900
  for (backend in test_backends()) {
    expect_lt(max(abs(kernel_matrix(x, kernel = dk, backend = backend) - 2 * g * exp(-g))), 1e-12)
  }
  # against a central difference of the kernel in log(range)
  h <- 1e-5
  up <- kernel_matrix(x, kernel = gk_kernel("exponential_great_circle", range = 900 * exp(h),
                                            radius = 6371, variance = 2), backend = "cpu")
  down <- kernel_matrix(x, kernel = gk_kernel("exponential_great_circle", range = 900 * exp(-h),
                                              radius = 6371, variance = 2), backend = "cpu")
  expect_lt(max(abs((up - down) / (2 * h) - kernel_matrix(x, kernel = dk, backend = "cpu"))), 1e-8)
})

test_that("the dense great-circle likelihood matches the haversine reference", {
  k <- gk_kernel("exponential", range = 1200, variance = 1.3)
  for (n in c(1L, 2L, 7L, 151L)) {
    ll <- sphere_data(n, 82 + n)
    set.seed(n)
    y <- rnorm(n) + 1
    ref <- gc_reference(ll, y, 1200, 1.3, 0.07)
    for (backend in test_backends()) {
      got <- gp_loglik(ll, y, kernel = k, nugget = 0.07, method = "dense", coords = "lonlat",
                       distance = "great_circle", backend = backend)
      expect_lt(abs(got$loglik - ref$loglik), 1e-8 * max(1, abs(ref$loglik)),
                label = paste(backend, n))
      expect_equal(got$beta, ref$beta, tolerance = 1e-8, ignore_attr = TRUE)
    }
  }
  # a Matern 1/2 kernel is the same exponential; the radius is the range's unit
  ll <- sphere_data(40, 83)
  y <- rnorm(40)
  ref <- gc_reference(ll, y, 1200, 1.3, 0.07)
  got <- gp_loglik(ll, y, kernel = gk_kernel("matern", smoothness = 0.5, range = 1200 / 6371,
                                             variance = 1.3),
                   nugget = 0.07, method = "dense", coords = "lonlat", radius = 1,
                   distance = "great_circle", backend = "cpu")
  expect_equal(got$loglik, ref$loglik, tolerance = 1e-10)
  # and differs from the chordal likelihood
  chordal <- gp_loglik(ll, y, kernel = k, nugget = 0.07, method = "dense", coords = "lonlat",
                       backend = "cpu")
  expect_gt(abs(chordal$loglik - ref$loglik), 1e-3)
})

test_that("the great-circle gradient matches central differences of the reference", {
  ll <- sphere_data(120, 84)
  set.seed(85)
  y <- rnorm(120)
  p <- log(c(1.1, 1500, 0.2))
  f <- function(q) gc_reference(ll, y, exp(q[2]), exp(q[1]), exp(q[3]))$loglik
  num <- central_gradient(f, p, 1e-5)
  for (backend in test_backends()) {
    got <- gp_loglik(ll, y, kernel = gk_kernel("exponential", range = exp(p[2]), variance = exp(p[1])),
                     nugget = exp(p[3]), method = "dense", gradient = TRUE, coords = "lonlat",
                     distance = "great_circle", backend = backend)
    expect_equal(unname(got$gradient), num, tolerance = 1e-6, label = backend)
    expect_equal(names(got$gradient), c("log_variance", "log_range", "log_nugget"))
  }
})

test_that("tiled, h2 and vecchia great-circle likelihoods agree with dense", {
  n <- 1500L
  ll <- sphere_data(n, 86)
  k <- gk_kernel("exponential", range = 1500, variance = 1)
  set.seed(87)
  y <- gp_simulate(ll, k, nugget = 0.05, coords = "lonlat", distance = "great_circle",
                   backend = "cpu")
  ref <- gc_reference(ll, y, 1500, 1, 0.05)$loglik
  for (backend in test_backends()) {
    dense <- gp_loglik(ll, y, kernel = k, nugget = 0.05, method = "dense", gradient = TRUE,
                       coords = "lonlat", distance = "great_circle", backend = backend)
    expect_lt(abs(dense$loglik - ref), 1e-8 * abs(ref))
    for (method in c("tiled", "h2")) {
      got <- gp_loglik(ll, y, kernel = k, nugget = 0.05, method = method, gradient = TRUE,
                       coords = "lonlat", distance = "great_circle", backend = backend)
      info <- paste(backend, method)
      expect_lt(abs(got$loglik - ref), max(got$error, 1e-8 * abs(ref)), label = info)
      # gradient_se counts the probes only; the H2 approximation moves the gradient too
      # (?gp_loglik): here about 0.007 in log_nugget, more than 4 s.e. of the probes
      # with the default 60 neighbours (0.006)
      h2_effect <- if (method == "h2") 0.01 else 0
      tol <- 4 * got$gradient_se + h2_effect + 1e-6
      expect_true(all(abs(got$gradient - dense$gradient) <= tol), label = info)
    }
  }
  # Vecchia: an approximation; within a few nats at 40 neighbours
  vec <- gp_loglik(ll, y, kernel = k, nugget = 0.05, method = "vecchia", coords = "lonlat",
                   distance = "great_circle", backend = "cpu")
  expect_lt(abs(vec$loglik - ref), 5)
})

test_that("h2 great-circle matrices meet their tolerance at long ranges (antipodal pairs)", {
  ll <- sphere_data(2500, 88)
  x <- sphere_points(ll, 6371)
  v <- rnorm(2500)
  for (backend in test_backends()) for (range in c(1000, 6000)) {
    k <- gk_kernel("exponential_great_circle", range = range, radius = 6371)
    A <- h2_matrix(x, k, order = 5, backend = backend)
    exact <- drop(exp(-great_circle_distances(ll, ll, 6371) / range) %*% v)
    # the exponential's own error at this order, on the same points
    Ae <- h2_matrix(x, gk_kernel("exponential", range = range), order = 5, backend = backend)
    err_exp <- sqrt(sum((drop(Ae %*% v) - drop(kernel_matvec(x, x, v, gk_kernel("exponential", range = range),
                                                           backend = "cpu")))^2) / sum(v^2))
    err <- sqrt(sum((drop(A %*% v) - exact)^2) / sum(v^2))
    expect_lt(err, 2 * err_exp + 1e-12, label = paste(backend, range))
  }
})

test_that("a great-circle fit recovers the simulated range, predicts and simulates", {
  n <- 400L
  ll <- sphere_data(n, 89)
  truth <- c(variance = 1, range = 2000, nugget = 0.05)
  # simulated from the haversine covariance, not by the package
  S <- truth[["variance"]] * exp(-great_circle_distances(ll, ll, 6371) / truth[["range"]]) +
    diag(truth[["nugget"]], n)
  set.seed(90)
  y <- drop(crossprod(chol(S), rnorm(n))) + 3
  fit <- gp_fit(ll, y, kernel = "exponential", coords = "lonlat", distance = "great_circle",
                method = "dense", backend = "cpu")
  expect_equal(fit$kernel$name, "exponential_great_circle")
  expect_equal(fit$kernel$radius, 6371)
  se <- sqrt(diag(vcov(fit)))
  z <- (log(coef(fit)[["range"]]) - log(truth[["range"]])) / se[["log_range"]]
  expect_lt(abs(z), 4)
  expect_output(print(fit), "exponential_great_circle kernel \\(radius 6371\\)")
  # smoothness 0.5 is the same fit
  fit2 <- gp_fit(ll, y, kernel = "matern", smoothness = 0.5, coords = "lonlat",
                 distance = "great_circle", method = "dense", backend = "cpu")
  expect_equal(coef(fit2), coef(fit), tolerance = 1e-4)

  # kriging at fixed parameters against the haversine reference
  fixed <- gp_fit(ll, y, kernel = "exponential", coords = "lonlat", distance = "great_circle",
                  fixed = list(variance = 1, range = 2000, nugget = 0.05), backend = "cpu")
  new <- rbind(c(179.5, 10), c(-179.5, 10), c(0, 89.9), c(0, -89.9), c(360, 0), ll[3, ])
  C <- exp(-great_circle_distances(ll, new, 6371) / 2000)
  Si <- solve(S)
  beta <- sum(Si %*% y) / sum(Si)
  mean_ref <- beta + drop(t(C) %*% Si %*% (y - beta))
  u <- 1 - colSums(Si %*% C)
  var_ref <- 1 - colSums(C * (Si %*% C)) + u^2 / sum(Si)
  for (backend in test_backends()) {
    f <- fixed
    f$backend <- backend
    p <- predict(f, new, se.fit = TRUE, se.method = "exact")
    expect_equal(p$fit, mean_ref, tolerance = 1e-8, label = backend)
    expect_equal(p$se.fit, sqrt(pmax(var_ref, 0)), tolerance = 1e-6, label = backend)
  }
  draws <- gp_simulate(fixed, new, nsim = 3)
  expect_equal(dim(draws), c(6, 3))
  # an unconditional draw has the haversine covariance: its exact factor
  set.seed(91)
  z <- gp_simulate(ll[1:30, ], gk_kernel("exponential", range = 2000), nugget = 0.05,
                   coords = "lonlat", distance = "great_circle", method = "exact", backend = "cpu")
  set.seed(91)
  zr <- drop(crossprod(chol(S[1:30, 1:30]), rnorm(30)))
  expect_equal(z, zr, tolerance = 1e-8)
})

test_that("great-circle distance outside its validity is a clear error", {
  ll <- sphere_data(20, 92)
  y <- rnorm(20)
  gneiting <- "Gneiting 2013"
  expect_error(gp_loglik(ll, y, kernel = gk_kernel("matern", smoothness = 1.5), nugget = 0.1,
                         coords = "lonlat", distance = "great_circle"), gneiting)
  expect_error(gp_loglik(ll, y, kernel = "gaussian", nugget = 0.1, coords = "lonlat",
                         distance = "great_circle"), gneiting)
  expect_error(gp_fit(ll, y, coords = "lonlat", distance = "great_circle"),
               "matern with smoothness 1.5 kernel.*Gneiting 2013")
  expect_error(gp_fit(ll, y, kernel = "matern", smoothness = 0.5, estimate_smoothness = TRUE,
                      coords = "lonlat", distance = "great_circle"),
               "smoothness cannot be estimated.*Gneiting 2013")
  expect_error(gp_loglik(ll, y, kernel = gk_kernel("matern", smoothness = 0.5), nugget = 0.1,
                         coords = "lonlat", distance = "great_circle", gradient = TRUE,
                         smoothness_gradient = TRUE), "smoothness cannot be estimated")
  expect_error(gp_simulate(ll, gk_kernel("matern", smoothness = 2.5), coords = "lonlat",
                           distance = "great_circle"), gneiting)
  expect_error(gp_loglik(ll, y, kernel = "exponential", nugget = 0.1, distance = "great_circle"),
               "needs coords = \"lonlat\"")
  expect_error(gp_fit(ll, y, kernel = "exponential", distance = "great_circle"),
               "needs coords = \"lonlat\"")
  expect_error(gp_loglik(ll, y, kernel = "exponential", nugget = 0.1, coords = "lonlat",
                         distance = "geodesic"), "distance")
  # the kernel itself
  k <- gk_kernel("exponential_great_circle", range = 1000, radius = 6371)
  expect_error(gp_loglik(sphere_points(ll, 6371), y, kernel = k, nugget = 0.1),
               "needs coords = \"lonlat\" and distance = \"great_circle\"")
  expect_error(gk_kernel("exponential_great_circle", range = 1), "needs `radius`")
  expect_error(gk_kernel("exponential_great_circle", radius = -1), "radius")
  expect_error(gk_kernel("exponential_great_circle", range = c(1, 2), radius = 1), "one range")
  expect_error(gk_kernel("exponential", radius = 1), "`radius` applies")
  bad <- k
  bad$radius <- -5
  expect_error(kernel_matrix(sphere_points(ll, 6371), kernel = bad), "radius")
  bad$radius <- NULL
  expect_error(kernel_matrix(sphere_points(ll, 6371), kernel = bad), "radius")
  bad <- gk_kernel("exponential", range = 1)
  bad$radius <- 3
  expect_error(kernel_matrix(sphere_points(ll, 6371), kernel = bad), "radius")
})
