# H2 covariance matrices: construction, products and summaries (src/h2/).

h2_families <- c("gaussian", "exponential", "matern", "cauchy", "inverse_multiquadric",
                 "exponential_great_circle")

#' H2 covariance matrices
#'
#' Builds the covariance matrix \eqn{K + \tau^2 I} of a kernel at `n` locations
#' as an \eqn{\mathcal{H}^2} matrix (Boukaram, Turkiyyah and Keyes, 2019):
#' \eqn{O(n)} memory and \eqn{O(n)} matrix-vector products (`%*%`), on the GPU
#' when one is used and on the CPU otherwise, with the same algorithm.
#'
#' Construction: the points are clustered by a KD-tree (each cluster is split
#' at the mean of its widest coordinate) into a complete binary cluster tree
#' whose leaves hold at most `leaf_size` points (a split is moved along the
#' coordinate when a child would exceed its capacity, e.g. for clustered or
#' duplicated points). The bases are tensor Chebyshev interpolants with
#' `order` points per dimension on each cluster's bounding box (rank
#' `order^d`); leaf bases are the Lagrange polynomials at the points and the
#' transfer matrices evaluate the parent's polynomials at the children's
#' nodes. A dual traversal of the cluster tree marks a pair of clusters
#' \eqn{(s, t)} as admissible (stored in low rank, as the kernel at the pairs
#' of interpolation nodes) when
#' \deqn{\max(\mathrm{diam}\, B_s, \mathrm{diam}\, B_t) \le \eta\, \mathrm{dist}(B_s, B_t)}
#' for their bounding boxes \eqn{B}; pairs of leaves that are not admissible
#' are stored as dense blocks. A smaller `eta` gives a more accurate and
#' larger matrix; a larger `order` likewise. The point order is internal:
#' vectors are passed and returned in the order of the rows of `x`.
#'
#' On the GPU, the matrix data (dense leaves, couplings, bases, transfers) are
#' evaluated on the device and stay there until the object is garbage
#' collected or released with [gk_free()]; R collects such objects in time by
#' itself (see [gk_free()]). An `h2matrix` can be saved with [saveRDS()]: it
#' keeps its locations, kernel and settings, and the reloaded object rebuilds
#' its matrix data on first use (on the CPU when a GPU matrix is loaded where
#' there is no GPU), giving the same products.
#'
#' @param x Numeric matrix of points, one row per point, 2 or 3 columns.
#' @param locs Deprecated name of `x` (`h2_matrix()` is not a
#'   Gaussian-process function: its points are `x`, as in [kernel_reduce()]).
#' @param kernel A [gk_kernel()] or a family name: `"exponential"`, `"matern"` (any smoothness),
#'   `"gaussian"`, `"cauchy"`, `"inverse_multiquadric"` or `"exponential_great_circle"`
#'   (not smooth at antipodal pairs either: when its value there,
#'   \eqn{e^{-\pi R/\ell}}, exceeds 1e-8, those pairs are kept out of the
#'   low-rank blocks as the near pairs are, which costs many more dense blocks;
#'   below, the kink changes products by less than about that per entry).
#' @param nugget Non-negative number added to the diagonal.
#' @param leaf_size Most points in a leaf cluster (dense blocks are
#'   `leaf_size` square).
#' @param eta Admissibility parameter (> 0); default 3 (errors about 1e-4 in 3D
#'   and 1e-7 in 2D for the exponential kernel at the default orders).
#' @param order Chebyshev points per dimension; default 8 in 2D and 4 in 3D
#'   (rank 64). A request whose H2 storage would exceed both the dense
#'   matrix's and 64 MB (few points with a high order, such as 1000 points in
#'   3D with `order = 16`) is refused with an error that points to
#'   [kernel_matrix()], the smaller and faster path there.
#' @param precision `"double"` or `"single"` (the matrix data and products).
#' @param backend `"auto"`, `"gpu"` or `"cpu"`; see [gk_backend()].
#' @param devices GPUs to hold the matrix (numbers from 1, see [gk_info()]);
#'   `NULL` (the default): the GPU in use ([gk_set_device()]). With several,
#'   the matrix is split over them by rows: each GPU holds every basis and
#'   transfer, and the coupling and dense blocks of a range of clusters of
#'   the top level with coupling blocks (so that no block spans two GPUs'
#'   rows; fewer GPUs are used when that level has fewer clusters), with
#'   about an equal share of the stored entries, so that a product runs on
#'   all of them at once and a matrix larger than one GPU's memory fits
#'   their sum. Every GPU still runs the product's whole upsweep, and `x`
#'   and the result pass through host memory, so two GPUs do not halve a
#'   product's time, and with several columns of `x` a product can take
#'   longer than on one GPU. Such a matrix is stored (`storage = "on_the_fly"` is an
#'   error) and multiplies (`%*%`, [as.matrix()], [summary()] with its
#'   measured error, [h2_error()]); compression, `tol` and the
#'   Gaussian-process functions need it on one GPU. Ignored with
#'   `backend = "cpu"`.
#' @param tol `NULL`, or the relative error wanted instead of `eta` / `order`:
#'   the order is raised (at the given `eta`, else 3) until the error of
#'   products with N(0, 1) vectors (the largest of 4), measured on 2000
#'   sampled rows against the exact kernel, meets `tol`, and the order found is compressed with
#'   [h2_compress()] (smaller ranks, faster products): an order within
#'   `tol / 2` to `tol / 2`, an order within `0.9 tol` to what `tol` leaves
#'   (the two errors add at most), an order within `tol` but not `0.9 tol`
#'   only when the next order is not built or gives no compressed form that
#'   meets `tol`; the compressed matrix is kept when its measured error meets
#'   `tol`. Every matrix of the search is measured with the same 4 vectors and
#'   rows. At `eta <= 3` an order is skipped when its error could not come
#'   within `0.9 tol` even falling 0.15-fold per order from the last one
#'   measured (errors fall 3-5-fold per order at eta 3). `storage = "stored"` builds stored forms.
#'   `"on_the_fly"` builds on-the-fly forms (their memory is \eqn{O(nk)}, so
#'   accuracy is limited by time, not memory) and compresses them likewise: the
#'   result stores its compressed couplings and, on the GPU, keeps its dense
#'   blocks on the fly. At most 4 orders within `10 tol` are built, and none once
#'   the error stops improving. Should no compressed form meet `tol` (or a
#'   compression fail, e.g. for memory), an uncompressed on-the-fly form is
#'   searched, which must meet `0.8 tol` itself; without `eta`, that search tries eta = 3, 2 and 1.5 and
#'   keeps the form that meets it with the fastest predicted product (at
#'   \eqn{n = 2^{20}} in 3D on an H100, `tol = 1e-4` takes order 7 and 218 ms
#'   per product at eta 3, order 5 and 38 ms at eta 2). `"auto"` builds stored
#'   forms while the next order's would fit in the memory budget (80% of the
#'   free GPU memory, no limit on the CPU, or
#'   `options(gpukernels.h2_tol_budget = bytes)`) and can be built, then goes
#'   on on the fly from that order, as `"on_the_fly"` does (a stored order
#'   within `tol` is compressed by what `tol` leaves first: compressed stored
#'   products took 5.6 against 10 ms for the on-the-fly ones at
#'   \eqn{n = 2^{20}} in 3D on an H100). The measured error of the result is
#'   kept and shown by `print()`, with the order, eta and form chosen and why
#'   (for a compressed form, the error before the compression and the
#'   compression's tolerance; for an uncompressed one, why no compressed form
#'   was taken). When no order meets `tol` (the next does not fit in memory,
#'   or the highest order tried is not accurate enough) a warning says so and
#'   the most accurate matrix built is returned.
#' @param storage `"auto"` (default), `"stored"` or `"on_the_fly"`: whether the
#'   coupling and dense blocks are stored, or evaluated in every product as
#'   block-sparse kernel sums of the reduction engine (see [kernel_reduce()]'s
#'   `ranges`) over the Chebyshev nodes of all levels and over the points, keeping
#'   only the bases and transfers (\eqn{O(nk)} memory). Both give the same
#'   products up to rounding. `"auto"` takes the on-the-fly form when the
#'   stored one would not fit in the memory that may still be used (the GPU
#'   budget, or the host budget of [gk_memory()]), else the one a timing model
#'   predicts to be faster: stored blocks streamed at 2.5e12 B/s on a GPU
#'   (5e9 on the CPU) against kernel pairs evaluated at 3.7e11/s in double and
#'   1.35e12/s in single precision, plus 0.1 ms per engine call (two per product), on
#'   a GPU (rates measured on an H100 with the exponential kernel; 2e8/s on the
#'   CPU). On a GPU each off-diagonal kernel block is evaluated once and used for
#'   its rows and its columns (one right-hand side; see `symmetric` in
#'   [kernel_reduce()]), about half the pairs at 1.33 (double) or 1.47 (single)
#'   times the cost. At \eqn{n = 2^{20}} in 3D (eta 3, order 4) that takes the
#'   on-the-fly form in both precisions (9.4 against 15.7 ms per product in
#'   double, 3.0 against 8.3 ms in single, on an H100). `summary()` says which, why,
#'   and both predictions. [h2_compress()] of an on-the-fly matrix stores its
#'   compressed couplings and keeps the dense blocks on the fly. With `tol`,
#'   see above. `"stored_if_fits"`: stored unless the stored form would not
#'   fit (then on the fly), for products of many columns at once: the model
#'   above is for one column, and an on-the-fly product's cost grows with the
#'   columns faster than a stored one's (at \eqn{n = 10^6} in 2D, order 8, eta
#'   2, 76 against 28 ms for 52 columns in double on an H100, 5.9 against 8.1
#'   ms for one); the iterative Gaussian-process methods use it on a GPU. With
#'   `tol` it is `"auto"`.
#' @return An object of class `h2matrix`, with methods for `%*%`, `dim`,
#'   `print`, `summary` and `as.matrix`; see also [h2_error()] and
#'   [h2_compress()].
#' @examples
#' x <- matrix(runif(2000), ncol = 2)
#' A <- h2_matrix(x, gk_kernel("exponential", range = 0.1), backend = "cpu")
#' A
#' y <- A %*% rnorm(1000)
#' h2_error(A)
#' @export
h2_matrix <- function(x, kernel, nugget = 0, leaf_size = 64, eta = NULL, order = NULL,
                      precision = "double", tol = NULL,
                      storage = c("auto", "stored", "on_the_fly"), devices = NULL,
                      backend = NULL, locs) {
  gk_use_new_names("h2_matrix", c(locs = "x"))
  storage <- h2_check_storage(storage)
  if (!is.null(tol) && storage == "stored_if_fits") storage <- "auto"
  # The matrix keeps its points as `locs` (its settings, read by h2_build()).
  locs <- gk_check_points(x, "x")
  d <- ncol(locs)
  if (!d %in% c(2L, 3L)) {
    stop("h2_matrix() needs points in 2 or 3 dimensions; `x` has ", d, " column",
         if (d != 1L) "s", call. = FALSE)
  }
  if (nrow(locs) > 2^30) stop("`x` has too many points (at most 2^30)", call. = FALSE)
  kernel <- gk_check_kernel_dim(as_gk_kernel(kernel), d)
  if (!kernel$name %in% h2_families) {
    stop("h2_matrix() supports the ", paste0("\"", h2_families, "\"", collapse = ", "),
         " kernels, not \"", kernel$name, "\"", call. = FALSE)
  }
  gk_check_scalar(nugget, "nugget", lower = 0)
  gk_check_scalar(leaf_size, "leaf_size", lower = 1, integer = TRUE)
  eta_given <- !is.null(eta)
  if (is.null(eta)) eta <- 3
  gk_check_scalar(eta, "eta", lower = 0, lower_open = TRUE)
  if (!is.null(tol)) tol <- h2_check_tol(tol)
  if (is.null(order) && is.null(tol)) order <- if (d == 2L) 8L else 4L
  if (!is.null(order)) {
    gk_check_scalar(order, "order", lower = 1, integer = TRUE)
    if (order > 16) stop("`order` must be at most 16", call. = FALSE)
  }
  if (leaf_size > 4096) stop("`leaf_size` must be at most 4096", call. = FALSE)
  precision <- gk_check_precision(precision)
  if (!is.null(order)) h2_check_size(nrow(locs), d, leaf_size, order, precision)
  requested <- backend
  backend <- gk_backend(backend)
  devices <- gk_devices_for(devices, backend, requested, all = FALSE)
  if (length(devices) > 1L) {
    if (!is.null(tol)) {
      stop("`tol` searches on one GPU: leave `devices` out, or give `order` and `eta` ",
           "to split the matrix over several GPUs", call. = FALSE)
    }
    if (storage == "on_the_fly") {
      stop("a matrix split over several GPUs stores its blocks: use storage = \"stored\" ",
           "(or \"auto\") with several `devices`", call. = FALSE)
    }
    storage <- "stored"
  }
  if (!is.null(tol)) {
    if (length(devices)) {   # the search runs on the GPU in use: that one
      old <- .Call(gk_r_current_device)
      gk_set_device(devices + 1L)
      on.exit(gk_set_device(old), add = TRUE)
    }
    return(h2_matrix_to_tol(locs, kernel, nugget, leaf_size, eta, order, precision, backend, tol,
                            storage, etas = if (eta_given) eta else h2_tol_etas))
  }
  h2_matrix_new(locs, kernel, nugget, leaf_size, order, eta, precision, backend, storage,
                devices = if (length(devices)) devices + 1L)
}

# The h2matrix of checked arguments (h2_matrix(), h2_matrix(tol = )'s
# search); `tree`: NULL, or the points' tree at eta from gk_r_h2_tree, which
# the build copies instead of clustering again (the search's orders).
h2_matrix_new <- function(locs, kernel, nugget, leaf_size, order, eta, precision, backend,
                          storage, tree = NULL, devices = NULL) {
  settings <- list(locs = locs, kernel = kernel, nugget = as.double(nugget),
                   leaf_size = as.integer(leaf_size), order = as.integer(order),
                   eta = as.double(eta), precision = precision, backend = backend,
                   storage = storage, devices = devices)
  # The S4 bit lets `%*%` (an S4-dispatching primitive before R 4.3) reach the
  # method below; the object is otherwise an ordinary S3 list. Its native data
  # live in `native` (R/native.R) and are rebuilt from the settings when needed.
  asS4(structure(c(list(native = gk_native_new(h2_build(settings, tree))), settings),
                 class = "h2matrix"))
}

# Builds the native matrix from an h2matrix's settings: on the GPU it was
# built for, or on the CPU where there is no GPU (e.g. after readRDS()); then
# the orthogonalizations and compressions that made A, in order (its
# `transforms`: NA for an orthogonalization, else the tolerance). With
# `tree` (h2_matrix_new), its copy at A's order.
h2_build <- function(A, tree = NULL) {
  backend <- if (A$backend == "gpu" && !gk_has_gpu()) "cpu" else A$backend
  # On the GPUs it was built on (`devices`, 1-based) where they are all here,
  # else on the GPU in use (a matrix reloaded on another machine).
  devices <- .subset2(A, "devices")
  if (backend != "gpu" || any(devices > gk_build_info()$device_count)) devices <- NULL
  if (length(devices) == 1L) {
    old <- .Call(gk_r_current_device)
    gk_set_device(devices)
    on.exit(gk_set_device(old), add = TRUE)
  }
  ptr <- .Call(gk_r_h2_build, A$locs, A$kernel, A$nugget, A$leaf_size, A$order, A$eta,
               A$precision == "single", backend, h2_storage_code(.subset2(A, "storage")),
               gk_threads(), tree, if (length(devices) > 1L) as.integer(devices) - 1L)
  for (tol in .subset2(A, "transforms")) {
    ptr <- .Call(gk_r_h2_compress, ptr, tol, gk_threads(), h2_compress_on_gpu())[[1L]]
  }
  ptr
}

# The live native matrix of A, rebuilt after readRDS() or gk_free().
h2_ptr <- function(A) gk_native_ptr(A, h2_build)

h2_info <- function(A) .Call(gk_r_h2_info, h2_ptr(A))

#' @export
gk_free.h2matrix <- function(x) {
  .Call(gk_r_h2_free, .subset2(x, "native")$ptr)
  invisible(x)
}

# Refuses H2 matrices that would be larger than the dense matrix and than 64 MB:
# few points with a high order, where the dense path is smaller and faster. The
# estimate is a lower bound known before construction: leaf bases, transfer
# matrices and the diagonal dense blocks of the complete cluster tree.
h2_check_size <- function(n, d, leaf_size, order, precision) {
  depth <- 0
  while (leaf_size * 2^depth < n) depth <- depth + 1
  leaves <- 2^depth
  rank <- order^d
  entries <- leaves * leaf_size * rank + (2 * leaves - 1) * rank^2 + leaves * leaf_size^2
  h2_bytes <- entries * (if (precision == "single") 4 else 8)
  dense_bytes <- 8 * as.double(n)^2
  if (h2_bytes > dense_bytes && h2_bytes > 2^26) {
    mb <- function(b) format(signif(b / 2^20, 3), scientific = FALSE)
    stop("h2_matrix() would store at least ", mb(h2_bytes), " MB for these ", n,
         " points (rank ", rank, " = order^", d, " per cluster), more than the dense ",
         "matrix (", mb(dense_bytes), " MB): use kernel_matrix(locs, kernel = kernel) ",
         "(plus diag(nugget, n)) for so few points, or a smaller `order`", call. = FALSE)
  }
  invisible(TRUE)
}

# A %*% x for a vector or an n x k matrix x, in the user's point order.
h2_multiply <- function(A, x) {
  if (is.data.frame(x)) x <- as.matrix(x)
  if (!is.numeric(x) && !is.logical(x)) {
    stop("an h2matrix can only multiply a numeric vector or matrix", call. = FALSE)
  }
  n <- nrow(A$locs)
  rows <- if (is.null(dim(x))) length(x) else nrow(x)
  if (rows != n) {
    stop("non-conformable: the h2matrix is ", n, " x ", n, " but x has ", rows, " rows",
         call. = FALSE)
  }
  # a double vector goes as it is (one column, no copy); others are converted
  if (!is.double(x)) storage.mode(x) <- "double"
  .Call(gk_r_h2_matmul, h2_ptr(A), x)   # refuses NA, NaN and infinite values
}

#' @importFrom methods setOldClass setMethod show
methods::setOldClass("h2matrix")

#' Products with an H2 matrix
#'
#' `A %*% x` multiplies the `h2matrix` `A` by a vector or by a matrix of
#' several right-hand sides at once (returning an `n x k` matrix); `x %*% A`
#' uses the symmetry of `A`.
#' @param x,y An `h2matrix` and a numeric vector or matrix.
#' @return A numeric matrix.
#' @name h2matrix-product
#' @aliases %*%,h2matrix,ANY-method %*%,ANY,h2matrix-method
#' @examples
#' A <- h2_matrix(matrix(runif(600), ncol = 3), gk_kernel("matern", range = 0.2,
#'                smoothness = 1.5), backend = "cpu")
#' dim(A %*% matrix(rnorm(600), 200, 3))
#' @exportMethod %*%
NULL

methods::setMethod("%*%", methods::signature(x = "h2matrix", y = "ANY"),
                   function(x, y) h2_multiply(x, y))
methods::setMethod("%*%", methods::signature(x = "ANY", y = "h2matrix"),
                   function(x, y) {
                     if (is.null(dim(x))) return(t(h2_multiply(y, x)))
                     t(h2_multiply(y, t(x)))
                   })

# Auto-printing goes through show() for objects with the S4 bit.
methods::setMethod("show", "h2matrix", function(object) print(object))

#' @export
dim.h2matrix <- function(x) c(nrow(x$locs), nrow(x$locs))

#' @export
as.matrix.h2matrix <- function(x, ...) {
  n <- nrow(x$locs)
  if (n > 10000) stop("as.matrix() of an h2matrix is for n <= 10000 (this one has n = ", n, ")",
                      call. = FALSE)
  h2_multiply(x, diag(n))
}

#' @param object For `summary()`: an `h2matrix`.
#' @param accuracy For `summary()`: measure the error with [h2_error()]
#'   (exact products, costly for large `n`) and show it.
#' @param ... Not used.
#' @rdname h2_matrix
#' @export
summary.h2matrix <- function(object, accuracy = FALSE, ...) {
  info <- h2_info(object)
  bytes <- info$bytes_per_entry
  # On the fly, nothing stored but bases, transfers, nodes and ranges; with
  # dense blocks alone on the fly (a compressed on-the-fly matrix), the
  # couplings too.
  if (isTRUE(info$couplings_on_the_fly)) info$coupling_entries <- 0
  if (info$on_the_fly) info$dense_entries <- 0
  storage <- h2_storage_summary(info)
  # built in the form h2_matrix(tol = ) chose: print() says why on its own line
  if (!is.null(object$tol_choice)) storage$reason <- "tol"
  structure(list(storage = storage, n = info$n, dim = info$dim, levels = info$levels,
                 leaf_size = info$leaf_size, order = info$order, rank = info$rank,
                 eta = info$eta, coupling_blocks = info$coupling_blocks,
                 dense_blocks = info$dense_blocks,
                 low_rank_bytes = bytes * (info$basis_entries + info$transfer_entries +
                                             info$coupling_entries),
                 dense_bytes = bytes * info$dense_entries,
                 build_seconds = info$build_seconds, kernel = object$kernel,
                 precision = object$precision, backend = if (info$gpu) "gpu" else "cpu",
                 level_ranks = h2_level_ranks(object), compression = object$compression,
                 tol_choice = object$tol_choice,
                 devices = if (info$parts > 1L) .subset2(object, "devices")[seq_len(info$parts)],
                 accuracy = if (isTRUE(accuracy)) h2_error(object) else object$accuracy),
            class = "summary.h2matrix")
}

#' @export
print.summary.h2matrix <- function(x, ...) {
  mb <- function(b) sprintf("%.1f MB", b / 2^20)
  cat(sprintf("<h2matrix> %d x %d, %dD locations, %s precision, %s backend\n", x$n, x$n,
              x$dim, x$precision, x$backend))
  cat("  kernel: ")
  print(x$kernel)
  cat(sprintf("  tree: %d levels, leaves of <= %d points; rank %d (order %d)%s, eta = %g\n",
              x$levels, x$leaf_size, x$rank, x$order,
              if (is.null(x$compression)) "" else " as built", x$eta))
  cat(sprintf("  blocks: %.0f low-rank, %.0f dense\n", x$coupling_blocks, x$dense_blocks))
  cat(sprintf("  memory: low rank %s, dense %s (a dense matrix: %s)\n", mb(x$low_rank_bytes),
              mb(x$dense_bytes), mb(as.double(x$n)^2 * 8)))
  h2_print_storage(x$storage)
  if (length(x$devices) > 1L) {
    cat("  split over GPUs ", paste(x$devices, collapse = ", "),
        " (each: every basis, the blocks of its share of the rows)\n", sep = "")
  }
  # a compressed or orthogonalized matrix was made by that step, not built
  what <- if (is.null(x$compression)) "build time" else if (is.na(x$compression$tol))
    "orthogonalization time" else "compression time"
  cat(sprintf("  %s: %.3f s\n", what, x$build_seconds))
  if (!is.null(x$compression)) h2_print_compression(x$compression)
  if (!is.null(x$tol_choice)) h2_print_tol_choice(x$tol_choice)
  if (!is.null(x$accuracy)) {
    cat(sprintf("  measured error (%d %s probes, %d %srows): %.3g for products",
                x$accuracy$n_probes, x$accuracy$distribution, x$accuracy$rows,
                if (isTRUE(x$accuracy$sampled)) "sampled " else "", x$accuracy$probe))
    if (!is.na(x$accuracy$norm2)) cat(sprintf(", 2-norm <= %.3g", x$accuracy$norm2))
    cat("\n")
  }
  invisible(x)
}

#' @export
print.h2matrix <- function(x, ...) {
  print(summary(x))
  invisible(x)
}
