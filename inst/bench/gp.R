# Gaussian-process benchmark: time per log-likelihood and per gradient
# (gp_loglik), CG iterations and probes, a whole gp_fit, and fields at 1e4.
#   Rscript inst/bench/gp.R            (GPU when present, else CPU)
# Environment: GK_BENCH_BUDGET (seconds, default 420) skips the remaining
# cases once the budget is spent; GK_BENCH_BIG=0 skips n = 1e6.
suppressPackageStartupMessages(library(gpukernels))
budget <- as.numeric(Sys.getenv("GK_BENCH_BUDGET", "420"))
big <- Sys.getenv("GK_BENCH_BIG", "1") != "0"
t_begin <- proc.time()[["elapsed"]]
left <- function() budget - (proc.time()[["elapsed"]] - t_begin)
backend <- gk_backend()
cat(sprintf("backend: %s\n", backend))
if (backend == "gpu") print(gk_info())

elapsed <- function(expr) {
  t0 <- proc.time()[["elapsed"]]
  value <- force(expr)
  list(value = value, seconds = proc.time()[["elapsed"]] - t0)
}

simulate_case <- function(n, dim, kernel, nugget, seed = 1) {
  set.seed(seed)
  locs <- matrix(runif(n * dim), ncol = dim)
  y <- 1 + gp_simulate(locs, kernel, nugget = nugget, method = "vecchia", backend = backend)
  list(locs = locs, y = y)
}

rows <- list()
bench_loglik <- function(label, n, dim, kernel, nugget, method, reps = 2L) {
  if (left() < 30) {
    cat(sprintf("skipped (time budget): %s\n", label))
    return(invisible())
  }
  dat <- simulate_case(n, dim, kernel, nugget)
  # the first call includes the neighbour search (once per data set in gp_fit)
  first <- elapsed(gp_loglik(dat$locs, dat$y, kernel = kernel, nugget = nugget,
                             method = method, backend = backend))
  ll <- replicate(reps, elapsed(gp_loglik(dat$locs, dat$y, kernel = kernel, nugget = nugget,
                                          method = method, backend = backend))$seconds)
  gr <- elapsed(gp_loglik(dat$locs, dat$y, kernel = kernel, nugget = nugget, method = method,
                          gradient = TRUE, backend = backend))
  r <- first$value
  row <- data.frame(case = label, n = n, dim = dim, method = method,
                    first_call_s = round(first$seconds, 2), loglik_s = round(stats::median(ll), 2),
                    loglik_grad_s = round(gr$seconds, 2), cg_iter = r$cg_iterations,
                    probes = r$probes, loglik = round(r$loglik, 2), se = signif(r$se, 3))
  print(row, row.names = FALSE)
  rows[[length(rows) + 1L]] <<- row
}

exp_k <- gk_kernel("exponential", range = 0.05)
m32_k <- gk_kernel("matern", range = 0.05, smoothness = 1.5)
bench_loglik("2D exponential", 1e5, 2, exp_k, 0.01, "tiled")
bench_loglik("2D Matern 3/2", 1e5, 2, m32_k, 0.01, "tiled")
bench_loglik("2D Matern 3/2", 1e5, 2, m32_k, 0.01, "h2")
bench_loglik("3D Matern 3/2", 1e5, 3, gk_kernel("matern", range = 0.1, smoothness = 1.5), 0.01,
             "tiled")

# whole fit at 1e5 (Matern 3/2, tiled operator)
if (left() > 120) {
  dat <- simulate_case(1e5, 2, gk_kernel("matern", range = 0.05, smoothness = 1.5,
                                         variance = 1), 0.05, seed = 2)
  f <- elapsed(gp_fit(dat$locs, dat$y, kernel = "matern", smoothness = 1.5, method = "tiled",
                      verbose = TRUE, backend = backend))
  cat(sprintf("gp_fit n = 1e5 (truth variance 1, range 0.05, nugget 0.05): %.1f s, %d evaluations\n",
              f$seconds, f$value$evaluations))
  print(f$value)
} else cat("skipped (time budget): gp_fit at 1e5\n")

if (big) {
  bench_loglik("2D exponential", 1e6, 2, gk_kernel("exponential", range = 0.02), 0.01, "h2",
               reps = 1L)
  bench_loglik("2D Matern 3/2", 1e6, 2, gk_kernel("matern", range = 0.02, smoothness = 1.5),
               0.01, "h2", reps = 1L)
}

# fields at 1e4 on the same data, if installed
if (!requireNamespace("fields", quietly = TRUE)) {
  cat("fields is not installed here: skipping the fields comparison at n = 1e4\n")
} else if (left() > 60) {
  suppressPackageStartupMessages(library(fields))
  dat <- simulate_case(1e4, 2, gk_kernel("matern", range = 0.1, smoothness = 1.5), 0.05,
                       seed = 3)
  ours <- elapsed(gp_fit(dat$locs, dat$y, kernel = "matern", smoothness = 1.5,
                         backend = backend))
  theirs <- elapsed(fields::spatialProcess(dat$locs, dat$y, smoothness = 1.5,
                                           cov.args = list(Covariance = "Matern")))
  sp <- theirs$value
  cat(sprintf("gpukernels gp_fit: %.1f s, loglik %.3f; fields::spatialProcess: %.1f s\n",
              ours$seconds, ours$value$loglik, theirs$seconds))
  print(coef(ours$value))
  print(sp$summary)
}

cat("\nsummary\n")
if (length(rows)) print(do.call(rbind, rows), row.names = FALSE)
