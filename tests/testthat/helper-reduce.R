# Brute-force references for the kernel reductions: the full kernel matrix from
# the kernel formulas, then base R reductions over its rows.
ref_kernel_values <- function(x, y, kernel) {
  range <- rep_len(kernel$range, ncol(x))
  xs <- sweep(x, 2, range, "/")
  ys <- sweep(y, 2, range, "/")
  if (kernel$name == "linear") return(kernel$variance * xs %*% t(ys))
  d2 <- outer(rowSums(xs^2), rowSums(ys^2), "+") - 2 * xs %*% t(ys)
  d2 <- pmax(d2, 0)
  d <- sqrt(d2)
  s2 <- kernel$variance
  nu <- kernel$smoothness
  out <- switch(kernel$name,
    gaussian = s2 * exp(-d2 / 2),
    exponential = s2 * exp(-d),
    matern = ifelse(d == 0, s2, s2 * 2^(1 - nu) / gamma(nu) * d^nu * besselK(d, nu)),
    cauchy = s2 / (1 + d2),
    inverse_multiquadric = s2 / sqrt(1 + d2),
    squared_distance = s2 * d2)
  matrix(out, nrow(x), nrow(y))
}

# The reduction of the rows of Fm (an M x N matrix of kernel values).
ref_reduce <- function(Fm, reduction, b = NULL, k = 1) {
  if (is.null(b)) b <- matrix(1, ncol(Fm), 1)
  b <- as.matrix(b)
  rowmax <- apply(Fm, 1, max)
  switch(reduction,
    sum = Fm %*% b,
    min = apply(Fm, 1, min),
    max = rowmax,
    argmin = apply(Fm, 1, which.min),
    argmax = apply(Fm, 1, which.max),
    kmin = {
      idx <- t(apply(Fm, 1, function(r) order(r)[seq_len(k)]))
      if (k == 1) idx <- t(idx)
      list(values = matrix(Fm[cbind(rep(seq_len(nrow(Fm)), k), as.vector(idx))], ncol = k),
           index = idx)
    },
    logsumexp = rowmax + log(exp(Fm - rowmax) %*% b),
    softmax_sum = (exp(Fm - rowmax) %*% b) / rowSums(exp(Fm - rowmax)))
}

reduce_tolerance <- function(precision) if (precision == "single") 2e-4 else 1e-10

# Compares one kernel_reduce() result with the reference. Indices in single
# precision are checked through the values they point at (near-ties may
# legitimately resolve differently in float32).
expect_reduction <- function(got, Fm, reduction, b, k, precision, label) {
  ref <- ref_reduce(Fm, reduction, b, k)
  tol <- reduce_tolerance(precision)
  scale <- max(abs(Fm), 1e-300)
  if (reduction %in% c("argmin", "argmax")) {
    if (precision == "double") {
      expect_identical(got, as.integer(ref), label = label)
    } else {
      picked <- Fm[cbind(seq_len(nrow(Fm)), got)]
      best <- if (reduction == "argmin") apply(Fm, 1, min) else apply(Fm, 1, max)
      expect_lt(max(abs(picked - best)) / scale, tol, label = label)
    }
  } else if (reduction == "kmin") {
    expect_lt(max(abs(got$values - ref$values)) / scale, tol, label = label)
    if (precision == "double") {
      expect_identical(got$index, matrix(as.integer(ref$index), ncol = k), label = label)
    } else {
      picked <- matrix(Fm[cbind(rep(seq_len(nrow(Fm)), k), as.vector(got$index))], ncol = k)
      expect_lt(max(abs(picked - ref$values)) / scale, tol, label = label)
    }
  } else {
    ref <- if (is.matrix(got)) as.matrix(ref) else as.vector(ref)
    expect_equal(dim(got), dim(ref), label = label)
    expect_lt(max(abs(got - ref)) / max(abs(ref), 1e-300), tol, label = label)
  }
}

# The precisions worth testing on a backend: the CPU computes in double anyway.
test_precisions <- function(backend) if (backend == "gpu") c("double", "single") else "double"

# Shared by the dense and the block-sparse reduction tests.
all_reductions <- c("sum", "min", "max", "argmin", "argmax", "kmin", "logsumexp", "softmax_sum")

weights_for <- function(reduction, n, e) {
  if (!reduction %in% c("sum", "logsumexp", "softmax_sum")) return(NULL)
  w <- if (reduction == "logsumexp") runif(n * e, 0.1, 2) else rnorm(n * e)
  matrix(w, n, e)
}
