# Kriging at scale (issue 33): predict(se.fit = TRUE) and conditional
# simulation after fits at n = 2e4 (dense, to compare with exact kriging) and
# n = 1e5 (h2), 2D Matern 3/2 (range 0.02, nugget 0.01), parameters held at
# the truth so that only the predictions are timed; then whole fits at 2e4 by
# the three methods, to compare the iterative estimates with the dense MLE.
#   Rscript inst/bench/gp_predict.R     (GPU when present, else CPU)
# Environment: GK_BENCH_SCALE multiplies every size (default 1), GK_BENCH_FITS=0
# skips the whole fits, GK_BENCH_REPS timed repetitions (default 3, median).
# Columns: seconds (median after a warm-up), new points per second, and the
# small systems' FP64 rate (m^3 / 3 + 2 m^2 flops per new point, the Cholesky
# and solve) as a fraction of the H100's FP64 FMA ceiling (33.3 TFLOP/s).
suppressPackageStartupMessages(library(gpukernels))
scale <- as.numeric(Sys.getenv("GK_BENCH_SCALE", "1"))
reps <- as.integer(Sys.getenv("GK_BENCH_REPS", "3"))
fits <- Sys.getenv("GK_BENCH_FITS", "1") != "0"
backend <- gk_backend()
cat(sprintf("backend: %s, scale %g\n", backend, scale))
fp64_ceiling <- 33.3e12

timed <- function(expr_fn, times = reps) {
  expr_fn()   # warm-up (compiles and caches the kernels)
  s <- vapply(seq_len(times), function(i) {
    t0 <- proc.time()[["elapsed"]]
    expr_fn()
    proc.time()[["elapsed"]] - t0
  }, 0)
  stats::median(s)
}

rows <- list()
report <- function(case, n, new, seconds, m = 60) {
  flops <- new * (m^3 / 3 + 2 * m^2)
  rows[[length(rows) + 1L]] <<- data.frame(case = case, n = n, new = new,
                                           seconds = signif(seconds, 3),
                                           new_per_s = signif(new / seconds, 3),
                                           fp64_fraction = if (backend == "gpu" && m > 0)
                                             signif(flops / seconds / fp64_ceiling, 2) else NA)
  print(do.call(rbind, rows), row.names = FALSE)
}

k <- gk_kernel("matern", range = 0.02, smoothness = 1.5)
simulate_data <- function(n, seed) {
  set.seed(seed)
  locs <- matrix(runif(2 * n), ncol = 2)
  list(locs = locs, y = 1 + gp_simulate(locs, k, nugget = 0.01, method = "vecchia",
                                        backend = backend))
}
fit_at_truth <- function(d, method) {
  gp_fit(d$locs, d$y, kernel = "matern", smoothness = 1.5, method = method,
         fixed = list(variance = 1, range = 0.02, nugget = 0.01), backend = backend)
}

# n = 2e4: Vecchia standard errors against exact (dense) kriging
n <- round(2e4 * scale)
d <- simulate_data(n, 1)
fit <- fit_at_truth(d, "dense")
set.seed(2)
new <- matrix(runif(2 * round(1e4 * scale)), ncol = 2)
exact <- predict(fit, new, se.fit = TRUE, se.method = "exact")
vecchia <- predict(fit, new, se.fit = TRUE, se.method = "vecchia")
rel <- vecchia$se.fit^2 / exact$se.fit^2 - 1
cat(sprintf("n = %d, %d new points: Vecchia variances / exact - 1: max %.2e, median %.2e, min %.2e\n",
            n, nrow(new), max(rel), stats::median(rel), min(rel)))
report("exact se (dense factor)", n, nrow(new),
       timed(function() predict(fit, new, se.fit = TRUE, se.method = "exact")), m = 0)
report("vecchia se", n, nrow(new),
       timed(function() predict(fit, new, se.fit = TRUE, se.method = "vecchia")))

# n = 1e5: an h2 fit, 1e4 and 1e6 new points, conditional simulation
n <- round(1e5 * scale)
d <- simulate_data(n, 3)
t0 <- proc.time()[["elapsed"]]
fit <- fit_at_truth(d, "h2")
cat(sprintf("h2 fit at n = %d (parameters held): %.2f s\n", n, proc.time()[["elapsed"]] - t0))
set.seed(4)
new4 <- matrix(runif(2 * round(1e4 * scale)), ncol = 2)
report("mean only (h2 fit)", n, nrow(new4), timed(function() predict(fit, new4)), m = 0)
report("vecchia se (h2 fit)", n, nrow(new4),
       timed(function() predict(fit, new4, se.fit = TRUE)))
chk <- predict(fit, new4, se.fit = TRUE, se.check = 20)$check
cat(sprintf("se.check at 20 points: vecchia / exact - 1 from %.2e to %.2e\n",
            min(chk$vecchia / chk$exact - 1), max(chk$vecchia / chk$exact - 1)))
new6 <- matrix(runif(2 * round(1e6 * scale)), ncol = 2)
report("vecchia se (h2 fit)", n, nrow(new6),
       timed(function() predict(fit, new6, se.fit = TRUE), times = 1))
report("conditional simulation, nsim = 10", n, nrow(new4),
       timed(function() gp_simulate(fit, new4, nsim = 10)))

# whole fits at 2e4: the iterative estimates against the dense MLE
if (fits) {
  n <- round(2e4 * scale)
  d <- simulate_data(n, 5)
  est <- lapply(c(dense = "dense", h2 = "h2", tiled = "tiled"), function(method) {
    t0 <- proc.time()[["elapsed"]]
    f <- gp_fit(d$locs, d$y, kernel = "matern", smoothness = 1.5, method = method,
                backend = backend)
    list(coef = coef(f), seconds = proc.time()[["elapsed"]] - t0, conv = f$convergence)
  })
  for (m in names(est)) {
    cat(sprintf("fit %-5s %6.1f s  %s  max |relative difference| from dense %.1e  (%s)\n", m,
                est[[m]]$seconds,
                paste(sprintf("%s %.6g", names(est[[m]]$coef), est[[m]]$coef), collapse = ", "),
                max(abs(est[[m]]$coef / est$dense$coef - 1)), est[[m]]$conv))
  }
}
