# Helpers of the H2 tests (test-h2*.R).

# Ranks per level of an H2 matrix, through the exported summary().
h2_ranks <- function(A) summary(A)$level_ranks

# Relative error in the 2-norm.
rel2 <- function(a, b) sqrt(sum((a - b)^2) / sum(b^2))

# The dense matrix an H2 matrix approximates.
dense_of <- function(locs, k, nugget = 0) {
  kernel_matrix(locs, kernel = k, backend = "cpu") + diag(nugget, nrow(locs))
}

# The kernels the on-the-fly tests run through (one with a range per dimension).
otf_kernels <- function() {
  list(gk_kernel("exponential", range = 0.15),
       gk_kernel("gaussian", range = 0.1, variance = 2),
       gk_kernel("matern", range = 0.15, smoothness = 1.5),
       gk_kernel("matern", range = 0.15, smoothness = 0.8),
       gk_kernel("cauchy", range = 0.2),
       gk_kernel("inverse_multiquadric", range = 0.2),
       gk_kernel("exponential", range = c(0.1, 0.25)))
}

# `times` more products of A after the first hold no more memory than it did;
# the first and the last product, for the caller to compare.
repeated_products <- function(A, x, times) {
  first <- A %*% x
  held <- gk_memory()
  for (i in seq_len(times)) last <- A %*% x
  expect_identical(gk_memory(), held)
  list(first = first, last = last)
}

# The exact matrix K + nugget I from the kernel's formula in R (test-kernel.R's
# reference): "exponential" exp(-d / range) or "gaussian" exp(-d^2 / (2 range^2)).
brute_force <- function(locs, name, range, nugget) {
  d <- as.matrix(stats::dist(locs)) / range
  K <- switch(name, exponential = exp(-d), gaussian = exp(-d^2 / 2))
  K + diag(nugget, nrow(locs))
}

# Form codes seen from R: 2 = dense blocks on the fly, compressed couplings stored.
expect_form <- function(A, form) {
  info <- gpukernels:::h2_info(A)
  expect_identical(c(info$on_the_fly, info$couplings_on_the_fly),
                   switch(form, stored = c(FALSE, FALSE), on_the_fly = c(TRUE, TRUE),
                          dense_on_the_fly = c(TRUE, FALSE)))
}

# Runs `code` with the package's function `name` recording the arguments
# (`args`) and result (`value`, or what keep() makes of it when the call
# returns) of each call in log$calls.
with_calls_logged <- function(name, log, code, keep = identity) {
  ns <- asNamespace("gpukernels")
  real <- get(name, envir = ns)
  log$calls <- list()
  unlockBinding(name, ns)
  assign(name, function(...) {
    value <- real(...)
    log$calls[[length(log$calls) + 1L]] <- list(args = list(...), value = keep(value))
    value
  }, envir = ns)
  on.exit({
    assign(name, real, envir = ns)
    lockBinding(name, ns)
  })
  code
}
