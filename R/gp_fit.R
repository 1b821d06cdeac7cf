# Maximum-likelihood fits of Gaussian processes and what users do with them:
# coefficients, standard errors, kriging predictions.

#' Fit a Gaussian process by maximum likelihood
#'
#' Maximises the profile log-likelihood of [gp_loglik()] over the log
#' variance, log range and log nugget (the nugget is the variance added to the
#' diagonal, not a ratio) and, with `estimate_smoothness = TRUE`, the log
#' smoothness of a Matérn kernel (its derivative is a central difference of
#' two kernel operators, see [gp_loglik()]), within bounds, with the
#' gradient of [gp_loglik()]. The iterative methods use the same probes at
#' every step, so the objective is smooth: L-BFGS-B searches with the first
#' 10 of them (all of them when the smoothness is estimated), and the
#' quasi-Newton polish, the stopping rule and everything the fit reports use
#' all `control$probes`.
#'
#' @section Scaling:
#' The fit works on `y` divided by the standard deviation \eqn{s} of the
#' least-squares residuals (of `y` on `X`) and on `locs`, centred, divided by
#' their mean coordinate standard deviation \eqn{d}; the estimates are scaled
#' back. So the fit to `y * c` is the fit to `y` with variance, nugget and
#' mean coefficients times \eqn{c^2}, \eqn{c^2} and \eqn{c}, and the fit to
#' `locs * c` has the range times \eqn{c} (to rounding: tested for
#' \eqn{c} from \eqn{10^{-150}} to \eqn{10^{150}} for `y`, \eqn{10^{-6}} to
#' \eqn{10^6} for `locs`); `loglik` is that of the data as given.
#'
#' @section Bounds and fixed parameters:
#' `lower` and `upper` are named lists or vectors on the natural scale
#' (`variance`, `range`, `nugget`, `smoothness`); parameters they do not name
#' keep the defaults: variance in \eqn{[10^{-8}, 10^8]\, s^2}, range in
#' \eqn{[10^{-6}, 10^6]\, d}, nugget in \eqn{[10^{-10}, 10^4]\, s^2} and
#' smoothness in \eqn{[0.1, 8]} (with \eqn{s^2} and \eqn{d} as in Scaling;
#' the fit keeps them as `fit$lower`, `fit$upper`). Starting values outside
#' them are moved onto them. `fixed` (same names) holds parameters at the
#' given values: they are not estimated, and their rows and columns of
#' [vcov()] are zero. A fixed nugget may be 0; a fixed smoothness is the
#' kernel's (as `smoothness` with `estimate_smoothness = FALSE`).
#'
#' A fit that ends on a bound says so: `fit$at_bound` names the parameters
#' (`"lower"` or `"upper"`), `fit$convergence` reads `"converged at a bound:
#' nugget (lower)"`, a warning is given and `print()` shows it. The maximum
#' then lies on or beyond the bound (a nugget of zero, an infinite range):
#' widen the bound to see which, or fix the parameter.
#'
#' @section Stopping rule:
#' The search: on the dense and Vecchia methods L-BFGS-B (`optim_control`, by
#' default `factr = 1e5`, `pgtol = gtol`, `maxit = 200`) on the negative
#' log-likelihood of the scaled data; on the iterative methods (`"tiled"`,
#' `"h2"`) Fisher scoring, as GpGp's `fit_model()` does, with 10 of the
#' probes and at most 40 steps (their gradient is an estimate, on which
#' L-BFGS-B's line search crawls along the ridge where variance and range
#' trade off). Then quasi-Newton steps (the Fisher information as the first curvature, BFGS
#' updates, projected on the bounds, halved until the log-likelihood does not
#' fall; at most 20) until the projected gradient is small: the fit has
#' converged when, for every estimated parameter, the derivative of the
#' log-likelihood in its log is at most `gtol` (default \eqn{10^{-6}}) in
#' absolute value, or the parameter sits on a bound and the derivative points
#' out of the box (the projected gradient, kept as
#' `fit$projected_gradient`). For the iterative methods the gradient is
#' itself an estimate, and the bound is `gtol` plus three of its standard
#' errors (`gradient_se` of [gp_loglik()]). On the dense method the default
#' gives estimates within about \eqn{10^{-7}} (relative) of the exact
#' maximum; the iterative methods' estimates differ from it by the
#' stochastic error of their log-likelihood (see [gp_loglik()]). Otherwise
#' `fit$convergence` says what stopped the fit, with a warning.
#'
#' @section Ranges per coordinate:
#' With `ranges` other than `"isotropic"`, the kernel's distance divides each
#' coordinate by its group's range (as a [gk_kernel()] with a range per
#' dimension); the scaling of the locations (see Scaling) is the same for all
#' coordinates, so give coordinates in units where that is sensible or use
#' groups. Each group's range is estimated on every method; on the dense and
#' Vecchia methods the gradient is exact to about \eqn{10^{-9}}, on the
#' iterative ones each group costs two more operator products per
#' evaluation (see the Gradient section of [gp_loglik()]). The start values
#' give every group a quarter of its coordinates' mean standard deviation.
#'
#' @section Geometric anisotropy:
#' `ranges = "anisotropic"` (locations with 2 or 3 columns, `coords =
#' "euclidean"`) estimates a range per axis of a rotated coordinate system
#' and the rotation: the covariance is \eqn{k(\|A(x - x')\|)} with
#' \eqn{A = \mathrm{diag}(1/\rho_k) R^\top}. The coefficients are
#' `range1`, `range2` and `angle` in 2D (the axis of `range1` points `angle`
#' radians counter-clockwise from the first coordinate axis), `range1`,
#' `range2`, `range3`, `angle1`, `angle2`, `angle3` in 3D
#' (\eqn{R = R_z(\alpha_1) R_y(\alpha_2) R_x(\alpha_3)}, intrinsic
#' z-y'-x''; see Geometric anisotropy in [gp_loglik()]). Every method runs
#' on the rotated points; the angles' derivatives are central differences
#' of kernels on points rotated by \eqn{\pm h}, exact to about
#' \eqn{10^{-9}} on the dense and Vecchia methods and estimated by the
#' probes on the iterative ones. The angles are not log-transformed and
#' unbounded (unless `lower`/`upper` name them); they start at 0 and are
#' reported in \eqn{(-\pi/2, \pi/2]} (the covariance has period \eqn{\pi}
#' in each; in 3D `angle2` in \eqn{[-\pi/2, \pi/2]}), with standard
#' errors in radians. `(range1, range2, angle)` and `(range2, range1,
#' angle + pi/2)` are the same covariance: a 2D fit reports the one with
#' `range1 >= range2` (so `angle` is the direction of the longer range),
#' unless the two ranges are fixed or bounded differently; a 3D fit reports
#' the form it reaches. Where the ranges are (nearly) equal the angle is not
#' identifiable: the fit still converges, the angle's standard error is NA
#' (the others are then those with the angle held at its estimate) and a
#' warning says so. `fixed = list(angle = 0.3)` holds it (in 3D `angle1`, ...
#' or `angle = c(a1, a2, a3)`); [predict.gp_fit()] and [gp_simulate()] rotate
#' new locations as the fit's, and `fit$locs` holds the rotated locations.
#' The neighbours of the Vecchia method and preconditioner are those of the
#' starting values' rotated, scaled coordinates; with `method = "vecchia"`,
#' where the estimates stretch that metric by more than 10% in some
#' direction (ranges per group or angles), the neighbours are found again
#' at the estimates and the polish goes on from there (the Vecchia
#' likelihood then approximates the exact one in the estimates' metric).
#'
#' @section Starting values:
#' When `start` is `NULL` and `kernel` is a [gk_kernel()]: its variance and
#' range, and a nugget of a ninth of its variance.
#' When `start` is `NULL` and `kernel` a family name: the variance of the least-squares residuals split
#' 90/10 between the process and the nugget, and a range of a quarter of the
#' mean coordinate standard deviation; with more than 2000 points these are
#' then refined by a dense fit (L-BFGS-B only) to a random subset of 1000
#' points.
#'
#' @section Formula kernels:
#' With `kernel = gk_formula(...)` the model is
#' \eqn{\Sigma = \sigma^2 F(x_i, x_j; \theta) + \tau^2 I} (GPyTorch's
#' `ScaleKernel(k)` plus noise): the fit estimates the variance
#' \eqn{\sigma^2}, the nugget and every parameter of the formula not held
#' `fixed` (coefficients `variance`, the formula's parameters in their order,
#' `nugget`); so write \eqn{F} without an overall scale (and without
#' parameters named `variance` or `nugget`). Starting values are the
#' formula's own (a parameter given as `NA` needs one in `start`), replaced
#' by `start` (e.g. `start = list(s = 0.1, p = 1)`, also `variance` and
#' `nugget`; these default to the 90/10 split of the residual variance). A
#' parameter whose starting value is positive is estimated in its log, within
#' \eqn{[10^{-8}, 10^8]} unless `lower`/`upper` say otherwise; one starting
#' at zero or below is estimated on its own scale, unbounded unless given
#' bounds (its [vcov()] row is then on that scale, and named without `log_`).
#' The locations are not scaled (see Scaling: a formula's parameters are in
#' the units of its points); `y` is. Methods `"dense"` and `"tiled"` (see
#' [gp_loglik()]); `ranges` and `estimate_smoothness` do not apply.
#' `predict()` uses the fitted formula (the kriging variance's \eqn{k(x, x)}
#' too: the formula need not be stationary).
#'
#' @section Progress and interrupts:
#' Progress goes through \pkg{progressr} (see [gk_progress]): one step per
#' likelihood evaluation (so at least one per optimizer iteration),
#' including those of the start-value fit on a subset, shown by the handler
#' you choose (e.g. `progressr::handlers(global = TRUE)`); without a
#' handler nothing is shown, as with \pkg{progressr} in general. A fit
#' shows its progress once it has run for
#' `getOption("gpukernels.progress_after", 2)` seconds, so quick fits show
#' none. With
#' `verbose = TRUE` each step carries a line (log-likelihood, parameters, CG
#' iterations, time) as its message. Without \pkg{progressr}, `verbose`
#' lines are printed with `message()`; `options(gpukernels.progress = FALSE)`
#' turns both off.
#'
#' An interrupt (Ctrl-C) stops the fit at any stage (the start-value fit
#' included) and reaches the caller as a condition of class
#' `c("gp_fit_interrupt", "interrupt", "condition")`, caught by
#' `tryCatch(interrupt = )` (not by `try()`), with `parameters` (the best
#' parameters so far on the natural scale, `NULL` if none were evaluated),
#' `loglik` (their log-likelihood) and `evaluations`; uncaught, it ends the
#' computation as R's own interrupt does.
#'
#' @inheritParams gp_loglik
#' @param kernel Kernel family name: `"matern"`, `"exponential"`,
#'   `"gaussian"`, `"cauchy"` or `"inverse_multiquadric"`, or a
#'   [gk_kernel()]: its family and smoothness are used and, unless `start`
#'   is given, its variance and range are the starting values (with a
#'   nugget of a ninth of the variance, the default 90/10 split; see
#'   Starting values). A fit estimates the parameters, so a family name is
#'   enough; [gp_loglik()] and [gp_simulate()] need them all. Or a formula
#'   from [gk_formula()] (see Formula kernels).
#' @param smoothness The Matérn smoothness, default 1.5: fixed, or the
#'   starting value with `estimate_smoothness = TRUE`.
#' @param start Optional starting values: a named list or vector with
#'   `variance`, `range` and `nugget` (and optionally `smoothness`); for a
#'   formula kernel any of `variance`, `nugget` and the formula's parameters.
#' @param method `"auto"`, `"dense"`, `"tiled"`, `"h2"` or `"vecchia"`: see the Methods
#'   section of [gp_loglik()].
#' @param estimate_smoothness Also estimate the Matérn smoothness.
#' @param verbose A line per likelihood evaluation (default: when
#'   `n > 5000`), as the progress message (see Progress and interrupts).
#' @param optim_control Passed to [stats::optim()]'s `control` for the
#'   dense and Vecchia methods' search (see Stopping rule).
#' @param lower,upper Bounds on the natural scale: named lists or vectors
#'   (`variance`, `range`, `nugget`, `smoothness`, and an anisotropic fit's
#'   angles, unbounded by default); unnamed parameters keep the defaults
#'   (see Bounds and fixed parameters).
#' @param fixed Parameters held at given values, a named list or vector
#'   (same names).
#' @param ranges `"isotropic"` (one range, the default), `"per_dimension"`
#'   (a range per column of `locs`: coefficients `range1`, `range2`, ...) or
#'   one group number per column, 1, 2, ..., for ranges shared by groups of
#'   columns: `c(1, 1, 2)` for space-time data (x, y, t) estimates a range in
#'   space and one in time, whose distance is
#'   \eqn{\sqrt{(\Delta x^2 + \Delta y^2)/\rho_1^2 + \Delta t^2/\rho_2^2}}.
#'   In `lower`, `upper`, `fixed` and `start`, `range` stands for every
#'   group not named on its own (`start$range` may also hold one value per
#'   group). Needs `coords = "euclidean"`. See Ranges per coordinate.
#'   `"anisotropic"` (2 or 3 columns) estimates a rotation and a range per
#'   rotated axis: see Geometric anisotropy.
#' @param gtol Tolerance on the projected gradient of the log-likelihood in
#'   the log parameters (see Stopping rule).
#' @return An object of class `gp_fit` with methods [coef()], [logLik()],
#'   [vcov()] (the inverse expected Fisher information at the estimate, for
#'   the log parameters), `print()`, `summary()` and [predict.gp_fit()]; its
#'   elements include `beta` (the GLS mean coefficients) and `vcov_beta`
#'   (their GLS covariance \eqn{(X^\top\Sigma^{-1}X)^{-1}} at the estimated
#'   covariance, which does not count the uncertainty of the covariance
#'   parameters nor, for `"h2"`, the H2 approximation's effect on
#'   \eqn{\hat\beta}), `convergence`, `at_bound`, `projected_gradient`,
#'   `lower`, `upper`, `fixed`, `gradient`, `evaluations`.
#' @examples
#' set.seed(1)
#' locs <- matrix(runif(600), ncol = 2)
#' y <- gp_simulate(locs, gk_kernel("matern", range = 0.2, smoothness = 1.5), nugget = 0.1)
#' fit <- gp_fit(locs, y, kernel = "matern", smoothness = 1.5, backend = "cpu")
#' fit
#' predict(fit, matrix(runif(10), ncol = 2), se.fit = TRUE)
#' # the nugget held at its true value, a range of at most 0.5
#' gp_fit(locs, y, fixed = list(nugget = 0.1), upper = list(range = 0.5), backend = "cpu")
#' @export
gp_fit <- function(locs, y, X = NULL, kernel = "matern", smoothness = 1.5, start = NULL,
                   method = "auto", estimate_smoothness = FALSE, control = gp_control(),
                   verbose = NULL, optim_control = list(), lower = NULL, upper = NULL,
                   fixed = NULL, gtol = 1e-6, coords = "euclidean", radius = 6371,
                   distance = "chordal", ranges = "isotropic", backend = NULL) {
  coords <- gp_check_coords(coords, radius, distance)
  locs <- gp_locations(locs, coords)
  gp_check_fit_locs(locs)   # n = 1 or all points equal: say so (checks.R)
  n <- nrow(locs)
  if (inherits(kernel, "gk_formula")) {
    if (!identical(ranges, "isotropic") || isTRUE(estimate_smoothness)) {
      stop("`ranges` and `estimate_smoothness` are for kernels of the vocabulary, not formulas",
           call. = FALSE)
    }
    model <- gp_model_formula(gp_check_formula(kernel, ncol(locs)), start)
    fixed <- model$check(fixed, "fixed")
    method_of <- gp_formula_method
  } else {
    groups <- gp_range_groups(ranges, ncol(locs))
    gp_check_coords_ranges(coords, groups)
    fixed <- gp_check_params(fixed, "fixed", groups, zero_nugget = TRUE)
    if ("smoothness" %in% names(fixed)) {
      # a fixed smoothness is the kernel's, not estimated
      smoothness <- fixed[["smoothness"]]
      estimate_smoothness <- FALSE
      fixed <- fixed[names(fixed) != "smoothness"]
      if (!length(fixed)) fixed <- NULL
    }
    estimate_smoothness <- isTRUE(estimate_smoothness)
    template <- gp_coords_kernel(gp_kernel_template(kernel, smoothness, ncol(locs)), coords,
                                 estimate_smoothness)
    if (is.null(start) && inherits(kernel, "gk_kernel")) start <- gp_kernel_start(kernel, groups)
    if (estimate_smoothness && template$name != "matern") {
      stop("`estimate_smoothness = TRUE` needs the matern kernel", call. = FALSE)
    }
    model <- gp_model_kernel(template, groups, estimate_smoothness)
    method_of <- gp_method
  }
  data <- gp_check_data(y, X, n)
  if (!inherits(control, "gp_control")) stop("`control` must come from gp_control()", call. = FALSE)
  gk_check_scalar(gtol, "gtol", lower = 0, lower_open = TRUE)
  backend <- gk_backend(backend)
  method <- method_of(method, n, ncol(locs), control, backend)
  if (is.null(verbose)) verbose <- n > 5000
  ctl <- utils::modifyList(list(factr = 1e5, pgtol = gtol, maxit = 200L), optim_control)
  # one progress step per likelihood evaluation, those of the start-value fit
  # on a subset included (it shares this progressor)
  report <- gp_fit_progress(verbose, steps = (ctl$maxit + 20L) * (1L + (n > 2000L)))
  fit <- gp_fit_run(locs, data, model, start, method, control, ctl, backend, lower, upper, fixed,
                    gtol, report)
  fit$X_default <- is.null(X)
  fit$coords <- coords
  fit$coords$angles <- fit$angles   # predict() and gp_simulate() rotate new locations
  if (isTRUE(fit$angle_unidentified)) {
    warning("gp_fit(): the angle is not identifiable (the Fisher information is singular in ",
            "it: are the ranges nearly equal?); its standard error is NA, the others' hold ",
            "it at its estimate", call. = FALSE)
  }
  fit$call <- match.call()
  if (length(fit$at_bound)) {
    warning("gp_fit(): ", gp_bound_text(fit), "; the maximum may lie beyond it (widen ",
            "`lower`/`upper`, or fix the parameter with `fixed`)", call. = FALSE)
  }
  if (!grepl("^converged", fit$convergence)) {
    warning("gp_fit(): ", fit$convergence, call. = FALSE)
  }
  fit
}

# The scales by which gp_fit() divides the data (so that the fit is the same
# for y * c and locs * c): y by the standard deviation of the least-squares
# residuals, the locations (after centring) by their mean coordinate standard
# deviation. Computed after dividing by the largest value, so that neither
# 1e-150 nor 1e150 under- or overflows in the squares.
gp_data_scales <- function(locs, data) {
  robust_sd <- function(v) {
    m <- max(abs(v))
    if (!is.finite(m) || m == 0) return(1)
    s <- if (length(v) > 1L) m * stats::sd(v / m) else m
    if (!is.finite(s) || s == 0) m else s
  }
  resid <- if (ncol(data$X)) stats::lm.fit(data$X, data$y)$residuals else data$y
  center <- colMeans(locs)
  spread <- mean(apply(sweep(locs, 2L, center), 2L, robust_sd))
  list(y = robust_sd(resid), locs = spread, center = center)
}

# The fit itself, on data divided by their scales; called by gp_fit() and for
# the start values (on a subset). Parameters, bounds and fixed values come
# and go on the natural scale of `locs` and `data`. An interrupt ends it with
# a condition of class c("gp_fit_interrupt", "interrupt", "condition") that
# carries the best parameters so far.
gp_fit_run <- function(locs, data, model, start, method, control, ctl, backend, lower, upper, fixed,
                       gtol, report, polish = TRUE) {
  n <- nrow(locs)
  pnames <- model$pnames
  k <- length(pnames)
  estimate_smoothness <- model$smoothness
  at_angle <- match(model$angle_names, pnames)   # an anisotropic kernel's angles
  A <- length(at_angle)
  sc <- gp_data_scales(locs, data)
  if (!model$scale_locs) {   # a formula's parameters are in the units of its points
    sc$center[] <- 0
    sc$locs <- 1
  }
  fac <- model$factors(sc)
  slocs <- sweep(locs, 2L, sc$center) / sc$locs
  sdata <- list(y = data$y / sc$y, X = data$X)
  # the parameters the optimizer sees (logs, or the values themselves) from
  # the scaled problem's, and back
  to_par <- function(v) {
    lg <- model$log[names(v)]
    v[lg] <- log(v[lg])
    v
  }
  from_par <- function(par) {
    lg <- model$log[names(par)]
    par[lg] <- exp(par[lg])
    par
  }
  # the model on the scaled locations (a sphere's radius scales with them)
  smodel <- model$scaled(sc)

  # bounds (natural scale), then their logs on the scaled problem
  lower <- model$check(lower, "lower")
  upper <- model$check(upper, "upper")
  fixed <- model$expand(fixed)
  lo <- model$lower(fac)
  hi <- model$upper(fac)
  lo[intersect(names(lower), pnames)] <- lower[intersect(names(lower), pnames)]
  hi[intersect(names(upper), pnames)] <- upper[intersect(names(upper), pnames)]
  if (any(lo >= hi)) {
    stop("`lower` must be below `upper` (", paste(pnames[lo >= hi], collapse = ", "), ")",
         call. = FALSE)
  }
  fixed <- fixed[intersect(names(fixed), pnames)]
  free <- !pnames %in% names(fixed)
  llo <- to_par(lo / fac)
  lhi <- to_par(hi / fac)

  evals <- new.env(parent = emptyenv())
  evals$count <- 0L
  evals$best <- NULL
  evals$best_par <- NULL
  natural <- function(par) stats::setNames(from_par(stats::setNames(par, pnames)) * fac, pnames)
  interrupted <- function(e) {
    best <- if (!is.null(evals$best_par)) natural(evals$best_par) else
      if (!is.null(e$parameters)) e$parameters[pnames] * fac else NULL
    cond <- structure(
      class = c("gp_fit_interrupt", "interrupt", "condition"),
      list(message = paste0("gp_fit() was interrupted", if (length(best)) {
             paste0("; best parameters so far: ",
                    paste(names(best), signif(best, 6), sep = " = ", collapse = ", "))
           }), call = NULL, parameters = best,
           loglik = if (!is.null(evals$best)) evals$best$loglik - n * log(sc$y) else NA_real_,
           evaluations = evals$count))
    signalCondition(cond)
    invokeRestart("abort")     # as R does with an interrupt nobody handles
  }
  tryCatch({
    st <- gp_start(slocs, sdata, smodel, gp_scale_start(start, fac, pnames), control,
                   backend, fixed = fixed / fac[names(fixed)],
                   bounds = list(lower = lo / fac, upper = hi / fac), report = report)
    par0 <- to_par(st[pnames])
    par0[names(fixed)] <- to_par(fixed / fac[names(fixed)])
    par0[free] <- pmin(pmax(par0[free], llo[free]), lhi[free])
    # the problem with its neighbours in the coordinates scaled by the ranges
    # and rotated by the angles of parameters th: the starting ones (GpGp's
    # way), for Vecchia the estimates' as well (below)
    problem_at <- function(th) {
      p <- gp_problem(slocs, sdata$y, sdata$X, method, control, backend,
                      range = model$neighbor_range(th), angles = if (A) unname(th[at_angle]))
      p$range_groups <- model$range_groups
      p
    }
    prob <- problem_at(from_par(par0))
    if (isTRUE(prob$duplicates) && from_par(par0)[["nugget"]] == 0) gp_check_duplicates(prob, 0)
    t_start <- proc.time()[["elapsed"]]
    make_kernel <- smodel$kernel
    # the problem at these parameters' angles (anisotropic fits)
    rotated <- function(p, theta) if (A) gp_rotate_problem(p, unname(theta[at_angle])) else p
    # the search runs on the search problem (fewer probes), the polish on prob
    evals$prob <- gp_search_problem(prob, estimate_smoothness)
    # the last evaluation is kept under its parameters and probe count
    key_of <- function(par) paste(c(format(par, digits = 17), ncol(evals$prob$probes)),
                                  collapse = ",")
    evaluate <- function(par, fisher = FALSE) {
      key <- key_of(par)
      if (!fisher && identical(evals$key, key)) return(evals$value)
      theta <- from_par(par)
      res <- gp_evaluate(rotated(evals$prob, theta), make_kernel(theta), theta[["nugget"]],
                         gradient = TRUE, fisher = fisher, smoothness = estimate_smoothness)
      evals$count <- evals$count + 1L
      evals$key <- key
      evals$value <- res
      if (is.null(evals$best) || res$loglik > evals$best$loglik) {
        evals$best <- res
        evals$best_par <- par
      }
      th <- natural(par)
      report(sprintf("gp_fit %3d: loglik %.4f  %s  (%s%.1f s)",
                     evals$count, res$loglik - n * log(sc$y),
                     paste(names(th), sprintf("%.5g", th), collapse = "  "),
                     if (method == "dense") "" else sprintf("%d CG iterations, ",
                                                            res$cg_iterations),
                     proc.time()[["elapsed"]] - t_start))
      res
    }
    # a covariance matrix that is not positive definite (a nugget far too
    # small for a smooth kernel) is a step too far: a large objective sends
    # the line search back
    full <- function(p) { out <- par0; out[free] <- p; out }
    safe <- function(p) {
      tryCatch(evaluate(full(p)), error = function(e) {
        if (is.null(evals$best) || !identical(conditionMessage(e), gp_not_positive_definite)) stop(e)
        NULL
      })
    }
    fn <- function(p) {
      r <- safe(p)
      if (is.null(r)) return(-evals$best$loglik + 1e6 * (1 + sum((p - evals$best_par[free])^2)))
      -r$loglik
    }
    gr <- function(p) {
      r <- safe(p)
      if (is.null(r)) return(2e6 * (p - evals$best_par[free]))
      -r$gradient[free]
    }
    convergence <- NULL
    par <- par0
    if (any(free) && method %in% gp_iterative_methods) {
      # Fisher scoring (GpGp's search) on the search problem: the Fisher
      # information knows the ridge along which variance and range trade
      # off, where L-BFGS-B on a stochastic gradient crawls, and it stops at
      # the gradient's own standard errors
      par <- gp_polish(par0, free, llo, lhi, gtol, evaluate, dense = FALSE,
                       steps = gp_search_steps, final_fisher = FALSE, halvings = 2L)$par
    } else if (any(free)) {
      evaluate(par0)
      opt <- stats::optim(par0[free], fn = fn, gr = gr, method = "L-BFGS-B", lower = llo[free],
                          upper = lhi[free], control = ctl)
      par <- full(opt$par)
      if (opt$convergence == 1L) convergence <- "iteration limit reached"
    }
    # Fisher-scoring steps from where the search stopped until the projected
    # gradient is below the tolerance (for the iterative methods, below it
    # plus 3 standard errors of the stochastic gradient)
    if (!identical(evals$prob, prob)) {
      # the polish and the fit's figures with all the probes: its objective
      # differs from the search's, whose best values no longer compare
      evals$prob <- prob
      evals$best <- NULL
    }
    polish <- if (polish) {
      out <- gp_polish(par, free, llo, lhi, gtol, evaluate, dense = method == "dense",
                       steps = if (is.null(convergence)) 20L else 0L)
      th1 <- from_par(out$par)
      if (method == "vecchia" && gp_neighbors_moved(model, from_par(par0), th1, at_angle)) {
        # Vecchia's neighbours (and so its likelihood) come from the starting
        # metric: found again at the estimates, the polish goes on from there
        prob <- problem_at(th1)
        evals$prob <- prob
        evals$best <- NULL
        out <- gp_polish(out$par, free, llo, lhi, gtol, evaluate, dense = FALSE)
      }
      out
    } else {
      # the start-value fit: no Fisher information, no steps after L-BFGS-B
      list(par = par, final = evaluate(par), pg = NULL, convergence = "converged")
    }
    if (is.null(convergence)) convergence <- polish$convergence
    list(par = polish$par, final = polish$final, prob = prob, evaluations = evals$count,
         convergence = convergence, pg = polish$pg, start = natural(par0))
  }, interrupt = interrupted) -> res

  final <- res$final
  angles_free <- A && all(free[at_angle]) && all(is.infinite(c(llo[at_angle], lhi[at_angle])))
  perm <- if (angles_free && A == 1L) {
    gp_axes_by_range(res$par, match(c("range1", "range2"), pnames), free, llo, lhi)
  }
  if (!is.null(perm)) {
    # (range2, range1, angle + pi/2) is the same covariance: the larger range first
    res$par <- stats::setNames(res$par[perm], names(res$par))
    res$par[at_angle] <- res$par[at_angle] + pi / 2
    final$gradient <- stats::setNames(final$gradient[perm], names(final$gradient))
    if (!is.null(final$fisher)) final$fisher[] <- final$fisher[perm, perm]
    if (!is.null(res$pg)) {
      pg <- numeric(k)
      pg[free] <- res$pg
      res$pg <- pg[perm][free]
    }
  }
  on_bound <- gp_at_bounds(res$par, free, llo, lhi, final$gradient, pnames)
  if (angles_free) {
    # the angles reported in their ranges: the same covariance, whose
    # derivatives in the angles change sign with the angles
    # (gp_canonical_angles()); fixed or bounded angles stay as they are
    canon <- gp_canonical_angles(unname(res$par[at_angle]))
    res$par[at_angle] <- canon$angles
    flip <- rep(1, k)
    flip[at_angle] <- canon$sign
    final$gradient <- final$gradient * flip
    if (!is.null(final$fisher)) final$fisher <- final$fisher * outer(flip, flip)
    if (!is.null(res$pg)) res$pg <- res$pg * flip[free]
  }
  coefs <- natural(res$par)
  info <- final$fisher
  lnames <- ifelse(model$log, paste0("log_", pnames), pnames)
  vc <- matrix(0, k, k, dimnames = list(lnames, lnames))
  unidentified <- FALSE
  if (any(free) && !is.null(info)) {
    inv <- gp_inverse_information(info[free, free, drop = FALSE],
                                  gp_param_kind(pnames[free]) == "angle")
    vc[free, free] <- inv
    unidentified <- isTRUE(attr(inv, "angles"))
  }
  prob <- res$prob
  # the fit keeps its problem for predict(), in the user's units (an
  # anisotropic fit's points rotated by its angles, as predict() rotates new
  # ones), and not the probes' GPU copy (400 MB at n = 1e6)
  prob$probes_device <- NULL
  if (A) {
    locs <- gp_rotate_points(locs, unname(coefs[at_angle]))
    prob$aniso <- NULL
  }
  prob <- gp_problem_locs(prob, locs[prob$order, , drop = FALSE])
  prob$y <- data$y[prob$order]
  kern <- model$kernel(coefs)
  convergence <- res$convergence
  if (length(on_bound) && grepl("^converged", convergence)) {
    convergence <- paste0("converged at a bound: ",
                          paste0(names(on_bound), " (", on_bound, ")", collapse = ", "))
  }
  structure(list(coefficients = coefs,
                 beta = final$beta * sc$y, vcov_beta = gp_vcov_beta(final$xsx, sc$y),
                 loglik = final$loglik - n * log(sc$y),
                 loglik_se = final$se, gradient = final$gradient,
                 projected_gradient = res$pg, vcov_log = vc, kernel = kern,
                 nugget = coefs[["nugget"]], estimate_smoothness = estimate_smoothness,
                 log_scale = model$log,
                 method = method, n = n, locs = locs, y = data$y,
                 X = data$X, X_default = TRUE, alpha = final$alpha / sc$y,
                 six = final$six / sc$y^2, prob = prob,
                 evaluations = res$evaluations, cg_iterations = final$cg_iterations,
                 convergence = convergence, at_bound = on_bound, gtol = gtol,
                 lower = stats::setNames(lo, pnames), upper = stats::setNames(hi, pnames),
                 fixed = fixed, start = res$start, scales = sc, backend = backend,
                 angles = if (A) unname(coefs[at_angle]),
                 angle_unidentified = unidentified),
            class = "gp_fit")
}
