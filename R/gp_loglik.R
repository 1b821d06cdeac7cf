# The Gaussian log-likelihood with a profiled linear mean, its gradient in
# the log parameters and the Fisher information: by dense Cholesky, or by
# preconditioned conjugate gradients and stochastic Lanczos quadrature on the
# tiled or H2 operators.

#' Gaussian-process log-likelihood
#'
#' The log-likelihood of \eqn{y \sim N(X\beta, \Sigma)} with
#' \eqn{\Sigma = K + \tau^2 I}, \eqn{K} the covariance of `kernel` at `locs` and
#' \eqn{\tau^2} the `nugget`, at the generalized-least-squares estimate of
#' \eqn{\beta} (the profile likelihood, as `fields::mKrig` and GpGp report):
#' \deqn{\ell = -\tfrac12\left(n \log 2\pi + \log\det\Sigma + (y - X\hat\beta)^\top
#' \Sigma^{-1}(y - X\hat\beta)\right).}
#'
#' @section Methods:
#' `"dense"` forms \eqn{\Sigma} with [kernel_matrix()] and uses its Cholesky
#' factor: exact, \eqn{O(n^3)}, the reference. On a GPU, \eqn{\Sigma}, its
#' factor (cuSOLVER) and the gradient's \eqn{\Sigma^{-1}} never leave the
#' device: at \eqn{n = 10^4} an evaluation takes about 20 ms on an H100
#' (0.1 s with the gradient), and \eqn{n} up to 46340 is possible where the
#' GPU's memory holds two (with the Fisher information, five) \eqn{n \times n}
#' matrices. `"tiled"` (any dimension) and
#' `"h2"` (2 or 3 dimensions) never form \eqn{\Sigma}: products with it come
#' from the tiled reductions ([kernel_matvec()], exact) or from an
#' [h2_matrix()] (approximate, \eqn{O(n)}). Solves use conjugate gradients
#' preconditioned by a Vecchia (FSAI) factor \eqn{G}, \eqn{G \Sigma G^\top
#' \approx I}, built from each point's `neighbors` nearest preceding points
#' in a random order ([knn()] finds them); all right-hand sides and probes
#' share each operator call. The log-determinant is
#' \eqn{\log\det\Sigma = \log\det(G\Sigma G^\top) - 2\log\det G}: the second
#' term is exact, the first is estimated by stochastic Lanczos quadrature
#' from the same conjugate-gradient runs on `probes` Rademacher vectors. Its
#' standard error over the probes is reported (`logdet_se`; the
#' log-likelihood's is half of it); `error` is three standard errors. The
#' probes are fixed by `control$seed`, so the result is a smooth function of
#' the parameters. For `"h2"`, the first-order effect of the H2
#' approximation on the log-likelihood is estimated with exact products on
#' `control$h2_check_rows` sampled rows (`h2_bias`, `h2_bias_se`) and counted
#' in `error` (\eqn{3\sqrt{se^2 + se_{H2}^2} + |bias|}); the log-likelihood
#' itself is not corrected. `"auto"` chooses as "Choosing the method"
#' says. In 3 dimensions the default H2 matrices (order 4) have
#' product errors near \eqn{3 \times 10^{-4}}, which can move the
#' log-likelihood by several nats when the nugget is small (the reported
#' `error` shows it): `"h2"` there is a choice to make with
#' `control$h2` (a higher `order`, or `tol`). `gradient_se` counts the
#' probes only: for `"h2"` the approximation moves the gradient too (about
#' 1% at the default order in 3 dimensions, a few standard errors), which
#' it does not include.
#'
#' `"vecchia"` is the Vecchia approximation itself (as GpGp's
#' `vecchia_meanzero_loglik`, profiled over the GLS mean): each observation,
#' in the same random order (`control$seed`), conditioned on its
#' `control$neighbors` nearest preceding observations, so that
#' \eqn{\Sigma^{-1} \approx G^\top G}. Its log-likelihood, gradient and
#' Fisher information (that of the rows' conditionals, as GpGp's) are exact
#' for that model, at \eqn{O(n m^3)} on the CPU's threads, with no probes
#' (`error` is 0: the difference from the exact likelihood is not
#' estimated). It is a fast CPU method and a cross-check of the others;
#' Guinness (2018) shows a max-min order approximates better than a random
#' one at the same `neighbors`. A fit's predictions use
#' \eqn{G^\top G} for the mean too.
#'
#' On a GPU the Vecchia factor is computed there, and the conjugate-gradient
#' iterations run there with every vector on the device (the H2 or tiled
#' products included; the H2 matrix's blocks stored where they fit): at
#' \eqn{n = 10^6} in 2D (Matérn 3/2, range 0.02, nugget 0.01) an evaluation
#' at new parameters takes about 2.4 s on an H100 (1.9 s with 10 probes), a
#' standalone call, which also orders the points, finds the neighbours
#' (0.75 s) and draws the probes, about 3.7 s.
#'
#' @section Choosing the method:
#' On a GPU, `method = "auto"` is `"dense"` up to `control$dense_max` points
#' (by default 20000), then `"h2"` in 2 dimensions from `control$h2_min`
#' points (by default 50000; a product with the tiled operator is
#' \eqn{O(n^2)} per column: at \eqn{n = 10^6} about 2 s per column in double
#' precision on an H100), else `"tiled"`.
#'
#' On the CPU it goes by measured speed. Up to 1000 points it is `"dense"`.
#' Above, the first time in the session (per number of dimensions) one
#' evaluation with the gradient of `"dense"` and one of the iterative method
#' otherwise used (`"h2"` in 2 dimensions, from `control$h2_min` points when
#' that is given; else `"tiled"`) are timed at 1000 points (a Matérn 3/2
#' problem with default [gp_control()] settings; about 0.5 s on 2 cores), and the
#' method predicted to be faster at `n` is used: the dense time grown as
#' \eqn{n^3}, the tiled as \eqn{n^2}, the H2 as \eqn{n}. With R's reference
#' BLAS on two cores that is `"h2"` from 1000 points in 2D (at 3000 points an
#' evaluation takes 0.7 s against 6.7 s dense); a fast multithreaded BLAS
#' moves the crossing up. The timings are kept for the session, and are
#' taken when first needed: on a machine busy with other work they lean to
#' `"dense"`. Giving `control$dense_max` restores a fixed rule on the CPU:
#' `"dense"` up to it, beyond it `"h2"` in 2D (from `control$h2_min` points,
#' when given) else `"tiled"`. The iterative methods' cost depends on the
#' kernel and parameters (conjugate-gradient iterations), which the timed
#' problem stands for only roughly; near the crossing the two methods take
#' similar times.
#'
#' @section Locations on the sphere:
#' With `coords = "lonlat"`, each location (longitude, latitude in degrees)
#' becomes a point on a sphere of `radius` in 3D, and distances are chordal
#' (straight-line) distances, \eqn{2R\sin(\theta/2)} for the central angle
#' \eqn{\theta}: every kernel of this package stays positive definite with
#' them, which is not true of great-circle distance for the Matérn kernel
#' with smoothness above 1/2 (Gneiting 2013, Bernoulli). The range is in the
#' unit of `radius` (km by default); the methods work on the 3D points (`"h2"`
#' as in 3 dimensions). A fit keeps the choice: `predict()` and
#' `gp_simulate(fit, ...)` take new locations as longitude and latitude.
#'
#' Chordal distance is the default because it is valid for every kernel.
#' `distance = "great_circle"` uses the great-circle distance
#' \eqn{R\theta} instead, where it is valid: for the exponential kernel
#' (`"exponential"`, or `"matern"` with smoothness 0.5) only, since
#' great-circle distance keeps the Matérn kernel positive definite on the
#' sphere for smoothness \eqn{\le 1/2} alone (Gneiting 2013); any other
#' kernel or smoothness, or an estimated smoothness, is an error. The
#' kernel becomes `gk_kernel("exponential_great_circle", range, variance,
#' radius)`, a function of the same 3D points' chordal distance, so every
#' method and backend runs as with chordal distance. Its `"h2"` matrices
#' also see a kink at antipodal pairs, of size \eqn{e^{-\pi R / \ell}}: with
#' ranges above about \eqn{R / 5.9} (1090 km on the Earth) it is kept out of
#' their low-rank blocks, which makes them several times slower (see
#' [h2_matrix()]); `"tiled"` does not depend on the range.
#'
#' @section Geometric anisotropy:
#' With `ranges = "anisotropic"` (2 or 3 columns, `coords = "euclidean"`) the
#' covariance is \eqn{k(\|A(x - x')\|)} with
#' \eqn{A = \mathrm{diag}(1/\rho_k)\, R^\top}: the locations rotated,
#' then each rotated axis divided by its own range, `kernel$range`
#' (\eqn{\rho_1, \rho_2}, and \eqn{\rho_3} in 3D; one value is used for
#' all). The columns of \eqn{R} are the axes of the ranges. In 2D, \eqn{R}
#' turns by `angle`: the axis of \eqn{\rho_1} points `angle` radians
#' counter-clockwise from the first coordinate axis. In 3D,
#' \eqn{R = R_z(\alpha_1) R_y(\alpha_2) R_x(\alpha_3)}
#' (intrinsic z-y'-x'' angles: yaw, pitch, roll), `angle = c(alpha1,
#' alpha2, alpha3)`. Every method works on the rotated points as on any
#' others (neighbours are searched in the rotated coordinates divided by
#' the ranges).
#'
#' @section Gradient:
#' With `gradient = TRUE`, the derivatives in `log(variance)`, the log
#' range(s) and `log(nugget)`:
#' \eqn{\partial\ell = \tfrac12 (\alpha^\top \partial\Sigma\, \alpha -
#' \mathrm{tr}(\Sigma^{-1}\partial\Sigma))}, \eqn{\alpha = \Sigma^{-1}(y - X\hat\beta)}.
#' The range derivative of the kernel is itself a kernel of the package's
#' vocabulary, evaluated by the same reductions (or H2 matrix). Traces are
#' the exact trace of the preconditioner's part plus a stochastic correction
#' on the same probes.
#'
#' A kernel with a range per dimension has one derivative per dimension
#' (`log_range1`, `log_range2`, ...), or one per group of dimensions given by
#' `ranges` (as in [gp_fit()]: `c(1, 1, 2)` moves the first two ranges
#' together); `ranges = "isotropic"` gives one, `log_range`, the derivative in
#' the ranges' common scale. The derivative in a group that is not all the
#' dimensions is the central difference of two kernels with the group's
#' ranges times \eqn{e^{\pm h}}, as for the smoothness below; for the
#' iterative methods its trace is estimated by the probes alone (the
#' preconditioner's exact part needs the kernels on Sigma's points), so its
#' `gradient_se` is larger.
#'
#' With `ranges = "anisotropic"`, the gradient also has the derivatives in
#' the angles (`angle`, or `angle1`, `angle2`, `angle3`; radians, not logs),
#' central differences of two kernels on the points rotated by
#' \eqn{\pm h} (the same device as the groups of ranges, the same accuracy).
#'
#' With `smoothness_gradient = TRUE` (Matérn kernels), also the derivative
#' in `log(smoothness)`: the derivative of the kernel in its smoothness has
#' no closed form, so its operator is the central difference
#' \eqn{(K_{\nu e^h} - K_{\nu e^{-h}}) / 2h}, \eqn{h = 10^{-4}}, of two kernel
#' operators (relative error about \eqn{10^{-9}}), which costs two more
#' products per use and, for the iterative methods, two more factorizations
#' of the preconditioner. Away from the half-integer smoothness values the
#' Matérn kernel needs Bessel functions, which makes every kernel
#' evaluation several times slower.
#'
#' @section Formula kernels:
#' With `kernel = gk_formula(...)` the covariance is
#' \eqn{\Sigma = F + \tau^2 I}, \eqn{F(x_i, x_j)} the formula at its
#' parameters' values (a fit's kernel, `fit$kernel`, is `.variance * (F)` at
#' the estimates, so `gp_loglik()` gives the fit's log-likelihood). The
#' methods `"dense"` and `"tiled"` take formulas (`"auto"` picks between
#' them); `"h2"` and `"vecchia"` evaluate the package's own kernels and give
#' an error. The dense method forms the matrices with the formula's compiled
#' CPU function (on the CPU also for `backend = "gpu"`); the tiled method
#' multiplies through the same reductions as [kernel_matvec()] (on the GPU
#' with the NVRTC-compiled formula) and builds the Vecchia preconditioner on
#' the CPU. The gradient has `log_variance` (the derivative in the log of a
#' factor multiplying \eqn{F}), one entry per formula parameter, `log_<name>`
#' (the derivative in its log) where its value is positive and `<name>` (in
#' the value itself) otherwise, and `log_nugget`. The derivatives of \eqn{F}
#' are symbolic (R's [D()], as [kernel_grad()] takes them), compiled once
#' and applied by the same engines as \eqn{F}; for the tiled method their
#' traces are the preconditioner's exact part plus the probes'.
#' A formula must be a covariance (positive definite); one that is not
#' (`sqdist(x, y)`) makes the Cholesky factorization or conjugate gradients
#' fail with an error.
#'
#' @param locs Numeric matrix of locations, one row per observation. The
#'   Gaussian-process functions call points `locs` and `newlocs`, and the
#'   design matrix `X`, as GpGp and fields do; elsewhere points are `x`, `y`.
#' @param y Numeric vector of observations, without NA.
#' @param X Design matrix of the linear mean (`nrow(locs)` rows); `NULL` is
#'   a constant mean (an intercept), a matrix with no columns a zero mean.
#' @param kernel A [gk_kernel()]: `"exponential"`, `"matern"`, `"gaussian"`,
#'   `"cauchy"` or `"inverse_multiquadric"`, with its variance and range; a
#'   family name stands for that family with variance and range 1. Or a
#'   formula from [gk_formula()], which is then the covariance \eqn{K}
#'   itself (see Formula kernels).
#' @param nugget The variance added to the diagonal (non-negative).
#' @param method `"auto"`, `"dense"`, `"tiled"`, `"h2"` or `"vecchia"` (see Methods).
#' @param gradient Also compute the gradient in the log parameters.
#' @param smoothness_gradient With `gradient`, also the derivative in
#'   `log(smoothness)` (Matérn kernels; see Gradient).
#' @param control Settings from [gp_control()].
#' @param backend `"auto"`, `"gpu"` or `"cpu"`; see [gk_backend()].
#' @param coords `"euclidean"` (the default) or `"lonlat"`: `locs` as longitude
#'   and latitude in degrees (see Locations on the sphere).
#' @param radius The sphere's radius for `coords = "lonlat"`, in the unit the
#'   range is given in (default 6371: the Earth's mean radius in km).
#' @param distance `"chordal"` (the default) or `"great_circle"`: the distance
#'   between lon/lat locations (see Locations on the sphere); great-circle
#'   distance needs the exponential kernel.
#' @param ranges Which dimensions share a range, for the gradient: `NULL`
#'   (one derivative per range of `kernel`), `"isotropic"`, `"per_dimension"`
#'   or one group number per column of `locs` (see Gradient); or
#'   `"anisotropic"`: the kernel's ranges are those of the axes rotated by
#'   `angle` (see Geometric anisotropy).
#' @param angle With `ranges = "anisotropic"`, the rotation in radians: one
#'   angle for 2-column `locs`, three (`angle1`, `angle2`, `angle3`) for 3
#'   columns; `NULL` is no rotation (zeros).
#' @return An object of class `gp_loglik`: a list with `loglik`, `se` (its
#'   standard error), `error` (three standard errors), `logdet`, `logdet_se`,
#'   `quadratic`, `beta`, `xsx` (\eqn{X^\top\Sigma^{-1}X}, whose inverse is
#'   the GLS covariance of `beta`), `gradient` (named, when asked), `gradient_se`,
#'   `cg_iterations` (largest over right-hand sides), `probes`, `method`, `n`;
#'   for the iterative methods `timing` (seconds: total, setup of the
#'   preconditioner and operators, `neighbors`: waiting for the neighbour
#'   search that ran alongside that setup, operator products, preconditioner
#'   products, and `solver`: conjugate gradients run on the GPU with their
#'   products) and for `"h2"` `h2_bias`, `h2_bias_se`.
#' @examples
#' locs <- matrix(runif(400), ncol = 2)
#' k <- gk_kernel("matern", range = 0.2, smoothness = 1.5)
#' y <- gp_simulate(locs, k, nugget = 0.1)
#' gp_loglik(locs, y, kernel = k, nugget = 0.1, method = "dense")
#' gp_loglik(locs, y, kernel = k, nugget = 0.1, method = "tiled", gradient = TRUE,
#'           backend = "cpu")
#' @export
gp_loglik <- function(locs, y, X = NULL, kernel, nugget, method = "auto", gradient = FALSE,
                      smoothness_gradient = FALSE, control = gp_control(),
                      coords = "euclidean", radius = 6371, distance = "chordal", ranges = NULL,
                      angle = NULL, backend = NULL) {
  coords <- gp_check_coords(coords, radius, distance)
  locs <- gp_locations(locs, coords)
  groups <- if (!is.null(ranges)) gp_range_groups(ranges, ncol(locs))
  gp_check_coords_ranges(coords, groups)
  count <- length(gp_angle_names(groups))
  if (count) {
    angle <- gp_check_angles(if (is.null(angle)) rep(0, count) else angle, count)
  } else if (!is.null(angle)) {
    stop("`angle` needs ranges = \"anisotropic\"", call. = FALSE)
  }
  if (missing(kernel)) stop("`kernel` is missing: give a gk_kernel() or a family name", call. = FALSE)
  if (missing(nugget)) stop("`nugget` is missing: give the variance added to the diagonal",
                            call. = FALSE)
  kernel <- gp_check_kernel(kernel, ncol(locs), formula = TRUE)
  formula <- inherits(kernel, "gk_formula")
  if (formula) {
    if (!is.null(groups)) stop("`ranges` is for kernels with ranges, not formulas", call. = FALSE)
    kernel <- gp_formula_loglik_kernel(kernel)
  } else {
    kernel <- gp_coords_kernel(kernel, coords, isTRUE(smoothness_gradient))
  }
  nugget <- gp_check_nugget(nugget)
  data <- gp_check_data(y, X, nrow(locs))
  if (!inherits(control, "gp_control")) stop("`control` must come from gp_control()", call. = FALSE)
  backend <- gk_backend(backend)
  method <- if (formula) gp_formula_method(method, nrow(locs), ncol(locs), control, backend) else
    gp_method(method, nrow(locs), ncol(locs), control, backend)
  if (isTRUE(smoothness_gradient) && !identical(kernel$name, "matern")) {
    stop("`smoothness_gradient = TRUE` needs a matern kernel", call. = FALSE)
  }
  # on the GPU the H2 build overlaps the host's neighbour search (gp_problem())
  prob <- gp_problem(locs, data$y, data$X, method, control, backend, kernel$range,
                     angles = if (count) angle, overlap = method == "h2" && backend == "gpu")
  prob$range_groups <- groups
  gp_check_duplicates(prob, nugget)
  gp_evaluate(prob, kernel, nugget, gradient = isTRUE(gradient),
              smoothness = isTRUE(smoothness_gradient))
}

gp_method <- function(method, n, dim, control, backend) {
  method <- gk_match_choice(method, c("auto", "dense", "tiled", "h2", "vecchia"), "method")
  if (method == "auto") method <- gp_auto_method(n, dim, control, backend)
  if (method == "h2" && !dim %in% c(2L, 3L)) {
    stop("method = \"h2\" needs locations in 2 or 3 dimensions; use \"tiled\"", call. = FALSE)
  }
  method
}

# `smoothness`: also the derivative in log(smoothness) (Matern kernels).
gp_evaluate <- function(prob, kernel, nugget, gradient = FALSE, fisher = FALSE,
                        smoothness = FALSE) {
  if (prob$method == "dense") {
    return(gp_evaluate_dense(prob, kernel, nugget, gradient, fisher, smoothness))
  }
  if (prob$method == "vecchia") {
    return(gp_evaluate_vecchia(prob, kernel, nugget, gradient, fisher, smoothness))
  }
  gp_evaluate_iterative(prob, kernel, nugget, gradient, fisher, smoothness)
}

gp_result <- function(prob, loglik_parts, beta, grad, grad_se, fisher, iterations, extra = list(),
                      h2 = NULL) {
  n <- prob$n
  loglik <- -0.5 * (n * log(2 * pi) + loglik_parts$logdet + loglik_parts$quadratic)
  se <- loglik_parts$logdet_se / 2
  error <- 3 * se
  if (!is.null(h2)) {
    # the H2 approximation's effect is not corrected, only counted in the error
    error <- 3 * sqrt(se^2 + h2$se^2) + abs(h2$bias)
    extra$h2_bias <- h2$bias
    extra$h2_bias_se <- h2$se
  }
  structure(c(list(loglik = loglik, se = se, error = error, logdet = loglik_parts$logdet,
                   logdet_se = loglik_parts$logdet_se, quadratic = loglik_parts$quadratic,
                   beta = beta, gradient = grad, gradient_se = grad_se, fisher = fisher,
                   cg_iterations = iterations,
                   probes = if (prob$method %in% c("dense", "vecchia")) 0L else
                     prob$control$probes,
                   method = prob$method, n = n), extra),
            class = "gp_loglik")
}

# The error when Sigma's Cholesky factorization fails (the GPU's is the same
# text, GP_NOT_POSITIVE_DEFINITE_MESSAGE in src/gp/gp.h).
gp_not_positive_definite <- paste(
  "the covariance matrix is not positive definite (duplicated or nearly duplicated",
  "locations need a larger nugget)")

# GLS coefficients from Sigma^-1 X and Sigma^-1 y.
gp_gls_beta <- function(X, SiX, y, Siy) {
  if (!ncol(X)) return(numeric(0))
  beta <- solve(crossprod(X, SiX), crossprod(X, Siy))
  stats::setNames(drop(beta), colnames(X))
}

# Wraps f so that its own time (not its arguments', which are evaluated
# first) accumulates in clock[[name]].
gp_timed <- function(f, clock, name) {
  force(f)
  function(...) {
    args <- list(...)
    t0 <- proc.time()[["elapsed"]]
    on.exit(clock[[name]] <- clock[[name]] + proc.time()[["elapsed"]] - t0)
    do.call(f, args)
  }
}

gp_evaluate_iterative <- function(prob, kernel, nugget, gradient, fisher, smoothness) {
  ctl <- prob$control
  need_d <- gradient || fisher
  clock <- new.env(parent = emptyenv())
  for (nm in c("setup", "neighbors", "operator", "preconditioner", "solver")) clock[[nm]] <- 0
  t_begin <- proc.time()[["elapsed"]]
  terms <- if (need_d) {
    gp_derivative_terms(kernel, smoothness, prob$range_groups, prob$aniso)
  } else list()
  # the operator first: a deferred neighbour search (gp_problem()) goes on
  # meanwhile, and only the preconditioner needs it
  job <- prob$neighbors_job
  if (!is.null(job)) on.exit(gp_neighbors_join(job, cancel = TRUE))
  op <- gp_timed(gp_operator, clock, "setup")(prob, kernel, nugget, terms)
  prob <- gp_timed(gp_problem_neighbors, clock, "neighbors")(prob, nugget = nugget)
  # on the GPU the factor stays there for the solver (freed on exit)
  pre <- gp_timed(gp_preconditioner, clock, "setup")(prob, kernel, nugget, terms, keep = TRUE)
  on.exit(pre$free(), add = TRUE)
  op$mult <- gp_timed(op$mult, clock, "operator")
  op$mult_rows <- gp_timed(op$mult_rows, clock, "operator")
  op$dmult <- lapply(op$dmult, gp_timed, clock = clock, name = "operator")
  pre$G <- gp_timed(pre$G, clock, "preconditioner")
  pre$Gt <- gp_timed(pre$Gt, clock, "preconditioner")
  A <- function(V) pre$G(op$mult(pre$Gt(V)))
  cg_solve <- gp_cg_solver(prob, op, pre, A, clock)
  m <- ncol(prob$probes)
  p <- ncol(prob$X)
  data_cols <- seq_len(p + 1L)
  probe_cols <- p + 1L + seq_len(m)
  # the probes stop at ctl$probe_tol, the data at ctl$tol (gp_control())
  # (y's coefficients are tracked too: its longer run checks the operator's sign);
  # G [y X] is formed by the solver. Without derivatives only the data's
  # columns of G' x are read whole, the probes' at the H2 check's rows.
  check_rows <- if (prob$method == "h2") gp_h2_check_rows(prob)
  cg <- cg_solve(list(cbind(prob$y, prob$X), gp_probe_block(prob)), track = c(1L, probe_cols),
                 gt_b = need_d, tol = c(rep(ctl$tol, length(data_cols)), rep(ctl$probe_tol, m)),
                 g_blocks = 1L, gt_x_cols = if (!need_d) length(data_cols), rows = check_rows)
  if (!cg$converged) {
    warning("conjugate gradients did not converge in ", ctl$maxit, " iterations; the ",
            "log-likelihood is inaccurate (raise control$maxit or the nugget)", call. = FALSE)
  }
  W <- cg$gt_x[, data_cols, drop = FALSE]                 # Sigma^-1 [y X]
  beta <- gp_gls_beta(prob$X, W[, -1L, drop = FALSE], prob$y, W[, 1L])
  alpha <- W[, 1L] - if (p) W[, -1L, drop = FALSE] %*% beta else 0
  resid <- prob$y - if (p) prob$X %*% beta else 0
  quads <- vapply(seq_len(m), function(j) {
    gp_lanczos_logquad(cg$alpha[, j + 1L], cg$beta[, j + 1L], cg$iterations[probe_cols[j]], prob$n)
  }, numeric(1))
  y_steps <- cg$iterations[1L]
  if (anyNA(quads) ||
      (y_steps > 0L && min(gp_lanczos_eigen(cg$alpha[, 1L], cg$beta[, 1L], y_steps)$values) <= 0)) {
    gp_stop_indefinite(prob$method, max(cg$iterations), ritz = TRUE)
  }
  parts <- list(logdet = pre$logdet + mean(quads), logdet_se = stats::sd(quads) / sqrt(m),
                quadratic = sum(resid * alpha))
  # S = G' A^-1 Z ~ Sigma^-1 Z, formed only where all of it is needed
  h2 <- if (prob$method == "h2") {
    gp_h2_bias(prob, kernel, nugget, op, drop(alpha), check_rows,
               cg$gt_x_rows[, probe_cols, drop = FALSE])
  }
  grad <- grad_se <- info <- NULL
  if (need_d) {
    # With S = G' A^-1 Z (gt_x's probe columns), U = G'Z (gt_b's) and
    # V = S - U = G'(A^-1 - I) Z, the probe sums are colSums(V * M) =
    # colSums(S * M) - colSums(U * M): no n x m block is copied or subtracted
    # (each is 0.4 GB at n = 1e6). The derivative operators multiply
    # [alpha, G'B] (the data columns of gt_b ride along, unused).
    probe_dots <- function(M, cols) {
      gp_col_dots(cg$gt_x, probe_cols, M, cols) - gp_col_dots(cg$gt_b, probe_cols, M, cols)
    }
    DB <- lapply(op$dmult, function(f) f(list(matrix(alpha), cg$gt_b)))
    du_cols <- 1L + probe_cols                         # U's columns in DB
    # trace(Sigma^-1 M) = trace(G M G') + trace((A^-1 - I) G M G'), the second by probes
    tr_inv <- pre$trace_GG + probe_dots(cg$gt_b, probe_cols)
    aa <- sum(alpha^2)
    quad_k <- sum(alpha * resid) - nugget * aa
    g_var <- 0.5 * (quad_k - (prob$n - nugget * tr_inv))
    g_nug <- 0.5 * nugget * (aa - tr_inv)
    g_d <- lapply(seq_along(DB), function(j) {
      # trace(G D G') exact, or by the probes themselves (U' D U) where the
      # preconditioner has none (gp_preconditioner())
      tr_GDG <- pre$trace_GDG[[j]]
      if (is.na(tr_GDG)) tr_GDG <- gp_col_dots(cg$gt_b, probe_cols, DB[[j]], du_cols)
      0.5 * (sum(alpha * DB[[j]][, 1L]) - (tr_GDG + probe_dots(DB[[j]], du_cols)))
    })
    # in the order of the parameters: variance, ranges, nugget, smoothness
    names(g_d) <- names(terms)
    samples <- do.call(cbind, gp_param_order(g_var, g_d, g_nug))
    names <- colnames(samples)
    grad <- stats::setNames(colMeans(samples), names)
    grad_se <- stats::setNames(apply(samples, 2L, stats::sd) / sqrt(m), names)
    if (fisher) {
      # the first gp_fisher_probe_count probes, all of them where those leave a
      # diagonal entry's relative standard error above gp_fisher_rel_se
      for (q in unique(c(min(m, gp_fisher_probe_count), m))) {
        cols <- probe_cols[seq_len(q)]
        S <- cg$gt_x[, cols, drop = FALSE]
        U <- cg$gt_b[, cols, drop = FALSE]
        DU <- lapply(DB, function(M) M[, 1L + cols, drop = FALSE])
        DS <- lapply(op$dmult, function(f) f(S))
        info <- gp_fisher_probes(prob, pre, op, cg_solve, U, DU, S, DS, nugget, names)
        if (max(attr(info, "rel_se")) <= gp_fisher_rel_se) break
      }
      attr(info, "rel_se") <- NULL
    }
  }
  timing <- c(total = proc.time()[["elapsed"]] - t_begin, setup = clock$setup,
              neighbors = clock$neighbors, operator = clock$operator,
              preconditioner = clock$preconditioner, solver = clock$solver)
  gp_result(prob, parts, beta, grad, grad_se, info, max(cg$iterations),
            list(alpha = drop(alpha)[order(prob$order)], timing = timing,
                 xsx = crossprod(prob$X, W[, -1L, drop = FALSE]),
                 six = W[order(prob$order), -1L, drop = FALSE]), h2 = h2)
}

# The first-order effect of the H2 approximation on the log-likelihood,
# l_exact - l_H2 ~ (alpha' E alpha - tr(Sigma^-1 E)) / 2 with E = K - K_H2,
# estimated with exact products (tiled reductions) on `h2_check_rows` sampled
# rows (all rows when n is at most that): tr(Sigma^-1 E) by the probes,
# z' Sigma^-1 E z = (Sigma^-1 z)' (E z). Its standard error covers both the
# rows and the probes. This is what keeps the reported error of the "h2"
# method honest; it costs one H2 product and rows x n exact kernel pairs
# for each of the 1 + probes columns.
# (S: the rows `rows`, gp_h2_check_rows(), of S = G' A^-1 Z; the n x 51
# blocks are never copied or bound together here: at n = 1e6 each copy costs
# 0.3 s.)
gp_h2_bias <- function(prob, kernel, nugget, op, alpha, rows, S) {
  n <- prob$n
  Z <- prob$probes
  Z_product <- gp_probe_block(prob)
  r <- length(rows)
  at <- prob$locs[rows, , drop = FALSE]
  exact <- cbind(kernel_matvec(at, prob$locs, alpha, kernel, backend = prob$backend),
                 kernel_matvec(at, prob$locs, Z_product, kernel, backend = prob$backend))
  approx <- op$mult_rows(list(matrix(alpha), Z_product), rows) -
    nugget * cbind(alpha[rows], Z[rows, , drop = FALSE])
  E <- exact - approx
  # per sampled row i: alpha_i (E alpha)_i - mean_j S_ij (E z_j)_i
  per_row <- 0.5 * (alpha[rows] * E[, 1L] - rowMeans(S * E[, -1L, drop = FALSE]))
  per_probe <- 0.5 * (n / r) * (sum(alpha[rows] * E[, 1L]) - colSums(S * E[, -1L, drop = FALSE]))
  var_rows <- if (r < n) n^2 * stats::var(per_row) / r else 0
  list(bias = mean(per_probe), se = sqrt(var_rows + stats::var(per_probe) / ncol(Z)), rows = r)
}

# The rows of the H2 error check (gp_h2_bias()): h2_check_rows of them, drawn
# from the problem's seed, all where n is at most that.
gp_h2_check_rows <- function(prob) {
  n <- prob$n
  r <- min(n, prob$control$h2_check_rows)
  if (r == n) seq_len(n) else sort(gp_with_seed(prob$control$seed + 3L, sample.int(n, r)))
}

#' @export
print.gp_loglik <- function(x, digits = 6, ...) {
  cat(sprintf("Gaussian-process log-likelihood (%s, n = %d): %s", x$method, x$n,
              format(x$loglik, digits = digits + 4)))
  if (x$method != "dense") {
    cat(sprintf(" +/- %.3g (%s over %d probes; %d CG iterations)", x$error,
                if (is.null(x$h2_bias)) "3 s.e." else "3 s.e. and the H2 error", x$probes,
                x$cg_iterations))
  }
  cat("\n")
  if (length(x$beta)) {
    cat("  beta: ")
    cat(paste(names(x$beta), format(x$beta, digits = digits), sep = " = ", collapse = ", "))
    cat("\n")
  }
  if (!is.null(x$gradient)) {
    cat("  gradient: ")
    cat(paste(names(x$gradient), format(x$gradient, digits = digits), sep = " = ",
              collapse = ", "))
    cat("\n")
  }
  invisible(x)
}
