# Futures launched before the calling session has made the result and offered
# the inputs: they wait for the inputs' offer and their check, and stop when
# either never comes.
skip_if_not_installed("future")

test_that("workers launched before the inputs are checked stop when the check fails", {
  skip_if_not(Sys.info()[["sysname"]] == "Linux")
  set.seed(65)
  X <- draw_pcfs(3000)   # the check takes a while: the workers read meanwhile
  Y <- draw_pcfs(7)
  bad <- X
  bad[[2999]][2, 1] <- NA
  tails <- X
  tails[[2900]][nrow(tails[[2900]]), 2] <- 1   # found only once every function is read
  error_of <- function(code) tryCatch(code, error = conditionMessage)
  # /dev/shm without the scratch folders of other test files running at once.
  counts <- function() c(fds = length(dir("/proc/self/fd")), threads = length(dir("/proc/self/task")),
                         shm = length(grep("^gk-test-", dir("/dev/shm"), invert = TRUE)))
  with_tunables(list(GK_CHANNEL_DIRECT = NA), with_plan(future::multisession, {
    d1 <- pcf_pdist(X, backend = "cpu", workers = 1)
    expect_true(same_dist(pcf_pdist(X, backend = "cpu", workers = 2), d1))   # workers warm
    before <- counts()
    for (round in 1:3) {
      for (case in list(list(bad, NULL, "x\\[\\[2999\\]\\]` has NA"),
                        list(tails, NULL, "ends at the value"),
                        list(Y, bad, "y\\[\\[2999\\]\\]` has NA"))) {
        one <- error_of(if (is.null(case[[2]])) pcf_pdist(case[[1]], backend = "cpu", workers = 1)
                        else pcf_cdist(case[[1]], case[[2]], backend = "cpu", workers = 1))
        two <- error_of(if (is.null(case[[2]])) pcf_pdist(case[[1]], backend = "cpu", workers = 2)
                        else pcf_cdist(case[[1]], case[[2]], backend = "cpu", workers = 2))
        expect_match(one, case[[3]])
        expect_identical(two, one)
        # No worker is left waiting or running.
        expect_equal(future::nbrOfFreeWorkers(), 2)
      }
      # A following call works.
      expect_true(same_dist(pcf_pdist(X, backend = "cpu", workers = 2), d1))
    }
    expect_identical(counts(), before)   # no segment, fd or thread left behind
    # The futures are launched first, the result and inputs made meanwhile.
    old <- options(gpukernels.progress = TRUE)
    on.exit(options(old))
    lines <- capture.output(d <- pcf_pdist(X, backend = "cpu", workers = 2), type = "message")
    options(old)
    expect_true(same_dist(d, d1))
    # The inputs, offered first where the workers read them from this process.
    expect_match(paste(lines, collapse = " "), paste0(
      "futures launched [0-9./]+; (inputs offered [0-9.]+, checked [0-9.]+, result|",
      "result and inputs) ready"))
  }))
})

test_that("a worker waits for the caller's offer and check, and gives up when it stops", {
  skip_if_not(Sys.info()[["sysname"]] == "Linux")
  ns <- asNamespace("gpukernels")
  set.seed(66)
  X <- draw_pcfs(20)
  X[[4]] <- matrix(c(0L, 3L, 2L, 0L), 2, 2)   # converted in the caller's table
  with_tunables(list(GK_CHANNEL_DIRECT = NA), with_plan(future::multisession, {
    # How far the caller gets: checked (the worker copies), offered only or
    # nothing (the caller stops: an error, no hang).
    for (reached in c("checked", "offered", "nothing")) {
      channel <- .Call(ns$gk_r_channel_create, 190, 20, 1)
      skip_if_not(is.list(channel) && isTRUE(channel$direct), "no direct route here")
      target <- list(path = channel$path, token = channel$token, bytes = channel$bytes, ring = 0)
      # The worker's fetch of functions 3..9, as gk_pcf_chunk_shared makes
      # it for a band of a cdist: the copy's class.
      f <- future::future({
        ns <- asNamespace("gpukernels")
        input <- .Call(ns$gk_r_pcf_fetch, target, c(3, 9), 1L)
        if (typeof(input) == "externalptr") .Call(ns$gk_r_shared_free, input)
        typeof(input)
      }, globals = list(target = target), packages = "gpukernels", seed = NULL)
      Sys.sleep(0.5)
      expect_false(future::resolved(f))   # waiting for the offer
      if (reached == "nothing") {
        .Call(ns$gk_r_shared_free, channel$handle)
        expect_error(future::value(f), "the calling session stopped")
        next
      }
      table <- .Call(ns$gk_r_pcf_table, X, NULL)
      .Call(ns$gk_r_channel_offer, channel$handle, table)
      Sys.sleep(0.5)
      expect_false(future::resolved(f))   # read, waiting for the check
      if (reached == "offered") {
        .Call(ns$gk_r_shared_free, channel$handle)
        expect_error(future::value(f), "the calling session stopped")
      } else {
        .Call(ns$gk_r_channel_checked, channel$handle)
        got <- future::value(f)
        skip_if(identical(got, "character"), "workers may not read this process's memory here")
        expect_identical(got, "externalptr")
        .Call(ns$gk_r_shared_free, channel$handle)
      }
      .Call(ns$gk_r_shared_free, table)
    }
    expect_equal(future::nbrOfFreeWorkers(), 2)
  }))
})

test_that("a worker's blocks wait for a result made after the inputs' offer", {
  skip_if_not(Sys.info()[["sysname"]] == "Linux")
  ns <- asNamespace("gpukernels")
  set.seed(67)
  X <- draw_pcfs(41)
  n <- length(X)
  size <- n * (n - 1) / 2
  expected <- as.vector(pcf_pdist(X, backend = "cpu", workers = 1))
  with_tunables(list(GK_CHANNEL_DIRECT = NA), with_plan(future::multisession, {
    pcf_pdist(X, backend = "cpu", workers = 2)   # workers warm
    for (open in c(TRUE, FALSE)) {
      channel <- .Call(ns$gk_r_channel_create, size, n, 1)
      skip_if_not(is.list(channel) && isTRUE(channel$direct), "no direct route here")
      table <- .Call(ns$gk_r_pcf_table, X, NULL)
      .Call(ns$gk_r_channel_offer, channel$handle, table)   # before the result
      .Call(ns$gk_r_channel_checked, channel$handle)
      # One band of all rows, as gk_pcf_bands makes it.
      task <- list(fun = "gk_pcf_chunk", kind = "pdist", rows = c(1L, n), p = 1,
                   precision = "double", backend = "cpu", options = list(), devices = NULL,
                   chunk = 1L, lines = FALSE,
                   shared = list(input = list(direct = TRUE), n_cols = n,
                                 target = list(path = channel$path, token = channel$token,
                                               bytes = channel$bytes, ring = 0)))
      f <- future::future(asNamespace("gpukernels")$gk_run_chunk(task),
                          globals = list(task = task), packages = "gpukernels", seed = NULL)
      Sys.sleep(0.5)
      expect_false(future::resolved(f))   # its block waits for the result
      if (open) {
        .Call(ns$gk_r_channel_open, channel$handle, size, 0L, ns$gk_pcf_write_kind("pdist"),
              n, 1L)
        value <- future::value(f)
        skip_if(identical(value$written, NA), "workers may not read this process's memory here")
        expect_true(value$written)
        expect_true(value$handed)   # handed over in place, not through the slots
        expect_identical(.Call(ns$gk_r_channel_finish, channel$handle), expected)
      } else {
        .Call(ns$gk_r_shared_free, channel$handle)   # the caller stops: the worker too
        value <- tryCatch(future::value(f), error = function(e) list(written = FALSE))
        expect_false(isTRUE(value$written))
      }
      .Call(ns$gk_r_shared_free, channel$handle)
      .Call(ns$gk_r_shared_free, table)
    }
    expect_equal(future::nbrOfFreeWorkers(), 2)
  }))
})

test_that("a channel is opened once; writes need it open, offers and checks do not", {
  ns <- asNamespace("gpukernels")
  channel <- .Call(ns$gk_r_channel_create, 6, 4, 1)
  handle <- if (is.list(channel)) channel$handle else channel
  expect_error(.Call(ns$gk_r_block_write, handle, 0L, 2, 0, 0, matrix(1, 1, 1), FALSE),
               "result channel not open")
  table <- NULL
  if (is.list(channel)) {
    X <- draw_pcfs(4)
    table <- .Call(ns$gk_r_pcf_table, X, NULL)
    expect_null(.Call(ns$gk_r_channel_offer, handle, table))
    expect_null(.Call(ns$gk_r_channel_checked, handle))
  }
  .Call(ns$gk_r_channel_open, handle, 6, 0L, 1L, 4, 1L)
  expect_error(.Call(ns$gk_r_channel_open, handle, 6, 0L, 1L, 4, 1L), "already open")
  .Call(ns$gk_r_shared_free, handle)
  expect_error(.Call(ns$gk_r_channel_checked, handle), "result channel already released")
  if (!is.null(table)) .Call(ns$gk_r_shared_free, table)
})
