# The GP engine's conjugate-gradient solvers: block CG in R on the host's
# operators, and the device solver's R side (gp_cg_solver()).

# Conjugate gradients on every column of B at once (one operator call per
# iteration for all unconverged columns). For the columns in `track`, the CG
# coefficients are kept: they give the Lanczos tridiagonal matrices. A step
# with p'Ap <= 0 shows that the operator is not positive definite (an H2
# approximation whose error exceeds the nugget). CG may still converge on the
# columns (the effect on the likelihood is then in the reported error), but
# usually it does not: from then on it gets 4 times the iterations done so far
# plus 50, and stops with an error that says what to change, not after maxit
# (`method`: the operator's kind, for the message). Why the GPU has its own
# (gp_gpu_block_cg, gp.h): there every vector stays on the device, here the
# operators are R functions; the per-column step is one C function
# (gp_cg_step) and the stopping rules are the same.
gp_block_cg <- function(mult, B, tol, maxit, track = integer(), method = NULL) {
  n <- nrow(B)
  tol <- rep_len(tol, ncol(B))   # per column
  # X, R, P and rr are updated in place by gk_r_gp_cg_step (one fused pass per
  # column, no n x k temporaries): fresh copies here, never shared.
  X <- matrix(0, n, ncol(B))
  R <- B + 0
  P <- B + 0
  rr <- colSums(R^2)
  bnorm <- sqrt(rr)
  active <- which(bnorm > 0)
  iterations <- integer(ncol(B))
  alpha <- beta <- matrix(NA_real_, maxit, length(track))
  indefinite_at <- NA_integer_
  for (it in seq_len(maxit)) {
    if (!length(active)) break
    Q <- mult(P[, active, drop = FALSE])
    step <- .Call(gk_r_gp_cg_step, X, R, P, Q, active - 1L, rr, gk_threads())
    if (is.na(indefinite_at) && !all(is.finite(step[[1L]]) & step[[1L]] > 0)) indefinite_at <- it
    tracked <- match(active, track)
    alpha[it, tracked[!is.na(tracked)]] <- step[[1L]][!is.na(tracked)]
    beta[it, tracked[!is.na(tracked)]] <- step[[2L]][!is.na(tracked)]
    iterations[active] <- it
    active <- active[sqrt(rr[active]) > tol[active] * bnorm[active]]
    if (length(active) && !is.na(indefinite_at) &&
        (it >= 5L * indefinite_at + 50L || any(!is.finite(rr[active])))) {
      gp_stop_indefinite(method, indefinite_at)
    }
  }
  list(x = X, iterations = iterations, converged = !length(active), alpha = alpha, beta = beta)
}

# The solver of A x = B for A = G Sigma G' (pre: gp_preconditioner(), op:
# gp_operator()), as function(B, track, gt_b, x, tol, g_blocks, gt_x_cols,
# rows), B a matrix or a list of matrices side by side (bound only on the host
# path), the first g_blocks of them multiplied by G first (callers solve for
# G B: on the GPU G is applied there), tol the relative residual per column
# (recycled; control$tol by default): the list of gp_block_cg() plus gt_x =
# G' x (every caller wants Sigma^-1 G' B ~ G' A^-1 B, not x; only its first
# gt_x_cols columns when given) and gt_x_rows, the rows `rows` of all of G' x
# (when given: at n = 1e6 a value-only caller reads the probes' 0.4 GB at a
# thousand rows), when gt_b, gt_b = G' B; x itself only when asked. On the GPU (an H2 Sigma,
# or the tiled reductions over points on the device), block CG with every
# vector on the device (gp_cuda.cu: the same iteration, and G' applied there
# too); otherwise gp_block_cg() on the products A(V). `clock` (or NULL): the
# device solver's time goes to clock$solver.
gp_cg_solver <- function(prob, op, pre, A, clock = NULL) {
  ctl <- prob$control
  on_device <- prob$backend == "gpu"
  device_solve <- if (on_device && inherits(op$sigma, "h2matrix")) {
    function(blocks, tol, want) {
      .Call(gk_r_gp_block_cg_h2, h2_ptr(op$sigma), prob$nbr, pre$coef, blocks, tol,
            ctl$maxit, want)
    }
  } else if (on_device && !is.null(op$tiled)) {
    function(blocks, tol, want) {
      .Call(gk_r_gp_block_cg_tiled, gk_operand(op$tiled$points), op$tiled$kernel,
            op$tiled$nugget, prob$nbr, pre$coef, blocks, tol, ctl$maxit, want)
    }
  }
  if (!is.null(device_solve)) {
    return(function(B, track = integer(), gt_b = FALSE, x = FALSE, tol = ctl$tol,
                    g_blocks = 0L, gt_x_cols = NULL, rows = NULL) {
      t0 <- proc.time()[["elapsed"]]
      if (!is.null(clock)) on.exit(clock$solver <- clock$solver + proc.time()[["elapsed"]] - t0)
      blocks <- lapply(if (is.list(B)) B else list(B), function(b) {
        if (inherits(b, "gk_device_matrix")) return(gk_operand(b))
        if (!is.double(b) || !is.matrix(b)) b <- matrix(as.double(b), nrow = prob$n)
        b
      })
      want <- list(x = x, gt_b = gt_b, g_blocks = as.integer(g_blocks),
                   gt_x_cols = if (!is.null(gt_x_cols)) as.integer(gt_x_cols),
                   rows = if (!is.null(rows)) as.integer(rows))
      out <- device_solve(blocks, as.double(tol), want)
      if (out$gave_up) gp_stop_indefinite(prob$method, out$indefinite_at)
      list(x = out$x, gt_x = out$gt_x, gt_b = out$gt_b, gt_x_rows = out$gt_x_rows,
           iterations = out$iterations, converged = out$converged,
           alpha = out$alpha[, track, drop = FALSE], beta = out$beta[, track, drop = FALSE])
    })
  }
  function(B, track = integer(), gt_b = FALSE, x = FALSE, tol = ctl$tol, g_blocks = 0L,
           gt_x_cols = NULL, rows = NULL) {
    if (!is.list(B)) B <- list(B)
    B <- lapply(B, gp_host_block)
    for (i in seq_len(g_blocks)) B[[i]] <- pre$G(B[[i]])
    B <- do.call(cbind, B)
    cg <- gp_block_cg(A, B, tol, ctl$maxit, track = track, method = prob$method)
    cg$gt_x <- pre$Gt(cg$x)
    if (!is.null(rows)) cg$gt_x_rows <- cg$gt_x[rows, , drop = FALSE]
    if (!is.null(gt_x_cols)) cg$gt_x <- cg$gt_x[, seq_len(gt_x_cols), drop = FALSE]
    if (gt_b) cg$gt_b <- pre$Gt(B)
    if (!x) cg$x <- NULL
    cg
  }
}
