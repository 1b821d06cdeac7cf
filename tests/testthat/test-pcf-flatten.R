# The host's pass before a PCF engine starts (src/r_pcf_flat.c): R's matrices
# are copied and checked function by function, on threads above a million
# breakpoints and beside the result's allocation. Errors and warnings must
# still name the first bad function, and values must be those of R's matrices.

good <- cbind(t = c(0, 1), v = c(1, 0))

# 2100 functions of 500 breakpoints (over a million: the threaded copy), on a
# grid that float holds exactly.
big_set <- function(n = 2100L, k = 500L) {
  lapply(seq_len(n), function(i) {
    cbind(t = (0:(k - 1L)) / 64, v = c(((i + seq_len(k - 1L)) %% 7) - 3, 0))
  })
}

test_that("the first bad function is named, whichever thread checks it", {
  X <- big_set()
  expect_gt(sum(vapply(X, nrow, 1L)), 1e6)
  Xb <- X
  Xb[[1700]][3, 1] <- Xb[[1700]][2, 1]
  Xb[[900]][10, 2] <- NA
  Xb[[2100]][1, 1] <- -1
  expect_error(pcf_pdist(Xb, backend = "cpu"), "`x\\[\\[900\\]\\]` has NA or NaN in row 10")
  expect_error(pcf_cdist(list(good), Xb, backend = "cpu"), "`y\\[\\[900\\]\\]` has NA")
  expect_error(pcf_kernel(Xb[-900], backend = "cpu"), "`x\\[\\[1699\\]\\]`: breakpoints must be")
  expect_error(pcf_knn(Xb[1000:2100], k = 2, backend = "cpu"), "`x\\[\\[701\\]\\]`")
  expect_error(pcf_eval(Xb, 1), "`f\\[\\[900\\]\\]`")
  # too large for float: an error in single precision only
  Xs <- X
  Xs[[2000]][5, 2] <- 1e39
  Xs[[1200]][7, 2] <- -1e39
  expect_error(pcf_cdist(Xs, list(good), precision = "single", backend = "cpu"),
               "`x\\[\\[1200\\]\\]` has values too large for single precision in row 7")
  expect_identical(dim(pcf_cdist(Xs, list(good), backend = "cpu")), c(2100L, 1L))
})

test_that("the float warning names the first function float cannot hold", {
  X <- big_set()
  for (i in c(1500L, 800L)) X[[i]][, 1] <- 1e8 + 0.5 * (0:499)
  Y <- list(good)
  w <- character()
  D <- withCallingHandlers(pcf_cdist(X, Y, precision = "single", backend = "cpu"),
                           warning = function(cnd) {
                             w <<- c(w, conditionMessage(cnd))
                             invokeRestart("muffleWarning")
                           })
  expect_length(w, 1L)
  expect_match(w, "`x\\[\\[800\\]\\]` \\(t = 100000000 in row 2 ")
  expect_warning(pcf_cdist(Y, X, precision = "single", backend = "cpu"), "`y\\[\\[800\\]\\]`")
  expect_silent(pcf_cdist(X[-c(800, 1500)], Y, precision = "single", backend = "cpu"))
  # the copy holds R's values exactly: rows equal those of small calls
  rows <- c(1L, 799L, 800L, 2100L)
  expect_identical(D[rows, , drop = FALSE],
                   suppressWarnings(pcf_cdist(X[rows], Y, precision = "single", backend = "cpu")))
})

test_that("integer and double matrices give identical results and attributes", {
  set.seed(63)
  Xd <- lapply(1:40, function(i) cbind(t = c(0, sort(sample(1:50, 5))), v = c(sample(-9:9, 5), 0)))
  Xi <- lapply(Xd, function(f) { storage.mode(f) <- "integer"; f })
  names(Xd) <- names(Xi) <- paste0("f", 1:40)
  d1 <- pcf_pdist(Xd, backend = "cpu")
  d2 <- pcf_pdist(Xi, backend = "cpu")
  attr(d2, "call") <- attr(d1, "call")
  expect_identical(d1, d2)
  expect_identical(attributes(d1)[c("Size", "Labels", "Diag", "Upper", "method", "class")],
                   list(Size = 40L, Labels = names(Xd), Diag = FALSE, Upper = FALSE,
                        method = "L1", class = "dist"))
  expect_equal(as.matrix(d1), pcf_ref_matrix(Xd, Xd, 1), ignore_attr = TRUE, tolerance = 1e-12)
  # over a million breakpoints: the threaded copy converts integers too
  X <- big_set(2100L, 480L)
  XI <- lapply(X, function(f) { f[, 1] <- f[, 1] * 64; storage.mode(f) <- "integer"; f })
  XD <- lapply(XI, function(f) { storage.mode(f) <- "double"; f })
  expect_identical(pcf_cdist(XI, list(good), backend = "cpu"),
                   pcf_cdist(XD, list(good), backend = "cpu"))
})

test_that("a result that cannot be allocated is an R error, after the copy ends", {
  # 1e6 functions: a dist of 4 TB, which malloc refuses unless memory is
  # overcommitted without limit (then the call would run: skip).
  mode <- tryCatch(readLines("/proc/sys/vm/overcommit_memory"), error = function(e) "")
  skip_if_not(identical(mode, "0") || identical(mode, "2"), "memory may be overcommitted")
  X <- rep(list(good), 1e6)
  expect_error(pcf_pdist(X, backend = "cpu"), "cannot allocate")
  expect_equal(c(pcf_pdist(X[1:2], backend = "cpu")), 0)
})
