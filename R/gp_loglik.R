# The Gaussian log-likelihood with a profiled linear mean, its gradient in
# the log parameters and the Fisher information: by dense Cholesky, or by
# preconditioned conjugate gradients and stochastic Lanczos quadrature on the
# tiled or H2 operators.

#' Gaussian-process log-likelihood
#'
#' The log-likelihood of \eqn{y \sim N(X\beta, \Sigma)} with
#' \eqn{\Sigma = K + \tau^2 I}, \eqn{K} the covariance of `kernel` at `locs` and
#' \eqn{\tau^2} the `nugget`, at the generalized-least-squares estimate of
#' \eqn{\beta} (the profile likelihood, as `fields::mKrig` and GpGp report):
#' \deqn{\ell = -\tfrac12\left(n \log 2\pi + \log\det\Sigma + (y - X\hat\beta)^\top
#' \Sigma^{-1}(y - X\hat\beta)\right).}
#'
#' @section Methods:
#' `"dense"` forms \eqn{\Sigma} with [kernel_matrix()] and uses its Cholesky
#' factor: exact, \eqn{O(n^3)}, the reference. `"tiled"` (any dimension) and
#' `"h2"` (2 or 3 dimensions) never form \eqn{\Sigma}: products with it come
#' from the tiled reductions ([kernel_matvec()], exact) or from an
#' [h2_matrix()] (approximate, \eqn{O(n)}). Solves use conjugate gradients
#' preconditioned by a Vecchia (FSAI) factor \eqn{G}, \eqn{G \Sigma G^\top
#' \approx I}, built from each point's `neighbors` nearest preceding points
#' in a random order ([knn()] finds them); all right-hand sides and probes
#' share each operator call. The log-determinant is
#' \eqn{\log\det\Sigma = \log\det(G\Sigma G^\top) - 2\log\det G}: the second
#' term is exact, the first is estimated by stochastic Lanczos quadrature
#' from the same conjugate-gradient runs on `probes` Rademacher vectors. Its
#' standard error over the probes is reported (`logdet_se`; the
#' log-likelihood's is half of it); `error` is three standard errors. The
#' probes are fixed by `control$seed`, so the result is a smooth function of
#' the parameters. The H2 approximation error is not part of `error`.
#' `"auto"` is `"dense"` up to `control$dense_max` points, then `"tiled"`.
#'
#' @section Gradient:
#' With `gradient = TRUE`, the derivatives in `log(variance)`, `log(range)`
#' and `log(nugget)` (isotropic range only):
#' \eqn{\partial\ell = \tfrac12 (\alpha^\top \partial\Sigma\, \alpha -
#' \mathrm{tr}(\Sigma^{-1}\partial\Sigma))}, \eqn{\alpha = \Sigma^{-1}(y - X\hat\beta)}.
#' The range derivative of the kernel is itself a kernel of the package's
#' vocabulary, evaluated by the same reductions (or H2 matrix). Traces are
#' the exact trace of the preconditioner's part plus a stochastic correction
#' on the same probes.
#'
#' @param locs Numeric matrix of locations, one row per observation.
#' @param y Numeric vector of observations, without NA.
#' @param X Design matrix of the linear mean (`nrow(locs)` rows); `NULL` is
#'   a constant mean (an intercept), a matrix with no columns a zero mean.
#' @param kernel A [gk_kernel()]: `"exponential"`, `"matern"`, `"gaussian"`,
#'   `"cauchy"` or `"inverse_multiquadric"`, with its variance and range.
#' @param nugget The variance added to the diagonal (non-negative).
#' @param method `"auto"`, `"dense"`, `"tiled"` or `"h2"` (see Methods).
#' @param gradient Also compute the gradient in the log parameters.
#' @param control Settings from [gp_control()].
#' @param backend `"auto"`, `"gpu"` or `"cpu"`; see [gk_backend()].
#' @return An object of class `gp_loglik`: a list with `loglik`, `se` (its
#'   standard error), `error` (three standard errors), `logdet`, `logdet_se`,
#'   `quadratic`, `beta`, `gradient` (named, when asked), `gradient_se`,
#'   `cg_iterations` (largest over right-hand sides), `probes`, `method`, `n`.
#' @examples
#' locs <- matrix(runif(400), ncol = 2)
#' k <- gk_kernel("matern", range = 0.2, smoothness = 1.5)
#' y <- gp_simulate(locs, k, nugget = 0.1)
#' gp_loglik(locs, y, kernel = k, nugget = 0.1, method = "dense")
#' gp_loglik(locs, y, kernel = k, nugget = 0.1, method = "tiled", gradient = TRUE,
#'           backend = "cpu")
#' @export
gp_loglik <- function(locs, y, X = NULL, kernel, nugget, method = "auto", gradient = FALSE,
                      control = gp_control(), backend = NULL) {
  locs <- gk_check_points(locs, "locs")
  if (missing(kernel)) stop("`kernel` is missing: give a gk_kernel()", call. = FALSE)
  if (missing(nugget)) stop("`nugget` is missing: give the variance added to the diagonal",
                            call. = FALSE)
  kernel <- gp_check_kernel(kernel, ncol(locs))
  nugget <- gp_check_nugget(nugget)
  data <- gp_check_data(y, X, nrow(locs))
  if (!inherits(control, "gp_control")) stop("`control` must come from gp_control()", call. = FALSE)
  backend <- gk_backend(backend)
  method <- gp_method(method, nrow(locs), ncol(locs), control)
  prob <- gp_problem(locs, data$y, data$X, method, control, backend)
  gp_check_duplicates(prob, nugget)
  gp_evaluate(prob, kernel, nugget, gradient = isTRUE(gradient))
}

gp_method <- function(method, n, dim, control) {
  method <- gk_match_choice(method, c("auto", "dense", "tiled", "h2"), "method")
  if (method == "auto") method <- if (n <= control$dense_max) "dense" else "tiled"
  if (method == "h2" && !dim %in% c(2L, 3L)) {
    stop("method = \"h2\" needs locations in 2 or 3 dimensions; use \"tiled\"", call. = FALSE)
  }
  method
}

gp_evaluate <- function(prob, kernel, nugget, gradient = FALSE, fisher = FALSE) {
  if (prob$method == "dense") return(gp_evaluate_dense(prob, kernel, nugget, gradient, fisher))
  gp_evaluate_iterative(prob, kernel, nugget, gradient, fisher)
}

gp_result <- function(prob, loglik_parts, beta, grad, grad_se, fisher, iterations, extra = list()) {
  n <- prob$n
  loglik <- -0.5 * (n * log(2 * pi) + loglik_parts$logdet + loglik_parts$quadratic)
  se <- loglik_parts$logdet_se / 2
  structure(c(list(loglik = loglik, se = se, error = 3 * se, logdet = loglik_parts$logdet,
                   logdet_se = loglik_parts$logdet_se, quadratic = loglik_parts$quadratic,
                   beta = beta, gradient = grad, gradient_se = grad_se, fisher = fisher,
                   cg_iterations = iterations,
                   probes = if (prob$method == "dense") 0L else prob$control$probes,
                   method = prob$method, n = n), extra),
            class = "gp_loglik")
}

gp_param_names <- c("log_variance", "log_range", "log_nugget")

gp_evaluate_dense <- function(prob, kernel, nugget, gradient, fisher) {
  K <- kernel_matrix(prob$locs, kernel = kernel, backend = prob$backend)
  S <- K
  diag(S) <- diag(S) + nugget
  R <- tryCatch(chol(S), error = function(e) {
    stop("the covariance matrix is not positive definite (duplicated or nearly duplicated ",
         "locations need a larger nugget)", call. = FALSE)
  })
  W <- backsolve(R, backsolve(R, cbind(prob$y, prob$X), transpose = TRUE))
  p <- ncol(prob$X)
  beta <- gp_gls_beta(prob$X, W[, -1L, drop = FALSE], prob$y, W[, 1L])
  alpha <- W[, 1L] - if (p) W[, -1L, drop = FALSE] %*% beta else 0
  resid <- prob$y - if (p) prob$X %*% beta else 0
  parts <- list(logdet = 2 * sum(log(diag(R))), logdet_se = 0,
                quadratic = sum(resid * alpha))
  grad <- NULL
  info <- NULL
  if (gradient || fisher) {
    Sinv <- chol2inv(R)
    D <- kernel_matrix(prob$locs, kernel = gp_dlogrange_kernel(kernel), backend = prob$backend)
    derivs <- list(K, D, diag(nugget, prob$n))
    grad <- vapply(derivs, function(M) 0.5 * (sum(alpha * (M %*% alpha)) - sum(Sinv * M)),
                   numeric(1))
    names(grad) <- gp_param_names
    if (fisher) {
      SM <- lapply(derivs, function(M) Sinv %*% M)
      info <- outer(1:3, 1:3, Vectorize(function(i, j) 0.5 * sum(SM[[i]] * t(SM[[j]]))))
      dimnames(info) <- list(gp_param_names, gp_param_names)
    }
  }
  gp_result(prob, parts, beta, grad, if (!is.null(grad)) stats::setNames(rep(0, 3), gp_param_names),
            info, 0L, list(alpha = drop(alpha)))
}

# GLS coefficients from Sigma^-1 X and Sigma^-1 y.
gp_gls_beta <- function(X, SiX, y, Siy) {
  if (!ncol(X)) return(numeric(0))
  beta <- solve(crossprod(X, SiX), crossprod(X, Siy))
  stats::setNames(drop(beta), colnames(X))
}

gp_evaluate_iterative <- function(prob, kernel, nugget, gradient, fisher) {
  ctl <- prob$control
  need_d <- gradient || fisher
  pre <- gp_preconditioner(prob, kernel, nugget, need_d)
  op <- gp_operator(prob, kernel, nugget, need_d)
  A <- function(V) pre$G(op$mult(pre$Gt(V)))
  Z <- prob$probes
  m <- ncol(Z)
  p <- ncol(prob$X)
  data_cols <- seq_len(p + 1L)
  probe_cols <- p + 1L + seq_len(m)
  cg <- gp_block_cg(A, cbind(pre$G(cbind(prob$y, prob$X)), Z), ctl$tol, ctl$maxit,
                    track = probe_cols)
  if (!cg$converged) {
    warning("conjugate gradients did not converge in ", ctl$maxit, " iterations; the ",
            "log-likelihood is inaccurate (raise control$maxit or the nugget)", call. = FALSE)
  }
  W <- pre$Gt(cg$x[, data_cols, drop = FALSE])            # Sigma^-1 [y X]
  beta <- gp_gls_beta(prob$X, W[, -1L, drop = FALSE], prob$y, W[, 1L])
  alpha <- W[, 1L] - if (p) W[, -1L, drop = FALSE] %*% beta else 0
  resid <- prob$y - if (p) prob$X %*% beta else 0
  quads <- vapply(seq_len(m), function(j) {
    gp_lanczos_logquad(cg$alpha[, j], cg$beta[, j], cg$iterations[probe_cols[j]], prob$n)
  }, numeric(1))
  parts <- list(logdet = pre$logdet + mean(quads), logdet_se = stats::sd(quads) / sqrt(m),
                quadratic = sum(resid * alpha))
  grad <- grad_se <- info <- NULL
  if (need_d) {
    U <- pre$Gt(Z)                                   # G'z
    S <- pre$Gt(cg$x[, probe_cols, drop = FALSE])    # Sigma^-1 z, nearly (G' A^-1 z)
    V <- S - U                                       # G'(A^-1 - I) z
    DU <- op$dmult(cbind(alpha, U, if (fisher) S))
    Dalpha <- DU[, 1L]
    # trace(Sigma^-1 M) = trace(G M G') + trace((A^-1 - I) G M G'), the second by probes
    tr_inv <- pre$trace_GG + colSums(V * U)
    tr_d <- pre$trace_GDG + colSums(V * DU[, 1L + seq_len(m), drop = FALSE])
    aa <- sum(alpha^2)
    quad_k <- sum(alpha * resid) - nugget * aa
    g_var <- 0.5 * (quad_k - (prob$n - nugget * tr_inv))
    g_range <- 0.5 * (sum(alpha * Dalpha) - tr_d)
    g_nug <- 0.5 * nugget * (aa - tr_inv)
    samples <- cbind(g_var, g_range, g_nug)
    grad <- stats::setNames(colMeans(samples), gp_param_names)
    grad_se <- stats::setNames(apply(samples, 2L, stats::sd) / sqrt(m), gp_param_names)
    if (fisher) {
      info <- gp_fisher_probes(prob, pre, op, A, U, DU[, 1L + seq_len(m), drop = FALSE], S,
                               DU[, 1L + m + seq_len(m), drop = FALSE], nugget)
    }
  }
  gp_result(prob, parts, beta, grad, grad_se, info, max(cg$iterations),
            list(alpha = drop(alpha)[order(prob$order)]))
}

# Fisher information 0.5 tr(Sigma^-1 M_i Sigma^-1 M_j) by the probes, in
# the preconditioned form tr(A^-1 G M_i G' A^-1 G M_j G') with A = G Sigma G':
# z' (...) z = (M_i S)' (Sigma^-1 M_j U) with S = G' A^-1 z and U = G' z.
gp_fisher_probes <- function(prob, pre, op, A, U, DU, S, DS, nugget) {
  ctl <- prob$control
  m <- ncol(U)
  cg <- gp_block_cg(A, pre$G(cbind(U, DU)), ctl$tol, ctl$maxit)
  SiU <- pre$Gt(cg$x[, seq_len(m), drop = FALSE])
  SiDU <- pre$Gt(cg$x[, m + seq_len(m), drop = FALSE])
  left <- list(op$mult(S) - nugget * S, DS, nugget * S)   # M_i S
  right <- list(U - nugget * SiU, SiDU, nugget * SiU)     # Sigma^-1 M_j U
  info <- matrix(0, 3L, 3L, dimnames = list(gp_param_names, gp_param_names))
  for (i in 1:3) for (j in 1:3) info[i, j] <- 0.5 * mean(colSums(left[[i]] * right[[j]]))
  (info + t(info)) / 2
}

#' @export
print.gp_loglik <- function(x, digits = 6, ...) {
  cat(sprintf("Gaussian-process log-likelihood (%s, n = %d): %s", x$method, x$n,
              format(x$loglik, digits = digits + 4)))
  if (x$method != "dense") {
    cat(sprintf(" +/- %.3g (3 s.e. over %d probes; %d CG iterations)", x$error, x$probes,
                x$cg_iterations))
  }
  cat("\n")
  if (length(x$beta)) {
    cat("  beta: ")
    cat(paste(names(x$beta), format(x$beta, digits = digits), sep = " = ", collapse = ", "))
    cat("\n")
  }
  if (!is.null(x$gradient)) {
    cat("  gradient: ")
    cat(paste(names(x$gradient), format(x$gradient, digits = digits), sep = " = ",
              collapse = ", "))
    cat("\n")
  }
  invisible(x)
}
