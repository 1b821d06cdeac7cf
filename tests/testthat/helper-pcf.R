# Independent reference for PCF integrals: evaluate both functions on the union
# of their breakpoints and sum over the intervals, in plain R.
pcf_ref_value <- function(f, s) c(0, f[, 2])[findInterval(s, f[, 1]) + 1L]

pcf_ref_pair <- function(f, g, p) {
  t <- sort(unique(c(0, f[, 1], g[, 1])))
  a <- pcf_ref_value(f, t)
  b <- pcf_ref_value(g, t)
  w <- diff(t)
  k <- length(t)
  if (identical(p, "inner")) return(sum(w * (a * b)[-k]))
  d <- abs(a - b)
  if (is.infinite(p)) return(max(d[-k][w > 0], d[k]))
  sum(w * d[-k]^p)^(1 / p)
}

pcf_ref_matrix <- function(X, Y, p) {
  outer(seq_along(X), seq_along(Y),
        Vectorize(function(i, j) pcf_ref_pair(X[[i]], Y[[j]], p)))
}

# Random PCFs ending at `last`: lengths from `sizes`, breakpoints drawn from a
# coarse shared grid (so that functions share breakpoints) or continuous.
random_pcfs <- function(n, sizes = 1:12, last = 0, shared = TRUE) {
  lapply(seq_len(n), function(i) {
    k <- if (length(sizes) == 1L) sizes else sample(sizes, 1L)
    t <- if (shared) sort(sample(0:40, k)) / 8 else sort(runif(k, 0, 5))
    v <- c(rnorm(k - 1L), last)
    cbind(t = t, v = v)
  })
}

# Doubles rounded to the nearest float (what precision = "single" stores).
round_to_float <- function(x) {
  x[] <- readBin(writeBin(as.double(x), raw(), size = 4), "double", length(x), size = 4)
  x
}
