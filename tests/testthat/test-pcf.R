test_that("distances agree with the exact R reference for every p, precision and backend", {
  set.seed(11)
  X <- c(random_pcfs(23, shared = TRUE), random_pcfs(4, sizes = 1), random_pcfs(6, shared = FALSE))
  Y <- random_pcfs(9, sizes = c(1, 3, 20))
  for (p in c(1, 2, 3.5, Inf)) {
    ref <- pcf_ref_matrix(X, Y, p)
    ref_sym <- pcf_ref_matrix(X, X, p)
    for (backend in test_backends()) {
      for (precision in c("double", "single")) {
        tol <- if (precision == "double") 1e-12 else 1e-5
        D <- pcf_cdist(X, Y, p = p, precision = precision, backend = backend)
        expect_lt(rel_err(D, ref), tol)
        d <- pcf_pdist(X, p = p, precision = precision, backend = backend)
        expect_lt(rel_err(as.matrix(d), ref_sym), tol)
      }
    }
  }
})

test_that("pcf_pdist is as.dist(pcf_cdist(X, X)) and a dist that hclust and cmdscale take", {
  set.seed(2)
  X <- random_pcfs(17)
  names(X) <- paste0("f", seq_along(X))
  for (backend in test_backends()) {
    d <- pcf_pdist(X, p = 2, backend = backend)
    expect_s3_class(d, "dist")
    expect_equal(attr(d, "Size"), 17L)
    expect_equal(attr(d, "Labels"), names(X))
    expect_equal(attr(d, "method"), "L2")
    expect_false(attr(d, "Diag"))
    expect_equal(c(d), c(as.dist(pcf_cdist(X, X, p = 2, backend = backend))), tolerance = 1e-14)
    expect_equal(rownames(as.matrix(d)), names(X))
    expect_equal(length(hclust(d)$order), 17L)
    expect_equal(dim(cmdscale(d, k = 2)), c(17L, 2L))
  }
  expect_equal(attr(pcf_pdist(X, p = Inf), "method"), "Linf")
  expect_equal(attr(pcf_pdist(X, p = 3.5), "method"), "L3.5")
})

test_that("the L2 kernel matches the reference and is symmetric", {
  set.seed(3)
  X <- random_pcfs(21)
  Y <- random_pcfs(5, sizes = 1:30)
  for (backend in test_backends()) {
    K <- pcf_kernel(X, backend = backend)
    expect_lt(rel_err(K, pcf_ref_matrix(X, X, "inner")), 1e-12)
    expect_true(isSymmetric(K))
    expect_lt(rel_err(pcf_kernel(X, Y, backend = backend), pcf_ref_matrix(X, Y, "inner")), 1e-12)
    Ks <- pcf_kernel(X, Y, precision = "single", backend = backend)
    expect_lt(rel_err(Ks, pcf_ref_matrix(X, Y, "inner")), 1e-5)
  }
})

test_that("the streamed path with a tiny budget equals the one-block path", {
  set.seed(4)
  X <- random_pcfs(77, sizes = 1:40)   # not a multiple of any block side
  Y <- random_pcfs(45, sizes = 1:40)
  for (backend in test_backends()) {
    one <- list(pcf_pdist(X, backend = backend), pcf_cdist(X, Y, p = 3.5, backend = backend),
                pcf_kernel(X, backend = backend))
    withr_budget <- options(gpukernels.pcf_budget_bytes = 2 * 8 * 7^2)  # blocks of side 7 or less
    streamed <- list(pcf_pdist(X, backend = backend), pcf_cdist(X, Y, p = 3.5, backend = backend),
                     pcf_kernel(X, backend = backend))
    options(withr_budget)
    # Equal up to rounding: on the GPU a pair may be walked as (f, g) or (g, f).
    for (k in seq_along(one)) expect_equal(streamed[[k]], one[[k]], tolerance = 1e-13)
  }
})

test_that("GPU results match the CPU on tiles, triangles and functions too long for shared memory", {
  skip_if_no_gpu()
  set.seed(5)
  X <- c(random_pcfs(300, sizes = 1:60, shared = FALSE), random_pcfs(2, sizes = 5000, shared = FALSE))
  X <- X[sample(length(X))]
  for (precision in c("double", "single")) {
    tol <- if (precision == "double") 1e-12 else 1e-4
    old <- options(gpukernels.pcf_budget_bytes = 2 * 8 * 100^2)
    g <- pcf_pdist(X, precision = precision, backend = "gpu")
    k <- pcf_kernel(X[1:100], X, precision = precision, backend = "gpu")
    options(old)
    expect_lt(rel_err(g, pcf_pdist(X, precision = precision, backend = "cpu")), tol)
    expect_lt(rel_err(k, pcf_kernel(X[1:100], X, precision = precision, backend = "cpu")), tol)
  }
  expect_equal(c(pcf_pdist(X, devices = 1)), c(pcf_pdist(X, backend = "cpu")), tolerance = 1e-12)
  expect_error(pcf_pdist(X, backend = "gpu", devices = 0), "GPU numbers")
})

test_that("edge cases: one function, single breakpoints, inputs of every accepted form", {
  f <- pcf(c(0.5, 2), c(3, 0))
  g <- cbind(t = 1, v = 0)
  for (backend in test_backends()) {
    d1 <- pcf_pdist(list(f), backend = backend)
    expect_s3_class(d1, "dist")
    expect_length(d1, 0L)
    expect_equal(pcf_cdist(f, g, backend = backend), matrix(4.5), ignore_attr = TRUE)
    expect_equal(pcf_cdist(f, g, p = Inf, backend = backend)[1, 1], 3)
    expect_equal(pcf_kernel(f, backend = backend)[1, 1], 9 * 1.5)
  }
  frames <- list(a = data.frame(t = c(0.5, 2), v = c(3, 0)), b = data.frame(v = 0, t = 1))
  expect_equal(c(pcf_pdist(frames)), 4.5)
  expect_equal(c(pcf_pdist(list(matrix(c(1L, 2L, 5L, 0L), 2), g))), 5)
  expect_equal(pcf_cdist(as_pcf_list(list(f)), list(g)), matrix(4.5), ignore_attr = TRUE)
})

test_that("malformed input gives clear errors", {
  good <- cbind(t = c(0, 1), v = c(1, 0))
  bad <- function(m) list(good, m)
  expect_error(pcf_pdist(bad(cbind(c(0, 2, 1), c(1, 1, 0)))), "x\\[\\[2\\]\\].*strictly increasing")
  expect_error(pcf_pdist(bad(cbind(c(0, 1, 1), c(1, 1, 0)))), "strictly increasing")
  expect_error(pcf_pdist(bad(cbind(c(0, NA), c(1, 0)))), "x\\[\\[2\\]\\].*NA")
  expect_error(pcf_pdist(bad(cbind(c(0, 1), c(NaN, 0)))), "NA or NaN")
  expect_error(pcf_pdist(bad(cbind(c(0, Inf), c(1, 0)))), "infinite breakpoint")
  expect_error(pcf_pdist(bad(cbind(c(-1, 1), c(1, 0)))), "x\\[\\[2\\]\\].*>= 0")
  expect_error(pcf_pdist(bad(cbind(c(0, 1), c(1, 2)))), "x\\[\\[2\\]\\]` ends at the value 2")
  expect_error(pcf_cdist(list(good), list(cbind(1, 5))), "y\\[\\[1\\]\\]` ends at the value 5")
  expect_error(pcf_kernel(bad(cbind(c(0, 1), c(1, 2)))), "end at 0")
  expect_error(pcf_pdist(list()), "`x` is empty")
  expect_error(pcf_pdist(bad(matrix(numeric(), 0, 2))), "x\\[\\[2\\]\\]` has no breakpoints")
  expect_error(pcf_pdist(bad(cbind(1, 2, 3))), "two columns")
  expect_error(pcf_pdist(bad(c(1, 2))), "two columns")
  expect_error(pcf_pdist(bad(data.frame(a = 1, b = 0))), "columns `t` and `v`")
  expect_error(pcf_pdist("a"), "list of PCFs")
  expect_error(pcf_pdist(list(good), p = 0.5), "`p` must be")
  expect_error(pcf_pdist(list(good), p = NA), "`p` must be")
  expect_error(pcf_pdist(list(good), precision = "half"), "precision")
  expect_error(pcf(c(1, 0), c(1, 1)), "`pcf\\(t, v\\)`: breakpoints must be strictly increasing")
  expect_error(pcf(1:2, 1), "same length")
  # p = Inf is finite whatever the last values
  expect_equal(c(pcf_pdist(bad(cbind(c(0, 1), c(1, 2))), p = Inf)), 2)
})

test_that("pcf_eval, pcf_mean, print and plot", {
  f <- pcf(c(0.5, 1, 3), c(2, -1, 0))
  expect_equal(pcf_eval(f, c(0, 0.49, 0.5, 0.99, 1, 2.9, 3, 100)), c(0, 0, 2, 2, -1, -1, 0, 0))
  g <- pcf(c(0, 2), c(4, 0))
  E <- pcf_eval(list(a = f, b = g), c(0.25, 1.5))
  expect_equal(E, cbind(a = c(0, -1), b = c(4, 4)))
  m <- pcf_mean(list(f, g))
  s <- seq(0, 4, by = 0.05)
  expect_equal(pcf_eval(m, s), (pcf_eval(f, s) + pcf_eval(g, s)) / 2)
  expect_s3_class(m, "pcf")
  expect_output(print(f), "3 breakpoints on \\[0.5, 3\\], last value 0")
  expect_output(print(as_pcf_list(list(f, g))), "List of 2 PCFs")
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off())
  expect_identical(plot(f), f)
  expect_silent(plot(as_pcf_list(list(f, g))))
  expect_error(pcf_mean(list()), "empty")
})
