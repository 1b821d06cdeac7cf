# The Vecchia neighbour search (through gp_neighbors(): the cell walk of
# src/gp/gp_neighbors_cells.c in 1 to 3 dimensions, the candidate search of
# src/gp/gp_neighbors.c beyond): against brute force in R, against the R
# implementation it replaced, and GPU against CPU.

# Internal functions here: the Vecchia neighbour search, not exported.
gp_nb <- function(x, m, backend = "cpu") gpukernels:::gp_neighbors(x, as.integer(m), backend)

# Runs `code` with the brute-force limit of the search at `pairs` (0: every
# block that can is searched in grid cells).
with_dense_pairs <- function(pairs, code) {
  old <- options(gpukernels.gp_dense_knn_pairs = pairs)
  on.exit(options(old))
  code
}

# Brute force in R. For each point i, its m nearest among the points 1..i-1
# (Euclidean, ties to the smaller index; 0 where there are fewer). The search
# looks at the k = min(64, 2m + 2) nearest of the points 1..end of the block
# holding i (blocks as in gp_neighbors.c) and keeps those before i; a row
# where just c < min(m, i - 1) of its candidates precede it (`short`) is
# searched again among all its predecessors, so every row gets its
# min(m, i - 1) nearest preceding points. `duplicates` counts the candidates
# at distance 0 before their row.
reference_neighbors <- function(x, m) {
  n <- nrow(x)
  nbr <- matrix(0L, n, m)
  duplicates <- 0L
  short <- logical(n)
  first <- 1L
  while (m > 0L && n >= 2L && first <= n) {
    end <- if (first == 1L) min(n, 4L * m) else min(n, max(first, floor(1.5 * (first - 1L))))
    k <- min(end, 64L, 2L * m + 2L)
    rows <- first:end
    d2 <- 0
    for (j in seq_len(ncol(x))) d2 <- d2 + outer(x[rows, j], x[seq_len(end), j], "-")^2
    for (r in seq_along(rows)) {
      i <- rows[r]
      o <- order(d2[r, ], seq_len(end))       # ties to the smaller index
      before <- o[o < i]                        # the points before i, nearest first
      want <- min(m, i - 1L)
      cand <- o[seq_len(k)]
      nbr[i, seq_len(want)] <- before[seq_len(want)]
      short[i] <- sum(cand < i) < want
      duplicates <- duplicates + sum(d2[r, cand] == 0 & cand < i)
    }
    first <- end + 1L
  }
  list(nbr = nbr, duplicates = as.integer(duplicates), short = short)
}

# Most points in a tiny clump, a few far away: far rows have their k-th
# neighbour beyond the cell side and are searched again by brute force.
clumped_points <- function(n, d) {
  x <- matrix(rnorm(n * d, sd = 1e-3), n, d)
  far <- sample(n, max(1L, n %/% 40L))
  x[far, ] <- runif(length(far) * d, -10, 10)
  x
}

# Random points with some locations repeated (groups of at most 3 copies).
duplicated_points <- function(n, d) {
  base <- matrix(runif(n * d), n, d)
  copies <- c(seq_len(n %/% 10), seq_len(n %/% 20))
  x <- rbind(base, base[copies, , drop = FALSE])
  x[sample(nrow(x)), , drop = FALSE]
}

check_against_reference <- function(x, m, info) {
  ref <- reference_neighbors(x, m)
  for (pairs in c(0, 2e7)) {   # grid cells wherever they can be used; the default
    got <- with_dense_pairs(pairs, gp_nb(x, m))
    expect_identical(got$nbr, ref$nbr, info = paste(info, pairs))
    expect_identical(got$duplicates, ref$duplicates, info = paste(info, pairs))
  }
  # rows cut short by the candidates (searched again) are rare beyond the
  # first block (about 0.5 to 1 percent of them at m = 1, fewer at larger m)
  expect_lte(sum(ref$short[-seq_len(4L * m)]), max(3, nrow(x) / 40), label = info)
  expect_identical(as.integer(rowSums(got$nbr > 0L)), pmin(m, seq_len(nrow(x)) - 1L), info = info)
  invisible(ref)
}

test_that("the neighbours are the nearest preceding points, as brute force finds them", {
  for (d in 1:4) for (n in c(1L, 2L, 37L, 1000L, 5003L)) for (m in c(1L, 5L, 30L)) {
    set.seed(1000L * d + n + m)
    x <- matrix(runif(n * d), n, d)
    check_against_reference(x, m, paste("uniform", d, n, m))
  }
})

test_that("clumped points (rows searched again) and points on a line", {
  for (d in 1:4) for (m in c(1L, 5L, 30L)) {
    set.seed(20L * d + m)
    check_against_reference(clumped_points(2003L, d), m, paste("clumped", d, m))
  }
  set.seed(3)
  line <- cbind(runif(1500), 0.5, runif(1500) * 1e-9)   # one dimension without extent, one thin
  for (m in c(1L, 5L, 30L)) check_against_reference(line, m, paste("line", m))
})

test_that("duplicated locations are counted", {
  for (d in 1:4) for (m in c(1L, 5L, 30L)) {
    set.seed(40L * d + m)
    x <- duplicated_points(1200L, d)
    ref <- check_against_reference(x, m, paste("duplicated", d, m))
    # every copy finds the earlier copies of its location among its candidates
    expect_identical(ref$duplicates, as.integer(1200 %/% 10 + 2 * 1200 %/% 20))
  }
  expect_identical(gp_nb(matrix(0, 5, 2), 2L)$duplicates, 10L)
})

test_that("edge cases: no neighbours, tiny sets, integer and far-away coordinates", {
  x <- matrix(runif(20), 10, 2)
  expect_identical(gp_nb(x, 0L), list(nbr = matrix(0L, 10, 0), duplicates = 0L))
  expect_identical(gp_nb(x[0, , drop = FALSE], 3L), list(nbr = matrix(0L, 0, 3), duplicates = 0L))
  expect_identical(gp_nb(x[1, , drop = FALSE], 3L), list(nbr = matrix(0L, 1, 3), duplicates = 0L))
  expect_identical(gp_nb(x, 20L)$nbr, reference_neighbors(x, 20L)$nbr)
  set.seed(5)
  xi <- matrix(sample(1e6, 3000), 1500, 2)   # integer storage, as double
  expect_identical(gp_nb(xi, 10L), gp_nb(xi + 0, 10L))
  u <- matrix(runif(3000), 1500, 2)
  # far from the origin, and knn()'s rescaling of huge and tiny spreads (by
  # powers of two: the same neighbours as u)
  for (case in list(list(x = u + 1e8, ref = u + 1e8), list(x = u * 2^420, ref = u),
                    list(x = u * 2^-450, ref = u))) {
    ref <- reference_neighbors(case$ref, 10L)$nbr
    expect_identical(with_dense_pairs(0, gp_nb(case$x, 10L))$nbr, ref)
    expect_identical(gp_nb(case$x, 10L)$nbr, ref)
  }
  expect_error(gp_nb(matrix(c(1, NA), 1, 2)[c(1, 1), ], 1L), "finite")
})

# The R implementation this search replaced (gpukernels 0.1.0, R/gp_engine.R),
# kept as a reference: grid_cluster(), sort_clusters(), block-sparse knn() and
# the keep-preceding step from R; its rows with fewer than min(m, i - 1)
# neighbours are then searched again by brute force (as the C search does).
old_gp_knn_cells <- function(xc, first_row, k, backend) {
  rows <- first_row:nrow(xc)
  xr <- xc[rows, , drop = FALSE]
  dense <- function(r) {
    nn <- knn(xr[r, , drop = FALSE], xc, k = k, backend = backend)
    list(list(index = nn$index, distance = nn$distance,
              row_of = if (length(r) < length(rows)) as.integer(r)))
  }
  if (as.double(length(rows)) * nrow(xc) <= gpukernels:::gp_dense_knn_pairs()) {
    return(dense(seq_along(rows)))
  }
  d <- ncol(xc)
  low <- apply(xc, 2L, min)
  span <- apply(xc, 2L, max) - low
  live <- span > 0
  unit_ball <- pi^(d / 2) / gamma(d / 2 + 1)
  s <- (4 * k * prod(span[live]) / (nrow(xc) * unit_ball))^(1 / sum(live))
  extent <- floor(span / s) + 1
  if (!all(is.finite(s), s > 0) || sum(extent >= 4) == 0 || prod(extent) >= 2^52) {
    return(dense(seq_along(rows)))
  }
  labels <- grid_cluster(xc, s)
  cand <- sort_clusters(xc, labels)
  ranges_c <- gpukernels:::gk_label_ranges(cand$labels, max(cand$labels))
  own <- sort_clusters(xr, labels[rows])
  ranges_r <- gpukernels:::gk_label_ranges(own$labels, nrow(ranges_c))
  coords <- floor(sweep(cand$x[ranges_c[, 1L], , drop = FALSE], 2L, low) / s)
  radix <- cumprod(c(1, extent[-d]))
  key <- drop(coords %*% radix)
  with_rows <- which(ranges_r[, 2L] >= ranges_r[, 1L])
  offsets <- as.matrix(expand.grid(rep(list(-1:1), d)))
  pair_x <- pair_y <- integer()
  for (o in seq_len(nrow(offsets))) {
    around <- sweep(coords[with_rows, , drop = FALSE], 2L, offsets[o, ], "+")
    inside <- rowSums(around < 0 | sweep(around, 2L, extent, ">=")) == 0
    hit <- match(drop(around %*% radix), key)
    keep <- inside & !is.na(hit)
    pair_x <- c(pair_x, with_rows[keep])
    pair_y <- c(pair_y, hit[keep])
  }
  ranges <- gpukernels:::gk_ranges_from_pairs(ranges_r, ranges_c, pair_x, pair_y)
  nn <- knn(own$x, cand$x, k = k, backend = backend, ranges = ranges)
  redo <- !(nn$distance[, k] <= s * (1 - 1e-12))
  cells <- list(index = nn$index, distance = nn$distance, row_of = as.integer(own$perm),
                id = as.integer(cand$perm), skip = as.integer(redo))
  if (!any(redo)) return(list(cells))
  c(list(cells), dense(sort(own$perm[redo])))
}

old_gp_neighbors <- function(xo, m, backend) {
  n <- nrow(xo)
  nbr <- matrix(0L, n, max(m, 0L))
  duplicates <- 0L
  if (m == 0L || n < 2L) return(list(nbr = nbr, duplicates = duplicates))
  k_most <- min(64L, 2L * m + 2L)
  start <- 1L
  while (start <= n) {
    end <- if (start == 1L) min(n, 4L * m) else min(n, max(start, floor(1.5 * (start - 1L))))
    k <- min(end, k_most)
    for (part in old_gp_knn_cells(xo[seq_len(end), , drop = FALSE], start, k, backend)) {
      duplicates <- duplicates + .Call(gpukernels:::gk_r_gp_keep_preceding, part$index,
                                       part$distance, as.integer(start), nbr, part$row_of,
                                       part$id, part$skip, 2L)
    }
    start <- end + 1L
  }
  for (i in which(rowSums(nbr > 0L) < pmin(m, seq_len(n) - 1L))) {
    d2 <- colSums((t(xo[seq_len(i - 1L), , drop = FALSE]) - xo[i, ])^2)
    want <- min(m, i - 1L)
    nbr[i, ] <- c(order(d2, seq_len(i - 1L))[seq_len(want)], integer(m - want))
  }
  list(nbr = nbr, duplicates = duplicates)
}

test_that("the C search equals the R implementation it replaced", {
  set.seed(9)
  n <- 3001L
  cases <- list(uniform_2d = matrix(runif(2 * n), n, 2), uniform_3d = matrix(runif(3 * n), n, 3),
                clumped_2d = clumped_points(n, 2L), duplicated_2d = duplicated_points(n, 2L),
                one_d = matrix(rnorm(n), n, 1))
  for (name in names(cases)) for (pairs in c(0, 2e7)) for (m in c(10L, 40L)) {
    with_dense_pairs(pairs, {
      expect_identical(gp_nb(cases[[name]], m), old_gp_neighbors(cases[[name]], m, "cpu"),
                       info = paste(name, pairs, m))
    })
  }
})

test_that("the GPU finds the same neighbours as the CPU", {
  skip_if_no_gpu()
  set.seed(11)
  n <- 20011L
  cases <- list(uniform_2d = matrix(runif(2 * n), n, 2), uniform_3d = matrix(runif(3 * n), n, 3),
                clumped_2d = clumped_points(n, 2L), duplicated_2d = duplicated_points(n, 2L),
                uniform_4d = matrix(runif(4 * n), n, 4), clumped_4d = clumped_points(n, 4L))
  for (name in names(cases)) for (pairs in c(0, 2e7)) for (m in c(5L, 40L)) {
    with_dense_pairs(pairs, {
      expect_identical(gp_nb(cases[[name]], m, "gpu"), gp_nb(cases[[name]], m, "cpu"),
                       info = paste(name, pairs, m))
    })
  }
})

# An interrupted search (run_interrupted(), whose setup draws, after
# set.seed(8), `long_values` uniforms for the long search and then 300 2D
# points): it stopped as R's interrupt, soon, and the search that followed
# in the same process found those points' 10 neighbours.
expect_search_interrupted <- function(run, long_values) {
  expect_identical(run$results$search$outcome, "interrupt")
  expect_lt(run$results$search$latency, 5)
  set.seed(8)
  invisible(runif(long_values))
  x_small <- matrix(runif(2 * 300), ncol = 2)
  expect_identical(run$after$nbr, reference_neighbors(x_small, 10L)$nbr)
}

test_that("the search stops on an interrupt, as R's interrupt condition", {
  skip_on_os("windows")
  setup <- "
    options(gpukernels.threads = 2, gpukernels.gp_dense_knn_pairs = Inf)
    set.seed(8)
    x_long <- matrix(runif(4 * 2e5), ncol = 4)   # 4D, brute force: minutes
    x_small <- matrix(runif(2 * 300), ncol = 2)
  "
  run <- run_interrupted(c(search = "gpukernels:::gp_neighbors(x_long, 10L, 'cpu')"),
                         setup = setup, after = "gpukernels:::gp_neighbors(x_small, 10L, 'cpu')")
  expect_search_interrupted(run, long_values = 4 * 2e5)
})

# The search on a host thread of its own (gp_neighbors_job.c), as gp_loglik()
# runs it alongside the GPU's H2 build: internal functions, not exported.
nb_start <- function(x, m) gpukernels:::gp_neighbors_start(x, as.integer(m))
nb_join <- function(job, cancel = FALSE) gpukernels:::gp_neighbors_join(job, cancel)

test_that("the search on a host thread finds what the search in the call finds", {
  set.seed(21)
  cases <- list(uniform_1d = matrix(runif(1001), ncol = 1),
                uniform_2d = matrix(runif(2 * 5003), ncol = 2),
                uniform_3d = matrix(runif(3 * 2999), ncol = 3),
                clumped_2d = clumped_points(3001L, 2L), duplicated_3d = duplicated_points(2003L, 3L),
                one = matrix(0.5, 1, 2), two = matrix(c(0, 1, 0, 1), 2, 2),
                empty = matrix(numeric(0), 0, 2))
  for (name in names(cases)) for (m in c(0L, 1L, 7L, 60L)) {
    x <- cases[[name]]
    expect_identical(nb_join(nb_start(x, m)), gp_nb(x, m), info = paste(name, m))
  }
  # two at once, joined in the other order; against brute force
  x1 <- matrix(runif(2 * 777), ncol = 2)
  x2 <- matrix(runif(3 * 555), ncol = 3)
  j1 <- nb_start(x1, 9L)
  j2 <- nb_start(x2, 12L)
  r2 <- nb_join(j2)
  r1 <- nb_join(j1)
  ref1 <- reference_neighbors(x1, 9L)
  expect_identical(r1$nbr, ref1$nbr)
  expect_identical(r1$duplicates, ref1$duplicates)
  expect_identical(r2$nbr, reference_neighbors(x2, 12L)$nbr)
})

test_that("a search on a host thread is cancelled, joined once, and fails as an R error", {
  set.seed(22)
  job <- nb_start(matrix(runif(2 * 2e5), ncol = 2), 30L)
  expect_null(nb_join(job, cancel = TRUE))
  expect_null(nb_join(job, cancel = TRUE))   # a no-op once joined
  expect_error(nb_join(job), "joined already")
  done <- nb_start(matrix(runif(20), ncol = 2), 3L)
  invisible(nb_join(done))
  expect_error(nb_join(done), "joined already")
  # dropped unjoined: the finalizer stops and joins it
  lost <- nb_start(matrix(runif(2 * 2e5), ncol = 2), 30L)
  rm(lost)
  invisible(gc())
  bad <- matrix(runif(20), ncol = 2)
  bad[3, 2] <- NaN
  expect_error(nb_join(nb_start(bad, 3L)), "must be finite")
  expect_error(nb_start(matrix(runif(40), ncol = 4), 3L), "4 dimensions")
})

test_that("an interrupt while waiting for the host thread stops its search", {
  skip_on_os("windows")
  setup <- "
    options(gpukernels.threads = 1)
    set.seed(8)
    x_long <- matrix(runif(3 * 1e6), ncol = 3)   # 3D, one thread: several seconds
    x_small <- matrix(runif(2 * 300), ncol = 2)
  "
  run <- run_interrupted(
    c(search = "gpukernels:::gp_neighbors_join(gpukernels:::gp_neighbors_start(x_long, 60L))"),
    setup = setup,
    after = "gpukernels:::gp_neighbors_join(gpukernels:::gp_neighbors_start(x_small, 10L))")
  expect_search_interrupted(run, long_values = 3 * 1e6)
})
