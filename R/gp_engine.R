# Gaussian-process engine: the data kept across likelihood evaluations (point
# order, Vecchia neighbours, probes), the covariance operators (dense, tiled
# reductions, H2); block conjugate gradients in gp_cg.R (Lanczos quadrature:
# gp_lanczos.R).

gp_families <- c("gaussian", "exponential", "matern", "cauchy", "inverse_multiquadric",
                 "exponential_great_circle")

#' Control settings for the Gaussian-process functions
#'
#' @param neighbors Neighbours per point in the Vecchia preconditioner, at
#'   most 64: with the points in a random order (from `seed`), the
#'   \eqn{i}-th is conditioned on exactly its `min(neighbors, i - 1)` nearest
#'   preceding points, as in [gp_simulate()]. In 1 to 3 dimensions the
#'   search walks grid cells on the host's CPUs (the same code for both
#'   backends: about 0.5 s for a million points and 40 neighbours on the 16
#'   cores of an H100 host); in more it looks
#'   at each point's `min(64, 2 * neighbors + 2)` nearest candidates
#'   ([knn()]'s reduction, the same on both backends, so they build the same
#'   preconditioner) and searches the few points with fewer preceding
#'   candidates again among all their predecessors. `NULL` (the default):
#'   60 for the preconditioner of the iterative methods (`"tiled"`, `"h2"`),
#'   40 for `method = "vecchia"` (the approximation itself). The
#'   preconditioner only has to make conjugate gradients converge in few
#'   iterations: at \eqn{n = 10^6} in 2D (Matern 3/2, range 0.02, nugget
#'   0.01) 60 neighbours took 29 iterations against 55 with 40, and a
#'   standalone [gp_loglik()] on an H100 3.6 s against 4.1 s, their longer
#'   search (0.76 against 0.54 s) and factorization included
#'   ([gp_simulate()] and [predict.gp_fit()] use 30 and 60 for their own
#'   purposes).
#' @param probes Random (Rademacher) probe vectors for the stochastic
#'   log-determinant and traces. They are drawn once from `seed`, so repeated
#'   evaluations use the same probes and the objective is a smooth function of
#'   the parameters.
#' @param tol Relative residual at which conjugate gradients stop for the
#'   data (`y` and the columns of `X`).
#' @param probe_tol Relative residual at which they stop for the probes. The
#'   log-determinant comes from the Lanczos quadrature of each probe's solve,
#'   whose error falls about as the square of the residual, and the traces
#'   from the probes' solutions, whose errors are this small against the
#'   probes' own sampling error (`logdet_se`); so the probes stop earlier than
#'   the data, and the later iterations carry the data's columns only.
#' @param maxit Most conjugate-gradient iterations.
#' @param seed Seed for the point order and the probes (the user's random
#'   stream is left as it was).
#' @param dense_max Largest `n` for which `method = "auto"` uses the dense
#'   Cholesky method; `NULL` (the default) chooses by backend: 20000 on a
#'   GPU, where the factorization runs in cuSOLVER (a gradient evaluation at
#'   n = 20000 takes about 0.5 s on an H100); on the CPU by measured speed
#'   (see "Choosing the method" in [gp_loglik()]): with R's reference BLAS
#'   on 2 cores `"h2"` is faster from 1000 points in 2D (at 3000 points an
#'   evaluation with the gradient takes 0.7 s against 6.7 s dense).
#' @param h2 A list of arguments for [h2_matrix()] (`eta`, `order`,
#'   `leaf_size`, `precision`, `tol`) used by `method = "h2"`. Unless given,
#'   the precision is double and, in 2D, `eta` is 2 (not `h2_matrix()`'s 3:
#'   the H2 error in the log-likelihood is then far smaller for little more
#'   time).
#' @param h2_min Smallest `n` for which `method = "auto"` uses `"h2"` (2
#'   dimensions) where it does not use `"dense"`; below it `"tiled"`. `NULL`
#'   (the default): 50000 on a GPU, 0 on the CPU.
#' @param h2_check_rows Rows on which the `"h2"` method compares its products
#'   with exact ones to estimate what the approximation does to the
#'   log-likelihood (see [gp_loglik()]).
#' @return A list of class `gp_control`.
#' @examples
#' gp_control(probes = 50)
#' @export
gp_control <- function(neighbors = NULL, probes = 50L, tol = 1e-6, probe_tol = 1e-4,
                       maxit = 1000L, seed = 1L, dense_max = NULL, h2 = list(), h2_min = NULL,
                       h2_check_rows = 1000L) {
  if (!is.null(neighbors)) gp_check_neighbors(neighbors, lower = 0)
  gk_check_scalar(probes, "probes", lower = 2, integer = TRUE)
  gk_check_scalar(tol, "tol", lower = 0, lower_open = TRUE)
  gk_check_scalar(probe_tol, "probe_tol", lower = 0, lower_open = TRUE)
  gk_check_scalar(maxit, "maxit", lower = 1, integer = TRUE)
  gk_check_scalar(seed, "seed", integer = TRUE)
  if (!is.null(dense_max)) gk_check_scalar(dense_max, "dense_max", lower = 0, integer = TRUE)
  if (!is.null(h2_min)) gk_check_scalar(h2_min, "h2_min", lower = 0, integer = TRUE)
  gk_check_scalar(h2_check_rows, "h2_check_rows", lower = 2, integer = TRUE)
  if (!is.list(h2)) stop("`h2` must be a list of h2_matrix() arguments", call. = FALSE)
  structure(list(neighbors = if (!is.null(neighbors)) as.integer(neighbors),
                 probes = as.integer(probes), tol = tol, probe_tol = probe_tol,
                 maxit = as.integer(maxit), seed = as.integer(seed),
                 dense_max = if (!is.null(dense_max)) as.integer(dense_max), h2 = h2,
                 h2_min = if (!is.null(h2_min)) as.integer(h2_min),
                 h2_check_rows = as.integer(h2_check_rows)), class = "gp_control")
}

# The dense method's default size limit for method = "auto" on the GPU
# (gp_control()): the Cholesky factorization and the gradient's inverse run
# in cuSOLVER (inst/bench/gp.R measures them against the iterative methods).
# On the CPU the choice is measured (gp_auto_method).
gp_dense_max_gpu <- 20000L
gp_h2_min_gpu <- 50000L

gp_dense_max <- function(control, backend) {
  if (!is.null(control$dense_max)) control$dense_max else gp_dense_max_gpu
}

# method = "auto": on a GPU, or on the CPU with control$dense_max given,
# "dense" up to dense_max points; beyond, "h2" in 2D from h2_min points
# (50000 on a GPU, 0 on the CPU unless given), else "tiled". On the CPU
# otherwise by measured speed: "dense" up to gp_auto_n points; from there to
# GP_DENSE_GPU_MAX points the faster of "dense" and that iterative method by
# the seconds gp_auto_seconds() predicts from one timed evaluation of each
# at gp_auto_n points (gp_auto_times(), once per session).
gp_auto_method <- function(n, dim, control, backend) {
  h2_min <- if (!is.null(control$h2_min)) control$h2_min else
    if (backend == "gpu") gp_h2_min_gpu else 0L
  alt <- if (dim == 2L && n >= h2_min) "h2" else "tiled"
  if (backend == "gpu" || !is.null(control$dense_max)) {
    return(if (n <= gp_dense_max(control, backend)) "dense" else alt)
  }
  if (n <= gp_auto_n) return("dense")
  if (n > gp_dense_most) return(alt)
  times <- gp_auto_times(dim, alt)
  if (gp_auto_seconds(times, "dense", n) <= gp_auto_seconds(times, alt, n)) "dense" else alt
}

# The points of the timed evaluations (as many as the H2 error check's
# default rows, gp_control(h2_check_rows), so that the check's cost grows
# with n from there as the method's does: below, the check takes every row
# and grows as n^2, which would mislead the prediction), and the most the
# dense method takes (GP_DENSE_GPU_MAX in gp.h; on
# the CPU memory runs out long before).
gp_auto_n <- 1000L
gp_dense_most <- 46340L

# Seconds of one evaluation with the gradient at n points, from the timed
# ones at times$n: the dense method grows as n^3 (Cholesky factorization and
# inverse), "tiled" as n^2 (exact products, for about as many iterations),
# "h2" as n; these powers predict a threefold n within the spread of
# repeated timings. The multithreaded H2 products suffer most from sharing
# the cores, so a choice timed under load leans to "dense".
gp_auto_seconds <- function(times, method, n) {
  power <- c(dense = 3, tiled = 2, h2 = 1)[[method]]
  times[[method]] * (n / times$n)^power
}

# Times one evaluation (log-likelihood and gradient, gp_control()'s
# settings) of "dense" and of `alt` at gp_auto_n points in `dim` dimensions
# (uniform in the unit cube, Matern 3/2 with range 0.1, nugget 0.01), once
# per session and kind: list(n, dense, <alt>) in seconds, kept in gk_state.
# The user's random stream is left as it was.
gp_auto_times <- function(dim, alt) {
  key <- paste0(alt, dim)
  if (is.null(gk_state$gp_auto_times)) gk_state$gp_auto_times <- list()
  known <- gk_state$gp_auto_times[[key]]
  if (!is.null(known)) return(known)
  n <- gp_auto_n
  data <- gp_with_seed(1L, list(locs = matrix(stats::runif(n * dim), n, dim),
                                y = stats::rnorm(n)))
  X <- matrix(1, n, 1L)
  k <- gk_kernel("matern", range = 0.1, smoothness = 1.5)
  control <- gp_control()
  time_one <- function(method) {
    elapsed <- proc.time()[["elapsed"]]
    prob <- gp_problem(data$locs, data$y, X, method, control, "cpu")
    gp_evaluate(prob, k, 0.01, gradient = TRUE)
    max(proc.time()[["elapsed"]] - elapsed, 1e-3)
  }
  times <- list(n = n, dense = time_one("dense"))
  times[[alt]] <- time_one(alt)
  gk_state$gp_auto_times[[key]] <- times
  times
}

# Candidates per point in the neighbour search, on both backends (so they
# agree): up to 64 the GPU knn() keeps them in registers (KMIN_REGISTER_MAX in
# reduce_args.h; larger k takes slower paths: lists in local memory to 128,
# then sorting, which GPU knn() with block-sparse ranges refuses). More neighbours than candidates make no sense.
# The search itself is in C: GP_NEIGHBORS_MAX_CANDIDATES (gp_neighbors.h) is this.
gp_max_neighbors <- 64L

gp_check_neighbors <- function(neighbors, lower) {
  gk_check_scalar(neighbors, "neighbors", lower = lower, integer = TRUE)
  if (neighbors > gp_max_neighbors) {
    stop("`neighbors` must be at most ", gp_max_neighbors, " (the neighbour search ",
         "looks at ", gp_max_neighbors, " candidates per point, the GPU's fast knn() ",
         "path); about 30-40 is usually enough", call. = FALSE)
  }
  invisible(neighbors)
}

# gp_control(neighbors = NULL): the Vecchia likelihood keeps 40 neighbours
# (the model itself); the iterative methods' preconditioner takes 60, which
# roughly halves their conjugate-gradient iterations (2D, Matern 3/2 at
# n = 1e6: 29 against 55). With the GPU's row-major products of the factor
# (gp_precond_cuda.cuh) the extra terms cost less than the iterations they
# save; the larger search and factorization cost less still.
gp_default_neighbors <- function(method) if (identical(method, "vecchia")) 40L else 60L

# Runs expr with the given seed and puts the user's random stream back.
gp_with_seed <- function(seed, expr) {
  had <- exists(".Random.seed", envir = globalenv(), inherits = FALSE)
  if (had) old <- get(".Random.seed", envir = globalenv(), inherits = FALSE)
  on.exit(if (had) assign(".Random.seed", old, envir = globalenv()) else
    rm(".Random.seed", envir = globalenv()))
  set.seed(seed)
  expr
}

# `formula`: a gk_formula() is taken too (gp_loglik(), gp_fit()).
gp_check_kernel <- function(kernel, dim, formula = FALSE) {
  if (formula && inherits(kernel, "gk_formula")) return(gp_check_formula(kernel, dim))
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

gp_kernel_with <- function(kernel, variance, range, smoothness = NULL) {
  kernel$variance <- as.double(variance)
  kernel$range <- as.double(range)
  if (!is.null(smoothness)) kernel$smoothness <- as.double(smoothness)
  kernel
}

# Everything that stays fixed while the parameters change: the points in a
# random order (for the Vecchia factor), their preceding neighbours, the
# probes, and the operator's points (uploaded once on the GPU).
# `overlap` (the iterative methods in 1 to 3 dimensions): the neighbour search
# runs on a host thread while the caller goes on (the probes, then the
# operator: gp_evaluate_iterative()); the problem then has neighbors_job
# instead of nbr until gp_problem_neighbors().
# `range`: the kernel's range(s), for the neighbour search (gp_neighbor_points()).
# `angles`: an anisotropic problem (ranges = "anisotropic"), whose points are
# `locs` rotated (gp_rotate_points()); it keeps the unrotated points in its
# order as aniso$raw, and gp_rotate_problem() turns it to other angles (the
# neighbours stay those of these angles' rotated, scaled points).
gp_problem <- function(locs, y, X, method, control, backend, range = NULL, angles = NULL,
                       overlap = FALSE) {
  if (is.null(control$neighbors)) control$neighbors <- gp_default_neighbors(method)
  if (!is.null(angles)) {
    prob <- gp_problem(gp_rotate_points(locs, angles), y, X, method, control, backend, range,
                       overlap = overlap)
    prob$aniso <- list(raw = locs[prob$order, , drop = FALSE], angles = angles)
    return(prob)
  }
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
  xo <- gp_neighbor_points(prob$locs, range)
  # only the iterative methods take the neighbours late (gp_evaluate_iterative())
  if (overlap && method != "vecchia" && ncol(xo) <= gp_neighbors_cell_dims) {
    prob$neighbors_job <- gp_neighbors_start(xo, control$neighbors)
  } else {
    prob <- gp_problem_neighbors(prob, gp_neighbors(xo, control$neighbors, backend))
  }
  if (method == "vecchia") {   # no probes; the points serve exact solves (predict)
    prob$points <- prob$locs
    return(prob)
  }
  prob$probes <- gp_with_seed(control$seed + 1L, gp_rademacher(n, control$probes))
  if (backend == "gpu") {
    # uploaded once (400 MB at n = 1e6): the solver and the H2 error check of
    # every evaluation read them on the GPU
    prob$probes_device <- gk_device_block(prob$probes)
  }
  prob$points <- if (backend == "gpu" && method == "tiled") gk_device_matrix(prob$locs) else prob$locs
  prob
}

# An anisotropic problem (gp_problem()) at other angles: its points rotated
# from aniso$raw (on the GPU, uploaded again for the tiled products).
gp_rotate_problem <- function(prob, angles) {
  if (is.null(prob$aniso) || identical(prob$aniso$angles, angles)) return(prob)
  prob$aniso$angles <- angles
  gp_problem_locs(prob, gp_rotate_points(prob$aniso$raw, angles))
}

# `prob` with the locations `locs` (in its point order), and its points for
# the operators where it keeps them.
gp_problem_locs <- function(prob, locs) {
  prob$locs <- locs
  if (!is.null(prob$points)) prob$points <- gp_operator_points(prob, locs)
  prob
}

# Points `locs` where the problem keeps its operators' points: on the GPU
# when those are there.
gp_operator_points <- function(prob, locs) {
  if (inherits(prob$points, "gk_device_matrix")) gk_device_matrix(locs) else locs
}

# The points the neighbour searches see: with a range per dimension, each
# coordinate divided by its range, so that the nearest points are the most
# correlated ones (as GpGp does for its scaled-dimension covariances); with
# one range, the points themselves (a common factor changes no neighbour).
gp_neighbor_points <- function(locs, range) {
  if (length(range) <= 1L || all(range == range[[1L]])) return(locs)
  sweep(locs, 2L, range, "/")
}

# n x k Rademacher signs from R's random stream (set the seed first).
gp_rademacher <- function(n, k) {
  .Call(gk_r_gp_rademacher, as.double(n), as.double(k), gk_threads())
}

gp_check_duplicates <- function(prob, nugget) {
  if (isTRUE(prob$duplicates) && nugget == 0) {
    stop("`locs` has duplicated locations and the nugget is 0: the covariance matrix is ",
         "singular. Use a positive nugget or average the duplicated observations",
         call. = FALSE)
  }
}

# The covariance operator Sigma = K + nugget I (mult) and the derivative
# operators of `terms` (dmult, a list of functions), as functions of an
# n x k matrix. A term's kernel with its own points (term$points[[i]], an
# angle's difference) multiplies over those.
gp_operator <- function(prob, kernel, nugget, terms = list()) {
  combine <- function(products, weights) {
    function(V) {
      out <- weights[[1L]] * products[[1L]](V)
      for (i in seq_along(products)[-1L]) out <- out + weights[[i]] * products[[i]](V)
      out
    }
  }
  if (prob$method == "h2") {
    args <- utils::modifyList(gp_h2_defaults(prob$dim, prob$control$h2, prob$backend),
                              prob$control$h2)
    build <- function(k, nug, x = prob$locs) {
      do.call(h2_matrix, c(list(x = x, kernel = k, nugget = nug,
                                backend = prob$backend), args))
    }
    product <- function(k, nug, own = NULL) {
      A <- build(k, nug, if (is.null(own)) prob$locs else own)
      # V: a matrix, or a list of matrices side by side (not bound into one copy)
      function(V) {
        if (is.list(V)) .Call(gk_r_h2_matmul_rows, h2_ptr(A), V, NULL) else h2_multiply(A, V)
      }
    }
  } else {
    product <- function(k, nug, own = NULL) {
      force(k)
      pts <- if (is.null(own)) prob$points else gp_operator_points(prob, own)
      function(V) {
        if (is.list(V)) V <- do.call(cbind, V)
        out <- kernel_matvec(pts, pts, V, k, backend = prob$backend)
        if (nug != 0) out + nug * V else out
      }
    }
  }
  dmult <- lapply(terms, function(term) {
    combine(lapply(seq_along(term$kernels), function(i) {
      product(term$kernels[[i]], 0, term$points[[i]])
    }), term$weights)
  })
  if (prob$method == "h2") {
    # Sigma itself is kept: on the GPU the solver multiplies by it on the device
    sigma <- build(kernel, nugget)
    # rows of Sigma [blocks]: on the GPU only those rows come back
    rows_of <- function(blocks, rows) {
      .Call(gk_r_h2_matmul_rows, h2_ptr(sigma), lapply(blocks, gk_operand), as.integer(rows))
    }
    return(list(mult = function(V) h2_multiply(sigma, V), mult_rows = rows_of, dmult = dmult,
                sigma = sigma))
  }
  mult <- product(kernel, nugget)
  rows_of <- function(blocks, rows) {
    mult(do.call(cbind, lapply(blocks, gp_host_block)))[rows, , drop = FALSE]
  }
  list(mult = mult, mult_rows = rows_of, dmult = dmult,
       # points on the GPU: the solver reduces over them with its vectors on the device
       # (a formula as kernel_reduce() prepares it)
       tiled = if (inherits(prob$points, "gk_device_matrix")) {
         list(points = prob$points, nugget = nugget,
              kernel = if (!inherits(kernel, "gk_formula")) kernel else
                gk_formula_native(kernel, prob$dim, "gpu", fold = TRUE))
       })
}

# colSums(a[, ca] * b[, cb]) without the n x k temporaries.
gp_col_dots <- function(a, ca, b, cb) {
  .Call(gk_r_gp_col_dots, a, as.integer(ca), b, as.integer(cb), gk_threads())
}

# The Vecchia preconditioner at these parameters, its products, and the
# exact traces trace(G G') and trace(G D G') for each derivative of `terms`
# (the C core takes one derivative kernel on Sigma's scaled points: a term of
# several kernels costs one more factorization per kernel, and a term with
# kernels of other ranges or on other points, a group of ranges or an angle,
# has NA: its trace is left to the probes).
# `keep`: on the GPU the factor stays there for the device solver (its
# coefficients, 0.5 GB at n = 1e6 with 60 neighbours, then neither come down
# nor go up again; the host products G and Gt bring them down when first
# used); the caller frees it with free() when done.
gp_preconditioner <- function(prob, kernel, nugget, terms = list(), keep = FALSE) {
  # a formula (and its derivatives) by its CPU function, on the host's threads
  formula <- inherits(kernel, "gk_formula")
  native <- function(k) {
    if (is.null(k) || !formula) return(k)
    gk_formula_native(k, prob$dim, "cpu", wrt = k$wrt)
  }
  factor <- function(dk, coef_to) {
    .Call(gk_r_gp_factor, prob$locs, prob$nbr, native(kernel), native(dk), nugget, NULL,
          gk_threads(), prob$backend == "gpu" && !formula, coef_to)
  }
  # the traces of further derivative kernels: their statistics alone (no
  # coefficients made, kept or brought down)
  stats_of <- function(dk) factor(dk, "none")$stats
  same_range <- function(k) identical(k$range, kernel$range)
  exact <- vapply(terms, function(term) {
    is.null(term$points) && all(vapply(term$kernels, same_range, TRUE))
  }, TRUE)
  first <- if (any(exact)) terms[exact][[1L]]$kernels[[1L]]
  fac <- factor(first, if (keep) "device" else "matrix")
  trace_GDG <- vapply(seq_along(terms), function(t) {
    if (!exact[[t]]) return(NA_real_)
    parts <- vapply(terms[[t]]$kernels, function(k) {
      if (identical(k, first)) fac$stats[[3L]] else stats_of(k)[[3L]]
    }, numeric(1))
    sum(terms[[t]]$weights * parts)
  }, numeric(1))
  nbr <- prob$nbr
  coef <- fac$coef   # a matrix, or the factor kept on the GPU
  host <- local({
    values <- if (is.matrix(coef)) coef
    function() {
      if (is.null(values)) values <<- .Call(gk_r_gp_factor_host, coef)
      values
    }
  })
  list(G = function(V) .Call(gk_r_gp_apply, nbr, host(), V, FALSE, gk_threads()),
       Gt = function(V) .Call(gk_r_gp_apply, nbr, host(), V, TRUE, gk_threads()),
       logdet = fac$stats[[1L]], trace_GG = fac$stats[[2L]], trace_GDG = trace_GDG,
       coef = coef, free = function() invisible(.Call(gk_r_gp_factor_free, coef)))
}

# The GP's H2 settings under the user's control$h2: double precision and, in
# 2D, eta = 2 rather than h2_matrix()'s 3 unless eta or tol is given: the
# stricter admissibility takes the log-likelihood's H2 error (h2_check) down
# by more than an order of magnitude for a few percent more time. On a GPU
# the blocks are stored where they fit (h2_matrix(storage =
# "stored_if_fits")): the solver multiplies some 50 columns at a time, which
# streaming the stored blocks does faster than evaluating them again, while
# storage = "auto" judges by one column, where the on-the-fly form can win.
gp_h2_defaults <- function(dim, user, backend = "cpu") {
  out <- list(precision = "double")
  if (dim == 2 && is.null(user[["eta"]]) && is.null(user[["tol"]])) out$eta <- 2
  if (backend == "gpu" && is.null(user[["storage"]]) && is.null(user[["tol"]])) {
    out$storage <- "stored_if_fits"
  }
  out
}

# The probes as the products and the solver take them: their GPU copy where
# there is one (no upload), else the R matrix.
gp_probe_block <- function(prob) if (is.null(prob$probes_device)) prob$probes else prob$probes_device

# A block of vectors in host memory: a gk_device_block()'s R values (the
# double matrix it was made from, not a download), else the block itself.
gp_host_block <- function(b) if (inherits(b, "gk_device_matrix")) .subset2(b, "values") else b
