# From a formula's scalar expression (gk_formula_expand) to the one C body
# both engines compile (inst/include/gpukernels/gk_formula.h), and its
# derivatives by R's D().

# Functions D() does not differentiate, by the chain rule below; those whose
# derivative is 0 wherever it exists are in the second list.
gk_formula_piecewise <- c("abs", "pmin", "pmax", "ifelse")
gk_formula_flat <- c("sign", "floor", "ceiling", "<", ">", "<=", ">=", "==", "!=", "&", "|",
                     "&&", "||", "!")

# d e / d v for a scalar expression e and a symbol name v: D() on e with every
# call D() does not know replaced by a placeholder h, plus dE/dh times the
# derivative of the call (abs(u)' = sign(u) u', pmin(a, b)' = ifelse(a <= b,
# a', b'), ifelse(c, a, b)' = ifelse(c, a', b'), 0 for step functions).
gk_formula_deriv <- function(e, v) {
  holes <- list()
  punch <- function(e) {
    if (!is.call(e)) return(e)
    fun <- as.character(e[[1L]])
    if (fun %in% c(gk_formula_piecewise, gk_formula_flat)) {
      name <- paste0(".h", length(holes) + 1L)
      holes[[name]] <<- e
      return(as.name(name))
    }
    for (i in seq_along(e)[-1L]) e[[i]] <- punch(e[[i]])
    e
  }
  punched <- punch(e)
  d <- stats::D(punched, v)
  for (name in names(holes)) {
    h <- holes[[name]]
    fun <- as.character(h[[1L]])
    dh <- switch(fun,
      abs = call("*", call("sign", h[[2L]]), gk_formula_deriv(h[[2L]], v)),
      pmin = call("ifelse", call("<=", h[[2L]], h[[3L]]), gk_formula_deriv(h[[2L]], v),
                  gk_formula_deriv(h[[3L]], v)),
      pmax = call("ifelse", call(">=", h[[2L]], h[[3L]]), gk_formula_deriv(h[[2L]], v),
                  gk_formula_deriv(h[[3L]], v)),
      ifelse = call("ifelse", h[[2L]], gk_formula_deriv(h[[3L]], v), gk_formula_deriv(h[[4L]], v)),
      0)
    if (!identical(dh, 0)) d <- call("+", d, call("*", stats::D(punched, name), dh))
  }
  do.call("substitute", list(d, holes))
}

# x_k <-> y_k: F(y, x), what the transposed reduction evaluates.
gk_formula_swap <- function(e, dim) {
  k <- seq_len(dim)
  map <- c(lapply(paste0("y", k), as.name), lapply(paste0("x", k), as.name))
  names(map) <- c(paste0("x", k), paste0("y", k))
  do.call("substitute", list(e, map))
}

gk_formula_is_coord <- function(name) grepl("^[xy][0-9]+$", name)

# Whether e depends on the points.
gk_formula_varies <- function(e) any(gk_formula_is_coord(all.vars(e)))

gk_formula_log2e <- 1 / log(2)

# The values of derived parameters (expressions of parameters alone), for
# the engine's unit of gk_exp2 (gk_formula.h: 64 for the GPU in double, else 1).
gk_formula_eval_env <- function(params, unit = 1) {
  env <- list2env(params, parent = baseenv())
  env$.unit <- unit
  env$.gk_exp2 <- function(u) 2^(u / unit)
  env$dnorm <- stats::dnorm
  env$pnorm <- stats::pnorm
  env
}

# Rewrites for speed that keep the value to rounding:
#  - exp(v) as gk_exp2(v log2(e) unit) (2^(u / unit), the engine's fast
#    exponential; `.unit`, the engine's, is a parameter R sets per call);
#  - a chain of products, quotients and signs as (its constant factors) times
#    (its varying ones), so that constants meet once;
#  - every expression of parameters alone becomes a derived parameter,
#    computed once per call in R (no division by 2 s^2 per pair).
# Returns list(expr, derived = named list of expressions).
gk_formula_optimize <- function(e) {
  exp2 <- function(e) {
    if (!is.call(e)) return(e)
    for (i in seq_along(e)[-1L]) e[[i]] <- exp2(e[[i]])
    if (identical(e[[1L]], as.name("exp"))) {
      e <- call(".gk_exp2", call("*", e[[2L]], call("*", gk_formula_log2e, as.name(".unit"))))
    }
    e
  }
  product <- function(e) {
    factors <- list()
    powers <- integer()
    collect <- function(e, p) {
      if (is.call(e)) {
        f <- as.character(e[[1L]])
        if (f == "(") return(collect(e[[2L]], p))
        if (f == "*" && length(e) == 3L) {
          collect(e[[2L]], p)
          return(collect(e[[3L]], p))
        }
        if (f == "/" && length(e) == 3L) {
          collect(e[[2L]], p)
          return(collect(e[[3L]], -p))
        }
        if (f == "-" && length(e) == 2L) {
          factors[[length(factors) + 1L]] <<- -1
          powers[length(factors)] <<- 1L
          return(collect(e[[2L]], p))
        }
      }
      factors[[length(factors) + 1L]] <<- fold(e)
      powers[length(factors)] <<- p
    }
    collect(e, 1L)
    varies <- vapply(factors, gk_formula_varies, NA)
    number <- 1
    constant <- NULL
    for (k in which(!varies)) {
      f <- factors[[k]]
      if (is.numeric(f)) {
        number <- if (powers[k] > 0) number * f else number / f
      } else {
        constant <- if (is.null(constant)) {
          if (powers[k] > 0) f else call("/", 1, f)
        } else call(if (powers[k] > 0) "*" else "/", constant, f)
      }
    }
    if (is.null(constant)) constant <- number
    else if (number != 1) constant <- call("*", number, constant)
    chain <- function(fs) if (length(fs)) Reduce(function(a, b) call("*", a, b), fs)
    num <- chain(factors[varies & powers > 0])
    den <- chain(factors[varies & powers < 0])
    if (is.null(num)) {
      if (is.null(den)) return(constant)
      return(call("/", constant, den))
    }
    if (!is.null(den)) num <- call("/", num, den)
    if (identical(constant, 1)) num
    else if (identical(constant, -1)) call("-", num)
    else call("*", constant, num)
  }
  fold <- function(e) {
    if (!is.call(e)) return(e)
    f <- as.character(e[[1L]])
    if (f == "(") return(fold(e[[2L]]))
    if (f %in% c("*", "/") || (f == "-" && length(e) == 2L)) return(product(e))
    for (i in seq_along(e)[-1L]) e[[i]] <- fold(e[[i]])
    e
  }
  derived <- list()
  hoist <- function(e) {
    if (is.numeric(e) || is.name(e)) return(e)
    if (!gk_formula_varies(e)) {
      if (!length(all.vars(e))) return(eval(e, gk_formula_eval_env(list())))
      key <- paste(deparse(e, width.cutoff = 500L), collapse = "")
      at <- match(key, vapply(derived, function(d) paste(deparse(d, width.cutoff = 500L), collapse = ""), ""))
      if (is.na(at)) {
        derived[[length(derived) + 1L]] <<- e
        at <- length(derived)
      }
      return(as.name(paste0(".q", at)))
    }
    for (i in seq_along(e)[-1L]) e[[i]] <- hoist(e[[i]])
    e
  }
  e <- hoist(fold(exp2(e)))
  names(derived) <- if (length(derived)) paste0(".q", seq_along(derived))
  list(expr = e, derived = derived)
}

# A double constant as C source, in the compute precision T.
gk_formula_literal <- function(v) {
  if (!is.finite(v)) stop("gk_formula: the formula has a constant ", v, call. = FALSE)
  s <- sprintf("%.17g", v)
  if (!grepl("[.eE]", s)) s <- paste0(s, ".0")
  paste0("((T) ", s, ")")
}

# The C body of a scalar expression: statements `const T t_k = ...;` (each
# distinct subexpression once) and the name of the result. `symbol` maps the
# expression's names to C names.
gk_formula_ssa <- function(e, symbol) {
  lines <- character()
  seen <- new.env(hash = TRUE, parent = emptyenv())
  temp <- function(code) {
    name <- paste0("t_", length(lines) + 1L)
    lines[length(lines) + 1L] <<- paste0("const T ", name, " = ", code, ";")
    name
  }
  power <- function(base, n) {
    if (n == 0) return(gk_formula_literal(1))
    if (n < 0) return(temp(paste0(gk_formula_literal(1), " / ", power(base, -n))))
    if (n == 1) return(base)
    half <- power(base, n %/% 2)
    sq <- temp(paste0(half, " * ", half))
    if (n %% 2 == 1) temp(paste0(sq, " * ", base)) else sq
  }
  walk <- function(e) {
    if (is.numeric(e) || is.logical(e)) return(gk_formula_literal(as.double(e)))
    if (is.name(e)) return(symbol(as.character(e)))
    key <- paste(deparse(e, width.cutoff = 500L), collapse = "")
    if (!is.null(seen[[key]])) return(seen[[key]])
    fun <- as.character(e[[1L]])
    args <- as.list(e)[-1L]
    if (fun == "(") return(walk(args[[1L]]))
    if (fun == "^" && is.numeric(args[[2L]])) {
      n <- args[[2L]]
      base <- walk(args[[1L]])
      code <- if (n == round(n) && abs(n) <= 16) power(base, n)
        else if (n == 0.5) temp(paste0("sqrt(", base, ")"))
        else if (n == -0.5) temp(paste0(gk_formula_literal(1), " / sqrt(", base, ")"))
        else temp(paste0("pow(", base, ", ", gk_formula_literal(n), ")"))
      seen[[key]] <- code
      return(code)
    }
    a <- vapply(args, walk, "")
    code <- if (fun %in% c("+", "-", "*", "/") && length(a) == 2L) {
      paste(a[1L], fun, a[2L])
    } else if (fun %in% c("+", "-")) {
      paste0(fun, a[1L])
    } else if (fun == "^") {
      paste0("pow(", a[1L], ", ", a[2L], ")")
    } else if (fun %in% c("<", ">", "<=", ">=", "==", "!=")) {
      paste0("(T) (", a[1L], " ", fun, " ", a[2L], ")")
    } else if (fun %in% c("&", "&&", "|", "||")) {
      op <- if (fun %in% c("&", "&&")) "&&" else "||"
      paste0("(T) (", a[1L], " != 0 ", op, " ", a[2L], " != 0)")
    } else if (fun == "!") {
      paste0("(T) (", a[1L], " == 0)")
    } else if (fun == "ifelse") {
      paste0(a[1L], " != 0 ? ", a[2L], " : ", a[3L])
    } else if (fun %in% c("pmin", "pmax")) {
      paste0(if (fun == "pmin") "fmin(" else "fmax(", a[1L], ", ", a[2L], ")")
    } else if (fun == ".gk_exp2") {
      # without the overflow test where the argument cannot be positive
      paste0(if (gk_formula_sign(args[[1L]]) == -1) "gk_exp2_nonpos(" else "gk_exp2(", a[1L], ")")
    } else if (fun %in% names(gk_formula_unary)) {
      paste0(gk_formula_unary[[fun]], "(", a[1L], ")")
    } else {
      stop("gk_formula: internal: no C for ", fun, "()", call. = FALSE)
    }
    name <- temp(code)
    seen[[key]] <- name
    name
  }
  result <- walk(e)
  list(lines = lines, result = result)
}

# The C body of an optimized expression (gk_formula_optimize()) over the
# coordinates of `dim`-point x and y and the parameters `pnames`: list(lines,
# result, derived, used) with the derived parameters' expressions and the C
# names the body reads.
gk_formula_code <- function(opt, pnames, dim) {
  all_params <- c(pnames, names(opt$derived))
  used <- character()
  symbol <- function(name) {
    c_name <- if (gk_formula_is_coord(name)) {
      paste0(substr(name, 1L, 1L), "_", substring(name, 2L))
    } else {
      k <- match(name, all_params)
      if (is.na(k)) stop("gk_formula: internal: unknown name ", name, call. = FALSE)
      paste0("p_", k)
    }
    used <<- union(used, c_name)
    c_name
  }
  body <- gk_formula_ssa(opt$expr, symbol)
  c(body, list(derived = opt$derived, used = used, nparams = length(all_params)))
}

# The declarations of the C names a body reads: coordinates and parameters,
# from the engine's operands (`x`, `y`, `p` are C expressions with a %d for
# the 0-based index).
gk_formula_reads <- function(used, x, y, p) {
  decl <- function(prefix, fmt) {
    names <- sort(used[startsWith(used, prefix)])
    idx <- as.integer(substring(names, 3L)) - 1L
    idx <- sort(idx)
    sprintf("  const T %s%d = %s;", prefix, idx + 1L, sprintf(fmt, idx))
  }
  c(decl("x_", x), decl("y_", y), decl("p_", p))
}

# The CPU function and the GPU functor of one body (the same statements).
gk_formula_sources <- function(code, name) {
  body <- paste0("  ", code$lines)
  cpu <- c("#include \"gpukernels/gk_formula.h\"",
           "typedef double T;",
           paste0("double ", name, "(const double *x, const double *y, const double *p)"),
           "{",
           gk_formula_reads(code$used, "x[%d]", "y[%d]", "p[%d]"),
           body, paste0("  return ", code$result, ";"), "}")
  gpu <- c("#include \"gpukernels/gk_formula.h\"",
           "namespace gkformula {",
           paste0("struct ", name, " {"),
           "  static constexpr bool INNER = false;",
           "  static constexpr bool POINTS = true;",
           "  template <typename T, int DS>",
           paste0("  __device__ __forceinline__ static T points(const T *xr, const T *xg, size_t m, ",
                  "const T *y, const gkreduce::Args &a)"),
           "  {",
           paste0("  ", gk_formula_reads(code$used, "coord<T, DS, %d>(xr, xg, m)", "y[%d]",
                                         "(T) a.params[%d]")),
           paste0("  ", body), paste0("    return ", code$result, ";"), "  }", "};", "}")
  list(cpu = paste(cpu, collapse = "\n"), gpu = paste(gpu, collapse = "\n"))
}
