# Formula kernels (gk_formula()) in the Gaussian-process functions: the
# covariance variance * F(x, y; theta) + nugget I as one formula of the
# engines, its derivatives in the formula's parameters (kernel_grad()'s
# symbolic derivatives, reduced by the same engines), and the checks.

# The methods that take a formula kernel: they only need products with the
# covariance and its derivatives (the reductions, or a dense matrix of the
# formula's compiled C function); "h2" builds its own Chebyshev expansion of
# a kernel of the vocabulary and "vecchia" evaluates that vocabulary in its
# C likelihood.
gp_formula_methods <- c("dense", "tiled")

# The names the GP gives its own parameters: a formula may not use them.
gp_formula_reserved <- c("variance", "nugget")

# A formula given to gp_loglik() or gp_fit(): checked against the points'
# dimension and the GP's own parameter names.
gp_check_formula <- function(f, dim) {
  clash <- intersect(names(f$params), gp_formula_reserved)
  if (length(clash)) {
    stop("the formula's parameter `", clash[1L], "` has the name of the GP's own ",
         clash[1L], " (the covariance is variance * formula + nugget): rename it",
         call. = FALSE)
  }
  gk_formula_expand(f, dim)   # errors name the offending part (coordinate beyond dim, ...)
  f
}

# The method for a formula kernel: "auto" as for the vocabulary, with
# "tiled" in place of "h2"; "h2" and "vecchia" are errors.
gp_formula_method <- function(method, n, dim, control, backend) {
  method <- gk_match_choice(method, c("auto", "dense", "tiled", "h2", "vecchia"), "method")
  if (method == "auto") {
    method <- gp_auto_method(n, dim, control, backend)
    if (!method %in% gp_formula_methods) method <- "tiled"
  }
  if (!method %in% gp_formula_methods) {
    stop("method = \"", method, "\" cannot take a formula kernel (gk_formula()): use ",
         paste0("\"", gp_formula_methods, "\"", collapse = " or "), call. = FALSE)
  }
  method
}

# The covariance variance * F as one formula, whose parameters are F's and
# `.variance` (a dot: no user's name). `free`: the parameters with a
# derivative term; `log`: for each of them, whether the term is the
# derivative in its log (dSigma / dlog p = p dSigma / dp) or in itself.
gp_formula_cov <- function(f, variance, free = character(), log = logical()) {
  e <- call("*", as.name(".variance"), call("(", f$expr))
  params <- c(list(.variance = as.double(variance)), f$params)
  key <- paste(c(deparse(e, width.cutoff = 500L), "|", f$coords, "|", names(params)),
               collapse = " ")
  structure(list(expr = e, params = params, coords = f$coords, key = key,
                 gp = list(free = free, log = stats::setNames(as.logical(log), free))),
            class = "gk_formula")
}

# The user's formula at the covariance formula's parameters (without the
# variance): what a fit reports as its kernel.
gp_formula_base <- function(cov, f) {
  f$params <- cov$params[names(f$params)]
  f
}

# The derivative terms of a covariance formula (as gp_derivative_terms()):
# for each free parameter p the formula's symbolic derivative (D(), as
# kernel_grad()) times p (log scale, named log_p) or 1 (named p).
# Unlike the vocabulary's, these need not vanish on the diagonal (a weight's
# derivative does not): the preconditioner's exact trace counts it (gp_cpu.c).
gp_formula_terms <- function(cov) {
  free <- cov$gp$free
  terms <- lapply(free, function(p) {
    d <- cov
    d$wrt <- p
    list(kernels = list(d), weights = if (cov$gp$log[[p]]) cov$params[[p]] else 1)
  })
  names(terms) <- ifelse(cov$gp$log[free], paste0("log_", free), free)
  terms
}

# k(x, x) at each row of `locs`: a kernel's variance, or the covariance
# formula on the diagonal (evaluated by R on the expanded expression; the
# formula need not be stationary).
gp_kernel_diag <- function(kernel, locs) {
  if (!inherits(kernel, "gk_formula")) return(rep(kernel$variance, nrow(locs)))
  e <- gk_formula_expand(kernel, ncol(locs))
  env <- gk_formula_eval_env(kernel$params)
  for (k in seq_len(ncol(locs))) {
    assign(paste0("x", k), locs[, k], envir = env)
    assign(paste0("y", k), locs[, k], envir = env)
  }
  env$`&&` <- `&`
  env$`||` <- `|`
  env$sign <- sign
  rep_len(as.double(eval(e, env)), nrow(locs))
}

# The covariance of gp_loglik(kernel = f): the formula itself (a fit's
# kernel, which carries its variance, as it is), with a derivative term for
# each of its parameters, in its log where the value is positive.
gp_formula_loglik_kernel <- function(f) {
  cov <- if (".variance" %in% names(f$params)) f else gp_formula_cov(f, 1)
  free <- setdiff(names(cov$params), ".variance")
  values <- unlist(cov$params[free])
  if (anyNA(values)) {
    stop("the formula's parameter `", free[is.na(values)][1L], "` has no value: ",
         "gp_loglik() needs them all", call. = FALSE)
  }
  cov$gp <- list(free = free, log = stats::setNames(values > 0, free))
  cov
}
