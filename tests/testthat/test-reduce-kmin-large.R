# k beyond the GPU's register k-lists (k > 64; 65-128 take the local-memory
# lists, larger k the sorting strategy), against
# the CPU engine and brute force, with ties, k = nrow(y), and sizes that are
# not multiples of the block size.


# Brute-force k nearest: order() is stable, so ties go to the smaller index.
ref_knn <- function(x, y, k) {
  d2 <- ref_kernel_values(x, y, gk_kernel("sqdist"))
  idx <- t(apply(d2, 1, function(r) order(r)[seq_len(k)]))
  if (k == 1) idx <- t(idx)
  list(index = idx, d2 = d2,
       distance = matrix(sqrt(pmax(d2[cbind(rep(seq_len(nrow(x)), k), as.vector(idx))], 0)),
                         ncol = k))
}

test_that("the CPU engine finds any k up to nrow(y), ties to the smaller index", {
  x <- matrix(sample(0:3, 37 * 2, replace = TRUE), 37, 2)
  y <- matrix(sample(0:3, 101 * 2, replace = TRUE), 101, 2)
  for (k in c(65L, 100L, 101L)) {
    nn <- knn(x, y, k = k, backend = "cpu")
    ref <- ref_knn(x, y, k)
    expect_identical(nn$index, matrix(as.integer(ref$index), ncol = k))
    expect_equal(nn$distance, ref$distance, tolerance = 1e-12)
  }
})

test_that("GPU knn with k > 64 agrees with the CPU and brute force, ties included", {
  skip_if_no_gpu()
  # Integer coordinates: many exact ties, resolved to the smaller index in
  # both precisions (squared distances of small integers are exact in float32).
  for (size in list(c(37, 101), c(300, 777), c(257, 1000))) {
    x <- matrix(sample(0:5, size[1] * 3, replace = TRUE), size[1], 3)
    y <- matrix(sample(0:5, size[2] * 3, replace = TRUE), size[2], 3)
    for (k in unique(c(65L, 100L, size[2]))) {
      ref <- ref_knn(x, y, k)
      cpu <- knn(x, y, k = k, backend = "cpu")
      for (precision in c("double", "single")) {
        nn <- knn(x, y, k = k, precision = precision, backend = "gpu")
        label <- sprintf("%d x %d, k = %d, %s", size[1], size[2], k, precision)
        expect_identical(nn$index, cpu$index, label = label)
        expect_identical(nn$index, matrix(as.integer(ref$index), ncol = k), label = label)
        expect_equal(nn$distance, ref$distance, tolerance = 1e-12, label = label)
      }
    }
  }
})

test_that("GPU kmin with k > 64 matches brute force on random points and other kernels", {
  skip_if_no_gpu()
  x <- matrix(rnorm(150 * 4), 150, 4)
  y <- matrix(rnorm(513 * 4), 513, 4)
  for (kern in list(gk_kernel("sqdist"), gk_kernel("gaussian", range = 0.7),
                    gk_kernel("matern", range = 0.5, smoothness = 1.5))) {
    Fm <- ref_kernel_values(x, y, kern)
    for (precision in c("double", "single")) {
      got <- kernel_reduce(x, y, kernel = kern, reduction = "kmin", k = 200,
                           precision = precision, backend = "gpu")
      expect_reduction(got, Fm, "kmin", NULL, 200, precision,
                       label = paste(kern$name, precision))
    }
  }
  # A point set against itself, k = nrow(y): every row is a full sort.
  x <- matrix(runif(90 * 2), 90, 2)
  got <- kernel_reduce(x, kernel = "sqdist", reduction = "kmin", k = 90, backend = "gpu")
  expect_reduction(got, ref_kernel_values(x, x, gk_kernel("sqdist")), "kmin", NULL, 90,
                   "double", label = "self, k = n")
})

test_that("GPU k > 64 in several chunks and with one sort per row agrees with the CPU", {
  skip_if_no_gpu()
  on.exit(Sys.unsetenv("GK_KMIN_LARGE_ELEMENTS"))
  # Chunks of 7 rows (per-row sorts: rows of 5000 are long) and of 150 rows
  # (a segmented sort per chunk), over 301 rows of x.
  x <- matrix(sample(0:9, 301 * 2, replace = TRUE), 301, 2)
  y <- matrix(sample(0:9, 5000 * 2, replace = TRUE), 5000, 2)
  cpu <- knn(x, y, k = 333, backend = "cpu")
  for (rows in c(7, 150)) {
    Sys.setenv(GK_KMIN_LARGE_ELEMENTS = rows * nrow(y))
    for (precision in c("double", "single")) {
      nn <- knn(x, y, k = 333, precision = precision, backend = "gpu")
      expect_identical(nn$index, cpu$index, label = paste(rows, precision))
      expect_equal(nn$distance, cpu$distance, tolerance = 1e-12)
    }
  }
  Sys.unsetenv("GK_KMIN_LARGE_ELEMENTS")
  # k = 1 and 10 (the k-list path) are unchanged beside it.
  for (k in c(1L, 10L, 64L)) {
    expect_identical(knn(x, y, k = k, backend = "gpu")$index, cpu$index[, seq_len(k), drop = FALSE])
  }
})

test_that("GPU k > 64 works on device matrices, and refuses block-sparse ranges beyond 128", {
  skip_if_no_gpu()
  x <- matrix(rnorm(120 * 3), 120, 3)
  y <- matrix(rnorm(400 * 3), 400, 3)
  ref <- ref_knn(x, y, 80)
  nn <- knn(gk_device_matrix(x), gk_device_matrix(y), k = 80)
  expect_identical(nn$index, matrix(as.integer(ref$index), ncol = 80))
  ranges <- ranges_from_mask(rbind(c(1, 60), c(61, 120)), rbind(c(1, 200), c(201, 400)),
                             matrix(c(TRUE, FALSE, TRUE, TRUE), 2))
  # k <= 128 takes the local-memory lists (test-knn-lists.R); beyond, a clear error.
  expect_error(knn(x, y, k = 150, ranges = ranges, backend = "gpu"), "block-sparse")
  # Repeated calls hold no more device memory than the first.
  knn(x, y, k = 300, backend = "gpu")
  held <- gk_memory()
  for (r in 1:3) knn(x, y, k = 300, backend = "gpu")
  expect_identical(gk_memory(), held)
})

