# Issue 37: would two GPUs speed up gp_loglik() at n = 1e6 by splitting the probe
# columns of the block CG between them? Times one GPU's call and its phases with 50
# and 24 probes (52 and 26 columns): the 26-column solver is what each GPU would run.
#   Rscript inst/bench/gp_columns.R   (GPU; about 40 s)
suppressPackageStartupMessages(library(gpukernels))
n <- 1e6
el <- function(e) { t <- proc.time()[[3]]; v <- force(e); list(v = v, s = proc.time()[[3]] - t) }
set.seed(1)
locs <- matrix(runif(2 * n), ncol = 2)
k <- gk_kernel("matern", range = 0.02, smoothness = 1.5)
sim <- el(y <- 1 + gp_simulate(locs, k, nugget = 0.01, method = "vecchia"))
cat("simulate", sim$s, "s\n")
w <- el(gp_loglik(locs, y, kernel = k, nugget = 0.01, method = "h2"))
cat("first gp_loglik", w$s, "s\n")
rows <- list()
for (pr in c(50L, 24L, 50L)) {
  ctl <- gp_control(probes = pr)
  r <- el(gp_loglik(locs, y, kernel = k, nugget = 0.01, method = "h2", control = ctl))
  prob <- el(gpukernels:::gp_problem(locs, y, matrix(1, n, 1), "h2", ctl, "gpu"))
  ev <- el(gpukernels:::gp_evaluate(prob$v, k, 0.01))
  nb <- el(gpukernels:::gp_neighbors(locs[sample.int(n), , drop = FALSE], 40L, "gpu"))
  tm <- r$v$timing
  rows[[length(rows) + 1]] <- data.frame(probes = pr, columns = pr + 2L, loglik_s = round(r$s, 2),
    problem_s = round(prob$s, 2), evaluate_s = round(ev$s, 2), neighbours_s = round(nb$s, 2),
    t(round(tm, 2)), cg_iter = r$v$cg_iterations, loglik = round(r$v$loglik, 1))
  print(rows[[length(rows)]], row.names = FALSE)
}
print(do.call(rbind, rows), row.names = FALSE)
