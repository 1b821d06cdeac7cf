# Scale folding: a formula whose points occur only through one squared
# distance S = sum_k (x_k - y_k)^2 (the same k in every occurrence), each
# occurrence of S or sqrt(S) multiplied by a parameter (or an expression of
# parameters), is evaluated on points scaled by a per-call factor c, so that
# one of those products becomes S' = c^2 S itself (sign included) and the
# others take c into their parameters. The built-in gaussian does the same
# (its points are pre-scaled; reduce_kernels.cuh, ValGauss2): a multiply per
# pair becomes a multiply per coordinate and call. Such a formula depends on
# differences only, so the engines may also shift the points to a common
# point of the data before scaling (as they do for the built-in kernels).
#
# The sign of the product that becomes +-S' is that of a parameter
# expression, known per call only: each sign has its own body (compiled when
# first used), and a zero or a scale out of range takes the unfolded body.

# The coordinates k of e when e is a sum of (x_k - y_k)^2 (or (y_k - x_k)^2),
# each k once; NULL otherwise.
gk_formula_sq_terms <- function(e) {
  if (!is.call(e)) return(NULL)
  f <- as.character(e[[1L]])
  if (f == "+" && length(e) == 3L) {
    a <- gk_formula_sq_terms(e[[2L]])
    b <- if (!is.null(a)) gk_formula_sq_terms(e[[3L]])
    if (is.null(b) || any(a %in% b)) return(NULL)
    return(c(a, b))
  }
  if (f != "^" || !identical(e[[3L]], 2) || !is.call(e[[2L]])) return(NULL)
  d <- e[[2L]]
  if (!identical(d[[1L]], as.name("-")) || length(d) != 3L || !is.name(d[[2L]]) ||
      !is.name(d[[3L]])) {
    return(NULL)
  }
  u <- as.character(d[[2L]])
  v <- as.character(d[[3L]])
  if (!gk_formula_is_coord(u) || !gk_formula_is_coord(v)) return(NULL)
  k <- substring(u, 2L)
  sides <- paste0(substr(u, 1L, 1L), substr(v, 1L, 1L))
  if (k != substring(v, 2L) || !sides %in% c("xy", "yx")) return(NULL)
  as.integer(k)
}

# Whether e is provably >= 0 (1), <= 0 (-1), or neither known (0), for any
# values of the points and parameters (NaN aside). A gk_exp2 of an argument
# <= 0 cannot overflow (gk_formula.h's gk_exp2_nonpos).
gk_formula_sign <- function(e) {
  if (is.numeric(e)) return(if (is.na(e)) 0 else if (e >= 0) 1 else -1)
  if (!is.call(e)) return(0)
  f <- as.character(e[[1L]])
  s <- function(i) gk_formula_sign(e[[i + 1L]])
  n <- length(e) - 1L
  if (f == "(") return(s(1L))
  if (f %in% c("sqrt", "abs", ".gk_exp2", "exp")) return(1)
  if (f == "-" && n == 1L) return(-s(1L))
  if (f == "^" && is.numeric(e[[3L]]) && e[[3L]] %% 2 == 0) return(1)
  if (f == "^" && s(1L) == 1) return(1)
  if (n != 2L) return(0)
  a <- s(1L)
  b <- s(2L)
  if (f == "+" && a == b) return(a)
  if (f == "-" && a == -b) return(a)
  if (f %in% c("*", "/")) return(a * b)
  0
}

# The per-pair cost of an optimized body, for the decision to fold: its
# distinct operations, a negation free (an operand modifier), a gk_exp2 of
# an argument that may be positive one more (its overflow test).
gk_formula_cost <- function(e) {
  seen <- new.env(hash = TRUE, parent = emptyenv())
  walk <- function(e) {
    if (!is.call(e)) return(0)
    key <- paste(deparse(e, width.cutoff = 500L), collapse = "")
    if (!is.null(seen[[key]])) return(0)
    seen[[key]] <- TRUE
    f <- as.character(e[[1L]])
    own <- if (f == "(" || (f == "-" && length(e) == 2L)) 0
      else if (f == ".gk_exp2" && gk_formula_sign(e[[2L]]) != -1) 2 else 1
    own + sum(vapply(as.list(e)[-1L], walk, 0))
  }
  walk(e)
}

# The folding of an optimized formula (gk_formula_optimize()): NULL when the
# formula does not qualify or folding saves nothing, else list(anchor =
# the parameter expression whose sign picks the body, scale = the expression
# of c, neg, pos = the optimized bodies on the scaled points for each sign).
gk_formula_fold <- function(opt) {
  ks <- NULL
  same <- TRUE
  mark <- function(e) {   # S -> .S
    if (!is.call(e)) return(e)
    k <- gk_formula_sq_terms(e)
    if (!is.null(k)) {
      k <- sort(k)
      if (is.null(ks)) ks <<- k else if (!identical(ks, k)) same <<- FALSE
      return(as.name(".S"))
    }
    for (i in seq_along(e)[-1L]) e[[i]] <- mark(e[[i]])
    e
  }
  marked <- mark(opt$expr)
  if (is.null(ks) || !same || gk_formula_varies(marked)) return(NULL)
  S <- as.name(".S")
  root_S <- call("sqrt", S)
  anchor <- NULL
  # q * S or q * sqrt(S), q a name of parameters; first inside an exponential
  find <- function(e, in_exp) {
    if (!is.null(anchor) || !is.call(e)) return(invisible())
    if (in_exp && identical(e[[1L]], as.name("*")) && length(e) == 3L && is.name(e[[2L]]) &&
        !identical(e[[2L]], S) && (identical(e[[3L]], S) || identical(e[[3L]], root_S))) {
      anchor <<- e
      return(invisible())
    }
    inside <- in_exp || identical(e[[1L]], as.name(".gk_exp2"))
    for (i in seq_along(e)[-1L]) find(e[[i]], inside)
  }
  find(marked, FALSE)
  if (is.null(anchor)) find(marked, TRUE)
  if (is.null(anchor)) return(NULL)
  root <- identical(anchor[[3L]], root_S)
  q <- anchor[[2L]]
  q_expr <- if (is.null(opt$derived[[as.character(q)]])) q else opt$derived[[as.character(q)]]
  # c and 1 / c^2: S' = c^2 S is -q S (or its square root -q sqrt(S)) up to the sign
  scale <- if (root) call("abs", q_expr) else call("sqrt", call("abs", q_expr))
  inv_c2 <- if (root) call("/", 1, call("^", q_expr, 2)) else call("/", 1, call("abs", q_expr))
  inv_c <- if (root) call("/", 1, call("abs", q_expr)) else call("/", 1, scale)
  scaled <- Reduce(function(a, b) call("+", a, b),
                   lapply(ks, function(k) call("^", call("-", as.name(paste0("x", k)),
                                                         as.name(paste0("y", k))), 2)))
  T <- as.name(".T")
  body <- function(sign) {
    at_anchor <- if (root) call("sqrt", T) else T
    if (sign < 0) at_anchor <- call("-", at_anchor)
    swap <- function(e) {
      if (identical(e, anchor)) return(at_anchor)
      if (identical(e, root_S)) return(call("*", inv_c, call("sqrt", T)))
      if (identical(e, S)) return(call("*", inv_c2, T))
      if (!is.call(e)) return(e)
      for (i in seq_along(e)[-1L]) e[[i]] <- swap(e[[i]])
      e
    }
    e <- do.call("substitute", list(swap(marked), c(opt$derived, list(.T = scaled))))
    gk_formula_optimize(e)
  }
  neg <- body(-1)
  if (gk_formula_cost(neg$expr) >= gk_formula_cost(opt$expr)) return(NULL)
  list(anchor = q_expr, scale = scale, neg = neg, pos = body(1))
}
