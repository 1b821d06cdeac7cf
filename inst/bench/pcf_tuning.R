# Tuning sweep for the PCF GPU kernel (internal options): the walk variant
# (0: the walk shared with the CPU, 1: row read one interval ahead) and
# the shared memory per thread block for staged columns, on pcf_pdist L1 at
# n = 2e4 in both precisions. Writes the fastest setting (sum of both
# precisions) to pcf_tuning_best.R, which inst/bench/pcf.R sources if present.
library(gpukernels)
source(file.path(local({
  file <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  if (length(file)) dirname(file[1]) else "inst/bench"
}), "pcf_draw.R"))
X <- draw_pcfs(2e4)
steps <- (length(X) - 1) * sum(vapply(X, nrow, 1L))
invisible(pcf_pdist(X[1:3000], precision = "single"))   # warm-up
results <- NULL
for (walk in 0:1) for (shared in c(16, 32, 48) * 1024) {
  options(gpukernels.pcf_gpu_walk = walk, gpukernels.pcf_gpu_shared = shared)
  seconds <- vapply(c("single", "double"), function(precision)
    system.time(pcf_pdist(X, precision = precision))[["elapsed"]], 0)
  results <- rbind(results, data.frame(walk = walk, shared = shared, single_s = seconds[1],
                                       double_s = seconds[2],
                                       single_steps_per_s = steps / seconds[1],
                                       double_steps_per_s = steps / seconds[2]))
}
print(results, row.names = FALSE, digits = 3)
best <- results[which.min(results$single_s + results$double_s), ]
cat(sprintf("best: walk %d, shared %d bytes\n", best$walk, best$shared))
writeLines(sprintf("options(gpukernels.pcf_gpu_walk = %d, gpukernels.pcf_gpu_shared = %d)",
                   best$walk, best$shared), "pcf_tuning_best.R")
