#' Simulate a Gaussian process
#'
#' Draws `nsim` independent samples of \eqn{N(0, K + \tau^2 I)} at `locs`.
#'
#' `method = "exact"` multiplies standard normal vectors by the Cholesky
#' factor of the dense covariance matrix (\eqn{O(n^3)} time, \eqn{O(n^2)}
#' memory). `method = "vecchia"` samples the Vecchia approximation instead:
#' with the points in a random order and each conditioned on its `neighbors`
#' nearest preceding points, \eqn{y = G^{-1} z} for the sparse inverse
#' Cholesky factor \eqn{G} (as `GpGp::fast_Gp_sim`); its covariance differs
#' from the exact one (the approximation improves with `neighbors`), at
#' \eqn{O(n m^3)} cost plus the neighbour search. `"auto"` is exact up to
#' 5000 points. Both use R's random number stream (set a seed to repeat).
#'
#' @inheritParams gp_loglik
#' @param nugget The variance added to the diagonal (independent noise).
#' @param nsim Number of samples.
#' @param method `"auto"`, `"exact"` or `"vecchia"`.
#' @param neighbors Neighbours per point for `"vecchia"` (at most 64; see
#'   [gp_control()]).
#' @return A vector (`nsim = 1`) or an `n` by `nsim` matrix.
#' @examples
#' locs <- matrix(runif(1000), ncol = 2)
#' y <- gp_simulate(locs, gk_kernel("exponential", range = 0.2), nugget = 0.01)
#' @export
gp_simulate <- function(locs, kernel, nugget = 0, nsim = 1L, method = c("auto", "exact", "vecchia"),
                        neighbors = 30L, backend = NULL) {
  locs <- gk_check_points(locs, "locs")
  if (missing(kernel)) stop("`kernel` is missing: give a gk_kernel()", call. = FALSE)
  kernel <- gp_check_kernel(kernel, ncol(locs))
  nugget <- gp_check_nugget(nugget)
  gk_check_scalar(nsim, "nsim", lower = 1, integer = TRUE)
  gp_check_neighbors(neighbors, lower = 1)
  method <- gk_match_choice(method, c("auto", "exact", "vecchia"), "method")
  backend <- gk_backend(backend)
  n <- nrow(locs)
  if (method == "auto") method <- if (n <= 5000L) "exact" else "vecchia"
  z <- matrix(stats::rnorm(n * nsim), n, nsim)
  if (method == "exact") {
    S <- kernel_matrix(locs, kernel = kernel, backend = backend)
    diag(S) <- diag(S) + nugget
    R <- tryCatch(chol(S), error = function(e) {
      stop("the covariance matrix is not positive definite (duplicated locations need a ",
           "positive nugget)", call. = FALSE)
    })
    out <- crossprod(R, z)
  } else {
    ord <- sample.int(n)
    xo <- locs[ord, , drop = FALSE]
    nb <- gp_neighbors(xo, as.integer(neighbors), backend)
    if (nb$duplicates > 0L && nugget == 0) {
      stop("`locs` has duplicated locations and the nugget is 0: use a positive nugget",
           call. = FALSE)
    }
    fac <- .Call(gk_r_gp_factor, xo, nb$nbr, kernel, NULL, nugget, gk_threads(),
                 backend == "gpu")
    out <- matrix(0, n, nsim)
    out[ord, ] <- .Call(gk_r_gp_solve, nb$nbr, fac$coef, z, gk_threads())
  }
  if (nsim == 1L) drop(out) else out
}
