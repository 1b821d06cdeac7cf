# Accuracy of an H2 matrix against the exact kernel matrix: random probes
# with exact products, and a block Krylov estimate of the 2-norm error.

#' Accuracy of an H2 matrix
#'
#' Measures how far the `h2matrix` `A` is from the exact kernel matrix
#' \eqn{K + \tau^2 I}, with exact products from the tiled reduction engine
#' ([kernel_matvec()], on `A`'s backend).
#'
#' * `probe`: the largest relative error \eqn{\|Ax - A_{\mathcal{H}}x\| /
#'   \|Ax\|} over `probes` mean-zero random vectors (`"normal"` or
#'   `"rademacher"` entries) -- the error a user sees when multiplying by a
#'   random mean-zero vector (its square averages to
#'   \eqn{\|A - A_{\mathcal{H}}\|_F^2 / \|A\|_F^2}). `probes` holds each one,
#'   `frobenius` the pooled estimate of \eqn{\|A - A_{\mathcal{H}}\|_F / \|A\|_F}.
#' * `norm2`: an estimate of \eqn{\|A - A_{\mathcal{H}}\|_2 / \|A\|_2}. A block
#'   Krylov method (`iterations` blocks of `probes` vectors) gives a lower
#'   bound `norm2_lower` of \eqn{\|A - A_{\mathcal{H}}\|_2}; it is divided by
#'   a lower bound of \eqn{\|A\|_2} (power iteration on \eqn{A_{\mathcal{H}}}) and
#'   multiplied by the safety factor 1.5, so that the reported value is not
#'   below the true one (the tests check it against dense matrices).
#'
#' Cost: `probes * iterations` exact products (each \eqn{n^2} kernel
#' evaluations), `iterations = 0` skips the 2-norm. `rows` restricts the
#' probe errors to that many randomly sampled rows, each computed exactly
#' (cheaper for large `n`; the 2-norm is then skipped, and `print()` says the
#' rows were sampled). The default `rows = "auto"` uses every row up to
#' \eqn{n = 5000} and 2000 sampled rows beyond (all rows would cost many times
#' the build: at \eqn{n = 2 \times 10^4} on the CPU, about 8 times); the
#' sampled estimate is of the same products' error, not a bound. At most
#' `nrow(A)` probes are used.
#'
#' @param A An `h2matrix`.
#' @param probes Number of random vectors.
#' @param distribution `"normal"` or `"rademacher"`.
#' @param iterations Krylov blocks for the 2-norm estimate (0: none).
#' @param rows `"auto"` (all rows up to \eqn{n = 5000}, else 2000 sampled
#'   rows), `NULL` (all rows) or the number of rows sampled.
#' @return An object of class `h2_error`: a list with `probe`, `probes`,
#'   `frobenius`, `norm2`, `norm2_lower`, `distribution`, `n_probes`,
#'   `iterations`, `rows` and `sampled` (whether the rows were sampled).
#' @examples
#' A <- h2_matrix(matrix(runif(2000), ncol = 2), gk_kernel("exponential", range = 0.1),
#'                backend = "cpu")
#' h2_error(A)
#' @export
h2_error <- function(A, probes = 4, distribution = c("normal", "rademacher"), iterations = 4,
                     rows = "auto") {
  h2_check_matrix(A)
  gk_check_scalar(probes, "probes", lower = 1, integer = TRUE)
  gk_check_scalar(iterations, "iterations", lower = 0, integer = TRUE)
  distribution <- gk_match_choice(distribution, c("normal", "rademacher"), "distribution")
  pr <- h2_error_probes(A, probes, distribution, rows)
  if (!is.null(pr$sampled)) iterations <- 0
  EX <- h2_error_residuals(A, pr)
  out <- h2_error_of(A, pr, EX = EX)
  out$iterations <- iterations
  if (iterations > 0) {
    out[c("norm2", "norm2_lower")] <- h2_norm2_error(A, pr$X, EX, iterations,
                                                     function(V) h2_error_exact(A, V))
  }
  out
}

# The probes of h2_error(): `probes` random vectors X (at most nrow(A)), the
# rows sampled (NULL: all) and the exact products AX on them. They depend
# only on A's points, kernel and nugget, so h2_matrix(tol = ) draws them once
# and measures every matrix of its search with them (h2_error_of): the exact
# products and the draws (tens of millions of numbers at n = 2^20) are not
# repeated, and the errors of the orders it compares differ by the matrices
# alone, not by the draws.
h2_error_probes <- function(A, probes, distribution, rows) {
  n <- nrow(A$locs)
  # More probes than rows add nothing (and the Krylov block would not be square)
  probes <- min(probes, n)
  sampled <- NULL
  if (identical(rows, "auto")) {
    rows <- if (n > h2_error_all_rows_max) h2_error_sampled_rows else NULL
  }
  if (!is.null(rows)) {
    gk_check_scalar(rows, "rows", lower = 1, integer = TRUE)
    if (rows < n) sampled <- sort(sample.int(n, rows))
  }
  X <- if (distribution == "normal") matrix(stats::rnorm(n * probes), n, probes)
       else matrix(sample(c(-1, 1), n * probes, replace = TRUE), n, probes)
  list(X = X, AX = h2_error_exact(A, X, sampled), sampled = sampled,
       distribution = distribution)
}

# The exact products (K + nugget I) X, on the rows `at` (NULL: all).
h2_error_exact <- function(A, X, at = NULL) {
  x <- if (is.null(at)) A$locs else A$locs[at, , drop = FALSE]
  Y <- kernel_matvec(x, A$locs, X, A$kernel, backend = A$backend)
  Y <- matrix(Y, ncol = ncol(X))
  Y + A$nugget * (if (is.null(at)) X else X[at, , drop = FALSE])
}

# The errors A X - A_H X of A on the first `probes` probes of `pr`
# (h2_error_probes) of A's points, on their rows: h2_error()'s 2-norm
# estimate starts from them.
h2_error_residuals <- function(A, pr, probes = ncol(pr$X)) {
  use <- seq_len(min(probes, ncol(pr$X)))
  HX <- h2_multiply(A, pr$X[, use, drop = FALSE])
  if (!is.null(pr$sampled)) HX <- HX[pr$sampled, , drop = FALSE]
  pr$AX[, use, drop = FALSE] - HX
}

# h2_error()'s result for A from the probes `pr` of A's points, its first
# `probes` of them (EX: their residuals, when the caller has them).
h2_error_of <- function(A, pr, probes = ncol(pr$X), EX = h2_error_residuals(A, pr, probes)) {
  AX <- pr$AX[, seq_len(ncol(EX)), drop = FALSE]
  errs <- sqrt(colSums(EX^2) / colSums(AX^2))
  structure(list(probe = max(errs), probes = errs, frobenius = sqrt(sum(EX^2) / sum(AX^2)),
                 norm2 = NA_real_, norm2_lower = NA_real_, distribution = pr$distribution,
                 n_probes = ncol(EX), iterations = 0,
                 rows = if (is.null(pr$sampled)) nrow(A$locs) else length(pr$sampled),
                 sampled = !is.null(pr$sampled)),
            class = "h2_error")
}

h2_norm2_safety <- 1.5

# h2_error(rows = "auto"): every row up to this n; beyond, this many sampled
# rows (the exact products cost n^2 per probe and Krylov vector: at n = 2e4 on
# the CPU, 8 times the build; 2000 rows without the 2-norm cost about 1/40).
h2_error_all_rows_max <- 5000
h2_error_sampled_rows <- 2000

# Block Krylov lower bound of ||E||_2 for the symmetric E = A - A_H, from the
# block X and its product EX: sigma_max(E V) for an orthonormal basis V of
# span(X, EX, ..., E^(it-1) X) (each column of V is multiplied exactly once).
h2_norm2_error <- function(A, X, EX, iterations, exact) {
  qx <- qr(X)
  V <- qr.Q(qx)
  EV <- EX %*% solve(qr.R(qx))     # E V = E X R^-1
  Vall <- V
  EVall <- EV
  for (it in seq_len(iterations - 1L)) {
    W <- EV - Vall %*% crossprod(Vall, EV)
    W <- W - Vall %*% crossprod(Vall, W)   # twice is enough
    qw <- qr(W)
    keep <- abs(diag(qr.R(qw))) > 1e-12 * max(abs(diag(qr.R(qw))), 1e-300)
    if (!any(keep)) break
    V <- qr.Q(qw)[, keep, drop = FALSE]
    EV <- exact(V) - h2_multiply(A, V)
    Vall <- cbind(Vall, V)
    EVall <- cbind(EVall, EV)
  }
  lower_e <- sqrt(max(eigen(crossprod(EVall), symmetric = TRUE, only.values = TRUE)$values, 0))
  # ||A||_2 >= ||A_H v|| / ||v|| after power iterations on A_H, less ||E||_2.
  v <- stats::rnorm(nrow(X))
  for (i in 1:30) {
    w <- drop(h2_multiply(A, v))
    norm_a <- sqrt(sum(w^2) / sum(v^2))
    v <- w / sqrt(sum(w^2))
  }
  denom <- max(norm_a - h2_norm2_safety * lower_e, norm_a * 1e-3)
  c(h2_norm2_safety * lower_e / denom, lower_e / norm_a)
}

#' @export
print.h2_error <- function(x, ...) {
  cat(sprintf("<h2_error> relative error of the H2 matrix, %d %s probe%s on %d %srows\n",
              x$n_probes, x$distribution, if (x$n_probes != 1) "s" else "", x$rows,
              if (isTRUE(x$sampled)) "randomly sampled " else ""))
  if (isTRUE(x$sampled)) {
    cat("  (an estimate from the sampled rows, exact products on them; no 2-norm bound:",
        "use rows = NULL for all rows)\n")
  }
  cat(sprintf("  products ||Ax - A_H x|| / ||Ax||: max %.3g over the probes (Frobenius estimate %.3g)\n",
              x$probe, x$frobenius))
  if (!is.na(x$norm2)) {
    cat(sprintf("  2-norm ||A - A_H|| / ||A||: <= %.3g (estimate; Krylov lower bound %.3g, %d blocks)\n",
                x$norm2, x$norm2_lower, x$iterations))
  }
  invisible(x)
}
