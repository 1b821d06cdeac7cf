#' Kernels written as formulas
#'
#' `gk_formula()` turns an R expression in the points `x` and `y` and scalar
#' parameters into a kernel \eqn{F(x, y)} that [kernel_reduce()],
#' [kernel_matvec()] and the `"kmin"` reduction take wherever they take a
#' [gk_kernel()], and whose gradients [kernel_grad()] computes. The expression
#' is translated to C once: on the GPU it becomes the value function of the
#' package's own tile kernels, compiled by NVRTC the first time it is used and
#' cached as the built-in kernels are ([gk_cache_info()]); on the CPU it is
#' compiled by the C compiler R uses (`R CMD SHLIB`, once per formula and
#' dimension, kept in the same cache directory) and runs in the same
#' multi-threaded loops as the built-in kernels.
#'
#' @section Variables:
#' \describe{
#'   \item{`x`, `y`}{the two points, vectors of their `d` coordinates:
#'     `sqdist(x, y)`, `dot(x, y)`, `x - y`, `sum(abs(x - y))`.}
#'   \item{`x[k]`, `y[k]`, `xk`, `yk`}{coordinate `k` (from 1): `x[3]` and `x3`
#'     are the same; `x[1:2]` is the sub-vector of the first two.}
#'   \item{`<name>_x`, `<name>_y`}{coordinates by name, when `coords` names
#'     them (e.g. `coords = c("s1", "s2", "t")` gives `t_x` and `t_y`).}
#'   \item{parameters}{every other name: each must be given in `...` as one
#'     number. They can change between calls without compiling again
#'     (except once per sign: a formula of one squared distance, each
#'     occurrence times parameters, runs on points scaled per call, as the
#'     built-in gaussian does, with one body for each sign of that factor).}
#' }
#' The weights `b` of a reduction multiply the formula's values
#' (\eqn{a_i = \sum_j F(x_i, y_j) b_j}); the formula itself does not name them.
#'
#' @section Functions:
#' Arithmetic (`+ - * / ^`), `exp`, `log` (one argument), `sqrt`, `abs`,
#' `sin`, `cos`, `tan`, `asin`, `acos`, `atan`, `sinh`, `cosh`, `tanh`,
#' `log1p`, `expm1`, `log2`, `log10`, `pnorm`, `dnorm` (one argument),
#' `sign`, `floor`, `ceiling`, comparisons and `&`, `|`, `!`,
#' `ifelse(test, yes, no)`, `pmin` and `pmax` (elementwise, two arguments),
#' `min` and `max` (of a vector, or of two values), the constant `pi`; on
#' vectors `sum()`, `sqdist(u, v)` (squared Euclidean distance), `dot(u, v)`,
#' `sqnorm(u)` and `norm(u)` (Euclidean). Functions of vectors apply
#' elementwise, and the result must be one number.
#'
#' @param expr The formula, unevaluated (or a one-sided formula `~ expr`, or a
#'   quoted expression).
#' @param ... The parameters, by name: one finite number each (`NA`: none yet,
#'   for a parameter [gp_fit()] estimates from its `start`).
#' @param coords Optional names of the coordinates, for `<name>_x` and
#'   `<name>_y` in `expr`.
#' @return An object of class `gk_formula`.
#' @seealso [kernel_reduce()], [kernel_grad()].
#' @examples
#' # a separable space-time kernel: gaussian in space, periodic in time
#' k <- gk_formula(exp(-sqdist(x[1:2], y[1:2]) / (2 * s^2)) *
#'                   (1 + cos(2 * pi * abs(t_x - t_y) / p)),
#'                 s = 0.1, p = 1, coords = c("u", "v", "t"))
#' k
#' \dontrun{
#' pts <- matrix(runif(300), 100, 3)
#' kernel_matvec(pts, pts, rnorm(100), kernel = k)   # compiles once, then cached
#' }
#' @export
gk_formula <- function(expr, ..., coords = NULL) {
  e <- substitute(expr)
  if (is.call(e) && identical(e[[1L]], as.name("quote"))) e <- e[[2L]]
  if (is.call(e) && identical(e[[1L]], as.name("~"))) {
    if (length(e) != 2L) stop("gk_formula: give a one-sided formula `~ expr`", call. = FALSE)
    e <- e[[2L]]
  }
  if (!is.language(e) && !is.numeric(e)) {
    stop("gk_formula: `expr` must be an R expression such as exp(-sqdist(x, y))", call. = FALSE)
  }
  params <- list(...)
  if (length(params) && (is.null(names(params)) || any(!nzchar(names(params))))) {
    stop("gk_formula: give every parameter by name (e.g. s = 0.1)", call. = FALSE)
  }
  if (!is.null(coords)) {
    if (!is.character(coords) || anyNA(coords) || !length(coords) ||
        any(!grepl("^[A-Za-z.][A-Za-z0-9._]*$", coords)) || anyDuplicated(coords)) {
      stop("gk_formula: `coords` must be distinct names (letters, digits, dots, underscores)",
           call. = FALSE)
    }
  }
  # key: what the prepared bodies are found by (gk_formula_native), made once
  key <- paste(c(deparse(e, width.cutoff = 500L), "|", coords, "|", names(params)), collapse = " ")
  f <- structure(list(expr = e, params = list(), coords = coords, key = key), class = "gk_formula")
  f <- gk_formula_set(f, params)
  gk_formula_check(f)
  f
}

# The names a formula gives meaning to itself.
gk_formula_reserved <- function(name, coords) {
  name %in% c("x", "y", "b", "pi") || grepl("^[xy][0-9]+$", name) ||
    (!is.null(coords) && name %in% c(paste0(coords, "_x"), paste0(coords, "_y")))
}

# Sets (and checks) parameter values: all of them at creation, some later
# (kernel_grad(), the GP). Returns the formula.
gk_formula_set <- function(f, params) {
  for (name in names(params)) {
    v <- params[[name]]
    if (startsWith(name, ".")) {
      stop("gk_formula: parameter names may not start with a dot (`", name, "`)", call. = FALSE)
    }
    if (gk_formula_reserved(name, f$coords)) {
      stop("gk_formula: `", name, "` names a point or coordinate, not a parameter",
           call. = FALSE)
    }
    # NA: no value yet (a starting value for gp_fit() to come from `start`)
    if (!(is.numeric(v) || identical(v, NA)) || length(v) != 1L ||
        !(is.finite(v) || (is.na(v) && !is.nan(v)))) {
      stop("gk_formula: parameter `", name, "` must be one finite number (or NA)", call. = FALSE)
    }
    f$params[[name]] <- as.double(v)
  }
  if (length(f$params) > 16L) {
    stop("gk_formula: at most 16 parameters", call. = FALSE)
  }
  f
}

#' @export
print.gk_formula <- function(x, ...) {
  cat("<gk_formula> ", paste(deparse(x$expr, width.cutoff = 80L), collapse = "\n  "), "\n",
      sep = "")
  if (length(x$params)) {
    cat("  parameters: ", paste(names(x$params), "=", format(unlist(x$params)), collapse = ", "),
        "\n", sep = "")
  }
  if (!is.null(x$coords)) cat("  coordinates: ", paste(x$coords, collapse = ", "), "\n", sep = "")
  invisible(x)
}

# Functions of one number that apply elementwise, with their C names; the
# rest of the vocabulary (operators, ifelse, pmin, ...) is in gk_formula_expand.
gk_formula_unary <- c(exp = "exp", log = "log", sqrt = "sqrt", abs = "fabs", sin = "sin",
                      cos = "cos", tan = "tan", asin = "asin", acos = "acos", atan = "atan",
                      sinh = "sinh", cosh = "cosh", tanh = "tanh", log1p = "log1p",
                      expm1 = "expm1", log2 = "log2", log10 = "log10", sign = "gk_sign",
                      floor = "floor", ceiling = "ceil", pnorm = "gk_pnorm", dnorm = "gk_dnorm")
gk_formula_binary <- c("+", "-", "*", "/", "^", "<", ">", "<=", ">=", "==", "!=", "&", "|",
                       "&&", "||", "pmin", "pmax")

# Checks the names of a formula without a dimension: every symbol is a point,
# a coordinate or a given parameter, every function known. Errors name the
# offending part.
gk_formula_check <- function(f) {
  gk_formula_expand(f, NA_integer_)
  invisible(f)
}

gk_formula_error <- function(f, part, ...) {
  stop("gk_formula: in `", paste(deparse(part, width.cutoff = 60L), collapse = " "), "`: ",
       ..., call. = FALSE)
}

# The formula for points of `dim` coordinates as one scalar R expression over
# the symbols x1..xd, y1..yd and the parameters: vector operations written
# out coordinate by coordinate. With dim = NA only the names are checked.
gk_formula_expand <- function(f, dim) {
  check_only <- is.na(dim)
  coords <- f$coords
  point <- function(side, part) {
    if (check_only) return(list(as.name(paste0(side, "1"))))
    lapply(seq_len(dim), function(k) as.name(paste0(side, k)))
  }
  coordinate <- function(side, k, part) {
    if (!check_only && k > dim) {
      gk_formula_error(f, part, "coordinate ", k, " of points with ", dim, " coordinates")
    }
    as.name(paste0(side, k))
  }
  constant_index <- function(e, part) {
    idx <- tryCatch(eval(e, baseenv()), error = function(err) NULL)
    if (!is.numeric(idx) || !length(idx) || anyNA(idx) || any(idx < 1) || any(idx != round(idx))) {
      gk_formula_error(f, part, "coordinates are chosen by constant whole numbers from 1, such as ",
                       "x[2] or x[1:2]")
    }
    as.integer(idx)
  }
  scalar <- function(v, part, what) {
    if (length(v) != 1L) gk_formula_error(f, part, what, " takes single numbers, not vectors")
    v[[1L]]
  }
  elementwise <- function(fun, args, part) {
    lens <- lengths(args)
    len <- max(lens)
    # Without a dimension the lengths are not known yet: only names are checked.
    if (!check_only && any(lens != 1L & lens != len)) {
      gk_formula_error(f, part, "vectors of different lengths (", paste(lens, collapse = " and "), ")")
    }
    lapply(seq_len(len), function(k) {
      as.call(c(list(as.name(fun)), lapply(args, function(a) a[[min(k, length(a))]])))
    })
  }
  sum_of <- function(v) Reduce(function(a, b) call("+", a, b), v)
  # parent: the call around e, which errors about a name quote for context.
  walk <- function(e, parent = NULL) {
    if (is.numeric(e) || is.logical(e)) {
      if (length(e) != 1L || is.na(e)) gk_formula_error(f, e, "constants must be single numbers")
      return(list(as.double(e)))
    }
    if (is.name(e)) {
      where <- if (is.null(parent)) e else parent
      name <- as.character(e)
      if (name %in% c("x", "y")) return(point(name, e))
      if (grepl("^[xy][0-9]+$", name)) {
        return(list(coordinate(substr(name, 1L, 1L), as.integer(substring(name, 2L)), where)))
      }
      if (name == "pi") return(list(pi))
      if (name == "b") {
        gk_formula_error(f, where, "`b` is not a formula variable: the reduction's weights b ",
                         "multiply the formula's values")
      }
      if (!is.null(coords) && grepl("_[xy]$", name)) {
        k <- match(sub("_[xy]$", "", name), coords)
        if (!is.na(k)) return(list(coordinate(substring(name, nchar(name)), k, where)))
      }
      if (name %in% names(f$params)) return(list(e))
      gk_formula_error(f, where, "`", name, "` is neither a point (x, y), a coordinate (x1, y[2]",
                       if (!is.null(coords)) ", name_x", ") nor a parameter given to gk_formula()")
    }
    if (!is.call(e) || !is.name(e[[1L]])) gk_formula_error(f, e, "not a formula term")
    fun <- as.character(e[[1L]])
    args <- as.list(e)[-1L]
    if (!is.null(names(args)) && any(nzchar(names(args)))) {
      gk_formula_error(f, e, "give the arguments of ", fun, "() by position")
    }
    nargs <- length(args)
    need <- function(count) {
      if (nargs != count) gk_formula_error(f, e, fun, "() takes ", count, " argument",
                                           if (count > 1L) "s")
    }
    if (fun == "(") return(walk(args[[1L]], parent))
    if (fun == "[") {
      need(2L)
      side <- args[[1L]]
      if (!is.name(side) || !as.character(side) %in% c("x", "y")) {
        gk_formula_error(f, e, "only the points x and y can be indexed")
      }
      return(lapply(constant_index(args[[2L]], e), function(k) coordinate(as.character(side), k, e)))
    }
    vals <- lapply(args, walk, parent = e)
    if (fun %in% names(gk_formula_unary)) {
      need(1L)
      return(elementwise(fun, vals, e))
    }
    if (fun %in% c("+", "-") && nargs == 1L) return(elementwise(fun, vals, e))
    if (fun == "!") {
      need(1L)
      return(elementwise(fun, vals, e))
    }
    if (fun %in% gk_formula_binary) {
      need(2L)
      return(elementwise(fun, vals, e))
    }
    switch(fun,
      ifelse = {
        need(3L)
        elementwise(fun, vals, e)
      },
      sum = {
        need(1L)
        list(sum_of(vals[[1L]]))
      },
      sqdist = {
        need(2L)
        list(sum_of(lapply(elementwise("-", vals, e), function(d) call("^", d, 2))))
      },
      dot = {
        need(2L)
        list(sum_of(elementwise("*", vals, e)))
      },
      sqnorm = {
        need(1L)
        list(sum_of(lapply(vals[[1L]], function(d) call("^", d, 2))))
      },
      norm = {
        need(1L)
        list(call("sqrt", sum_of(lapply(vals[[1L]], function(d) call("^", d, 2)))))
      },
      min = , max = {
        op <- if (fun == "min") "pmin" else "pmax"
        v <- if (nargs == 1L) vals[[1L]] else {
          need(2L)
          list(scalar(vals[[1L]], e, fun), scalar(vals[[2L]], e, fun))
        }
        list(Reduce(function(a, b) call(op, a, b), v))
      },
      gk_formula_error(f, e, "unknown function ", fun, "() (see ?gk_formula for the functions ",
                       "a formula may use)"))
  }
  out <- walk(f$expr)
  if (length(out) != 1L && !check_only) {
    gk_formula_error(f, f$expr, "the formula gives a vector of ", length(out),
                     " values; it must give one number (use sum(), sqdist(), dot(), ...)")
  }
  out[[1L]]
}
