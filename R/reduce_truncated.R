# The one-call truncated reduction of kernel_reduce(..., cutoff, cell): cluster
# both point sets on a grid, sort them, keep the cluster pairs that may hold a
# pair of points within `cutoff`, reduce block-sparse, and undo the sorting.

gk_truncated_reduce <- function(x, y, b, kernel, reduction, k, axis, precision, scheme, backend,
                                cutoff, cell, y_is_x, devices = NULL) {
  gk_check_scalar(cutoff, "cutoff", lower = 0, lower_open = TRUE)
  if (is.null(cell)) stop("`cutoff` needs `cell`, the side of the grid cells", call. = FALSE)
  if (inherits(x, "gk_device_matrix")) x <- as.matrix(x)
  if (inherits(y, "gk_device_matrix")) y <- as.matrix(y)
  if (inherits(b, "gk_device_matrix")) b <- as.matrix(b)
  x <- gk_check_points(x, "x")
  y <- if (y_is_x) x else gk_check_points(y, "y")
  gk_check_same_dim(x, y)
  if (!is.numeric(cell) || !length(cell) %in% c(1L, ncol(x)) || anyNA(cell) ||
      any(!is.finite(cell)) || any(cell <= 0)) {
    stop("`cell` (the side of the grid cells) must be one positive number or one per column ",
         "of `x` (", ncol(x), ")", call. = FALSE)
  }
  gk_check_scalar(axis, "axis", lower = 1, integer = TRUE)
  cx <- gk_sorted_clusters(x, cell)
  cy <- if (y_is_x) cx else gk_sorted_clusters(y, cell)
  pairs <- gk_close_cluster_pairs(cx, cy, cutoff)
  ranges <- gk_ranges_from_pairs(cx$ranges, cy$ranges, pairs$x, pairs$y)
  # Weights belong to the points reduced over; results to the output points.
  reduced <- if (axis == 1) cy else cx
  out <- if (axis == 1) cx else cy
  if (!is.null(b)) b <- if (is.null(dim(b))) b[reduced$perm] else b[reduced$perm, , drop = FALSE]
  res <- kernel_reduce(cx$x, cy$x, b = b, kernel = kernel, reduction = reduction, k = k,
                       axis = axis, precision = precision, scheme = scheme, backend = backend,
                       devices = devices, workers = FALSE, ranges = ranges)
  res <- gk_unsort_result(res, out$inverse, reduced$perm)
  attr(res, "kept_fraction") <- unclass(ranges)$kept_pairs / (as.numeric(nrow(x)) * nrow(y))
  res
}

gk_sorted_clusters <- function(x, cell) {
  s <- sort_clusters(x, grid_cluster(x, cell))
  c(s, cluster_ranges_centroids(s$x, s$labels))
}

# Cluster pairs (1-based) with centroid distance <= cutoff + both radii, found
# in blocks of clusters of x so that memory stays linear in the cluster counts.
gk_close_cluster_pairs <- function(cx, cy, cutoff) {
  px <- list()
  py <- list()
  cy2 <- rowSums(cy$centroids^2)
  block <- max(1L, floor(4e6 / max(1L, nrow(cy$centroids))))
  for (start in seq(1L, nrow(cx$centroids), by = block)) {
    rows <- start:min(nrow(cx$centroids), start + block - 1L)
    cen <- cx$centroids[rows, , drop = FALSE]
    norms <- outer(rowSums(cen^2), cy2, "+")
    d2 <- norms - 2 * tcrossprod(cen, cy$centroids)
    reach <- outer(cx$radii[rows], cy$radii, "+") + cutoff
    # The slack covers the rounding of the expanded distance: never drop a pair.
    hit <- which(d2 <= reach^2 + 1e-12 * norms, arr.ind = TRUE)
    px[[length(px) + 1L]] <- rows[hit[, 1L]]
    py[[length(py) + 1L]] <- hit[, 2L]
  }
  list(x = as.integer(unlist(px)), y = as.integer(unlist(py)))
}

# Results computed on sorted points back in the caller's order: rows through
# `inverse`, indices of reduced points through `perm`.
gk_unsort_result <- function(res, inverse, perm) {
  rows <- function(v) if (is.null(dim(v))) v[inverse] else v[inverse, , drop = FALSE]
  index <- function(v) {
    out <- rows(v)
    out[] <- perm[out]   # NA (nothing kept) stays NA
    out
  }
  if (is.list(res)) return(list(values = rows(res$values), index = index(res$index)))
  if (is.integer(res)) return(index(res))
  rows(res)
}
