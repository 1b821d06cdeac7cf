# The device layer's block scheduler, through its internal .Call.
coverage <- function(plan, n_rows, n_cols) {
  hits <- matrix(0L, n_rows, n_cols)
  for (k in seq_len(nrow(plan))) {
    rows <- plan[k, "row0"] + seq_len(plan[k, "rows"]) - 1L
    cols <- plan[k, "col0"] + seq_len(plan[k, "cols"]) - 1L
    hits[rows, cols] <- hits[rows, cols] + 1L
  }
  hits
}

test_that("full plans cover every entry once, within the budget, largest first", {
  for (case in list(c(10, 10, 9), c(7, 13, 6), c(1, 1, 1), c(100, 37, 50), c(33, 33, 1e6))) {
    # Internal functions here: the block scheduler's plans themselves.
    plan <- gpukernels:::gk_block_plan(case[1], case[2], FALSE, case[3])
    expect_true(all(coverage(plan, case[1], case[2]) == 1L))
    expect_true(all(plan[, "rows"] * plan[, "cols"] <= case[3]))
    work <- plan[, "rows"] * plan[, "cols"]
    expect_false(is.unsorted(rev(work)))
  }
})

test_that("lower-triangle plans skip blocks above the diagonal and cover the rest once", {
  for (n in c(1, 9, 10, 31, 64)) {
    plan <- gpukernels:::gk_block_plan(n, n, TRUE, 16)
    hits <- coverage(plan, n, n)
    expect_true(all(hits[lower.tri(hits, diag = TRUE)] == 1L))
    expect_true(all(plan[, "col0"] <= plan[, "row0"] + plan[, "rows"] - 1L))
    # largest work first, a diagonal block counting its lower triangle only
    on_diagonal <- plan[, "row0"] == plan[, "col0"]
    work <- ifelse(on_diagonal, plan[, "rows"] * (plan[, "rows"] + 1) / 2,
                   plan[, "rows"] * plan[, "cols"])
    expect_false(is.unsorted(rev(work)), info = n)
  }
  # n = 40 in bands of 9 (the last one 4): the 6 full blocks below the
  # diagonal (81 pairs each), the 4 full diagonal ones (45), the last band's
  # 4 x 9 blocks (36), its diagonal block (10)
  plan <- gpukernels:::gk_block_plan(40, 40, TRUE, 81)
  on_diagonal <- plan[, "row0"] == plan[, "col0"]
  expect_equal(unname(on_diagonal), rep(c(FALSE, TRUE, FALSE, TRUE), c(6, 4, 4, 1)))
  expect_equal(unname(plan[, "rows"] * plan[, "cols"]), rep(c(81, 81, 36, 16), c(6, 4, 4, 1)))
  expect_error(gpukernels:::gk_block_plan(3, 4, TRUE, 4), "non-square")
  expect_equal(nrow(gpukernels:::gk_block_plan(0, 5, FALSE, 4)), 0L)
})

test_that("band plans (row_start) cover the band's lower triangle once, diagonal blocks square", {
  for (n in c(1, 2, 9, 31, 64)) {
    for (start in unique(c(0, 1, n %/% 3, n - 1, n))) {
      for (budget in c(16, 49, 1e6)) {
        plan <- gpukernels:::gk_block_plan(n, n, TRUE, budget, row_start = start)
        hits <- coverage(plan, n, n)
        want <- lower.tri(hits, diag = TRUE) & row(hits) > start
        # (diagonal blocks hold some entries above the diagonal too)
        expect_true(all(hits[want] == 1L) && all(hits[row(hits) <= start] == 0L) &&
                      all(hits <= 1L), info = c(n, start, budget))
        # on the diagonal with equal row and column bands, or entirely below it
        diagonal <- plan[, "row0"] == plan[, "col0"] & plan[, "rows"] == plan[, "cols"]
        below <- plan[, "col0"] + plan[, "cols"] <= plan[, "row0"]
        expect_true(all(diagonal | below), info = c(n, start, budget))
        expect_true(all(plan[, "rows"] * plan[, "cols"] <= budget))
      }
    }
  }
  # rows from a start in a full plan too; row_start 0 is the plan of the whole matrix
  plan <- gpukernels:::gk_block_plan(10, 7, FALSE, 9, row_start = 4)
  hits <- coverage(plan, 10, 7)
  expect_true(all(hits[5:10, ] == 1L) && all(hits[1:4, ] == 0L))
  expect_identical(gpukernels:::gk_block_plan(31, 31, TRUE, 16, row_start = 0),
                   gpukernels:::gk_block_plan(31, 31, TRUE, 16))
  expect_error(gpukernels:::gk_block_plan(5, 5, TRUE, 4, row_start = 6), "past its last row")
})

test_that("the side follows the budget, the split hint and the occupancy floor", {
  side <- function(...) max(gpukernels:::gk_block_plan(...)[, "rows"])
  expect_equal(side(1000, 1000, FALSE, 10000, 1), 100)      # sqrt(budget)
  expect_equal(side(1000, 1000, FALSE, 10000, 4), 50)       # sqrt(budget / hint)
  expect_equal(side(1000, 1000, FALSE, 10000, 4, 80), 80)   # floor wins over the hint
  expect_equal(side(1000, 1000, FALSE, 10000, 4, 500), 100) # the budget wins over the floor
  expect_equal(side(20, 20, FALSE, 1e6, 1), 20)             # never more than the matrix
  # subdivide(3, 10) = [0,2] [3,5] [6,8] [9,9]: the last band is the remainder
  plan <- gpukernels:::gk_block_plan(10, 1, FALSE, 9)
  expect_equal(sort(plan[, "rows"]), c(1, 3, 3, 3))
})

test_that("takers of a shared list agree on its side and take each block once", {
  agree <- function(...) gpukernels:::gk_block_agree(...)
  # The first one's side wins; a taker whose budget cannot hold its blocks takes none.
  got <- agree(c(50, 40, 70, 50), c(2500, 1600, 1e4, 2499), 23)
  expect_equal(unname(got[, "side"]), c(50, 0, 50, 0))
  expect_equal(unname(got[, "taken"]), c(12, 0, 11, 0))
  # Every block once, whatever the number of takers; none for an empty list.
  for (takers in 1:5) for (count in c(0, 1, 7, 40)) {
    got <- agree(rep(9, takers), rep(81, takers), count)
    expect_equal(sum(got[, "taken"]), count, info = c(takers, count))
    expect_lte(diff(range(got[, "taken"])), 1)
  }
  # Planned with the agreed side, every taker's list is the same, whatever its own rules say.
  agreed <- gpukernels:::gk_block_plan(50, 50, TRUE, 1e4, split_hint = 8, side = 13)
  expect_identical(agreed, gpukernels:::gk_block_plan(50, 50, TRUE, 400, split_hint = 2,
                                                       min_side = 30, side = 13))
  expect_equal(max(agreed[, "rows"]), 13)
  hits <- coverage(agreed, 50, 50)
  expect_true(all(hits[lower.tri(hits, diag = TRUE)] == 1L))
})

test_that("a file computed slab by slab equals the one computed in one go", {
  skip_if_not_installed("bigmemory")
  set.seed(60)
  X <- random_pcfs(37)
  Y <- random_pcfs(5)
  D <- unname(as.matrix(pcf_pdist(X, backend = "cpu")))
  for (by_slab in c(FALSE, TRUE)) {
    old <- options(gpukernels.file_progress_slabs = by_slab)
    B <- pcf_dist_file(X, file = tempfile("slabs"), backend = "cpu", slab_bytes = 8 * 37 * 4,
                       workers = 1)
    expect_identical(B[, ], D, info = by_slab)
    Bc <- pcf_dist_file(X, Y, file = tempfile("slabs"), backend = "cpu",
                        slab_bytes = 8 * 5 * 6, workers = 2)
    expect_identical(Bc[, ], unname(pcf_cdist(X, Y, backend = "cpu")), info = by_slab)
    options(old)
  }
})

test_that("GPU results in many blocks, on one GPU or two, equal one block's, bitwise", {
  skip_if_not(gk_has_gpu())
  set.seed(61)
  X <- random_pcfs(1500)
  one <- pcf_pdist(X, precision = "single", backend = "gpu", devices = 1, workers = 1)
  expect_equal(as.vector(one), as.vector(pcf_pdist(X, precision = "single", backend = "cpu")),
               tolerance = 1e-12)
  Y <- X[1:700]
  ref <- pcf_cdist(Y, X, backend = "gpu", devices = 1, workers = 1)
  # Small budgets: many blocks (pairs off the diagonal blocks computed the
  # other way round: L1 is symmetric in IEEE arithmetic).
  for (budget in c(600^2 * 16, 1000^2 * 16)) {
    old <- options(gpukernels.pcf_budget_bytes = budget)
    d <- pcf_pdist(X, precision = "single", backend = "gpu", devices = 1, workers = 1)
    expect_identical(as.vector(d), as.vector(one), info = budget)
    expect_identical(pcf_cdist(Y, X, backend = "gpu", devices = 1, workers = 1), ref)
    if (nrow(gk_info()$devices) >= 2) {
      d2 <- pcf_pdist(X, precision = "single", backend = "gpu", devices = 1:2, workers = 1)
      expect_identical(as.vector(d2), as.vector(one), info = budget)
    }
    options(old)
  }
  # Bands of 200 to 280 functions (the budget is shared by the blocks in
  # flight: 4 to 2; at least 6 of X, 3 of Y) and a GPU that keeps 4 of them:
  # bands are evicted and uploaded again between blocks.
  old <- options(gpukernels.pcf_budget_bytes = 200^2 * 8 * 4)
  on.exit(options(old))
  # With 2 to 4 blocks in flight per GPU, an evicted band's slot is uploaded
  # into only after the kernels of the blocks before that read it; the lists
  # are longer than the GPUs' tails, so blocks are also taken late at their
  # ends (block_pipeline.h).
  for (depth in 2:4) with_tunables(list(GK_PCF_BAND_SLOTS = 4, GK_PIPELINE_DEPTH = depth), {
    for (devices in list(1, if (nrow(gk_info()$devices) >= 2) 1:2)) {
      if (is.null(devices)) next
      why <- paste(length(devices), "GPU(s), depth", depth)
      d <- pcf_pdist(X, precision = "single", backend = "gpu", devices = devices, workers = 1)
      expect_identical(as.vector(d), as.vector(one), info = why)
      expect_identical(pcf_cdist(Y, X, backend = "gpu", devices = devices, workers = 1), ref,
                       info = why)
    }
  })
})

test_that("a result R cannot allocate is an R error, also while the GPUs start", {
  set.seed(62)
  small <- random_pcfs(50)
  devices <- list(NULL)
  if (gk_has_gpu()) devices <- c(devices, list(1L), if (nrow(gk_info()$devices) >= 2) list(1:2))
  on.exit(mem.maxVSize(Inf))
  for (dev in devices) {
    backend <- if (is.null(dev)) "cpu" else "gpu"
    args <- list(backend = backend, workers = 1)
    if (!is.null(dev)) args$devices <- dev
    ref <- do.call(pcf_pdist, c(list(small), args))
    expect_equal(as.vector(ref), as.vector(pcf_pdist(small, backend = "cpu")), tolerance = 1e-12)
    # R's vector heap limited to 16 MB above what it holds (R ignores a limit
    # below its current collection trigger), and a result of 32 MB more.
    gc_now <- gc()
    limit <- ceiling(max(gc_now[2, 2], gc_now[2, 4])) + 16
    X <- random_pcfs(ceiling(sqrt(2 * (limit + 32) * 2^20 / 8)), sizes = 1:3)
    mem.maxVSize(limit)
    expect_equal(mem.maxVSize(), limit)
    failed <- tryCatch(do.call(pcf_pdist, c(list(X), args)), error = function(e) e)
    mem.maxVSize(Inf)
    expect_s3_class(failed, "error")
    expect_match(conditionMessage(failed), "vector memory", info = backend)
    # and the next call works
    expect_identical(do.call(pcf_pdist, c(list(small), args)), ref)
  }
})

test_that("large sets, packed on several threads, give the reference's distances", {
  set.seed(63)
  X <- random_pcfs(140, sizes = 1900:2000, shared = FALSE)   # 2.7e5 intervals: above 2^18
  pick <- c(1, 2, 70, 139, 140)
  ref <- pcf_ref_matrix(X[pick], X, 1)
  for (backend in c("cpu", if (gk_has_gpu()) "gpu")) {
    D <- as.matrix(pcf_pdist(X, backend = backend, workers = 1))
    expect_equal(unname(D[pick, ]), ref, tolerance = 1e-10, info = backend)
    expect_equal(unname(pcf_cdist(X[pick], X, backend = backend, workers = 1)), ref,
                 tolerance = 1e-10, info = backend)
  }
})
