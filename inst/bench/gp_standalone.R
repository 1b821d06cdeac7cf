# Issue 38's GP row: gp_loglik() at n = 1e6 (2D Matern 3/2, range 0.02, nugget
# 0.01, method "h2"), a standalone call on data it has not seen, in one process
# after its first call; and what gp_fit() pays per step (gp_evaluate() on a
# problem made once) with 50 and 10 probes.
#   Rscript inst/bench/gp_standalone.R [n] [sets] [steps]
# (GPU; default 1e6, 4 and 1; steps = 0 leaves out the gp_fit() steps)
# Columns: seconds of the whole call, of its phase timers (timing: total and the
# device solver), the neighbour search alone (part of the call, outside the
# timers), conjugate-gradient iterations (the data's; the probes stop earlier),
# the log-likelihood and its reported error. Compare builds in one device call
# (R_LIBS pointing at each in turn).
suppressPackageStartupMessages(library(gpukernels))
args <- commandArgs(trailingOnly = TRUE)
n <- as.integer(if (length(args) >= 1) as.numeric(args[1]) else 1e6)
sets <- if (length(args) >= 2) as.integer(args[2]) else 4L
steps <- length(args) < 3 || args[3] != "0"
k <- gk_kernel("matern", range = 0.02, smoothness = 1.5)
ns <- asNamespace("gpukernels")
elapsed <- function(expr) {
  t0 <- proc.time()[["elapsed"]]
  value <- force(expr)
  list(value = value, seconds = proc.time()[["elapsed"]] - t0)
}
simulate_set <- function(seed) {
  set.seed(seed)
  locs <- matrix(runif(2 * n), ncol = 2)
  list(locs = locs, y = 1 + gp_simulate(locs, k, nugget = 0.01, method = "vecchia"))
}
rows <- list()
for (s in seq_len(sets)) {
  d <- simulate_set(10 + s)
  call <- elapsed(gp_loglik(d$locs, d$y, kernel = k, nugget = 0.01, method = "h2"))
  r <- call$value
  nb <- elapsed(ns$gp_neighbors(d$locs[sample.int(n), , drop = FALSE],
                                ns$gp_default_neighbors("h2"), gk_backend()))
  rows[[s]] <- data.frame(set = s, first_call = s == 1L, seconds = round(call$seconds, 2),
                          timers = round(r$timing[["total"]], 2),
                          solver = round(r$timing[["solver"]], 2),
                          neighbours = round(nb$seconds, 2), cg_iter = r$cg_iterations,
                          loglik = round(r$loglik, 2), error = signif(r$error, 3))
}
cat(sprintf("gp_loglik() standalone, n = %d (the first set includes the process's first call)\n", n))
rows <- do.call(rbind, rows)
print(rows, row.names = FALSE)
new <- rows[!rows$first_call, ]
if (nrow(new)) cat(sprintf("median of the %d sets after the first: %.2f s (%.2f-%.2f)\n", nrow(new),
                           stats::median(new$seconds), min(new$seconds), max(new$seconds)))
if (!steps) quit(save = "no")
steps <- do.call(rbind, lapply(c(50L, 10L), function(probes) {
  prob <- ns$gp_problem(d$locs, d$y, matrix(1, n, 1), "h2", gp_control(probes = probes),
                        gk_backend())
  ev <- elapsed(ns$gp_evaluate(prob, k, 0.01))
  evg <- elapsed(ns$gp_evaluate(prob, k, 0.01, gradient = TRUE))
  data.frame(probes = probes, step_s = round(ev$seconds, 2), step_grad_s = round(evg$seconds, 2),
             solver = round(ev$value$timing[["solver"]], 2), cg_iter = ev$value$cg_iterations)
}))
cat("\nper gp_fit() step (problem made once)\n")
print(steps, row.names = FALSE)
