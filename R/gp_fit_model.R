# The covariance model a fit estimates (gp_fit_run()): its parameters in
# order, which of them are estimated in their log, their factors from the
# scaled problem to the user's units, default bounds, checks of user-given
# values, starting values, the kernel at given parameters and the ranges the
# neighbour search sees. One for the kernels of the vocabulary, one for
# formulas (gk_formula()).

# The vocabulary's kernels: variance, range(s), an anisotropic kernel's
# angles, nugget (smoothness), all but the angles in their logs, the
# locations scaled (gp_data_scales()).
gp_model_kernel <- function(template, groups, smoothness) {
  pnames <- gp_fit_param_names(groups, smoothness)
  G <- max(groups)
  at <- list(variance = match("variance", pnames), range = match(gp_range_names(groups), pnames),
             nugget = match("nugget", pnames), smoothness = match("smoothness", pnames))
  bound <- function(defaults, fac) stats::setNames(defaults[gp_param_kind(pnames)], pnames) * fac
  list(pnames = pnames, log = stats::setNames(gp_param_is_log(pnames), pnames),
       scale_locs = TRUE, smoothness = smoothness, template = template,
       angle_names = gp_angle_names(groups), range_groups = if (G > 1L) groups,
       factors = function(sc) gp_param_factors(sc, pnames),
       lower = function(fac) bound(gp_default_lower, fac),
       upper = function(fac) bound(gp_default_upper, fac),
       check = function(x, what) gp_expand_ranges(gp_check_params(x, what, groups), pnames),
       expand = function(x) gp_expand_ranges(x, pnames),
       kernel = function(theta) gp_fit_kernel(template, theta, at, groups, smoothness),
       neighbor_range = function(theta) theta[at$range][groups],
       # the model on locations divided by sc$locs (a sphere's radius with them)
       scaled = function(sc) {
         gp_model_kernel(gp_scale_kernel_radius(template, sc$locs), groups, smoothness)
       },
       initial = function(start, locs, v, fixed) {
         gp_kernel_initial(start, locs, v, fixed, groups, smoothness, template)
       })
}

# The vocabulary's kernel a fit estimates, from a family name or a
# gk_kernel() (its family and smoothness).
gp_kernel_template <- function(kernel, smoothness, dim) {
  if (inherits(kernel, "gk_kernel")) {
    family <- kernel$name
    if (family == "matern") smoothness <- kernel$smoothness
  } else {
    if (!is.character(kernel) || length(kernel) != 1L) {
      stop("`kernel` must be a family name, a gk_kernel() or a gk_formula()", call. = FALSE)
    }
    family <- kernel
  }
  k <- if (tolower(family) == "matern") gk_kernel(family, smoothness = smoothness) else
    if (family %in% gk_sphere_families) gk_kernel(family, radius = if (is.list(kernel)) kernel$radius else 1) else
      gk_kernel(family)
  gp_check_kernel(k, dim)
}

# Starting values of the vocabulary's model (see gp_start()): all of
# `start` (with the fixed values; angles not given start at 0, no rotation),
# or the 90/10 split of the residual variance v and a quarter of the
# (group's) mean coordinate standard deviation. Returns list(values, given).
gp_kernel_initial <- function(start, locs, v, fixed, groups, smoothness, template) {
  nu <- if (smoothness) c(smoothness = template$smoothness)
  wanted <- gp_fit_param_names(groups, smoothness)
  angles <- gp_angle_names(groups)
  if (!is.null(start)) {
    start <- as.list(start)
    for (nm in names(fixed)) start[[nm]] <- fixed[[nm]]
    for (nm in angles) if (is.null(start[[nm]])) start[[nm]] <- 0
    if (!all(setdiff(wanted, "smoothness") %in% names(start))) {
      stop("`start` needs `variance`, `range` (one, or one per range group) and `nugget`",
           call. = FALSE)
    }
    if (smoothness && is.null(start$smoothness)) start$smoothness <- nu[[1L]]
    for (nm in wanted) {
      if (nm %in% names(fixed)) next
      if (nm %in% angles) {
        gp_check_angles(start[[nm]], 1L, paste0("start$", nm))
      } else {
        gk_check_scalar(start[[nm]], paste0("start$", nm), lower = 0, lower_open = TRUE)
      }
    }
    return(list(values = vapply(start[wanted], as.double, numeric(1)), given = TRUE))
  }
  range <- vapply(split(apply(locs, 2L, stats::sd), groups), mean, 0) / 4
  list(values = c(variance = 0.9 * v, stats::setNames(range, gp_range_names(groups)),
                  stats::setNames(rep(0, length(angles)), angles), nugget = 0.1 * v, nu),
       given = FALSE)
}

# Default bounds of a formula's parameters: in their log, as wide as the
# range's relative ones; on their own scale, none.
gp_formula_lower <- 1e-8
gp_formula_upper <- 1e8

# A formula F: variance * F + nugget, the variance and nugget in their logs,
# F's parameters (`names(f$params)`) in their logs where their starting value
# (from `start`, else the formula's) is positive, else on their own scale.
# The locations are not scaled (a formula's parameters are in the units of
# its points).
gp_model_formula <- function(f, start) {
  params <- names(f$params)
  values <- f$params
  for (p in intersect(names(start), params)) values[[p]] <- start[[p]]
  for (p in params) {
    v <- values[[p]]
    if (!is.numeric(v) || length(v) != 1L || !is.finite(v)) {
      stop("the formula's parameter `", p, "` needs a starting value: give it in ",
           "gk_formula() or `start`", call. = FALSE)
    }
  }
  pnames <- c("variance", params, "nugget")
  log <- stats::setNames(c(TRUE, unlist(values[params]) > 0, TRUE), pnames)
  kinds <- c("variance", rep("formula", length(params)), "nugget")
  # in_log: the bound of a formula parameter estimated in its log; on_own: else
  bound <- function(defaults, in_log, on_own, fac) {
    out <- stats::setNames(ifelse(log, in_log, on_own), pnames)
    out[c("variance", "nugget")] <- defaults[c("variance", "nugget")]
    out * fac
  }
  list(pnames = pnames, log = log, scale_locs = FALSE, smoothness = FALSE, template = f,
       range_groups = NULL,
       factors = function(sc) stats::setNames(ifelse(kinds == "formula", 1, sc$y^2), pnames),
       lower = function(fac) bound(gp_default_lower, gp_formula_lower, -Inf, fac),
       upper = function(fac) bound(gp_default_upper, gp_formula_upper, Inf, fac),
       # (bounds of parameters on their own scale may be infinite)
       check = function(x, what) {
         gp_check_values(x, what, pnames, log, zero_nugget = what == "fixed",
                         infinite = what %in% c("lower", "upper"))
       },
       expand = function(x) x,
       kernel = function(theta) {
         f$params[params] <- as.list(theta[params])
         gp_formula_cov(f, theta[["variance"]], params, log[params])
       },
       neighbor_range = function(theta) NULL,
       scaled = function(sc) gp_model_formula(f, start),   # its locations are not scaled
       initial = function(start, locs, v, fixed) {
         st <- c(variance = 0.9 * v, unlist(values[params]), nugget = 0.1 * v)
         for (nm in intersect(names(start), c("variance", "nugget"))) {
           gk_check_scalar(start[[nm]], paste0("start$", nm), lower = 0, lower_open = TRUE)
           st[[nm]] <- start[[nm]]
         }
         st[names(fixed)] <- fixed
         list(values = st[pnames], given = !is.null(start))
       })
}
