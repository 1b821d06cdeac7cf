# Geometric anisotropy (ranges = "anisotropic"): k(|A (x - y)|) with
# A = diag(1 / range) R(angles)'. An independent reference builds A, the
# transformed points, dist() and the Matern kernel by its formula; the
# package rotates the points and runs its engines on them.

# R(angles) from its definition (2D: a turn by `a`; 3D: z-y-x turns)
aniso_rotation <- function(a) {
  if (length(a) == 1L) return(matrix(c(cos(a), sin(a), -sin(a), cos(a)), 2))
  rz <- matrix(c(cos(a[1]), sin(a[1]), 0, -sin(a[1]), cos(a[1]), 0, 0, 0, 1), 3)
  ry <- matrix(c(cos(a[2]), 0, -sin(a[2]), 0, 1, 0, sin(a[2]), 0, cos(a[2])), 3)
  rx <- matrix(c(1, 0, 0, 0, cos(a[3]), sin(a[3]), 0, -sin(a[3]), cos(a[3])), 3)
  rz %*% ry %*% rx
}

# the profile log-likelihood by brute force: Matern (the package's scale,
# no sqrt(2 nu)) of |A (x_i - x_j)|
aniso_loglik <- function(locs, y, X, ranges, angles, nu, variance, nugget) {
  A <- diag(1 / ranges, length(ranges)) %*% t(aniso_rotation(angles))
  d <- as.matrix(dist(locs %*% t(A)))
  corr <- if (nu == 1.5) (1 + d) * exp(-d) else
    ifelse(d == 0, 1, 2^(1 - nu) / gamma(nu) * d^nu * besselK(pmax(d, 1e-300), nu))
  S <- variance * corr + diag(nugget, nrow(locs))
  Si <- solve(S)
  beta <- solve(crossprod(X, Si %*% X), crossprod(X, Si %*% y))
  r <- y - X %*% beta
  ll <- -0.5 * (nrow(locs) * log(2 * pi) + determinant(S)$modulus + sum(r * (Si %*% r)))
  list(loglik = as.numeric(ll), S = S, Si = Si, beta = drop(beta), r = drop(r), A = A)
}

aniso_data <- function(n, ranges, angles, seed, nu = 1.5, nugget = 0.1, variance = 1.3) {
  set.seed(seed)
  locs <- matrix(runif(n * length(ranges)), ncol = length(ranges))
  k <- gk_kernel("matern", range = ranges, smoothness = nu, variance = variance)
  y <- 0.5 + gp_simulate(locs, k, nugget = nugget, angle = angles, backend = "cpu")
  list(locs = locs, y = y, X = matrix(1, n, 1), kernel = k, nugget = nugget, angles = angles,
       ranges = ranges, nu = nu, variance = variance)
}

ref_of <- function(dat, ranges = dat$ranges, angles = dat$angles) {
  aniso_loglik(dat$locs, dat$y, dat$X, ranges, angles, dat$nu, dat$variance, dat$nugget)
}

test_that("dense likelihoods and angle gradients match the reference", {
  cases <- list(list(n = 1, ranges = c(0.3, 0.1), angles = 0.4),
                list(n = 2, ranges = c(0.3, 0.1), angles = -1.2),
                list(n = 7, ranges = c(0.5, 0.2), angles = 2.5),
                list(n = 33, ranges = c(0.2, 0.6), angles = 0.9, nu = 2.5),
                list(n = 157, ranges = c(0.3, 0.08), angles = 0.6),
                list(n = 41, ranges = c(0.5, 0.2, 0.3), angles = c(0.3, -0.5, 1.1)),
                list(n = 9, ranges = c(0.4, 0.3, 0.1), angles = c(-2, 0.2, 0.4), nu = 0.5))
  for (case in cases) {
    nu <- if (is.null(case$nu)) 1.5 else case$nu
    dat <- aniso_data(case$n, case$ranges, case$angles, seed = case$n, nu = nu)
    ref <- ref_of(dat)$loglik
    fd <- central_gradient(function(a) ref_of(dat, angles = a)$loglik, case$angles, 1e-5)
    nm <- if (length(case$angles) == 1L) "angle" else paste0("angle", 1:3)
    for (backend in test_backends()) {
      got <- gp_loglik(dat$locs, dat$y, dat$X, kernel = dat$kernel, nugget = dat$nugget,
                       method = "dense", gradient = TRUE, ranges = "anisotropic",
                       angle = case$angles, backend = backend)
      label <- paste("n =", case$n, backend)
      expect_lt(abs(got$loglik - ref), 1e-8 * max(1, abs(ref)), label = label)
      expect_named(got$gradient, c("log_variance", paste0("log_range", seq_along(case$ranges)),
                                   nm, "log_nugget"))
      expect_lt(max(abs(got$gradient[nm] - fd)), 1e-6 * max(1, abs(fd)), label = label)
    }
  }
})

test_that("the Vecchia angle gradient is that of its likelihood", {
  dat <- aniso_data(230, c(0.3, 0.07), 0.8, seed = 5)
  ctl <- gp_control(neighbors = 12)
  vecchia <- function(a) {
    gp_loglik(dat$locs, dat$y, dat$X, kernel = dat$kernel, nugget = dat$nugget,
              method = "vecchia", ranges = "anisotropic", angle = a, control = ctl,
              backend = "cpu")$loglik
  }
  fd <- central_gradient(vecchia, 0.8, 1e-5)
  for (backend in test_backends()) {
    got <- gp_loglik(dat$locs, dat$y, dat$X, kernel = dat$kernel, nugget = dat$nugget,
                     method = "vecchia", gradient = TRUE, ranges = "anisotropic", angle = 0.8,
                     control = ctl, backend = backend)
    expect_lt(abs(got$gradient[["angle"]] - fd), 1e-6 * max(1, abs(fd)))
  }
})

test_that("iterative likelihoods and gradients agree with dense within their errors", {
  dat <- aniso_data(500, c(0.25, 0.07), -0.7, seed = 7)
  dense <- gp_loglik(dat$locs, dat$y, dat$X, kernel = dat$kernel, nugget = dat$nugget,
                     method = "dense", gradient = TRUE, ranges = "anisotropic", angle = -0.7,
                     backend = "cpu")
  for (backend in test_backends()) for (method in c("tiled", "h2")) {
    got <- gp_loglik(dat$locs, dat$y, dat$X, kernel = dat$kernel, nugget = dat$nugget,
                     method = method, gradient = TRUE, ranges = "anisotropic", angle = -0.7,
                     backend = backend)
    label <- paste(method, backend)
    expect_lt(abs(got$loglik - dense$loglik), got$error + 1e-6, label = label)
    expect_true(all(abs(got$gradient - dense$gradient) <= 5 * got$gradient_se + 1e-3),
                label = label)
  }
})

# (range1, range2, angle) and (range2, range1, angle + pi/2) are the same
# covariance: estimates in the form with the larger range first
major_first <- function(r, a) {
  if (r[[1]] >= r[[2]]) return(list(r = r, a = a, swap = FALSE))
  a <- a + pi / 2
  list(r = rev(r), a = a - pi * ceiling(a / pi - 0.5), swap = TRUE)
}

test_that("a fit recovers simulated ranges and angle within its errors", {
  # the size is drawn (a hidden size), the truth is fixed
  set.seed(as.integer(Sys.time()) %% 1000L)
  n <- sample(600:800, 1)
  dat <- aniso_data(n, c(0.25, 0.06), 0.6, seed = n, nugget = 0.05)
  fit <- gp_fit(dat$locs, dat$y, ranges = "anisotropic", method = "dense", backend = "cpu")
  expect_named(coef(fit), c("variance", "range1", "range2", "angle", "nugget"))
  expect_true(coef(fit)[["angle"]] > -pi / 2 && coef(fit)[["angle"]] <= pi / 2)
  expect_gte(coef(fit)[["range1"]], coef(fit)[["range2"]])   # the larger range first
  est <- major_first(coef(fit)[c("range1", "range2")], coef(fit)[["angle"]])
  se <- sqrt(diag(vcov(fit)))
  # In a fixed domain each range trades against the variance (only such
  # combinations are identified), so a range's own Wald z has a heavy tail;
  # the anisotropy, their ratio, and the angle are identified.
  v <- vcov(fit)[c("log_range1", "log_range2"), c("log_range1", "log_range2")]
  z <- c(ratio = (log(est$r[[1]] / est$r[[2]]) - log(0.25 / 0.06)) /
           sqrt(v[1, 1] + v[2, 2] - 2 * v[1, 2]),
         angle = (est$a - 0.6) / se[["angle"]])
  expect_true(all(abs(z) < 4), label = paste("n =", n, ":", paste(signif(z, 3), collapse = " ")))
  expect_lt(se[["angle"]], 0.1)
  expect_equal(fit$kernel$range, unname(coef(fit)[c("range1", "range2")]))
  # vcov(log = FALSE) leaves the angle on its own scale
  expect_equal(vcov(fit, log = FALSE)["angle", "angle"], vcov(fit)["angle", "angle"])
  tab <- summary(fit)$table
  expect_true(is.na(tab["angle", "log estimate"]))
  expect_equal(tab["angle", "lower95"], coef(fit)[["angle"]] - 1.96 * se[["angle"]])
  expect_output(print(fit), "angle")

  # the Vecchia fit lands near the dense one
  vfit <- gp_fit(dat$locs, dat$y, ranges = "anisotropic", method = "vecchia",
                 control = gp_control(neighbors = 30), backend = "cpu")
  canon <- function(f) {
    e <- major_first(coef(f)[c("range1", "range2")], coef(f)[["angle"]])
    c(log(coef(f)[["variance"]]), log(e$r), e$a, log(coef(f)[["nugget"]]))
  }
  diff <- canon(vfit) - canon(fit)
  diff[4] <- diff[4] - pi * round(diff[4] / pi)
  se_r <- max(se[c("log_range1", "log_range2")])
  se_c <- c(se[["log_variance"]], se_r, se_r, se[["angle"]], se[["log_nugget"]])
  expect_true(all(abs(diff) < 3 * se_c), label = paste(signif(diff / se_c, 3), collapse = " "))

  # kriging with the fitted rotation is the dense reference's
  new <- matrix(runif(14), ncol = 2)
  got <- predict(fit, new, se.fit = TRUE)
  cf <- coef(fit)
  ref <- aniso_loglik(dat$locs, dat$y, dat$X, cf[c("range1", "range2")], cf[["angle"]], 1.5,
                      cf[["variance"]], cf[["nugget"]])
  zn <- new %*% t(ref$A)
  zo <- dat$locs %*% t(ref$A)
  d <- sqrt(pmax(outer(rowSums(zn^2), rowSums(zo^2), "+") - 2 * zn %*% t(zo), 0))
  cross <- cf[["variance"]] * (1 + d) * exp(-d)
  expect_equal(got$fit, drop(ref$beta + cross %*% (ref$Si %*% ref$r)), tolerance = 1e-8)
  u <- 1 - drop(cross %*% ref$Si %*% dat$X)
  xsx <- drop(crossprod(dat$X, ref$Si %*% dat$X))
  var <- cf[["variance"]] - rowSums((cross %*% ref$Si) * cross) + u^2 / xsx
  expect_equal(got$se.fit, sqrt(var), tolerance = 1e-7)
  # conditional draws at the data's locations are the data's kriging means
  draws <- gp_simulate(fit, dat$locs[1:3, ], nsim = 2, method = "exact")
  expect_equal(dim(draws), c(3L, 2L))
})

test_that("2D fits report the larger range first, whichever form they reach", {
  dat <- aniso_data(sample(250:320, 1), c(0.06, 0.22), 0.4, seed = 11, nugget = 0.05)
  # started in either form, the optimizer reaches either; the fit reports one
  fit_a <- gp_fit(dat$locs, dat$y, ranges = "anisotropic", method = "dense", backend = "cpu",
                  start = list(variance = 1, range1 = 0.06, range2 = 0.22, angle = 0.4,
                               nugget = 0.05))
  fit_b <- gp_fit(dat$locs, dat$y, ranges = "anisotropic", method = "dense", backend = "cpu",
                  start = list(variance = 1, range1 = 0.22, range2 = 0.06, angle = 0.4 - pi / 2,
                               nugget = 0.05))
  for (fit in list(fit_a, fit_b)) {
    expect_gte(coef(fit)[["range1"]], coef(fit)[["range2"]])
    cf <- coef(fit)
    ref <- aniso_loglik(dat$locs, dat$y, dat$X, cf[c("range1", "range2")], cf[["angle"]], 1.5,
                        cf[["variance"]], cf[["nugget"]])
    expect_equal(fit$loglik, ref$loglik, tolerance = 1e-8)
    # the gradient's and the covariance's rows follow the parameters
    expect_lt(max(abs(fit$gradient)), 1e-3)
  }
  expect_equal(coef(fit_a), coef(fit_b), tolerance = 1e-4)
  expect_equal(vcov(fit_a), vcov(fit_b), tolerance = 1e-3)
  # the angle of the larger range's axis: 0.4 + pi/2, reported in (-pi/2, pi/2]
  se <- sqrt(vcov(fit_a)["angle", "angle"])
  expect_lt(abs(coef(fit_a)[["angle"]] - (0.4 + pi / 2 - pi)), 4 * se)
})

test_that("a Vecchia fit finds its neighbours again in the estimated metric", {
  # strongly anisotropic truth, far from the isotropic start: with the
  # starting metric's neighbours the fit's Vecchia log-likelihood lies tens
  # of nats below the one with neighbours in its estimates' metric
  set.seed(sample.int(1000, 1))
  n <- sample(700:900, 1)
  locs <- matrix(runif(2 * n), ncol = 2)
  y <- gp_simulate(locs, gk_kernel("matern", range = c(0.3, 0.03), smoothness = 1.5),
                   nugget = 0.05, angle = 0.8, backend = "cpu")
  ctl <- gp_control(neighbors = 30)
  fit <- gp_fit(locs, y, ranges = "anisotropic", method = "vecchia", control = ctl, backend = "cpu")
  cf <- coef(fit)
  k <- gk_kernel("matern", range = cf[c("range1", "range2")], smoothness = 1.5,
                 variance = cf[["variance"]])
  at_estimates <- gp_loglik(locs, y, kernel = k, nugget = cf[["nugget"]], ranges = "anisotropic",
                            angle = cf[["angle"]], method = "vecchia", control = ctl,
                            backend = "cpu")$loglik
  expect_lt(abs(fit$loglik - at_estimates), 2, label = paste("n =", n))
  # an isotropic fit's neighbours do not depend on its range
  model <- gpukernels:::gp_model_kernel(gk_kernel("matern", smoothness = 1.5), rep(1L, 2), FALSE)
  th <- c(variance = 1, range = 0.1, nugget = 0.1)
  expect_false(gpukernels:::gp_neighbors_moved(model, th, th * c(1, 3, 1), integer(0)))
  groups <- gpukernels:::gp_range_groups("anisotropic", 2L)
  model <- gpukernels:::gp_model_kernel(gk_kernel("matern", smoothness = 1.5), groups, FALSE)
  th <- c(variance = 1, range1 = 0.2, range2 = 0.1, angle = 0.3, nugget = 0.1)
  at <- match("angle", names(th))
  expect_false(gpukernels:::gp_neighbors_moved(model, th, th * c(1, 2, 2, 1, 1), at))
  expect_true(gpukernels:::gp_neighbors_moved(model, th, th * c(1, 1.2, 1, 1, 1), at))
  expect_true(gpukernels:::gp_neighbors_moved(model, th, th + c(0, 0, 0, 0.3, 0), at))
})

test_that("fixed and started angles, 3D fits, and a non-identifiable angle", {
  dat <- aniso_data(250, c(0.3, 0.1), 0.5, seed = 13)
  fit <- gp_fit(dat$locs, dat$y, ranges = "anisotropic", method = "dense", backend = "cpu",
                fixed = list(angle = 0.5))
  expect_equal(coef(fit)[["angle"]], 0.5)
  expect_equal(unname(vcov(fit)["angle", ]), rep(0, 5))
  # angles outside (-pi/2, pi/2] are reported there (period pi)
  fit2 <- gp_fit(dat$locs, dat$y, ranges = "anisotropic", method = "dense", backend = "cpu",
                 start = list(variance = 1, range = c(0.3, 0.1), angle = 0.5 + 3 * pi,
                              nugget = 0.1))
  expect_true(abs(coef(fit2)[["angle"]]) <= pi / 2)
  expect_equal(fit2$loglik, gp_fit(dat$locs, dat$y, ranges = "anisotropic", method = "dense",
                                    backend = "cpu")$loglik, tolerance = 1e-6)
  # with the ranges held equal the angle does not change the covariance
  expect_warning(fit3 <- gp_fit(dat$locs, dat$y, ranges = "anisotropic", method = "dense",
                                backend = "cpu", fixed = list(range1 = 0.2, range2 = 0.2)),
                 "not identifiable")
  expect_true(is.na(vcov(fit3)["angle", "angle"]))
  expect_true(all(is.finite(diag(vcov(fit3))[c("log_variance", "log_nugget")])))
  expect_output(print(fit3), "not identifiable")

  # 3D: three ranges and three angles, in (-pi/2, pi/2]
  dat3 <- aniso_data(150, c(0.5, 0.2, 0.3), c(0.3, -0.4, 0.8), seed = 17)
  fit <- gp_fit(dat3$locs, dat3$y, ranges = "anisotropic", method = "vecchia",
                backend = "cpu", fixed = list(angle = c(0.3, -0.4, 0.8)))
  expect_named(coef(fit), c("variance", "range1", "range2", "range3", "angle1", "angle2",
                            "angle3", "nugget"))
  expect_equal(unname(coef(fit)[c("angle1", "angle2", "angle3")]), c(0.3, -0.4, 0.8))
  fit <- gp_fit(dat3$locs, dat3$y, ranges = "anisotropic", method = "dense", backend = "cpu")
  expect_true(all(abs(coef(fit)[c("angle1", "angle2", "angle3")]) <= pi / 2))
  # the reported angles and ranges give the fit's likelihood by the reference
  cf <- coef(fit)
  ref <- aniso_loglik(dat3$locs, dat3$y, dat3$X, cf[c("range1", "range2", "range3")],
                      cf[c("angle1", "angle2", "angle3")], 1.5, cf[["variance"]], cf[["nugget"]])
  expect_equal(fit$loglik, ref$loglik, tolerance = 1e-8)
  new <- matrix(runif(9), ncol = 3)
  expect_equal(predict(fit, new),
               unname(drop(ref$beta + (cf[["variance"]] * local({
                 d <- as.matrix(dist(rbind(new, dat3$locs) %*% t(ref$A)))[1:3, -(1:3)]
                 (1 + d) * exp(-d)
               })) %*% (ref$Si %*% ref$r))), tolerance = 1e-8)
})

test_that("simulation with an angle is simulation on the rotated points", {
  set.seed(19)
  locs <- matrix(runif(60), ncol = 2)
  k <- gk_kernel("matern", range = c(0.3, 0.1), smoothness = 1.5)
  set.seed(1)
  a <- gp_simulate(locs, k, nugget = 0.1, angle = 0.7, backend = "cpu")
  set.seed(1)
  b <- gp_simulate(locs %*% aniso_rotation(0.7), k, nugget = 0.1, backend = "cpu")
  expect_equal(a, b, tolerance = 1e-12)
})

test_that("bad anisotropy inputs are clear errors", {
  set.seed(23)
  y <- rnorm(30)
  loc2 <- matrix(runif(60), ncol = 2)
  expect_error(gp_fit(matrix(runif(30)), y, ranges = "anisotropic", backend = "cpu"),
               "2 or 3 columns")
  expect_error(gp_fit(matrix(runif(120), ncol = 4), y, ranges = "anisotropic", backend = "cpu"),
               "2 or 3 columns")
  expect_error(gp_fit(cbind(runif(30, -10, 10), runif(30, -10, 10)), y, coords = "lonlat",
                      ranges = "anisotropic", backend = "cpu"), "coords = \"euclidean\"")
  expect_error(gp_fit(loc2, y, ranges = "anisotropic", fixed = list(angle = NA_real_),
                      backend = "cpu"), "fixed\\$angle.*finite")
  expect_error(gp_fit(loc2, y, ranges = "anisotropic", fixed = list(angle2 = 1),
                      backend = "cpu"), "angle2")
  expect_error(gp_fit(loc2, y, fixed = list(angle = 1), backend = "cpu"), "\"angle\"")
  expect_error(gp_fit(loc2, y, ranges = "anisotropic", backend = "cpu",
                      start = list(variance = 1, range = 0.2, nugget = 0.1, angle = Inf)),
               "start\\$angle")
  k <- gk_kernel("matern", range = c(0.2, 0.1), smoothness = 1.5)
  expect_error(gp_loglik(loc2, y, kernel = k, nugget = 0.1, angle = 0.3, backend = "cpu"),
               "ranges = \"anisotropic\"")
  expect_error(gp_loglik(loc2, y, kernel = k, nugget = 0.1, ranges = "anisotropic",
                         angle = c(0.3, 0.1), backend = "cpu"), "`angle` must be a finite")
  expect_error(gp_loglik(loc2, y, kernel = k, nugget = 0.1, ranges = "anisotropic",
                         angle = NA, backend = "cpu"), "`angle`")
  expect_error(gp_simulate(matrix(runif(30)), "matern", angle = 0.3, backend = "cpu"),
               "2 or 3 columns")
})
