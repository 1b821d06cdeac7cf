# The Vecchia neighbour search of the GP methods (src/gp/gp_neighbors.h), at
# once or on a host thread of its own while the caller goes on.

# For each point (in the internal order) up to m nearest points that precede
# it: list(nbr = n x m integer matrix, 0 pads; duplicates = candidates at
# distance 0 before their row). One C call (src/gp/gp_neighbors.h): in 1 to 3
# dimensions a walk of grid cells on the host (gp_neighbors_cells.c, both
# backends); beyond, the rows start..end search the points 1..end (at least
# two thirds of them precede the rows) for their min(gp_max_neighbors, 2m + 2)
# nearest through knn()'s reduction, by brute force for small blocks and in
# grid cells with block-sparse ranges for large ones, and keep the first m
# that precede them; rows left with fewer than min(m, i - 1) are searched
# again among all their predecessors. Either way every row gets its
# min(m, i - 1) nearest preceding points (the textbook Vecchia rule, for
# gp_simulate() and the preconditioner), the same on both backends.
gp_neighbors <- function(xo, m, backend) {
  if (!is.double(xo)) storage.mode(xo) <- "double"
  .Call(gk_r_gp_neighbors, xo, as.integer(m), backend == "gpu", gk_threads(),
        as.double(gp_dense_knn_pairs()))
}

# Brute force costs rows x candidates pairs (about 0.6 n^2 over all blocks of
# gp_neighbors); above this many pairs a block searches grid cells instead
# (the candidate search of more than 3 dimensions).
gp_dense_knn_pairs <- function() getOption("gpukernels.gp_dense_knn_pairs", 2e7)


# Dimensions up to which the search walks grid cells on the host
# (GP_NEIGHBORS_CELL_DIMS in gp_neighbors.h): only that search runs on a thread.
gp_neighbors_cell_dims <- 3L

# gp_neighbors(xo, m, "cpu") started on a host thread (1 to 3 dimensions):
# its handle for gp_neighbors_join(). The thread reads xo and fills its own
# result, both kept by the handle; an unjoined handle is cancelled when
# collected.
gp_neighbors_start <- function(xo, m) {
  if (!is.double(xo)) storage.mode(xo) <- "double"
  .Call(gk_r_gp_neighbors_start, xo, as.integer(m), gk_threads())
}

# Waits for the search of `job` (a user's interrupt meanwhile stops it) and
# returns gp_neighbors()'s list; cancel = TRUE stops it instead (NULL; a
# no-op once joined), for on.exit() of the code that started it.
gp_neighbors_join <- function(job, cancel = FALSE) .Call(gk_r_gp_neighbors_join, job, cancel)

# `prob` with the neighbours of gp_neighbors() (nb), or those of its
# deferred search (prob$neighbors_job, when nb is NULL) once done; `nugget`
# (when known): duplicated locations with a zero nugget are an error then.
gp_problem_neighbors <- function(prob, nb = NULL, nugget = NULL) {
  if (is.null(nb)) {
    if (is.null(prob$neighbors_job)) return(prob)
    nb <- gp_neighbors_join(prob$neighbors_job)
    prob$neighbors_job <- NULL
  }
  prob$nbr <- nb$nbr
  prob$duplicates <- nb$duplicates > 0L
  if (!is.null(nugget)) gp_check_duplicates(prob, nugget)
  prob
}
