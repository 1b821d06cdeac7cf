#' Kriging predictions from a Gaussian-process fit
#'
#' The conditional mean (universal kriging, with the GLS mean) at new
#' locations and, with `se.fit = TRUE`, its standard error: the kriging
#' standard deviation of the latent process (without the nugget), including
#' the uncertainty of the estimated mean coefficients; the covariance
#' parameters are taken as known. The mean is always exact (one product with
#' the fit's \eqn{\Sigma^{-1}(y - X\hat\beta)}).
#'
#' @section Standard errors:
#' `se.method = "exact"` computes
#' \eqn{k(0) - c^\top\Sigma^{-1}c + u^\top(X^\top\Sigma^{-1}X)^{-1}u},
#' \eqn{u = x_0 - X^\top\Sigma^{-1}c}, with all \eqn{n} observations: from
#' the Cholesky factor for `"dense"` fits, else one preconditioned
#' conjugate-gradient solve per new location (in blocks), which is slow for
#' many new points.
#'
#' `se.method = "vecchia"` conditions each new location on its `neighbors`
#' nearest observations only (as GpGp's Vecchia predictions): the simple
#' kriging variance \eqn{k(0) - c_N^\top \Sigma_{NN}^{-1} c_N}, with the
#' mean coefficients' term computed exactly (with the fit's
#' \eqn{\Sigma^{-1}X}). Conditioning on fewer observations never lowers the
#' simple kriging variance, so these standard errors are upper bounds of the
#' exact ones; how far above depends on how
#' many observations fall within the range: with 60 neighbours, well under 1%
#' where a range holds a few dozen observations, but 10% or more with a range
#' that spans much of a dense data set and a large nugget. `se.check` measures
#' it on the data at hand. The neighbour search and the small systems run on
#' the GPU of the fit's backend, in chunks.
#'
#' `"auto"` is `"exact"` for fits by the dense method and `"vecchia"`
#' otherwise.
#'
#' @param object A [gp_fit()].
#' @param newlocs Matrix of new locations (longitude, latitude for a fit with
#'   `coords = "lonlat"`).
#' @param newX Design matrix at the new locations (not needed for the
#'   default constant mean).
#' @param se.fit Also return standard errors.
#' @param se.method `"auto"`, `"exact"` or `"vecchia"` (see Standard errors).
#' @param neighbors Observations each new location is conditioned on with
#'   `se.method = "vecchia"` (at most 64). 60 by default, more than
#'   [gp_control()]'s 40: these standard errors are results, wanted to well
#'   under 1% of the exact ones, while the preconditioner only speeds up
#'   conjugate gradients.
#' @param se.check With `se.method = "vecchia"`, the number of new locations
#'   (drawn at random) at which the exact standard error is also computed.
#' @param ... Unused.
#' @return A vector of predictions, or with `se.fit = TRUE` a list with `fit`,
#'   `se.fit` and `se.method`, and with `se.check` a data frame `check` of
#'   the checked locations (`index`, `exact`, `vecchia`).
#' @export
predict.gp_fit <- function(object, newlocs, newX = NULL, se.fit = FALSE,
                           se.method = c("auto", "exact", "vecchia"), neighbors = 60L,
                           se.check = 0L, ...) {
  gp_check_fit_object(object)   # an edited alpha or beta (checks.R)
  newlocs <- gp_new_locations(object, newlocs)
  se.method <- gk_match_choice(se.method, c("auto", "exact", "vecchia"), "se.method")
  gp_check_neighbors(neighbors, lower = 1)
  gk_check_scalar(se.check, "se.check", lower = 0, integer = TRUE)
  newX <- gp_new_design(object, newX, nrow(newlocs))
  mean <- gp_kriging_mean(object, newlocs, newX)
  if (!se.fit) return(mean)
  if (se.method == "auto") se.method <- if (object$prob$method == "dense") "exact" else "vecchia"
  if (se.method == "exact") {
    return(list(fit = mean, se.fit = gp_se_exact(object, newlocs, newX), se.method = "exact"))
  }
  se <- gp_se_vecchia(object, newlocs, newX, neighbors)
  out <- list(fit = mean, se.fit = se,
              se.method = sprintf("vecchia (%d neighbours): upper bounds of the exact values",
                                  min(neighbors, object$n)))
  if (se.check > 0) {
    at <- sort(sample.int(nrow(newlocs), min(se.check, nrow(newlocs))))
    exact <- gp_se_exact(object, newlocs[at, , drop = FALSE], newX[at, , drop = FALSE])
    out$check <- data.frame(index = at, exact = exact, vecchia = se[at])
  }
  out
}

# New locations as the fit's kernel sees them (converted from lon/lat for a
# fit on the sphere), checked against the fit's dimension.
gp_new_locations <- function(fit, newlocs) {
  newlocs <- gp_locations(newlocs, gp_fit_coords(fit), "newlocs")
  if (ncol(newlocs) != ncol(fit$locs)) {
    stop("`newlocs` has ", ncol(newlocs), " columns but the fit has ", ncol(fit$locs),
         call. = FALSE)
  }
  newlocs
}

# The kriging mean at checked new locations (gp_new_locations) with the
# design newX (gp_new_design): exact, from the fit's Sigma^-1 (y - X beta).
gp_kriging_mean <- function(fit, newlocs, newX) {
  mean <- drop(kernel_matvec(newlocs, fit$locs, fit$alpha, fit$kernel, backend = fit$backend))
  if (ncol(newX)) mean <- mean + drop(newX %*% fit$beta)
  mean
}

# The coordinates of a fit's locations (fits made before they were kept: plane).
gp_fit_coords <- function(fit) {
  if (is.null(fit$coords)) list(type = "euclidean", radius = 1) else fit$coords
}

# The design matrix at m new locations: newX checked, or the constant mean's.
gp_new_design <- function(object, newX, m) {
  p <- ncol(object$X)
  if (is.null(newX)) {
    if (!object$X_default && p > 0L) {
      stop("the fit has a design matrix `X`: give `newX` at the new locations", call. = FALSE)
    }
    return(matrix(1, m, p))
  }
  if (is.numeric(newX) && is.null(dim(newX))) newX <- matrix(newX, ncol = 1L)
  if (!is.numeric(newX) || nrow(newX) != m || ncol(newX) != p || anyNA(newX) ||
      any(!is.finite(newX))) {
    stop("`newX` must be a finite numeric ", m, " x ", p, " matrix", call. = FALSE)
  }
  newX
}

# Exact kriging standard errors at newlocs (design newX).
gp_se_exact <- function(object, newlocs, newX) {
  kp <- gp_kriging_pieces(object, newlocs)
  var <- gp_kernel_diag(object$kernel, newlocs) - kp$vq
  if (ncol(newX)) {
    U <- t(newX) - kp$xsc
    var <- var + colSums(U * solve(kp$xsx, U))
  }
  sqrt(pmax(var, 0))
}

# The conditionals of the latent process at the points `at` given the
# neighbours nbr (rows x m, 1-based into rbind(obs, at); 0: none) under the
# fit's covariance, the nugget on the observations only: rows x (m + 1), the
# variance d in column 1 and the weights b after it (gp_rows_options in
# gp.h), on the correlation scale (d in units of the kernel's variance), so
# that tiny or huge data scales stay in range.
gp_conditionals <- function(fit, obs, at, nbr) {
  k <- fit$kernel
  n <- nrow(obs)
  storage.mode(nbr) <- "integer"
  if (inherits(k, "gk_formula")) {   # its CPU function; d in the covariance's units
    return(.Call(gk_r_gp_factor, rbind(obs, at), nbr, gk_formula_native(k, ncol(obs), "cpu"),
                 NULL, as.double(fit$nugget), c(n + 1L, n, 1L), gk_threads(), FALSE, "matrix")$coef)
  }
  .Call(gk_r_gp_factor, rbind(obs, at), nbr, gp_kernel_with(k, 1, k$range), NULL,
        as.double(fit$nugget / k$variance), c(n + 1L, n, 1L), gk_threads(),
        fit$backend == "gpu", "matrix")$coef
}

# Kriging standard errors from each new location's m nearest observations
# (predict.gp_fit, Standard errors).
gp_se_vecchia <- function(object, newlocs, newX, neighbors) {
  m <- as.integer(min(neighbors, object$n))
  var <- numeric(nrow(newlocs))
  six <- object$six   # fits saved before it was kept: solved again
  if (ncol(newX) && is.null(six)) six <- gp_solver(object)(object$X)
  for (s in gp_chunks(nrow(newlocs), 65536L)) {
    at <- newlocs[s, , drop = FALSE]
    range <- object$kernel$range
    nb <- knn(gp_neighbor_points(at, range), gp_neighbor_points(object$locs, range), k = m,
              backend = object$backend)$index
    cond <- gp_conditionals(object, object$locs, at, nb)
    var[s] <- cond[, 1L] * if (inherits(object$kernel, "gk_formula")) 1 else object$kernel$variance
    if (ncol(newX)) {
      # the mean coefficients' term exactly: u = x0 - X' Sigma^-1 c, with the
      # fit's Sigma^-1 X
      U <- newX[s, , drop = FALSE] -
        kernel_matvec(at, object$locs, six, object$kernel, backend = object$backend)
      var[s] <- var[s] + rowSums((U %*% object$vcov_beta) * U)
    }
  }
  sqrt(pmax(var, 0))
}

# 1:n in consecutive pieces of at most `size`.
gp_chunks <- function(n, size) {
  if (n == 0L) return(list())
  split(seq_len(n), ceiling(seq_len(n) / size))
}

# What the kriging variances at newlocs need, with C = K(locs, newlocs):
# list(vq = diag(C' Sigma^-1 C), xsc = X' Sigma^-1 C (p x m), xsx = X' Sigma^-1 X).
# With the dense method on a GPU, Sigma's factor stays there
# (gk_r_gp_dense_krige); otherwise C comes in chunks of new points through
# gp_solver().
gp_kriging_pieces <- function(object, newlocs) {
  if (object$prob$method == "dense" && object$backend == "gpu" &&
      !inherits(object$kernel, "gk_formula")) {
    return(.Call(gk_r_gp_dense_krige, object$locs, newlocs, object$kernel,
                 as.double(object$nugget), object$X))
  }
  m <- nrow(newlocs)
  p <- ncol(object$X)
  solve_cov <- gp_solver(object)
  SiX <- if (p) solve_cov(object$X) else matrix(0, object$n, 0)
  out <- list(vq = numeric(m), xsc = matrix(0, p, m), xsx = crossprod(object$X, SiX))
  for (s in gp_chunks(m, max(1L, min(256L, floor(2^25 / object$n))))) {
    C <- kernel_matrix(object$locs, newlocs[s, , drop = FALSE], object$kernel,
                       backend = object$backend)
    out$vq[s] <- colSums(C * solve_cov(C))
    if (p) out$xsc[, s] <- crossprod(SiX, C)
  }
  out
}

# Sigma^-1 B at the fitted parameters (user's point order), dense or by
# preconditioned CG.
gp_solver <- function(object) {
  prob <- object$prob
  if (prob$method == "dense") {
    S <- kernel_matrix(object$locs, kernel = object$kernel, backend = object$backend)
    diag(S) <- diag(S) + object$nugget
    R <- chol(S)
    return(function(B) backsolve(R, backsolve(R, B, transpose = TRUE)))
  }
  pre <- gp_preconditioner(prob, object$kernel, object$nugget)
  op <- gp_operator(prob, object$kernel, object$nugget)
  A <- function(V) pre$G(op$mult(pre$Gt(V)))
  cg_solve <- gp_cg_solver(prob, op, pre, A)
  ord <- prob$order
  function(B) {
    out <- B
    out[ord, ] <- cg_solve(pre$G(B[ord, , drop = FALSE]))$gt_x
    out
  }
}
