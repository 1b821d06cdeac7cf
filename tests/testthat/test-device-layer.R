# The device layer's promises to every engine: objects kept on a GPU work from
# any selected device, external pointers are checked before use, validation
# that protects C happens in C, and a CPU-only build refuses GPU work cleanly.

# Runs `code` (a character vector of R lines) in a fresh R process that loads
# this library path, so that a crash cannot take the test run with it. Returns
# the process's output lines, with its exit status as attribute "status".
run_isolated <- function(code) {
  script <- tempfile(fileext = ".R")
  on.exit(unlink(script))
  libs <- paste0("c(", paste0(deparse(.libPaths()), collapse = ""), ")")
  writeLines(c(sprintf(".libPaths(%s)", libs), "suppressMessages(library(gpukernels))", code),
             script)
  out <- suppressWarnings(system2(file.path(R.home("bin"), "Rscript"), c("--vanilla", script),
                                  stdout = TRUE, stderr = TRUE))
  status <- attr(out, "status")
  structure(out, status = if (is.null(status)) 0L else status)
}

# Code for run_isolated that prints "ERROR: <message>" or "NO ERROR" for `expr`.
report <- function(label, expr) {
  sprintf('cat("%s:", tryCatch({ %s; "NO ERROR" }, error = function(e) paste("ERROR:", conditionMessage(e))), "\\n")',
          label, expr)
}

test_that("entry points refuse an external pointer that is not theirs, in a subprocess", {
  # Internal functions here: C entry points given objects no export would pass them.
  setup <- c(
    "set.seed(1)",
    "locs <- matrix(runif(400), ncol = 2)",
    "A <- h2_matrix(locs, gk_kernel('exponential', range = 0.2), backend = 'cpu')",
    "foreign <- getNativeSymbolInfo('gk_r_h2_info')$address",
    "native <- gpukernels:::gk_native_new",
    "bad <- A; bad$native <- native(foreign)",
    "stale <- A; stale$native <- native(unserialize(serialize(A$native$ptr, NULL)))",
    "notptr <- A; notptr$native <- native(1)",
    paste("dm <- structure(list(native = native(foreign), values = matrix(0, 200, 2),",
          "dim = c(200L, 2L), precision = 'double'), class = 'gk_device_matrix')"),
    "spec <- gk_kernel('gaussian')",
    "x <- matrix(runif(20), 10, 2)",
    # the entry point itself: with backend = "cpu", kernel_reduce() downloads
    # a device matrix before C would see its pointer
    paste("reduce <- function(x, b, reduction) .Call(gpukernels:::gk_r_reduce,",
          "gpukernels:::gk_reduce_spec(x, matrix(runif(20), 10, 2), b, spec, reduction, 1L, 1L,",
          "'double', 'auto', 'cpu', 1L, TRUE), gpukernels:::gk_reductions,",
          "gpukernels:::gk_reduce_methods)"))
  checks <- c(
    report("summary", "summary(bad)"),
    report("print", "print(bad)"),
    report("product", "bad %*% rnorm(200)"),
    report("tproduct", "rnorm(200) %*% bad"),
    report("time", ".Call(gpukernels:::gk_r_h2_time, bad$native$ptr, 1L, 1L, FALSE)"),
    report("stale", "summary(stale)"),
    report("notptr", "summary(notptr)"),
    report("download", "as.matrix(dm)"),
    report("reduce_cpu", "kernel_reduce(dm, x, kernel = spec, reduction = 'min', backend = 'cpu')"),
    report("reduce_x", "reduce(foreign, NULL, 'min')"),
    report("reduce_b", "reduce(x, foreign, 'sum')"),
    report("device_h2", ".Call(gpukernels:::gk_r_device_matrix_download, A$native$ptr)"),
    report("valid", "summary(A)$n"),
    'cat("FINISHED\\n")')
  out <- run_isolated(c(setup, checks))
  expect_equal(attr(out, "status"), 0L, info = paste(out, collapse = "\n"))
  line <- function(label) {
    hit <- grep(paste0("^", label, ":"), out, value = TRUE)
    if (length(hit) == 1L) hit else paste("missing output for", label)
  }
  for (label in c("summary", "print", "product", "tproduct", "time", "notptr")) {
    expect_match(line(label), "ERROR: this h2matrix is not valid: its `ptr` does not hold",
                 fixed = TRUE)
  }
  # a pointer without its address (as after readRDS()) is rebuilt from the settings
  expect_match(line("stale"), "stale: NO ERROR", fixed = TRUE)
  for (label in c("download", "reduce_cpu", "reduce_x", "reduce_b")) {
    expect_match(line(label), "ERROR: this gk_device_matrix is not valid", fixed = TRUE)
  }
  # An h2matrix pointer is not a device matrix, and the other way round.
  expect_match(line("device_h2"), "ERROR: this gk_device_matrix is not valid", fixed = TRUE)
  expect_match(line("valid"), "valid: NO ERROR")
  expect_true("FINISHED" %in% trimws(out))
})

test_that("a CPU-only build's GPU entry points all fail with the no-CUDA error", {
  skip_if(gk_info()$cuda, "this build has CUDA")
  x <- matrix(runif(20), 10, 2)
  spec <- gk_kernel("gaussian", range = 0.5)
  no_cuda <- "this build of gpukernels has no CUDA support"
  expect_error(.Call(gpukernels:::gk_r_kernel_matrix, x, x, spec, "gpu", 1L), no_cuda)
  reduce_spec <- gpukernels:::gk_reduce_spec(x, x, rnorm(10), spec, "sum", 1L, 1L, "double",
                                             "auto", "gpu", 1L, TRUE)
  expect_error(.Call(gpukernels:::gk_r_reduce, reduce_spec, gpukernels:::gk_reductions,
                     gpukernels:::gk_reduce_methods), no_cuda)
  expect_error(.Call(gpukernels:::gk_r_h2_build, x, spec, 0, 4L, 4L, 3, FALSE, "gpu", 0L, 1L,
                     NULL, NULL), no_cuda)
  expect_error(.Call(gpukernels:::gk_r_device_matrix, x, FALSE, TRUE), no_cuda)
  f <- list(cbind(c(0, 1), c(1, 0)), cbind(c(0, 2), c(3, 0)))
  expect_error(.Call(gpukernels:::gk_r_pcf_matrix, f, NULL, "pdist", 1, FALSE, "gpu", 1L, 0,
                     0L, FALSE, NULL), no_cuda)
  # The CPU engines behind the same entry points still work.
  K <- kernel_matrix(x, x, spec, backend = "cpu")
  expect_equal(K, exp(-as.matrix(dist(x / 0.5))^2 / 2), tolerance = 1e-14,
               ignore_attr = TRUE)
})

test_that("the reduction glue refuses negative logsumexp weights itself", {
  set.seed(5)
  x <- matrix(runif(30), 15, 2)
  b <- runif(15)
  b[7] <- -0.25
  spec <- gk_kernel("gaussian", range = 0.7)
  # Straight into C (an internal entry point): R's own check is bypassed.
  glue <- function(b, vector_out = TRUE) {
    .Call(gpukernels:::gk_r_reduce,
          gpukernels:::gk_reduce_spec(x, x, b, spec, "logsumexp", 1L, 1L, "double", "auto",
                                      "cpu", 1L, vector_out),
          gpukernels:::gk_reductions, gpukernels:::gk_reduce_methods)
  }
  expect_error(glue(b), "must be non-negative")
  expect_error(glue(cbind(abs(b), b), FALSE), "must be non-negative")
  # Non-negative weights (zeros included) pass, and match brute force.
  b0 <- abs(b)
  b0[3] <- 0
  K <- exp(-as.matrix(dist(x / 0.7))^2 / 2)
  ref <- log(exp(K) %*% b0)
  got <- kernel_reduce(x, x, b0, spec, reduction = "logsumexp", backend = "cpu")
  expect_lt(rel_err(got, drop(ref)), 1e-13)
})

test_that("negative device-matrix weights are refused for logsumexp", {
  skip_if_no_gpu()
  set.seed(6)
  x <- matrix(runif(600), 200, 3)
  y <- matrix(runif(900), 300, 3)
  b <- matrix(runif(600), 300, 2)
  k <- gk_kernel("gaussian", range = 0.4)
  for (precision in c("double", "single")) {
    good <- gk_device_matrix(b, precision = precision)
    ref <- log(exp(ref_kernel_values(x, y, k)) %*% b)
    tol <- if (precision == "single") 1e-5 else 1e-12
    expect_lt(rel_err(kernel_reduce(x, y, good, k, reduction = "logsumexp"), ref), tol)
    b_neg <- b
    b_neg[123, 2] <- -1e-3
    bad <- gk_device_matrix(b_neg, precision = precision)
    expect_error(kernel_reduce(x, y, bad, k, reduction = "logsumexp"), "must be non-negative")
    # Other reductions take signed weights.
    expect_lt(rel_err(kernel_reduce(x, y, bad, k, reduction = "sum"),
                      ref_kernel_values(x, y, k) %*% b_neg), tol)
  }
})

test_that("the H2 entry code refuses kernels an H2 matrix cannot represent", {
  set.seed(7)
  locs <- matrix(runif(200), ncol = 2)
  build <- function(kernel, points = locs) {
    .Call(gpukernels:::gk_r_h2_build, points, kernel, 0, 16L, 8L, 3, FALSE, "cpu", 0L, 1L, NULL,
          NULL)
  }
  expect_error(build(gk_kernel("linear")), "not \"linear\"")
  expect_error(build(gk_kernel("squared_distance")), "not \"squared_distance\"")
  expect_error(build(gk_kernel("gaussian"), cbind(locs, locs)), "2 or 3 dimensions, not 4")
  expect_error(build(gk_kernel("gaussian"), locs[, 1, drop = FALSE]), "2 or 3 dimensions, not 1")
  # The supported families still build (and multiply as the dense matrix does).
  k <- gk_kernel("cauchy", range = 0.3)
  x <- rnorm(100)
  exact <- kernel_matrix(locs, kernel = k, backend = "cpu") %*% x
  got <- .Call(gpukernels:::gk_r_h2_matmul, build(k), cbind(x))
  expect_lt(sqrt(sum((got - exact)^2) / sum(exact^2)), 1e-5)
})

test_that("objects made on GPU 1 keep working after gk_set_device(2)", {
  skip_if_no_gpu()
  skip_if(gk_info()$device_count < 2, "fewer than 2 GPUs")
  on.exit(gk_set_device(1))
  set.seed(61)
  gk_set_device(1)
  rel2 <- function(a, b) sqrt(sum((a - b)^2) / sum(b^2))
  n <- 2001
  locs <- matrix(runif(2 * n), ncol = 2)
  k <- gk_kernel("matern", range = 0.2, smoothness = 1.5)
  x <- matrix(rnorm(2 * n), n, 2)
  on_cpu <- h2_matrix(locs, k, backend = "cpu") %*% x   # the same algorithm on the host
  A1 <- h2_matrix(locs, k, backend = "gpu")
  A1s <- h2_matrix(locs, k, precision = "single", backend = "gpu")
  on_gpu1 <- A1 %*% x
  expect_lt(rel2(on_gpu1, on_cpu), 1e-12)

  q <- matrix(runif(3 * 257), 257, 3)
  p <- matrix(runif(3 * 1111), 1111, 3)
  w <- matrix(rnorm(1111 * 3), 1111, 3)
  kg <- gk_kernel("gaussian", range = 0.25)
  Kqp <- ref_kernel_values(q, p, kg)
  dp <- gk_device_matrix(p)
  dps <- gk_device_matrix(p, precision = "single")
  dw <- gk_device_matrix(w)
  nn_gpu1 <- knn(dp, dp, k = 3)$index
  big <- gk_device_matrix(matrix(runif(2^23), 2^20, 8))   # 64 MiB on GPU 1
  free1_with_big <- gk_info()$devices$free_memory[1]

  gk_set_device(2)
  expect_equal(gk_info()$current_device, 2L)
  # Products and reductions of GPU-1 objects, with GPU 2 selected.
  expect_equal(A1 %*% x, on_gpu1, tolerance = 1e-12)
  expect_lt(rel2(A1s %*% x, on_cpu), 1e-5)
  expect_lt(rel_err(kernel_matvec(q, dp, dw, kg), Kqp %*% w), 1e-12)
  expect_lt(rel_err(kernel_matvec(q, dps, w, kg, precision = "single"), Kqp %*% w), 1e-4)
  expect_identical(knn(dp, dp, k = 3)$index, nn_gpu1)
  expect_identical(as.matrix(dp), p)
  # New objects go to GPU 2 and work beside the old ones; mixing is refused.
  A2 <- h2_matrix(locs, k, backend = "gpu")
  expect_equal(A2 %*% x, on_gpu1, tolerance = 1e-10)
  dp2 <- gk_device_matrix(p)
  expect_lt(rel_err(kernel_matvec(q, dp2, w, kg), Kqp %*% w), 1e-12)
  expect_error(kernel_matvec(dp2, dp, w, kg), "different GPUs")
  # Finalizers free GPU-1 memory on GPU 1 while GPU 2 stays selected.
  rm(big, A1, A1s, dp, dps, dw)
  gc()
  expect_equal(gk_info()$current_device, 2L)
  expect_gt(gk_info()$devices$free_memory[1], free1_with_big + 2^25)
  expect_equal(A2 %*% x, on_gpu1, tolerance = 1e-10)
  expect_lt(rel_err(kernel_matvec(q, dp2, w, kg), Kqp %*% w), 1e-12)
  # GPU 1 is still healthy.
  gk_set_device(1)
  expect_equal(h2_matrix(locs, k, backend = "gpu") %*% x, on_gpu1, tolerance = 1e-10)
  expect_lt(rel_err(kernel_matvec(q, p, w, kg, backend = "gpu"), Kqp %*% w), 1e-12)
})
