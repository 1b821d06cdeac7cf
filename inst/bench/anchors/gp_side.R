# Side by side with GPyTorch (issue 36): the exact GP marginal log-likelihood
# and its gradient per evaluation, Matern 3/2 with a constant mean and a
# nugget, on the same data (gp_side.sh runs both sides in one device call).
#   Rscript gp_side.R data DIR 2e4,1e5,1e6   writes DIR/gp_<n>_{locs,y,par,start}.f64
#   Rscript gp_side.R time DIR 2e4,1e5,1e6   times gpukernels, merges DIR/gpytorch.tsv
#   (and fits at the first size unless GP_SIDE_FIT=0)
# Per evaluation: gp_evaluate() on a problem built once (as gp_fit() does:
# GPyTorch's model holds its data too); the standalone gp_loglik() call,
# which also finds the neighbours, is timed as well. Accuracy: the dense
# (exact) value at n = 2e4 is the reference for both.
suppressPackageStartupMessages(library(gpukernels))
args <- commandArgs(trailingOnly = TRUE)
mode <- args[1]
dir <- args[2]
sizes <- as.integer(as.numeric(strsplit(args[3], ",")[[1]]))
truth <- c(variance = 1, range = 0.02, nugget = 0.05)
start <- c(variance = 0.5, range = 0.05, nugget = 0.2)
kern <- function(p) gk_kernel("matern", range = p[["range"]], smoothness = 1.5,
                              variance = p[["variance"]])
write_f64 <- function(x, name) writeBin(as.double(x), file.path(dir, name), endian = "little")
read_f64 <- function(name, n) readBin(file.path(dir, name), "double", n, endian = "little")
med <- function(f, reps = 3) {
  f()
  times <- vapply(seq_len(reps), function(i) system.time(f())[["elapsed"]], 0)
  median(times)
}

if (mode == "data") {
  dir.create(dir, showWarnings = FALSE, recursive = TRUE)
  for (n in sizes) {
    set.seed(n)
    locs <- matrix(runif(2 * n), ncol = 2)
    y <- 1 + gp_simulate(locs, kern(truth), nugget = truth[["nugget"]], method = "vecchia")
    beta <- gp_loglik(locs, y, kernel = kern(truth), nugget = truth[["nugget"]],
                      method = if (n <= 2e4) "dense" else "h2")$beta
    write_f64(locs, sprintf("gp_%d_locs.f64", n))
    write_f64(y, sprintf("gp_%d_y.f64", n))
    write_f64(c(truth, beta), sprintf("gp_%d_par.f64", n))
    write_f64(c(start, mean(y)), sprintf("gp_%d_start.f64", n))
  }
  quit(save = "no")
}

rows <- list()
add <- function(...) {
  rows[[length(rows) + 1L]] <<- data.frame(...)
  print(rows[[length(rows)]], row.names = FALSE)
}
for (n in sizes) {
  locs <- matrix(read_f64(sprintf("gp_%d_locs.f64", n), 2 * n), ncol = 2)
  y <- read_f64(sprintf("gp_%d_y.f64", n), n)
  X <- matrix(1, n, 1)
  methods <- c(if (n <= 2e4) "dense", "h2", if (n <= 1e5) "tiled")
  for (method in methods) {
    res <- NULL
    secs <- tryCatch({
      prob <- gpukernels:::gp_problem(locs, y, X, method, gp_control(), gk_backend())
      med(function() res <<- gpukernels:::gp_evaluate(prob, kern(truth), truth[["nugget"]],
                                                      gradient = TRUE),
          reps = if (n >= 1e6) 1 else 3)
    }, error = function(e) { message(method, " failed: ", conditionMessage(e)); NA })
    standalone <- if (method != "dense" && n <= 1e5) {
      system.time(gp_loglik(locs, y, kernel = kern(truth), nugget = truth[["nugget"]],
                            method = method, gradient = TRUE))[["elapsed"]]
    } else NA
    add(n = n, side = "gpukernels", setting = method, seconds = secs,
        loglik = if (is.null(res)) NA else res$loglik,
        loglik_sd = if (is.null(res)) NA else res$se,
        note = sprintf("standalone gp_loglik %.3f s; %s CG iterations", standalone,
                       if (is.null(res)) NA else res$cg_iterations))
  }
}
# the fits at the smallest size (GP_SIDE_FIT=0 leaves them out: one at 1e6
# is inst/bench/gp.R's)
n <- sizes[1]
if (Sys.getenv("GP_SIDE_FIT", "1") != "0") {
  locs <- matrix(read_f64(sprintf("gp_%d_locs.f64", n), 2 * n), ncol = 2)
  y <- read_f64(sprintf("gp_%d_y.f64", n), n)
  t_fit <- system.time(fit <- gp_fit(locs, y, kernel = "matern", smoothness = 1.5,
                                     start = as.list(start), verbose = FALSE))[["elapsed"]]
  se <- sqrt(diag(vcov(fit)))
  add(n = n, side = "gpukernels", setting = paste("fit", fit$method), seconds = t_fit,
      loglik = fit$loglik, loglik_sd = NA,
      note = paste(sprintf("%s %.5g (log se %.3f)", names(coef(fit)), coef(fit), se),
                   collapse = " "))
}
ours <- do.call(rbind, rows)
theirs <- tryCatch(utils::read.delim(file.path(dir, "gpytorch.tsv")), error = function(e) NULL)
if (!is.null(theirs)) theirs <- cbind(theirs[, 1, drop = FALSE], side = "gpytorch", theirs[, -1])
tab <- rbind(ours, theirs)
tab <- tab[order(tab$n, tab$side), ]
exact <- tab$loglik[tab$side == "gpukernels" & tab$setting == "dense"]
if (length(exact)) {
  tab$error_vs_dense <- ifelse(tab$n == n, round(tab$loglik - exact[1], 2), NA)
}
cat("\n")
print(tab, row.names = FALSE)
utils::write.table(tab, file.path(dir, "gp_side.tsv"), sep = "\t", row.names = FALSE, quote = FALSE)
