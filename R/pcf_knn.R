#' Nearest PCFs
#'
#' The `k` nearest PCFs of each PCF of `x` in \eqn{L_p} distance (see
#' [pcf_pdist()]): among the other functions of `x` (a function is not its
#' own neighbour), or among the functions of `y`. The arguments come in
#' [knn()]'s order: `pcf_knn(x, y, k)`. The distance matrix is never
#' stored: the PCF block engine computes it block by block (on GPUs or the
#' CPU), and each block is folded into running lists of the `k` smallest
#' distances per row. Memory is `O(n k)`, so this works for sets whose
#' distance matrix does not fit in memory (2e5 functions: 160 GB as a
#' matrix). Among `x` itself, each pair is computed once.
#'
#' @inheritParams pcf_pdist
#' @param x A list of PCFs: a `pcf_list`, a `pcf`, or a list of two-column numeric
#'   matrices (times, values), as for [pcf_pdist()].
#' @param y `NULL` (neighbours among `x`), or a list of PCFs to search. A
#'   single number here is taken as `k` with a deprecation warning (the old
#'   order `pcf_knn(X, k, Y)`).
#' @param k Number of neighbours: at least 1, at most `length(x) - 1` (or
#'   `length(y)`).
#' @param X,Y Deprecated names of `x` and `y`.
#' @param workers Split the rows of `x` over \pkg{future} workers, as in
#'   [pcf_pdist()]; see [gk_distributed]. Among `X`, each worker takes a band
#'   of rows against the functions before it, so that each pair is computed
#'   once there too.
#' @return A list with `index` (integer, `length(x)` x `k`, 1-based, nearest
#'   first, ties to the smaller index) and `distance` (same shape), as from
#'   [knn()].
#' @examples
#' set.seed(1)
#' X <- lapply(1:200, function(i) pcf(c(0, sort(runif(5))), c(rnorm(5), 0)))
#' nn <- pcf_knn(X, k = 3)
#' nn2 <- pcf_knn(X[1:5], X, k = 2)
#' head(nn$index)
#' @export
pcf_knn <- function(x, y = NULL, k = 1L, p = 1, precision = "double", devices = NULL,
                    workers = NULL, backend = NULL, X, Y) {
  old <- new <- character()
  # The old order pcf_knn(X, k, Y): a number where the PCFs to search go.
  if (!missing(y) && is.numeric(y) && length(y) == 1L && is.null(dim(y))) {
    if (!missing(k) && is.numeric(k)) stop("pcf_knn(): `y` must be PCFs, not a number", call. = FALSE)
    k_old <- y
    y <- if (!missing(k)) k else NULL
    k <- k_old
    old <- "pcf_knn(X, k, Y)"
    new <- "pcf_knn(x, y, k)"
  }
  if (!missing(X)) {
    if (!missing(x)) gk_given_twice("pcf_knn", "x", "X")
    x <- X
    old <- c(old, "X")
    new <- c(new, "x")
  }
  if (!missing(Y)) {
    if (!is.null(y)) gk_given_twice("pcf_knn", "y", "Y")
    y <- Y
    old <- c(old, "Y")
    new <- c(new, "y")
  }
  gk_deprecated_args("pcf_knn", old, new)
  X <- as_pcf_list(x, "x")
  Y <- y
  if (!is.null(Y)) Y <- as_pcf_list(Y, "y")
  p <- pcf_check_p(p)
  gk_check_scalar(k, "k", lower = 1, integer = TRUE)
  candidates <- if (is.null(Y)) length(X) - 1L else length(Y)
  if (k > candidates) {
    stop("`k` = ", k, " is larger than the number of candidate neighbours (", candidates,
         if (is.null(Y)) ": the other functions of `x`" else ": the functions of `y`", ")",
         call. = FALSE)
  }
  count <- gk_chunk_count(workers, length(X), local_here = TRUE)
  if (count > 0L) {
    return(pcf_knn_distributed(X, as.integer(k), Y, p, precision, backend, devices, count))
  }
  pcf_knn_call(X, Y, as.integer(k), p, precision, backend, devices)
}

pcf_knn_call <- function(X, Y, k, p, precision, backend, devices, column_lists = FALSE) {
  single <- gk_check_precision(precision) == "single"
  requested <- backend
  backend <- gk_backend(backend)
  devices <- gk_devices_for(devices, backend, requested)
  res <- gk_with_engine_progress(
    .Call(gk_r_pcf_knn, unclass(X), if (is.null(Y)) NULL else unclass(Y), k, p, single,
          backend, gk_threads(), pcf_budget(), devices, gk_progress_lines(), column_lists))
  out <- list(index = res[[1L]], distance = res[[2L]])
  if (column_lists) out[c("column_index", "column_distance")] <- res[3:4]
  out
}

# One chunk. Against Y: rows [start, end] of X against all of Y. Among X: the
# band's own pairs, and the band against the functions before it (`left`),
# whose nearest of the band come back as column lists (a part with fewer than
# k candidates leaves NA entries).
pcf_knn_chunk <- function(task) {
  call <- function(X, Y, k, column_lists = FALSE) {
    pcf_knn_call(X, Y, as.integer(k), task$p, task$precision, task$backend, task$devices,
                 column_lists = column_lists)
  }
  if (!task$self) return(list(rect = call(task$X, task$Y, task$k)))
  m <- length(task$X)
  list(tri = if (m >= 2L) call(task$X, NULL, task$k),
       rect = if (length(task$left)) call(task$X, task$left, task$k, column_lists = TRUE))
}

pcf_knn_distributed <- function(X, k, Y, p, precision, backend, devices, count) {
  .Call(gk_r_pcf_check, unclass(X), if (is.null(Y)) NULL else unclass(Y), "cdist", p,
        gk_check_precision(precision) == "single", FALSE, NULL)
  self <- is.null(Y)
  bands <- gk_row_bands(length(X), count, triangle = self)
  opts <- gk_chunk_options()
  tasks <- lapply(seq_len(nrow(bands)), function(b) {
    rows <- bands[b, ]
    list(fun = "pcf_knn_chunk", rows = rows, X = X[rows[1L]:rows[2L]], Y = Y, self = self,
         left = if (self && rows[1L] > 1L) X[seq_len(rows[1L] - 1L)], k = k, p = p,
         precision = precision, backend = backend, devices = devices, chunk = b,
         options = opts)
  })
  parts <- vector("list", length(tasks))
  gk_run_tasks(tasks, function(i, value) parts[[i]] <<- value, gk_progressor(length(tasks)))
  if (!self) {
    return(list(index = do.call(rbind, lapply(parts, function(v) v$rect$index)),
                distance = do.call(rbind, lapply(parts, function(v) v$rect$distance))))
  }
  # Candidates of each function from every part that saw it, then its k
  # nearest (ties to the smaller index, as in one call).
  rows <- index <- integer()
  distance <- numeric()
  add <- function(first_row, lists, shift, idx = "index", dst = "distance") {
    if (is.null(lists)) return()
    ix <- lists[[idx]]
    keep <- !is.na(ix)
    rows <<- c(rows, (row(ix) + first_row - 1L)[keep])
    index <<- c(index, ix[keep] + shift)
    distance <<- c(distance, lists[[dst]][keep])
  }
  for (b in seq_along(parts)) {
    start <- as.integer(bands[b, 1L])
    add(start, parts[[b]]$tri, start - 1L)
    add(start, parts[[b]]$rect, 0L)
    add(1L, parts[[b]]$rect, start - 1L, "column_index", "column_distance")
  }
  o <- order(rows, distance, index)
  rows <- rows[o]
  rank <- seq_along(rows) - match(rows, rows) + 1L
  take <- rank <= k
  n <- length(X)
  out_index <- matrix(NA_integer_, n, k)
  out_distance <- matrix(NA_real_, n, k)
  at <- cbind(rows[take], rank[take])
  out_index[at] <- index[o][take]
  out_distance[at] <- distance[o][take]
  list(index = out_index, distance = out_distance)
}
