# The GPU k-lists of knn() / kmin (issue 38): lists of 16, 32 and 64 entries
# in registers, 65-128 in local memory, the float pre-filter of double
# precision (k <= 16 and k = 1), and k = 1 (an argmin by groups of pairs) with
# 1, 2 or 4 rows per thread, against brute force in R: exact indices (ties to
# the smaller index), sizes that are not multiples of the block, one point.

# Brute force: exact squared distances of small integers (or any points in
# double), order() is stable, so ties go to the smaller index.
brute_knn <- function(x, y, k) {
  d2 <- outer(seq_len(nrow(x)), seq_len(nrow(y)),
              function(i, j) rowSums((x[i, , drop = FALSE] - y[j, , drop = FALSE])^2))
  idx <- matrix(0L, nrow(x), k)
  for (i in seq_len(nrow(x))) idx[i, ] <- order(d2[i, ])[seq_len(k)]
  list(index = idx, distance = matrix(sqrt(d2[cbind(rep(seq_len(nrow(x)), k), as.vector(idx))]),
                                      ncol = k))
}

test_that("GPU knn lists (k = 1 to 128) find the brute-force neighbours, ties included", {
  skip_if_no_gpu()
  # Integer coordinates: many exact ties, exact in float32 too.
  for (size in list(c(1, 1), c(1, 300), c(37, 101), c(300, 777), c(513, 1000))) {
    x <- matrix(sample(0:5, size[1] * 3, replace = TRUE), size[1], 3)
    y <- matrix(sample(0:5, size[2] * 3, replace = TRUE), size[2], 3)
    for (k in c(1L, 10L, 17L, 32L, 33L, 64L, 65L, 100L, 128L)) {
      if (k > nrow(y)) next
      ref <- brute_knn(x, y, k)
      for (precision in c("double", "single")) {
        for (scheme in c("auto", "1d", "2d")) {
          nn <- knn(x, y, k = k, precision = precision, scheme = scheme, backend = "gpu")
          label <- sprintf("%d x %d, k = %d, %s, %s", size[1], size[2], k, precision, scheme)
          expect_identical(nn$index, ref$index, label = label)
          expect_equal(nn$distance, ref$distance, tolerance = 1e-12, label = label)
        }
      }
    }
  }
})

test_that("GPU knn lists match brute force on random points in double precision", {
  skip_if_no_gpu()
  x <- matrix(runif(257 * 3), 257, 3)
  y <- matrix(runif(2001 * 3), 2001, 3)
  for (k in c(32L, 100L)) {
    ref <- brute_knn(x, y, k)
    for (scheme in c("1d", "2d")) {
      nn <- knn(x, y, k = k, scheme = scheme, backend = "gpu")
      expect_identical(nn$index, ref$index, label = paste(k, scheme))
      expect_equal(nn$distance, ref$distance, tolerance = 1e-12)
      # float32: the neighbours' exact distances agree to float32's resolution.
      nn <- knn(x, y, k = k, precision = "single", scheme = scheme, backend = "gpu")
      got <- matrix(sqrt(rowSums((x[rep(seq_len(nrow(x)), k), ] - y[as.vector(nn$index), ])^2)), ncol = k)
      expect_lt(max(abs(got - ref$distance)), 1e-6)
    }
  }
  # x against itself (y = x): each point is its own nearest.
  nn <- knn(x, k = 100L, backend = "gpu")
  expect_identical(nn$index, brute_knn(x, x, 100L)$index)
  expect_identical(nn$index[, 1], seq_len(nrow(x)))
})

test_that("GPU argmin and min (1, 2 or 4 rows per thread), max and argmax match brute force", {
  skip_if_no_gpu()
  on.exit(Sys.unsetenv("GK_REDUCE_ROWS"))
  x <- matrix(sample(0:4, 1100 * 3, replace = TRUE), 1100, 3)
  y <- matrix(sample(0:4, 333 * 3, replace = TRUE), 333, 3)
  sq <- gk_kernel("squared_distance")
  Fm <- ref_kernel_values(x, y, sq)
  for (rows in c(1, 2, 4)) {
    Sys.setenv(GK_REDUCE_ROWS = rows)
    for (precision in c("double", "single")) {
      for (scheme in c("1d", "2d")) {
        label <- sprintf("rows %d, %s, %s", rows, precision, scheme)
        got <- kernel_reduce(x, y, kernel = sq, reduction = "argmin", precision = precision,
                             scheme = scheme, backend = "gpu")
        expect_identical(got, apply(Fm, 1, which.min), label = label)
        got <- kernel_reduce(x, y, kernel = sq, reduction = "argmax", precision = precision,
                             scheme = scheme, backend = "gpu")
        expect_identical(got, apply(Fm, 1, which.max), label = label)
        got <- kernel_reduce(x, y, kernel = sq, reduction = "min", precision = precision,
                             scheme = scheme, backend = "gpu")
        expect_equal(got, apply(Fm, 1, min), label = label)
        got <- kernel_reduce(x, y, kernel = gk_kernel("gaussian", range = 2), reduction = "max",
                             precision = precision, scheme = scheme, backend = "gpu")
        expect_equal(got, apply(ref_kernel_values(x, y, gk_kernel("gaussian", range = 2)), 1, max),
                     tolerance = 1e-6, label = label)
        nn <- knn(x, y, k = 1L, precision = precision, scheme = scheme, backend = "gpu")
        expect_identical(nn$index, matrix(apply(Fm, 1, which.min), ncol = 1), label = label)
      }
    }
    # One point, and fewer rows than a block holds.
    expect_identical(knn(x[1, , drop = FALSE], y, k = 1L, backend = "gpu")$index,
                     matrix(which.min(Fm[1, ]), 1, 1))
    expect_identical(knn(x[1:3, ], y[1, , drop = FALSE], k = 1L, backend = "gpu")$index,
                     matrix(1L, 3, 1))
  }
})

test_that("block-sparse knn takes the local-memory lists (k = 65 to 128)", {
  skip_if_no_gpu()
  x <- matrix(sample(0:5, 120 * 3, replace = TRUE), 120, 3)
  y <- matrix(sample(0:5, 400 * 3, replace = TRUE), 400, 3)
  ranges <- ranges_from_mask(rbind(c(1, 60), c(61, 120)), rbind(c(1, 200), c(201, 400)),
                             matrix(c(TRUE, FALSE, TRUE, TRUE), 2))
  for (precision in c("double", "single")) {
    nn <- knn(x, y, k = 100L, ranges = ranges, precision = precision, backend = "gpu")
    cpu <- knn(x, y, k = 100L, ranges = ranges, backend = "cpu")
    expect_identical(nn$index, cpu$index, label = precision)
    expect_equal(nn$distance, cpu$distance, tolerance = 1e-12)
  }
})

test_that("GPU knn k = 1 (groups of pairs; double: the float filter) matches brute force", {
  skip_if_no_gpu()
  on.exit(Sys.unsetenv(c("GK_REDUCE_FLOAT_FILTER", "GK_REDUCE_ROWS", "GK_REDUCE_SLICE_PAIRS")))
  sq <- gk_kernel("squared_distance")
  # Random points; sizes that are not multiples of a group (8 or 16 pairs), a
  # tile or a block.
  for (size in list(c(1, 1), c(5, 17), c(40, 7), c(257, 2001), c(1100, 333))) {
    x <- matrix(runif(size[1] * 3), size[1], 3)
    y <- matrix(runif(size[2] * 3), size[2], 3)
    ref <- brute_knn(x, y, 1L)
    d2 <- outer(seq_len(nrow(x)), seq_len(nrow(y)),
                function(i, j) rowSums((x[i, , drop = FALSE] - y[j, , drop = FALSE])^2))
    for (filter in c("1", "0")) {
      Sys.setenv(GK_REDUCE_FLOAT_FILTER = filter)
      for (scheme in c("1d", "2d")) {
        label <- sprintf("%d x %d, filter %s, %s", size[1], size[2], filter, scheme)
        nn <- knn(x, y, k = 1L, scheme = scheme, backend = "gpu")
        expect_identical(nn$index, ref$index, label = label)
        expect_equal(nn$distance, ref$distance, tolerance = 1e-12, label = label)
        nn <- knn(x, y, k = 1L, precision = "single", scheme = scheme, backend = "gpu")
        got <- sqrt(rowSums((x - y[nn$index, , drop = FALSE])^2))
        expect_lt(max(abs(got - ref$distance)), 1e-6, label = label)
        expect_identical(kernel_reduce(x, y, kernel = sq, reduction = "argmax", scheme = scheme,
                                       backend = "gpu"), apply(d2, 1, which.max), label = label)
      }
    }
  }
  # Near-ties: points of y on a sphere around x's first point, radii a few
  # ulps apart (equal in float): k = 1 picks what the k-list's first entry
  # does (same arithmetic, ties to the smaller index), with or without the
  # filter, 1 or 4 rows per thread, in chunks and in slices.
  x0 <- c(0.4, 0.5, 0.6)
  u <- matrix(rnorm(3000 * 3), 3000, 3)
  u <- u / sqrt(rowSums(u^2))
  y <- sweep(u * (0.3 + 2^-52 * sample(0:3, 3000, replace = TRUE)), 2, x0, "+")
  y <- rbind(y, y[sample(3000, 500), ])   # exact ties further on
  x <- rbind(x0, x0 + 1e-9, matrix(runif(60), 20, 3))
  first <- NULL
  for (filter in c("1", "0")) for (rows in c("", "1", "4")) for (slices in c("", "20000")) {
    Sys.setenv(GK_REDUCE_FLOAT_FILTER = filter, GK_REDUCE_ROWS = rows, GK_REDUCE_SLICE_PAIRS = slices)
    for (scheme in c("1d", "2d")) {
      label <- sprintf("near-ties, filter %s, rows '%s', slices '%s', %s", filter, rows, slices, scheme)
      one <- knn(x, y, k = 1L, scheme = scheme, backend = "gpu")
      two <- knn(x, y, k = 2L, scheme = scheme, backend = "gpu")
      expect_identical(one$index[, 1], two$index[, 1], label = label)
      expect_identical(one$distance[, 1], two$distance[, 1], label = label)
      if (is.null(first)) first <- one
      expect_identical(one, first, label = label)
    }
  }
  # No rows: empty results, as on the CPU.
  Sys.unsetenv(c("GK_REDUCE_FLOAT_FILTER", "GK_REDUCE_ROWS", "GK_REDUCE_SLICE_PAIRS"))
  expect_identical(knn(x[0, , drop = FALSE], y, k = 1L, backend = "gpu"),
                   knn(x[0, , drop = FALSE], y, k = 1L, backend = "cpu"))
})
