# Runs the installed package's test suite and prints one closing line
# "N passed, N failed, N skipped"; exits non-zero if any test failed.
#
# GK_TEST_JOBS=n (default 1) runs the test files in n R processes at once (for
# the 16-core GPU machine, where device time is scarce), each with cores / n
# host threads. Files that measure free
# memory or time a signal (GK_TEST_ALONE) then run one at a time, after the rest,
# so that no other process disturbs what they measure. Each file's report is
# written to GK_TEST_LOGS (a folder) when set. GK_TEST_FILES (comma-separated
# file names) runs only those files, in that order. GK_TEST_GPU_ONLY=1 runs
# the tests that loop over backends on the GPU only (tests/testthat/helper-gpu.R).
jobs <- max(1L, as.integer(Sys.getenv("GK_TEST_JOBS", "1")))
cores <- max(1L, parallel::detectCores(), na.rm = TRUE)
log_dir <- Sys.getenv("GK_TEST_LOGS", tempfile("gk-tests"))
dir.create(log_dir, showWarnings = FALSE, recursive = TRUE)
alone <- strsplit(Sys.getenv("GK_TEST_ALONE",
                             paste0("test-interrupt.R,test-memory.R,test-native.R,test-device-layer.R,",
                                    "test-kernel.R,test-h2.R,test-h2-compress.R,",
                                    "test-h2-compress-gpu.R,test-h2-otf-gpu.R,test-reduce.R")), ",")[[1]]

run_in_process <- function(file) {
  stem <- sub("\\.R$", "", basename(file))
  log <- file.path(log_dir, paste0(stem, ".log"))
  rds <- file.path(log_dir, paste0(stem, ".rds"))
  # Files running together share the cores: each process's host threads (the
  # engines' OpenMP loops) are cores / jobs, not all of them, which would put
  # jobs x cores threads on the cores. Files that run alone keep every core.
  threads <- if (basename(file) %in% alone) 0L else max(1L, cores %/% jobs)
  code <- sprintf(paste0(
    "options(gpukernels.threads = %dL); ",
    "r <- as.data.frame(testthat::test_file(%s, package = 'gpukernels', load_package = 'installed',",
    " reporter = testthat::SummaryReporter$new(), stop_on_failure = FALSE)); saveRDS(r, %s)"),
    threads, deparse(file), deparse(rds))
  started <- Sys.time()
  system2(file.path(R.home("bin"), "Rscript"), c("-e", shQuote(code)), stdout = log, stderr = log)
  seconds <- as.numeric(difftime(Sys.time(), started, units = "secs"))
  res <- if (file.exists(rds)) readRDS(rds) else NULL
  out <- if (is.null(res)) {  # the process died: count it as one failure and show its output
    list(file = basename(file), nb = 0, failed = 1, skipped = 0, seconds = seconds, log = log)
  } else {
    list(file = basename(file), nb = sum(res$nb), failed = sum(res$failed) + sum(res$error),
         skipped = sum(res$skipped), seconds = seconds, log = log)
  }
  # At once, so that a run stopped by a time limit still shows the finished files.
  cat(sprintf("finished %-28s %5d tests %3d failed %7.1f s\n", out$file, as.integer(out$nb),
              as.integer(out$failed), seconds))
  flush(stdout())
  out
}

if (jobs == 1L && !nzchar(Sys.getenv("GK_TEST_FILES"))) {
  results <- as.data.frame(testthat::test_dir("tests/testthat", package = "gpukernels",
                                              load_package = "installed",
                                              reporter = testthat::SummaryReporter$new(),
                                              stop_on_failure = FALSE))
  failed <- sum(results$failed) + sum(results$error)
  skipped <- sum(results$skipped)
  passed <- sum(results$nb) - sum(results$failed) - sum(results$skipped)
} else {
  files <- list.files("tests/testthat", pattern = "^test.*\\.R$", full.names = TRUE)
  only <- Sys.getenv("GK_TEST_FILES")
  # In the order given, so that a caller can start the longest files first.
  if (nzchar(only)) files <- file.path("tests/testthat", intersect(strsplit(only, ",")[[1]], basename(files)))
  together <- files[!basename(files) %in% alone]
  by_file <- c(parallel::mclapply(together, run_in_process, mc.cores = jobs,
                                  mc.preschedule = FALSE),
               lapply(files[basename(files) %in% alone], run_in_process))
  for (r in by_file) {
    cat(sprintf("%-28s %5d tests %3d failed %3d skipped %7.1f s\n", r$file, as.integer(r$nb),
                as.integer(r$failed), as.integer(r$skipped), r$seconds))
  }
  for (r in by_file) if (r$failed > 0) {
    cat("\n==== ", r$file, " ====\n", sep = "")
    writeLines(readLines(r$log))
  }
  failed <- sum(vapply(by_file, `[[`, 0, "failed"))
  skipped <- sum(vapply(by_file, `[[`, 0, "skipped"))
  passed <- sum(vapply(by_file, `[[`, 0, "nb")) - failed - skipped
}
cat(sprintf("\ntests: %d passed, %d failed, %d skipped\n", passed, failed, skipped))
quit(status = if (failed > 0) 1 else 0)
