# The GPU kernel's walk (src/pcf/pcf_cuda.cu) walks each row function against
# 3 column functions at once (one merged walk over their breakpoints), so its
# edge cases are columns of unequal lengths, a column count that is not a
# multiple of 3 (odd tiles, a diagonal tile's row limit, batches cut by shared
# memory, whose size the tunable GK_PCF_SHARED_BYTES sets), and columns too
# long for shared memory (walked from global memory).

# Random PCFs of the given lengths that float represents exactly (breakpoints
# on a dyadic grid, values rounded to float), so that both precisions see the
# same functions and one reference serves them. Functions on the same grid
# share some breakpoints (several functions of a walk advance at once).
walk_case <- function(n, lens, step = 1 / 8) {
  lapply(seq_len(n), function(i) {
    k <- if (length(lens) == 1L) lens else sample(lens, 1L)
    cbind(t = sort(sample(0:(4 * k), k)) * step, v = round_to_float(c(rnorm(k - 1L), 0)))
  })
}

# Every op on (X, X) and (X, Y) for the current options, by backend and precision.
walk_results <- function(X, Y, backend, precision) {
  list(
    pdist1 = as.matrix(pcf_pdist(X, p = 1, precision = precision, backend = backend)),
    pdist2 = as.matrix(pcf_pdist(X, p = 2, precision = precision, backend = backend)),
    pdistp = as.matrix(pcf_pdist(X, p = 3.5, precision = precision, backend = backend)),
    pdistinf = as.matrix(pcf_pdist(X, p = Inf, precision = precision, backend = backend)),
    kernel = pcf_kernel(X, precision = precision, backend = backend),
    cdist1 = pcf_cdist(X, Y, p = 1, precision = precision, backend = backend),
    cdistp = pcf_cdist(X, Y, p = 3.5, precision = precision, backend = backend),
    cdistinf = pcf_cdist(X, Y, p = Inf, precision = precision, backend = backend),
    kernelxy = pcf_kernel(X, Y, precision = precision, backend = backend))
}

walk_reference <- function(X, Y) {
  ref <- list(pdist1 = pcf_ref_matrix(X, X, 1), pdist2 = pcf_ref_matrix(X, X, 2),
              pdistp = pcf_ref_matrix(X, X, 3.5), pdistinf = pcf_ref_matrix(X, X, Inf),
              kernel = pcf_ref_matrix(X, X, "inner"), cdist1 = pcf_ref_matrix(X, Y, 1),
              cdistp = pcf_ref_matrix(X, Y, 3.5), cdistinf = pcf_ref_matrix(X, Y, Inf),
              kernelxy = pcf_ref_matrix(X, Y, "inner"))
  for (k in grep("^pdist", names(ref))) diag(ref[[k]]) <- 0   # a dist has no diagonal
  ref
}

expect_walk_matches <- function(got, cpu, ref, what) {
  for (k in names(ref)) {
    expect_lt(rel_err(got[[k]], cpu[[k]]), 1e-12, label = paste(what, k, "vs CPU"))
    expect_lt(rel_err(got[[k]], ref[[k]]), 1e-12, label = paste(what, k, "vs R reference"))
  }
}

test_that("the GPU walk matches the CPU and the R reference for every op", {
  skip_if_no_gpu()
  set.seed(1401)
  # An odd count of rows and columns; lengths from 1 to 2000 breakpoints, so
  # columns walked together end far apart; breakpoints on a grid and continuous.
  X <- c(walk_case(61, 1:40), walk_case(4, c(300, 2000), 1 / 256),
         walk_case(6, 5:80, 1 / 64))
  X <- X[sample(length(X))]
  Y <- walk_case(37, c(1, 2, 3, 50, 700))
  ref <- walk_reference(X, Y)
  cpu <- list(double = walk_results(X, Y, "cpu", "double"),
              single = walk_results(X, Y, "cpu", "single"))
  # Shared memory: the default; 1 KiB (64 double / 128 float intervals: batches
  # of one to a few columns, odd counts, long functions from global memory);
  # 3 KiB; 1040 bytes (65 double / 130 float intervals, batches cut at other
  # places). The small budget cuts the result into 24 x 24 blocks: diagonal
  # blocks with their triangle, blocks below them, and edge tiles.
  settings <- list(list(shared = NA, budget = 0), list(shared = 1024L, budget = 0),
                   list(shared = 3072L, budget = 2 * 8 * 24^2),
                   list(shared = 1040L, budget = 2 * 8 * 24^2))
  for (s in settings) {
    old <- options(gpukernels.pcf_budget_bytes = s$budget)
    for (precision in c("double", "single")) {
      got <- with_tunables(list(GK_PCF_SHARED_BYTES = s$shared),
                           walk_results(X, Y, "gpu", precision))
      expect_walk_matches(got, cpu[[precision]], ref,
                          sprintf("shared %s, budget %g, %s", s$shared, s$budget, precision))
    }
    options(old)
  }
})

test_that("the GPU walk handles tiles of one column and pairs of equal functions", {
  skip_if_no_gpu()
  set.seed(1402)
  f <- walk_case(1, 25)[[1]]
  X <- c(list(f, f), walk_case(3, 1:5), list(f))   # equal functions: distance 0
  # 6 functions: whole groups of 3 columns; 4 and 7: a remainder of one
  for (Xk in list(X, X[c(1, 2, 3, 6)], c(X, walk_case(1, 9)))) {
    same <- which(vapply(Xk, identical, NA, f))
    for (precision in c("double", "single")) {
      for (p in c(1, 2, Inf)) {
        d <- as.matrix(pcf_pdist(Xk, p = p, precision = precision, backend = "gpu"))
        expect_lt(rel_err(d, as.matrix(pcf_pdist(Xk, p = p, precision = precision,
                                                 backend = "cpu"))), 1e-12)
        expect_equal(d[same, same], matrix(0, length(same), length(same)), ignore_attr = TRUE)
      }
      expect_lt(rel_err(pcf_cdist(Xk[3], Xk, precision = precision, backend = "gpu"),
                        pcf_ref_matrix(Xk[3], Xk, 1)), 1e-12)
    }
  }
})
