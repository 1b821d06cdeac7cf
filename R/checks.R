# Argument checks shared by every engine. Each stops with a message that names
# the argument as the user wrote it.

# A numeric matrix of points (rows = points), finite, as double. A numeric
# vector is one column (n points in one dimension); a data frame must be numeric.
gk_check_points <- function(x, arg = deparse(substitute(x)), allow_empty = FALSE) {
  if (is.data.frame(x)) {
    if (!all(vapply(x, is.numeric, logical(1)))) {
      stop("`", arg, "` must have numeric columns only", call. = FALSE)
    }
    x <- as.matrix(x)
  }
  if (is.numeric(x) && is.null(dim(x))) x <- matrix(x, ncol = 1L)
  if (!is.matrix(x) || !(is.numeric(x) || is.logical(x) && all(is.na(x)))) {
    stop("`", arg, "` must be a numeric matrix (one row per point), not ", gk_describe(x),
         call. = FALSE)
  }
  if (!allow_empty && (nrow(x) == 0L || ncol(x) == 0L)) {
    stop("`", arg, "` is empty (", nrow(x), " x ", ncol(x), "); it needs at least one point",
         call. = FALSE)
  }
  storage.mode(x) <- "double"
  .Call(gk_r_check_finite, x, arg)   # NA, NaN and Inf, in one pass without copies
  x
}

gk_check_same_dim <- function(x, y, arg_x = "x", arg_y = "y") {
  if (ncol(x) != ncol(y)) {
    stop("`", arg_x, "` has ", ncol(x), " columns but `", arg_y, "` has ", ncol(y),
         ": points must have the same dimension", call. = FALSE)
  }
  invisible(TRUE)
}

gk_check_precision <- function(precision) {
  if (!is.character(precision) || length(precision) != 1L ||
      !precision %in% c("double", "single")) {
    stop("`precision` must be \"double\" or \"single\"", call. = FALSE)
  }
  precision
}

gk_check_scalar <- function(x, arg, lower = -Inf, lower_open = FALSE, integer = FALSE) {
  ok <- is.numeric(x) && length(x) == 1L && !is.na(x) && is.finite(x) &&
    (if (lower_open) x > lower else x >= lower) && (!integer || x == round(x))
  if (!ok) {
    what <- if (integer) "a whole number" else "a number"
    bound <- if (is.finite(lower)) paste0(if (lower_open) " > " else " >= ", lower) else ""
    stop("`", arg, "` must be ", what, bound, call. = FALSE)
  }
  x
}

# match.arg() for the engines' hot paths: the same rule (the first choice when
# the argument is left at its default vector, else one exact choice) at a
# fraction of the cost, which matters for calls that take microseconds.
gk_match_choice <- function(arg, choices, name) {
  if (identical(arg, choices)) return(choices[[1L]])
  if (!is.character(arg) || length(arg) != 1L || is.na(arg) || !(arg %in% choices)) {
    stop("`", name, "` must be one of ", paste0("\"", choices, "\"", collapse = ", "),
         call. = FALSE)
  }
  arg
}

# What an argument is, for messages: "a character matrix", "a list", "NULL".
gk_describe <- function(x) {
  if (is.null(x)) return("NULL")
  what <- if (is.matrix(x)) paste(typeof(x), "matrix") else if (is.atomic(x))
    paste(typeof(x), "vector") else class(x)[1L]
  paste(if (grepl("^[aeiou]", what)) "an" else "a", what)
}

# A whole number for a count passed to C as an int: finite, in [lower, upper].
gk_check_count <- function(x, what, lower, upper) {
  if (!is.numeric(x) || length(x) != 1L || is.na(x) || !is.finite(x) || x != round(x) ||
      x < lower || x > upper) {
    stop(what, " must be a single whole number from ", lower, " to ",
         format(upper, scientific = FALSE), call. = FALSE)
  }
  as.integer(x)
}

# gp_fit()'s locations: a fit needs at least two distinct points (the range
# is started from their spread, which is 0 or undefined otherwise).
gp_check_fit_locs <- function(locs, arg = "locs") {
  n <- nrow(locs)
  if (n < 2L) {
    stop("`", arg, "` has ", n, " point: gp_fit() needs at least 2 distinct locations",
         call. = FALSE)
  }
  if (all(vapply(seq_len(ncol(locs)), function(k) {
    v <- locs[, k]
    all(v == v[1L])
  }, logical(1)))) {
    stop("all ", n, " points of `", arg, "` are the same location: gp_fit() needs at least 2 ",
         "distinct locations to estimate the range", call. = FALSE)
  }
  invisible(locs)
}

# A gp_fit object as predict() and friends read it: `alpha` has one value per
# location (an edited fit would otherwise fail inside the engines).
gp_check_fit_object <- function(object, arg = "object") {
  n <- NROW(object$locs)
  if (!is.matrix(object$locs) || !is.numeric(object$locs) || n == 0L) {
    stop("`", arg, "` is not a valid gp_fit (edited by hand?): its `locs` must be the ",
         "matrix of locations; fit it again with gp_fit()", call. = FALSE)
  }
  a <- object$alpha
  if (!is.numeric(a) || NROW(a) != n || (is.matrix(a) && ncol(a) != 1L) || anyNA(a) ||
      any(!is.finite(a))) {
    stop("`", arg, "` is not a valid gp_fit (edited by hand?): its `alpha` must hold ", n,
         " finite numbers, one per location, not ", gk_describe(a), " of length ", length(a),
         "; fit it again with gp_fit()", call. = FALSE)
  }
  b <- object$beta
  if (NCOL(object$X) > 0L && (!is.numeric(b) || length(b) != NCOL(object$X))) {
    stop("`", arg, "` is not a valid gp_fit (edited by hand?): its `beta` must hold ",
         NCOL(object$X), " numbers; fit it again with gp_fit()", call. = FALSE)
  }
  invisible(object)
}
