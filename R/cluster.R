#' Cluster points into grid cells
#'
#' Puts every point in a cube (a box when `size` has one value per dimension)
#' of a regular grid anchored at the smallest coordinates, and numbers the
#' non-empty cells 1, 2, ... in lexicographic order of their grid coordinates
#' (the first dimension varying fastest). Any dimension.
#'
#' @param x Numeric matrix, one row per point (a vector is one column).
#' @param size Side of the cells: one positive number, or one per column of `x`.
#' @return An integer vector of cluster labels, one per point.
#' @seealso [sort_clusters()], [cluster_ranges_centroids()], [ranges_from_mask()].
#' @examples
#' x <- matrix(runif(200), 100, 2)
#' labels <- grid_cluster(x, 0.25)
#' table(labels)
#' @export
grid_cluster <- function(x, size) {
  x <- gk_check_points(x, "x")
  if (!is.numeric(size) || !length(size) %in% c(1L, ncol(x)) || anyNA(size) ||
      any(!is.finite(size)) || any(size <= 0)) {
    stop("`size` must be one positive number or one per column of `x` (", ncol(x), ")",
         call. = FALSE)
  }
  size <- rep_len(size, ncol(x))
  low <- apply(x, 2L, min)
  cells <- floor(sweep(sweep(x, 2L, low), 2L, size, "/"))
  extent <- apply(cells, 2L, max) + 1
  if (prod(extent) < 2^52) {
    # Mixed-radix cell numbers, exact in double precision.
    key <- drop(cells %*% cumprod(c(1, extent[-length(extent)])))
    uniq <- sort(unique(key))
  } else {
    # Too many cells for one number: order the cells by their coordinates.
    key <- do.call(paste, c(lapply(seq_len(ncol(cells)), function(d) cells[, d]), sep = ":"))
    first <- !duplicated(key)
    cols <- lapply(rev(seq_len(ncol(cells))), function(d) cells[first, d])
    uniq <- key[first][do.call(order, cols)]
  }
  match(key, uniq)
}

#' Sort points by cluster
#'
#' Reorders points so that each cluster is stored contiguously (what
#' block-sparse reductions need), and returns the permutation so that results
#' computed on the sorted points can be put back in the original order.
#'
#' @param x A numeric matrix (rows are points) or vector, or a list of them
#'   (all with one row per label), sorted together.
#' @param labels Integer cluster labels, one per row of `x`.
#' @return A list: `x` (the sorted rows, in the shape given), `labels` (sorted,
#'   non-decreasing), `perm` (sorted `x` is `x[perm, ]`; ties keep their
#'   order) and `inverse` (`order(perm)`: `sorted$x[sorted$inverse, ]` is the
#'   original `x`; a result `r` computed on the sorted points is `r[inverse]`
#'   in the original order).
#' @examples
#' x <- matrix(runif(20), 10, 2)
#' s <- sort_clusters(x, grid_cluster(x, 0.5))
#' all.equal(s$x[s$inverse, ], x)
#' @export
sort_clusters <- function(x, labels) {
  if (!is.numeric(labels) || anyNA(labels) || any(labels != round(labels))) {
    stop("`labels` must be whole numbers without NA", call. = FALSE)
  }
  rows_of <- function(v) if (is.null(dim(v))) length(v) else nrow(v)
  pick <- function(v, perm) if (is.null(dim(v))) v[perm] else v[perm, , drop = FALSE]
  arrays <- if (is.list(x) && !is.data.frame(x)) x else list(x)
  for (v in arrays) {
    if (rows_of(v) != length(labels)) {
      stop("`x` has ", rows_of(v), " rows but there are ", length(labels), " labels",
           call. = FALSE)
    }
  }
  perm <- order(labels, method = "radix")
  sorted <- lapply(arrays, pick, perm = perm)
  list(x = if (is.list(x) && !is.data.frame(x)) sorted else sorted[[1L]],
       labels = labels[perm], perm = perm, inverse = order(perm))
}

#' Cluster ranges, centroids, weights and radii from labels
#'
#' For points sorted by cluster (see [sort_clusters()]), the rows each cluster
#' occupies, its (weighted) centroid, its total weight and its radius (the
#' largest distance from the centroid to one of its points).
#'
#' @param x Numeric matrix of points sorted by cluster, one row per point.
#' @param labels Non-decreasing integer labels in `1..K`, one per row of `x`.
#' @param weights Optional non-negative weights, one per point (all 1 if `NULL`).
#' @param clusters The number of clusters `K` (default `max(labels)`); labels
#'   missing from `labels` are empty clusters.
#' @return A list: `ranges` (a `K` x 2 integer matrix of 1-based inclusive
#'   first and last rows; an empty cluster has `last = first - 1`),
#'   `centroids` (`K` x `ncol(x)`, `NA` for empty clusters), `weights`
#'   (length `K`) and `radii` (length `K`, 0 for empty clusters).
#' @examples
#' x <- matrix(runif(200), 100, 2)
#' s <- sort_clusters(x, grid_cluster(x, 0.5))
#' cl <- cluster_ranges_centroids(s$x, s$labels)
#' cl$ranges
#' @export
cluster_ranges_centroids <- function(x, labels, weights = NULL, clusters = NULL) {
  x <- gk_check_points(x, "x", allow_empty = TRUE)
  if (!is.numeric(labels) || length(labels) != nrow(x) || anyNA(labels) ||
      any(labels != round(labels)) || any(labels < 1)) {
    stop("`labels` must be whole numbers >= 1, one per row of `x`", call. = FALSE)
  }
  if (is.unsorted(labels)) {
    stop("`labels` must be non-decreasing: sort the points with sort_clusters() first",
         call. = FALSE)
  }
  if (is.null(clusters)) clusters <- if (length(labels)) max(labels) else 0L
  gk_check_scalar(clusters, "clusters", lower = 0, integer = TRUE)
  if (length(labels) && max(labels) > clusters) {
    stop("`labels` go up to ", max(labels), " but `clusters` is ", clusters, call. = FALSE)
  }
  if (is.null(weights)) weights <- rep(1, nrow(x))
  if (!is.numeric(weights) || length(weights) != nrow(x) || anyNA(weights) ||
      any(!is.finite(weights)) || any(weights < 0)) {
    stop("`weights` must be finite non-negative numbers, one per row of `x`", call. = FALSE)
  }
  labels <- as.integer(labels)
  counts <- tabulate(labels, clusters)
  ranges <- gk_label_ranges(labels, clusters)
  total <- numeric(clusters)
  total[sort(unique(labels))] <- rowsum(weights, labels, reorder = TRUE)[, 1L]
  centroids <- matrix(NA_real_, clusters, ncol(x))
  present <- counts > 0
  if (any(present)) {
    sums <- rowsum(x * weights, labels, reorder = TRUE)
    means <- rowsum(x, labels, reorder = TRUE) / counts[present]
    # Weighted means; clusters of zero weight fall back to the plain mean.
    w <- total[present]
    weighted <- sums / w
    weighted[w == 0, ] <- means[w == 0, ]
    centroids[present, ] <- weighted
  }
  radii <- numeric(clusters)
  if (nrow(x)) {
    d2 <- rowSums((x - centroids[labels, , drop = FALSE])^2)
    radii[present] <- sqrt(vapply(split(d2, labels), max, numeric(1)))
  }
  list(ranges = ranges, centroids = centroids, weights = total, radii = radii)
}

# The K x 2 (first, last) rows of each cluster for non-decreasing integer
# labels in 1..K (what cluster_ranges_centroids() returns as `ranges`, without
# its centroids and radii, for callers that need only the ranges).
gk_label_ranges <- function(labels, clusters) {
  counts <- tabulate(labels, clusters)
  last <- cumsum(counts)
  cbind(first = as.integer(last - counts + 1L), last = as.integer(last))
}
