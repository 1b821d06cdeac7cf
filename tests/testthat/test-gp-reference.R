# The GP likelihood and the H2 products on every backend against independent
# references in plain R (dense_reference in helper-gp.R, ref_kernel_values in
# helper-reduce.R), not against the other backend.

# Central differences of the reference log-likelihood in the log parameters
# (variance, range, nugget), profiled over the GLS mean as gp_loglik() is.
reference_gradient <- function(dat, kernel, nugget, h = 1e-4) {
  ll <- function(p) {
    k <- kernel
    k$variance <- exp(p[1])
    k$range <- exp(p[2])
    dense_reference(dat$locs, dat$y, dat$X, k, exp(p[3]))$loglik
  }
  central_gradient(ll, log(c(kernel$variance, kernel$range, nugget)), h)
}

test_that("log-likelihoods and gradients match the dense R reference on every backend", {
  k <- gk_kernel("matern", range = 0.08, smoothness = 1.5, variance = 1.4)
  dat <- sim_data(1201, kernel = k, nugget = 0.02, seed = 61)
  ref <- dense_reference(dat$locs, dat$y, dat$X, k, 0.02)
  g_ref <- reference_gradient(dat, k, 0.02)
  for (backend in test_backends()) for (method in c("dense", "tiled", "h2")) {
    got <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = 0.02, method = method,
                     gradient = TRUE, backend = backend)
    info <- paste(backend, method)
    if (method == "dense") {
      expect_equal(got$loglik, ref$loglik, tolerance = 1e-9, info = info)
      expect_equal(unname(got$gradient), g_ref, tolerance = 1e-5, info = info)
      expect_equal(unname(got$beta), ref$beta, tolerance = 1e-8, info = info)
    } else {
      # stochastic trace estimates: within the reported error and standard errors
      expect_lt(abs(got$loglik - ref$loglik), got$error)
      expect_true(all(abs(unname(got$gradient) - g_ref) <
                        4 * unname(got$gradient_se) + 0.02 * max(abs(g_ref))), info = info)
      expect_equal(unname(got$beta), ref$beta, tolerance = 1e-4, info = info)
    }
  }
})

test_that("H2 gradients in 3D follow the reference's finite differences", {
  k <- gk_kernel("exponential", range = 0.3, variance = 0.8)
  dat <- sim_data(900, dim = 3, kernel = k, nugget = 0.05, seed = 62)
  g_ref <- reference_gradient(dat, k, 0.05)
  for (backend in test_backends()) {
    got <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = 0.05, method = "h2",
                     gradient = TRUE, control = gp_control(probes = 100L), backend = backend)
    # gradient_se counts the probes; the H2 approximation at the default order
    # moves the gradient by up to about 1% more (?gp_loglik)
    expect_true(all(abs(unname(got$gradient) - g_ref) <
                      4 * unname(got$gradient_se) + 0.02 * max(abs(g_ref))), info = backend)
    # a more accurate H2 matrix leaves the probes' error only
    fine <- gp_loglik(dat$locs, dat$y, dat$X, kernel = k, nugget = 0.05, method = "h2",
                      gradient = TRUE, control = gp_control(probes = 100L, h2 = list(order = 6)),
                      backend = backend)
    expect_true(all(abs(unname(fine$gradient) - g_ref) < 4 * unname(fine$gradient_se) + 1e-3),
                info = backend)
  }
})

test_that("H2 products match the kernel formulas on every backend", {
  set.seed(63)
  n <- 1777
  locs <- matrix(runif(2 * n), ncol = 2)
  v <- rnorm(n)                                    # mean zero: no cancellation hidden
  for (k in list(gk_kernel("exponential", range = 0.1),
                 gk_kernel("matern", range = 0.1, smoothness = 2.5),
                 gk_kernel("gaussian", range = 0.05))) {
    exact <- drop(ref_kernel_values(locs, locs, k) %*% v)
    for (backend in test_backends()) for (precision in test_precisions(backend)) {
      A <- h2_matrix(locs, k, order = 8, eta = 1, precision = precision, backend = backend)
      err <- sqrt(sum((drop(A %*% v) - exact)^2) / sum(exact^2))
      expect_lt(err, if (precision == "double") 1e-5 else 1e-4,
                label = paste(k$name, backend, precision))
    }
  }
})
