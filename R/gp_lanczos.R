# Stochastic Lanczos quadrature from the conjugate-gradient coefficients, and
# the error that an indefinite operator gives.

# ritz: the sign came from a Ritz value <= 0 after `iteration` steps, rather
# than from a step with p'Ap <= 0.
gp_stop_indefinite <- function(method, iteration, ritz = FALSE) {
  hint <- if (identical(method, "h2")) {
    paste0("the H2 approximation's error is larger than the nugget allows. Use a more ",
           "accurate H2 matrix (a smaller eta or a higher order, e.g. control = ",
           "gp_control(h2 = list(eta = 1.5))), a larger nugget, or method = \"tiled\" (exact)")
  } else {
    "a larger nugget may help (duplicated or nearly duplicated locations?)"
  }
  seen <- if (ritz) "a negative Ritz value after %d iterations" else "negative curvature at iteration %d"
  stop(sprintf(paste0("conjugate gradients do not converge: the covariance operator is not positive ",
                      "definite (", seen, "); %s"), iteration, hint), call. = FALSE)
}

# z' log(A) z from the CG coefficients of the solve A x = z (the Lanczos
# tridiagonal matrix; Gauss quadrature, as in stochastic Lanczos quadrature);
# NA when a Ritz value is <= 0, which proves A indefinite (Ritz values lie in
# A's spectrum), even where no CG step showed p'Ap <= 0 yet.
gp_lanczos_logquad <- function(alpha, beta, steps, znorm2) {
  e <- gp_lanczos_eigen(alpha, beta, steps)
  if (min(e$values) <= 0) return(NA_real_)
  znorm2 * sum(e$vectors[1L, ]^2 * log(e$values))
}

# The eigen decomposition of the Lanczos matrix of the first `steps` (>= 1)
# CG coefficients.
gp_lanczos_eigen <- function(alpha, beta, steps) {
  a <- alpha[seq_len(steps)]
  b <- beta[seq_len(steps)]
  diag_t <- 1 / a + c(0, b[-steps] / a[-steps])
  T <- diag(diag_t, steps)
  if (steps > 1L) {
    off <- sqrt(b[-steps]) / a[-steps]
    T[cbind(2:steps, 1:(steps - 1L))] <- off
    T[cbind(1:(steps - 1L), 2:steps)] <- off
  }
  eigen(T, symmetric = TRUE)
}
