# The covariance parameters of the Gaussian-process functions: their names
# and order (variance, one range per group of coordinates, the angles of an
# anisotropic kernel, nugget, smoothness), the groups of coordinates that share a range, checks of
# user-given values, bounds and starts, the kernel at given parameters, and
# the derivatives of the covariance in the log parameters.

# The range groups of a problem: which range each dimension uses, an integer
# vector 1..G (one per column of the locations), from `ranges` as gp_fit()
# and gp_loglik() take it: "isotropic" (one range), "per_dimension", or the
# groups themselves (e.g. c(1, 1, 2): a range for space and one for time).
# "anisotropic" is a range per rotated axis: 1..dim with the attribute
# "angles", the number of angles of the rotation (gp_rotation()).
gp_range_groups <- function(ranges, dim) {
  if (is.character(ranges)) {
    ranges <- gk_match_choice(ranges, c("isotropic", "per_dimension", "anisotropic"), "ranges")
    if (ranges == "anisotropic") {
      if (!dim %in% c(2L, 3L)) {
        stop("ranges = \"anisotropic\" needs locations with 2 or 3 columns (a rotation and ",
             "a range per rotated axis), not ", dim, call. = FALSE)
      }
      return(structure(seq_len(dim), angles = gp_angle_count(dim)))
    }
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

# The names of the angles of anisotropic `groups` (gp_range_groups()):
# "angle" in 2D, "angle1", "angle2", "angle3" in 3D, none otherwise.
gp_angle_names <- function(groups) {
  count <- attr(groups, "angles")
  if (is.null(count) || count == 0L) return(character(0))
  if (count == 1L) "angle" else paste0("angle", seq_len(count))
}

# The kinds of parameters, in the order of the parameters; with several
# range groups, "range" stands for range1, range2, ... (gp_range_names()).
gp_fit_params <- c("variance", "range", "angle", "nugget", "smoothness")

# The parameters of a fit with range `groups`, in the order of the
# optimizer's parameters and the gradient: variance, ranges, angles, nugget
# (smoothness).
gp_fit_param_names <- function(groups, smoothness) {
  c("variance", gp_range_names(groups), gp_angle_names(groups), "nugget",
    if (smoothness) "smoothness")
}

# The kind of each parameter name: range1, range2, ... are ranges, angle1,
# ... angles.
gp_param_kind <- function(names) sub("^angle[0-9]+$", "angle", sub("^range[0-9]+$", "range", names))

# The optimizer works on the logs of the positive parameters and on the
# angles themselves (radians, unbounded: the covariance is periodic in them).
gp_param_is_log <- function(pnames) gp_param_kind(pnames) != "angle"

# The optimizer's parameters from values (`theta`, named) and back.
gp_to_par <- function(theta, pnames = names(theta)) {
  is_log <- gp_param_is_log(pnames)
  theta[is_log] <- log(theta[is_log])
  theta
}
gp_from_par <- function(par, pnames = names(par)) {
  is_log <- gp_param_is_log(pnames)
  par[is_log] <- exp(par[is_log])
  stats::setNames(par, pnames)
}

# The names of the optimizer's parameters (of the gradient, the Fisher
# information and vcov()): log_variance, ..., angle, ..., log_nugget.
gp_par_names <- function(pnames) {
  ifelse(gp_param_is_log(pnames), paste0("log_", pnames), pnames)
}

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
# The angles are unbounded.
gp_default_lower <- c(variance = 1e-8, range = 1e-6, angle = -Inf, nugget = 1e-10,
                      smoothness = 0.1)
gp_default_upper <- c(variance = 1e8, range = 1e6, angle = Inf, nugget = 1e4, smoothness = 8)

# A named list or vector of parameter values on the natural scale (bounds or
# fixed values): checked, as a named double vector (NULL when empty).
gp_check_params <- function(x, what, groups, zero_nugget = FALSE) {
  known <- unique(c(setdiff(gp_fit_params, "angle"), gp_range_names(groups),
                    gp_angle_names(groups)))
  gp_check_values(x, what, known, stats::setNames(gp_param_is_log(known), known), zero_nugget)
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
  fac <- c(variance = scales$y^2, range = scales$locs, angle = 1, nugget = scales$y^2,
           smoothness = 1)
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
# a `range` of one value per group (or one for all) given as range1, ...,
# and in 3D an `angle` of three values as angle1, angle2, angle3.
gp_scale_start <- function(start, fac, pnames) {
  if (is.null(start)) return(NULL)
  start <- as.list(start)
  if ("angle1" %in% pnames && is.numeric(start$angle) && length(start$angle) == 3L) {
    start[paste0("angle", 1:3)] <- as.list(start$angle)
    start$angle <- NULL
  }
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

# Angle derivative terms of an anisotropic problem (aniso: list(raw, angles),
# the unrotated points in the problem's order and the current angles): the
# central difference of the kernel on the points rotated by angle_j +- h,
# each kernel with its own points (`points`, which the engines use instead
# of Sigma's; gp_dense_term.points in gp.h). Named as gp_angle_names().
gp_angle_terms <- function(kernel, aniso) {
  h <- gp_difference_step
  angles <- aniso$angles
  names <- if (length(angles) == 1L) "angle" else paste0("angle", seq_along(angles))
  terms <- lapply(seq_along(angles), function(j) {
    step <- h * (seq_along(angles) == j)
    list(kernels = list(kernel, kernel), weights = c(1, -1) / (2 * h),
         points = list(gp_rotate_points(aniso$raw, angles + step),
                       gp_rotate_points(aniso$raw, angles - step)))
  })
  stats::setNames(terms, names)
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
# central differences of two kernels. With `aniso` (an anisotropic problem:
# list(raw, angles)), the angles' terms follow the ranges' (gp_angle_terms()).
# A formula's terms are its own (gp_formula_terms()).
gp_derivative_terms <- function(kernel, smoothness = FALSE, groups = NULL, aniso = NULL) {
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
  if (!is.null(aniso)) terms <- c(terms, gp_angle_terms(kernel, aniso))
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

# `variance`, the range and angle pieces of `others` (named as
# gp_derivative_terms()'s terms), `nugget`, then its log_smoothness: the
# order of the optimizer's parameters,
# of the gradient and of the Fisher information, for lists of per-parameter
# pieces (named log_variance, log_nugget, and as in `others`).
gp_param_order <- function(variance, others, nugget) {
  smooth <- names(others) == "log_smoothness"
  c(list(log_variance = variance), others[!smooth], list(log_nugget = nugget), others[smooth])
}
