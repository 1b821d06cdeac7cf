# The compiled-kernel cache (?gk_cache_info): GPU kernels compiled on first
# use, kept in memory and on disk, damaged entries rebuilt.

# Points the cache at `dir` and forgets the session's compiled programs, as
# a new session would start; restore_cache_dir() undoes it.
use_cache_dir <- function(dir) {
  options(gpukernels.cache_dir = dir)
  # Internal functions here: the JIT cache's setup and reset, per test.
  gpukernels:::gk_jit_setup(dir)
  .Call(gpukernels:::gk_r_jit_forget)
}
restore_cache_dir <- function() {
  options(gpukernels.cache_dir = NULL)
  gpukernels:::gk_jit_setup(gpukernels:::gk_cache_dir())
}

# A gaussian sum checked against R: a fresh kernel specialization each time
# it runs in a new cache (3 coordinates, 5 weight columns, single precision).
checked_sum <- function(m = 37L, n = 41L) {
  x <- matrix(runif(3 * m), m, 3)
  y <- matrix(runif(3 * n), n, 3)
  b <- matrix(rnorm(5 * n), n, 5)
  k <- gk_kernel("gaussian", range = 0.4)
  got <- kernel_matvec(x, y, b, k, precision = "single", backend = "gpu")
  d2 <- outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y)
  want <- exp(-pmax(d2, 0) / (2 * 0.4^2)) %*% b
  expect_lt(rel_err(got, want), 1e-5)
}

stats <- function() gk_cache_info()[c("compiled", "loaded", "rebuilt", "in_memory")]

test_that("gk_cache_info describes the cache", {
  dir <- tempfile("gk-cache-")
  use_cache_dir(dir)
  on.exit(restore_cache_dir(), add = TRUE)
  info <- gk_cache_info()
  expect_s3_class(info, "gk_cache_info")
  expect_identical(info$dir, dir)
  expect_identical(nrow(info$entries), 0L)
  expect_identical(info$bytes, 0)
  expect_output(print(info), "compiled-kernel cache")
  for (field in c("compiled", "loaded", "rebuilt", "compile_seconds", "in_memory")) {
    expect_true(is.numeric(info[[field]]) && info[[field]] >= 0, label = field)
  }
  # Every installed kernel source is handed to the compiler.
  sources <- list.files(system.file("include", "gpukernels", package = "gpukernels"))
  expect_true(all(c("gk_kernel.h", "reduce_kernels.cuh") %in% sources))
})

test_that("gk_cache_clear removes the entries and nothing else", {
  dir <- tempfile("gk-cache-")
  dir.create(dir)
  use_cache_dir(dir)
  on.exit(restore_cache_dir(), add = TRUE)
  writeBin(as.raw(sample(0:255, 100, TRUE)), file.path(dir, "0123456789abcdef.gkjit"))
  writeBin(as.raw(1:3), file.path(dir, "fedcba9876543210.gkjit"))
  writeLines("keep", file.path(dir, "notes.txt"))
  expect_identical(nrow(gk_cache_info()$entries), 2L)
  expect_identical(gk_cache_clear(), 2L)
  expect_identical(nrow(gk_cache_info()$entries), 0L)
  expect_true(file.exists(file.path(dir, "notes.txt")))
  expect_identical(gk_cache_clear(), 0L)
})

test_that("the cache directory must be one path", {
  old <- options(gpukernels.cache_dir = c("a", "b"))
  on.exit(options(old))
  expect_error(gpukernels:::gk_cache_dir(), "one path")
})

test_that("gk_warmup checks its arguments and needs a GPU", {
  expect_error(gk_warmup(dims = 0), "dims")
  if (!gk_has_gpu()) expect_message(gk_warmup(), "no GPU")
})

test_that("a fresh cache is filled on first use and reused by a new session", {
  skip_if_no_gpu()
  dir <- tempfile("gk-cache-")
  use_cache_dir(dir)
  on.exit(restore_cache_dir(), add = TRUE)
  before <- stats()
  checked_sum()
  after <- stats()
  expect_gte(after$compiled - before$compiled, 1)
  entries <- gk_cache_info()$entries
  expect_gte(nrow(entries), 1L)
  expect_true(all(entries$bytes > 0))
  # The same call again in this session: nothing compiled, nothing read.
  checked_sum()
  again <- stats()
  expect_identical(again$compiled, after$compiled)
  expect_identical(again$loaded, after$loaded)
  # As a new session: read from disk, not compiled.
  .Call(gpukernels:::gk_r_jit_forget)
  checked_sum()
  fresh <- stats()
  expect_identical(fresh$compiled, again$compiled)
  expect_gte(fresh$loaded - again$loaded, 1)
  expect_identical(nrow(gk_cache_info()$entries), nrow(entries))
})

test_that("a damaged cache entry is compiled again and replaced", {
  skip_if_no_gpu()
  dir <- tempfile("gk-cache-")
  use_cache_dir(dir)
  on.exit(restore_cache_dir(), add = TRUE)
  checked_sum()
  files <- list.files(dir, pattern = "\\.gkjit$", full.names = TRUE)
  expect_gte(length(files), 1L)
  damage <- function(f, how) {
    bytes <- readBin(f, "raw", file.size(f))
    bytes <- switch(how,
      flip = { at <- length(bytes) - 100L; bytes[at] <- xor(bytes[at], as.raw(0xff)); bytes },
      truncate = bytes[seq_len(length(bytes) %/% 2L)],
      garbage = as.raw(sample(0:255, 64L, TRUE)))
    writeBin(bytes, f)
  }
  for (how in c("flip", "truncate", "garbage")) {
    for (f in files) damage(f, how)
    .Call(gpukernels:::gk_r_jit_forget)
    before <- stats()
    checked_sum()
    after <- stats()
    expect_gte(after$rebuilt - before$rebuilt, 1, label = how)
    expect_gte(after$compiled - before$compiled, 1, label = how)
    # The replaced entry is whole again: a new session reads it.
    .Call(gpukernels:::gk_r_jit_forget)
    checked_sum()
    expect_identical(stats()$compiled, after$compiled, label = how)
  }
})

test_that("an empty cache directory keeps kernels in memory only", {
  skip_if_no_gpu()
  use_cache_dir("")
  on.exit(restore_cache_dir(), add = TRUE)
  before <- stats()
  checked_sum()
  expect_gte(stats()$compiled - before$compiled, 1)
  expect_identical(nrow(gk_cache_info()$entries), 0L)
})

test_that("gk_warmup compiles ahead, and later calls compile nothing", {
  skip_if_no_gpu()
  dir <- tempfile("gk-cache-")
  use_cache_dir(dir)
  on.exit(restore_cache_dir(), add = TRUE)
  n <- gk_warmup(kernels = "exponential", dims = 2, precision = "single", reductions = c("sum", "knn"))
  expect_gt(n, 0L)
  compiled <- stats()$compiled
  expect_gte(compiled, 1)
  x <- matrix(runif(200), 100, 2)
  b <- rnorm(100)
  k <- gk_kernel("exponential", range = 0.3)
  got <- kernel_matvec(x, b = b, kernel = k, precision = "single", backend = "gpu")
  want <- exp(-as.matrix(dist(x)) / 0.3) %*% b
  expect_lt(rel_err(got, want), 1e-5)
  nn <- knn(x, k = 10, precision = "single", backend = "gpu")
  expect_identical(nn$index[, 1], seq_len(100))
  expect_identical(stats()$compiled, compiled)
})

test_that("the installed kernel sources compile for every reduction (no GPU needed)", {
  skip_if_not(gk_info()$cuda, "a CPU-only build compiles no GPU kernels")
  # Every family and reduction the engine specializes, both precisions, the
  # register dimensions and one from memory, k-lists of both lengths.
  n <- gpukernels:::gk_jit_check(75, kernels = list("gaussian", "exponential", "cauchy",
                                                    gk_kernel("matern", smoothness = 2.5),
                                                    gk_kernel("matern", smoothness = 0.8),
                                                    "inverse_multiquadric", "linear"),
                                 dims = c(2, 5), precision = c("double", "single"),
                                 reductions = c("sum", "knn", "logsumexp", "softmax_sum", "min", "max"))
  expect_gt(n, 100L)
  cases <- list(list(kernel = gk_kernel("squared_distance"), reduction = 5L, k = 40L, single = TRUE,
                     symmetric = FALSE, dim = 3L, cols = 1L, ranged = TRUE, rows = 1L))
  expect_null(.Call(gpukernels:::gk_r_reduce_warmup, cases, 1L, 90L))
})
