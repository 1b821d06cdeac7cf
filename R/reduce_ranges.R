#' Block-sparse masks for kernel reductions
#'
#' Builds the block-sparse description of a reduction (KeOps' `ranges`) from
#' clusters of `x` and `y` and a cluster-by-cluster mask: row cluster `p` of
#' `x` interacts with cluster `q` of `y` when `keep[p, q]` is `TRUE`. Passed as
#' `ranges` to [kernel_reduce()], [kernel_matvec()] or [knn()], the reduction
#' only visits the kept blocks of the kernel matrix; rows of `x` in no cluster,
#' or whose clusters keep nothing, get the reduction's neutral element.
#'
#' Points must be sorted by cluster ([sort_clusters()]) so that each cluster is
#' a contiguous range of rows. The object holds both KeOps sets of arrays
#' (0-based, half-open, as in KeOps): `ranges_i`, `slices_i`, `redranges_j`
#' for reductions over `y` (`axis = 1`) and `ranges_j`, `slices_j`,
#' `redranges_i` for reductions over `x` (`axis = 2`). Within a cluster's list,
#' the ranges of adjacent kept clusters are merged, so an all-`TRUE` mask over
#' clusters that cover all points is the dense reduction.
#'
#' @param ranges_x,ranges_y Integer matrices with two columns: the first and
#'   last row (1-based, inclusive) of each cluster of `x` and `y`, sorted and
#'   not overlapping; an empty cluster has `last = first - 1`. The
#'   `ranges` of [cluster_ranges_centroids()].
#' @param keep A logical matrix, `nrow(ranges_x)` by `nrow(ranges_y)`, or a
#'   sparse logical or pattern matrix of the Matrix package (`lgCMatrix`,
#'   `ngCMatrix`, ...) for many clusters.
#' @return An object of class `gk_ranges`, with `print()`, `summary()` and
#'   `as.matrix()` (the kept cluster pairs as a logical matrix) methods.
#' @seealso [kernel_reduce()], [grid_cluster()], [sort_clusters()].
#' @examples
#' x <- matrix(runif(2000), 1000, 2)
#' s <- sort_clusters(x, grid_cluster(x, 0.2))
#' cl <- cluster_ranges_centroids(s$x, s$labels)
#' d <- as.matrix(dist(cl$centroids))
#' r <- ranges_from_mask(cl$ranges, cl$ranges, d < 0.3)
#' r
#' a <- kernel_matvec(s$x, s$x, rnorm(1000), gk_kernel("gaussian", range = 0.05),
#'                    ranges = r)
#' @export
ranges_from_mask <- function(ranges_x, ranges_y, keep) {
  ranges_x <- gk_check_cluster_ranges(ranges_x, "ranges_x")
  ranges_y <- gk_check_cluster_ranges(ranges_y, "ranges_y")
  kx <- nrow(ranges_x)
  ky <- nrow(ranges_y)
  if (inherits(keep, "sparseMatrix")) {
    if (!identical(dim(keep), c(kx, ky))) {
      stop("`keep` is ", nrow(keep), " x ", ncol(keep), " but there are ", kx, " x ", ky,
           " clusters", call. = FALSE)
    }
    if (!requireNamespace("Matrix", quietly = TRUE)) {
      stop("a sparse `keep` needs the Matrix package", call. = FALSE)
    }
    # General form first: symmetric or triangular classes store only part.
    keep <- methods::as(methods::as(keep, "generalMatrix"), "CsparseMatrix")
    entries <- Matrix::summary(keep)
    if ("x" %in% names(entries)) {
      if (!is.logical(entries$x)) {
        stop("a sparse `keep` must be logical (lgCMatrix) or a pattern (ngCMatrix), not ",
             class(keep)[1L], call. = FALSE)
      }
      if (anyNA(entries$x)) stop("`keep` contains NA", call. = FALSE)
      entries <- entries[entries$x, , drop = FALSE]
    }
    pair_x <- as.integer(entries$i)
    pair_y <- as.integer(entries$j)
  } else {
    if (!is.matrix(keep) || !is.logical(keep)) {
      stop("`keep` must be a logical matrix or a sparse logical Matrix, not ",
           class(keep)[1L], call. = FALSE)
    }
    if (!identical(dim(keep), c(kx, ky))) {
      stop("`keep` is ", nrow(keep), " x ", ncol(keep), " but there are ", kx, " x ", ky,
           " clusters", call. = FALSE)
    }
    if (anyNA(keep)) stop("`keep` contains NA", call. = FALSE)
    kept <- which(keep)
    pair_x <- as.integer((kept - 1L) %% kx + 1L)
    pair_y <- as.integer((kept - 1L) %/% kx + 1L)
  }
  gk_ranges_from_pairs(ranges_x, ranges_y, pair_x, pair_y)
}

# The gk_ranges object from checked cluster ranges and 1-based kept pairs.
gk_ranges_from_pairs <- function(ranges_x, ranges_y, pair_x, pair_y) {
  half_open <- function(r) as.integer(rbind(r[, 1L] - 1L, r[, 2L]))
  arrays <- .Call(gk_r_reduce_ranges_build, half_open(ranges_x), half_open(ranges_y),
                  pair_x - 1L, pair_y - 1L)
  as_pairs <- function(v) matrix(v, ncol = 2L, byrow = TRUE, dimnames = list(NULL, c("start", "end")))
  keops <- list(ranges_i = as_pairs(arrays$ranges_i), slices_i = arrays$slices_i,
                redranges_j = as_pairs(arrays$redranges_j),
                ranges_j = as_pairs(arrays$ranges_j), slices_j = arrays$slices_j,
                redranges_i = as_pairs(arrays$redranges_i))
  dup <- duplicated(as.double(pair_x) * (nrow(ranges_y) + 1) + pair_y)   # exact: < 2^62
  structure(c(keops, list(
    ranges_x = ranges_x, ranges_y = ranges_y,
    pair_x = pair_x[!dup], pair_y = pair_y[!dup],
    points = c(gk_cluster_extent(ranges_x), gk_cluster_extent(ranges_y)),
    kept_pairs = .Call(gk_r_reduce_ranges_pairs, list(arrays$ranges_i, arrays$slices_i,
                                                      arrays$redranges_j)),
    .axis1 = arrays[c("ranges_i", "slices_i", "redranges_j")],
    .axis2 = arrays[c("ranges_j", "slices_j", "redranges_i")])),
    class = "gk_ranges")
}

gk_cluster_extent <- function(r) if (nrow(r)) max(r[, 2L], 0L) else 0L

# K x 2 integer matrix of 1-based inclusive (first, last) rows, sorted, not overlapping.
gk_check_cluster_ranges <- function(r, arg) {
  if (is.data.frame(r)) r <- as.matrix(r)
  if (!is.matrix(r) || ncol(r) != 2L || !is.numeric(r)) {
    stop("`", arg, "` must be a matrix with two columns (first and last row of each cluster)",
         call. = FALSE)
  }
  if (anyNA(r)) stop("`", arg, "` contains NA", call. = FALSE)
  if (any(!is.finite(r)) || any(r != round(r))) {
    stop("`", arg, "` must hold whole row numbers", call. = FALSE)
  }
  if (any(r[, 1L] < 1) || any(r[, 2L] > .Machine$integer.max)) {
    stop("`", arg, "` has rows outside 1..", .Machine$integer.max, call. = FALSE)
  }
  bad <- which(r[, 2L] < r[, 1L] - 1)
  if (length(bad)) {
    stop("`", arg, "` cluster ", bad[1L], " ends (", r[bad[1L], 2L], ") before it starts (",
         r[bad[1L], 1L], "); an empty cluster has last = first - 1", call. = FALSE)
  }
  nonempty <- which(r[, 2L] >= r[, 1L])
  if (length(nonempty) > 1L) {
    first <- r[nonempty[-1L], 1L]
    previous <- r[nonempty[-length(nonempty)], 2L]
    bad <- which(first <= previous)
    if (length(bad)) {
      q <- nonempty[bad[1L] + 1L]
      stop("`", arg, "` clusters must be sorted and not overlap: cluster ", q, " starts at row ",
           r[q, 1L], ", not after the previous one ends (row ", previous[bad[1L]], ")",
           call. = FALSE)
    }
  }
  storage.mode(r) <- "integer"
  dimnames(r) <- list(NULL, c("first", "last"))
  r
}

# The arrays a reduction over `axis` reads, checked against the point counts.
gk_ranges_for_call <- function(ranges, m_x, n_y, axis) {
  if (!inherits(ranges, "gk_ranges")) {
    stop("`ranges` must be a gk_ranges object (see ranges_from_mask())", call. = FALSE)
  }
  r <- unclass(ranges)
  points <- r$points
  arrays_ok <- function(a) {
    is.list(a) && length(a) == 3L && all(vapply(a, is.integer, logical(1)))
  }
  if (!is.numeric(points) || length(points) != 2L || anyNA(points) ||
      !arrays_ok(r$.axis1) || !arrays_ok(r$.axis2)) {
    stop("`ranges` is not a valid gk_ranges object (edited by hand?): its `points` and ",
         "arrays must be as ranges_from_mask() makes them (integer); make it again with ",
         "ranges_from_mask()", call. = FALSE)
  }
  if (points[1L] > m_x) {
    stop("`ranges` has clusters of `x` up to row ", points[1L], " but `x` has ", m_x, " rows",
         call. = FALSE)
  }
  if (points[2L] > n_y) {
    stop("`ranges` has clusters of `y` up to row ", points[2L], " but `y` has ", n_y, " rows",
         call. = FALSE)
  }
  if (axis == 1) unclass(ranges)$.axis1 else unclass(ranges)$.axis2
}

#' @export
print.gk_ranges <- function(x, ...) {
  r <- unclass(x)
  total <- as.numeric(r$points[1L]) * r$points[2L]
  cat("<gk_ranges> block-sparse mask: ", nrow(r$ranges_x), " x ", nrow(r$ranges_y),
      " clusters over ", r$points[1L], " x ", r$points[2L], " points\n", sep = "")
  cat("  kept: ", length(r$pair_x), " of ", as.numeric(nrow(r$ranges_x)) * nrow(r$ranges_y),
      " cluster pairs, ", format(r$kept_pairs, big.mark = ","), " point pairs (",
      sprintf("%.3g%%", if (total > 0) 100 * r$kept_pairs / total else 0), ")\n", sep = "")
  cat("  axis 1: ", nrow(r$ranges_i), " clusters of x, ", nrow(r$redranges_j),
      " ranges of y; axis 2: ", nrow(r$ranges_j), " clusters of y, ", nrow(r$redranges_i),
      " ranges of x\n", sep = "")
  invisible(x)
}

#' @export
summary.gk_ranges <- function(object, ...) {
  r <- unclass(object)
  size <- function(cl) cl[, 2L] - cl[, 1L] + 1L
  lists <- function(slices) diff(c(0L, slices))
  total <- as.numeric(r$points[1L]) * r$points[2L]
  structure(list(
    clusters = c(x = nrow(r$ranges_x), y = nrow(r$ranges_y)),
    points = r$points,
    kept_cluster_pairs = length(r$pair_x),
    kept_pairs = r$kept_pairs,
    kept_fraction = if (total > 0) r$kept_pairs / total else 0,
    cluster_size_x = summary(size(r$ranges_x)),
    cluster_size_y = summary(size(r$ranges_y)),
    ranges_per_cluster_x = summary(lists(r$slices_i)),
    ranges_per_cluster_y = summary(lists(r$slices_j))),
    class = "summary.gk_ranges")
}

#' @export
print.summary.gk_ranges <- function(x, ...) {
  cat("Block-sparse mask: ", x$clusters[1L], " x ", x$clusters[2L], " clusters, ",
      x$points[1L], " x ", x$points[2L], " points\n", sep = "")
  cat("Kept: ", x$kept_cluster_pairs, " cluster pairs, ", format(x$kept_pairs, big.mark = ","),
      " point pairs, fraction ", signif(x$kept_fraction, 4), "\n", sep = "")
  cat("Cluster sizes of x:\n")
  print(x$cluster_size_x)
  cat("Cluster sizes of y:\n")
  print(x$cluster_size_y)
  cat("Ranges of y per cluster of x (axis 1):\n")
  print(x$ranges_per_cluster_x)
  cat("Ranges of x per cluster of y (axis 2):\n")
  print(x$ranges_per_cluster_y)
  invisible(x)
}

#' @export
as.matrix.gk_ranges <- function(x, ...) {
  r <- unclass(x)
  keep <- matrix(FALSE, nrow(r$ranges_x), nrow(r$ranges_y))
  keep[cbind(r$pair_x, r$pair_y)] <- TRUE
  keep
}
