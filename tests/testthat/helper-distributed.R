# Shared by the tests of work split over future workers.

draw_pcfs <- function(n) {
  lapply(seq_len(n), function(i) {
    k <- sample(1:9, 1)
    pcf(c(0, sort(runif(k - 1, 0, 3))), c(rnorm(k - 1), 0))
  })
}

# Values only: the `call` attribute records the `workers` argument.
same_dist <- function(a, b) identical(as.vector(a), as.vector(b)) && attr(a, "Size") == attr(b, "Size")

# Workers of `strategy`, connected with no-delay sockets (?gk_distributed,
# "Launching futures": each future starts about 40 ms sooner).
with_plan <- function(strategy, code) {
  old_libs <- Sys.getenv("R_LIBS")
  Sys.setenv(R_LIBS = paste(.libPaths(), collapse = .Platform$path.sep))
  sockets <- options(socketOptions = "no-delay")
  oplan <- future::plan(strategy, workers = 2)
  on.exit({
    future::plan(oplan)
    options(sockets)
    Sys.setenv(R_LIBS = old_libs)
  })
  code
}

# Runs `code` for calls with `workers` = 1 (this process) or 2: then under a
# cluster plan on localhost, whose workers write their bands of a file
# themselves (as do workers of any plan asked for by number).
with_file_workers <- function(workers, code) {
  if (workers == 1) code else with_plan(future::cluster, code)
}

# Runs `code` with the package's function `fun` traced: each call adds
# `amount` (an expression evaluated in that call's frame) to a count.
# list(value = code's value, count).
traced_count <- function(fun, amount, code) {
  counter <- new.env()
  counter$n <- 0L
  ns <- asNamespace("gpukernels")
  suppressMessages(trace(
    fun, bquote(assign("n", get("n", .(counter)) + .(amount), envir = .(counter))),
    where = ns, print = FALSE))
  on.exit(suppressMessages(untrace(fun, where = ns)))
  value <- code
  list(value = value, count = counter$n)
}

# The number of futures `code` launched (the tasks given to gk_run_tasks).
futures_made <- function(code) traced_count("gk_run_tasks", quote(length(tasks)), code)$count
