#' Kernel reductions without the kernel matrix
#'
#' Computes, for every row \eqn{x_i} of `x`,
#' \deqn{a_i = \mathrm{reduce}_{j} \; F(x_i, y_j) \otimes b_j}
#' over the rows \eqn{y_j} of `y`, where \eqn{F(x, y) = k(x, y)} is the kernel
#' (see [gk_kernel()]). The `nrow(x)` by `nrow(y)` kernel matrix is never
#' formed: on the GPU, values are computed tile by tile and reduced on the fly
#' (the KeOps map-reduce scheme), so memory stays linear in the number of points.
#'
#' @section Reductions:
#' \describe{
#'   \item{`"sum"`}{\eqn{a_{ie} = \sum_j F_{ij} b_{je}}: the product of the kernel
#'     matrix with `b` (all ones when `b` is `NULL`).}
#'   \item{`"min"`, `"max"`}{\eqn{\min_j F_{ij}}, \eqn{\max_j F_{ij}}.}
#'   \item{`"argmin"`, `"argmax"`}{the (1-based) \eqn{j} of the minimum /
#'     maximum; ties go to the smaller \eqn{j}.}
#'   \item{`"kmin"`}{the `k` smallest \eqn{F_{ij}} in increasing order and their
#'     indices (ties to the smaller \eqn{j}).}
#'   \item{`"logsumexp"`}{\eqn{a_{ie} = \log \sum_j \exp(F_{ij}) b_{je}} with
#'     non-negative weights `b` (all ones when `NULL`), computed with a running
#'     maximum so that it never overflows.}
#'   \item{`"softmax_sum"`}{\eqn{a_{ie} = \sum_j \exp(F_{ij}) b_{je} / \sum_j
#'     \exp(F_{ij})}, the softmax-weighted average of the rows of `b`.}
#' }
#' An empty reduction (`nrow(y) == 0`) gives the neutral element: 0 for sums,
#' `Inf` for min, `-Inf` for max and logsumexp, `NA` for indices, `NaN` for
#' softmax_sum.
#'
#' @section GPU schemes:
#' `scheme = "1d"` is the KeOps GPU_1D scheme: one thread per output row, the
#' rows of `y` (and `b`) loaded tile by tile into shared memory. `"2d"` also
#' splits the reduction index into chunks, one block per (row tile, chunk),
#' and combines the partial results in a second pass; it keeps the GPU busy when
#' there are few output rows. `"auto"` (the default) uses the 2D scheme when
#' the 1D scheme would launch fewer blocks than the GPU runs at once (one
#' "wave", from the kernel's occupancy) and `nrow(y)` is at least 1024: it
#' splits `y` into as many chunks (of at least 512 rows) as fit in one wave, or
#' up to 16 times more when that fills the waves at least 2 percent better. With
#' more rows it still splits `y` into 2 to 16 chunks (of at least 2048 rows)
#' when that fills the last wave of blocks at least 2 percent
#' better. `scheme = "1d"` or `"2d"` overrides the rule.
#' Reductions of more than \eqn{2^{36}} pairs run as a sequence of launches
#' over slices of `y`, each carrying its partial results to the next (tens of
#' milliseconds each for the gaussian sum); between slices the call notices a
#' user interrupt.
#' The CPU engine (C with OpenMP) gives the same answers, in double precision.
#'
#' @section Block-sparse reductions:
#' `ranges` (from [ranges_from_mask()]) restricts the reduction to kept blocks
#' of the kernel matrix: each row of `x` reduces only over the row ranges of
#' `y` its cluster keeps (for `axis = 2`, each row of `y` over the kept ranges
#' of `x`). Rows in no kept block get the neutral element (as for an empty
#' reduction); `"kmin"` rows with fewer than `k` kept points fill the rest with
#' `Inf` and `NA`. On the GPU each block of threads works on rows of one
#' cluster (or of adjacent clusters with the same list), so clusters of a few
#' hundred points or more run at close to the dense rate per kept pair.
#'
#' `cutoff` and `cell` give a truncated reduction in one call: both point sets
#' are clustered into grid cells of side `cell` ([grid_cluster()]), sorted,
#' and every cluster pair whose centroid distance is at most `cutoff` plus the
#' two clusters' radii is kept, so no pair of points closer than `cutoff` is
#' dropped. The results come back in the caller's order, with the attribute
#' `"kept_fraction"` (kept point pairs over all pairs). Distances are in the
#' coordinates of `x` (not divided by the kernel's range). Device matrices are
#' downloaded for the clustering.
#'
#' @param x Numeric matrix, one row per point (a vector is one column), or a
#'   [gk_device_matrix()].
#' @param y Numeric matrix with the same number of columns, or a device matrix;
#'   defaults to `x`. May have no rows (an empty reduction).
#' @param b Weights: a numeric vector or matrix with `nrow(y)` rows (`nrow(x)`
#'   when `axis = 2`), or a device matrix; `NULL` means all ones. Only for
#'   `"sum"`, `"logsumexp"` (non-negative) and `"softmax_sum"`.
#' @param kernel A [gk_kernel()], a kernel name, or a formula from [gk_formula()]
#'   (which is evaluated at the points as given: no range, no centring).
#' @param reduction One of the reductions above.
#' @param k For `"kmin"`: how many values, at most `nrow(y)`.
#' @param axis 1 reduces over the rows of `y` for each row of `x` (the default);
#'   2 is the transposed reduction, over the rows of `x` for each row of `y`.
#' @param precision `"double"` (the default) or `"single"`. Single precision
#'   uses float32 on the GPU (with sums accumulated tile by tile in double);
#'   the CPU engine always computes in double. Points whose differences,
#'   divided by the kernel's range, pass float32's range (3.4e38) are an error
#'   in single precision on the GPU.
#' @param scheme GPU scheme: `"auto"`, `"1d"` or `"2d"` (see GPU schemes).
#' @param backend `"auto"`, `"gpu"` or `"cpu"`; see [gk_backend()].
#' @param devices GPUs to split the rows of the output over (numbers from 1,
#'   see [gk_info()]), one host thread each; `NULL` (the default) uses the
#'   selected GPU ([gk_set_device()]). Several GPUs need host matrices, not
#'   device matrices. GPUs that do not exist are an
#'   error unless `backend = "cpu"` (which ignores `devices`).
#' @param workers Split the rows of the output over \pkg{future} workers:
#'   `NULL` (the default) when a `future::plan()` other than sequential is
#'   set, a number of chunks, or `FALSE`/`1` for this process only; see
#'   [gk_distributed]. Calls with device matrices are not split.
#' @param ranges A block-sparse mask from [ranges_from_mask()] (see
#'   Block-sparse reductions), or `NULL` for the dense reduction. Block-sparse
#'   reductions run on one GPU (or the CPU) and are not split over workers.
#' @param symmetric `TRUE` for a `"sum"` of `x` against itself (`y` not given)
#'   over symmetric `ranges` (a cluster pair kept with its transpose): the GPU
#'   then evaluates each kernel value outside the diagonal blocks once and
#'   uses it for both of its rows, about half the work when the clusters are
#'   small against their lists (one column of `b`; with more, every pair is
#'   evaluated). The sums equal those without it to rounding (not bit for bit:
#'   the GPU adds the second uses in a varying order). Both engines check the
#'   symmetry.
#' @param cutoff,cell A truncation radius and a cell size (both positive, in
#'   the units of `x`) for the one-call truncated reduction; not with `ranges`.
#' @return For `"sum"`, `"logsumexp"` and `"softmax_sum"`, a matrix with one
#'   row per output point and one column per column of `b` (a vector when `b`
#'   is `NULL` or a vector). For `"min"` and `"max"` a numeric vector, for
#'   `"argmin"` and `"argmax"` an integer vector, for `"kmin"` a list with
#'   `values` and `index`, two matrices with `k` columns (in this order, kept
#'   for code that reads them by position; [knn()] returns `index` first, and
#'   its `distance` is the square root of `"sqdist"`'s values).
#' @param method Deprecated name of `scheme`.
#' @seealso [kernel_matvec()], [knn()], [gk_device_matrix()].
#' @examples
#' x <- matrix(runif(300), 100, 3)
#' y <- matrix(runif(600), 200, 3)
#' k <- gk_kernel("matern", range = 0.2, smoothness = 1.5)
#' a <- kernel_reduce(x, y, b = rnorm(200), kernel = k)
#' lse <- kernel_reduce(x, y, kernel = "gaussian", reduction = "logsumexp")
#' nearest <- kernel_reduce(x, y, kernel = "sqdist", reduction = "argmin")
#' @export
kernel_reduce <- function(x, y = x, b = NULL, kernel = "gaussian",
                          reduction = c("sum", "min", "max", "argmin", "argmax", "kmin",
                                        "logsumexp", "softmax_sum"),
                          k = 1L, axis = 1L, precision = "double",
                          scheme = c("auto", "1d", "2d"), devices = NULL, workers = NULL,
                          ranges = NULL, cutoff = NULL, cell = NULL, symmetric = FALSE,
                          backend = NULL, method) {
  if (!missing(method)) {
    if (!missing(scheme)) gk_given_twice("kernel_reduce", "scheme", "method")
    gk_deprecated_args("kernel_reduce", "method", "scheme")
    scheme <- method
  }
  if (!is.logical(symmetric) || length(symmetric) != 1L || is.na(symmetric)) {
    stop("`symmetric` must be TRUE or FALSE", call. = FALSE)
  }
  if (symmetric && (is.null(ranges) || !missing(y))) {
    stop("`symmetric = TRUE` reduces `x` against itself (no `y`) over `ranges`", call. = FALSE)
  }
  if (!is.null(cutoff) || !is.null(cell)) {
    if (!is.null(ranges)) stop("give either `ranges` or `cutoff` and `cell`, not both", call. = FALSE)
    return(gk_truncated_reduce(x, y, b, kernel, reduction, k, axis, precision, scheme, backend,
                               cutoff, cell, y_is_x = missing(y) || identical(y, x),
                               devices = devices))
  }
  # Block-sparse ranges refer to whole point sets: not split over workers.
  if (is.null(ranges) && !gk_in_process(workers)) {
    on_device <- inherits(x, "gk_device_matrix") || inherits(y, "gk_device_matrix") ||
      inherits(b, "gk_device_matrix")
    count <- if (on_device && is.null(workers)) 0L else
      gk_chunk_count(workers, NROW(if (identical(axis, 2) || identical(axis, 2L)) y else x))
    if (count > 0L) {
      if (on_device) stop("device matrices cannot be sent to future workers: use `workers = 1`",
                          call. = FALSE)
      args <- list(x = x, y = y, b = b, kernel = kernel, reduction = reduction, k = k,
                   axis = axis, precision = precision, scheme = scheme, backend = backend,
                   devices = devices)
      return(gk_reduce_distributed(args, count))
    }
  }
  requested <- backend
  backend <- gk_backend(backend)
  kernel <- as_gk_kernel(kernel, allow_formula = TRUE)
  threads <- gk_threads()
  # The common call (R double matrices, dense, one GPU or the CPU) is checked
  # and run by one .Call, without the microseconds of the checks below. It
  # returns NULL for anything it does not take as it stands; the general path
  # then converts that, or stops with the message naming what is wrong.
  if (is.null(ranges) && is.null(devices)) {
    # A formula goes in prepared for y's dimension (NULL where the general
    # path must check the arguments first), and comes back for that path.
    formula <- if (inherits(kernel, "gk_formula")) kernel
    if (!is.null(formula)) kernel <- gk_formula_plain(formula, y, axis, backend, precision)
    # The spec is this frame, read by name (x, y, b, kernel, reduction, k,
    # axis, precision, scheme, backend, threads): a list built by
    # gk_reduce_spec() would cost a tenth of a small call.
    res <- .Call(gk_r_reduce_plain, environment(), gk_reductions, gk_reduce_methods)
    if (!is.null(res)) return(res)
    if (!is.null(formula)) kernel <- formula
  }
  reduction <- gk_match_choice(reduction, gk_reduction_names, "reduction")
  scheme <- gk_match_choice(scheme, gk_reduce_method_names, "scheme")
  precision <- gk_check_precision(precision)
  gk_check_scalar(axis, "axis", lower = 1, integer = TRUE)
  if (!axis %in% c(1, 2)) stop("`axis` must be 1 or 2", call. = FALSE)
  on_device <- inherits(x, "gk_device_matrix") || inherits(y, "gk_device_matrix") ||
    inherits(b, "gk_device_matrix")
  gpus <- gk_devices_for(devices, backend, requested, all = FALSE)
  if (length(gpus) > 1L && on_device) {
    stop("a reduction over several GPUs needs R matrices, not device matrices (each lives on ",
         "one GPU)", call. = FALSE)
  }
  y_is_x <- identical(y, x)   # the default; then x is checked (and uploaded) once
  x <- gk_reduce_points(x, "x", backend)
  y <- if (y_is_x) x else gk_reduce_points(y, "y", backend)
  dim_x <- gk_operand_dim(x)
  dim_y <- gk_operand_dim(y)
  if (dim_x[2L] != dim_y[2L]) {
    stop("`x` has ", dim_x[2L], " columns but `y` has ", dim_y[2L],
         ": points must have the same dimension", call. = FALSE)
  }
  if (!is.null(ranges)) ranges <- gk_ranges_for_call(ranges, dim_x[1L], dim_y[1L], axis)
  if (axis == 2) {
    swap <- x
    x <- y
    y <- swap
    dim_y <- dim_x
  }
  gk_check_kernel_dim(kernel, dim_y[2L])
  n <- dim_y[1L]
  b_was_matrix <- !is.null(b) && (is.matrix(b) || inherits(b, "gk_device_matrix"))
  b <- gk_reduce_weights(b, reduction, n, axis, backend)
  if (reduction == "kmin") {
    gk_check_scalar(k, "k", lower = 1, integer = TRUE)
    if (k > n) {
      stop("`k` = ", k, " is larger than the number of points reduced over (", n, ")",
           call. = FALSE)
    }
  } else {
    k <- 1L
  }
  if (inherits(kernel, "gk_formula")) {   # compiled (or found) for this dimension and axis
    if (symmetric) {
      stop("`symmetric = TRUE` needs a kernel of the vocabulary, not a formula", call. = FALSE)
    }
    kernel <- gk_formula_native(kernel, dim_y[2L], backend, precision, swap = axis == 2,
                                wrt = kernel$wrt, fold = TRUE)
  }
  # One-column results come back as plain vectors, without a copy here.
  vector_out <- reduction != "kmin" && !b_was_matrix
  # x and y are swapped above for axis 2: the spec's axis is 1.
  res <- .Call(gk_r_reduce,
               gk_reduce_spec(gk_operand(x), gk_operand(y), gk_operand(b), kernel, reduction,
                              as.integer(k), 1L, precision, scheme, backend, threads,
                              vector_out = vector_out, devices = gpus, ranges = ranges,
                              symmetric = symmetric),
               gk_reductions, gk_reduce_methods)
  switch(reduction,
    argmin = , argmax = res[[2L]],
    kmin = list(values = res[[1L]], index = res[[2L]]),
    res[[1L]])
}

# The arguments of the reduction entry points (gk_r_reduce, and
# gk_r_reduce_plain when not given kernel_reduce()'s frame; src/r_reduce.c) as
# one named list, read by name in C (gk_spec_fields). The plain path takes the
# user's values as given and returns NULL for anything it does not take; the
# general path takes checked values, with x and y already swapped for axis 2.
gk_reduce_spec <- function(x, y, b, kernel, reduction, k, axis, precision, scheme, backend,
                           threads, vector_out = NA, devices = NULL, ranges = NULL,
                           symmetric = FALSE) {
  list(x = x, y = y, b = b, kernel = kernel, reduction = reduction, k = k, axis = axis,
       precision = precision, scheme = scheme, backend = backend, threads = threads,
       vector_out = vector_out, devices = devices, ranges = ranges, symmetric = symmetric)
}

#' Kernel matrix times a vector or matrix
#'
#' `K(x, y) %*% b` for the kernel matrix \eqn{K_{ij} = k(x_i, y_j)}, without
#' forming \eqn{K}: the `"sum"` reduction of [kernel_reduce()].
#'
#' @inheritParams kernel_reduce
#' @param b A numeric vector or matrix with `nrow(y)` rows, or a device matrix.
#' @param ... Further arguments to [kernel_reduce()]: `precision`, `scheme`,
#'   `axis` (2 multiplies by the transposed kernel matrix), `devices`,
#'   `workers`, `ranges`, or `cutoff` and `cell`.
#' @return A vector when `b` is a vector, else a matrix with `ncol(b)` columns.
#' @examples
#' x <- matrix(runif(200), 100, 2)
#' a <- kernel_matvec(x, x, rnorm(100), gk_kernel("gaussian", range = 0.1))
#' @export
kernel_matvec <- function(x, y = x, b, kernel = "gaussian", backend = NULL, ...) {
  if (missing(b)) stop("`b` is missing: give the vector or matrix to multiply", call. = FALSE)
  kernel_reduce(x, y, b = b, kernel = kernel, reduction = "sum", ..., backend = backend)
}

#' k nearest neighbours
#'
#' For each row of `x`, the `k` nearest rows of `y` in Euclidean distance,
#' by brute force on the GPU (or the CPU) without storing the distance matrix.
#'
#' @inheritParams kernel_reduce
#' @param y Points to search, with the same number of columns as `x`; defaults
#'   to `x` (each point is then its own nearest neighbour).
#' @param k Number of neighbours, at most `nrow(y)`.
#' @param ranges Optional block-sparse mask ([ranges_from_mask()]): only the
#'   kept blocks are searched (rows with fewer than `k` kept points get `NA`
#'   indices and `Inf` distances).
#' @param method Deprecated name of `scheme`.
#' @return A list with `index` (integer, `nrow(x)` by `k`, 1-based rows of `y`,
#'   nearest first, ties to the smaller index) and `distance` (the Euclidean
#'   distances, same shape).
#' @examples
#' x <- matrix(runif(2000), 1000, 2)
#' nn <- knn(x, x, k = 5)
#' head(nn$index)
#' @export
knn <- function(x, y = x, k = 1L, precision = "double", scheme = c("auto", "1d", "2d"),
                devices = NULL, workers = NULL, ranges = NULL, backend = NULL, method) {
  if (!missing(method)) {
    if (!missing(scheme)) gk_given_twice("knn", "scheme", "method")
    gk_deprecated_args("knn", "method", "scheme")
    scheme <- method
  }
  # The common call (R double matrices, dense, one GPU or the CPU) in one .Call,
  # distances included (gk_r_knn_plain); NULL: the general path below.
  if (is.null(ranges) && is.null(devices) && gk_in_process(workers)) {
    requested <- backend
    backend <- gk_backend(backend)
    threads <- gk_threads()
    # The spec is this frame, read by name (x, y, k, precision, scheme,
    # backend, threads), as in kernel_reduce().
    res <- .Call(gk_r_knn_plain, environment(), gk_reduce_methods)
    if (!is.null(res)) return(res)   # knn_refine() included
    backend <- requested   # kernel_reduce() tells a chosen backend from the default
  }
  y_is_x <- identical(y, x)
  scale <- 1
  host <- !inherits(x, "gk_device_matrix") && !inherits(y, "gk_device_matrix")
  if (host) {
    x <- x0 <- gk_check_points(x, "x", allow_empty = TRUE)
    y <- y0 <- if (y_is_x) x else gk_check_points(y, "y", allow_empty = TRUE)
    scale <- knn_scale(x, y)
    if (scale != 1) {
      x <- x / scale
      y <- if (y_is_x) x else y / scale
    }
  }
  res <- kernel_reduce(x, y, kernel = "squared_distance", reduction = "kmin",
                       k = k, precision = precision, scheme = scheme, backend = backend,
                       devices = devices, workers = workers, ranges = ranges)
  # res$values was made by this call and is held by nothing else: the
  # distances overwrite it (no second m x k array).
  out <- list(index = res$index, distance = .Call(gk_r_knn_distances, res$values, scale))
  if (host && is.null(ranges)) out <- knn_refine(x0, y0, out, precision)
  out
}

# Points spanning many orders of magnitude (1e-300 with 1e300): the squares of
# the small distances underflow after the common scale, and distinct points
# could tie at 0. The rows where that can change the answer are searched again
# exactly in C (gk_r_knn_refine); in double precision only (single precision
# has its own, documented, resolution).
knn_refine <- function(x, y, res, precision) {
  if (!identical(precision, "double")) return(res)
  fixed <- .Call(gk_r_knn_refine, x, y, res$index, res$distance)
  if (is.null(fixed)) res else fixed
}

# Squared distances overflow beyond about 1e154 and underflow below 1e-154:
# points that span more than 2^400 or less than 2^-400 in some coordinate are
# divided by a power of two near their spread (exactly, so neighbours do not
# change) and the distances multiplied back. In C: one pass over the points,
# no column copies.
knn_scale <- function(x, y) .Call(gk_r_knn_scale, x, y)

# Points for a reduction: a checked double matrix, or a device matrix (downloaded
# for the CPU backend). Reductions allow an empty set of points.
gk_reduce_points <- function(x, arg, backend) {
  if (inherits(x, "gk_device_matrix")) {
    return(if (backend == "gpu") x else as.matrix(x))
  }
  if (is.matrix(x) && is.double(x)) {
    .Call(gk_r_check_finite, x, arg)   # the common case, checked without copies
  } else {
    x <- gk_check_points(x, arg, allow_empty = TRUE)
  }
  if (ncol(x) == 0L) stop("`", arg, "` has no columns", call. = FALSE)
  x
}

gk_reduce_weights <- function(b, reduction, n, axis, backend) {
  weighted <- reduction %in% c("sum", "logsumexp", "softmax_sum")
  if (!weighted) {
    if (!is.null(b)) stop("reduction \"", reduction, "\" takes no weights `b`", call. = FALSE)
    return(NULL)
  }
  if (is.null(b)) return(rep(1, n))
  if (inherits(b, "gk_device_matrix")) {
    if (backend != "gpu") b <- as.matrix(b)
    rows <- gk_operand_dim(b)[1L]
  } else {
    # A vector is passed as it is (the C side reads it as one column): no copy.
    if (!is.numeric(b) || !(is.null(dim(b)) || is.matrix(b))) {
      stop("`b` must be a numeric vector or matrix", call. = FALSE)
    }
    if (is.matrix(b) && ncol(b) == 0L) stop("`b` has no columns", call. = FALSE)
    if (!is.double(b)) storage.mode(b) <- "double"
    .Call(gk_r_check_finite, b, "b")
    if (reduction == "logsumexp" && any(b < 0)) {
      stop("logsumexp weights `b` must be non-negative", call. = FALSE)
    }
    rows <- if (is.matrix(b)) nrow(b) else length(b)
  }
  if (rows != n) {
    stop("`b` has ", rows, " rows but there are ", n, " points `",
         if (axis == 1) "y" else "x", "` to reduce over", call. = FALSE)
  }
  b
}
