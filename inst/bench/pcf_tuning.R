# Tuning sweep for the PCF GPU kernel (internal options): the walk variant
# (0: the walk shared with the CPU, 1: row read one interval ahead, 2..4: that
# many column functions per thread at once) and the shared memory per thread
# block for staged columns, on pcf_pdist L1 with the masspcf-generator data of
# pcf.R. Stage 1: every walk x shared setting at n = 2e4 in both precisions
# (the faster of two runs each). Stage 2: walk 1 against the fastest other
# walk at n = 5e4 in float32 (two runs each), next to the issue's targets.
# Writes the fastest setting (sum of both precisions at n = 2e4) to
# pcf_tuning_best.R, which inst/bench/pcf.R sources if present.
#   Rscript inst/bench/pcf_tuning.R                  walks 1:4, shared 16/32/40/48 KiB
#   Rscript inst/bench/pcf_tuning.R 1,2 40,48        chosen walks and shared KiB
#   Rscript inst/bench/pcf_tuning.R 1,2 48 nolarge   without stage 2
library(gpukernels)
source(file.path(local({
  file <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  if (length(file)) dirname(file[1]) else "inst/bench"
}), "pcf_draw.R"))
args <- commandArgs(trailingOnly = TRUE)
parse_list <- function(i, default) {
  if (length(args) >= i) as.integer(strsplit(args[i], ",")[[1]]) else default
}
walks <- parse_list(1, 1:4)
shared_kib <- parse_list(2, c(16L, 32L, 40L, 48L))
large <- !("nolarge" %in% args)
options(gpukernels.progress = FALSE)

X <- draw_pcfs(if (large) 5e4 else 2e4)
steps_of <- function(n) (n - 1) * sum(as.numeric(vapply(X[seq_len(n)], nrow, 1L)))
fastest <- function(walk, shared, precision, n, reps) {
  options(gpukernels.pcf_gpu_walk = walk, gpukernels.pcf_gpu_shared = shared)
  Xn <- X[seq_len(n)]
  min(vapply(seq_len(reps), function(i) {
    gc(FALSE)
    system.time(pcf_pdist(Xn, precision = precision))[["elapsed"]]
  }, 0))
}
invisible(pcf_pdist(X[1:3000], precision = "single"))   # warm-up

cat("Stage 1: pdist L1, n = 2e4, faster of 2 runs\n")
results <- NULL
for (walk in walks) for (shared in shared_kib * 1024L) {
  seconds <- vapply(c("single", "double"), function(precision)
    fastest(walk, shared, precision, 2e4, 2), 0)
  row <- data.frame(walk = walk, shared = shared, single_s = seconds[1], double_s = seconds[2],
                    single_steps_per_s = steps_of(2e4) / seconds[1],
                    double_steps_per_s = steps_of(2e4) / seconds[2])
  print(row, row.names = FALSE, digits = 3)
  results <- rbind(results, row)
}
cat("\n")
print(results, row.names = FALSE, digits = 3)
best <- results[which.min(results$single_s + results$double_s), ]
cat(sprintf("best: walk %d, shared %d bytes (target: double n = 2e4 <= 1.0 s, masspcf 4.4 s)\n",
            best$walk, best$shared))
writeLines(sprintf("options(gpukernels.pcf_gpu_walk = %d, gpukernels.pcf_gpu_shared = %d)",
                   best$walk, best$shared), "pcf_tuning_best.R")

if (large) {
  cat("\nStage 2: pdist L1 float32, n = 5e4, faster of 2 runs",
      "(target <= 2.6 s, masspcf 12.9 s)\n")
  pick <- function(rows) rows[which.min(rows$single_s), ]
  contenders <- rbind(if (any(results$walk == 1)) pick(results[results$walk == 1, ]),
                      if (any(results$walk != 1)) pick(results[results$walk != 1, ]))
  for (k in seq_len(nrow(contenders))) {
    s <- fastest(contenders$walk[k], contenders$shared[k], "single", 5e4, 2)
    cat(sprintf("walk %d, shared %d: %.3f s, %.3g steps/s, %.2fx masspcf\n", contenders$walk[k],
                contenders$shared[k], s, steps_of(5e4) / s, 12.9 / s))
  }
}
