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

test_that("the compiled library calls nothing that could end or bypass R", {
  # R CMD check's rule (Writing R Extensions, "Compiled code"): nvcc gives
  # each non-inline __device__ function a host stub that calls exit().
  nm <- Sys.which("nm")
  skip_if(!nzchar(nm), "no nm here")
  so <- getLoadedDLLs()[["gpukernels"]][["path"]]
  imported <- system2(nm, c("-D", "--undefined-only", shQuote(so)), stdout = TRUE)
  imported <- sub("@.*$", "", sub("^\\s*U\\s+", "", imported))
  expect_true(length(imported) > 0)   # the listing worked: the library imports from libc
  forbidden <- c("exit", "_exit", "_Exit", "abort", "printf", "puts", "putchar", "vprintf",
                 "rand", "srand", "random", "srandom", "stdout", "stderr")
  expect_identical(intersect(imported, forbidden), character(0))
})

test_that("gk_info lists the tunables with their values and defaults", {
  tun <- with_tunables(list(GK_REDUCE_ROWS = NA, GK_PCF_SHARED_BYTES = NA,
                            GK_H2_STACK_PIECES = NA), gk_info()$tunables)
  expect_s3_class(tun, "data.frame")
  expect_named(tun, c("name", "value", "default", "set", "valid", "description"))
  expect_true(all(c("GK_REDUCE_ROWS", "GK_REDUCE_SLICE_PAIRS", "GK_PCF_SHARED_BYTES",
                    "GK_H2_PROJECT_CHUNK_MB", "GK_H2_STACK_QR_MAX_RANK",
                    "GK_H2_STACK_PIECES") %in% tun$name))
  expect_false(anyDuplicated(tun$name) > 0)
  expect_true(all(nzchar(tun$description)))
  row <- function(t, name) t[t$name == name, ]
  # unset: the default, not set, validity NA
  r <- row(tun, "GK_PCF_SHARED_BYTES")
  expect_equal(r$value, 40960)
  expect_equal(r$value, r$default)
  expect_false(r$set)
  expect_true(is.na(r$valid))
  expect_equal(row(tun, "GK_REDUCE_ROWS")$value, 0)
  expect_equal(row(tun, "GK_H2_STACK_PIECES")$value, 4)
  # set through Sys.setenv: reported with its value (read at each call)
  info <- with_tunables(list(GK_PCF_SHARED_BYTES = 1024, GK_REDUCE_ROWS = 4,
                             GK_H2_STACK_PIECES = "x"), gk_info())
  r <- row(info$tunables, "GK_PCF_SHARED_BYTES")
  expect_equal(r$value, 1024)
  expect_equal(r$default, 40960)
  expect_true(r$set)
  expect_true(r$valid)
  expect_equal(row(info$tunables, "GK_REDUCE_ROWS")$value, 4)
  # not a valid value: the default applies, and the report says so
  r <- row(info$tunables, "GK_H2_STACK_PIECES")
  expect_equal(r$value, 4)
  expect_true(r$set)
  expect_false(r$valid)
  out <- with_tunables(list(GK_PCF_SHARED_BYTES = 1024, GK_H2_STACK_PIECES = "x"),
                       capture.output(print(info)))
  expect_true(any(grepl("GK_PCF_SHARED_BYTES = 1024", out, fixed = TRUE)))
  expect_true(any(grepl("GK_H2_STACK_PIECES = 4 (the default: \"x\" is not valid)", out,
                        fixed = TRUE)))
  # values out of range, not whole or not a power of two where one is needed
  bad <- list(GK_REDUCE_ROWS = 3, GK_PCF_SHARED_BYTES = 1e6, GK_H2_STACK_PIECES = 2.5,
              GK_H2_PROJECT_CHUNK_MB = 0, GK_REDUCE_SLICE_PAIRS = -1)
  tun <- with_tunables(bad, gk_info()$tunables)
  for (name in names(bad)) {
    r <- row(tun, name)
    expect_equal(r$value, r$default, label = name)
    expect_false(r$valid, label = name)
  }
  # with nothing set, the report says the defaults apply
  unset <- stats::setNames(as.list(rep(NA, nrow(tun))), tun$name)
  expect_output(print(with_tunables(unset, gk_info())), "tunables: all at their defaults")
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
      # Internal functions here: the caches' release hook, which no export calls alone.
      .Call(gpukernels:::gk_r_release_caches)
      again <- kernel_matvec(x, x, b, "gaussian", precision = precision, backend = backend)
      expect_lt(rel_err(first, drop(K %*% b)), tol)
      expect_equal(again, first, tolerance = tol)
    }
  }
})
