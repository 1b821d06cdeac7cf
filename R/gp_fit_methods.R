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
  J <- diag(object$coefficients)
  out <- J %*% v %*% J
  dimnames(out) <- list(names(object$coefficients), names(object$coefficients))
  out
}

#' @export
print.gp_fit <- function(x, ...) {
  k <- x$kernel
  cat(sprintf("Gaussian-process fit: %s kernel%s, n = %d, method \"%s\"\n", k$name,
              if (isTRUE(x$estimate_smoothness)) " (smoothness estimated)" else
                if (k$name == "matern") sprintf(" (smoothness %g)", k$smoothness) else
                  if (!is.null(k$radius)) sprintf(" (radius %g)", k$radius) else "",
              x$n, x$method))
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
  tab <- cbind(estimate = est, "log estimate" = log(est), "std. error (log)" = se_log,
               lower95 = exp(log(est) - 1.96 * se_log), upper95 = exp(log(est) + 1.96 * se_log))
  structure(list(fit = object, table = tab), class = "summary.gp_fit")
}

#' @export
print.summary.gp_fit <- function(x, ...) {
  print(x$fit)
  cat("\ncovariance parameters (standard errors from the Fisher information):\n")
  print(signif(x$table, 4))
  invisible(x)
}
