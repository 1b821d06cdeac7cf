# The methods of a gp_fit: coefficients, log-likelihood, covariance of the
# estimates, printing (predictions: gp_predict.R).

#' @export
coef.gp_fit <- function(object, ...) object$coefficients

#' @export
logLik.gp_fit <- function(object, ...) {
  structure(object$loglik, df = length(object$coefficients) + length(object$beta),
            nobs = object$n, class = "logLik")
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
#' original scale. For the iterative methods the traces are estimated with
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
      if (k$name == "matern") sprintf(" (smoothness %g)", k$smoothness) else "")
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
  invisible(x)
}

#' @export
summary.gp_fit <- function(object, ...) {
  se_log <- sqrt(pmax(diag(object$vcov_log), 0))
  est <- object$coefficients
  se_log[names(est) %in% names(object$fixed)] <- NA_real_     # held fixed, not estimated
  # parameters estimated on their own scale: their estimate in the log
  # column, their interval symmetric
  lg <- gp_fit_log_scale(object)
  le <- ifelse(lg, suppressWarnings(log(est)), est)
  back <- function(v) ifelse(lg, exp(v), v)
  tab <- cbind(estimate = est, "log estimate" = le, "std. error (log)" = se_log,
               lower95 = back(le - 1.96 * se_log), upper95 = back(le + 1.96 * se_log))
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
