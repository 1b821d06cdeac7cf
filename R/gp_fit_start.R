# The starting values of gp_fit(): from `start`, the kernel or the formula,
# else rough data scales refined on a subset (gp_fit_model.R's models give
# them).

# Starting values (named, on the scaled problem): those of the model
# (model$initial(): from `start`, the kernel's or the formula's, else from
# the data). `fixed` values replace them; without `start`, with more than
# 2000 points, the rough values are refined by a dense fit to a subset of
# 1000 points, which reports its evaluations through `report` and lets an
# interrupt through.
gp_start <- function(locs, data, model, start, control, backend, fixed = NULL, bounds = NULL,
                     report = function(line) invisible()) {
  wanted <- model$pnames
  X <- data$X
  resid <- if (ncol(X)) stats::lm.fit(X, data$y)$residuals else data$y
  v <- max(stats::var(resid), .Machine$double.eps)
  init <- model$initial(start, locs, v, fixed)
  st <- init$values
  if (init$given) return(st)
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
      suppressWarnings(gp_fit_run(locs[sub, , drop = FALSE], sdata, model, as.list(st), "dense",
                                  control, ctl, backend, lower = bounds$lower,
                                  upper = bounds$upper, fixed = fixed, gtol = 1e-3,
                                  report = report, polish = FALSE)),
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
