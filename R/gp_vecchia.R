# The Vecchia likelihood (method = "vecchia", GpGp's approximation): each
# observation conditioned on its `control$neighbors` nearest preceding ones in
# the problem's random order, Sigma^-1 ~ G'G with G the Vecchia factor (the
# same rows as the iterative methods' preconditioner). The log-likelihood of
# that model is computed exactly, with its gradient and the Fisher
# information of the rows' conditionals, on the CPU (the factor of the GLS
# step on the problem's backend).
gp_evaluate_vecchia <- function(prob, kernel, nugget, gradient, fisher, smoothness) {
  threads <- gk_threads()
  fac <- .Call(gk_r_gp_factor, prob$locs, prob$nbr, kernel, NULL, nugget, NULL, threads,
               prob$backend == "gpu", "matrix")
  G <- function(B, transpose = FALSE) {
    .Call(gk_r_gp_apply, prob$nbr, fac$coef, B, transpose, threads)
  }
  p <- ncol(prob$X)
  GB <- G(cbind(prob$y, prob$X))
  W <- G(GB, transpose = TRUE)                        # ~ Sigma^-1 [y X]
  beta <- gp_gls_beta(prob$X, W[, -1L, drop = FALSE], prob$y, W[, 1L])
  resid <- drop(prob$y - if (p) prob$X %*% beta else 0)
  terms <- if (gradient || fisher) {
    gp_dense_terms(kernel, nugget, smoothness, prob$range_groups, prob$aniso)
  } else list()
  grad <- grad_se <- info <- NULL
  if (!length(terms)) {
    # the value alone is in the factor: sum log d_i and |G r|^2
    Gr <- GB[, 1L] - if (p) GB[, -1L, drop = FALSE] %*% beta else 0
    parts <- list(logdet = fac$stats[[1L]], logdet_se = 0, quadratic = sum(Gr^2))
  } else {
    # the derivatives need each row's system again (gp_vecchia_lik.c)
    lik <- .Call(gk_r_gp_vecchia_lik, prob$locs, prob$nbr, kernel, as.double(nugget), resid,
                 unname(terms), isTRUE(fisher), threads)
    parts <- list(logdet = lik$sums[[1L]], logdet_se = 0, quadratic = lik$sums[[2L]])
    grad <- stats::setNames(lik$gradient, names(terms))
    grad_se <- stats::setNames(rep(0, length(grad)), names(terms))
    if (fisher) info <- matrix(lik$info, length(terms), dimnames = list(names(terms), names(terms)))
  }
  alpha <- W[, 1L] - if (p) W[, -1L, drop = FALSE] %*% beta else 0
  gp_result(prob, parts, beta, grad, grad_se, info, 0L,
            list(alpha = drop(alpha)[order(prob$order)],
                 xsx = crossprod(prob$X, W[, -1L, drop = FALSE]),
                 six = W[order(prob$order), -1L, drop = FALSE]))
}
