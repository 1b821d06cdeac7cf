# Work split over future workers, file-backed output, pcf_knn and progress.
skip_if_not_installed("future")

# Brute-force k nearest from a full distance matrix (ties to the smaller index).
knn_reference <- function(D, k) {
  rows <- lapply(seq_len(nrow(D)), function(i) order(D[i, ], seq_len(ncol(D)))[seq_len(k)])
  list(index = do.call(rbind, rows),
       distance = do.call(rbind, lapply(seq_len(nrow(D)), function(i) D[i, rows[[i]]])))
}

test_that("pcf_knn matches a brute-force reference, among X and against Y", {
  set.seed(11)
  for (n in c(2, 5, 37)) {
    X <- draw_pcfs(n)
    D <- unname(as.matrix(pcf_pdist(X, backend = "cpu")))
    diag(D) <- Inf
    k <- min(3, n - 1)
    for (backend in test_backends()) {
      nn <- pcf_knn(X, k = k, backend = backend)
      ref <- knn_reference(D, k)
      tol <- if (backend == "gpu") 1e-12 else 0
      expect_equal(nn$distance, ref$distance, tolerance = tol)
      if (backend == "cpu") expect_identical(nn$index, ref$index)
    }
  }
  X <- draw_pcfs(23)
  Y <- draw_pcfs(9)
  D <- pcf_cdist(X, Y, p = 2, backend = "cpu")
  nn <- pcf_knn(X, Y, k = 9, p = 2, backend = "cpu")
  expect_identical(nn$index, knn_reference(D, 9)$index)
  # Many blocks (small budget) give the same lists.
  withr_budget <- options(gpukernels.pcf_budget_bytes = 7 * 7 * 8 * 2)
  on.exit(options(withr_budget))
  expect_identical(pcf_knn(X, k = 4, backend = "cpu"),
                   { options(withr_budget); pcf_knn(X, k = 4, backend = "cpu") })
})

test_that("pcf_knn rejects bad k and bad input", {
  X <- draw_pcfs(5)
  expect_error(pcf_knn(X, k = 5), "larger than the number of candidate")
  expect_error(pcf_knn(X, k = 0), "k")
  expect_error(pcf_knn(X, draw_pcfs(1), k = 2), "larger than")
  X[[2]][1, 1] <- NA
  expect_error(pcf_knn(X, k = 1), "NA")
  expect_error(pcf_knn(list(), k = 1), "larger than|empty")
})

test_that("workers = k without a plan runs the chunks in this process and agrees", {
  set.seed(3)
  X <- draw_pcfs(31)
  Y <- draw_pcfs(7)
  expect_true(same_dist(pcf_pdist(X, backend = "cpu"), pcf_pdist(X, backend = "cpu", workers = 4)))
  expect_identical(pcf_kernel(X, backend = "cpu"), pcf_kernel(X, backend = "cpu", workers = 3))
  expect_identical(pcf_cdist(X, Y, backend = "cpu"), pcf_cdist(X, Y, backend = "cpu", workers = 5))
  expect_error(pcf_pdist(X, workers = 0), "workers")
  expect_error(pcf_pdist(X, workers = "a"), "workers")
})

test_that("pcf_knn split into triangle bands equals one call and brute force", {
  set.seed(31)
  X <- draw_pcfs(23)
  X[c(5, 17, 20)] <- X[9]   # equal functions: ties at distance 0, to the smaller index
  ref_all <- knn_reference({ D <- as.matrix(pcf_pdist(X, backend = "cpu")); diag(D) <- Inf; D }, 22)
  for (k in c(1L, 4L, 22L)) {
    one <- pcf_knn(X, k = k, backend = "cpu")
    expect_equal(one$index, ref_all$index[, seq_len(k), drop = FALSE], info = k)
    for (workers in c(2L, 3L, 7L, 23L)) {   # 23: bands of one function
      expect_identical(pcf_knn(X, k = k, backend = "cpu", workers = workers), one,
                       info = paste(k, workers))
    }
  }
  # against Y, split by rows
  Y <- draw_pcfs(6)
  expect_identical(pcf_knn(X, Y, k = 3, backend = "cpu", workers = 4),
                   pcf_knn(X, Y, k = 3, backend = "cpu"))
})

compare_all <- function() {
  set.seed(7)
  X <- draw_pcfs(41)
  Y <- draw_pcfs(13)
  expect_true(same_dist(pcf_pdist(X, backend = "cpu", workers = 1), pcf_pdist(X, backend = "cpu")))
  expect_identical(pcf_cdist(X, Y, p = 2, backend = "cpu", workers = 1),
                   pcf_cdist(X, Y, p = 2, backend = "cpu"))
  expect_identical(pcf_kernel(X, backend = "cpu", workers = 1), pcf_kernel(X, backend = "cpu"))
  expect_identical(pcf_kernel(X, Y[1:3], backend = "cpu", workers = 1),
                   pcf_kernel(X, Y[1:3], backend = "cpu"))
  expect_identical(pcf_knn(X, k = 3, backend = "cpu", workers = 1), pcf_knn(X, k = 3, backend = "cpu"))
  expect_identical(pcf_knn(X, k = 5, backend = "cpu", workers = 3), pcf_knn(X, k = 5, backend = "cpu"))
  x <- matrix(rnorm(3 * 53), 53, 3)
  y <- matrix(rnorm(3 * 20), 20, 3)
  b <- matrix(rnorm(40), 20, 2)
  expect_identical(kernel_reduce(x, y, b, backend = "cpu", workers = 1),
                   kernel_reduce(x, y, b, backend = "cpu"))
  expect_identical(kernel_matvec(x, y, b, axis = 1, backend = "cpu", workers = 1),
                   kernel_matvec(x, y, b, backend = "cpu"))
  bx <- rnorm(53)
  expect_identical(kernel_matvec(x, y, bx, axis = 2, backend = "cpu", workers = 1),
                   kernel_matvec(x, y, bx, axis = 2, backend = "cpu"))
  expect_identical(kernel_reduce(x, y, reduction = "argmin", kernel = "sqdist", backend = "cpu",
                                 workers = 1),
                   kernel_reduce(x, y, reduction = "argmin", kernel = "sqdist", backend = "cpu"))
  expect_identical(knn(x, y, k = 4, backend = "cpu", workers = 1), knn(x, y, k = 4, backend = "cpu"))
}

test_that("plan(multisession, workers = 2) gives the single-process results", {
  with_plan(future::multisession, {
    # Internal functions here: the chunking rule itself, before any work is split.
    expect_identical(gpukernels:::gk_chunk_count(NULL, 100), 2L)
    compare_all()
  })
})

test_that("plans of this machine alone keep PCF results here unless workers are asked", {
  set.seed(23)
  X <- draw_pcfs(43)
  Y <- draw_pcfs(11)
  D <- pcf_pdist(X, backend = "cpu", workers = 1)
  C <- pcf_cdist(X, Y, backend = "cpu", workers = 1)
  K <- pcf_kernel(X, backend = "cpu", workers = 1)
  nn <- pcf_knn(X, k = 3, backend = "cpu", workers = 1)
  with_plan(future::multisession, {
    expect_identical(gpukernels:::gk_chunk_count(NULL, 100, local_here = TRUE), 0L)
    # The default: this process on all its GPUs, no futures.
    none <- futures_made({
      expect_true(same_dist(pcf_pdist(X, backend = "cpu"), D))
      expect_identical(pcf_cdist(X, Y, backend = "cpu"), C)
      expect_identical(pcf_kernel(X, backend = "cpu"), K)
      expect_identical(pcf_knn(X, k = 3, backend = "cpu"), nn)
    })
    expect_identical(none, 0L)
    # Workers asked for by number: as many futures, the same values.
    two <- futures_made({
      expect_true(same_dist(pcf_pdist(X, backend = "cpu", workers = 2), D))
      expect_identical(pcf_knn(X, k = 3, backend = "cpu", workers = 2), nn)
    })
    expect_identical(two, 4L)
  })
  # A cluster plan may reach other machines: its workers get the bands.
  with_plan(future::cluster, {
    expect_identical(futures_made(expect_identical(pcf_cdist(X, Y, backend = "cpu"), C)), 2L)
  })
})

test_that("plan(cluster) on localhost gives the single-process results", {
  with_plan(future::cluster, compare_all())
})

shared_cases <- function() {
  set.seed(19)
  for (n in c(2, 3, 41, 257)) {   # 2: bands of one function; 257: several blocks per band
    X <- draw_pcfs(n)
    Y <- draw_pcfs(if (n > 3) 13 else 1)
    for (workers in c(2, 3)) {
      d <- pcf_pdist(X, backend = "cpu", workers = workers)
      expect_true(same_dist(pcf_pdist(X, backend = "cpu", workers = 1), d), info = n)
      expect_identical(pcf_cdist(X, Y, p = 3, backend = "cpu", workers = workers),
                       pcf_cdist(X, Y, p = 3, backend = "cpu", workers = 1), info = n)
      expect_identical(pcf_kernel(X, backend = "cpu", workers = workers),
                       pcf_kernel(X, backend = "cpu", workers = 1), info = n)
      expect_identical(pcf_kernel(X, Y, backend = "cpu", workers = workers),
                       pcf_kernel(X, Y, backend = "cpu", workers = 1), info = n)
      expect_true(same_dist(pcf_pdist(X, p = Inf, precision = "single", backend = "cpu",
                                      workers = workers),
                            pcf_pdist(X, p = Inf, precision = "single", backend = "cpu",
                                      workers = 1)))
    }
  }
  # Many small blocks on each worker (and a 1 x 1 result).
  old <- options(gpukernels.pcf_budget_bytes = 9 * 9 * 8 * 2)
  on.exit(options(old))
  X <- draw_pcfs(60)
  expect_true(same_dist(pcf_pdist(X, backend = "cpu", workers = 4),
                        { options(old); pcf_pdist(X, backend = "cpu", workers = 1) }))
  expect_identical(pcf_cdist(X[1:2], X[3], backend = "cpu", workers = 2),
                   pcf_cdist(X[1:2], X[3], backend = "cpu", workers = 1))
}

test_that("workers send their bands through shared slots: results equal one process", {
  with_tunables(list(GK_CHANNEL_DIRECT = 0, GK_CHANNEL_HANDOVER = 0), {
    shared_cases()   # chunks as futures of the sequential plan, in this process
    with_plan(future::multisession, shared_cases())
  })
})

test_that("workers without the hand-over send through slots: results equal one process", {
  # GK_CHANNEL_HANDOVER = 0, the inputs read from this process where the
  # system lets the workers (GK_CHANNEL_DIRECT unset).
  with_tunables(list(GK_CHANNEL_DIRECT = NA, GK_CHANNEL_HANDOVER = 0), {
    shared_cases()
    with_plan(future::multisession, shared_cases())
  })
  skip_if_not(Sys.info()[["sysname"]] == "Linux")
  set.seed(54)
  X <- draw_pcfs(90)
  lines <- with_tunables(list(GK_CHANNEL_HANDOVER = 0), with_plan(future::multisession, {
    old <- options(gpukernels.progress = TRUE)
    on.exit(options(old))
    capture.output(d <- pcf_pdist(X, backend = "cpu", workers = 2), type = "message")
  }))
  expect_true(same_dist(d, pcf_pdist(X, backend = "cpu", workers = 1)))
  # Of the workers that took blocks of the shared list (one or both).
  slots <- Filter(length, regmatches(lines, regexec("([0-9]+) of ([0-9]+) through shared slots",
                                                    lines)))
  expect_length(slots, 1)
  expect_identical(slots[[1]][2], slots[[1]][3])
  expect_true(slots[[1]][3] %in% c("1", "2"))
  expect_false(any(grepl("handed over", lines)))
})

# A call's progress lines: every worker that sent blocks handed them over in place.
expect_handed_over <- function(lines, info = NULL) {
  handed <- Filter(length, regmatches(lines, regexec("([0-9]+) of ([0-9]+) handed over in place",
                                                     lines)))
  expect_length(handed, 1)
  expect_identical(handed[[1]][2], handed[[1]][3], info = info)
  expect_true(as.integer(handed[[1]][3]) >= 1, info = info)
  expect_false(any(grepl("through shared slots", lines)), info = info)
}

test_that("workers hand their blocks over in place: results equal one process", {
  skip_if_not(Sys.info()[["sysname"]] == "Linux")
  set.seed(72)
  X <- draw_pcfs(301)   # blocks of side 64: a last, partial block row
  Y <- draw_pcfs(23)
  old <- options(gpukernels.pcf_budget_bytes = 64 * 64 * 8 * 2)
  on.exit(options(old))
  # A dist, a full symmetric matrix and single precision: every kind the
  # caller's threads write from a worker's block buffer (CPU) or staging
  # (GPU), checked against one process on the CPU: exactly for CPU workers.
  calls <- list(
    dist = function(backend) pcf_pdist(X, backend = backend, workers = 2),
    symmetric = function(backend) pcf_kernel(X, backend = backend, workers = 2),
    single = function(backend) pcf_cdist(X, Y, p = 2, precision = "single", backend = backend,
                                         workers = 2))
  reference <- list(dist = as.vector(pcf_pdist(X, backend = "cpu")),
                    symmetric = pcf_kernel(X, backend = "cpu"),
                    single = pcf_cdist(X, Y, p = 2, precision = "single", backend = "cpu"))
  gpu_tolerance <- c(dist = 1e-12, symmetric = 1e-12, single = 1e-5)
  check <- function(what, backend) {
    opt <- options(gpukernels.progress = TRUE)
    lines <- capture.output(got <- calls[[what]](backend), type = "message")
    options(opt)
    info <- paste(what, backend)
    expect_equal(as.vector(got), as.vector(reference[[what]]),
                 tolerance = if (backend == "cpu") 0 else gpu_tolerance[[what]], info = info)
    expect_handed_over(lines, info)
  }
  # Twice each: a worker's block memory made in the call, then kept, and
  # this process's mapping of it too.
  for (backend in c("cpu", if (gk_has_gpu()) "gpu")) with_plan(future::multisession, {
    for (what in rep(names(calls), each = 2)) check(what, backend)
  })
  # The route alone where workers may not read this process (their
  # GK_CHANNEL_DIRECT = 0: the inputs through shared memory).
  with_tunables(list(GK_CHANNEL_DIRECT = 0), with_plan(future::multisession, {
    with_tunables(list(GK_CHANNEL_DIRECT = NA), check("dist", "cpu"))
  }))
})

test_that("workers take the blocks of one shared list, each block once", {
  skip_if_not(Sys.info()[["sysname"]] == "Linux")
  set.seed(67)
  X <- draw_pcfs(150)
  Y <- draw_pcfs(40)
  old <- options(gpukernels.pcf_budget_bytes = 16 * 16 * 8 * 2)   # blocks of side 16
  on.exit(options(old))
  taken <- function(code) {
    opt <- options(gpukernels.progress = TRUE)
    on.exit(options(opt))
    lines <- capture.output(value <- code, type = "message")
    got <- regmatches(lines, regexpr("blocks taken [0-9/]+", lines))
    expect_length(got, 1)
    list(value = value, taken = as.numeric(strsplit(sub("blocks taken ", "", got), "/")[[1]]))
  }
  # Internal: the CPU engine's plans, 16 x 16 blocks.
  blocks <- function(n_rows, n_cols, lower) {
    nrow(gpukernels:::gk_block_plan(n_rows, n_cols, lower, 256))
  }
  # Futures of the sequential plan, one after the other here: the first
  # takes every block, the others none.
  d <- taken(pcf_pdist(X, backend = "cpu", workers = 3))
  expect_equal(d$taken, c(blocks(150, 150, TRUE), 0, 0))
  for (direct in c(0, NA)) with_tunables(list(GK_CHANNEL_DIRECT = direct), {
    with_plan(future::multisession, {
      d <- taken(pcf_pdist(X, backend = "cpu", workers = 3))
      expect_true(same_dist(d$value, pcf_pdist(X, backend = "cpu", workers = 1)))
      expect_length(d$taken, 3)
      expect_equal(sum(d$taken), blocks(150, 150, TRUE), info = direct)
      k <- taken(pcf_kernel(X, backend = "cpu", workers = 4))
      expect_identical(k$value, pcf_kernel(X, backend = "cpu", workers = 1))
      expect_equal(sum(k$taken), blocks(150, 150, TRUE), info = direct)
      c2 <- taken(pcf_cdist(X, Y, backend = "cpu", workers = 2))
      expect_identical(c2$value, pcf_cdist(X, Y, backend = "cpu", workers = 1))
      expect_equal(sum(c2$taken), blocks(150, 40, FALSE), info = direct)
      if (gk_has_gpu()) {
        g <- taken(pcf_pdist(X, backend = "gpu", workers = 3))
        expect_equal(as.vector(g$value), as.vector(pcf_pdist(X, backend = "gpu", workers = 1)),
                     tolerance = 1e-12)
        expect_gt(sum(g$taken), 3)
      }
    })
  })
})

band_cases <- function(backend, sizes, reference) {
  # The workers' engine calls, counted where futures of the sequential plan
  # run them: in this process, one after the other. Into a result in memory
  # the first takes every block of the list they share in one call; the
  # others find none left, and read and call nothing.
  calls <- function(code) {
    got <- traced_count("pcf_matrix_call", quote(if (is.null(band)) 0L else 1L), code)
    list(value = got$value, calls = got$count)
  }
  # The GPU walks a tile's staged columns together over the union of their
  # breakpoints, and on a diagonal block each pair once in slot order: a
  # pair's rounding depends on the block that holds it, and a band's blocks
  # are cut at its first row. So the GPU agrees to rounding, the CPU exactly.
  same <- function(actual, expected, info) {
    if (inherits(actual, "dist")) {   # the values (the calls differ)
      expect_identical(attr(actual, "Size"), attr(expected, "Size"), info = info)
      actual <- as.vector(actual)
      expected <- as.vector(expected)
    }
    if (backend == "cpu") expect_identical(actual, expected, info = info) else
      expect_equal(actual, expected, tolerance = 1e-12, info = info)
  }
  # Blocks of side 16 or less: bands cut across the block grid, many blocks each.
  old <- options(gpukernels.pcf_budget_bytes = 16 * 16 * 8 * 2)
  on.exit(options(old), add = TRUE)
  for (n in sizes) {
    X <- draw_pcfs(n)
    Y <- draw_pcfs(5)
    for (workers in c(2, 3, 5)) {
      # Internal: the bands the call is cut into.
      bands <- if (n >= 2) gpukernels:::gk_row_bands(n, min(workers, n), TRUE) else
        matrix(0, 0, 2)
      for (direct in c(0, NA)) with_tunables(list(GK_CHANNEL_DIRECT = direct), {
        info <- paste(backend, n, workers, direct)
        d <- calls(pcf_pdist(X, backend = backend, workers = workers))
        expect_identical(d$calls, min(nrow(bands), 1L), info = info)
        same(d$value, pcf_pdist(X, backend = backend, workers = 1), info)
        k <- calls(pcf_kernel(X, backend = backend, workers = workers))
        expect_identical(k$calls, min(nrow(bands), 1L), info = info)
        same(k$value, pcf_kernel(X, backend = backend, workers = 1), info)
        same(pcf_cdist(X, Y, backend = backend, workers = workers),
             pcf_cdist(X, Y, backend = backend, workers = 1), info)
        same(pcf_kernel(X, Y, backend = backend, workers = workers),
             pcf_kernel(X, Y, backend = backend, workers = 1), info)
        if (reference && n <= 40) {
          expect_equal(unname(as.matrix(d$value)), pcf_ref_matrix(X, X, 1), tolerance = 1e-10,
                       info = info)
          expect_equal(unname(k$value), pcf_ref_matrix(X, X, "inner"), tolerance = 1e-10,
                       info = info)
        }
      })
    }
  }
}

test_that("workers sharing a list make one engine call in all: results equal one process", {
  set.seed(64)
  band_cases("cpu", c(1, 2, 3, 37, 300), reference = TRUE)
})

test_that("GPU workers sharing a list equal one GPU", {
  skip_if_not(gk_has_gpu())
  set.seed(65)
  band_cases("gpu", c(2, 37, 300), reference = FALSE)
})

test_that("workers read their inputs from the caller; those that may not get shared copies", {
  skip_if_not(Sys.info()[["sysname"]] == "Linux")
  set.seed(59)
  X <- draw_pcfs(120)
  X[[7]] <- matrix(c(0L, 2L, 5L, 3L, -1L, 0L), 3, 2)   # an integer matrix among doubles
  Y <- draw_pcfs(17)
  check <- function(lines_want) {
    old <- options(gpukernels.progress = TRUE)
    on.exit(options(old))
    lines <- capture.output(d <- pcf_pdist(X, backend = "cpu", workers = 3), type = "message")
    options(old)
    expect_true(same_dist(d, pcf_pdist(X, backend = "cpu", workers = 1)))
    expect_match(paste(lines, collapse = "\n"), lines_want)
    expect_identical(pcf_cdist(X, Y, p = 2, backend = "cpu", workers = 3),
                     pcf_cdist(X, Y, p = 2, backend = "cpu", workers = 1))
    expect_identical(pcf_kernel(X[-7], backend = "cpu", workers = 2),
                     pcf_kernel(X[-7], backend = "cpu", workers = 1))
    expect_identical(pcf_kernel(X[-7], Y, backend = "cpu", workers = 2),
                     pcf_kernel(X[-7], Y, backend = "cpu", workers = 1))
    expect_true(same_dist(pcf_pdist(X[1:2], backend = "cpu", workers = 2),
                          pcf_pdist(X[1:2], backend = "cpu", workers = 1)))
  }
  # Futures of the sequential plan run in this process, which may read itself.
  with_tunables(list(GK_CHANNEL_DIRECT = 1), check("3 futures, inputs read from this process"))
  # Workers whose own GK_CHANNEL_DIRECT is 0 decline to read the caller's
  # memory, as where the system forbids it: the caller then shares the
  # inputs through a segment and runs their bands again (their blocks,
  # with GK_CHANNEL_HANDOVER 0, through slots).
  with_tunables(list(GK_CHANNEL_DIRECT = 0, GK_CHANNEL_HANDOVER = 0),
                with_plan(future::multisession, {
    with_tunables(list(GK_CHANNEL_DIRECT = 1),
                  check("[1-3] of [1-3] through shared slots, some ran again on shared"))
  }))
  # The default on workers that may: inputs read, blocks written directly
  # (unless Yama forbids it here).
  with_tunables(list(GK_CHANNEL_DIRECT = NA), with_plan(future::multisession, {
    old <- options(gpukernels.progress = TRUE)
    on.exit(options(old))
    lines <- capture.output(d <- pcf_pdist(X, backend = "cpu", workers = 2), type = "message")
    options(old)
    expect_true(same_dist(d, pcf_pdist(X, backend = "cpu", workers = 1)))
    skip_if(grepl("ran again on shared", paste(lines, collapse = " ")),
            "workers may not read this process's memory here")
    expect_match(paste(lines, collapse = " "), "2 futures, inputs read from this process")
    # Every row read (the workers share one block list), the integer matrix among them.
    options(gpukernels.progress = TRUE)
    lines <- capture.output(d <- pcf_cdist(X, Y, p = 2, backend = "cpu", workers = 3),
                            type = "message")
    options(old)
    expect_identical(d, pcf_cdist(X, Y, p = 2, backend = "cpu", workers = 1))
    expect_match(paste(lines, collapse = " "), "3 futures, inputs read from this process")
  }))
})

test_that("a worker's read of the caller's inputs fails cleanly without a channel", {
  target <- list(path = "/nonexistent/1", token = "0", bytes = 8, ring = 0)
  expect_false(.Call(gpukernels:::gk_r_pcf_fetch, target, c(1, 3), 1L))
  expect_error(.Call(gpukernels:::gk_r_pcf_fetch, list(path = 1, token = "0"), c(1, 3), 1L),
               "invalid result channel")
})

test_that("invalid inputs fail in the caller before any worker reads them", {
  set.seed(60)
  X <- draw_pcfs(30)
  X[[12]][2, 1] <- NA
  with_tunables(list(GK_CHANNEL_DIRECT = 1), {
    expect_error(pcf_pdist(X, backend = "cpu", workers = 2), "x\\[\\[12\\]\\]` has NA")
    expect_error(pcf_cdist(X[-12], X, backend = "cpu", workers = 2), "y\\[\\[12\\]\\]` has NA")
    # An integer matrix, converted for the workers, checked as the user gave it.
    Z <- X[-12]
    Z[[5]] <- matrix(c(0L, 2L, NA, 0L), 2, 2)
    expect_error(pcf_pdist(Z, backend = "cpu", workers = 2), "x\\[\\[5\\]\\]` has NA")
    Z[[5]] <- matrix(c(0L, 2L, 1L, 1L), 2, 2)   # ends at 1, the others at 0
    expect_error(pcf_pdist(Z, backend = "cpu", workers = 2), "x\\[\\[5\\]\\]` ends at the value 1")
  })
})

test_that("split over workers, single precision warns once where float loses intervals", {
  set.seed(61)
  # Breakpoints 1e8 + 0.5 k: float's spacing near 1e8 is 8 (test-pcf-edges.R).
  X <- c(draw_pcfs(6), lapply(1:3, function(i) cbind(t = 1e8 + 0.5 * (0:6), v = c(rnorm(6), 0))))
  warnings_of <- function(code) {
    w <- character()
    withCallingHandlers(code, warning = function(cnd) {
      w <<- c(w, conditionMessage(cnd))
      invokeRestart("muffleWarning")
    })
    w
  }
  for (direct in c(1, 0)) with_tunables(list(GK_CHANNEL_DIRECT = direct), {
    w <- warnings_of(pcf_pdist(X, precision = "single", backend = "cpu", workers = 2))
    expect_length(w, 1L)
    expect_match(w, "cannot represent the breakpoints of `x\\[\\[7\\]\\]`")
    w <- warnings_of(pcf_cdist(X[1:6], X, precision = "single", backend = "cpu", workers = 2))
    expect_length(w, 1L)
    expect_match(w, "`y\\[\\[7\\]\\]`")
    expect_length(warnings_of(pcf_pdist(X[1:6], precision = "single", backend = "cpu",
                                        workers = 2)), 0L)
  })
})

test_that("slots with one or several writer threads, 2 MiB pages or not: the same results", {
  # 4200 functions: a 70 MB dist, 4 slots per worker of 8.8 MB.
  set.seed(37)
  X <- lapply(1:4200, function(i) pcf(c(0, runif(1)), c(rnorm(1), 0)))
  ref <- pcf_pdist(X, backend = "cpu", workers = 1)
  with_plan(future::multisession, {
    for (setting in list(list(GK_CHANNEL_DIRECT = 0, GK_CHANNEL_WRITERS = 1),
                         list(GK_CHANNEL_DIRECT = 0, GK_CHANNEL_WRITERS = 3),
                         list(GK_CHANNEL_DIRECT = 0, GK_CHANNEL_WRITERS = NA,
                              GK_RESULT_HUGE_PAGES = 2),
                         list(GK_CHANNEL_DIRECT = 0, GK_CHANNEL_WRITERS = 4,
                              GK_RESULT_HUGE_PAGES = 1),
                         list(GK_CHANNEL_DIRECT = 1, GK_RESULT_HUGE_PAGES = 1),
                         list(GK_CHANNEL_DIRECT = NA, GK_RESULT_HUGE_PAGES = NA))) {
      d <- with_tunables(setting, pcf_pdist(X, backend = "cpu"))
      expect_true(same_dist(d, ref), info = paste(names(setting), unlist(setting), collapse = " "))
    }
    Y <- X[1:130]
    expect_identical(with_tunables(list(GK_CHANNEL_WRITERS = 2), pcf_kernel(Y, backend = "cpu")),
                     pcf_kernel(Y, backend = "cpu", workers = 1))
  })
})

test_that("a GPU result in 2 MiB pages or not: the same values", {
  skip_if_not(gk_has_gpu())
  # 4200 functions: a 70 MB dist, over the 64 MB from which GK_RESULT_HUGE_PAGES acts.
  set.seed(54)
  X <- lapply(1:4200, function(i) pcf(c(0, runif(1)), c(rnorm(1), 0)))
  ref <- pcf_pdist(X, backend = "cpu", workers = 1)
  for (pages in c(0, 1, 2, NA)) {
    d <- with_tunables(list(GK_RESULT_HUGE_PAGES = pages),
                       pcf_pdist(X, backend = "gpu", workers = 1, devices = 1))
    expect_equal(as.vector(d), as.vector(ref), tolerance = 1e-12, info = pages)
    if (nrow(gk_info()$devices) >= 2) {   # two GPUs: the same values (the calls differ)
      d2 <- with_tunables(list(GK_RESULT_HUGE_PAGES = pages),
                          pcf_pdist(X, backend = "gpu", workers = 1, devices = 1:2))
      expect_identical(as.vector(d2), as.vector(d), info = pages)
    }
  }
})

test_that("files written with their pages made first hold the same values", {
  skip_if_not_installed("bigmemory")
  set.seed(48)
  X <- draw_pcfs(203)   # bands whose columns start and end inside pages
  Y <- draw_pcfs(131)
  old <- options(gpukernels.pcf_budget_bytes = 40 * 40 * 8 * 2)
  on.exit(options(old))
  to_float <- function(x) readBin(writeBin(as.vector(x), raw(), size = 4), "double", size = 4,
                                  n = length(x))
  shm <- file.path("/dev/shm", basename(tempfile("gk-test-")))   # R does not clean /dev/shm
  dirs <- c(tempdir(), if (dir.create(shm, showWarnings = FALSE)) shm)
  on.exit(unlink(shm, recursive = TRUE), add = TRUE)
  for (backend in test_backends()) {
    D <- unname(as.matrix(pcf_pdist(X, backend = backend)))
    C <- unname(pcf_cdist(X, Y, backend = backend))
    for (type in c("double", "float")) {
      # On disk and in memory (tmpfs: pages made first only with 2).
      for (workers in 1:2) with_file_workers(workers, for (dir in dirs) {
        files <- lapply(c(0, 1, 2, NA), function(populate) with_tunables(
          list(GK_FILE_POPULATE = populate),
          list(pcf_dist_file(X, file = tempfile("pop", dir), file_type = type,
                             backend = backend, slab_bytes = 8 * 203 * 50, workers = workers)[, ],
               pcf_dist_file(X, Y, file = tempfile("pop", dir), file_type = type,
                             backend = backend, slab_bytes = 8 * 131 * 50,
                             workers = workers)[, ])))
        info <- paste(backend, type, workers, dir)
        expect_identical(files[[2]], files[[1]], info = info)   # pages made first or not
        expect_identical(files[[3]], files[[1]], info = info)
        expect_identical(files[[4]], files[[1]], info = info)
        # Against the results in memory (on a GPU a pair's rounding follows its block).
        exact <- backend == "cpu" && type == "double"
        want <- if (type == "float") list(to_float(D), to_float(C)) else list(D, C)
        for (k in 1:2) {
          got <- as.vector(files[[1]][[k]])
          if (exact) expect_identical(got, as.vector(want[[k]]), info = info)
          else expect_equal(got, as.vector(want[[k]]), tolerance = 1e-6, info = info)
        }
      })
    }
  }
})

test_that("a file in 2 MiB pages holds the same values, its pages made first or not", {
  # 64 MB and more: the file's mapping asks for 2 MiB pages, and where the
  # file system makes them the engines' writes make the pages (populate 1).
  skip_if_no_gpu()
  skip_if_not_installed("bigmemory")
  set.seed(49)
  X <- draw_pcfs(4150)   # 68.9 MB of floats, columns across page edges
  to_float <- function(x) readBin(writeBin(as.vector(x), raw(), size = 4), "double", size = 4,
                                  n = length(x))
  want <- to_float(as.matrix(pcf_pdist(X, precision = "single", backend = "gpu", workers = 1)))
  for (workers in 1:2) with_file_workers(workers, {
    files <- lapply(c(1, 0, 2), function(populate) with_tunables(
      list(GK_FILE_POPULATE = populate),
      pcf_dist_file(X, file = tempfile("huge"), file_type = "float", precision = "single",
                    backend = "gpu", workers = workers)[, ]))
    expect_identical(files[[2]], files[[1]], info = workers)
    expect_identical(files[[3]], files[[1]], info = workers)
    expect_equal(as.vector(files[[1]]), want, tolerance = 1e-6, info = workers)
  })
})

test_that("files with their blocks allocated first or left sparse hold the same values", {
  skip_if_not_installed("bigmemory")
  set.seed(47)
  X <- draw_pcfs(70)
  D <- unname(as.matrix(pcf_pdist(X, backend = "cpu")))
  with_file_workers(2, for (allocate in c(0, 1, NA)) {
    B <- with_tunables(list(GK_FILE_ALLOCATE = allocate),
                       pcf_dist_file(X, file = tempfile("alloc"), backend = "cpu",
                                     slab_bytes = 8 * 70 * 9, workers = 2))
    expect_identical(B[, ], D, info = allocate)
  })
  made <- tempfile("made")
  expect_false(with_tunables(list(GK_FILE_ALLOCATE = 0),
                             .Call(gpukernels:::gk_r_file_make, made, 4096)))
  expect_equal(file.size(made), 4096)
  unlink(made)
  expect_error(.Call(gpukernels:::gk_r_file_make, 1, 4096), "path")
})

test_that("symmetric results mirrored in tiles equal the entries computed both ways", {
  skip_if_not_installed("bigmemory")
  set.seed(41)
  X <- draw_pcfs(150)   # tiles of 64: two whole ones and a part
  old <- options(gpukernels.pcf_budget_bytes = 70 * 70 * 8 * 2)   # many blocks
  on.exit(options(old))
  K <- pcf_kernel(X, backend = "cpu", workers = 1)
  expect_identical(K, t(K))
  expect_equal(K, pcf_kernel(X, X, backend = "cpu", workers = 1), tolerance = 1e-12)
  D <- unname(as.matrix(pcf_pdist(X, backend = "cpu", workers = 1)))
  B <- pcf_dist_file(X, file = tempfile("tiles"), backend = "cpu", workers = 1)
  expect_identical(B[, ], D)
  Bf <- pcf_dist_file(X, file = tempfile("tiles"), file_type = "float", backend = "cpu",
                      workers = 2)
  expect_identical(Bf[, ], t(Bf[, ]))
  expect_equal(Bf[, ], D, tolerance = 1e-6)
})

test_that("results are not copied on their way out (attr<- after engine calls)", {
  # A copy would double the peak memory: 10 GB more for 5e4 functions.
  set.seed(31)
  X <- lapply(1:3000, function(i) pcf(c(0, 1), c(rnorm(1), 0)))
  bytes <- 3000 * 2999 / 2 * 8 / 2^20
  for (workers in c(1, 2)) {
    gc(reset = TRUE)
    d <- pcf_pdist(X, backend = "cpu", workers = workers)
    expect_lt(gc()[2, 6], bytes * 1.5 + 20)
    rm(d)
  }
})

test_that("the result of workers behaves as an ordinary dist object", {
  set.seed(23)
  X <- draw_pcfs(50)
  ref <- pcf_pdist(X, backend = "cpu", workers = 1)
  d <- pcf_pdist(X, backend = "cpu", workers = 2)
  expect_identical(hclust(d)$merge, hclust(ref)$merge)
  expect_identical(as.matrix(d), as.matrix(ref))
  back <- unserialize(serialize(d, NULL))
  expect_true(same_dist(back, ref))
  e <- d
  e[1] <- -1     # a copy: d keeps its value
  expect_identical(d[1], ref[1])
  expect_identical(e[2:5], ref[2:5])
  rm(e, back)
  gc()
  expect_identical(sum(d), sum(ref))
  K <- pcf_kernel(X, backend = "cpu", workers = 2)
  expect_identical(dim(K), c(50L, 50L))
  expect_identical(K %*% rep(1, 50), pcf_kernel(X, backend = "cpu") %*% rep(1, 50))
})

test_that("workers that cannot attach the shared memory get the data instead", {
  set.seed(29)
  X <- draw_pcfs(33)
  Y <- draw_pcfs(5)
  # A worker on another machine: the segments' paths do not lead to them.
  task <- list(rows = c(3L, 9L), kind = "pdist", p = 1, precision = "double", backend = "cpu",
               shared = list(input = list(path = "/nonexistent/0", token = "0", bytes = 8),
                             target = list(path = "/nonexistent/1", token = "0", bytes = 8,
                                           layout = 1L, n_rows = 33, n_cols = 33)))
  expect_false(gpukernels:::gk_pcf_chunk_shared(task)$written)
  real <- gpukernels:::gk_pcf_chunk_shared
  utils::assignInNamespace("gk_pcf_chunk_shared", function(task) list(written = FALSE),
                           "gpukernels")
  on.exit(utils::assignInNamespace("gk_pcf_chunk_shared", real, "gpukernels"))
  expect_true(same_dist(pcf_pdist(X, backend = "cpu", workers = 3),
                        pcf_pdist(X, backend = "cpu", workers = 1)))
  expect_identical(pcf_cdist(X, Y, backend = "cpu", workers = 2),
                   pcf_cdist(X, Y, backend = "cpu", workers = 1))
  # And with the shared inputs turned off: the results come through the
  # futures.
  old <- options(gpukernels.future_shared = FALSE)
  on.exit(options(old), add = TRUE)
  d <- pcf_pdist(X, backend = "cpu", workers = 3)
  expect_true(same_dist(d, pcf_pdist(X, backend = "cpu", workers = 1)))
  expect_identical(pcf_kernel(X, Y, backend = "cpu", workers = 2),
                   pcf_kernel(X, Y, backend = "cpu", workers = 1))
})

test_that("file-backed output equals the in-memory result, in-process and on workers", {
  skip_if_not_installed("bigmemory")
  set.seed(5)
  X <- draw_pcfs(29)
  Y <- draw_pcfs(6)
  D <- unname(as.matrix(pcf_pdist(X, backend = "cpu")))
  f <- tempfile("dist")
  B <- pcf_dist_file(X, file = f, backend = "cpu", slab_bytes = 8 * 29 * 4)
  expect_identical(B[, ], D)
  expect_identical(B[5, ], D[5, ])
  expect_true(all(file.exists(paste0(f, c(".bin", ".desc")))))
  expect_identical(bigmemory::attach.big.matrix(paste0(f, ".desc"))[3:4, ], D[3:4, ])
  expect_error(pcf_dist_file(X, file = f), "exists")
  Bf <- pcf_dist_file(X, file = f, file_type = "float", overwrite = TRUE, backend = "cpu",
                      slab_bytes = 4 * 29 * 3, workers = 3)
  expect_equal(Bf[, ], D, tolerance = 1e-6)
  g <- tempfile("cdist")
  Bc <- pcf_dist_file(X, Y, file = g, backend = "cpu", slab_bytes = 8 * 6 * 5, workers = 2)
  expect_identical(Bc[, ], unname(pcf_cdist(X, Y, backend = "cpu")))
  # Workers of this machine's plan leave the file to this process; a cluster
  # plan's write it.
  for (plan in list(future::multisession, future::cluster)) with_plan(plan, {
    h <- tempfile("dist")
    Bw <- pcf_dist_file(X, file = h, backend = "cpu", slab_bytes = 8 * 29 * 2)
    expect_identical(Bw[, ], D)
  })
  expect_error(pcf_dist_file(X, file = tempfile(), file_type = "int"), "file_type")
  expect_error(pcf_dist_file(X, file = NA_character_), "file")
})

test_that("a failing worker fails the call with its error and leaves no complete-looking file", {
  skip_if_not_installed("bigmemory")
  set.seed(9)
  X <- draw_pcfs(25)
  with_plan(future::multisession, {
    # The option travels to the workers, whose engine rejects it.
    old <- options(gpukernels.pcf_budget_bytes = -1)
    on.exit(options(old), add = TRUE)
    expect_error(pcf_pdist(X, backend = "cpu", workers = 2),
                 "worker failed.*pcf_budget_bytes must be")
    expect_error(with_tunables(list(GK_CHANNEL_DIRECT = 1),
                               pcf_pdist(X, backend = "cpu", workers = 2)),
                 "worker failed.*pcf_budget_bytes must be")
    # The default runs in this process under this plan: the same error, its own.
    expect_error(pcf_pdist(X, backend = "cpu"), "^option gpukernels.pcf_budget_bytes must be")
    f <- tempfile("dist")
    expect_error(pcf_dist_file(X, file = f, backend = "cpu", slab_bytes = 8 * 25 * 3),
                 "^option gpukernels.pcf_budget_bytes must be")
    expect_length(list.files(dirname(f), pattern = basename(f)), 0)
    options(old)
  })
  with_plan(future::cluster, {   # workers that write the file
    old <- options(gpukernels.pcf_budget_bytes = -1)
    on.exit(options(old), add = TRUE)
    f <- tempfile("dist")
    expect_error(pcf_dist_file(X, file = f, backend = "cpu", slab_bytes = 8 * 25 * 3),
                 "worker failed.*pcf_budget_bytes must be")
    expect_length(list.files(dirname(f), pattern = basename(f)), 0)
    options(old)
  })
})

test_that("progress handlers receive the expected number of steps", {
  skip_if_not_installed("progressr")
  set.seed(2)
  X <- draw_pcfs(40)
  old <- options(progressr.enable = TRUE, gpukernels.pcf_budget_bytes = 9 * 9 * 8 * 2,
                 gpukernels.progress = NULL)
  on.exit(options(old))
  record <- function(expr) {
    seen <- list()
    withCallingHandlers(expr, progression = function(c) {
      seen[[length(seen) + 1L]] <<- list(type = c$type, amount = c$amount, steps = c$steps)
    })
    seen
  }
  steps_of <- function(seen) {
    init <- Filter(function(s) s$type == "initiate", seen)
    upd <- Filter(function(s) s$type == "update", seen)
    c(total = init[[1]]$steps, done = sum(vapply(upd, function(s) s$amount, 0)))
  }
  blocks <- nrow(gpukernels:::gk_block_plan(40, 40, TRUE, 9 * 9))
  expect_gt(blocks, 5)
  expect_equal(steps_of(record(pcf_pdist(X, backend = "cpu"))), c(total = blocks, done = blocks))
  expect_equal(steps_of(record(pcf_knn(X, k = 2, backend = "cpu"))), c(total = blocks, done = blocks))
  expect_equal(steps_of(record(pcf_pdist(X, backend = "cpu", workers = 3))), c(total = 3, done = 3))
  skip_if_not_installed("bigmemory")
  expect_equal(steps_of(record(pcf_dist_file(X, file = tempfile(), backend = "cpu",
                                             slab_bytes = 8 * 40 * 7))),
               c(total = 6, done = 6))
  options(gpukernels.progress = FALSE)
  expect_length(record(pcf_pdist(X, backend = "cpu")), 0)
})

test_that("devices = for reductions is checked", {
  x <- matrix(runif(30), 10, 3)
  if (!gk_has_gpu()) {
    expect_identical(kernel_reduce(x, backend = "cpu", devices = 1), kernel_reduce(x, backend = "cpu"))
  } else {
    expect_error(kernel_reduce(x, backend = "gpu", devices = 99), "devices")
  }
})

test_that("reductions split over GPUs equal one GPU", {
  skip_if_no_gpu()
  skip_if(nrow(gk_info()$devices) < 2, "fewer than two GPUs")
  set.seed(4)
  x <- matrix(rnorm(3 * 5003), 5003, 3)
  y <- matrix(rnorm(3 * 4001), 4001, 3)
  b <- rnorm(4001)
  for (precision in c("double", "single")) {
    one <- kernel_reduce(x, y, b, precision = precision, devices = 1)
    two <- kernel_reduce(x, y, b, precision = precision, devices = 1:2)
    expect_equal(two, one, tolerance = if (precision == "single") 1e-5 else 1e-12)
    expect_identical(knn(x, y, k = 5, precision = precision, devices = 1:2)$index,
                     knn(x, y, k = 5, precision = precision, devices = 1)$index)
  }
  expect_equal(kernel_reduce(x, y, b, devices = 1:2), kernel_reduce(x, y, b, backend = "cpu"),
               tolerance = 1e-10)
})
