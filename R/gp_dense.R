# The dense method of gp_loglik() (Cholesky, exact): Sigma's derivative
# terms (which the Vecchia method uses too), the pieces from the GPU's
# cuSOLVER path or from R's chol(), and the evaluation.

# The derivatives of Sigma in the log parameters (variance, the ranges, the
# angles, nugget, smoothness), each as list(kernels, weights, identity,
# points): sum_k weights[k] K_k + identity I, K_k on points[[k]] where that
# is given (an angle's rotated points; terms_from_r() in r_gp.c), else on
# Sigma's. `aniso`: an anisotropic problem's (gp_problem()).
gp_dense_terms <- function(kernel, nugget, smoothness, groups = NULL, aniso = NULL) {
  d <- gp_derivative_terms(kernel, smoothness, groups, aniso)
  term <- function(kernels = list(), weights = numeric(0), identity = 0, points = NULL) {
    list(kernels = kernels, weights = as.double(weights), identity = as.double(identity),
         points = points)
  }
  gp_param_order(term(list(kernel), 1),
                 lapply(d, function(t) term(t$kernels, t$weights, points = t$points)),
                 term(identity = nugget))
}

# The exact likelihood's pieces for the right-hand sides B = [y X]:
# list(logdet, solved = Sigma^-1 B, and for the derivative terms D_t
# trace[t] = tr(Sigma^-1 D_t), quad[, , t] = solved' D_t solved and, with
# fisher, info[s, t] = tr(Sigma^-1 D_s Sigma^-1 D_t)). On the GPU everything
# of size n^2 stays on the device (cuSOLVER's Cholesky).
gp_dense_pieces <- function(prob, kernel, nugget, terms, fisher) {
  B <- cbind(prob$y, prob$X)
  if (prob$backend == "gpu") {
    if (!inherits(kernel, "gk_formula")) {
      return(.Call(gk_r_gp_dense, prob$locs, kernel, as.double(nugget), B, unname(terms),
                   isTRUE(fisher)))
    }
    # a formula and its derivatives compiled for the GPU (its matrix kernel)
    native <- function(k) gk_formula_native(k, prob$dim, "gpu", wrt = k$wrt)
    terms <- lapply(unname(terms), function(term) {
      list(lapply(term$kernels, native), term$weights, term$identity)
    })
    return(.Call(gk_r_gp_dense_formula, prob$locs, native(kernel), as.double(nugget), B, terms,
                 isTRUE(fisher)))
  }
  # (a formula's matrices come from its CPU function: kernel_matrix())
  S <- kernel_matrix(prob$locs, kernel = kernel, backend = "cpu")
  diag(S) <- diag(S) + nugget
  R <- tryCatch(chol(S), error = function(e) stop(gp_not_positive_definite, call. = FALSE))
  W <- backsolve(R, backsolve(R, B, transpose = TRUE))
  out <- list(logdet = 2 * sum(log(diag(R))), solved = W)
  if (!length(terms)) return(out)
  Sinv <- chol2inv(R)
  D <- lapply(terms, function(term) {
    M <- diag(term$identity, prob$n)
    for (k in seq_along(term$kernels)) {
      at <- if (is.null(term$points[[k]])) prob$locs else term$points[[k]]
      M <- M + term$weights[[k]] * kernel_matrix(at, kernel = term$kernels[[k]], backend = "cpu")
    }
    M
  })
  out$trace <- vapply(D, function(M) sum(Sinv * M), numeric(1))
  # q x q x length(D) (array(): vapply() drops the dimensions when q = 1)
  out$quad <- array(vapply(D, function(M) crossprod(W, M %*% W), matrix(0, ncol(B), ncol(B))),
                    c(ncol(B), ncol(B), length(D)))
  if (fisher) {
    SM <- lapply(D, function(M) Sinv %*% M)
    idx <- seq_along(D)
    out$info <- outer(idx, idx, Vectorize(function(i, j) sum(SM[[i]] * t(SM[[j]]))))
  }
  out
}

gp_evaluate_dense <- function(prob, kernel, nugget, gradient, fisher, smoothness) {
  need_d <- gradient || fisher
  terms <- if (need_d) {
    gp_dense_terms(kernel, nugget, smoothness, prob$range_groups, prob$aniso)
  } else list()
  pieces <- gp_dense_pieces(prob, kernel, nugget, terms, fisher)
  W <- pieces$solved                                     # Sigma^-1 [y X]
  p <- ncol(prob$X)
  beta <- gp_gls_beta(prob$X, W[, -1L, drop = FALSE], prob$y, W[, 1L])
  alpha <- W[, 1L] - if (p) W[, -1L, drop = FALSE] %*% beta else 0
  resid <- prob$y - if (p) prob$X %*% beta else 0
  parts <- list(logdet = pieces$logdet, logdet_se = 0, quadratic = sum(resid * alpha))
  grad <- grad_se <- info <- NULL
  if (need_d) {
    # alpha = W c with c = (1, -beta): alpha' D alpha = c' (W' D W) c
    cvec <- c(1, -beta)
    names <- names(terms)
    grad <- vapply(seq_along(terms), function(t) {
      0.5 * (sum(cvec * (pieces$quad[, , t] %*% cvec)) - pieces$trace[[t]])
    }, numeric(1))
    names(grad) <- names
    grad_se <- stats::setNames(rep(0, length(grad)), names)
    if (fisher) info <- matrix(0.5 * pieces$info, length(terms), dimnames = list(names, names))
  }
  gp_result(prob, parts, beta, grad, grad_se, info, 0L,
            list(alpha = drop(alpha), xsx = crossprod(prob$X, W[, -1L, drop = FALSE]),
                 six = W[, -1L, drop = FALSE]))
}
