#' PCFs from persistence diagrams
#'
#' Summaries of the bars of one homological dimension of a persistence diagram,
#' as PCFs (see [pcf()]):
#' * `pcf_betti()`: the Betti curve, \eqn{\beta(t)} = number of bars
#'   \eqn{[b, d)} with \eqn{b \le t < d};
#' * `pcf_stable_rank()`: the stable rank for the standard contour, the number
#'   of bars longer than \eqn{t};
#' * `pcf_accumulated_persistence()`: the accumulated persistence function
#'   (Biscio and Møller), the total persistence \eqn{d - b} of the bars with
#'   mean age \eqn{(b + d) / 2 \le t}; bars that never die are left out.
#'
#' A Betti curve or stable rank ends at the number of bars that never die, and
#' an accumulated persistence function at the total persistence: distances
#' between such functions are finite only when those agree (true for Betti
#' curves and stable ranks of H0 with one infinite bar each). Give `tmax` to
#' cut every function to \eqn{[0, t_{max})} (it is 0 from `tmax` on), which
#' compares them on a common window.
#'
#' @param diagram A persistence diagram: a matrix or data frame whose first
#'   three columns are dimension, birth and death (deaths may be `Inf`), as
#'   produced by TDA, TDAstats and ripserr.
#' @param dim The homological dimension (0 for connected components).
#' @param tmax `NULL`, or a positive number where the functions are cut off.
#' @return A `pcf`. A diagram without bars of dimension `dim` gives the zero
#'   function.
#' @examples
#' diagram <- cbind(dimension = c(0, 0, 0, 1), birth = c(0, 0, 0, 0.4),
#'                  death = c(0.3, 0.5, Inf, 0.9))
#' pcf_betti(diagram, 0)
#' pcf_stable_rank(diagram, 0)
#' pcf_accumulated_persistence(diagram, 1)
#' pcf_betti(diagram, 0, tmax = 1)
#' @export
pcf_betti <- function(diagram, dim, tmax = NULL) {
  bars <- pcf_diagram_bars(diagram, dim)
  b <- bars$birth
  d <- bars$death
  t <- sort(unique(c(b, d[is.finite(d)])))
  v <- findInterval(t, sort(b)) - findInterval(t, sort(d))
  pcf_from_steps(t, v, tmax)
}

#' @rdname pcf_betti
#' @export
pcf_stable_rank <- function(diagram, dim, tmax = NULL) {
  bars <- pcf_diagram_bars(diagram, dim)
  len <- bars$death - bars$birth
  if (!length(len)) return(pcf_from_steps(numeric(), numeric(), tmax))
  t <- sort(unique(c(0, len[is.finite(len)])))
  v <- length(len) - findInterval(t, sort(len))
  pcf_from_steps(t, v, tmax)
}

#' @rdname pcf_betti
#' @export
pcf_accumulated_persistence <- function(diagram, dim, tmax = NULL) {
  bars <- pcf_diagram_bars(diagram, dim)
  keep <- is.finite(bars$death)
  age <- (bars$birth[keep] + bars$death[keep]) / 2
  persistence <- (bars$death - bars$birth)[keep]
  t <- sort(unique(age))
  v <- vapply(t, function(s) sum(persistence[age <= s]), 0)
  pcf_from_steps(t, v, tmax)
}

# Bars of one dimension with positive length, checked.
pcf_diagram_bars <- function(diagram, dim) {
  if (inherits(diagram, "diagram")) diagram <- unclass(diagram)
  if (is.data.frame(diagram)) {
    if (ncol(diagram) < 3L || !all(vapply(diagram[1:3], is.numeric, NA))) {
      stop("`diagram` must have numeric columns dimension, birth, death", call. = FALSE)
    }
    diagram <- as.matrix(diagram[1:3])
  }
  if (!is.matrix(diagram) || !is.numeric(diagram) || ncol(diagram) < 3L) {
    stop("`diagram` must be a matrix or data frame with columns dimension, birth, death",
         call. = FALSE)
  }
  gk_check_scalar(dim, "dim", lower = 0, integer = TRUE)
  if (anyNA(diagram[, 1])) {
    stop("`diagram` has NA in its dimension column (the first)", call. = FALSE)
  }
  diagram <- diagram[diagram[, 1] == dim, 2:3, drop = FALSE]
  b <- diagram[, 1]
  d <- diagram[, 2]
  if (anyNA(b) || anyNA(d)) stop("`diagram` contains NA births or deaths", call. = FALSE)
  if (any(!is.finite(b)) || any(b < 0)) {
    stop("`diagram` births must be finite and >= 0", call. = FALSE)
  }
  if (any(d < b)) stop("`diagram` has a bar that dies before it is born", call. = FALSE)
  keep <- d > b
  list(birth = b[keep], death = d[keep])
}

# A pcf from step values, without repeated values, cut at tmax.
pcf_from_steps <- function(t, v, tmax) {
  if (!is.null(tmax)) {
    gk_check_scalar(tmax, "tmax", lower = 0, lower_open = TRUE)
    keep <- t < tmax
    t <- c(t[keep], tmax)
    v <- c(v[keep], 0)
  }
  if (!length(t)) return(pcf(0, 0))
  keep <- c(TRUE, diff(v) != 0)
  pcf(t[keep], v[keep])
}
