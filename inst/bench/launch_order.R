# The caller's part of a call split over future workers (issue 37): pdist L1
# float of n PCFs (pcf_draw.R) on `workers` workers of plan(multisession),
# each run's wall time and its timeline (gpukernels.progress), then medians.
# Run it once per build, alternating, to compare builds:
#   Rscript inst/bench/launch_order.R [n = 6000] [workers = 2] [reps = 5] [backend] [k]
# k: at most k breakpoints per function (k = 1000, pcf_draw.R's, by default;
# smaller for the CPU, whose engine would hide the caller's part).
# Columns (seconds from the call's start, the latest of the workers):
# launched: last future launched; offered / checked: the inputs offered to
# the workers and checked (where they read them from this process); ready:
# the result (and inputs) ready; started / read / done: the workers';
# collected: the last value collected.
library(gpukernels)
args <- as.list(commandArgs(trailingOnly = TRUE))
n <- as.numeric(if (length(args) >= 1) args[[1]] else 6000)
workers <- as.integer(if (length(args) >= 2) args[[2]] else 2)
reps <- as.integer(if (length(args) >= 3) args[[3]] else 5)
backend <- if (length(args) >= 4) args[[4]] else if (gk_has_gpu()) "gpu" else "cpu"
source(file.path(local({
  file <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  if (length(file)) dirname(file[1]) else "inst/bench"
}), "pcf_draw.R"))
Sys.setenv(R_LIBS = paste(.libPaths(), collapse = .Platform$path.sep))
k <- as.integer(if (length(args) >= 5) args[[5]] else 1000)
X <- draw_pcfs(n)
if (k < 1000) X <- lapply(X, function(f) {
  f <- f[seq_len(min(nrow(f), k)), , drop = FALSE]
  f[nrow(f), 2] <- 0   # the last value 0, as drawn
  f
})
future::plan(future::multisession, workers = workers)
call <- function() {
  suppressWarnings(pcf_pdist(X, precision = "single", backend = backend, workers = workers))
}
invisible(call())   # warm: workers started, package loaded
field <- function(line, name) {
  got <- regmatches(line, regexpr(paste0(name, " [0-9./]+"), line))
  if (!length(got)) return(NA_real_)
  max(as.numeric(strsplit(sub(paste0(name, " "), "", got), "/")[[1]]))
}
tl <- ""
rows <- do.call(rbind, lapply(seq_len(reps), function(r) {
  gc(FALSE)
  options(gpukernels.progress = TRUE)
  lines <- capture.output(s <- system.time(d <- call())[["elapsed"]], type = "message")
  options(gpukernels.progress = FALSE)
  rm(d)
  tl <<- grep("timeline", lines, value = TRUE)[1]
  ready <- field(tl, "result ready")
  data.frame(seconds = s, launched = field(tl, "futures launched"),
             offered = field(tl, "inputs offered"), checked = field(tl, "checked"),
             ready = if (is.na(ready)) field(tl, "inputs ready") else ready,
             started = field(tl, "workers started"),
             read = field(tl, "inputs read"), done = field(tl, "done"),
             collected = field(tl, "collected"))
}))
cat(tl, "\n")
cat(sprintf("n = %g (at most %d breakpoints), %d workers, %s, %s\n", n, k, workers, backend,
            if (regexpr("launched", tl) < regexpr("ready", tl)) "futures launched first" else
              "result and inputs first"))
print(rows, row.names = FALSE)
cat("median:\n")
print(as.data.frame(lapply(rows, median)), row.names = FALSE)
future::plan(future::sequential)
