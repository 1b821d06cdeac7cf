# Runs the installed package's test suite and prints one closing line
# "N passed, N failed, N skipped"; exits non-zero if any test failed.
#
# GK_TEST_JOBS=n (default 1) runs the test files in n R processes at once (for
# the GPU machine, where device time is scarce), each with cores / n host
# threads (the cores this process may use: taskset narrows them). Files that
# measure free memory or time a signal (GK_TEST_ALONE) then run one at a time,
# after the rest, so that no other process disturbs what they measure. With 4
# GPUs or more (GK_TEST_LANES=auto, the default; 1 forces it, 0 never) they
# run instead beside the rest, in a lane of their own: the first half of the
# GPUs and a quarter of the cores, the others on the rest (each file's
# process pinned with taskset), so that no process starves another and
# each lane still sees two GPUs or more. Each file's report is
# written to GK_TEST_LOGS (a folder) when set. GK_TEST_FILES (comma-separated
# file names) runs only those files, in that order. GK_TEST_GPU_ONLY=1 runs
# the tests that loop over backends on the GPU only (tests/testthat/helper-gpu.R).
jobs <- max(1L, as.integer(Sys.getenv("GK_TEST_JOBS", "1")))
# The CPUs this process may run on (Cpus_allowed_list), else all of them.
allowed_cpus <- function() {
  line <- tryCatch(grep("^Cpus_allowed_list:", readLines("/proc/self/status"), value = TRUE),
                   error = function(e) character())
  if (length(line) != 1L) return(seq_len(max(1L, parallel::detectCores(), na.rm = TRUE)) - 1L)
  ranges <- strsplit(strsplit(trimws(sub("^Cpus_allowed_list:", "", line)), ",")[[1]], "-")
  unlist(lapply(ranges, function(r) seq(as.integer(r[1L]), as.integer(r[length(r)]))))
}
# The GPUs the tests may use: CUDA_VISIBLE_DEVICES where set, else nvidia-smi's.
visible_gpus <- function() {
  set <- Sys.getenv("CUDA_VISIBLE_DEVICES", NA)
  if (!is.na(set)) return(if (nzchar(set)) strsplit(set, ",")[[1]] else character())
  listed <- tryCatch(suppressWarnings(system2("nvidia-smi", "-L", stdout = TRUE, stderr = FALSE)),
                     error = function(e) character())
  as.character(seq_along(grep("^GPU ", listed, value = TRUE)) - 1L)
}
cpus <- allowed_cpus()
cores <- length(cpus)
gpus <- visible_gpus()
lanes <- Sys.getenv("GK_TEST_LANES", "auto")
use_lanes <- jobs > 1L && cores >= 4L &&
  (lanes == "1" || (lanes == "auto" && length(gpus) >= 4L))
log_dir <- Sys.getenv("GK_TEST_LOGS", tempfile("gk-tests"))
dir.create(log_dir, showWarnings = FALSE, recursive = TRUE)
alone <- strsplit(Sys.getenv("GK_TEST_ALONE",
                             paste0("test-interrupt.R,test-memory.R,test-native.R,test-device-layer.R,",
                                    "test-kernel.R,test-h2.R,test-h2-compress.R,",
                                    "test-h2-compress-gpu.R,test-h2-otf-gpu.R,test-reduce.R")), ",")[[1]]

# Where a file runs: its GPUs and CPUs (NULL: those of this process) and its
# host threads. Files running together share the cores: each process's host
# threads (the engines' OpenMP loops) are cores / jobs, not all of them,
# which would put jobs x cores threads on the cores. Files that run alone
# keep every core of their lane.
lane_of <- function(lane_gpus, lane_cpus, together) {
  lane_cores <- if (is.null(lane_cpus)) cores else length(lane_cpus)
  list(gpus = lane_gpus, cpus = lane_cpus,
       threads = if (together) max(1L, lane_cores %/% jobs)
                 else if (is.null(lane_cpus)) 0L else lane_cores)
}
lane_alone <- lane_of(NULL, NULL, FALSE)
lane_together <- lane_of(NULL, NULL, TRUE)
split_lanes <- function() {   # (fewer than 2 GPUs, forced: both lanes share them)
  half <- length(gpus) %/% 2L
  quarter <- max(1L, cores %/% 4L)
  lane_alone <<- lane_of(if (half) gpus[seq_len(half)], cpus[seq_len(quarter)], FALSE)
  lane_together <<- lane_of(if (half) gpus[-seq_len(half)], cpus[-seq_len(quarter)], TRUE)
}

run_in_process <- function(file, lane) {
  stem <- sub("\\.R$", "", basename(file))
  log <- file.path(log_dir, paste0(stem, ".log"))
  rds <- file.path(log_dir, paste0(stem, ".rds"))
  threads <- lane$threads
  code <- sprintf(paste0(
    "options(gpukernels.threads = %dL); ",
    "r <- as.data.frame(testthat::test_file(%s, package = 'gpukernels', load_package = 'installed',",
    " reporter = testthat::SummaryReporter$new(), stop_on_failure = FALSE)); saveRDS(r, %s)"),
    threads, deparse(file), deparse(rds))
  started <- Sys.time()
  command <- file.path(R.home("bin"), "Rscript")
  args <- c("-e", shQuote(code))
  if (!is.null(lane$cpus) && nzchar(Sys.which("taskset"))) {
    args <- c("-c", paste(lane$cpus, collapse = ","), command, args)
    command <- "taskset"
  }
  env <- if (!is.null(lane$gpus)) paste0("CUDA_VISIBLE_DEVICES=", paste(lane$gpus, collapse = ","))
  system2(command, args, stdout = log, stderr = log, env = env)
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
  by_itself <- files[basename(files) %in% alone]
  # Lanes only where some files run alone: else the others get every GPU.
  use_lanes <- use_lanes && length(by_itself) > 0L
  if (use_lanes) split_lanes()
  run_alone <- function() lapply(by_itself, run_in_process, lane = lane_alone)
  beside <- if (use_lanes) parallel::mcparallel(run_alone())
  by_file <- parallel::mclapply(together, run_in_process, lane = lane_together, mc.cores = jobs,
                                mc.preschedule = FALSE)
  alone_results <- if (is.null(beside)) run_alone() else parallel::mccollect(beside)[[1L]]
  if (!is.list(alone_results) || inherits(alone_results, "try-error")) {   # the lane died
    why <- paste("the lane of files that run alone failed:", as.character(alone_results))
    cat(why, "\n")
    log <- file.path(log_dir, "lane-alone.log")
    writeLines(why, log)
    alone_results <- list(list(file = "(files that run alone)", nb = 0, failed = 1, skipped = 0,
                               seconds = NA_real_, log = log))
  }
  by_file <- c(by_file, alone_results)
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
