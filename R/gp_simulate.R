#' Simulate a Gaussian process
#'
#' Draws `nsim` independent samples of \eqn{N(0, K + \tau^2 I)} at `locs`.
#'
#' `method = "exact"` multiplies standard normal vectors by the Cholesky
#' factor of the dense covariance matrix (\eqn{O(n^3)} time, \eqn{O(n^2)}
#' memory). `method = "vecchia"` samples a Vecchia approximation of the
#' latent process instead and adds the nugget's noise exactly: the points are
#' put in a random order (`sample.int(n)`, drawn from R's stream before the
#' normals), and the \eqn{i}-th is conditioned on exactly its
#' \eqn{\min(m, i - 1)} nearest (Euclidean) preceding points, \eqn{m} =
#' `neighbors`, with the exact conditional mean and variance of \eqn{K} on
#' them: \eqn{f_i = b_i^\top f_{N(i)} + \sqrt{d_i}\, z_i}, i.e.
#' \eqn{f = G^{-1} z} for the sparse inverse Cholesky factor \eqn{G}, and
#' \eqn{y = f + \tau e}. (\eqn{K} gets a jitter of \eqn{10^{-8}} of the
#' variance, or \eqn{10^{-6}} if that is not enough, which \eqn{\tau^2}
#' then leaves out.) Conditioning the noisy \eqn{y} on its neighbours
#' instead (`GpGp::fast_Gp_sim`'s way) is less accurate: for Matérn 3/2 with
#' a nugget of 1\% of the variance and 30 neighbours, its draws have about 2\%
#' more energy than the model in the whitened coordinates
#' (\eqn{E\,y^\top (K + \tau^2 I)^{-1} y / n = 1.02}), this way 1.00.
#' The covariance still differs from the exact one (the approximation
#' improves with `neighbors`; the marginal variances are slightly below the
#' kernel's), at \eqn{O(n m^3)} cost plus the neighbour search. `"auto"` is
#' exact up to 5000 points. Both
#' use R's random number stream (set a seed to repeat).
#'
#' With a [gp_fit()] as the first argument, `gp_simulate(fit, newlocs,
#' nsim)` draws the latent process (without the nugget) at `newlocs` given
#' the fit's data: conditional simulation, with the covariance parameters
#' and the GLS mean coefficients taken as known. `method = "exact"` draws
#' from the exact conditional distribution (the Cholesky factor of the
#' conditional covariance of the new locations, \eqn{O(n^3 + m^3)}; `"auto"`
#' up to 5000 observations and new locations together). `method =
#' "vecchia"` keeps the exact kriging mean (that of [predict.gp_fit()]) and
#' adds a Vecchia draw of the error: the new locations in a random order,
#' each conditioned on its `neighbors` nearest points among the observations
#' and the new locations before it, so that draws at nearby new locations are
#' correlated as they should be; the marginal variances are those of
#' `predict(se.method = "vecchia")` without the mean-coefficient term.
#'
#' @param locs Matrix of locations (rows), or a [gp_fit()] for conditional
#'   simulation.
#' @param kernel A [gk_kernel()] or a family name (variance and range 1); for
#'   a fit, the new locations (`newlocs`).
#' @param nugget The variance added to the diagonal (independent noise).
#' @param nsim Number of samples.
#' @param method `"auto"`, `"exact"` or `"vecchia"`.
#' @param neighbors Neighbours per point for `"vecchia"` (at most 64; see
#'   [gp_control()]); 30 by default (an unconditional draw needs only its
#'   covariance to a few percent), 60 for a fit (whose draws should match
#'   its kriging variances to well under 1%).
#' @param backend See [gk_backend()]; for a fit, the fit's backend.
#' @param coords,radius,distance Locations as longitude and latitude on a
#'   sphere, and their distance (see Locations on the sphere in
#'   [gp_loglik()]); for a fit, the fit's.
#' @param angle Geometric anisotropy (2 or 3 columns): the rotation in
#'   radians of the axes that `kernel`'s ranges belong to, as
#'   `ranges = "anisotropic"` in [gp_loglik()] (one angle in 2D, three in 3D);
#'   for a fit, the fit's.
#' @param ... For a fit: `newlocs` and `newX`, the design matrix at `newlocs` (as in [predict.gp_fit()]).
#' @return A vector (`nsim = 1`) or an `n` (for a fit: `nrow(newlocs)`) by
#'   `nsim` matrix.
#' @examples
#' locs <- matrix(runif(1000), ncol = 2)
#' y <- gp_simulate(locs, gk_kernel("exponential", range = 0.2), nugget = 0.01)
#' fit <- gp_fit(locs, y, kernel = "exponential", backend = "cpu")
#' draws <- gp_simulate(fit, newlocs = matrix(runif(20), ncol = 2), nsim = 5)
#' @export
gp_simulate <- function(locs, kernel, nugget = 0, nsim = 1L, method = c("auto", "exact", "vecchia"),
                        neighbors = 30L, coords = "euclidean", radius = 6371,
                        distance = "chordal", angle = NULL, backend = NULL, ...) {
  if (inherits(locs, "gp_fit")) {
    if (!missing(nugget)) stop("a fit's simulation has the fit's nugget", call. = FALSE)
    if (missing(neighbors)) neighbors <- 60L
    if (!missing(kernel)) return(gp_simulate_fit(locs, newlocs = kernel, nsim = nsim,
                                                 method = method, neighbors = neighbors, ...))
    return(gp_simulate_fit(locs, nsim = nsim, method = method, neighbors = neighbors, ...))
  }
  if (...length()) stop("unused arguments: ", paste(names(list(...)), collapse = ", "),
                        call. = FALSE)
  coords <- gp_check_coords(coords, radius, distance)
  locs <- gp_locations(locs, coords)
  if (!is.null(angle)) {
    # geometric anisotropy: the kernel's ranges are those of the rotated axes
    groups <- gp_range_groups("anisotropic", ncol(locs))   # 2 or 3 columns
    gp_check_coords_ranges(coords, groups)
    locs <- gp_rotate_points(locs, gp_check_angles(angle, gp_angle_count(ncol(locs))))
  }
  if (missing(kernel)) stop("`kernel` is missing: give a gk_kernel() or a family name", call. = FALSE)
  kernel <- gp_coords_kernel(gp_check_kernel(kernel, ncol(locs)), coords)
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
    nb <- gp_neighbors(gp_neighbor_points(xo, kernel$range), as.integer(neighbors), backend)
    if (nb$duplicates > 0L && nugget == 0) {
      stop("`locs` has duplicated locations and the nugget is 0: use a positive nugget",
           call. = FALSE)
    }
    out <- matrix(0, n, nsim)
    out[ord, ] <- gp_vecchia_draw(xo, nb$nbr, kernel, nugget, z, backend)
  }
  if (nsim == 1L) drop(out) else out
}

# Conditional simulation at newlocs given a fit's data (gp_simulate()).
gp_simulate_fit <- function(fit, newlocs, nsim = 1L, method = c("auto", "exact", "vecchia"),
                            neighbors = 60L, newX = NULL) {
  gp_check_fit_object(fit, "locs")
  if (missing(newlocs)) stop("`newlocs` is missing: the locations to simulate at", call. = FALSE)
  newlocs <- gp_new_locations(fit, newlocs)
  gk_check_scalar(nsim, "nsim", lower = 1, integer = TRUE)
  gp_check_neighbors(neighbors, lower = 1)
  method <- gk_match_choice(method, c("auto", "exact", "vecchia"), "method")
  n <- fit$n
  m <- nrow(newlocs)
  if (method == "auto") method <- if (n + m <= 5000L) "exact" else "vecchia"
  mean <- gp_kriging_mean(fit, newlocs, gp_new_design(fit, newX, m))
  k <- fit$kernel
  if (method == "exact") {
    solve_cov <- gp_solver(fit)
    C <- kernel_matrix(fit$locs, newlocs, k, backend = fit$backend)
    V <- kernel_matrix(newlocs, kernel = k, backend = fit$backend) - crossprod(C, solve_cov(C))
    # pivoted: new locations at observed ones have (nearly) zero variance
    R <- tryCatch(suppressWarnings(chol((V + t(V)) / 2, pivot = TRUE)), error = function(e) NULL)
    if (is.null(R)) stop("the conditional covariance could not be factored", call. = FALSE)
    R[, attr(R, "pivot")] <- R
    R[row(R) > attr(R, "rank")] <- 0
    z <- matrix(stats::rnorm(m * nsim), m, nsim)
    out <- mean + crossprod(R, z)
  } else {
    ord <- sample.int(m)
    z <- matrix(stats::rnorm(m * nsim), m, nsim)
    # the observations in the fit's random order (the neighbour search's
    # blocks assume one); only neighbours among the new locations are used
    obs <- if (length(fit$prob$order) == n) fit$locs[fit$prob$order, , drop = FALSE] else fit$locs
    pts <- rbind(obs, newlocs[ord, , drop = FALSE])
    nbr <- gp_neighbors(gp_neighbor_points(pts, k$range), as.integer(min(neighbors, n + m - 1L)),
                        fit$backend)$nbr
    nbr <- nbr[n + seq_len(m), , drop = FALSE]
    cond <- gp_conditionals(fit, obs, newlocs[ord, , drop = FALSE], nbr)
    # the error e = x - E[x | data] of the Vecchia model: e_i = b_i' e_N(i) +
    # sqrt(d_i) z_i, the observations' errors being 0, as G^-1 z over the new
    # locations, on the correlation scale (d floored so that G's diagonal
    # stays finite)
    sd <- sqrt(pmax(cond[, 1L], 1e-280))
    new_nbr <- nbr - n
    keep <- new_nbr > 0L
    new_nbr[!keep] <- 0L
    coef <- cbind(1 / sd, ifelse(keep, -cond[, -1L, drop = FALSE] / sd, 0))
    e <- matrix(0, m, nsim)
    e[ord, ] <- .Call(gk_r_gp_solve, new_nbr, coef, z, gk_threads())
    out <- mean + sqrt(k$variance) * e
  }
  if (nsim == 1L) drop(out) else out
}

# A Vecchia draw, G^-1 z, of the latent process, plus the nugget's noise drawn
# exactly. Vecchia on the noisy covariance K + nugget I (as GpGp's
# fast_Gp_sim) loses small-scale structure: at 30 neighbours, Matern 3/2 with
# a nugget of 1% of the variance, its draws carry about 2% more energy in
# K's whitened coordinates (E y' (K + nugget I)^-1 y / n) than the model's,
# enough to move a million-point fit's estimates by several standard errors;
# the latent process's draws are within 0.2%. The latent factor gets a jitter
# (1e-8, else 1e-6 of the variance: its conditionals on nearby points are
# nearly singular for smooth kernels) that the noise then leaves out; if even
# that fails it falls back on the noisy covariance.
gp_vecchia_draw <- function(xo, nbr, kernel, nugget, z, backend) {
  factor_with <- function(jitter) {
    tryCatch(.Call(gk_r_gp_factor, xo, nbr, kernel, NULL, jitter, NULL, gk_threads(),
                   backend == "gpu", "matrix"),
             error = function(e) if (jitter == nugget) stop(e) else NULL)
  }
  jitters <- c(pmin(nugget, kernel$variance * c(1e-8, 1e-6)), nugget)
  for (jitter in unique(jitters)) {
    fac <- factor_with(jitter)
    if (!is.null(fac)) break
  }
  out <- .Call(gk_r_gp_solve, nbr, fac$coef, z, gk_threads())
  rest <- nugget - jitter
  if (rest > 0) out <- out + sqrt(rest) * matrix(stats::rnorm(length(out)), nrow(out))
  out
}
