# Objects that survive saveRDS() (issue 9): an h2matrix or a device matrix
# read back with readRDS() gives the same products as before saving; its
# native data are rebuilt (or uploaded) on first use, once for every copy.

save_and_read <- function(x) {
  path <- tempfile(fileext = ".rds")
  on.exit(unlink(path))
  saveRDS(x, path)
  readRDS(path)
}

test_that("an h2matrix saved and read back gives the same products", {
  set.seed(98)
  for (d in 2:3) {
    n <- c(500, 700)[d - 1]
    l <- matrix(runif(n * d), ncol = d)
    x <- matrix(rnorm(n * 3), n, 3)
    kernel <- gk_kernel("matern", range = 0.15, smoothness = 2.5, variance = 1.7)
    for (backend in test_backends()) {
      for (precision in c("double", "single")) {
        A <- h2_matrix(l, kernel, nugget = 0.1, leaf_size = 37, eta = 2, order = 5,
                       precision = precision, backend = backend)
        y <- A %*% x
        B <- save_and_read(A)
        expect_true(inherits(B, "h2matrix"))
        # Internal functions here: whether native memory is still held.
        expect_false(gpukernels:::gk_native_alive(B))
        C <- B   # a copy made before first use shares the rebuilt data
        expect_equal(B %*% x, y, tolerance = 1e-13)
        expect_true(gpukernels:::gk_native_alive(C))
        # the transposed product takes its own path (in float32 it rounds apart
        # from A %*% x): compare it with the same product of the original
        expect_equal(drop(x[, 1] %*% C), drop(x[, 1] %*% A), tolerance = 1e-13)
        sa <- summary(A)
        sb <- summary(B)
        for (field in c("n", "levels", "leaf_size", "order", "rank", "eta", "coupling_blocks",
                        "dense_blocks", "low_rank_bytes", "dense_bytes", "precision", "backend")) {
          expect_identical(sb[[field]], sa[[field]])
        }
        # an independent check that the rebuilt matrix is the kernel matrix
        ref <- kernel_matrix(l, l, kernel) %*% x + 0.1 * x
        expect_lt(rel_err(B %*% x, ref), if (precision == "double") 1e-3 else 3e-3)
      }
    }
  }
})

test_that("a released h2matrix and a copy of it are rebuilt once", {
  set.seed(99)
  l <- matrix(runif(1200), ncol = 2)
  A <- h2_matrix(l, gk_kernel("exponential", range = 0.3), backend = "cpu")
  x <- rnorm(600)
  y <- A %*% x
  gk_free(A)
  B <- A
  expect_equal(B %*% x, y, tolerance = 1e-13)
  expect_true(gpukernels:::gk_native_alive(A))
  # a matrix saved after its release is read back and rebuilt the same way
  gk_free(A)
  expect_equal(save_and_read(A) %*% x, y, tolerance = 1e-13)
})

# What readRDS() gives for a device matrix saved on a GPU machine: its values
# and a dead pointer (this builds it directly, which works without a GPU).
saved_device_matrix <- function(x, precision) {
  structure(list(native = gpukernels:::gk_native_new(new("externalptr")), values = x,
                 dim = dim(x), precision = precision), class = "gk_device_matrix")
}

test_that("a device matrix read back where there is no GPU is used on the CPU", {
  set.seed(100)
  x <- matrix(runif(60), 20, 3)
  y <- matrix(runif(150), 50, 3)
  b <- rnorm(50)
  for (precision in c("double", "single")) {
    stored <- if (precision == "single") round_to_float(y) else y
    dy <- save_and_read(saved_device_matrix(y, precision))
    expect_equal(dim(dy), c(50L, 3L))
    expect_equal(as.matrix(dy), stored, tolerance = 0)
    expect_output(print(dy), "not on a GPU now")
    ref <- exp(-as.matrix(dist(rbind(x, stored)))[1:20, 21:70]^2 / 2) %*% b
    expect_equal(kernel_matvec(x, dy, b, backend = "cpu"), drop(unname(ref)), tolerance = 1e-12)
    expect_equal(knn(x, dy, k = 2, backend = "cpu"), knn(x, stored, k = 2, backend = "cpu"))
    db <- save_and_read(saved_device_matrix(matrix(b), precision))
    stored_b <- if (precision == "single") round_to_float(b) else b
    expect_equal(kernel_matvec(x, stored, db, backend = "cpu"),
                 kernel_matvec(x, stored, matrix(stored_b), backend = "cpu"), tolerance = 1e-14)
    if (!gk_has_gpu()) {
      expect_error(kernel_matvec(x, dy, b, backend = "gpu"), "no GPU")
    }
  }
  expect_error(gk_free(dy), NA)   # nothing on a GPU: releasing does nothing
})

test_that("a device matrix saved and read back is uploaded again on the GPU", {
  skip_if_no_gpu()
  set.seed(101)
  x <- matrix(runif(300), 100, 3)
  y <- matrix(runif(3000), 1000, 3)
  b <- rnorm(1000)
  for (precision in c("double", "single")) {
    dy <- gk_device_matrix(y, precision = precision)
    before <- kernel_matvec(x, dy, b, backend = "gpu")
    down <- as.matrix(dy)
    e <- save_and_read(dy)
    expect_false(gpukernels:::gk_native_alive(e))
    expect_equal(as.matrix(e), down, tolerance = 0)   # the values kept in R, as stored
    expect_equal(kernel_matvec(x, e, b, backend = "gpu"), before, tolerance = 1e-14)
    expect_true(gpukernels:::gk_native_alive(e))
    expect_equal(as.matrix(e), down, tolerance = 0)   # downloaded from the GPU
    held <- gk_memory()[["gpu1"]]
    gk_free(e)
    expect_lt(gk_memory()[["gpu1"]], held - 0.9 * length(y) * (if (precision == "single") 4 else 8))
    expect_equal(kernel_matvec(x, e, b, backend = "gpu"), before, tolerance = 1e-14)
    # and on the CPU, the same values
    expect_equal(kernel_matvec(x, e, b, backend = "cpu"),
                 kernel_matvec(x, down, b, backend = "cpu"), tolerance = 1e-14)
  }
})
