# Maximum-likelihood fits of Gaussian processes and what users do with them:
# coefficients, standard errors, kriging predictions.

#' Fit a Gaussian process by maximum likelihood
#'
#' Maximises the profile log-likelihood of [gp_loglik()] over the log
#' variance, log range and log nugget (the nugget is the variance added to the
#' diagonal, not a ratio) and, with `estimate_smoothness = TRUE`, the log
#' smoothness of a Matérn kernel (between 0.1 and 8; its derivative is a
#' central difference of two kernel operators, see [gp_loglik()]), by
#' L-BFGS-B with the gradient of [gp_loglik()]. The iterative methods use the
#' same probes at every step, so the objective is smooth.
#'
#' Starting values (when `start` is `NULL`): the variance of the
#' least-squares residuals split 90/10 between the process and the nugget,
#' and a range of a quarter of the mean coordinate standard deviation; with
#' more than 2000 points these are then refined by a dense fit to a random
#' subset of 1000 points.
#'
#' Progress goes through \pkg{progressr} (see [gk_progress]): one step per
#' likelihood evaluation, shown by the handler you choose (e.g.
#' `progressr::handlers(global = TRUE)`), with a line per evaluation
#' (log-likelihood, parameters, CG iterations, time) as the step's message
#' when `verbose` is `TRUE`. Without \pkg{progressr}, `verbose` lines are
#' printed with `message()`; `options(gpukernels.progress = FALSE)` turns
#' both off. An interrupt (Ctrl-C) stops the optimisation cleanly: the fit
#' at the best parameters so far is returned, with a warning and
#' `convergence = "interrupted"`.
#'
#' @inheritParams gp_loglik
#' @param kernel Kernel family name: `"matern"`, `"exponential"`,
#'   `"gaussian"`, `"cauchy"` or `"inverse_multiquadric"`, or a
#'   [gk_kernel()] whose family (and smoothness) are used.
#' @param smoothness The Matérn smoothness, default 1.5: fixed, or the
#'   starting value with `estimate_smoothness = TRUE`.
#' @param start Optional starting values: a named list or vector with
#'   `variance`, `range` and `nugget` (and optionally `smoothness`).
#' @param estimate_smoothness Also estimate the Matérn smoothness.
#' @param verbose A line per likelihood evaluation (default: when
#'   `n > 5000`), as the progress message (see Details).
#' @param optim_control Passed to [stats::optim()]'s `control`.
#' @return An object of class `gp_fit` with methods [coef()], [logLik()],
#'   [vcov()] (the inverse Fisher information, for the log parameters),
#'   `print()`, `summary()` and [predict.gp_fit()].
#' @examples
#' set.seed(1)
#' locs <- matrix(runif(600), ncol = 2)
#' y <- gp_simulate(locs, gk_kernel("matern", range = 0.2, smoothness = 1.5), nugget = 0.1)
#' fit <- gp_fit(locs, y, kernel = "matern", smoothness = 1.5, backend = "cpu")
#' fit
#' predict(fit, matrix(runif(10), ncol = 2), se.fit = TRUE)
#' @export
gp_fit <- function(locs, y, X = NULL, kernel = "matern", smoothness = 1.5, start = NULL,
                   method = "auto", estimate_smoothness = FALSE, control = gp_control(),
                   verbose = NULL, optim_control = list(), backend = NULL) {
  locs <- gk_check_points(locs, "locs")
  gp_check_fit_locs(locs)   # n = 1 or all points equal: say so (checks.R)
  n <- nrow(locs)
  template <- gp_kernel_template(kernel, smoothness, ncol(locs))
  estimate_smoothness <- isTRUE(estimate_smoothness)
  if (estimate_smoothness && template$name != "matern") {
    stop("`estimate_smoothness = TRUE` needs the matern kernel", call. = FALSE)
  }
  data <- gp_check_data(y, X, n)
  if (!inherits(control, "gp_control")) stop("`control` must come from gp_control()", call. = FALSE)
  backend <- gk_backend(backend)
  method <- gp_method(method, n, ncol(locs), control, backend)
  if (is.null(verbose)) verbose <- n > 5000
  start <- gp_start(locs, data, template, start, control, backend, estimate_smoothness)
  prob <- gp_problem(locs, data$y, data$X, method, control, backend)
  if (isTRUE(prob$duplicates) && start[["nugget"]] == 0) gp_check_duplicates(prob, 0)

  ctl <- utils::modifyList(list(factr = 1e6, pgtol = 0, maxit = 200L), optim_control)
  report <- gp_fit_progress(verbose, steps = ctl$maxit + 1L)
  evals <- new.env(parent = emptyenv())
  evals$count <- 0L
  evals$best <- NULL
  t_start <- proc.time()[["elapsed"]]
  make_kernel <- function(theta) {
    gp_kernel_with(template, theta[[1L]], theta[[2L]],
                   if (estimate_smoothness) theta[[4L]])
  }
  evaluate <- function(par) {
    key <- paste(format(par, digits = 17), collapse = ",")
    if (identical(evals$key, key)) return(evals$value)
    theta <- exp(par)
    res <- gp_evaluate(prob, make_kernel(theta), theta[[3L]], gradient = TRUE,
                       smoothness = estimate_smoothness)
    evals$count <- evals$count + 1L
    evals$key <- key
    evals$value <- res
    if (is.null(evals$best) || res$loglik > evals$best$loglik) {
      evals$best <- res
      evals$best_par <- par
    }
    report(sprintf("gp_fit %3d: loglik %.4f  variance %.5g  range %.5g  nugget %.5g%s  (%s%.1f s)",
                   evals$count, res$loglik, theta[[1L]], theta[[2L]], theta[[3L]],
                   if (estimate_smoothness) sprintf("  smoothness %.4g", theta[[4L]]) else "",
                   if (method == "dense") "" else sprintf("%d CG iterations, ",
                                                          res$cg_iterations),
                   proc.time()[["elapsed"]] - t_start))
    res
  }
  par0 <- log(start)
  lower <- par0 - 12
  upper <- par0 + 12
  if (estimate_smoothness) {
    lower[[4L]] <- log(gp_smoothness_bounds[[1L]])
    upper[[4L]] <- log(gp_smoothness_bounds[[2L]])
    par0[[4L]] <- min(max(par0[[4L]], lower[[4L]]), upper[[4L]])
  }
  scale <- max(1, abs(evaluate(par0)$loglik))
  convergence <- "converged"
  opt <- tryCatch(
    stats::optim(par0, fn = function(p) -evaluate(p)$loglik / scale,
                 gr = function(p) -evaluate(p)$gradient / scale, method = "L-BFGS-B",
                 lower = lower, upper = upper, control = ctl),
    interrupt = function(e) NULL)
  if (is.null(opt)) {
    warning("gp_fit() was interrupted: returning the best parameters found so far",
            call. = FALSE)
    convergence <- "interrupted"
    par <- evals$best_par
  } else {
    par <- opt$par
    if (opt$convergence != 0L) {
      # a line search that cannot improve any further is the usual end of a
      # stochastic objective; report it, but only warn for the iteration limit
      convergence <- opt$message
      if (opt$convergence == 1L) warning("gp_fit() reached the iteration limit", call. = FALSE)
    }
  }
  theta <- exp(par)
  kern <- make_kernel(theta)
  final <- gp_evaluate(prob, kern, theta[[3L]], gradient = TRUE, fisher = TRUE,
                       smoothness = estimate_smoothness)
  vc <- tryCatch(solve(final$fisher), error = function(e) {
    matrix(NA_real_, nrow(final$fisher), ncol(final$fisher), dimnames = dimnames(final$fisher))
  })
  coefs <- c(variance = theta[[1L]], range = theta[[2L]], nugget = theta[[3L]],
             if (estimate_smoothness) c(smoothness = theta[[4L]]))
  # the fit keeps its problem for predict(), which needs no probes: their GPU
  # copy (400 MB at n = 1e6) is not kept alive, nor saved, with the fit
  prob$probes_device <- NULL
  structure(list(coefficients = coefs,
                 beta = final$beta, loglik = final$loglik, loglik_se = final$se,
                 gradient = final$gradient, vcov_log = vc, kernel = kern,
                 nugget = theta[[3L]], estimate_smoothness = estimate_smoothness,
                 method = method, n = n, locs = locs, y = data$y,
                 X = data$X, X_default = is.null(X), alpha = final$alpha, prob = prob,
                 evaluations = evals$count, cg_iterations = final$cg_iterations,
                 convergence = convergence, start = start, backend = backend,
                 call = match.call()),
            class = "gp_fit")
}

# Where the optimizer looks for a Matern smoothness (0.5 is the exponential
# kernel; beyond about 5 the data rarely tell smoothness values apart).
gp_smoothness_bounds <- c(0.1, 8)

# One progress step per likelihood evaluation through progressr (the user
# picks the handler, see ?gk_progress), with the evaluation's line as the
# step's message when `verbose`; without progressr, verbose lines go to
# message(). The progressor finishes when gp_fit() returns.
gp_fit_progress <- function(verbose, steps, envir = parent.frame()) {
  p <- gk_progressor(steps, envir = envir)
  done <- 0L
  if (is.null(p)) {
    if (verbose && !identical(getOption("gpukernels.progress"), FALSE)) {
      return(function(line) message(line))
    }
    return(function(line) invisible())
  }
  function(line) {
    # the evaluations can outnumber the iterations (line searches): past the
    # planned steps only the line is sent
    amount <- if (done < steps - 1L) 1 else 0
    done <<- done + amount
    if (verbose) p(message = line, amount = amount) else p(amount = amount)
  }
}

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
# estimated, smoothness (from `start`, else the kernel's).
gp_start <- function(locs, data, template, start, control, backend, estimate_smoothness = FALSE) {
  nu <- if (estimate_smoothness) c(smoothness = template$smoothness)
  if (!is.null(start)) {
    start <- as.list(start)
    if (!all(c("variance", "range", "nugget") %in% names(start))) {
      stop("`start` needs `variance`, `range` and `nugget`", call. = FALSE)
    }
    wanted <- c("variance", "range", "nugget", if (estimate_smoothness) "smoothness")
    if (estimate_smoothness && is.null(start$smoothness)) start$smoothness <- nu[[1L]]
    for (nm in wanted) {
      gk_check_scalar(start[[nm]], paste0("start$", nm), lower = 0, lower_open = TRUE)
    }
    return(vapply(start[wanted], as.double, numeric(1)))
  }
  X <- data$X
  resid <- if (ncol(X)) stats::lm.fit(X, data$y)$residuals else data$y
  v <- max(stats::var(resid), .Machine$double.eps)
  st <- c(variance = 0.9 * v, range = mean(apply(locs, 2L, stats::sd)) / 4, nugget = 0.1 * v, nu)
  n <- nrow(locs)
  if (n > 2000L) {
    sub <- gp_with_seed(control$seed + 2L, sample.int(n, 1000L))
    old <- options(gpukernels.progress = FALSE)   # the subset fit shows no progress of its own
    on.exit(options(old), add = TRUE)
    pre <- tryCatch(
      suppressWarnings(gp_fit(locs[sub, , drop = FALSE], data$y[sub], X[sub, , drop = FALSE],
                              kernel = template, start = as.list(st), method = "dense",
                              estimate_smoothness = estimate_smoothness, verbose = FALSE,
                              backend = backend)),
      error = function(e) NULL)
    if (!is.null(pre) && all(is.finite(pre$coefficients))) {
      st <- pre$coefficients
      # a subset sees fewer close pairs: keep the nugget away from zero
      st[["nugget"]] <- max(st[["nugget"]], 1e-3 * st[["variance"]])
    }
  }
  st
}

#' @export
coef.gp_fit <- function(object, ...) object$coefficients

#' @export
logLik.gp_fit <- function(object, ...) {
  structure(object$loglik, df = length(object$coefficients) + length(object$beta),
            nobs = object$n, class = "logLik")
}

#' Covariance of the estimates of a Gaussian-process fit
#'
#' The inverse of the Fisher information of the covariance parameters, on
#' the scale of the log parameters (`log_variance`, `log_range`,
#' `log_nugget` and, when it was estimated, `log_smoothness`), where the normal approximation is better; with
#' `log = FALSE`, by the delta method on the original scale.
#' @param object A [gp_fit()].
#' @param log Log scale (default) or the original parameters.
#' @param ... Unused.
#' @return A 3 x 3 (4 x 4 with the smoothness) matrix.
#' @export
vcov.gp_fit <- function(object, log = TRUE, ...) {
  v <- object$vcov_log
  if (log) return(v)
  J <- diag(object$coefficients)
  out <- J %*% v %*% J
  dimnames(out) <- list(names(object$coefficients), names(object$coefficients))
  out
}

#' @export
print.gp_fit <- function(x, ...) {
  k <- x$kernel
  cat(sprintf("Gaussian-process fit: %s kernel%s, n = %d, method \"%s\"\n", k$name,
              if (isTRUE(x$estimate_smoothness)) " (smoothness estimated)" else
                if (k$name == "matern") sprintf(" (smoothness %g)", k$smoothness) else "",
              x$n, x$method))
  print(signif(x$coefficients, 5))
  if (length(x$beta)) {
    cat("mean coefficients:\n")
    print(signif(x$beta, 5))
  }
  cat(sprintf("log-likelihood %.4f%s; %d evaluations (%s)\n", x$loglik,
              if (x$method == "dense") "" else sprintf(" +/- %.3g (3 s.e.)", 3 * x$loglik_se),
              x$evaluations, x$convergence))
  invisible(x)
}

#' @export
summary.gp_fit <- function(object, ...) {
  se_log <- sqrt(pmax(diag(object$vcov_log), 0))
  est <- object$coefficients
  tab <- cbind(estimate = est, "log estimate" = log(est), "std. error (log)" = se_log,
               lower95 = exp(log(est) - 1.96 * se_log), upper95 = exp(log(est) + 1.96 * se_log))
  structure(list(fit = object, table = tab), class = "summary.gp_fit")
}

#' @export
print.summary.gp_fit <- function(x, ...) {
  print(x$fit)
  cat("\ncovariance parameters (standard errors from the Fisher information):\n")
  print(signif(x$table, 4))
  invisible(x)
}

#' Kriging predictions from a Gaussian-process fit
#'
#' The conditional mean (universal kriging, with the GLS mean) at new
#' locations and, with `se.fit = TRUE`, its standard error: the kriging
#' standard deviation of the latent process (without the nugget), including
#' the uncertainty of the estimated mean coefficients; the covariance
#' parameters are taken as known. For the iterative methods the variances
#' need one preconditioned conjugate-gradient solve per new location (in
#' blocks).
#'
#' @param object A [gp_fit()].
#' @param newlocs Matrix of new locations.
#' @param newX Design matrix at the new locations (not needed for the
#'   default constant mean).
#' @param se.fit Also return standard errors.
#' @param ... Unused.
#' @return A vector of predictions, or with `se.fit = TRUE` a list with `fit`
#'   and `se.fit`.
#' @export
predict.gp_fit <- function(object, newlocs, newX = NULL, se.fit = FALSE, ...) {
  gp_check_fit_object(object)   # an edited alpha or beta (checks.R)
  newlocs <- gk_check_points(newlocs, "newlocs")
  if (ncol(newlocs) != ncol(object$locs)) {
    stop("`newlocs` has ", ncol(newlocs), " columns but the fit has ", ncol(object$locs),
         call. = FALSE)
  }
  m <- nrow(newlocs)
  p <- ncol(object$X)
  if (is.null(newX)) {
    if (!object$X_default && p > 0L) {
      stop("the fit has a design matrix `X`: give `newX` at the new locations", call. = FALSE)
    }
    newX <- matrix(1, m, p)
  }
  if (is.numeric(newX) && is.null(dim(newX))) newX <- matrix(newX, ncol = 1L)
  if (nrow(newX) != m || ncol(newX) != p) {
    stop("`newX` must be ", m, " x ", p, call. = FALSE)
  }
  k <- object$kernel
  mean <- drop(kernel_matvec(newlocs, object$locs, object$alpha, k, backend = object$backend))
  if (p) mean <- mean + drop(newX %*% object$beta)
  if (!se.fit) return(mean)
  kp <- gp_kriging_pieces(object, newlocs)
  var <- k$variance - kp$vq
  if (p) {
    U <- t(newX) - kp$xsc
    var <- var + colSums(U * solve(kp$xsx, U))
  }
  list(fit = mean, se.fit = sqrt(pmax(var, 0)))
}

# What the kriging variances at newlocs need, with C = K(locs, newlocs):
# list(vq = diag(C' Sigma^-1 C), xsc = X' Sigma^-1 C (p x m), xsx = X' Sigma^-1 X).
# With the dense method on a GPU, Sigma's factor stays there
# (gk_r_gp_dense_krige); otherwise C comes in chunks of new points through
# gp_solver().
gp_kriging_pieces <- function(object, newlocs) {
  if (object$prob$method == "dense" && object$backend == "gpu") {
    return(.Call(gk_r_gp_dense_krige, object$locs, newlocs, object$kernel,
                 as.double(object$nugget), object$X))
  }
  m <- nrow(newlocs)
  p <- ncol(object$X)
  solve_cov <- gp_solver(object)
  SiX <- if (p) solve_cov(object$X) else matrix(0, object$n, 0)
  out <- list(vq = numeric(m), xsc = matrix(0, p, m), xsx = crossprod(object$X, SiX))
  chunk <- max(1L, min(256L, floor(2^25 / object$n)))
  for (s in split(seq_len(m), ceiling(seq_len(m) / chunk))) {
    C <- kernel_matrix(object$locs, newlocs[s, , drop = FALSE], object$kernel,
                       backend = object$backend)
    out$vq[s] <- colSums(C * solve_cov(C))
    if (p) out$xsc[, s] <- crossprod(SiX, C)
  }
  out
}

# Sigma^-1 B at the fitted parameters (user's point order), dense or by
# preconditioned CG.
gp_solver <- function(object) {
  prob <- object$prob
  if (prob$method == "dense") {
    S <- kernel_matrix(object$locs, kernel = object$kernel, backend = object$backend)
    diag(S) <- diag(S) + object$nugget
    R <- chol(S)
    return(function(B) backsolve(R, backsolve(R, B, transpose = TRUE)))
  }
  pre <- gp_preconditioner(prob, object$kernel, object$nugget)
  op <- gp_operator(prob, object$kernel, object$nugget)
  A <- function(V) pre$G(op$mult(pre$Gt(V)))
  cg_solve <- gp_cg_solver(prob, op, pre, A)
  ord <- prob$order
  function(B) {
    out <- B
    out[ord, ] <- cg_solve(pre$G(B[ord, , drop = FALSE]))$gt_x
    out
  }
}
