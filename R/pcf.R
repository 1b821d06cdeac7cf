#' Piecewise-constant functions (PCFs)
#'
#' A PCF is given by breakpoints \eqn{0 \le t_1 < \dots < t_n} and values
#' \eqn{v_1, \dots, v_n}: it is 0 on \eqn{[0, t_1)}, \eqn{v_k} on
#' \eqn{[t_k, t_{k+1})} and \eqn{v_n} on \eqn{[t_n, \infty)}. `pcf()` builds one
#' (a two-column matrix with columns `t` and `v`, of class `pcf`);
#' `as_pcf_list()` turns a list of PCFs, of two-column matrices or of data
#' frames with columns `t` and `v` into a `pcf_list`, the input every `pcf_*`
#' function accepts.
#'
#' @param t Breakpoints, finite, strictly increasing, the first one `>= 0`.
#' @param v Values, finite, one per breakpoint.
#' @return `pcf()`: an object of class `pcf`; `as_pcf_list()`: a list of them of
#'   class `pcf_list` (names kept).
#' @examples
#' f <- pcf(c(0, 1, 3), c(2, 1, 0))
#' f
#' pcf_eval(f, c(0.5, 2, 10))
#' X <- as_pcf_list(list(a = f, b = cbind(t = c(0.5, 2), v = c(1, 0))))
#' X
#' @export
pcf <- function(t, v) {
  if (!is.numeric(t) || !is.numeric(v) || length(t) != length(v)) {
    stop("`t` and `v` must be numeric vectors of the same length", call. = FALSE)
  }
  f <- cbind(t = as.double(t), v = as.double(v))
  pcf_check_one(f, "pcf(t, v)")
  structure(f, class = c("pcf", "matrix", "array"))
}

#' @rdname pcf
#' @param x A `pcf_list`, or a list of PCFs, two-column numeric matrices
#'   (columns t, v) or data frames with columns `t` and `v`; a single one of
#'   those stands for a list of one.
#' @param arg The name of `x` in error messages.
#' @param X Deprecated name of `x`.
#' @export
as_pcf_list <- function(x, arg = "x", X) {
  if (!missing(X)) {
    if (!missing(x)) gk_given_twice("as_pcf_list", "x", "X")
    gk_deprecated_args("as_pcf_list", "X", "x")
    x <- X
  }
  X <- x
  if (inherits(X, "pcf_list")) {
    if (!is.list(X)) {
      stop("`", arg, "` has class pcf_list but is ", gk_describe(unclass(X)),
           ", not a list of PCFs (edited by hand?): make it with as_pcf_list()", call. = FALSE)
    }
    return(X)
  }
  # One function alone: a pcf, a two-column matrix, or a data frame with t and v.
  if (is.matrix(X) && !is.list(X) || is.data.frame(X) && all(c("t", "v") %in% names(X))) {
    X <- list(X)
  }
  if (!is.list(X) || is.data.frame(X)) {
    stop("`", arg, "` must be a list of PCFs (two-column matrices t, v, or data frames ",
         "with columns t and v)", call. = FALSE)
  }
  # is.list (a primitive) first: is.data.frame on each of 5e4 matrices took
  # 40 ms, serial time before a call split over workers.
  frames <- which(vapply(X, is.list, NA))
  frames <- frames[vapply(X[frames], is.data.frame, NA)]
  X[frames] <- lapply(frames, function(i) pcf_from_frame(X[[i]], arg, i))
  structure(X, class = "pcf_list")
}

pcf_from_frame <- function(d, arg, i) {
  if (!all(c("t", "v") %in% names(d)) || !is.numeric(d$t) || !is.numeric(d$v)) {
    stop("`", arg, "[[", i, "]]` is a data frame without numeric columns `t` and `v`",
         call. = FALSE)
  }
  cbind(t = as.double(d$t), v = as.double(d$v))
}

# Checks one PCF with the same C checks the engines use.
pcf_check_one <- function(f, arg) {
  tryCatch(.Call(gk_r_pcf_validate, list(f)),
           error = function(e) stop(sub("`x\\[\\[1\\]\\]`", paste0("`", arg, "`"),
                                        conditionMessage(e)), call. = FALSE))
  invisible(TRUE)
}

# Checks a pcf_list with the engines' C checks, naming it as `arg`.
pcf_check_list <- function(X, arg) {
  tryCatch(.Call(gk_r_pcf_validate, unclass(X)),
           error = function(e) stop(sub("`x\\[\\[", paste0("`", arg, "[["),
                                        conditionMessage(e)), call. = FALSE))
  invisible(X)
}

#' @export
print.pcf <- function(x, ...) {
  n <- nrow(x)
  cat(sprintf("PCF with %d breakpoint%s on [%g, %g], last value %g\n", n, if (n == 1) "" else "s",
              x[1, 1], x[n, 1], x[n, 2]))
  shown <- unclass(x)[seq_len(min(n, 6L)), , drop = FALSE]
  print(shown)
  if (n > 6L) cat("... ", n - 6L, " more\n", sep = "")
  invisible(x)
}

#' @export
print.pcf_list <- function(x, ...) {
  lengths <- vapply(x, NROW, 1L)
  cat(sprintf("List of %d PCFs", length(x)))
  if (length(x)) cat(sprintf(", %d to %d breakpoints (mean %.1f)", min(lengths), max(lengths),
                             mean(lengths)))
  cat("\n")
  invisible(x)
}

#' @export
`[.pcf_list` <- function(x, i) structure(unclass(x)[i], class = "pcf_list")

#' Plot PCFs
#'
#' Draws a PCF as a step function on \eqn{[0, t_{max}]}, or several PCFs on one
#' set of axes.
#'
#' @param x A `pcf` or a `pcf_list`.
#' @param xlim,ylim Axis limits; by default up to 10% past the last breakpoint.
#' @param col Colours (recycled over the functions of a list).
#' @param xlab,ylab,... Passed to [graphics::plot()].
#' @return `x`, invisibly.
#' @examples
#' plot(pcf(c(0, 1, 3), c(2, 1, 0)))
#' @export
plot.pcf <- function(x, xlim = NULL, ylim = NULL, col = 1, xlab = "t", ylab = "value", ...) {
  plot.pcf_list(as_pcf_list(x), xlim = xlim, ylim = ylim, col = col, xlab = xlab, ylab = ylab, ...)
  invisible(x)
}

#' @rdname plot.pcf
#' @export
plot.pcf_list <- function(x, xlim = NULL, ylim = NULL, col = seq_along(x), xlab = "t",
                          ylab = "value", ...) {
  x <- unclass(x)
  last <- max(vapply(x, function(f) f[nrow(f), 1], 0))
  if (is.null(xlim)) xlim <- c(0, if (last > 0) 1.1 * last else 1)
  if (is.null(ylim)) ylim <- range(0, unlist(lapply(x, function(f) f[, 2])))
  graphics::plot(NA, xlim = xlim, ylim = ylim, xlab = xlab, ylab = ylab, ...)
  col <- rep_len(col, length(x))
  for (i in seq_along(x)) {
    f <- x[[i]]
    graphics::lines(c(0, f[, 1], xlim[2]), c(0, f[, 2], f[nrow(f), 2]), type = "s", col = col[i])
  }
  invisible(x)
}

#' Evaluate PCFs
#'
#' @param f A `pcf`, or a list of PCFs (anything [as_pcf_list()] accepts).
#' @param t Numeric vector of points (`>= 0`; the functions are 0 before their
#'   first breakpoint).
#' @return For one PCF, its values at `t`; for a list, a matrix with one row per
#'   point and one column per function.
#' @examples
#' f <- pcf(c(0, 1, 3), c(2, 1, 0))
#' pcf_eval(f, c(0, 0.99, 1, 2.5, 3, 100))
#' @export
pcf_eval <- function(f, t) {
  if (!is.numeric(t) || anyNA(t)) stop("`t` must be numeric without NA", call. = FALSE)
  if (inherits(f, "pcf") || (is.matrix(f) && !is.list(f))) {
    pcf_check_one(f, "f")
    return(pcf_eval_one(f, t))
  }
  X <- pcf_check_list(as_pcf_list(f, "f"), "f")
  out <- vapply(unclass(X), pcf_eval_one, numeric(length(t)), t = t)
  matrix(out, nrow = length(t), dimnames = list(NULL, names(X)))
}

pcf_eval_one <- function(f, t) {
  k <- findInterval(t, f[, 1])
  c(0, f[, 2])[k + 1L]
}

#' Mean of PCFs
#'
#' The pointwise mean of a list of PCFs, itself a PCF (breakpoints: the union of
#' all breakpoints).
#'
#' @param x A list of PCFs (anything [as_pcf_list()] accepts).
#' @param X Deprecated name of `x`.
#' @return A `pcf`.
#' @examples
#' pcf_mean(list(pcf(c(0, 1), c(1, 0)), pcf(c(0.5, 2), c(3, 0))))
#' @export
pcf_mean <- function(x, X) {
  if (!missing(X)) {
    if (!missing(x)) gk_given_twice("pcf_mean", "x", "X")
    gk_deprecated_args("pcf_mean", "X", "x")
    x <- X
  }
  X <- unclass(pcf_check_list(as_pcf_list(x), "x"))
  if (length(X) == 0L) stop("`x` is empty: give at least one PCF", call. = FALSE)
  t <- sort(unique(unlist(lapply(X, function(f) f[, 1]))))
  total <- numeric(length(t))
  for (f in X) total <- total + pcf_eval_one(f, t)
  pcf(t, total / length(X))
}
