# The starting values of gp_fit(): the kernel family's template, and values
# from `start`, the kernel, or rough data scales refined on a subset.

gp_kernel_template <- function(kernel, smoothness, dim) {
  if (inherits(kernel, "gk_kernel")) {
    family <- kernel$name
    if (family == "matern") smoothness <- kernel$smoothness
  } else {
    if (!is.character(kernel) || length(kernel) != 1L) {
      stop("`kernel` must be a family name or a gk_kernel()", call. = FALSE)
    }
    family <- kernel
  }
  k <- if (tolower(family) == "matern") gk_kernel(family, smoothness = smoothness) else
    gk_kernel(family)
  gp_check_kernel(k, dim)
}

# Starting values (named, positive): variance, range, nugget and, when it is
# estimated, smoothness (from `start`, else the kernel's). `fixed` values
# replace them; with more than 2000 points the rough values are refined by a
# dense fit to a subset of 1000 points, which reports its evaluations through
# `report` and lets an interrupt through.
gp_start <- function(locs, data, template, groups, start, control, backend,
                     estimate_smoothness = FALSE, fixed = NULL, bounds = NULL,
                     report = function(line) invisible()) {
  nu <- if (estimate_smoothness) c(smoothness = template$smoothness)
  wanted <- gp_fit_param_names(groups, estimate_smoothness)
  angles <- gp_angle_names(groups)
  base <- setdiff(wanted, c("smoothness", angles))
  if (!is.null(start)) {
    start <- as.list(start)
    for (nm in names(fixed)) start[[nm]] <- fixed[[nm]]
    for (nm in angles) if (is.null(start[[nm]])) start[[nm]] <- 0   # no rotation
    if (!all(base %in% names(start))) {
      stop("`start` needs `variance`, `range` (one, or one per range group) and `nugget`",
           call. = FALSE)
    }
    if (estimate_smoothness && is.null(start$smoothness)) start$smoothness <- nu[[1L]]
    for (nm in wanted) {
      if (nm %in% names(fixed)) next
      if (nm %in% angles) {
        gp_check_angles(start[[nm]], 1L, paste0("start$", nm))
      } else {
        gk_check_scalar(start[[nm]], paste0("start$", nm), lower = 0, lower_open = TRUE)
      }
    }
    return(vapply(start[wanted], as.double, numeric(1)))
  }
  X <- data$X
  resid <- if (ncol(X)) stats::lm.fit(X, data$y)$residuals else data$y
  v <- max(stats::var(resid), .Machine$double.eps)
  # a quarter of the (group's) mean coordinate standard deviation
  range <- vapply(split(apply(locs, 2L, stats::sd), groups), mean, 0) / 4
  st <- c(variance = 0.9 * v, stats::setNames(range, gp_range_names(groups)),
          stats::setNames(rep(0, length(angles)), angles), nugget = 0.1 * v, nu)
  st[names(fixed)] <- fixed
  if (!is.null(bounds)) {
    free <- !names(st) %in% names(fixed)
    st[free] <- pmin(pmax(st[free], bounds$lower[names(st)][free]), bounds$upper[names(st)][free])
  }
  n <- nrow(locs)
  if (n > 2000L && !all(wanted %in% names(fixed))) {
    sub <- gp_with_seed(control$seed + 2L, sample.int(n, 1000L))
    sdata <- list(y = data$y[sub], X = X[sub, , drop = FALSE])
    ctl <- list(factr = 1e7, pgtol = 0, maxit = 200L)
    # errors and warnings of the subset fit only mean rougher start values;
    # an interrupt goes through (tryCatch(error = ) does not catch it)
    pre <- tryCatch(
      suppressWarnings(gp_fit_run(locs[sub, , drop = FALSE], sdata, template, groups, as.list(st),
                                  "dense", estimate_smoothness, control, ctl, backend,
                                  lower = bounds$lower, upper = bounds$upper, fixed = fixed,
                                  gtol = 1e-3, report = report, polish = FALSE)),
      error = function(e) NULL)
    if (!is.null(pre) && all(is.finite(pre$coefficients))) {
      st <- pre$coefficients
      # a subset sees fewer close pairs: keep the nugget away from zero
      if (!"nugget" %in% names(fixed)) {
        st[["nugget"]] <- max(st[["nugget"]], 1e-3 * st[["variance"]])
      }
    }
  }
  st
}
