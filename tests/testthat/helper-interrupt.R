# Interrupt tests: each case runs in a fresh R process, where a background
# Rscript sends SIGINT `delay` seconds after the case's long call starts (and
# records when it did). `cases` are named strings of R code, each one long call
# (minutes if not interrupted); `after` is R code run at the end, whose value is
# returned as `after`. Returns, per case, how the call ended ("interrupt" when
# tryCatch(interrupt = ) saw R's interrupt condition) and the seconds from the
# signal to the end of the call.
run_interrupted <- function(cases, setup = "", after = "NULL", delay = 1, timeout = 600) {
  script <- tempfile(fileext = ".R")
  result <- tempfile(fileext = ".rds")
  rscript <- file.path(R.home("bin"), "Rscript")
  case_code <- vapply(names(cases), function(name) sprintf(
    "results[[%s]] <- run_case(function() { %s })", deparse(name), cases[[name]]), "")
  writeLines(c(
    sprintf(".libPaths(%s)", paste(deparse(.libPaths()), collapse = "")),
    "library(gpukernels)",
    "run_case <- function(long_call) {",
    "  stamp <- tempfile()",
    sprintf("  sender <- sprintf('Sys.sleep(%g); saveRDS(Sys.time(), \"%%s\"); tools::pskill(%%d, tools::SIGINT)', stamp, Sys.getpid())", delay),
    sprintf("  system2(%s, c('-e', shQuote(sender)), wait = FALSE)", deparse(rscript)),
    "  outcome <- tryCatch({ long_call(); 'finished' }, interrupt = function(e) 'interrupt',",
    "                      error = function(e) paste('error:', conditionMessage(e)))",
    "  ended <- Sys.time()",
    "  for (i in 1:100) if (!file.exists(stamp)) Sys.sleep(0.1)",
    "  list(outcome = outcome, latency = as.numeric(difftime(ended, readRDS(stamp), units = 'secs')))",
    "}",
    "results <- list()",
    setup,
    case_code,
    sprintf("saveRDS(list(results = results, after = { %s }), %s)", after, deparse(result))
  ), script)
  status <- system2(rscript, script, stdout = TRUE, stderr = TRUE, timeout = timeout)
  if (!file.exists(result)) stop("the interrupt test process failed:\n", paste(status, collapse = "\n"))
  readRDS(result)
}
