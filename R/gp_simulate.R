#' Simulate a Gaussian process
#'
#' Draws `nsim` independent samples of \eqn{N(0, K + \tau^2 I)} at `locs`.
#'
#' `method = "exact"` multiplies standard normal vectors by the Cholesky
#' factor of the dense covariance matrix (\eqn{O(n^3)} time, \eqn{O(n^2)}
#' memory). `method = "vecchia"` samples the textbook Vecchia approximation
#' instead (as `GpGp::fast_Gp_sim`): the points are put in a random order
#' (`sample.int(n)`, drawn from R's stream before the normals), and the
#' \eqn{i}-th is conditioned on exactly its \eqn{\min(m, i - 1)} nearest
#' (Euclidean) preceding points, \eqn{m} = `neighbors`, with the exact
#' conditional mean and variance of \eqn{K + \tau^2 I} on them:
#' \eqn{y_i = b_i^\top y_{N(i)} + \sqrt{d_i}\, z_i}, i.e. \eqn{y = G^{-1} z}
#' for the sparse inverse Cholesky factor \eqn{G}. Its covariance differs
#' from the exact one (the approximation improves with `neighbors`; the
#' marginal variances are slightly below the kernel's), at \eqn{O(n m^3)}
#' cost plus the neighbour search. `"auto"` is exact up to 5000 points. Both
#' use R's random number stream (set a seed to repeat).
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
  # the Vecchia order first, then the normals, both from the user's stream
  if (method == "vecchia") ord <- sample.int(n)
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
