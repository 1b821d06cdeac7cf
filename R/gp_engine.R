# Gaussian-process engine: the data kept across likelihood evaluations (point
# order, Vecchia neighbours, probes), the covariance operators (dense, tiled
# reductions, H2), block conjugate gradients with Lanczos quadrature.

gp_families <- c("gaussian", "exponential", "matern", "cauchy", "inverse_multiquadric")

#' Control settings for the Gaussian-process functions
#'
#' @param neighbors Neighbours per point in the Vecchia preconditioner (and in
#'   the Vecchia approximation of [gp_simulate()]).
#' @param probes Random (Rademacher) probe vectors for the stochastic
#'   log-determinant and traces. They are drawn once from `seed`, so repeated
#'   evaluations use the same probes and the objective is a smooth function of
#'   the parameters.
#' @param tol Relative residual at which conjugate gradients stop.
#' @param maxit Most conjugate-gradient iterations.
#' @param seed Seed for the point order and the probes (the user's random
#'   stream is left as it was).
#' @param dense_max Largest `n` for which `method = "auto"` uses the dense
#'   Cholesky method.
#' @param h2 A list of arguments for [h2_matrix()] (`eta`, `order`,
#'   `leaf_size`, `precision`) used by `method = "h2"`.
#' @return A list of class `gp_control`.
#' @examples
#' gp_control(probes = 50)
#' @export
gp_control <- function(neighbors = 40L, probes = 50L, tol = 1e-6, maxit = 1000L, seed = 1L,
                       dense_max = 4000L, h2 = list()) {
  gk_check_scalar(neighbors, "neighbors", lower = 0, integer = TRUE)
  gk_check_scalar(probes, "probes", lower = 2, integer = TRUE)
  gk_check_scalar(tol, "tol", lower = 0, lower_open = TRUE)
  gk_check_scalar(maxit, "maxit", lower = 1, integer = TRUE)
  gk_check_scalar(seed, "seed", integer = TRUE)
  gk_check_scalar(dense_max, "dense_max", lower = 0, integer = TRUE)
  if (!is.list(h2)) stop("`h2` must be a list of h2_matrix() arguments", call. = FALSE)
  structure(list(neighbors = as.integer(neighbors), probes = as.integer(probes), tol = tol,
                 maxit = as.integer(maxit), seed = as.integer(seed),
                 dense_max = as.integer(dense_max), h2 = h2), class = "gp_control")
}

# Runs expr with the given seed and puts the user's random stream back.
gp_with_seed <- function(seed, expr) {
  had <- exists(".Random.seed", envir = globalenv(), inherits = FALSE)
  if (had) old <- get(".Random.seed", envir = globalenv(), inherits = FALSE)
  on.exit(if (had) assign(".Random.seed", old, envir = globalenv()) else
    rm(".Random.seed", envir = globalenv()))
  set.seed(seed)
  expr
}

gp_check_kernel <- function(kernel, dim) {
  kernel <- gk_check_kernel_dim(as_gk_kernel(kernel), dim)
  if (!kernel$name %in% gp_families) {
    stop("Gaussian-process functions need a covariance kernel: ",
         paste0("\"", gp_families, "\"", collapse = ", "), ", not \"", kernel$name, "\"",
         call. = FALSE)
  }
  kernel
}

gp_check_nugget <- function(nugget) {
  if (!is.numeric(nugget) || length(nugget) != 1L || is.na(nugget) || !is.finite(nugget) ||
      nugget < 0) {
    stop("`nugget` must be a single non-negative number (the variance added to the diagonal)",
         call. = FALSE)
  }
  as.double(nugget)
}

# The response and the design matrix, checked against n. X = NULL is a
# constant mean; a matrix with no columns is a zero mean.
gp_check_data <- function(y, X, n) {
  if (!is.numeric(y) || !is.null(dim(y)) && !(is.matrix(y) && ncol(y) == 1L)) {
    stop("`y` must be a numeric vector", call. = FALSE)
  }
  y <- as.double(y)
  if (length(y) != n) {
    stop("`y` has ", length(y), " values but `locs` has ", n, " rows", call. = FALSE)
  }
  if (anyNA(y) || any(!is.finite(y))) {
    stop("`y` contains NA, NaN or infinite values: remove those observations first",
         call. = FALSE)
  }
  if (is.null(X)) X <- matrix(1, n, 1L, dimnames = list(NULL, "(Intercept)"))
  if (is.data.frame(X)) X <- as.matrix(X)
  if (is.numeric(X) && is.null(dim(X))) X <- matrix(X, ncol = 1L)
  if (!is.matrix(X) || !is.numeric(X)) stop("`X` must be a numeric matrix", call. = FALSE)
  if (nrow(X) != n) {
    stop("`X` has ", nrow(X), " rows but `locs` has ", n, " rows", call. = FALSE)
  }
  if (anyNA(X) || any(!is.finite(X))) stop("`X` contains NA, NaN or infinite values", call. = FALSE)
  storage.mode(X) <- "double"
  if (ncol(X) > 0L && qr(X)$rank < ncol(X)) {
    stop("`X` does not have full column rank", call. = FALSE)
  }
  list(y = y, X = X)
}

# d k / d log(range) as a kernel of the package's vocabulary (families 16 +
# f in gk_kernel.h). The name stays the base family's so that engines that
# check names (h2_matrix) accept it; the family code selects the derivative.
gp_dlogrange_kernel <- function(kernel) {
  if (length(kernel$range) != 1L) {
    stop("gradients need one range for all dimensions (an isotropic kernel)", call. = FALSE)
  }
  kernel$family_code <- 16L + kernel$family_code
  kernel$derivative <- "log_range"
  kernel
}

gp_kernel_with <- function(kernel, variance, range) {
  kernel$variance <- as.double(variance)
  kernel$range <- as.double(range)
  kernel
}

# Everything that stays fixed while the parameters change: the points in a
# random order (for the Vecchia factor), their preceding neighbours, the
# probes, and the operator's points (uploaded once on the GPU).
gp_problem <- function(locs, y, X, method, control, backend) {
  n <- nrow(locs)
  prob <- list(n = n, dim = ncol(locs), method = method, control = control,
               backend = backend, order = seq_len(n))
  if (method == "dense") {
    if (anyDuplicated(locs)) prob$duplicates <- TRUE
    prob$locs <- locs
    prob$y <- y
    prob$X <- X
    return(prob)
  }
  prob$order <- gp_with_seed(control$seed, sample.int(n))
  prob$locs <- locs[prob$order, , drop = FALSE]
  prob$y <- y[prob$order]
  prob$X <- X[prob$order, , drop = FALSE]
  nb <- gp_neighbors(prob$locs, control$neighbors, backend)
  prob$nbr <- nb$nbr
  prob$duplicates <- nb$duplicates > 0L
  prob$probes <- gp_with_seed(control$seed + 1L,
                              matrix(sample(c(-1, 1), n * control$probes, replace = TRUE),
                                     n, control$probes))
  prob$points <- if (backend == "gpu" && method == "tiled") gk_device_matrix(prob$locs) else prob$locs
  prob
}

# For each point (in the internal order) up to m nearest points that precede
# it, by brute-force knn() on growing blocks: the rows start..end search the
# points 1..end, of which at least two thirds precede them. The GPU knn()
# finds at most 64 neighbours.
gp_neighbors <- function(xo, m, backend) {
  n <- nrow(xo)
  nbr <- matrix(0L, n, max(m, 0L))
  duplicates <- 0L
  if (m == 0L || n < 2L) return(list(nbr = nbr, duplicates = duplicates))
  k_most <- min(64L, 2L * m + 2L)   # the same on both backends, so they agree
  start <- 1L
  while (start <= n) {
    end <- if (start == 1L) min(n, 4L * m) else min(n, max(start, floor(1.5 * (start - 1L))))
    k <- min(end, k_most)
    nn <- knn(xo[start:end, , drop = FALSE], xo[seq_len(end), , drop = FALSE], k = k,
              backend = backend)
    duplicates <- duplicates + .Call(gk_r_gp_keep_preceding, nn$index, nn$distance,
                                     as.integer(start), nbr)
    start <- end + 1L
  }
  list(nbr = nbr, duplicates = duplicates)
}

gp_check_duplicates <- function(prob, nugget) {
  if (isTRUE(prob$duplicates) && nugget == 0) {
    stop("`locs` has duplicated locations and the nugget is 0: the covariance matrix is ",
         "singular. Use a positive nugget or average the duplicated observations",
         call. = FALSE)
  }
}

# The covariance operator Sigma = K + nugget I and the derivative operator
# D = dK / dlog(range), as functions of an n x k matrix.
gp_operator <- function(prob, kernel, nugget, derivative) {
  if (prob$method == "h2") {
    args <- utils::modifyList(list(precision = "double"), prob$control$h2)
    build <- function(k, nug) {
      do.call(h2_matrix, c(list(locs = prob$locs, kernel = k, nugget = nug,
                                backend = prob$backend), args))
    }
    A <- build(kernel, nugget)
    D <- if (derivative) build(gp_dlogrange_kernel(kernel), 0)
    return(list(mult = function(V) h2_multiply(A, V),
                dmult = function(V) h2_multiply(D, V)))
  }
  pts <- prob$points
  dk <- if (derivative) gp_dlogrange_kernel(kernel)
  list(mult = function(V) kernel_matvec(pts, pts, V, kernel, backend = prob$backend) + nugget * V,
       dmult = function(V) kernel_matvec(pts, pts, V, dk, backend = prob$backend))
}

# The Vecchia preconditioner at these parameters and its products.
gp_preconditioner <- function(prob, kernel, nugget, derivative) {
  dk <- if (derivative) gp_dlogrange_kernel(kernel)
  fac <- .Call(gk_r_gp_factor, prob$locs, prob$nbr, kernel, dk, nugget, gk_threads())
  nbr <- prob$nbr
  coef <- fac$coef
  list(G = function(V) .Call(gk_r_gp_apply, nbr, coef, V, FALSE, gk_threads()),
       Gt = function(V) .Call(gk_r_gp_apply, nbr, coef, V, TRUE, gk_threads()),
       logdet = fac$stats[[1L]], trace_GG = fac$stats[[2L]], trace_GDG = fac$stats[[3L]],
       coef = coef)
}

# Conjugate gradients on every column of B at once (one operator call per
# iteration for all unconverged columns). For the columns in `track`, the CG
# coefficients are kept: they give the Lanczos tridiagonal matrices.
gp_block_cg <- function(mult, B, tol, maxit, track = integer()) {
  n <- nrow(B)
  X <- matrix(0, n, ncol(B))
  R <- B
  P <- R
  rr <- colSums(R^2)
  bnorm <- sqrt(rr)
  active <- which(bnorm > 0)
  iterations <- integer(ncol(B))
  alpha <- beta <- matrix(NA_real_, maxit, length(track))
  for (it in seq_len(maxit)) {
    if (!length(active)) break
    Pa <- P[, active, drop = FALSE]
    Q <- mult(Pa)
    a <- rr[active] / colSums(Pa * Q)
    X[, active] <- X[, active, drop = FALSE] + Pa * rep(a, each = n)
    Ra <- R[, active, drop = FALSE] - Q * rep(a, each = n)
    rr_new <- colSums(Ra^2)
    b <- rr_new / rr[active]
    tracked <- match(active, track)
    alpha[it, tracked[!is.na(tracked)]] <- a[!is.na(tracked)]
    beta[it, tracked[!is.na(tracked)]] <- b[!is.na(tracked)]
    R[, active] <- Ra
    P[, active] <- Ra + Pa * rep(b, each = n)
    rr[active] <- rr_new
    iterations[active] <- it
    active <- active[sqrt(rr_new) > tol * bnorm[active]]
  }
  list(x = X, iterations = iterations, converged = !length(active), alpha = alpha, beta = beta)
}

# z' log(A) z from the CG coefficients of the solve A x = z (the Lanczos
# tridiagonal matrix; Gauss quadrature, as in stochastic Lanczos quadrature).
gp_lanczos_logquad <- function(alpha, beta, steps, znorm2) {
  a <- alpha[seq_len(steps)]
  b <- beta[seq_len(steps)]
  diag_t <- 1 / a + c(0, b[-steps] / a[-steps])
  T <- diag(diag_t, steps)
  if (steps > 1L) {
    off <- sqrt(b[-steps]) / a[-steps]
    T[cbind(2:steps, 1:(steps - 1L))] <- off
    T[cbind(1:(steps - 1L), 2:steps)] <- off
  }
  e <- eigen(T, symmetric = TRUE)
  znorm2 * sum(e$vectors[1L, ]^2 * log(pmax(e$values, .Machine$double.eps)))
}
