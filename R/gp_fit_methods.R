# The methods of a gp_fit: coefficients, log-likelihood, covariance of the
# estimates, printing (predictions: gp_predict.R).

#' @export
coef.gp_fit <- function(object, ...) object$coefficients

#' @export
logLik.gp_fit <- function(object, ...) {
  structure(object$loglik, df = length(object$coefficients) + length(object$beta),
            nobs = object$n, class = "logLik")
}

# The inverse of the Fisher information of the free parameters, whose
# angles are `angle` (logical). Where the ranges are (nearly) equal the
# covariance hardly depends on the angles: the information is singular in
# them, and they get NA standard errors, the others those of the angles held
# at their estimates (and the attribute "angles", TRUE, for the warning).
gp_inverse_information <- function(info, angle) {
  # with angles, a looser test of singularity than solve()'s: the angles'
  # information is then rounding noise of their central differences
  tol <- if (any(angle)) 1e-12 else .Machine$double.eps
  invert <- function(M) {
    if (!all(is.finite(M))) return(NULL)
    tryCatch(solve(M, tol = tol), error = function(e) NULL)
  }
  out <- invert(info)
  if (!is.null(out)) return(out)
  out <- info * NA_real_
  if (!any(angle)) return(out)
  rest <- invert(info[!angle, !angle, drop = FALSE])
  if (!is.null(rest)) out[!angle, !angle] <- rest
  attr(out, "angles") <- TRUE
  out
}

#' Covariance of the estimates of a Gaussian-process fit
#'
#' The inverse of the expected (Fisher) information of the covariance
#' parameters, \eqn{I_{ij} = \tfrac12 \mathrm{tr}(\Sigma^{-1}\partial_i\Sigma\,
#' \Sigma^{-1}\partial_j\Sigma)}, evaluated at the maximum-likelihood
#' estimate (ML with the mean coefficients profiled out by GLS, as
#' [gp_fit()] maximises, not REML; not the observed information), on the
#' scale of the log parameters (`log_variance`, `log_range` or `log_range1`, ..., `log_nugget`
#' and, when it was estimated, `log_smoothness`), where the normal
#' approximation is better; with `log = FALSE`, by the delta method on the
#' original scale. The angles of an anisotropic fit (`angle`, or `angle1`,
#' `angle2`, `angle3`) are on their own scale (radians) in both; where the
#' ranges are (nearly) equal the angle is not identifiable and its rows and
#' columns are NA (see [gp_fit()]). For the iterative methods the traces are estimated with
#' the probes (see [gp_loglik()]). Parameters held `fixed` have zero rows and
#' columns; an estimate on a bound makes the normal approximation doubtful
#' (see `fit$at_bound`). The covariance of the mean coefficients is
#' `fit$vcov_beta` (see [gp_fit()]).
#' @param object A [gp_fit()].
#' @param log Log scale (default) or the original parameters.
#' @param ... Unused.
#' @return A square matrix over the log parameters: 3 x 3 for one range, one
#'   more row per further range group (`log_range1`, `log_range2`, ...) and
#'   for the smoothness.
#' @export
vcov.gp_fit <- function(object, log = TRUE, ...) {
  v <- object$vcov_log
  if (log) return(v)
  # (parameters estimated on their own scale: the identity)
  J <- diag(ifelse(gp_fit_log_scale(object), object$coefficients, 1), length(object$coefficients))
  out <- J %*% v %*% J
  dimnames(out) <- list(names(object$coefficients), names(object$coefficients))
  out
}

#' @export
print.gp_fit <- function(x, ...) {
  k <- x$kernel
  what <- if (inherits(k, "gk_formula")) {
    # the fit's kernel is .variance * (F): F is the third element's inside
    paste0("variance * F + nugget, F = ",
           paste(deparse(k$expr[[3L]][[2L]], width.cutoff = 500L), collapse = " "))
  } else {
    paste0(k$name, " kernel", if (isTRUE(x$estimate_smoothness)) " (smoothness estimated)" else
      if (k$name == "matern") sprintf(" (smoothness %g)", k$smoothness) else
        if (!is.null(k$radius)) sprintf(" (radius %g)", k$radius) else "")
  }
  cat(sprintf("Gaussian-process fit: %s, n = %d, method \"%s\"\n", what, x$n, x$method))
  print(signif(x$coefficients, 5))
  if (length(x$beta)) {
    cat("mean coefficients (GLS; standard errors at the estimated covariance):\n")
    se <- if (length(x$vcov_beta)) sqrt(pmax(diag(x$vcov_beta), 0)) else NA_real_ * x$beta
    tab <- rbind(estimate = x$beta, "std. error" = se)
    colnames(tab) <- if (is.null(names(x$beta))) paste0("beta", seq_along(x$beta)) else
      names(x$beta)
    print(signif(tab, 5))
  }
  if (length(x$fixed)) {
    cat("fixed:", paste(names(x$fixed), signif(x$fixed, 5), sep = " = ", collapse = ", "), "\n")
  }
  cat(sprintf("log-likelihood %.4f%s; %d evaluations (%s)\n", x$loglik,
              if (x$method == "dense") "" else if (x$method == "vecchia")
                sprintf(" (Vecchia, %d neighbours)", x$prob$control$neighbors) else
                  sprintf(" +/- %.3g (3 s.e.)", 3 * x$loglik_se),
              x$evaluations, x$convergence))
  if (length(x$at_bound)) {
    cat("note:", gp_bound_text(x), "(see `lower`, `upper` in ?gp_fit)\n")
  }
  if (isTRUE(x$angle_unidentified)) {
    cat("note: the angle is not identifiable (ranges nearly equal); its standard error is NA\n")
  }
  invisible(x)
}

#' @export
summary.gp_fit <- function(object, ...) {
  se_log <- sqrt(pmax(diag(object$vcov_log), 0))
  est <- object$coefficients
  se_log[names(est) %in% names(object$fixed)] <- NA_real_     # held fixed, not estimated
  # parameters estimated on their own scale (angles, a formula's signed
  # ones): no log, a symmetric interval
  lg <- gp_fit_log_scale(object)
  par <- ifelse(lg, suppressWarnings(log(est)), est)
  back <- function(v) ifelse(lg, exp(v), v)
  tab <- cbind(estimate = est, "log estimate" = ifelse(lg, par, NA_real_),
               "std. error (log)" = se_log, lower95 = back(par - 1.96 * se_log),
               upper95 = back(par + 1.96 * se_log))
  structure(list(fit = object, table = tab), class = "summary.gp_fit")
}

#' @export
print.summary.gp_fit <- function(x, ...) {
  print(x$fit)
  cat("\ncovariance parameters (standard errors from the Fisher information):\n")
  print(signif(x$table, 4))
  invisible(x)
}

# Which coefficients a fit estimated in their logs (all, before formulas).
gp_fit_log_scale <- function(fit) {
  if (is.null(fit$log_scale)) rep(TRUE, length(fit$coefficients)) else unname(fit$log_scale)
}

# The GLS covariance of the mean coefficients, (X' Sigma^-1 X)^-1, in the
# user's units (Sigma is sy^2 times the scaled problem's).
gp_vcov_beta <- function(xsx, sy) {
  if (is.null(xsx) || !length(xsx)) return(matrix(0, 0, 0))
  v <- tryCatch(solve(xsx), error = function(e) xsx * NA_real_) * sy^2
  dimnames(v) <- list(colnames(xsx), colnames(xsx))
  v
}
