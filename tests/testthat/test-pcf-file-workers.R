# pcf_dist_file() on future workers: each worker of a cluster plan writes
# its band of rows into the file itself, reading the functions from the
# caller's memory, from a shared segment (workers that may not read the
# caller), or from the future's data (workers elsewhere,
# gpukernels.future_shared = FALSE). Plans of this machine alone leave the
# file to the calling process unless `workers` asks for futures.

# The route a call took, from its progress line.
file_route <- function(expr) {
  old <- options(gpukernels.progress = TRUE)
  on.exit(options(old))
  lines <- capture.output(value <- force(expr), type = "message")
  line <- grep("^pcf \\([0-9]+ futures", lines, value = TRUE)
  list(value = value, line = if (length(line)) line[1L] else "")
}

file_cases <- function(X, Y, backend, want_route) {
  D <- unname(as.matrix(pcf_pdist(X, backend = backend, workers = 1)))
  C <- unname(pcf_cdist(X, Y, backend = backend, workers = 1))
  for (type in c("double", "float")) {
    info <- paste(backend, type, want_route)
    # Bands of several slabs and bands ending inside a page of the file.
    got <- file_route(pcf_dist_file(X, file = tempfile("fw"), file_type = type,
                                    backend = backend, slab_bytes = 8 * length(X) * 7))
    expect_match(got$line, want_route, info = info)
    B <- got$value[, ]
    expect_identical(B, t(B), info = info)
    expect_true(all(diag(B) == 0), info = info)
    Bc <- pcf_dist_file(X, Y, file = tempfile("fw"), file_type = type, backend = backend,
                        slab_bytes = 8 * length(Y) * 5)[, ]
    if (type == "double" && backend == "cpu") {
      expect_identical(B, D, info = info)
      expect_identical(Bc, C, info = info)
    } else {   # float files: the values rounded once; GPU pairs round as their blocks do
      expect_equal(B, D, tolerance = 1e-6, info = info)
      expect_equal(Bc, C, tolerance = 1e-6, info = info)
    }
  }
}

test_that("workers write their bands of a file from each input route, as one process", {
  skip_if_not_installed("bigmemory")
  skip_if_not(Sys.info()[["sysname"]] == "Linux")
  set.seed(71)
  X <- draw_pcfs(157)   # not a multiple of the slabs' rows
  Y <- draw_pcfs(23)
  for (backend in test_backends()) {
    # Workers that may not read the caller: the inputs through a segment.
    with_tunables(list(GK_CHANNEL_DIRECT = 0), with_plan(future::cluster, {
      with_tunables(list(GK_CHANNEL_DIRECT = 1), file_cases(X, Y, backend, "shared memory"))
    }))
    # Workers on other machines: the data travel with the futures.
    old <- options(gpukernels.future_shared = FALSE)
    with_plan(future::cluster, file_cases(X, Y, backend, "data through the futures"))
    options(old)
  }
  # The default: read from this process's memory where the system lets
  # workers (Yama's ptrace rule).
  with_tunables(list(GK_CHANNEL_DIRECT = NA), with_plan(future::cluster, {
    probe <- file_route(pcf_dist_file(X[1:30], file = tempfile("fw"), backend = "cpu",
                                      slab_bytes = 8 * 30 * 10))
    skip_if_not(grepl("inputs read from this process", probe$line),
                "workers may not read this process's memory here")
    for (backend in test_backends()) file_cases(X, Y, backend, "inputs read from this process")
  }))
})

test_that("plans of this machine alone leave the file to this process", {
  skip_if_not_installed("bigmemory")
  set.seed(73)
  X <- draw_pcfs(61)
  Y <- draw_pcfs(17)
  D <- unname(as.matrix(pcf_pdist(X, backend = "cpu", workers = 1)))
  C <- unname(pcf_cdist(X, Y, backend = "cpu", workers = 1))
  # The default `workers` under plan(multisession) and plan(multicore).
  plans <- list(multisession = function(e) with_plan(future::multisession, e))
  if (future::supportsMulticore()) {
    plans$multicore <- function(e) with_plan(future::multicore, e)
  }
  for (backend in test_backends()) for (p in names(plans)) {
    info <- paste(backend, p)
    got <- plans[[p]](file_route(
      pcf_dist_file(X, file = tempfile("fl"), backend = backend, slab_bytes = 8 * 61 * 9)))
    expect_identical(got$line, "", info = info)   # no futures
    gotc <- plans[[p]](file_route(
      pcf_dist_file(X, Y, file = tempfile("fl"), backend = backend, slab_bytes = 8 * 17 * 9)))
    expect_identical(gotc$line, "", info = info)
    if (backend == "cpu") {
      expect_identical(got$value[, ], D, info = info)
      expect_identical(gotc$value[, ], C, info = info)
    } else {
      expect_equal(got$value[, ], D, tolerance = 1e-12, info = info)
      expect_equal(gotc$value[, ], C, tolerance = 1e-12, info = info)
    }
  }
  # Workers asked for by number write their bands.
  got <- with_plan(future::multisession, file_route(
    pcf_dist_file(X, file = tempfile("fl"), backend = "cpu", workers = 2, slab_bytes = 8 * 61 * 9)))
  expect_match(got$line, "^pcf \\([0-9]+ futures")
  expect_identical(got$value[, ], D)
})

test_that("workers' files slab by slab, tiny sets and a failing band", {
  skip_if_not_installed("bigmemory")
  set.seed(72)
  X <- draw_pcfs(41)
  D <- unname(as.matrix(pcf_pdist(X, backend = "cpu")))
  with_plan(future::cluster, {
    old <- options(gpukernels.file_progress_slabs = TRUE)
    got <- file_route(pcf_dist_file(X, file = tempfile("fw"), backend = "cpu",
                                    slab_bytes = 8 * 41 * 6))
    options(old)
    expect_match(got$line, "^pcf \\(7 futures")   # a future per slab
    expect_identical(got$value[, ], D)
    # One function, two functions: bands of nothing but the zero diagonal.
    expect_identical(as.vector(pcf_dist_file(X[1], file = tempfile("fw"), backend = "cpu",
                                             workers = 2)[, ]), 0)
    expect_identical(pcf_dist_file(X[1:2], file = tempfile("fw"), backend = "cpu",
                                   slab_bytes = 8, workers = 2)[, ], D[1:2, 1:2])
    # A worker's error fails the call and leaves no file behind.
    f <- tempfile("fw")
    old <- options(gpukernels.pcf_budget_bytes = -1)
    expect_error(pcf_dist_file(X, file = f, backend = "cpu", slab_bytes = 8 * 41 * 6),
                 "worker failed.*pcf_budget_bytes must be")
    options(old)
    expect_length(list.files(dirname(f), pattern = basename(f)), 0)
  })
})

test_that("bad functions fail every route with pdist's error and make no file", {
  skip_if_not_installed("bigmemory")
  set.seed(31)
  X <- draw_pcfs(23)
  Y <- draw_pcfs(9)
  unsorted <- X
  unsorted[[6]][, "t"] <- rev(unsorted[[6]][, "t"])
  with_na <- Y
  with_na[[4]][2, "v"] <- NA
  with_inf <- X
  with_inf[[17]][3, "v"] <- -Inf
  cases <- list(list(unsorted, NULL), list(X, with_na), list(with_inf, Y))
  # In this process, on workers (the file is made only after the staging of
  # their inputs has checked them, or by a worker that got the data).
  routes <- list(function(e) e(1), function(e) with_plan(future::cluster, e(NULL)),
                 function(e) with_plan(future::cluster, {
                   old <- options(gpukernels.future_shared = FALSE)
                   on.exit(options(old))
                   e(NULL)
                 }))
  for (k in seq_along(cases)) {
    a <- cases[[k]][[1L]]
    b <- cases[[k]][[2L]]
    want <- tryCatch(if (is.null(b)) pcf_pdist(a, backend = "cpu", workers = 1) else
      pcf_cdist(a, b, backend = "cpu", workers = 1), error = conditionMessage)
    expect_match(want, "x\\[\\[|y\\[\\[", info = k)   # an error, naming the function
    for (r in seq_along(routes)) {
      f <- tempfile("bad")
      got <- routes[[r]](function(workers) tryCatch(
        pcf_dist_file(a, b, file = f, backend = "cpu", workers = workers),
        error = conditionMessage))
      expect_identical(got, want, info = paste(k, r))
      expect_length(list.files(dirname(f), pattern = basename(f)), 0)
    }
  }
})

test_that("the file's descriptor is bigmemory's, and its file is made or fails clearly", {
  skip_if_not_installed("bigmemory")
  dir <- tempfile("desc")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE), add = TRUE)
  for (type in c("double", "float")) for (dims in list(c(1, 1), c(7, 3), c(130, 257))) {
    bm <- bigmemory::filebacked.big.matrix(dims[1], dims[2], type = type, backingfile = "bm.bin",
                                           backingpath = dir, descriptorfile = "bm.desc")
    want <- bigmemory::describe(bm)
    rm(bm)
    got <- gpukernels:::gk_file_descriptor(dir, "bm.bin", dims[1], dims[2], type)
    expect_identical(got, want, info = paste(type, dims[1], dims[2]))
    unlink(file.path(dir, c("bm.bin", "bm.desc")))
  }
  make <- function(path, bytes) .Call(gpukernels:::gk_r_file_make, path, bytes)
  path <- file.path(dir, "made.bin")
  make(path, 4096 * 3 + 5)
  expect_equal(file.size(path), 4096 * 3 + 5)
  writeBin(as.raw(1:9), path)
  make(path, 100)   # an earlier file of the name is emptied
  expect_identical(readBin(path, "raw", 100), raw(100))
  expect_error(make(file.path(dir, "no", "such.bin"), 10), "cannot create .*such.bin")
  expect_error(make(path, -1), "invalid file size")
  expect_error(make(NA_character_, 10), "invalid file path")
})

test_that("a file's workers get bands of equal work, cut into slabs", {
  set.seed(126)
  for (symmetric in c(TRUE, FALSE)) for (n in c(1, 2, 7, 41, sample(100:5000, 3))) {
    for (count in unique(c(1, 2, 3, 4, sample(1:8, 1)))) {
      slab_rows <- sample(c(1, 3, 7, 50, n, 2 * n), 1)
      cut <- gpukernels:::gk_file_slabs(n, count, slab_rows, symmetric)
      slabs <- unname(cut$slabs)
      rows <- slabs[, 2L] - slabs[, 1L] + 1
      # The slabs cover 1..n in order, none longer than slab_rows.
      expect_equal(unlist(Map(seq, slabs[, 1L], slabs[, 2L])), seq_len(n))
      expect_true(all(rows >= 1 & rows <= slab_rows))
      # Each band is consecutive whole slabs; bands hold equal work within a row.
      expect_equal(unlist(cut$groups), seq_len(nrow(slabs)))
      expect_equal(unname(cut$bands), t(vapply(cut$groups, function(g) range(slabs[g, ]), c(0, 0))))
      expect_lte(length(cut$groups), count)
      ends <- vapply(cut$groups, function(g) max(slabs[g, 2L]), 0)
      starts <- vapply(cut$groups, function(g) min(slabs[g, 1L]), 0)
      work <- if (symmetric) ends^2 - (starts - 1)^2 else ends - starts + 1
      total <- if (symmetric) n^2 else n
      if (length(cut$groups) == count) {
        expect_lt(max(abs(work - total / count)), if (symmetric) 2 * n + 1 else 1 + 1e-9)
      }
    }
  }
})
