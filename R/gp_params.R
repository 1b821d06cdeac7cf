# The covariance parameters of the Gaussian-process functions: their names
# and order (variance, one range per group of coordinates, nugget,
# smoothness), the groups of coordinates that share a range, checks of
# user-given values, bounds and starts, the kernel at given parameters, and
# the derivatives of the covariance in the log parameters.

# The range groups of a problem: which range each dimension uses, an integer
# vector 1..G (one per column of the locations), from `ranges` as gp_fit()
# and gp_loglik() take it: "isotropic" (one range), "per_dimension", or the
# groups themselves (e.g. c(1, 1, 2): a range for space and one for time).
gp_range_groups <- function(ranges, dim) {
  if (is.character(ranges)) {
    ranges <- gk_match_choice(ranges, c("isotropic", "per_dimension"), "ranges")
    return(if (ranges == "isotropic") rep(1L, dim) else seq_len(dim))
  }
  if (!is.numeric(ranges) || length(ranges) != dim || anyNA(ranges) ||
      any(ranges != round(ranges)) || any(ranges < 1)) {
    stop("`ranges` must be \"isotropic\", \"per_dimension\" or one group number per ",
         "column of `locs` (", dim, "), such as c(1, 1, 2)", call. = FALSE)
  }
  groups <- as.integer(ranges)
  if (!all(seq_len(max(groups)) %in% groups)) {
    stop("`ranges` must number its groups 1, 2, ... without gaps", call. = FALSE)
  }
  groups
}

# The names of the range parameters of `groups`: "range" for one group,
# else "range1", "range2", ...
gp_range_names <- function(groups) {
  G <- max(groups)
  if (G == 1L) "range" else paste0("range", seq_len(G))
}

# The kinds of parameters, in the order of the log parameters; with several
# range groups, "range" stands for range1, range2, ... (gp_range_names()).
gp_fit_params <- c("variance", "range", "nugget", "smoothness")

# The parameters of a fit with range `groups`, in the order of the log
# parameters and the gradient: variance, ranges, nugget (smoothness).
gp_fit_param_names <- function(groups, smoothness) {
  c("variance", gp_range_names(groups), "nugget", if (smoothness) "smoothness")
}

# The kind of each parameter name: range1, range2, ... are ranges.
gp_param_kind <- function(names) sub("^range[0-9]+$", "range", names)

# `x` (named values) with "range" given for every range group that it does
# not name on its own.
gp_expand_ranges <- function(x, pnames) {
  each <- grep("^range[0-9]+$", pnames, value = TRUE)
  if (!length(each) || !"range" %in% names(x)) return(x)
  rest <- setdiff(each, names(x))
  c(x[names(x) != "range"], stats::setNames(rep(x[["range"]], length(rest)), rest))
}

# Default bounds, relative to the data's scales (gp_data_scales(): s2 the
# variance of the least-squares residuals, d the mean coordinate standard
# deviation); the smoothness's are absolute (0.5 is the exponential kernel;
# beyond about 5 the data rarely tell smoothness values apart).
gp_default_lower <- c(variance = 1e-8, range = 1e-6, nugget = 1e-10, smoothness = 0.1)
gp_default_upper <- c(variance = 1e8, range = 1e6, nugget = 1e4, smoothness = 8)

# A named list or vector of parameter values on the natural scale (bounds or
# fixed values): checked, as a named double vector (NULL when empty).
gp_check_params <- function(x, what, groups, zero_nugget = FALSE) {
  known <- unique(c(gp_fit_params, gp_range_names(groups)))
  gp_check_values(x, what, known, stats::setNames(rep(TRUE, length(known)), known), zero_nugget)
}

# The same for any parameters `known`: those `positive` says (a named
# logical) must be positive (a nugget may be 0 with zero_nugget), the others
# finite or, with `infinite`, infinite (bounds of a formula parameter on its
# own scale).
gp_check_values <- function(x, what, known, positive, zero_nugget = FALSE, infinite = FALSE) {
  if (is.null(x) || !length(x)) return(NULL)
  x <- unlist(as.list(x))
  if (!is.numeric(x) || is.null(names(x)) || any(!nzchar(names(x)))) {
    stop("`", what, "` must be a named list or vector (", paste(known, collapse = ", "), ")",
         call. = FALSE)
  }
  bad <- setdiff(names(x), known)
  if (length(bad)) {
    stop("`", what, "` has unknown parameter(s) ", paste0("\"", bad, "\"", collapse = ", "),
         ": use ", paste(known, collapse = ", "), call. = FALSE)
  }
  if (anyDuplicated(names(x))) stop("`", what, "` names a parameter twice", call. = FALSE)
  for (nm in names(x)) {
    zero_ok <- zero_nugget && nm == "nugget"
    pos <- positive[[nm]]
    finite <- is.finite(x[[nm]]) || (infinite && !pos && !is.na(x[[nm]]))
    if (!finite || (pos && (x[[nm]] < 0 || (x[[nm]] == 0 && !zero_ok)))) {
      stop("`", what, "$", nm, "` must be a ", if (pos) "positive ", "finite number",
           if (zero_ok) " (or 0)" else "", call. = FALSE)
    }
  }
  storage.mode(x) <- "double"
  x
}

# The factors from the scaled parameters `pnames` to the natural ones.
gp_param_factors <- function(scales, pnames) {
  fac <- c(variance = scales$y^2, range = scales$locs, nugget = scales$y^2, smoothness = 1)
  stats::setNames(fac[gp_param_kind(pnames)], pnames)
}

# The kernel at parameters `theta` (in the order of gp_fit_param_names(),
# positions `at`): one range, or each dimension its group's.
gp_fit_kernel <- function(template, theta, at, groups, smoothness) {
  range <- theta[at$range]
  gp_kernel_with(template, theta[[at$variance]], if (length(range) == 1L) range else range[groups],
                 if (smoothness) theta[[at$smoothness]])
}

# Starting values on the scaled problem from the user's (natural) ones, with
# a `range` of one value per group (or one for all) given as range1, ...
gp_scale_start <- function(start, fac, pnames) {
  if (is.null(start)) return(NULL)
  start <- as.list(start)
  each <- grep("^range[0-9]+$", pnames, value = TRUE)
  if (length(each) && is.numeric(start$range) && length(start$range) == length(each)) {
    start[each] <- as.list(start$range)
    start$range <- NULL
  } else if (length(each) && is.numeric(start$range) && length(start$range) == 1L) {
    for (nm in setdiff(each, names(start))) start[[nm]] <- start$range
    start$range <- NULL
  }
  for (nm in intersect(names(start), pnames)) {
    if (is.numeric(start[[nm]]) && length(start[[nm]]) == 1L) start[[nm]] <- start[[nm]] / fac[[nm]]
  }
  start
}

# A gk_kernel() given to gp_fit() as its starting values: its variance and
# range (per group: the mean of the group's ranges), and the nugget of the
# default 90/10 split.
gp_kernel_start <- function(kernel, groups) {
  kernel <- as_gk_kernel(kernel)
  range <- kernel$range
  if (length(range) != 1L) {
    if (length(range) != length(groups)) {
      stop("the kernel has ", length(range), " ranges but `locs` has ", length(groups),
           " columns", call. = FALSE)
    }
    if (max(groups) == 1L && length(unique(range)) > 1L) {
      stop("gp_fit() estimates one range: give a gk_kernel() with a single range, `start`, ",
           "or `ranges = \"per_dimension\"`", call. = FALSE)
    }
    range <- vapply(split(range, groups), mean, 0)
  }
  list(variance = kernel$variance, range = unname(range), nugget = kernel$variance / 9)
}

# d k / d log(range) as a kernel of the package's vocabulary (families 16 +
# f in gk_kernel.h). The name stays the base family's so that engines that
# check names (h2_matrix) accept it; the family code selects the derivative.
# With one range per dimension it is the derivative in their common scale
# (all ranges times the same factor), -r k'(r) at the scaled distance r.
gp_dlogrange_kernel <- function(kernel) {
  kernel$family_code <- gk_kernel_dlogrange_families[[kernel$name]]
  kernel$derivative <- "log_range"
  kernel
}

# Step in log(parameter) of the central differences that give the
# derivatives of Sigma in log(smoothness) and in the log of a group of
# ranges: truncation error ~ h^2 / 6 ~ 2e-9 (relative), rounding ~ 1e-16 / h
# ~ 1e-12 (kernels evaluated in double precision).
gp_difference_step <- 1e-4

# The derivatives of Sigma in the log parameters other than the variance and
# the nugget (those are K and nugget * I), each a weighted sum of kernels, in
# the order ranges, smoothness. `groups` (NULL: one group, or one per
# dimension when the kernel has a range per dimension) says which ranges move
# together. d / dlog(range) of one group for all dimensions is a kernel of
# its own (families 16 + f); that of a group of dimensions has no kernel of
# the vocabulary (it weighs the pairs by their scaled distance along those
# dimensions), nor has d / dlog(smoothness) of a Matern kernel: both are
# central differences of two kernels. Every term vanishes on the diagonal
# (k(0) is the variance for every range and smoothness), which the Vecchia
# factor's trace(G D G') relies on.
gp_derivative_terms <- function(kernel, smoothness = FALSE, groups = NULL) {
  if (inherits(kernel, "gk_formula")) return(gp_formula_terms(kernel))   # gp_formula.R
  if (is.null(groups)) groups <- seq_along(kernel$range)
  h <- gp_difference_step
  difference <- function(up, down) list(kernels = list(up, down), weights = c(1, -1) / (2 * h))
  if (max(groups) == 1L) {
    terms <- list(log_range = list(kernels = list(gp_dlogrange_kernel(kernel)), weights = 1))
  } else {
    range <- rep_len(kernel$range, length(groups))
    terms <- lapply(seq_len(max(groups)), function(g) {
      up <- down <- kernel
      up$range <- ifelse(groups == g, range * exp(h), range)
      down$range <- ifelse(groups == g, range * exp(-h), range)
      difference(up, down)
    })
    names(terms) <- paste0("log_", gp_range_names(groups))
  }
  if (smoothness) {
    if (kernel$name != "matern") {
      stop("the smoothness can be estimated for the matern kernel only", call. = FALSE)
    }
    up <- down <- kernel
    up$smoothness <- kernel$smoothness * exp(h)
    down$smoothness <- kernel$smoothness * exp(-h)
    terms$log_smoothness <- difference(up, down)
  }
  terms
}

# `variance`, the range pieces of `others` (named as gp_derivative_terms()'s
# terms), `nugget`, then its log_smoothness: the order of the log parameters,
# of the gradient and of the Fisher information, for lists of per-parameter
# pieces (named log_variance, log_nugget, and as in `others`).
gp_param_order <- function(variance, others, nugget) {
  smooth <- names(others) == "log_smoothness"
  c(list(log_variance = variance), others[!smooth], list(log_nugget = nugget), others[smooth])
}
