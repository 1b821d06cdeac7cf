# Memory that R can see (issue 9): native memory held by live objects is
# counted, R collects before a large allocation when needed, and a loop that
# replaces one large object by another holds about two, with no gc() here.

vm_rss_bytes <- function() {
  line <- grep("^VmRSS:", readLines("/proc/self/status"), value = TRUE)
  as.numeric(sub("^VmRSS:\\s*([0-9]+) kB.*$", "\\1", line)) * 1024
}

gpu_free_bytes <- function() gk_info()$devices$free_memory[1]

h2_bytes <- function(A) {
  s <- summary(A)
  s$low_rank_bytes + s$dense_bytes
}

# The loop of the issue at a smaller n; `where` is "host" or "gpu1".
memory_loop <- function(backend, where, n = 2500, iterations = 6) {
  set.seed(95)
  l <- matrix(runif(2 * n), ncol = 2)
  z <- rnorm(n)
  held <- numeric(iterations)
  size <- 0
  for (i in seq_len(iterations)) {
    A <- h2_matrix(l, gk_kernel("exponential", range = 0.05 + i / 100), backend = backend)
    y <- A %*% z
    size <- max(size, h2_bytes(A))
    held[i] <- gk_memory()[[where]]
  }
  list(held = held, size = size, y = y, A = A, l = l, z = z)
}

test_that("the h2_matrix loop holds about two matrices on the CPU (counted and RSS)", {
  has_rss <- file.exists("/proc/self/status")
  invisible(gc())
  rss0 <- if (has_rss) vm_rss_bytes() else NA
  held0 <- gk_memory()[["host"]]
  r <- memory_loop("cpu", "host")
  expect_gt(r$size, 32 * 2^20)   # above the smallest holdings that trigger a collection
  # what live objects hold: never more than two matrices (plus their trees)
  expect_lt(max(r$held - held0), 2.2 * r$size)
  expect_true(all(diff(r$held[-1]) < 0.1 * r$size))
  # the process: six matrices without collections; about two with them
  if (has_rss) expect_lt(vm_rss_bytes() - rss0, 3.5 * r$size)
  else skip("VmRSS is not available here")
  # the last product is right
  ref <- drop(kernel_matrix(r$l, r$l, gk_kernel("exponential", range = 0.11)) %*% r$z)
  expect_lt(sqrt(sum((r$y - ref)^2) / sum(ref^2)), 1e-4)
})

test_that("the same loop holds about two matrices of GPU memory", {
  skip_if_no_gpu()
  free0 <- gpu_free_bytes()
  held0 <- gk_memory()[["gpu1"]]
  r <- memory_loop("gpu", "gpu1", n = 50000, iterations = 8)
  expect_lt(max(r$held - held0), 2.2 * r$size)
  expect_gt(gpu_free_bytes(), free0 - 3.5 * r$size)
})

test_that("a GPU matrix's product workspace is counted with it", {
  skip_if_no_gpu()
  set.seed(96)
  n <- 20000
  locs <- matrix(runif(2 * n), ncol = 2)
  invisible(gc())
  empty <- gk_memory()[["gpu1"]]
  A <- h2_matrix(locs, gk_kernel("exponential", range = 0.1), backend = "gpu")
  before <- gk_memory()[["gpu1"]]
  X <- matrix(rnorm(n * 40), n, 40)
  Y <- A %*% X
  grown <- gk_memory()[["gpu1"]] - before
  # at least the copies of x and y (n x 40 each, in the matrix's precision)
  expect_gte(grown, 2 * n * 40 * 8)
  expect_equal(A %*% X[, 1:3], Y[, 1:3], tolerance = 1e-12)
  expect_identical(gk_memory()[["gpu1"]] - before, grown)   # kept, not grown again
  gk_free(A)   # gives back the matrix and its workspace
  expect_identical(gk_memory()[["gpu1"]], empty)
})

test_that("a loop of device matrix uploads holds about two on the GPU", {
  skip_if_no_gpu()
  x <- matrix(runif(3 * 4e6), ncol = 3)   # 96 MB in double
  held0 <- gk_memory()[["gpu1"]]
  free0 <- gpu_free_bytes()
  for (i in 1:10) {
    dx <- gk_device_matrix(x)
    expect_lt(gk_memory()[["gpu1"]] - held0, 2.2 * 96e6)
  }
  expect_gt(gpu_free_bytes(), free0 - 3.5 * 96e6)
  s <- kernel_matvec(x[1:5, ], dx, rep(1, nrow(x)), backend = "gpu")
  expect_equal(s, kernel_matvec(x[1:5, ], x, rep(1, nrow(x)), backend = "gpu"), tolerance = 1e-12)
})

test_that("the host budget option bounds what small objects hold", {
  set.seed(96)
  l <- matrix(runif(1000), ncol = 2)
  one <- h2_bytes(h2_matrix(l, gk_kernel("gaussian", range = 0.1), backend = "cpu"))
  invisible(gc())
  held0 <- gk_memory()[["host"]]
  old <- options(gpukernels.host_memory_budget = held0 + 3 * one)
  on.exit(options(old))
  held <- numeric(12)
  for (i in 1:12) {
    A <- h2_matrix(l, gk_kernel("gaussian", range = 0.1 + i / 100), backend = "cpu")
    held[i] <- gk_memory()[["host"]] - held0
  }
  # far below the growth threshold, so only the budget collects
  expect_lt(max(held), 4.5 * one)
  options(old)
  held <- numeric(12)
  for (i in 1:12) {
    A <- h2_matrix(l, gk_kernel("gaussian", range = 0.1 + i / 100), backend = "cpu")
    held[i] <- gk_memory()[["host"]] - held0
  }
  expect_gt(max(held), 6 * one)   # without the budget they pile up (32 MB threshold)
})

test_that("gk_free() releases at once; the object is rebuilt when used again", {
  set.seed(97)
  l <- matrix(runif(3000), ncol = 3)
  x <- rnorm(1000)
  for (backend in test_backends()) {
    where <- if (backend == "gpu") "gpu1" else "host"
    A <- h2_matrix(l, gk_kernel("matern", range = 0.2, smoothness = 1.5), backend = backend)
    y <- A %*% x
    size <- h2_bytes(A)
    invisible(gc())   # no other garbage: the rebuild below then collects nothing else
    before <- gk_memory()[[where]]
    expect_identical(gk_free(A), A)
    expect_lt(gk_memory()[[where]], before - 0.9 * size)
    # Internal functions here: whether native memory is still held.
    expect_false(gpukernels:::gk_native_alive(A))
    gk_free(A)   # a second release does nothing
    expect_equal(A %*% x, y, tolerance = 1e-13)
    expect_true(gpukernels:::gk_native_alive(A))
    expect_equal(gk_memory()[[where]], before, tolerance = 1e-12)
  }
  expect_error(gk_free(matrix(1, 2, 2)), "releases h2matrix and gk_device_matrix objects")
  expect_named(gk_memory(), c("host", if (gk_has_gpu()) paste0("gpu", seq_len(gk_info()$device_count))))
})

test_that("repeated exact likelihoods and kriging on the GPU hold no device memory", {
  skip_if_no_gpu()
  k <- gk_kernel("matern", range = 0.2, smoothness = 1.5)
  set.seed(6)
  locs <- matrix(runif(2000), ncol = 2)
  y <- rnorm(1000)
  run <- function() {
    gp_loglik(locs, y, kernel = k, nugget = 0.1, method = "dense", gradient = TRUE,
              backend = "gpu")
    gpukernels:::gp_evaluate(gpukernels:::gp_problem(locs, y, matrix(1, 1000, 1), "dense",
                                                     gp_control(), "gpu"),
                             k, 0.1, gradient = TRUE, fisher = TRUE)
  }
  run()
  before <- gpu_free_after_gc()
  for (i in 1:5) run()
  expect_gte(gpu_free_after_gc(), before - 2^20)
})
