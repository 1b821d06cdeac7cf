# Locations on the sphere (issue 36): gp_loglik() on lon/lat data with chordal
# against great-circle distance (the exponential kernel, which both keep
# positive definite), tiled and h2, and the H2 matrices' block counts (the
# great-circle kernel keeps antipodal pairs out of the low-rank blocks).
#   Rscript inst/bench/gp_sphere.R      (GPU when present, else CPU)
# Environment: GK_BENCH_N (default 1e5), GK_BENCH_RANGE (km, default 1000),
# GK_BENCH_REPS (timed calls after the first, default 2), GK_BENCH_BUDGET
# (seconds; a case is skipped once less than 25 s are left, default 240).
suppressPackageStartupMessages(library(gpukernels))
n <- as.integer(as.numeric(Sys.getenv("GK_BENCH_N", "1e5")))
range <- as.numeric(Sys.getenv("GK_BENCH_RANGE", "1000"))
reps <- as.integer(Sys.getenv("GK_BENCH_REPS", "2"))
budget <- as.numeric(Sys.getenv("GK_BENCH_BUDGET", "240"))
t_begin <- proc.time()[["elapsed"]]
backend <- gk_backend()
cat(sprintf("backend: %s, n = %d, range %g km (radius 6371), %d timed calls after the first\n",
            backend, n, range, reps))

set.seed(1)
locs <- cbind(runif(n, -180, 180), asin(runif(n, -1, 1)) * 180 / pi)
kernel <- gk_kernel("exponential", range = range, variance = 1)
nugget <- 0.1
t0 <- proc.time()[["elapsed"]]
y <- 1 + gp_simulate(locs, kernel, nugget = nugget, method = "vecchia", coords = "lonlat",
                     distance = "great_circle", backend = backend)
cat(sprintf("simulated (Vecchia, great-circle) in %.1f s\n", proc.time()[["elapsed"]] - t0))

timed <- function(expr) {
  t0 <- proc.time()[["elapsed"]]
  value <- force(expr)
  list(value = value, seconds = proc.time()[["elapsed"]] - t0)
}

rows <- list()
for (method in c("h2", "tiled")) for (distance in c("chordal", "great_circle")) {
  if (proc.time()[["elapsed"]] - t_begin > budget - 25) {
    cat("skipped (budget):", method, distance, "\n")
    next
  }
  call <- function() gp_loglik(locs, y, kernel = kernel, nugget = nugget, method = method,
                               coords = "lonlat", distance = distance, backend = backend)
  first <- timed(call())
  times <- vapply(seq_len(reps), function(i) timed(call())$seconds, 0)
  r <- first$value
  rows[[length(rows) + 1L]] <- data.frame(
    n = n, distance = distance, method = method, first_s = round(first$seconds, 2),
    loglik_s = round(stats::median(times), 2), cg_iter = r$cg_iterations,
    loglik = round(r$loglik, 2), error = signif(r$error, 3))
  print(do.call(rbind, rows), row.names = FALSE)
}

# the H2 matrices of the gp's settings (double precision, the default eta and
# order in 3D) for both distances, on the 3D points
xyz <- local({
  lon <- locs[, 1] * pi / 180
  lat <- locs[, 2] * pi / 180
  6371 * cbind(cos(lat) * cos(lon), cos(lat) * sin(lon), sin(lat))
})
for (k in list(kernel, gk_kernel("exponential_great_circle", range = range, radius = 6371))) {
  if (proc.time()[["elapsed"]] - t_begin > budget - 10) break
  b <- timed(h2_matrix(xyz, k, nugget = nugget, precision = "double", backend = backend))
  cat(sprintf("\n%s: built in %.2f s\n", k$name, b$seconds))
  print(summary(b$value))
}
