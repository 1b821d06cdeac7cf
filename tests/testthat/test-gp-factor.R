# The Vecchia factor and the neighbour search of the GP engine, on either
# backend, against dense R constructions and brute force.

# The Vecchia factor through the .Call glue, on either backend.
vecchia_factor <- function(locs, nbr, kernel, dkernel, nugget, gpu) {
  .Call(gpukernels:::gk_r_gp_factor, locs, nbr, kernel, dkernel, nugget, NULL, 2L, gpu)
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
