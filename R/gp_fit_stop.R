# The stopping rule of gp_fit(): the projected gradient within the bounds,
# the bounds an estimate stopped on, the iterative methods' search problem
# and the Newton polish of the estimate.

# The gradient projected on the box: zero where a parameter sits on a bound
# and the gradient (of the log-likelihood, to be increased) points out of it.
gp_projected_gradient <- function(par, g, llo, lhi) {
  out <- g
  out[par <= llo & g < 0] <- 0
  out[par >= lhi & g > 0] <- 0
  out
}

# Free parameters that ended on a bound: a named character vector, "lower" or "upper".
gp_at_bounds <- function(par, free, llo, lhi, g, nm) {
  low <- free & par <= llo + 1e-8
  high <- free & par >= lhi - 1e-8
  out <- c(stats::setNames(rep("lower", sum(low)), nm[low]),
           stats::setNames(rep("upper", sum(high)), nm[high]))
  out[order(match(names(out), nm))]
}

gp_bound_text <- function(fit) {
  paste(vapply(names(fit$at_bound), function(nm) {
    side <- fit$at_bound[[nm]]
    sprintf("%s ended at its %s bound %.4g", nm, side, fit[[side]][[nm]])
  }, ""), collapse = "; ")
}

# Quasi-Newton steps on the free parameters from where the search stopped: the
# Fisher information as the first curvature, then BFGS updates from the
# gradients; projected on the bounds and halved until the log-likelihood does
# not fall. They go on until the largest projected gradient is at most gtol
# (+ 3 standard errors for the stochastic gradients of the iterative
# methods). Ends with an evaluation that has the Fisher information, unless
# `final_fisher` is FALSE. The search of the iterative methods runs it with
# few halvings: a step that fails twice halved means its stochastic gradient
# no longer points uphill, and the polish (all the probes) takes over.
# On the iterative methods the polish evaluates its steps with the Fisher
# information (a fraction of an evaluation's columns, gp_fisher_probe_count):
# the step that converges then needs no evaluation again, and the next step
# is Fisher scoring.
gp_polish <- function(par, free, llo, lhi, gtol, evaluate, dense, steps = 20L,
                      final_fisher = TRUE, halvings = 8L) {
  step_fisher <- final_fisher && !dense
  cur <- evaluate(par, fisher = TRUE)
  B <- cur$fisher
  with_fisher <- TRUE
  pg_of <- function(p, r) gp_projected_gradient(p, r$gradient, llo, lhi)[free]
  limit_of <- function(r) gtol + if (dense) 0 else 3 * r$gradient_se[free]
  convergence <- NULL
  for (i in seq_len(steps + 1L)) {
    pg <- pg_of(par, cur)
    if (all(abs(pg) <= limit_of(cur))) {
      convergence <- "converged"
      break
    }
    if (i > steps) break
    g <- cur$gradient
    active <- free & ((par <= llo & g < 0) | (par >= lhi & g > 0))
    move <- free & !active
    newton <- function(set) {
      sol <- tryCatch(solve(B[set, set, drop = FALSE], g[set]), error = function(e) NULL)
      if (is.null(sol) || any(!is.finite(sol))) return(NULL)
      if (sum(sol * g[set]) <= 0) sol <- g[set]         # not an ascent direction
      step <- numeric(length(par))
      step[set] <- sol
      step
    }
    # a flat direction (a nugget on its way to zero, on the log scale) makes
    # the curvature singular and would shrink the others' steps: where its
    # gradient is within the tolerance, it stays put
    done <- rep(FALSE, length(par))
    done[free] <- abs(pg) <= limit_of(cur)
    curv <- diag(B)
    flat <- done & curv <= 1e-8 * max(curv[move])
    step <- newton(if (any(move & !flat)) move & !flat else move)
    if ((is.null(step) || max(abs(step)) > 1) && any(move & !done)) {
      alt <- newton(move & !done)
      if (!is.null(alt)) step <- alt
    }
    if (is.null(step)) {
      step <- numeric(length(par))
      step[move] <- g[move]
    }
    big <- max(abs(step))
    if (big > 1) step <- step / big
    accepted <- FALSE
    for (h in 0:halvings) {
      cand <- pmin(pmax(par + step / 2^h, llo), lhi)
      cand[!free] <- par[!free]
      r <- tryCatch(evaluate(cand, fisher = step_fisher), error = function(e) NULL)
      if (!is.null(r) && r$loglik >= cur$loglik - 1e-11 * max(1, abs(cur$loglik))) {
        accepted <- TRUE
        break
      }
    }
    if (!accepted) break
    if (step_fisher) {
      B <- r$fisher
    } else {
      # BFGS update of B ~ -Hessian on the free parameters
      sv <- (cand - par)[free]
      yv <- -(r$gradient - cur$gradient)[free]
      sy <- sum(sv * yv)
      if (is.finite(sy) && sy > 1e-12 * sqrt(sum(sv^2) * sum(yv^2))) {
        Bf <- B[free, free, drop = FALSE]
        Bs <- drop(Bf %*% sv)
        B[free, free] <- Bf - outer(Bs, Bs) / sum(sv * Bs) + outer(yv, yv) / sy
      }
    }
    par <- cand
    cur <- r
    with_fisher <- step_fisher
  }
  if (!with_fisher && final_fisher) cur <- evaluate(par, fisher = TRUE)
  pg <- pg_of(par, cur)
  if (is.null(convergence)) {
    convergence <- sprintf(
      "the projected gradient (largest %.3g) did not reach the tolerance %.3g", max(abs(pg)),
      gtol)
  }
  list(par = par, final = cur, pg = pg, convergence = convergence)
}

# The methods whose log-likelihood and gradient are estimates (by probes):
# their search is Fisher scoring, the others' L-BFGS-B.
gp_iterative_methods <- c("tiled", "h2")

# Steps of that search, before the polish with all the probes takes over.
gp_search_steps <- 40L

# Probes of the iterative methods while the search runs: its steps need the
# log-likelihood's shape, which a fifth of the default probes gives within a
# small fraction of the standard errors, at a fraction of the conjugate-gradient
# columns; the polish and everything the fit reports use all the probes.
gp_search_probes <- 10L

# The problem the search evaluates: `prob` with its first gp_search_probes
# probes (uploaded again on the GPU), or `prob` itself: dense, Vecchia, few
# probes, or the smoothness estimated (its kernels' Bessel functions, not the
# columns, then cost the most, and the polish needs more steps from the
# search's end point than the search saves).
gp_search_problem <- function(prob, smoothness) {
  if (smoothness || is.null(prob$probes) || ncol(prob$probes) <= gp_search_probes) return(prob)
  search <- prob
  search$probes <- prob$probes[, seq_len(gp_search_probes), drop = FALSE]
  search$control$probes <- gp_search_probes
  if (!is.null(prob$probes_device)) search$probes_device <- gk_device_block(search$probes)
  search
}
