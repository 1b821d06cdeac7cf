# Independent dense references for the Gaussian-process tests, in plain R.

# The kernel matrix K over locs (exponential, gaussian or matern).
dense_kernel_matrix <- function(locs, kernel) {
  d <- as.matrix(dist(sweep(locs, 2, kernel$range, "/")))
  nu <- kernel$smoothness
  corr <- switch(kernel$name,
    exponential = exp(-d),
    gaussian = exp(-d^2 / 2),
    matern = ifelse(d == 0, 1, 2^(1 - nu) / gamma(nu) * d^nu * besselK(pmax(d, 1e-300), nu)))
  kernel$variance * corr
}

dense_reference <- function(locs, y, X, kernel, nugget) {
  S <- dense_kernel_matrix(locs, kernel) + diag(nugget, nrow(locs))
  Si <- solve(S)
  beta <- solve(t(X) %*% Si %*% X, t(X) %*% Si %*% y)
  r <- y - X %*% beta
  ll <- -0.5 * (nrow(locs) * log(2 * pi) + determinant(S)$modulus + sum(r * (Si %*% r)))
  list(loglik = as.numeric(ll), S = S, Si = Si, beta = drop(beta), r = drop(r))
}

sim_data <- function(n, dim = 2, kernel, nugget, seed) {
  set.seed(seed)
  locs <- matrix(runif(n * dim), ncol = dim)
  X <- cbind(1, locs[, 1])
  y <- drop(X %*% c(1, -2)) + gp_simulate(locs, kernel, nugget = nugget, backend = "cpu")
  list(locs = locs, y = y, X = X)
}

# Central differences of f at p, with step h in each coordinate.
central_gradient <- function(f, p, h) {
  vapply(seq_along(p), function(i) {
    e <- h * (seq_along(p) == i)
    (f(p + e) - f(p - e)) / (2 * h)
  }, 0)
}
