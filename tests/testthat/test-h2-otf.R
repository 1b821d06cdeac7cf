# H2 matrices computed on the fly (storage = "on_the_fly"): the coupling and
# dense phases run as block-sparse reductions; they must give the stored
# form's products up to rounding, and the dense matrix's within its error.

test_that("on the fly equals stored to rounding, 2D and 3D, every kernel family, 1 and 3 rhs", {
  set.seed(1201)
  for (d in 2:3) {
    n <- if (d == 2) 1109 else 1301   # not multiples of the leaf size
    locs <- matrix(runif(n * d), ncol = d)
    X <- matrix(rnorm(n * 3), n, 3)
    for (k in otf_kernels()) {
      if (length(k$range) > 1) k <- gk_kernel("exponential", range = rep(0.2, d) * seq_len(d) / 2)
      stored <- h2_matrix(locs, k, nugget = 0.25, eta = 2, backend = "cpu", storage = "stored")
      otf <- h2_matrix(locs, k, nugget = 0.25, eta = 2, backend = "cpu", storage = "on_the_fly")
      expect_true(summary(otf)$storage$on_the_fly)
      expect_false(summary(stored)$storage$on_the_fly)
      Ys <- stored %*% X
      Yo <- otf %*% X
      expect_lt(max(abs(Yo - Ys)) / max(abs(Ys)), 1e-12)
      expect_lt(max(abs(otf %*% X[, 2] - Ys[, 2])) / max(abs(Ys)), 1e-12)
      # Against the dense matrix: as accurate as the stored form.
      K <- kernel_matrix(locs, kernel = k, backend = "cpu") + diag(0.25, n)
      exact <- K %*% X
      expect_lt(rel2(Yo, exact), rel2(Ys, exact) * (1 + 1e-6) + 1e-14)
      expect_lt(rel2(Yo, exact), 1e-2)
    }
  }
})

test_that("on the fly handles one leaf, tiny n and many right-hand sides", {
  set.seed(1202)
  k <- gk_kernel("exponential", range = 0.3)
  for (n in c(1L, 2L, 37L, 200L)) {
    locs <- matrix(runif(n * 2), ncol = 2)
    X <- matrix(rnorm(n * 11), n, 11)
    A <- h2_matrix(locs, k, nugget = 0.1, leaf_size = 16, backend = "cpu", storage = "on_the_fly")
    S <- h2_matrix(locs, k, nugget = 0.1, leaf_size = 16, backend = "cpu", storage = "stored")
    K <- kernel_matrix(locs, kernel = k, backend = "cpu") + diag(0.1, n)
    expect_lt(max(abs(A %*% X - S %*% X)) / max(abs(S %*% X)), 1e-12)
    expect_lt(rel2(A %*% X, K %*% X), 1e-4)
  }
})

test_that("on the fly handles levels without coupling blocks between levels with some", {
  # Two far clumps: the top pair is admissible, then no level has blocks until
  # the clumps' own halves separate. The couplings of every level are one
  # block-sparse sum over the nodes of all levels (h2_otf.h): the empty levels'
  # rows must stay zero and the others offset correctly.
  set.seed(1209)
  n <- 300
  locs <- rbind(matrix(runif(2 * n), ncol = 2) * 0.02,
                matrix(runif(2 * n), ncol = 2) * 0.02 + 1)
  k <- gk_kernel("exponential", range = 0.8)
  X <- matrix(rnorm(2 * n * 4), 2 * n, 4)
  K <- kernel_matrix(locs, kernel = k, backend = "cpu") + diag(0.3, 2 * n)
  exact <- K %*% X
  for (precision in c("double", "single")) {
    args <- list(locs, k, nugget = 0.3, eta = 0.7, leaf_size = 16, backend = "cpu",
                 precision = precision)
    otf <- do.call(h2_matrix, c(args, storage = "on_the_fly"))
    stored <- do.call(h2_matrix, c(args, storage = "stored"))
    # Internal functions here: the native H2 matrix's level data, not exported.
    blocks <- gpukernels:::h2_info(otf)$level_coupling_blocks
    top <- gpukernels:::h2_info(otf)$top_level
    expect_identical(top, 1L)   # the two clumps
    used <- which(blocks > 0)
    expect_true(any(blocks[min(used):max(used)] == 0))   # a gap between levels with blocks
    Ys <- stored %*% X
    tol <- if (precision == "double") 1e-12 else 1e-5
    expect_lt(max(abs(otf %*% X - Ys)) / max(abs(Ys)), tol)
    expect_lt(max(abs(otf %*% X[, 3] - Ys[, 3])) / max(abs(Ys)), tol)
    expect_lt(rel2(otf %*% X, exact), 1e-3)
  }
})

test_that("on the fly without any coupling block (one leaf), several right-hand sides", {
  set.seed(1210)
  k <- gk_kernel("matern", range = 0.4, smoothness = 1.5)
  # One leaf: no couplings at all, the dense product alone.
  locs <- matrix(runif(30 * 3), ncol = 3)
  A <- h2_matrix(locs, k, nugget = 0.2, leaf_size = 32, backend = "cpu", storage = "on_the_fly")
  info <- gpukernels:::h2_info(A)
  expect_identical(info$levels, 1L)
  expect_gt(info$top_level, 0)
  X <- matrix(rnorm(30 * 2), 30, 2)
  K <- kernel_matrix(locs, kernel = k, backend = "cpu") + diag(0.2, 30)
  expect_lt(rel2(A %*% X, K %*% X), 1e-13)
})

test_that("single precision on the fly is close to double", {
  set.seed(1203)
  n <- 1500
  locs <- matrix(runif(n * 3), ncol = 3)
  k <- gk_kernel("exponential", range = 0.2)
  x <- rnorm(n)
  A64 <- h2_matrix(locs, k, nugget = 0.1, backend = "cpu", storage = "on_the_fly")
  A32 <- h2_matrix(locs, k, nugget = 0.1, backend = "cpu", storage = "on_the_fly",
                   precision = "single")
  y64 <- A64 %*% x
  e <- rel2(A32 %*% x, y64)
  expect_lt(e, 1e-5)
  expect_gt(e, 0)   # it did compute in float
})

test_that("storage is checked, kept in the settings and rebuilt after saveRDS and gk_free", {
  set.seed(1204)
  n <- 900
  locs <- matrix(runif(n * 2), ncol = 2)
  k <- gk_kernel("matern", range = 0.1, smoothness = 1.5)
  expect_error(h2_matrix(locs, k, backend = "cpu", storage = "disk"), "must be one of")
  expect_error(h2_matrix(locs, k, backend = "cpu", storage = NA), "must be one of")
  expect_error(h2_matrix(locs, k, backend = "cpu", storage = c("stored", "on_the_fly")),
               "must be one of")
  A <- h2_matrix(locs, k, nugget = 0.2, backend = "cpu", storage = "on_the_fly")
  x <- rnorm(n)
  y <- A %*% x
  # Compression keeps the dense blocks on the fly and gives the stored form's result.
  S <- h2_matrix(locs, k, nugget = 0.2, backend = "cpu", storage = "stored")
  CA <- h2_compress(A, 1e-5)
  CS <- h2_compress(S, 1e-5)
  expect_true(summary(CA)$storage$on_the_fly)
  expect_false(summary(CA)$storage$couplings_on_the_fly)
  expect_equal(CA %*% x, CS %*% x, tolerance = 1e-13)
  expect_equal(h2_ranks(CA), h2_ranks(CS))
  expect_lt(rel2(h2_orthogonalize(A) %*% x, y), 1e-12)
  # saved and read back: rebuilt on the fly, then compressed again (form 2)
  f <- tempfile(fileext = ".rds")
  saveRDS(CA, f)
  CB <- readRDS(f)
  unlink(f)
  expect_equal(CB %*% x, CA %*% x, tolerance = 1e-13)
  expect_false(gpukernels:::h2_info(CB)$couplings_on_the_fly)
  expect_true(gpukernels:::h2_info(CB)$on_the_fly)
  f <- tempfile(fileext = ".rds")
  saveRDS(A, f)
  B <- readRDS(f)
  unlink(f)
  expect_identical(B$storage, "on_the_fly")
  expect_equal(B %*% x, y, tolerance = 1e-14)
  expect_true(summary(B)$storage$on_the_fly)
  gk_free(A)
  expect_equal(A %*% x, y, tolerance = 1e-14)
  # Objects saved before `storage` existed are stored.
  C <- A
  C$storage <- NULL
  saveRDS(C, f)
  C <- readRDS(f)
  unlink(f)
  expect_false(summary(C)$storage$on_the_fly)
  expect_equal(C %*% x, y, tolerance = 1e-12)
})

test_that("auto chooses on the fly when the stored form does not fit, and says why", {
  set.seed(1205)
  n <- 2000
  locs <- matrix(runif(n * 3), ncol = 3)
  k <- gk_kernel("exponential", range = 0.2)
  A <- h2_matrix(locs, k, backend = "cpu")
  s <- summary(A)$storage
  expect_false(s$on_the_fly)   # the CPU model prefers stored blocks
  expect_identical(s$reason, "faster")
  expect_gt(s$ms_on_the_fly, s$ms_stored)
  expect_output(print(summary(A)), "storage: stored \\(auto: predicted")
  old <- options(gpukernels.host_memory_budget = gk_memory()[["host"]] + 2^20)
  on.exit(options(old))
  B <- h2_matrix(locs, k, backend = "cpu")
  expect_true(summary(B)$storage$on_the_fly)
  expect_identical(summary(B)$storage$reason, "memory")
  expect_output(print(summary(B)), "storage: on the fly \\(auto: the stored blocks would not fit")
  x <- rnorm(n)
  expect_lt(max(abs(B %*% x - A %*% x)) / max(abs(A %*% x)), 1e-12)
})

test_that("stored_if_fits stores the blocks unless they do not fit, then goes on the fly", {
  set.seed(1206)
  n <- 1500
  locs <- matrix(runif(n * 2), ncol = 2)
  k <- gk_kernel("matern", range = 0.1, smoothness = 1.5)
  X <- matrix(rnorm(n * 3), n, 3)
  S <- h2_matrix(locs, k, nugget = 0.1, backend = "cpu", storage = "stored")
  A <- h2_matrix(locs, k, nugget = 0.1, backend = "cpu", storage = "stored_if_fits")
  s <- summary(A)$storage
  expect_false(s$on_the_fly)
  expect_identical(s$reason, "requested")
  expect_identical(A %*% X, S %*% X)
  old <- options(gpukernels.host_memory_budget = gk_memory()[["host"]] + 2^20)
  on.exit(options(old))
  B <- h2_matrix(locs, k, nugget = 0.1, backend = "cpu", storage = "stored_if_fits")
  expect_true(summary(B)$storage$on_the_fly)
  expect_identical(summary(B)$storage$reason, "memory")
  expect_lt(rel2(B %*% X, S %*% X), 1e-12)
  # with tol it is "auto" (the search chooses the form)
  expect_s4_class(h2_matrix(locs[1:300, ], k, backend = "cpu", tol = 1e-4,
                            storage = "stored_if_fits"), "h2matrix")
})

test_that("repeated on-the-fly products do not grow memory", {
  set.seed(1206)
  n <- 700
  locs <- matrix(runif(n * 2), ncol = 2)
  A <- h2_matrix(locs, gk_kernel("exponential", range = 0.2), backend = "cpu",
                 storage = "on_the_fly")
  x <- rnorm(n)
  p <- repeated_products(A, x, 20)
  expect_identical(p$last, p$first)
})

# ---- compression of on-the-fly matrices (dense blocks stay on the fly) ------

# The compression (tol) or orthogonalization (NA) of the on-the-fly `otf`
# and of `stored`, built with the same arguments (so the same tree and data).
compare_transforms <- function(otf, stored, tol, X, K, eps, label) {
  f <- if (is.na(tol)) h2_orthogonalize else function(A) h2_compress(A, tol)
  Bo <- f(otf)
  Bs <- f(stored)
  expect_form(Bo, "dense_on_the_fly")
  expect_form(Bs, "stored")
  expect_identical(h2_ranks(Bo), h2_ranks(Bs),
                   label = label)
  Yo <- Bo %*% X
  Ys <- Bs %*% X
  expect_lt(rel2(Yo, Ys), eps, label = label)
  # against the exact matrix: within the stored input's compression bound
  # (its error plus 2 tol, test-h2-compress.R) and as accurate as Bs
  exact <- K %*% X
  expect_lte(rel2(Yo, exact), rel2(otf %*% X, exact) + 2 * (if (is.na(tol)) eps else tol),
             label = label)
  expect_lte(rel2(Yo, exact), rel2(Ys, exact) * (1 + 1e-3) + eps, label = label)
  if (!is.na(tol)) {
    expect_equal(Bo$compression$error_frobenius, Bs$compression$error_frobenius,
                 tolerance = 1e-8, label = label)
    expect_lte(Bo$compression$error_frobenius, tol * 1.0001, label = label)
  }
  expect_equal(Bo$compression$norm_frobenius, Bs$compression$norm_frobenius, tolerance = 1e-10)
  # memory: no dense blocks, the same low-rank data as Bs, the ranges
  bo <- gpukernels:::h2_bytes(Bo)
  bs <- gpukernels:::h2_bytes(Bs)
  expect_identical(bo[["dense"]], 0)
  expect_identical(bo[["low_rank"]], bs[["low_rank"]])
  expect_gt(bo[["on_the_fly"]], 0)
  expect_identical(bs[["on_the_fly"]], 0)
  expect_identical(summary(Bo)$dense_bytes, 0)
  expect_identical(summary(Bo)$low_rank_bytes, bs[["low_rank"]])
  expect_output(print(Bo), paste0("storage: dense blocks on the fly, compressed couplings ",
                                  "stored \\(from an on-the-fly matrix\\)"))
  expect_output(print(Bo), if (is.na(tol)) "orthogonalized" else "compressed to tol")
  list(otf = Bo, stored = Bs)
}

test_that("compressing an on-the-fly matrix keeps its dense blocks on the fly, as the stored one's", {
  set.seed(1213)
  cases <- list(list(d = 2, n = 1109, leaf = 64, order = NULL, kernel = "exponential", range = 0.1),
                list(d = 3, n = 1301, leaf = 64, order = NULL, kernel = "exponential", range = 0.2),
                list(d = 3, n = 601, leaf = 20, order = 3, kernel = "gaussian", range = 0.15))
  for (cs in cases) {
    locs <- matrix(runif(cs$n * cs$d), ncol = cs$d)
    k <- gk_kernel(cs$kernel, range = cs$range)
    K <- brute_force(locs, cs$kernel, cs$range, 0.1)
    expect_lt(max(abs(K - kernel_matrix(locs, kernel = k, backend = "cpu") - diag(0.1, cs$n))),
              1e-12)
    X <- matrix(rnorm(cs$n * 3), cs$n, 3)   # mean-zero N(0, 1) probes
    for (precision in c("double", "single")) {
      args <- list(locs, k, nugget = 0.1, eta = 2, leaf_size = cs$leaf, order = cs$order,
                   precision = precision, backend = "cpu")
      otf <- do.call(h2_matrix, c(args, storage = "on_the_fly"))
      stored <- do.call(h2_matrix, c(args, storage = "stored"))
      expect_form(otf, "on_the_fly")
      eps <- if (precision == "double") 1e-12 else 1e-5
      label <- sprintf("%dD n = %d %s", cs$d, cs$n, precision)
      Q <- compare_transforms(otf, stored, NA, X, K, eps, paste(label, "orthogonalized"))
      expect_lt(.Call(gpukernels:::gk_r_h2_orthogonality, gpukernels:::h2_ptr(Q$otf)), 10 * eps)
      expect_gt(.Call(gpukernels:::gk_r_h2_orthogonality, gpukernels:::h2_ptr(otf)), 1e-3)
      expect_lt(rel2(Q$otf %*% X, otf %*% X), eps)
      tols <- if (precision == "double") c(1e-3, 1e-6) else c(1e-2, 1e-4)
      for (tol in tols) {
        B <- compare_transforms(otf, stored, tol, X, K, max(eps, tol * 1e-6),
                                paste(label, "tol", tol))
        expect_lt(max(h2_ranks(B$otf)),
                  max(h2_ranks(otf)))
        # (the input stored no couplings: the result may hold more than it)
        expect_lt(sum(gpukernels:::h2_bytes(B$otf)), sum(gpukernels:::h2_bytes(stored)) / 2)
        # the model's figures of the mixed form: the dense blocks' kernel pairs
        s <- summary(B$otf)$storage
        expect_gt(s$kernel_pairs, 0)
        expect_lt(s$kernel_pairs, summary(otf)$storage$kernel_pairs)
        expect_true(s$ms_on_the_fly > 0 && s$ms_stored > 0)
      }
    }
  }
})

test_that("a compressed on-the-fly matrix compresses and orthogonalizes again, on the fly", {
  set.seed(1214)
  for (d in 2:3) {
    n <- if (d == 2) 1403 else 1187
    locs <- matrix(runif(n * d), ncol = d)
    K <- brute_force(locs, "exponential", 0.2, 0.05)
    k <- gk_kernel("exponential", range = 0.2)
    X <- matrix(rnorm(n * 2), n, 2)
    for (precision in c("double", "single")) {
      eps <- if (precision == "double") 1e-12 else 1e-5
      args <- list(locs, k, nugget = 0.05, precision = precision, backend = "cpu")
      otf <- do.call(h2_matrix, c(args, storage = "on_the_fly"))
      stored <- do.call(h2_matrix, c(args, storage = "stored"))
      tol <- if (precision == "double") 1e-5 else 1e-3
      Bo <- h2_compress(otf, tol)
      Bs <- h2_compress(stored, tol)
      # its export evaluates the dense blocks; the result stays in form 2
      Co <- h2_compress(Bo, 10 * tol)
      Cs <- h2_compress(Bs, 10 * tol)
      expect_form(Co, "dense_on_the_fly")
      expect_identical(h2_ranks(Co), h2_ranks(Cs))
      expect_lt(rel2(Co %*% X, Cs %*% X), eps)
      exact <- K %*% X
      expect_lte(rel2(Co %*% X, exact), rel2(otf %*% X, exact) + 2 * (tol + 10 * tol))
      expect_identical(gpukernels:::h2_bytes(Co)[["dense"]], 0)
      Qo <- h2_orthogonalize(Bo)
      expect_form(Qo, "dense_on_the_fly")
      expect_lt(rel2(Qo %*% X, Bo %*% X), eps)
      expect_lt(.Call(gpukernels:::gk_r_h2_orthogonality, gpukernels:::h2_ptr(Qo)), 10 * eps)
      # compressed twice from the settings after gk_free(): the same matrix
      y <- Co %*% X
      gk_free(Co)
      expect_equal(Co %*% X, y, tolerance = 1e-13)
      expect_form(Co, "dense_on_the_fly")
    }
  }
})

test_that("compressions of an on-the-fly matrix hold what h2_bytes says and do not grow memory", {
  set.seed(1215)
  n <- 1500
  locs <- matrix(runif(n * 3), ncol = 3)
  k <- gk_kernel("exponential", range = 0.2)
  otf <- h2_matrix(locs, k, nugget = 0.1, backend = "cpu", storage = "on_the_fly")
  stored <- h2_matrix(locs, k, nugget = 0.1, backend = "cpu", storage = "stored")
  x <- rnorm(n)
  # the host bytes each result registers: the same tree, so they differ by
  # what h2_bytes counts (the stored dense blocks, the ranges)
  held_by <- function(A) {
    invisible(gc())
    before <- gk_memory()[["host"]]
    B <- h2_compress(A, 1e-4)
    grown <- gk_memory()[["host"]] - before
    bytes <- gpukernels:::h2_bytes(B)
    gk_free(B)
    expect_equal(gk_memory()[["host"]], before)
    list(grown = grown, bytes = bytes)
  }
  o <- held_by(otf)
  s <- held_by(stored)
  expect_equal(o$grown - s$grown, sum(o$bytes) - sum(s$bytes))
  expect_gt(o$grown, sum(o$bytes))   # plus the tree
  expect_lt(o$grown, s$grown - 0.9 * s$bytes[["dense"]])
  # repeated compressions (each result replacing the last) hold no more
  B <- h2_compress(otf, 1e-4)
  y <- B %*% x
  invisible(gc())
  held <- gk_memory()
  for (i in 1:5) {
    B <- h2_compress(otf, 1e-4)
    expect_identical(B %*% x, y)
  }
  invisible(gc())
  expect_identical(gk_memory(), held)
  p <- repeated_products(B, x, 10)
  expect_identical(p$last, p$first)
})

# ---- GPU twins (skipped without a GPU) --------------------------------------

test_that("compressing on the host checks the copy of the blocks against the host budget", {
  set.seed(1221)
  locs <- matrix(runif(3 * 1500), ncol = 3)
  k <- gk_kernel("exponential", range = 0.2)
  A <- h2_matrix(locs, k, order = 3, storage = "on_the_fly", backend = "cpu")
  x <- rnorm(nrow(locs))
  y <- A %*% x
  invisible(gc())   # what earlier tests left unreachable is not counted
  held <- gk_memory()
  old <- options(gpukernels.host_memory_budget = 2^20)   # 1 MB: less than the blocks
  on.exit(options(old))
  expect_error(h2_compress(A, 1e-3), "needs its blocks in double precision, .* GB of host memory")
  expect_error(h2_orthogonalize(A), "gpukernels.host_memory_budget")
  options(old)
  expect_equal(gk_memory(), held)   # nothing made, nothing kept
  expect_equal(A %*% x, y)
  expect_lt(rel2(h2_compress(A, 1e-3) %*% x, y), 2e-3)
})
