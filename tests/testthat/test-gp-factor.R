# The Vecchia factor and the neighbour search of the GP engine, on either
# backend, against dense R constructions and brute force.

# The Vecchia factor through the .Call glue, on either backend.
vecchia_factor <- function(locs, nbr, kernel, dkernel, nugget, gpu) {
  .Call(gpukernels:::gk_r_gp_factor, locs, nbr, kernel, dkernel, nugget, NULL, 2L, gpu,
        "matrix")
}

test_that("the Vecchia factor on the GPU matches the CPU", {
  skip_if_no_gpu()
  kernels <- list(exponential = gk_kernel("exponential", range = 0.2),
                  matern32 = gk_kernel("matern", range = 0.2, smoothness = 1.5))
  compare <- function(locs, nbr, k, dk, nugget, info) {
    cpu <- vecchia_factor(locs, nbr, k, dk, nugget, FALSE)
    gpu <- vecchia_factor(locs, nbr, k, dk, nugget, TRUE)
    expect_lte(rel_err(gpu$coef, cpu$coef), 1e-10, label = info)
    expect_identical(gpu$coef == 0, cpu$coef == 0, info = info)   # skipped slots stay 0
    for (j in 1:3) expect_equal(gpu$stats[j], cpu$stats[j], tolerance = 1e-10, info = info)
  }
  # n not a multiple of any block size; rows 1 .. m have fewer neighbours than m
  for (n in c(1003L, 2503L)) for (dim in 2:3) for (m in c(1L, 10L, 40L, 64L)) {
    set.seed(n + 10L * dim + m)
    locs <- matrix(runif(n * dim), ncol = dim)
    nbr <- gpukernels:::gp_neighbors(locs, m, "cpu")$nbr
    for (name in names(kernels)) {
      k <- kernels[[name]]
      for (dk in list(NULL, gpukernels:::gp_dlogrange_kernel(k))) {
        compare(locs, nbr, k, dk, 0.01, paste(n, dim, m, name, !is.null(dk)))
      }
    }
  }
  # gaps among the kept slots: empty slots and neighbours that do not precede the row
  set.seed(71)
  n <- 1003L
  locs <- matrix(runif(2 * n), ncol = 2)
  nbr <- gpukernels:::gp_neighbors(locs, 40L, "cpu")$nbr
  nbr[sample(length(nbr), length(nbr) %/% 10)] <- 0L
  nbr[sample(length(nbr), length(nbr) %/% 10)] <- n
  k <- kernels$matern32
  compare(locs, nbr, k, gpukernels:::gp_dlogrange_kernel(k), 0.01, "gaps")
  # one and two points
  for (n in 1:2) {
    locs <- matrix(runif(2 * n), ncol = 2)
    for (m in c(1L, 3L)) {
      nbr <- gpukernels:::gp_neighbors(locs, m, "cpu")$nbr
      compare(locs, nbr, k, gpukernels:::gp_dlogrange_kernel(k), 0.01, paste("n =", n, m))
    }
  }
  # duplicated locations without a nugget: the same error, naming the same row
  set.seed(72)
  x <- matrix(runif(2 * 600), ncol = 2)
  x <- rbind(x, x[sample(600, 20), ])[sample(620), ]
  nbr <- gpukernels:::gp_neighbors(x, 10L, "cpu")$nbr
  for (k in kernels) {
    msg <- function(gpu) tryCatch(vecchia_factor(x, nbr, k, NULL, 0, gpu), error = conditionMessage)
    e_cpu <- msg(FALSE)
    expect_true(is.character(e_cpu))
    expect_match(e_cpu, "numerically singular near location [0-9]+")
    expect_identical(msg(TRUE), e_cpu)
  }
  # the R callers: the preconditioner of a GPU problem, and Vecchia simulation
  set.seed(73)
  locs <- matrix(runif(2 * 2503), ncol = 2)
  prob <- gpukernels:::gp_problem(locs, rnorm(2503), matrix(1, 2503, 1), "tiled",
                                  gp_control(), "gpu")
  pre_gpu <- gpukernels:::gp_preconditioner(prob, kernels$exponential, 0.01)
  prob$backend <- "cpu"
  pre_cpu <- gpukernels:::gp_preconditioner(prob, kernels$exponential, 0.01)
  expect_equal(pre_gpu$logdet, pre_cpu$logdet, tolerance = 1e-10)
  expect_equal(pre_gpu$trace_GG, pre_cpu$trace_GG, tolerance = 1e-10)
  expect_lte(rel_err(pre_gpu$coef, pre_cpu$coef), 1e-10)
  sims <- lapply(c("cpu", "gpu"), function(backend) {
    set.seed(74)
    gp_simulate(locs, kernels$matern32, nugget = 0.01, method = "vecchia", backend = backend)
  })
  expect_equal(sims[[2]], sims[[1]], tolerance = 1e-8)
})

# The statistics alone (coefficients "none": gp_preconditioner()'s traces of
# further derivative kernels) equal the full factor's, against a dense
# trace(G D G') in R, on each backend.
test_that("the statistics-only Vecchia factor gives the full factor's statistics", {
  k <- gk_kernel("matern", range = 0.2, smoothness = 1.5)
  h <- 1e-4
  up <- down <- k
  up$smoothness <- k$smoothness * exp(h)
  down$smoothness <- k$smoothness * exp(-h)
  for (backend in test_backends()) for (n in c(1L, 2L, 203L, 1003L)) {
    gpu <- backend == "gpu"
    info <- paste(backend, n)
    set.seed(n + 80L)
    locs <- matrix(runif(2 * n), ncol = 2)
    nbr <- gpukernels:::gp_neighbors(locs, 10L, "cpu")$nbr
    for (dk in list(NULL, gpukernels:::gp_dlogrange_kernel(k), up)) {
      call <- function(to, threads = 1L) {
        .Call(gpukernels:::gk_r_gp_factor, locs, nbr, k, dk, 0.01, NULL, threads, gpu, to)
      }
      full <- call("matrix")
      none <- call("none")
      expect_null(none$coef)
      expect_identical(none$stats, full$stats, info = info)   # the same sums in the same order
      expect_equal(call("none", 2L)$stats, full$stats, tolerance = 1e-12, info = info)
      if (gpu) expect_identical(call("device")$stats, full$stats, info = info)
    }
    # gp_preconditioner(): the smoothness term's two kernels by their statistics
    # alone, against trace(G D G') with G from the full factor, D the central
    # difference (the log-range term's kernel is the first one: full factor)
    prob <- list(locs = locs, nbr = nbr, dim = 2L, backend = backend)
    terms <- gpukernels:::gp_derivative_terms(k, smoothness = TRUE)
    pre <- gpukernels:::gp_preconditioner(prob, k, 0.01, terms)
    coef <- .Call(gpukernels:::gk_r_gp_factor, locs, nbr, k, NULL, 0.01, NULL, 1L, gpu, "matrix")$coef
    G <- diag(coef[, 1], n)
    for (j in seq_len(ncol(nbr))) {
      at <- nbr[, j] > 0
      G[cbind(which(at), nbr[at, j])] <- coef[at, j + 1L]
    }
    D <- Reduce(`+`, Map(function(kern, w) w * dense_kernel_matrix(locs, kern), terms$log_smoothness$kernels,
                         terms$log_smoothness$weights))
    expect_equal(pre$trace_GDG[[2]], sum(diag(G %*% D %*% t(G))), tolerance = 1e-7, info = info)
    expect_equal(pre$trace_GG, sum(G^2), tolerance = 1e-10, info = info)
  }
  for (backend in test_backends()) {   # no points: zero statistics
    none <- .Call(gpukernels:::gk_r_gp_factor, matrix(0, 0, 2), matrix(0L, 0, 3), k, NULL, 0.01,
                  NULL, 1L, backend == "gpu", "none")
    expect_identical(none, list(coef = NULL, stats = c(0, 0, 0)))
  }
  expect_error(.Call(gpukernels:::gk_r_gp_factor, locs, nbr, k, NULL, 0.01, c(1L, n, 1L), 1L,
                     FALSE, "none"), "come back as a matrix")
  expect_error(.Call(gpukernels:::gk_r_gp_factor, locs, nbr, k, NULL, 0.01, NULL, 1L,
                     FALSE, "nowhere"), "bad destination")
})

# More than one chunk of rows (kChunkRows, gp_factor_cuda.cu: 2^17), each
# written at its rows of the factor kept on the GPU; its neighbours are the
# rows just before (no search needed at this size).
test_that("the Vecchia factor kept on the GPU equals the CPU's over several chunks", {
  skip_if_no_gpu()
  n <- 2^17 + 1003
  m <- 4L
  set.seed(76)
  locs <- matrix(runif(2 * n), ncol = 2)
  nbr <- outer(seq_len(n), seq_len(m), "-")
  nbr[nbr < 1] <- 0L
  storage.mode(nbr) <- "integer"
  k <- gk_kernel("matern", range = 0.05, smoothness = 1.5)
  dk <- gpukernels:::gp_dlogrange_kernel(k)
  cpu <- vecchia_factor(locs, nbr, k, dk, 0.01, FALSE)
  kept <- .Call(gpukernels:::gk_r_gp_factor, locs, nbr, k, dk, 0.01, NULL, 2L, TRUE, "device")
  expect_identical(typeof(kept$coef), "externalptr")
  expect_lte(rel_err(.Call(gpukernels:::gk_r_gp_factor_host, kept$coef), cpu$coef), 1e-10)
  for (j in 1:3) expect_equal(kept$stats[j], cpu$stats[j], tolerance = 1e-10)
  .Call(gpukernels:::gk_r_gp_factor_free, kept$coef)
  # the statistics alone, chunk by chunk with their own neighbours: the same sums
  none <- .Call(gpukernels:::gk_r_gp_factor, locs, nbr, k, dk, 0.01, NULL, 2L, TRUE, "none")
  expect_null(none$coef)
  expect_identical(none$stats, kept$stats)
})

test_that("the GPU solver on a factor kept on the device gives the host factor's results", {
  skip_if_no_gpu()
  k <- gk_kernel("matern", range = 0.1, smoothness = 1.5)
  for (case in list(c(n = 1003, method = "h2"), c(n = 777, method = "tiled"), c(n = 1, method = "tiled"))) {
    n <- as.integer(case[["n"]])
    set.seed(n + 1)
    locs <- matrix(runif(2 * n), ncol = 2)
    prob <- gpukernels:::gp_problem(locs, rnorm(n), matrix(1, n, 1), case[["method"]],
                                    gp_control(probes = 3L), "gpu")
    pre <- gpukernels:::gp_preconditioner(prob, k, 0.01)
    kept <- gpukernels:::gp_preconditioner(prob, k, 0.01, keep = TRUE)
    expect_true(typeof(kept$coef) == "externalptr")
    expect_identical(kept$logdet, pre$logdet)
    expect_identical(.Call(gpukernels:::gk_r_gp_factor_host, kept$coef), pre$coef)
    op <- gpukernels:::gp_operator(prob, k, 0.01)
    A <- function(V) pre$G(op$mult(pre$Gt(V)))
    B <- list(cbind(rnorm(n), 1), gpukernels:::gk_device_block(matrix(rnorm(n * 9), n)))
    host_fac <- gpukernels:::gp_cg_solver(prob, op, pre, A)(B, track = 1:2, gt_b = TRUE, x = TRUE)
    dev_fac <- gpukernels:::gp_cg_solver(prob, op, kept, A)(B, track = 1:2, gt_b = TRUE, x = TRUE)
    expect_identical(dev_fac, host_fac)
    # G B formed by the solver (the first block) as by the host's G
    GB <- list(pre$G(B[[1]]), B[[2]])
    want <- gpukernels:::gp_cg_solver(prob, op, pre, A)(GB, track = 1:2, gt_b = TRUE)
    got <- gpukernels:::gp_cg_solver(prob, op, kept, A)(B, track = 1:2, gt_b = TRUE, g_blocks = 1L)
    expect_equal(got$gt_x, want$gt_x, tolerance = 1e-12)
    expect_equal(got$gt_b, want$gt_b, tolerance = 1e-12)
    # some columns whole and some rows of all of them, on the device and on the host
    rows <- unique(c(1L, min(n, 5L), n))
    part <- gpukernels:::gp_cg_solver(prob, op, kept, A)(B, g_blocks = 1L, gt_x_cols = 1L,
                                                         rows = rows)
    expect_identical(part$gt_x, got$gt_x[, 1, drop = FALSE])
    expect_identical(part$gt_x_rows, got$gt_x[rows, , drop = FALSE])
    # every column whole: the rows are read from it on the host, the same values
    whole <- gpukernels:::gp_cg_solver(prob, op, kept, A)(B, g_blocks = 1L, rows = rows)
    expect_identical(whole$gt_x, got$gt_x)
    expect_identical(whole$gt_x_rows, part$gt_x_rows)
    none <- gpukernels:::gp_cg_solver(prob, op, kept, A)(B, g_blocks = 1L, gt_x_cols = 0L)
    expect_identical(dim(none$gt_x), c(n, 0L))
    host <- gpukernels:::gp_cg_solver(prob, list(), pre, A)(B, g_blocks = 1L, gt_x_cols = 1L,
                                                            rows = rows)
    expect_equal(host$gt_x, part$gt_x, tolerance = 1e-7)
    expect_equal(host$gt_x_rows, part$gt_x_rows, tolerance = 1e-7)
    # the host products bring the kept coefficients down; freed, the handle says so
    V <- matrix(rnorm(2 * n), n)
    expect_identical(kept$G(V), pre$G(V))
    kept$free()
    kept$free()
    expect_error(gpukernels:::gp_cg_solver(prob, op, kept, A)(B), "Vecchia factor was freed")
  }
})

# The neighbour search of large problems: grid cells through block-sparse
# knn(), exact against brute force (forced on small inputs by a pair limit of 0).
brute_neighbors <- function(x, m, backend) {
  old <- options(gpukernels.gp_dense_knn_pairs = Inf)
  on.exit(options(old))
  gpukernels:::gp_neighbors(x, m, backend)
}

cell_cases <- function() {
  set.seed(61)
  n <- 2503   # not a multiple of any block size
  spread <- rep(c(0.01, 1), length.out = n)   # dense clumps in a wide cloud: many rows redo
  list(uniform_2d = matrix(runif(2 * n), n, 2),
       uniform_3d = matrix(runif(3 * n), n, 3),
       clumped_2d = matrix(rnorm(2 * n, sd = spread), n, 2),
       line_in_2d = cbind(runif(n), 0.5),                       # one dimension without extent
       duplicated = rbind(matrix(runif(2 * 2000), 2000, 2), matrix(runif(2 * 10), 10, 2)[rep(1:10, 50), ]),
       one_d = matrix(rnorm(n), n, 1))
}

test_that("the grid-cell neighbour search equals brute force", {
  old <- options(gpukernels.gp_dense_knn_pairs = 0)
  on.exit(options(old))
  for (name in names(cases <- cell_cases())) {
    x <- cases[[name]]
    for (m in c(1L, 15L, 40L)) {
      got <- gpukernels:::gp_neighbors(x, m, "cpu")
      ref <- brute_neighbors(x, m, "cpu")
      expect_identical(got$duplicates, ref$duplicates, info = paste(name, m))
      if (name %in% c("duplicated", "one_d")) {
        # ties (equal distances) may pick another of the tied points: compare distances
        dist_to <- function(nbr) {
          d <- matrix(0, nrow(nbr), ncol(nbr))
          for (j in seq_len(ncol(nbr))) {
            ok <- nbr[, j] > 0
            d[ok, j] <- sqrt(rowSums((x[ok, , drop = FALSE] - x[nbr[ok, j], , drop = FALSE])^2))
          }
          d
        }
        expect_equal(dist_to(got$nbr), dist_to(ref$nbr), tolerance = 1e-12, info = paste(name, m))
        expect_identical(got$nbr > 0, ref$nbr > 0, info = paste(name, m))
      } else {
        expect_identical(got$nbr, ref$nbr, info = paste(name, m))
      }
    }
  }
})

test_that("the grid-cell neighbour search on the GPU equals the CPU", {
  skip_if_no_gpu()
  old <- options(gpukernels.gp_dense_knn_pairs = 0)
  on.exit(options(old))
  cases <- cell_cases()
  for (name in c("uniform_2d", "uniform_3d", "clumped_2d")) {
    expect_identical(gpukernels:::gp_neighbors(cases[[name]], 40L, "gpu"),
                     gpukernels:::gp_neighbors(cases[[name]], 40L, "cpu"), info = name)
  }
})
