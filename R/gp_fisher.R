# The Fisher information of the iterative GP methods, estimated by the
# probes (gp_evaluate_iterative() asks for it).

# The Fisher information's probes: its solves cost one column per probe and
# derivative term, twice the gradient's columns with one range; traces of n x n
# operators vary little from probe to probe at large n, where a few probes
# give it within a fraction of a percent. Where they do not (small n), all
# the probes are used.
gp_fisher_probe_count <- 10L
gp_fisher_rel_se <- 0.01

# Fisher information 0.5 tr(Sigma^-1 M_i Sigma^-1 M_j) by the probes, in
# the preconditioned form tr(A^-1 G M_i G' A^-1 G M_j G') with A = G Sigma G':
# z' (...) z = (M_i S)' (Sigma^-1 M_j U) with S = G' A^-1 z and U = G' z.
# DU, DS: the derivative operators (named as their terms) applied to U, S.
# Attribute "rel_se": the diagonal entries' relative standard errors over the
# probes.
gp_fisher_probes <- function(prob, pre, op, cg_solve, U, DU, S, DS, nugget, names) {
  m <- ncol(U)
  sol <- cg_solve(c(list(U), DU), g_blocks = 1L + length(DU))$gt_x   # for G [U DU]
  block <- function(j) sol[, j * m + seq_len(m), drop = FALSE]
  SiU <- block(0L)
  SiDU <- stats::setNames(lapply(seq_along(DU), block), names(DU))
  left <- gp_param_order(op$mult(S) - nugget * S, DS, nugget * S)          # M_i S
  right <- gp_param_order(U - nugget * SiU, SiDU, nugget * SiU)           # Sigma^-1 M_j U
  k <- length(left)
  info <- matrix(0, k, k, dimnames = list(names, names))
  rel_se <- numeric(k)
  for (i in seq_len(k)) for (j in seq_len(k)) {
    per_probe <- 0.5 * colSums(left[[i]] * right[[j]])
    info[i, j] <- mean(per_probe)
    if (i == j && info[i, i] != 0) {
      rel_se[i] <- if (m > 1L) stats::sd(per_probe) / sqrt(m) / abs(info[i, i]) else Inf
    }
  }
  structure((info + t(info)) / 2, rel_se = rel_se)
}
