#' Distance and kernel matrices between PCFs
#'
#' `pcf_pdist()` computes all pairwise \eqn{L_p} distances
#' \eqn{\|f - g\|_p = (\int_0^\infty |f - g|^p dt)^{1/p}} between the PCFs of
#' `x` and returns an R `dist` object, ready for [stats::hclust()],
#' [stats::cmdscale()] or `cluster::pam()`. `pcf_cdist()` gives the matrix of
#' distances between the PCFs of `x` (rows) and of `y` (columns).
#' `pcf_kernel()` gives the \eqn{L_2} inner products \eqn{\int_0^\infty f g\,dt}
#' (a symmetric positive semi-definite matrix when `y` is `NULL`), e.g. for
#' `kernlab`.
#'
#' The integrals are exact: each pair is integrated over the union of its
#' breakpoints. Distances with finite `p` exist only between functions with the
#' same last value, and the inner product only for functions that end at 0; the
#' error message names a function that breaks the rule. `p = Inf` is the largest
#' \eqn{|f - g|} over intervals of positive length. Sums that would overflow
#' or underflow in floating point (values near 1e200, or a large `p` such as
#' 1000) are recomputed with the largest term factored out, so a finite
#' distance is never returned as `Inf` or 0.
#'
#' The work is cut into blocks by the package's block scheduler. On the GPU,
#' blocks run through a pipeline (the CPU writes block k into the result while
#' the GPU computes blocks k + 1 to k + 3, see `GK_PIPELINE_DEPTH` in
#' [gk_info()]) on every GPU in `devices`, one
#' host thread each; only the functions a block needs are on a GPU at a time, so
#' sets larger than GPU memory work. On the CPU, blocks are computed with
#' OpenMP threads (`options(gpukernels.threads =)`). Both check for a user
#' interrupt between blocks and print progress lines for long runs when
#' `options(gpukernels.progress = TRUE)` (the default in interactive sessions);
#' the closing lines of a GPU run say how long the GPUs computed and how long
#' the host spent writing results. `options(gpukernels.pcf_budget_bytes = b)`
#' replaces the memory budget per device, which holds the blocks of results in
#' flight (by
#' default 80% of the free memory of the emptiest GPU; cache-sized blocks on
#' the CPU): a small value forces many small blocks, to test or to limit memory.
#'
#' @param x,y Lists of PCFs: `pcf_list`, `pcf`, or lists of two-column numeric
#'   matrices (t, v) or of data frames with columns `t` and `v` (see [pcf()]).
#' @param X,Y Deprecated names of `x` and `y`.
#' @param p The order of the distance: a number `>= 1`, or `Inf`.
#' @param precision `"double"` (default) or `"single"`: breakpoints and values
#'   are stored as float (about 7 significant digits; half the memory traffic,
#'   faster on GPUs), the sums and results are double. A warning says when float
#'   cannot represent a function's breakpoints (e.g. steps of 0.5 at times near
#'   1e8), since intervals are then lost.
#' @param backend `"auto"`, `"gpu"` or `"cpu"`; see [gk_backend()].
#' @param devices GPUs to use (numbers from 1, see [gk_info()]); `NULL` uses all
#'   (on future workers: see [gk_distributed]). GPUs that do not exist are an
#'   error unless `backend = "cpu"` (which ignores `devices`).
#' @param workers Split the work over \pkg{future} workers: `NULL` (the
#'   default) when a `future::plan()` other than sequential is set whose
#'   workers may run on other machines (a plan of this machine alone runs the
#'   call here, on all GPUs), a number of chunks (futures of any plan), or
#'   `FALSE`/`1` for this process only; see [gk_distributed].
#' @return `pcf_pdist()`: a `dist` object (with `Labels` from `names(X)`,
#'   `method` such as `"L1"`, and `call`). `pcf_cdist()`: a
#'   `length(x)` x `length(y)` matrix. `pcf_kernel()`: a matrix of inner products.
#' @examples
#' set.seed(1)
#' X <- lapply(1:20, function(i) pcf(c(0, sort(runif(5))), c(rnorm(5), 0)))
#' d <- pcf_pdist(X)
#' hc <- hclust(d)
#' D <- pcf_cdist(X[1:3], X, p = 2)
#' K <- pcf_kernel(X)
#' @export
pcf_pdist <- function(x, p = 1, precision = "double", devices = NULL, workers = NULL,
                      backend = NULL, X) {
  gk_use_new_names("pcf_pdist", c(X = "x"))
  X <- as_pcf_list(x, "x")
  p <- pcf_check_p(p)
  d <- pcf_matrix_call(X, NULL, "pdist", p, precision, backend, devices, workers)
  # attr<- on the fresh vector modifies it in place: no copy of a large result.
  attr(d, "Size") <- length(X)
  if (!is.null(names(X))) attr(d, "Labels") <- names(X)
  attr(d, "Diag") <- FALSE
  attr(d, "Upper") <- FALSE
  attr(d, "method") <- pcf_method_name(p)
  attr(d, "call") <- match.call()
  class(d) <- "dist"
  d
}

#' @rdname pcf_pdist
#' @export
pcf_cdist <- function(x, y, p = 1, precision = "double", devices = NULL, workers = NULL,
                      backend = NULL, X, Y) {
  gk_use_new_names("pcf_cdist", c(X = "x", Y = "y"))
  X <- as_pcf_list(x, "x")
  Y <- as_pcf_list(y, "y")
  p <- pcf_check_p(p)
  D <- pcf_matrix_call(X, Y, "cdist", p, precision, backend, devices, workers)
  dimnames(D) <- pcf_dimnames(X, Y)
  D
}

#' @rdname pcf_pdist
#' @export
pcf_kernel <- function(x, y = NULL, precision = "double", devices = NULL, workers = NULL,
                       backend = NULL, X, Y) {
  gk_use_new_names("pcf_kernel", c(X = "x", Y = "y"))
  X <- as_pcf_list(x, "x")
  Y <- y
  if (is.null(Y)) {
    K <- pcf_matrix_call(X, NULL, "kernel_sym", 2, precision, backend, devices, workers)
    dimnames(K) <- pcf_dimnames(X, X)
  } else {
    Y <- as_pcf_list(Y, "y")
    K <- pcf_matrix_call(X, Y, "kernel", 2, precision, backend, devices, workers)
    dimnames(K) <- pcf_dimnames(X, Y)
  }
  K
}

pcf_check_p <- function(p) {
  if (!is.numeric(p) || length(p) != 1L || is.na(p) || p < 1) {
    stop("`p` must be a single number >= 1, or Inf", call. = FALSE)
  }
  as.double(p)
}

pcf_method_name <- function(p) if (is.infinite(p)) "Linf" else paste0("L", format(p))

pcf_dimnames <- function(X, Y) {
  if (is.null(names(X)) && is.null(names(Y))) NULL else list(names(X), names(Y))
}

# The one place that resolves backend, devices and internal options, then calls
# C, or splits the call over future workers (R/distributed.R). `band`: a
# worker's band of a distributed call, computed from and into shared memory
# (list(input, x_range, y_set, y_range, target, file); gk_pcf_chunk_shared;
# with `file`, into that file's matrix).
# `file`: the results go into a file's matrix instead (pcf_file_chunk).
pcf_matrix_call <- function(X, Y, kind, p, precision, backend, devices = NULL, workers = FALSE,
                            band = NULL, file = NULL) {
  single <- gk_check_precision(precision) == "single"
  count <- if (is.null(band) && is.null(file)) {
    gk_chunk_count(workers, length(X), local_here = TRUE)
  } else 0L
  if (count > 0L) {
    return(gk_pcf_distributed(X, Y, kind, p, precision, backend, devices, count))
  }
  requested <- backend
  backend <- gk_backend(backend)
  devices <- gk_devices_for(devices, backend, requested)
  budget <- pcf_budget()
  if (!is.null(band)) {
    return(gk_with_engine_progress(
      .Call(gk_r_pcf_band, band$input, as.double(band$x_range), as.integer(band$y_set),
            as.double(band$y_range), kind, p, single, backend, gk_threads(), as.double(budget),
            devices, gk_progress_lines(), band$target, band$file)))
  }
  gk_with_engine_progress(
    .Call(gk_r_pcf_matrix, unclass(X), if (is.null(Y)) NULL else unclass(Y), kind, p, single,
          backend, gk_threads(), as.double(budget), devices, gk_progress_lines(), file))
}

pcf_budget <- function() {
  budget <- getOption("gpukernels.pcf_budget_bytes", 0)
  if (!is.numeric(budget) || length(budget) != 1L || is.na(budget) || budget < 0) {
    stop("option gpukernels.pcf_budget_bytes must be a single number >= 0", call. = FALSE)
  }
  as.double(budget)
}

# 0-based GPU numbers for C: all GPUs by default.
# `devices` on the engines' backend: checked GPU numbers on the GPU, else none.
# Where the CPU runs only because there is no GPU (backend "auto"), naming
# GPUs is an error rather than a silent CPU run; an explicit backend = "cpu"
# (argument or option) ignores `devices`, as documented.
gk_devices_for <- function(devices, backend, requested, all = TRUE) {
  if (backend == "gpu") return(if (all || !is.null(devices)) pcf_devices(devices) else integer())
  if (!is.null(devices)) {
    if (is.null(requested)) requested <- getOption("gpukernels.backend", "auto")
    if (!identical(requested, "cpu")) pcf_devices(devices)
  }
  integer()
}

pcf_devices <- function(devices) {
  count <- gk_build_info()$device_count
  if (is.null(devices)) return(seq_len(count) - 1L)
  if (count == 0L) {
    stop("`devices` asks for GPU ", paste(format(devices), collapse = ", "),
         " but there is no GPU here (",
         if (gk_build_info()$cuda) "none was found" else "gpukernels was built without CUDA",
         "): leave `devices` out to run on the CPU", call. = FALSE)
  }
  if (!is.numeric(devices) || !length(devices) || anyNA(devices) || any(devices != round(devices)) ||
      any(devices < 1 | devices > count) || anyDuplicated(devices)) {
    stop("`devices` must be distinct GPU numbers from 1 to ", count, call. = FALSE)
  }
  as.integer(devices) - 1L
}

# The device layer's block plan (internal; used by the tests): one row per block
# in scheduling order with columns row0, rows, col0, cols (1-based starts);
# rows from row_start + 1 on (a worker's band of a symmetric result); side > 0:
# a shared list's agreed side instead of the rules'.
gk_block_plan <- function(n_rows, n_cols, lower, max_elements, split_hint = 1, min_side = 0,
                          row_start = 0, side = 0) {
  plan <- .Call(gk_r_block_plan, as.double(n_rows), as.double(n_cols), as.logical(lower),
                as.double(max_elements), as.double(split_hint), as.double(min_side),
                as.double(row_start), as.double(side))
  colnames(plan) <- c("row0", "rows", "col0", "cols")
  plan
}

# Takers of one shared block list (internal; used by the tests): the side
# each plans with, given its own and its budget (0: it takes none), and the
# blocks each takes of `count` when they take in turn.
gk_block_agree <- function(own, max_elements, count) {
  out <- .Call(gk_r_block_agree, as.double(own), as.double(max_elements), as.double(count))
  colnames(out) <- c("side", "taken")
  out
}
