# The Vecchia likelihood (method = "vecchia") against an independent R
# construction of the same model: the sparse factor from dense solves on each
# row's neighbours, the GLS mean, and central differences for the gradient.

vecchia_reference <- function(prob, kernel, nugget) {
  S <- kernel_matrix(prob$locs, kernel = kernel, backend = "cpu")
  diag(S) <- diag(S) + nugget
  n <- nrow(S)
  G <- matrix(0, n, n)
  for (i in seq_len(n)) {
    nb <- prob$nbr[i, ]
    nb <- nb[nb > 0]
    b <- if (length(nb)) solve(S[nb, nb, drop = FALSE], S[nb, i]) else numeric(0)
    d <- S[i, i] - sum(S[nb, i] * b)
    G[i, i] <- 1 / sqrt(d)
    G[i, nb] <- -b / sqrt(d)
  }
  Q <- crossprod(G)
  beta <- solve(t(prob$X) %*% Q %*% prob$X, t(prob$X) %*% Q %*% prob$y)
  r <- prob$y - prob$X %*% beta
  -0.5 * (n * log(2 * pi) - 2 * sum(log(diag(G))) + sum((G %*% r)^2))
}

test_that("the Vecchia log-likelihood and gradient equal the R construction", {
  k <- gk_kernel("matern", range = 0.1, smoothness = 1.5, variance = 1.3)
  dat <- sim_data(333, kernel = k, nugget = 0.05, seed = 81)
  ctl <- gp_control(neighbors = 12)
  prob <- gpukernels:::gp_problem(dat$locs, dat$y, dat$X, "vecchia", ctl, "cpu")
  ref <- vecchia_reference(prob, k, 0.05)
  p0 <- log(c(1.3, 0.1, 0.05))
  at <- function(p) {
    vecchia_reference(prob, gk_kernel("matern", range = exp(p[2]), smoothness = 1.5,
                                      variance = exp(p[1])), exp(p[3]))
  }
  fd <- central_gradient(at, p0, 1e-5)
  for (backend in test_backends()) {
    got <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = 0.05, method = "vecchia",
                     gradient = TRUE, control = ctl, backend = backend)
    expect_equal(got$loglik, ref, tolerance = 1e-10, info = backend)
    expect_equal(unname(got$gradient), fd, tolerance = 1e-6, info = backend)
    expect_equal(got$error, 0)
  }
  # with every predecessor as a neighbour the model is exact
  small <- sim_data(40, kernel = k, nugget = 0.05, seed = 82)
  full <- gp_loglik(small$locs, small$y, small$X, kernel = k, nugget = 0.05, method = "vecchia",
                    control = gp_control(neighbors = 64), backend = "cpu")
  expect_equal(full$loglik, dense_reference(small$locs, small$y, small$X, k, 0.05)$loglik,
               tolerance = 1e-10)
})

test_that("smoothness gradients and the Fisher information of the Vecchia likelihood", {
  k <- gk_kernel("matern", range = 0.15, smoothness = 1.2, variance = 0.9)
  dat <- sim_data(250, kernel = k, nugget = 0.1, seed = 83)
  ctl <- gp_control(neighbors = 64)            # all predecessors up to 64: nearly exact
  got <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = 0.1, method = "vecchia",
                   gradient = TRUE, smoothness_gradient = TRUE, control = ctl, backend = "cpu")
  dense <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = 0.1, method = "dense",
                     gradient = TRUE, smoothness_gradient = TRUE, backend = "cpu")
  expect_named(got$gradient, c("log_variance", "log_range", "log_nugget", "log_smoothness"))
  expect_equal(got$gradient, dense$gradient, tolerance = 0.05)
  fit <- gp_fit(dat$locs, dat$y, dat$X, kernel = "matern", smoothness = 1.2, method = "vecchia",
                control = ctl, backend = "cpu")
  fit_dense <- gp_fit(dat$locs, dat$y, dat$X, kernel = "matern", smoothness = 1.2,
                      method = "dense", backend = "cpu")
  expect_equal(coef(fit), coef(fit_dense), tolerance = 0.05)
  # GpGp's information of the rows' conditionals: close to the exact one here
  expect_equal(sqrt(diag(vcov(fit))), sqrt(diag(vcov(fit_dense))), tolerance = 0.1)
  expect_output(print(fit), "Vecchia, 64 neighbours")
})

test_that("a Vecchia fit predicts", {
  k <- gk_kernel("exponential", range = 0.2)
  dat <- sim_data(300, kernel = k, nugget = 0.1, seed = 84)
  fit <- gp_fit(dat$locs, dat$y, dat$X, kernel = "exponential", method = "vecchia",
                fixed = list(variance = 1, range = 0.2, nugget = 0.1), backend = "cpu")
  new <- matrix(runif(10), ncol = 2)
  newX <- cbind(1, new[, 1])
  p <- predict(fit, new, newX = newX, se.fit = TRUE, se.method = "exact")
  ref <- dense_reference(dat$locs, dat$y, dat$X, fit$kernel, 0.1)
  C <- kernel_matrix(dat$locs, new, fit$kernel, backend = "cpu")
  mean_ref <- drop(newX %*% ref$beta + t(C) %*% ref$Si %*% ref$r)
  # the mean from G'G (?gp_loglik): near the exact kriging mean, not equal
  expect_lt(max(abs(p$fit - mean_ref)), 0.1 * sd(dat$y))
  expect_true(all(is.finite(p$se.fit)))
})
