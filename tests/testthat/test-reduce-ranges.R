# Block-sparse reductions (ranges), the clustering helpers and the one-call
# truncated reduction, against brute-force R on the equivalent dense mask.

# Random clusters over n rows: sorted, some empty, some rows in no cluster.
random_clusters <- function(n, k) {
  cuts <- sort(sample(0:n, 2 * k, replace = TRUE))
  r <- cbind(cuts[c(TRUE, FALSE)] + 1L, cuts[c(FALSE, TRUE)])
  r[, 2L] <- pmax(r[, 2L], r[, 1L] - 1L)   # may be empty
  # Clusters may not overlap: make each start after the previous end.
  for (q in seq_len(k)[-1L]) {
    prev <- max(r[seq_len(q - 1L), 2L], 0L)
    if (r[q, 1L] <= prev) r[q, 1L] <- prev + 1L
    if (r[q, 2L] < r[q, 1L] - 1L) r[q, 2L] <- r[q, 1L] - 1L
  }
  r[r[, 2L] > n, 2L] <- n
  r[r[, 1L] > n + 1L, 1L] <- n + 1L
  r[, 2L] <- pmax(r[, 2L], r[, 1L] - 1L)
  r
}

# The dense 0/1 mask of the point pairs that ranges_x x ranges_y x keep keeps.
dense_mask <- function(ranges_x, ranges_y, keep, m, n) {
  mask <- matrix(FALSE, m, n)
  for (p in seq_len(nrow(ranges_x))) for (q in seq_len(nrow(ranges_y))) {
    if (!keep[p, q]) next
    rows <- seq_len(m)[seq(ranges_x[p, 1L], length.out = max(0, ranges_x[p, 2L] - ranges_x[p, 1L] + 1))]
    cols <- seq_len(n)[seq(ranges_y[q, 1L], length.out = max(0, ranges_y[q, 2L] - ranges_y[q, 1L] + 1))]
    mask[rows, cols] <- TRUE
  }
  mask
}

# Reference: each row reduced over its kept columns (helper-reduce.R's
# ref_reduce on the row), the neutral element when it keeps none.
ref_masked <- function(Fm, mask, reduction, b, k) {
  m <- nrow(Fm)
  e <- if (is.null(b)) 1L else ncol(as.matrix(b))
  vals <- matrix(switch(reduction, sum = 0, min = Inf, max = -Inf, logsumexp = -Inf,
                        softmax_sum = NaN, kmin = Inf, NA_real_), m,
                 if (reduction == "kmin") k else e)
  idx <- matrix(NA_integer_, m, if (reduction == "kmin") k else 1L)
  for (i in seq_len(m)) {
    kept <- which(mask[i, ])
    if (!length(kept)) next
    bi <- if (is.null(b)) NULL else as.matrix(b)[kept, , drop = FALSE]
    kk <- min(k, length(kept))
    r <- ref_reduce(Fm[i, kept, drop = FALSE], reduction, bi, kk)
    if (reduction == "kmin") {
      vals[i, seq_len(kk)] <- r$values
      idx[i, seq_len(kk)] <- kept[r$index]
    } else if (reduction %in% c("argmin", "argmax")) {
      idx[i, 1L] <- kept[r]
    } else {
      vals[i, ] <- r
    }
  }
  list(values = vals, index = idx)
}

# got (a kernel_reduce() result) against ref_masked(); indices in float32 by
# the values they point at.
expect_masked <- function(got, ref, Fm, reduction, precision, label) {
  tol <- reduce_tolerance(precision)
  scale <- max(abs(Fm), 1e-300)
  same_values <- function(a, b) {
    a <- as.matrix(a)
    expect_identical(is.na(a), is.na(b), label = label)
    expect_identical(is.infinite(a) & !is.na(a), is.infinite(b) & !is.na(b), label = label)
    ok <- is.finite(a) & is.finite(b)
    if (any(ok)) expect_lt(max(abs(a[ok] - b[ok])) / max(abs(b[ok]), 1e-300), tol, label = label)
  }
  if (reduction %in% c("argmin", "argmax", "kmin")) {
    index <- as.matrix(if (reduction == "kmin") got$index else got)
    expect_identical(is.na(index), is.na(ref$index), label = label)
    if (precision == "double") {
      expect_identical(index, ref$index, label = label)
    } else {
      ok <- !is.na(index)
      picked <- Fm[cbind(row(index)[ok], index[ok])]
      refv <- Fm[cbind(row(index)[ok], ref$index[ok])]
      if (any(ok)) expect_lt(max(abs(picked - refv)) / scale, tol, label = label)
    }
    if (reduction == "kmin") same_values(got$values, ref$values)
  } else {
    same_values(got, ref$values)
  }
}

test_that("ranges equal brute force on the masked kernel matrix, every reduction, both axes", {
  kernel <- gk_kernel("matern", range = 0.6, smoothness = 1.5, variance = 1.7)
  for (backend in test_backends()) for (precision in test_precisions(backend)) {
    for (shape in list(c(157, 211, 9, 12), c(300, 70, 1, 5), c(40, 700, 6, 1))) {
      m <- shape[1]
      n <- shape[2]
      x <- matrix(runif(m * 3), m, 3)
      y <- matrix(rnorm(n * 3), n, 3)
      rx <- random_clusters(m, shape[3])
      ry <- random_clusters(n, shape[4])
      keep <- matrix(runif(nrow(rx) * nrow(ry)) < 0.5, nrow(rx), nrow(ry))
      r <- ranges_from_mask(rx, ry, keep)
      mask <- dense_mask(rx, ry, keep, m, n)
      for (axis in 1:2) for (reduction in all_reductions) {
        n_red <- if (axis == 1) n else m
        b <- weights_for(reduction, n_red, if (axis == 1) 3 else 1)
        Fm <- ref_kernel_values(x, y, kernel)
        M <- mask
        if (axis == 2) {
          Fm <- t(Fm)
          M <- t(mask)
        }
        for (method in if (backend == "gpu") c("1d", "2d") else "auto") {
          got <- kernel_reduce(x, y, b = b, kernel = kernel, reduction = reduction, k = 3,
                               axis = axis, precision = precision, scheme = method,
                               backend = backend, ranges = r)
          label <- sprintf("%s axis %d M %d N %d on %s/%s/%s", reduction, axis, m, n,
                           backend, precision, method)
          expect_masked(got, ref_masked(Fm, M, reduction, b, 3), Fm, reduction, precision, label)
        }
      }
    }
  }
})

test_that("an all-true mask is the dense reduction and an all-false one gives neutral elements", {
  x <- matrix(runif(600), 300, 2)
  y <- matrix(runif(500), 250, 2)
  sx <- sort_clusters(x, grid_cluster(x, 0.3))
  sy <- sort_clusters(y, grid_cluster(y, 0.3))
  rx <- cluster_ranges_centroids(sx$x, sx$labels)$ranges
  ry <- cluster_ranges_centroids(sy$x, sy$labels)$ranges
  all_true <- ranges_from_mask(rx, ry, matrix(TRUE, nrow(rx), nrow(ry)))
  all_false <- ranges_from_mask(rx, ry, matrix(FALSE, nrow(rx), nrow(ry)))
  # Adjacent clusters merge into one range each: the dense description.
  expect_equal(nrow(unclass(all_true)$redranges_j), nrow(rx))
  expect_equal(unclass(all_true)$kept_pairs, 300 * 250)
  kernel <- gk_kernel("cauchy", range = 0.4)
  for (backend in test_backends()) for (precision in test_precisions(backend)) {
    for (reduction in all_reductions) for (axis in 1:2) {
      b <- weights_for(reduction, if (axis == 1) 250 else 300, 2)
      args <- list(sx$x, sy$x, b = b, kernel = kernel, reduction = reduction, k = 2,
                   axis = axis, precision = precision, backend = backend)
      dense <- do.call(kernel_reduce, args)
      expect_equal(do.call(kernel_reduce, c(args, list(ranges = all_true))), dense,
                   tolerance = reduce_tolerance(precision))
      none <- do.call(kernel_reduce, c(args, list(ranges = all_false)))
      rows <- if (axis == 1) 300 else 250
      expected <- switch(reduction,
        sum = matrix(0, rows, 2), min = rep(Inf, rows), max = rep(-Inf, rows),
        argmin = , argmax = rep(NA_integer_, rows),
        kmin = list(values = matrix(Inf, rows, 2), index = matrix(NA_integer_, rows, 2)),
        logsumexp = matrix(-Inf, rows, 2), softmax_sum = matrix(NaN, rows, 2))
      expect_identical(none, expected, label = paste(reduction, axis, backend, precision))
    }
  }
})

test_that("GPU block-sparse reductions equal the CPU's: slices, 2D chunks, device matrices", {
  skip_if_no_gpu()
  m <- 3001
  n <- 4100
  x <- matrix(runif(m * 3), m, 3)
  y <- matrix(runif(n * 3), n, 3)
  sx <- sort_clusters(x, grid_cluster(x, 0.25))
  sy <- sort_clusters(y, grid_cluster(y, 0.25))
  cx <- cluster_ranges_centroids(sx$x, sx$labels)
  cy <- cluster_ranges_centroids(sy$x, sy$labels)
  d <- sqrt(pmax(outer(rowSums(cx$centroids^2), rowSums(cy$centroids^2), "+") -
                   2 * tcrossprod(cx$centroids, cy$centroids), 0))
  r <- ranges_from_mask(cx$ranges, cy$ranges, d < 0.5)
  b <- matrix(rnorm(n * 2), n, 2)
  old <- Sys.getenv("GK_REDUCE_SLICE_PAIRS", NA)
  on.exit(if (is.na(old)) Sys.unsetenv("GK_REDUCE_SLICE_PAIRS") else
    Sys.setenv(GK_REDUCE_SLICE_PAIRS = old))
  for (kernel in list(gk_kernel("gaussian", range = 0.2), gk_kernel("exponential", range = 0.3))) {
    for (reduction in c("sum", "argmin", "kmin", "logsumexp")) {
      bb <- if (reduction == "sum") b else if (reduction == "logsumexp") abs(b) else NULL
      cpu <- kernel_reduce(sx$x, sy$x, b = bb, kernel = kernel, reduction = reduction, k = 4,
                           ranges = r, backend = "cpu")
      for (slices in c("", "200000")) for (method in c("auto", "1d", "2d")) {
        if (nzchar(slices)) Sys.setenv(GK_REDUCE_SLICE_PAIRS = slices) else Sys.unsetenv("GK_REDUCE_SLICE_PAIRS")
        for (precision in c("double", "single")) {
          gpu <- kernel_reduce(sx$x, sy$x, b = bb, kernel = kernel, reduction = reduction, k = 4,
                               ranges = r, precision = precision, scheme = method, backend = "gpu")
          tol <- reduce_tolerance(precision)
          label <- paste(kernel$name, reduction, slices, method, precision)
          if (reduction == "sum" || reduction == "logsumexp") {
            expect_lt(rel_err(gpu, cpu), tol, label = label)
          } else if (precision == "double" && reduction == "kmin") {
            expect_identical(gpu$index, cpu$index, label = label)
            expect_lt(rel_err(gpu$values, cpu$values), tol, label = label)
          } else if (precision == "double") {
            expect_identical(gpu, cpu, label = label)
          }
        }
      }
      Sys.unsetenv("GK_REDUCE_SLICE_PAIRS")
    }
  }
  dx <- gk_device_matrix(sx$x, "single")
  dy <- gk_device_matrix(sy$x)
  db <- gk_device_matrix(b)
  k <- gk_kernel("gaussian", range = 0.2)
  expect_lt(rel_err(kernel_matvec(dx, dy, db, k, ranges = r, backend = "gpu"),
                    kernel_matvec(sx$x, sy$x, b, k, ranges = r, backend = "cpu")), 1e-6)
})

test_that("knn and kernel_matvec take ranges; sparse Matrix masks equal logical ones", {
  skip_if_not_installed("Matrix")
  x <- matrix(runif(400), 200, 2)
  s <- sort_clusters(x, grid_cluster(x, 0.25))
  cl <- cluster_ranges_centroids(s$x, s$labels)
  keep <- as.matrix(dist(cl$centroids)) < 0.4
  r <- ranges_from_mask(cl$ranges, cl$ranges, keep)
  dimnames(keep) <- NULL
  # A symmetric sparse mask (lsCMatrix), and a general one with explicit FALSE entries.
  r_sym <- ranges_from_mask(cl$ranges, cl$ranges, Matrix::Matrix(keep, sparse = TRUE))
  expect_identical(unclass(r_sym)[1:6], unclass(r)[1:6])
  lg <- methods::as(methods::as(Matrix::Matrix(keep | diag(nrow(keep)) > 0, sparse = TRUE),
                                "generalMatrix"), "CsparseMatrix")
  lg@x[seq_along(lg@x) %% 3 == 0] <- FALSE
  expect_s4_class(lg, "lgCMatrix")
  r_lg <- ranges_from_mask(cl$ranges, cl$ranges, lg)
  expect_identical(as.matrix(r_lg), as.matrix(lg))
  r_dense <- ranges_from_mask(cl$ranges, cl$ranges, as.matrix(lg))
  expect_identical(unclass(r_lg)[1:6], unclass(r_dense)[1:6])
  expect_identical(as.matrix(r), keep)
  mask <- keep[s$labels, s$labels]
  d <- as.matrix(dist(s$x))
  d[!mask] <- Inf
  for (backend in test_backends()) {
    nn <- knn(s$x, k = 3, ranges = r, backend = backend)
    expect_equal(nn$distance, unname(t(apply(d, 1, function(v) sort(v)[1:3]))), tolerance = 1e-12)
    b <- rnorm(200)
    K <- exp(-as.matrix(dist(s$x))^2 / 2 / 0.1^2) * mask
    expect_lt(rel_err(kernel_matvec(s$x, s$x, b, gk_kernel("gaussian", range = 0.1), ranges = r,
                                    backend = backend), drop(K %*% b)), 1e-12)
  }
})

test_that("the truncated gaussian sum is within the bound of the dropped tail", {
  for (backend in test_backends()) {
    for (dim in c(1, 2, 3)) {
      m <- 700
      n <- 900
      x <- matrix(runif(m * dim), m, dim)
      y <- matrix(runif(n * dim), n, dim)
      b <- rnorm(n)
      range <- 0.05
      kern <- gk_kernel("gaussian", range = range, variance = 1.5)
      dense <- kernel_matvec(x, y, b, kern, backend = backend)
      for (cutoff in c(0.1, 0.2)) {
        got <- kernel_matvec(x, y, b, kern, cutoff = cutoff, cell = 0.1, backend = backend)
        bound <- 1.5 * exp(-cutoff^2 / (2 * range^2)) * sum(abs(b))
        expect_lte(max(abs(got - dense)), bound * (1 + 1e-9) + 1e-12)
        # Every pair closer than the cutoff is kept: the sum over them is exact.
        d <- sqrt(pmax(ref_kernel_values(x, y, gk_kernel("sqdist")), 0))
        K <- ref_kernel_values(x, y, kern)
        near <- drop((K * (d <= cutoff)) %*% b)
        far <- drop((K * (d > cutoff)) %*% abs(b))
        expect_true(all(abs(got - near) <= far * (1 + 1e-9) + 1e-12))
        f <- attr(got, "kept_fraction")
        expect_true(f > 0 && f <= 1)
        expect_gte(f, mean(d <= cutoff))
      }
      # A cutoff beyond the diameter keeps everything.
      all_kept <- kernel_matvec(x, y, b, kern, cutoff = 10, cell = 0.25, backend = backend)
      expect_equal(attr(all_kept, "kept_fraction"), 1)
      expect_lt(rel_err(as.vector(all_kept), dense), 1e-12)
    }
  }
})

test_that("truncated reductions return indices and rows in the caller's order, both axes", {
  x <- matrix(runif(500), 250, 2)
  y <- matrix(runif(600), 300, 2)
  d <- sqrt(pmax(ref_kernel_values(x, y, gk_kernel("sqdist")), 0))
  for (backend in test_backends()) {
    near <- kernel_reduce(x, y, kernel = "sqdist", reduction = "argmin", cutoff = 0.3,
                          cell = 0.1, backend = backend)
    expect_identical(as.vector(near), apply(d, 1, which.min))
    near2 <- kernel_reduce(x, y, kernel = "sqdist", reduction = "argmin", axis = 2,
                           cutoff = 0.3, cell = 0.1, backend = backend)
    expect_identical(as.vector(near2), apply(d, 2, which.min))
    kn <- kernel_reduce(x, y, kernel = "sqdist", reduction = "kmin", k = 2, cutoff = 0.3,
                        cell = 0.07, backend = backend)
    expect_identical(kn$index, t(apply(d, 1, function(v) order(v)[1:2])))
    a <- rnorm(250)
    s2 <- kernel_matvec(x, y, a, gk_kernel("gaussian", range = 0.02), axis = 2, cutoff = 0.2,
                        cell = 0.05, backend = backend)
    expect_lt(rel_err(as.vector(s2), drop(t(exp(-d^2 / (2 * 0.02^2))) %*% a)), 1e-12)
  }
})

test_that("sort_clusters round-trips and grid_cluster groups points by cell in any dimension", {
  for (dim in c(1, 3, 5)) {
    x <- matrix(rnorm(400 * dim), 400, dim)
    labels <- grid_cluster(x, 0.8)
    cells <- floor(sweep(x, 2, apply(x, 2, min)) / 0.8)
    key <- apply(cells, 1, paste, collapse = ",")
    expect_identical(length(unique(labels)), length(unique(key)))
    expect_true(all(tapply(key, labels, function(k) length(unique(k))) == 1))
    expect_identical(sort(unique(labels)), seq_len(max(labels)))
    s <- sort_clusters(x, labels)
    expect_identical(s$x, x[s$perm, , drop = FALSE])
    expect_identical(s$x[s$inverse, , drop = FALSE], x)
    expect_false(is.unsorted(s$labels))
    both <- sort_clusters(list(x, seq_len(400)), labels)
    expect_identical(both$x[[2]], s$perm)
  }
  expect_error(grid_cluster(matrix(runif(4), 2, 2), c(1, 2, 3)), "size")
  expect_error(grid_cluster(matrix(runif(4), 2, 2), -1), "size")
  expect_error(grid_cluster(matrix(c(1, NA), 1, 2), 1), "NA|finite|missing")
  expect_error(sort_clusters(1:3, 1:2), "labels")
})

test_that("cluster_ranges_centroids matches brute force, with empty clusters", {
  x <- matrix(runif(60), 30, 2)
  labels <- sort(sample(c(1, 2, 4, 5), 30, replace = TRUE))
  w <- runif(30)
  cl <- cluster_ranges_centroids(x, labels, weights = w, clusters = 6)
  expect_identical(dim(cl$ranges), c(6L, 2L))
  for (q in 1:6) {
    rows <- which(labels == q)
    if (!length(rows)) {
      expect_identical(unname(cl$ranges[q, 2] - cl$ranges[q, 1]), -1L)
      expect_true(all(is.na(cl$centroids[q, ])))
      expect_identical(cl$radii[q], 0)
      expect_identical(cl$weights[q], 0)
      next
    }
    expect_identical(unname(cl$ranges[q, ]), range(rows))
    cen <- colSums(x[rows, , drop = FALSE] * w[rows]) / sum(w[rows])
    expect_equal(cl$centroids[q, ], cen)
    expect_equal(cl$weights[q], sum(w[rows]))
    expect_equal(cl$radii[q], max(sqrt(colSums((t(x[rows, , drop = FALSE]) - cen)^2))))
  }
  expect_error(cluster_ranges_centroids(x, rev(labels)), "non-decreasing")
  expect_error(cluster_ranges_centroids(x, labels, weights = -w), "weights")
})

test_that("bad ranges and masks give clear errors", {
  ok <- cbind(c(1, 11), c(10, 20))
  keep <- matrix(TRUE, 2, 2)
  expect_error(ranges_from_mask(cbind(c(1, 5), c(10, 20)), ok, keep), "overlap")
  expect_error(ranges_from_mask(cbind(c(11, 1), c(20, 10)), ok, keep), "sorted")
  expect_error(ranges_from_mask(cbind(c(1, NA), c(10, 20)), ok, keep), "NA")
  expect_error(ranges_from_mask(c(1, 10), ok, keep), "two columns")
  expect_error(ranges_from_mask(cbind(c(0, 11), c(10, 20)), ok, keep), "outside")
  expect_error(ranges_from_mask(cbind(c(5, 11), c(3, 20)), ok, keep), "ends")
  expect_error(ranges_from_mask(cbind(c(1.5, 11), c(10, 20)), ok, keep), "whole")
  expect_error(ranges_from_mask(ok, ok, matrix(TRUE, 2, 3)), "2 x 3")
  expect_error(ranges_from_mask(ok, ok, matrix(1, 2, 2)), "logical")
  expect_error(ranges_from_mask(ok, ok, matrix(c(TRUE, NA), 2, 2)), "NA")
  r <- ranges_from_mask(ok, ok, keep)
  x <- matrix(runif(30), 15, 2)
  y <- matrix(runif(40), 20, 2)
  expect_error(kernel_matvec(x, y, rnorm(20), ranges = r), "`x` has 15 rows")
  expect_error(kernel_matvec(y, x, rnorm(15), ranges = r), "`y` has 15 rows")
  expect_error(kernel_matvec(y, y, rnorm(20), ranges = list(1)), "gk_ranges")
  expect_error(kernel_matvec(y, y, rnorm(20), ranges = r, cutoff = 1, cell = 1), "not both")
  expect_error(kernel_matvec(y, y, rnorm(20), cutoff = -1, cell = 1), "cutoff")
  expect_error(kernel_matvec(y, y, rnorm(20), cutoff = 1), "cell")
  # The engines check what reaches them (a C caller's arrays): a tampered list.
  bad <- unclass(r)
  bad$.axis1$redranges_j <- rev(bad$.axis1$redranges_j)
  class(bad) <- "gk_ranges"
  for (backend in test_backends()) {
    expect_error(kernel_matvec(y, y, rnorm(20), ranges = bad, backend = backend),
                 "block-sparse ranges")
  }
})

test_that("ranges print, summarise and convert back to the mask", {
  ok <- cbind(c(1, 11, 21), c(10, 20, 20))
  keep <- matrix(c(TRUE, FALSE, TRUE, TRUE, FALSE, FALSE, TRUE, TRUE, FALSE), 3, 3)
  r <- ranges_from_mask(ok, ok, keep)
  expect_output(print(r), "3 x 3 clusters over 20 x 20 points")
  # Pairs with the empty third cluster keep no points: 2 blocks of 10 x 10.
  expect_output(print(summary(r)), "Kept: 5 cluster pairs, 200 point pairs")
  expect_identical(as.matrix(r), keep)
  expect_equal(summary(r)$kept_fraction, 200 / 400)
})

# ---- symmetric sums (kernel_reduce(symmetric = TRUE)) ----------------------

# Points (mean zero) sorted into grid cells, and a symmetric mask of the cell
# pairs whose centroids are within `cutoff` (without the diagonal blocks when
# `diagonal` is FALSE, as the H2 couplings).
symmetric_case <- function(n, d, cell, cutoff, diagonal = TRUE) {
  x <- matrix(runif(n * d) - 0.5, n, d)
  s <- sort_clusters(x, grid_cluster(x, cell))
  cl <- cluster_ranges_centroids(s$x, s$labels)
  g <- rowSums(cl$centroids^2)
  dist <- sqrt(pmax(outer(g, g, "+") - 2 * tcrossprod(cl$centroids), 0))
  keep <- dist < cutoff
  if (!diagonal) diag(keep) <- FALSE
  list(x = s$x, ranges = cl$ranges, keep = keep)
}

# The sums against brute force (the masked kernel matrix times b), relative to
# the sums of absolute values (b has mean zero: the sums cancel).
expect_symmetric_sum <- function(got, x, kernel, mask, b, tol, label) {
  K <- kernel_matrix(x, kernel = kernel, backend = "cpu") * mask
  ref <- K %*% b
  scale <- max(abs(K) %*% abs(b))
  expect_lt(max(abs(as.matrix(got) - ref)) / scale, tol, label = label)
}

test_that("symmetric sums equal brute force: 2D and 3D, clusters of any size, 1 and 3 rhs", {
  set.seed(4301)
  kernels <- list(gk_kernel("exponential", range = 0.3),
                  gk_kernel("gaussian", range = 0.2, variance = 1.5),
                  gk_kernel("matern", range = 0.25, smoothness = 2.5),
                  gk_kernel("cauchy", range = 0.3))
  cases <- list(
    symmetric_case(1500, 2, 0.1, 0.35),                      # clusters of ~15 points
    symmetric_case(1203, 3, 0.25, 0.6, diagonal = FALSE),    # ~19, no diagonal blocks
    symmetric_case(2000, 2, 0.34, 0.7),                      # ~220: several pieces each
    {n <- 333; list(x = matrix(runif(n * 3) - 0.5, n, 3),    # one cluster
                    ranges = matrix(c(1L, n), 1), keep = matrix(TRUE))})
  for (backend in test_backends()) for (precision in test_precisions(backend)) {
    for (cs in cases) {
      n <- nrow(cs$x)
      r <- ranges_from_mask(cs$ranges, cs$ranges, cs$keep)
      mask <- dense_mask(cs$ranges, cs$ranges, cs$keep, n, n)
      expect_true(isSymmetric(mask))
      for (kernel in kernels) for (e in c(1L, 3L)) {
        b <- matrix(rnorm(n * e), n, e)
        got <- kernel_reduce(cs$x, b = b, kernel = kernel, ranges = r, symmetric = TRUE,
                             precision = precision, backend = backend)
        label <- sprintf("%s n %d e %d on %s/%s", kernel$name, n, e, backend, precision)
        expect_symmetric_sum(got, cs$x, kernel, mask, b, reduce_tolerance(precision), label)
        full <- kernel_reduce(cs$x, b = b, kernel = kernel, ranges = r, precision = precision,
                              backend = backend)
        expect_lt(max(abs(got - full)) / max(abs(full)),
                  if (precision == "double") 1e-12 else 1e-5, label = label)
        if (e == 1L) {   # a vector b gives a vector
          v <- kernel_reduce(cs$x, b = b[, 1], kernel = kernel, ranges = r, symmetric = TRUE,
                             precision = precision, backend = backend)
          expect_lt(max(abs(v - got[, 1])) / max(abs(full)),
                    if (precision == "double") 1e-12 else 1e-5, label = label)
        }
      }
    }
  }
})

test_that("symmetric sums with gaps, empty clusters and rows in no cluster", {
  set.seed(4302)
  n <- 900
  x <- matrix(runif(n * 2) - 0.5, n, 2)
  rc <- random_clusters(n, 14)
  keep <- matrix(runif(nrow(rc)^2) < 0.4, nrow(rc))
  keep <- keep | t(keep)
  r <- ranges_from_mask(rc, rc, keep)
  mask <- dense_mask(rc, rc, keep, n, n)
  b <- rnorm(n)
  k <- gk_kernel("exponential", range = 0.2)
  for (backend in test_backends()) for (precision in test_precisions(backend)) {
    got <- kernel_reduce(x, b = b, kernel = k, ranges = r, symmetric = TRUE,
                         precision = precision, backend = backend)
    expect_symmetric_sum(got, x, k, mask, b, reduce_tolerance(precision),
                         paste(backend, precision))
  }
})

test_that("GPU symmetric sums equal the CPU's: slices, 2D chunks, repeated calls", {
  skip_if_no_gpu()
  set.seed(4303)
  cs <- symmetric_case(6000, 3, 0.125, 0.45)
  n <- nrow(cs$x)
  r <- ranges_from_mask(cs$ranges, cs$ranges, cs$keep)
  b <- rnorm(n)
  old <- Sys.getenv("GK_REDUCE_SLICE_PAIRS", NA)
  on.exit(if (is.na(old)) Sys.unsetenv("GK_REDUCE_SLICE_PAIRS") else
    Sys.setenv(GK_REDUCE_SLICE_PAIRS = old))
  for (kernel in list(gk_kernel("exponential", range = 0.2), gk_kernel("gaussian", range = 0.1))) {
    cpu <- kernel_reduce(cs$x, b = b, kernel = kernel, ranges = r, backend = "cpu")
    for (slices in c("", "200000")) for (method in c("auto", "1d", "2d")) {
      if (nzchar(slices)) Sys.setenv(GK_REDUCE_SLICE_PAIRS = slices) else Sys.unsetenv("GK_REDUCE_SLICE_PAIRS")
      for (precision in c("double", "single")) {
        gpu <- kernel_reduce(cs$x, b = b, kernel = kernel, ranges = r, symmetric = TRUE,
                             precision = precision, scheme = method, backend = "gpu")
        expect_lt(rel_err(gpu, cpu), reduce_tolerance(precision),
                  label = paste(kernel$name, slices, method, precision))
      }
    }
    Sys.unsetenv("GK_REDUCE_SLICE_PAIRS")
    again <- kernel_reduce(cs$x, b = b, kernel = kernel, ranges = r, symmetric = TRUE, backend = "gpu")
    expect_lt(rel_err(again, cpu), 1e-12)
  }
  # Device matrices: x itself is the operand reduced against.
  dx <- gk_device_matrix(cs$x)
  k <- gk_kernel("exponential", range = 0.2)
  expect_lt(rel_err(kernel_reduce(dx, b = b, kernel = k, ranges = r, symmetric = TRUE, backend = "gpu"),
                    kernel_reduce(cs$x, b = b, kernel = k, ranges = r, backend = "cpu")), 1e-10)
})

test_that("symmetric sums refuse what they cannot do", {
  set.seed(4304)
  n <- 200
  x <- matrix(runif(n * 2), n, 2)
  rc <- cbind(c(1L, 101L), c(100L, 200L))
  one_way <- ranges_from_mask(rc, rc, matrix(c(TRUE, FALSE, TRUE, TRUE), 2))
  both <- ranges_from_mask(rc, rc, matrix(TRUE, 2, 2))
  for (backend in test_backends()) {
    expect_error(kernel_reduce(x, b = rnorm(n), ranges = one_way, symmetric = TRUE,
                               backend = backend), "not symmetric")
    expect_error(kernel_reduce(x, b = abs(rnorm(n)), reduction = "logsumexp", ranges = both,
                               symmetric = TRUE, backend = backend), "symmetric reduction is a sum")
  }
  expect_error(kernel_reduce(x, x, b = rnorm(n), ranges = both, symmetric = TRUE), "no `y`")
  expect_error(kernel_reduce(x, b = rnorm(n), symmetric = TRUE), "over `ranges`")
  expect_error(kernel_reduce(x, b = rnorm(n), ranges = both, symmetric = NA), "TRUE or FALSE")
})
