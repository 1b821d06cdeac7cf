# gp_simulate(method = "vecchia") against the textbook Vecchia model, written
# here in base R (issue 33): the points in the random order sample.int(n)
# drawn first from the user's stream, each conditioned on its m nearest
# preceding points, with the exact conditional mean and variance of the
# latent process (with a jitter of 1e-8 of the variance), and the rest of the
# nugget added as independent noise drawn after the normals.

# The exponential kernel in base R: variance * exp(-d / range).
ref_exponential <- function(a, b, variance, range) {
  d2 <- 0
  for (j in seq_len(ncol(a))) d2 <- d2 + outer(a[, j], b[, j], "-")^2
  variance * exp(-sqrt(d2) / range)
}

# The textbook Vecchia model of N(0, K + nugget I) for the points x (in their
# order): y_i = sum_j b_ij y_j + sqrt(d_i) z_i over the m nearest points
# before i (brute force), i.e. (I - B) y = D^(1/2) z. Returns the sparse
# factor (I - B as a dense lower-triangular matrix), sqrt(d) and the exact
# marginal variances diag((I - B)^-1 D (I - B)^-T).
ref_vecchia <- function(x, m, variance, range, nugget = 0) {
  n <- nrow(x)
  cov <- function(a, b) ref_exponential(a, b, variance, range)
  IB <- diag(n)
  sd <- numeric(n)
  for (i in seq_len(n)) {
    sii <- variance + nugget
    if (i == 1L || m == 0L) {
      sd[i] <- sqrt(sii)
      next
    }
    d2 <- 0
    for (j in seq_len(ncol(x))) d2 <- d2 + (x[seq_len(i - 1L), j] - x[i, j])^2
    nb <- order(d2)[seq_len(min(m, i - 1L))]
    KN <- cov(x[nb, , drop = FALSE], x[nb, , drop = FALSE]) + diag(nugget, length(nb))
    kN <- cov(x[nb, , drop = FALSE], x[i, , drop = FALSE])
    b <- solve(KN, kN)
    IB[i, nb] <- -b
    sd[i] <- sqrt(sii - sum(kN * b))
  }
  A <- forwardsolve(IB, diag(sd))   # y = A z
  list(IB = IB, sd = sd, variances = rowSums(A^2))
}

vecchia_draws <- function(n, m, nsim, range, seed, nugget = 0) {
  set.seed(seed)
  locs <- matrix(runif(2 * n), n, 2)
  k <- gk_kernel("exponential", range = range)
  set.seed(seed + 1L)
  y <- gp_simulate(locs, k, nugget = nugget, nsim = nsim, method = "vecchia", neighbors = m,
                   backend = "cpu")
  set.seed(seed + 1L)
  ord <- sample.int(n)   # the order gp_simulate() draws first
  z <- matrix(rnorm(n * nsim), n, nsim)
  jitter <- min(nugget, 1e-8)
  noise <- if (nugget > jitter) sqrt(nugget - jitter) * matrix(rnorm(n * nsim), n, nsim) else 0
  list(locs = locs, y = as.matrix(y), ord = ord, z = z, noise = noise,
       ref = ref_vecchia(locs[ord, , drop = FALSE], m, 1, range, jitter))
}

test_that("Vecchia draws are the textbook model's, to rounding", {
  for (case in list(c(n = 40, m = 5, nugget = 0), c(n = 600, m = 10, nugget = 0),
                    c(n = 300, m = 3, nugget = 0.1))) {
    d <- vecchia_draws(case[["n"]], case[["m"]], nsim = 3L, range = 0.3, seed = 7L,
                       nugget = case[["nugget"]])
    want <- matrix(0, case[["n"]], 3L)
    want[d$ord, ] <- forwardsolve(d$ref$IB, d$ref$sd * d$z) + d$noise
    expect_equal(d$y, want, tolerance = 1e-9, info = paste(case, collapse = " "))
  }
})

test_that("Vecchia draws of a smooth kernel with a small nugget have the model's energy", {
  # y' (K + nugget I)^-1 y / n has mean 1 under the model. Conditioning the
  # noisy y on its neighbours (as GpGp's fast_Gp_sim) gives about 1.024
  # here; the latent process's draws plus exact noise give 1.
  set.seed(31)
  n <- 1000L
  nsim <- 400L
  locs <- matrix(runif(2 * n), ncol = 2)
  k <- gk_kernel("matern", range = 0.6, smoothness = 1.5)
  S <- kernel_matrix(locs, kernel = k, backend = "cpu")
  diag(S) <- diag(S) + 0.01
  y <- gp_simulate(locs, k, nugget = 0.01, nsim = nsim, method = "vecchia", backend = "cpu")
  energy <- colSums(backsolve(chol(S), y, transpose = TRUE)^2) / n
  se <- stats::sd(energy) / sqrt(nsim)
  expect_lt(se, 0.003)
  expect_lt(abs(mean(energy) - 1), 4 * se)
})

test_that("n = 40, m = 5: the simulated variance is at least 0.99 of the kernel's", {
  nsim <- 200000L
  d <- vecchia_draws(40L, 5L, nsim, range = 0.2, seed = 11L)
  per_draw <- colMeans(d$y^2)
  se <- stats::sd(per_draw) / sqrt(nsim)
  expect_gte(mean(per_draw), 0.99)
  expect_lt(abs(mean(per_draw) - mean(d$ref$variances)), 4 * se)   # the model's own
})

test_that("n = 2000, m = 10: the simulated variance is the textbook model's", {
  nsim <- 10000L
  d <- vecchia_draws(2000L, 10L, nsim, range = 0.2, seed = 21L)
  per_draw <- colMeans(d$y^2)   # each draw's average squared value (mean 0)
  se <- stats::sd(per_draw) / sqrt(nsim)
  want <- mean(d$ref$variances)   # exact, from the sparse factor
  expect_lt(abs(mean(per_draw) - want), 4 * se)
  expect_lt(se, 0.004)
  expect_gt(want, 0.985)
  expect_lt(want, 1)
})
