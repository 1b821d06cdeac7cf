test_that("gk_backend resolves requests and options", {
  expect_equal(gk_backend("cpu"), "cpu")
  expect_true(gk_backend("auto") %in% c("cpu", "gpu"))
  expect_equal(gk_backend("auto") == "gpu", gk_has_gpu())
  old <- options(gpukernels.backend = "cpu")
  on.exit(options(old))
  expect_equal(gk_backend(), "cpu")
  expect_error(gk_backend("tpu"), "must be one of")
  expect_error(gk_backend(c("cpu", "gpu")), "must be one of")
  expect_error(gk_backend(NA_character_), "must be one of")
})

test_that("backend = 'gpu' without a GPU is a clear error", {
  skip_if(gk_has_gpu(), "a GPU is present")
  expect_error(gk_backend("gpu"), "no GPU can be used")
  expect_error(kernel_matrix(matrix(runif(4), 2), backend = "gpu"), "no GPU can be used")
})

test_that("gk_info reports the build and every GPU", {
  info <- gk_info()
  expect_s3_class(info, "gk_info")
  expect_type(info$cuda, "logical")
  expect_equal(nrow(info$devices), info$device_count)
  expect_output(print(info), "gpukernels")
  expect_output(print(info), if (info$device_count > 0) "compute capability" else "GPUs:    none")
})

test_that("gk_set_device checks its argument and selects a GPU", {
  expect_error(gk_set_device("a"), "single whole number")
  expect_error(gk_set_device(1.5), "single whole number")
  if (gk_has_gpu()) {
    expect_equal(gk_set_device(1), 1L)
    expect_error(gk_set_device(gk_info()$device_count + 1), "does not exist")
  } else {
    expect_error(gk_set_device(1))
  }
})

test_that("GPU information is complete on the GPU machine", {
  skip_if_no_gpu()
  d <- gk_info()$devices
  expect_true(all(d$sm_count > 0))
  expect_true(all(d$total_memory > d$free_memory & d$free_memory > 0))
  expect_true(all(nzchar(d$name)))
})

test_that("the engines' cached buffers can be released and are made again", {
  set.seed(31)
  x <- matrix(runif(57), 19, 3)
  b <- rnorm(19)
  K <- exp(-as.matrix(dist(x))^2 / 2)
  for (backend in test_backends()) {
    for (precision in c("double", "single")) {
      tol <- if (precision == "single") 1e-5 else 1e-12
      first <- kernel_matvec(x, x, b, "gaussian", precision = precision, backend = backend)
      .Call(gpukernels:::gk_r_release_caches)
      again <- kernel_matvec(x, x, b, "gaussian", precision = precision, backend = backend)
      expect_lt(rel_err(first, drop(K %*% b)), tol)
      expect_equal(again, first, tolerance = tol)
    }
  }
})
