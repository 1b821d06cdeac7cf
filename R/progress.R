#' Progress reports
#'
#' Long calls report their progress through the \pkg{progressr} package (when
#' it is installed), the R convention: the package signals progress, and you
#' choose whether and how it is shown with [progressr::handlers()] (a text
#' bar, \pkg{cli}, RStudio's job bar, a beep ...), for example
#' `progressr::handlers(global = TRUE)` once, or a call wrapped in
#' `progressr::with_progress()`. Without a handler nothing is shown.
#'
#' What counts as a step: a block of the PCF engines' block plan (see
#' [pcf_pdist()]) for a call run in this R process; a chunk of rows for a
#' call split over `future` workers (see [gk_distributed]); a slab of rows
#' written to the file for [pcf_dist_file()]. Calls split over workers report
#' from the workers too, as \pkg{future} relays their progress.
#'
#' `options(gpukernels.progress = TRUE)` (the default in interactive sessions)
#' adds the engines' progress lines (blocks done, and at the end of a GPU run
#' how long the GPUs computed and the host wrote results): as messages of the
#' progress updates when \pkg{progressr} is used, else printed to the console.
#' `options(gpukernels.progress = FALSE)` turns all progress reporting off.
#'
#' @name gk_progress
#' @examples
#' if (requireNamespace("progressr", quietly = TRUE)) {
#'   X <- lapply(1:50, function(i) pcf(c(0, sort(runif(5))), c(rnorm(5), 0)))
#'   progressr::with_progress(d <- pcf_pdist(X, backend = "cpu"))
#' }
NULL

# Console lines from the engines (options(gpukernels.progress)).
gk_progress_lines <- function() isTRUE(getOption("gpukernels.progress", interactive()))

# Whether steps go to progressr: installed, and not turned off. Asked once per
# session whether progressr is installed (requireNamespace is slow on a miss).
gk_use_progressr <- function() {
  if (identical(getOption("gpukernels.progress"), FALSE)) return(FALSE)
  if (is.null(gk_state$progressr)) {
    gk_state$progressr <- requireNamespace("progressr", quietly = TRUE)
  }
  gk_state$progressr
}

# A progressor for `steps` steps of the calling function (NULL when progressr
# is not used): call it as p() once per step, p(message = line) for a line.
gk_progressor <- function(steps, envir = parent.frame()) {
  if (!gk_use_progressr() || steps < 1) return(NULL)
  progressr::progressor(steps = steps, envir = envir)
}

# Evaluates an engine call with its block steps (and lines) sent to progressr:
# the C engines call `sink(done, total, line)` between blocks on R's thread.
# The sink is made elsewhere: a closure made here would keep this frame, and
# so the promise holding the result, alive, and the caller's attr<- would then
# copy the result (10 GB for a pcf_pdist() of 5e4 functions).
gk_with_engine_progress <- function(expr, envir = parent.frame()) {
  if (!gk_use_progressr()) return(expr)
  .Call(gk_r_progress_sink, gk_engine_sink(envir))
  on.exit(.Call(gk_r_progress_sink, NULL))
  expr
}

gk_engine_sink <- function(envir) {
  force(envir)   # an unforced promise would keep the caller's frame alive too
  p <- NULL
  last <- 0
  function(done, total, line) {
    if (done < 0) {                      # a progress line
      if (!is.null(p)) p(message = line, amount = 0)
      return(invisible())
    }
    if (is.null(p)) p <<- progressr::progressor(steps = total, envir = envir)
    if (done > last) {
      p(amount = done - last)
      last <<- done
    }
    invisible()
  }
}

# One progress step per likelihood evaluation through progressr (the user
# picks the handler, see ?gk_progress), with the evaluation's line as the
# step's message when `verbose`; without progressr, verbose lines go to
# message(). A fit without `verbose` shows nothing for its first
# `gpukernels.progress_after` seconds (default 2): quick fits print no bar,
# and a longer one starts its bar with the evaluations done so far. The
# progressor finishes when gp_fit() returns.
gp_fit_progress <- function(verbose, steps, envir = parent.frame()) {
  force(envir)   # the bar may start later, from a deeper frame
  if (!gk_use_progressr() || steps < 1) {
    if (verbose && !identical(getOption("gpukernels.progress"), FALSE)) {
      return(function(line) message(line))
    }
    return(function(line) invisible())
  }
  after <- if (verbose) 0 else getOption("gpukernels.progress_after", 2)
  started <- proc.time()[["elapsed"]]
  p <- NULL
  done <- 0L
  function(line) {
    # the evaluations can outnumber the planned steps (line searches): past
    # them only the line is sent
    amount <- if (done < steps - 1L) 1 else 0
    done <<- done + amount
    if (is.null(p)) {
      if (proc.time()[["elapsed"]] - started < after) return(invisible())
      p <<- progressr::progressor(steps = steps, envir = envir)
      if (done > amount) p(amount = done - amount)   # the evaluations before the bar
    }
    if (verbose) p(message = line, amount = amount) else p(amount = amount)
  }
}
