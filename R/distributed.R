#' Running the engines on future workers
#'
#' [pcf_pdist()], [pcf_cdist()], [pcf_kernel()], [pcf_knn()],
#' [pcf_dist_file()], [kernel_reduce()] and its wrappers ([kernel_matvec()],
#' [knn()]) can split their work over the workers of the \pkg{future}
#' package: separate R processes on this machine (`plan(multisession)`),
#' other machines (`plan(cluster, workers = c("node1", "node2"))`), or jobs of
#' a cluster scheduler (`plan(future.batchtools::batchtools_slurm)`). Each
#' worker uses its own GPUs (or its CPU) and the results are those of one
#' process. Workers on this machine hand PCF matrices to the caller through
#' shared memory (see "Where the results go").
#'
#' @section When the work is split:
#' The argument `workers` of those functions decides:
#' \describe{
#'   \item{`NULL` (the default)}{split over the workers of the current plan
#'     when a plan other than `sequential` is set (one chunk per worker, as
#'     many as [future::nbrOfWorkers()] says, or
#'     `getOption("gpukernels.future_chunks", 8)` for a scheduler that reports
#'     no limit); without a plan, or inside a worker, everything runs in this
#'     process exactly as without \pkg{future}. PCF matrices, [pcf_knn()] and
#'     [pcf_dist_file()] under a plan whose workers all run on this machine
#'     (`plan(multisession)`, `plan(multicore)`, \pkg{future.callr}) run in
#'     this process instead, on all its GPUs (or all its cores): workers there
#'     would share the same GPUs and cores, and add their handshakes and
#'     copies (see "Which route is faster").}
#'   \item{a number `k >= 2`}{split into `k` chunks, run as futures of the
#'     current plan (one after the other under `plan(sequential)`), whatever
#'     the plan.}
#'   \item{`1` or `FALSE`}{never split.}
#' }
#'
#' @section Which route is faster:
#' On one machine, this process on all its GPUs computes a PCF matrix faster
#' than workers with a GPU each: it flattens the functions once, makes one
#' result and writes each block into it once, while workers start, read the
#' functions and hand over their blocks (5e4 functions, a `dist` in
#' memory, see `inst/bench/RESULTS.md`: 2 GPUs 1.8 to 2.0 times one GPU,
#' 2 workers 1.8 to 1.9 times; 4 GPUs 2.9 to 3.6 times, 4 workers 2.6 to
#' 3.2 times, by host and hour: on 4 GPUs the host's memory counts too, as
#' the call writes the 10 GB result and reads as much back from the GPUs).
#' So the default `workers` keeps those calls here under
#' plans of this machine alone; `workers = k` still runs `k` futures, and
#' workers of `plan(cluster)` (which may run on other machines) and
#' \pkg{future.batchtools} get the bands. Reductions ([kernel_reduce()] and
#' its wrappers), whose results are small, go to the plan's workers.
#'
#' @section What a worker gets:
#' One future per chunk. Workers on this machine that compute a PCF matrix
#' in memory share one list of its blocks: each plans the whole result and
#' takes blocks, largest first, until none is left (as the GPUs of one
#' process do), so that a worker that starts later or writes more slowly
#' takes fewer and they end together; each reads every function. Workers
#' that get their data (other machines) and those writing a file
#' ([pcf_dist_file()]) get row bands of equal work (for a `dist`, band `k`
#' of `K` ends at row `n * sqrt(k / K)`), each computed as one engine call
#' (its rows against every function up to its last row, below the
#' diagonal). Reductions are cut into equal row ranges of the output. The
#' session's `gpukernels.*` options (threads, budgets, backend) are set on the
#' worker for the chunk.
#'
#' @section Where the results go (PCF matrices):
#' \describe{
#'   \item{Workers on this machine}{(`plan(multisession)`,
#'     `plan(multicore)`, `plan(cluster)` with workers on `localhost`, futures
#'     run in this process): the functions are flattened and checked once in
#'     the calling process, and each worker copies the functions out of
#'     that process's memory (Linux's cross-process copy `process_vm_readv`,
#'     which the system allows a worker where it may trace the calling
#'     process: Yama's `ptrace_scope` 0, Debian's default; the package never
#'     widens that). The result is an ordinary R vector of the calling
#'     process. Each worker's blocks lie in shared memory of its own (a GPU
#'     worker's page-locked staging, which its GPU downloads them into; a
#'     CPU worker's block buffer), and it hands each to the calling process
#'     in place: threads of that process (one per worker;
#'     `GK_CHANNEL_WRITERS`) write it into the result, as in one process,
#'     while a GPU computes the next. This needs no permission to trace the
#'     calling process. The calling process maps a worker's shared memory
#'     once and keeps it for later calls, as the worker keeps the memory (it
#'     counts in both processes' resident size, held once); at its next
#'     distributed call it lets go of the memory of workers that have ended.
#'     Where a worker may not read the calling process (`ptrace_scope` 1 or
#'     more, other users' or containers' processes, `GK_CHANNEL_DIRECT = 0`
#'     in the calling session or the worker's, see [gk_info()]), it reads
#'     the functions from a copy in shared memory instead. With
#'     `GK_CHANNEL_HANDOVER = 0` a worker copies its blocks into a few small
#'     shared buffers of the calling process, which those threads write into
#'     the result while the workers compute. Nothing travels through the
#'     workers' connections but a few numbers, and the `dist` or matrix is built once, in place. (A
#'     result in shared memory would be slower to write: its first writes
#'     run at a quarter of private memory's speed.) Unless
#'     `options(gpukernels.threads =)` is set, the workers of one machine
#'     share this process's OpenMP threads (threads / workers each; see
#'     "Threads" in [gpukernels-package]).}
#'   \item{Workers on other machines}{(`plan(cluster)` with remote workers,
#'     \pkg{future.batchtools} jobs on other nodes): they cannot attach the
#'     shared memory, find so at once, and the call sends them their band
#'     (its rows, and for `pcf_pdist()` the functions before it) and writes
#'     the results that come back into the result as they arrive (in
#'     parallel, with OpenMP). For results too large to travel, or on a
#'     cluster with a shared file system, write them to a file from the
#'     workers with [pcf_dist_file()] (a file-backed \pkg{bigmemory} matrix
#'     every job maps and writes its rows into).}
#' }
#' The shared memory is an anonymous memory file (Linux `memfd_create`, not
#' limited by the size of `/dev/shm`), opened by the workers through
#' `/proc`; a worker whose buffers are full waits for the calling process,
#' and gives up when that one stops (an error, an interrupt): the workers
#' then take no more blocks, and are free for the next call. Elsewhere,
#' and with `options(gpukernels.future_shared = FALSE)`, every worker gets
#' its data and returns its results through its future.
#' [pcf_dist_file()] takes the same routes for the functions (read from the
#' calling process, from shared memory, or sent with the future) and has no
#' result to return: each worker writes its band of rows into the file.
#' Under a plan of this machine alone it writes the file in the calling
#' process, on all its GPUs, unless `workers = k` asks for futures: one
#' mapping of the file is faster than one per worker (see its help).
#' Results are identical to those of one process. Reductions
#' ([kernel_reduce()] and its wrappers) and [pcf_knn()] return their (small)
#' results through the futures.
#'
#' @section GPUs of a worker:
#' With `devices = NULL`, chunk `k` uses GPU `((k - 1) mod G) + 1` of the `G`
#' GPUs its worker sees, so that `plan(multisession, workers = G)` on a
#' machine with `G` GPUs gives one GPU to each worker (and a Slurm job that
#' sees one GPU through `CUDA_VISIBLE_DEVICES` uses it);
#' `options(gpukernels.future_devices = "all")` makes every chunk use all the
#' GPUs of its worker instead (one worker per multi-GPU machine). Explicit
#' `devices` are used as given on every worker.
#'
#' @section Errors:
#' A chunk that fails makes the call fail with the worker's error message;
#' no partial result is returned.
#'
#' @section Launching futures:
#' R makes the connections to `plan(multisession)` and `plan(cluster)`
#' workers at `plan()` time, with the socket options of
#' `getOption("socketOptions")`. \pkg{parallelly} sets `"no-delay"` on the
#' workers' ends, but R's default leaves this session's end waiting for the
#' worker's delayed acknowledgement before it sends the rest of a future: on
#' Linux, about 40 ms before each future starts (in a call of half a second
#' on four workers, most of the gap between its start and theirs). Set
#' `options(socketOptions = "no-delay")` before `plan()`: the package leaves
#' the option, which applies to all of this session's new sockets, to you.
#'
#' @section Workers must have the package:
#' Workers load \pkg{gpukernels} from their own library path: for local
#' workers set `R_LIBS` (or `.libPaths()` in the worker's start-up) so they
#' find the same installation.
#'
#' @name gk_distributed
#' @examples
#' \dontrun{
#' library(future)
#' options(socketOptions = "no-delay")   # futures start at once (see above)
#' plan(multisession, workers = 2)
#' X <- lapply(1:2000, function(i) pcf(c(0, sort(runif(50))), c(rnorm(50), 0)))
#' d <- pcf_pdist(X)                 # split over the two workers
#' d1 <- pcf_pdist(X, workers = 1)   # in this process
#' plan(sequential)
#' }
NULL

# TRUE when `workers` surely keeps a call in this process: FALSE, or NULL
# without future loaded (a plan needs the package). A test of microseconds, for
# the engines' small calls.
gk_in_process <- function(workers) {
  is.null(workers) && !isNamespaceLoaded("future") || isFALSE(workers)
}

# Number of chunks to split `n` output rows into: 0 means "run in this process".
# With `local_here` (PCF matrices, files, pcf_knn), the default `workers` under
# a plan of this machine alone also runs here, on all this process's GPUs: the
# result is made and written once, in one process, where workers of this
# machine share the same GPUs and cores and add their copies and handshakes.
gk_chunk_count <- function(workers, n, local_here = FALSE) {
  if (gk_in_process(workers)) return(0L)
  if (is.null(workers)) {
    if (inherits(future::plan(), "sequential")) return(0L)
    if (local_here && gk_plan_is_local()) return(0L)
    count <- future::nbrOfWorkers()
    if (!is.finite(count)) count <- getOption("gpukernels.future_chunks", 8)
  } else {
    if (!is.numeric(workers) || length(workers) != 1L || is.na(workers) || workers < 1 ||
        workers != round(workers)) {
      stop("`workers` must be NULL, FALSE or a whole number >= 1", call. = FALSE)
    }
    count <- workers
    if (count >= 2 && !requireNamespace("future", quietly = TRUE)) {
      stop("`workers` = ", count, " needs the future package; install it, or use workers = 1",
           call. = FALSE)
    }
  }
  count <- as.integer(min(count, n))
  if (count < 2L) 0L else count
}

# Row ranges (start, end; 1-based, inclusive) cutting n rows into `count`
# bands: of equal size, or of equal lower-triangle work (band k ends at
# n * sqrt(k / count)).
gk_row_bands <- function(n, count, triangle = FALSE) {
  ends <- if (triangle) round(n * sqrt(seq_len(count) / count)) else
    round(n * seq_len(count) / count)
  ends <- unique(pmin(pmax(ends, 1L), n))
  ends[length(ends)] <- n
  starts <- c(1L, utils::head(ends, -1L) + 1L)
  keep <- starts <= ends
  cbind(start = starts[keep], end = ends[keep])
}

# The options a chunk runs under on its worker.
gk_chunk_options <- function() {
  names <- c("gpukernels.threads", "gpukernels.backend", "gpukernels.pcf_budget_bytes",
             "gpukernels.future_devices")
  opts <- options()[names]
  opts[!vapply(opts, is.null, NA)]
}

# The GPUs of chunk `k` on its worker (NULL: all of them; see gk_distributed).
# Asked on the worker: it may have GPUs where the calling session has none.
gk_chunk_devices <- function(devices, k, backend) {
  if (!is.null(devices) || gk_backend(backend) != "gpu") return(devices)
  if (identical(getOption("gpukernels.future_devices", "one"), "all")) return(NULL)
  ((k - 1L) %% gk_build_info()$device_count) + 1L
}

# Runs one chunk on a worker (or here): the options of the calling session,
# no progress of its own, then the chunk's function (task$fun, its name in
# this namespace).
gk_run_chunk <- function(task) {
  old <- options(c(task$options, list(gpukernels.progress = FALSE)))
  on.exit(options(old))
  task$devices <- gk_chunk_devices(task$devices, task$chunk, task$backend)
  get(task$fun, mode = "function")(task)   # a name: a namespace function would travel too
}

# Runs tasks as futures, one each, and hands each result to `collect(i,
# value)` as it arrives (so large results need not all be held at once); a
# failing task's error is raised with its message. `p` is a progressor or NULL.
# With `prepare`, the first `early` futures are launched before it runs (their
# dispatch and start overlap it; they must wait for what it makes), the rest
# after; if it fails or is interrupted, `abort()` tells the launched ones to
# give up and they are waited for, so none is left running.
# Returns when each future was launched and collected (seconds, gk_now()).
gk_run_tasks <- function(tasks, collect, p = NULL, prepare = NULL, early = 0L, abort = NULL) {
  # The caller asked for the split: its data must travel, whatever their size.
  old <- options(future.globals.maxSize = Inf)
  on.exit(options(old))
  # Sent to the worker as a global: a small closure that finds gk_run_chunk in
  # the worker's own copy of the package (a namespace function as the global
  # makes each future slower to set up).
  run <- function(task) asNamespace("gpukernels")$gk_run_chunk(task)
  environment(run) <- baseenv()
  launched <- collected <- numeric(length(tasks))
  futures <- vector("list", length(tasks))
  launch <- function(which) for (i in which) {
    task <- tasks[[i]]
    futures[[i]] <<- future::future(run(task), globals = list(run = run, task = task),
                                    packages = "gpukernels", seed = NULL, lazy = FALSE)
    launched[i] <<- gk_now()
  }
  early <- if (is.null(prepare)) 0L else min(early, length(tasks))
  if (!is.null(prepare)) {
    prepared <- FALSE
    on.exit(if (!prepared) {
      abort()
      for (f in futures) if (!is.null(f)) {
        tryCatch(future::value(f, stdout = FALSE, signal = FALSE), error = function(e) NULL)
      }
    }, add = TRUE, after = FALSE)
    launch(seq_len(early))
    prepare()
    prepared <- TRUE
  }
  launch(setdiff(seq_along(tasks), seq_len(early)))
  pending <- seq_along(futures)
  while (length(pending)) {
    done <- pending[vapply(futures[pending], future::resolved, NA)]
    if (!length(done)) {
      Sys.sleep(0.002)   # resolved() on 4 local futures takes about 1 ms
      next
    }
    for (i in done) {
      value <- tryCatch(future::value(futures[[i]]), error = function(e) {
        stop("a worker failed on rows ", tasks[[i]]$rows[1L], " to ", tasks[[i]]$rows[2L],
             ": ", conditionMessage(e), call. = FALSE)
      })
      futures[i] <- list(NULL)
      collected[i] <- gk_now()
      collect(i, value)
      if (!is.null(p)) p()
    }
    pending <- setdiff(pending, done)
  }
  invisible(list(launched = launched, collected = collected))
}

# How many futures of the current plan can be launched before the caller has
# made what they wait for: those that surely run at once in other processes
# (a free worker of multisession, cluster or forking multicore futures); 0
# for plans that run a future when it is launched, here or elsewhere (sequential,
# batchtools), where a waiting future would wait for ever.
gk_early_launches <- function(count) {
  plan <- future::plan()
  async <- inherits(plan, c("multisession", "cluster")) ||
    inherits(plan, "multicore") && future::supportsMulticore()
  if (!async) return(0L)
  free <- tryCatch(future::nbrOfFreeWorkers(), error = function(e) 0L)
  as.integer(max(0, min(count, free)))
}

# Whether every future of the current plan runs on this machine: in this
# process, or in processes it starts here (future.callr's too); a cluster or
# batchtools plan may reach other machines.
gk_plan_is_local <- function() {
  inherits(future::plan(), c("sequential", "multisession", "multicore", "callr"))
}

# Wall-clock seconds, comparable between the processes of one machine.
gk_now <- function() as.numeric(Sys.time())

# ---- PCF matrices ----

# The chunk of a PCF matrix: its band's results (see gk_pcf_distributed), or
# list(written = TRUE / FALSE) for a chunk of the shared-memory route.
gk_pcf_chunk <- function(task) {
  if (!is.null(task$shared)) return(gk_pcf_chunk_shared(task))
  call <- function(X, Y, kind) {
    pcf_matrix_call(X, Y, kind, task$p, task$precision, task$backend, task$devices,
                    workers = FALSE)
  }
  switch(task$kind,
    pdist = , kernel_sym = list(
      tri = if (length(task$X) >= 2L || task$kind == "kernel_sym") call(task$X, NULL, task$kind),
      rect = if (length(task$left)) call(task$X, task$left, if (task$kind == "pdist") "cdist" else "kernel")),
    list(rect = call(task$X, task$Y, task$kind)))
}

# A chunk of the shared-memory route: rows a..b read from the caller's inputs
# and sent through the chunk's ring of the caller's result channel: for
# symmetric results the band's rows against the functions 1..b, lower
# triangle, as one engine call (the band's own triangle and the rectangle
# left of it as two calls paid the set-up, and the GPU pipeline's fill and
# drain, twice), or its rows of a cdist / kernel matrix; with
# `shared$target$sharers`, rows 1..n, the blocks taken from the list the
# call's workers share; with `shared$file` (pcf_dist_file()), into that
# file's matrix instead. The inputs
# are copied out of the caller's memory (`input$direct`: the functions up to
# row b of a symmetric result, rows a..b of another, and y) or read from its
# input segment. `written` is FALSE when this
# worker cannot attach the segments (another machine): the caller then sends
# it the data; NA when it may not read the caller's memory: the caller then
# shares the inputs through a segment.
gk_pcf_chunk_shared <- function(task) {
  started <- gk_now()
  lines <- character()
  if (isTRUE(task$lines)) {   # the engine's lines, for the caller's progress line
    options(gpukernels.progress = TRUE)   # gk_run_chunk restores the options
    # To stderr, captured here: with progressr installed they went to a
    # progressr sink that a worker has no progressor for, and were lost.
    progressr <- gk_state$progressr
    gk_state$progressr <- FALSE
    before <- getConnection(sink.number(type = "message"))   # a worker's log, or stderr
    sink(con <- textConnection("lines", "w", local = TRUE), type = "message")
    on.exit({
      sink(before, type = "message")
      close(con)
      gk_state$progressr <- progressr
    })
  }
  a <- task$rows[1L]
  b <- task$rows[2L]
  if (!is.null(task$shared$target$sharers) &&
      !.Call(gk_r_pcf_blocks_left, task$shared$target)) {   # others took every block
    return(list(written = TRUE, seconds = gk_now() - started, waited = 0, direct = TRUE,
                handed = FALSE, blocks = 0, lines = lines, times = c(started, started, gk_now())))
  }
  symmetric <- task$kind %in% c("pdist", "kernel_sym")
  x_rows <- c(a, b)   # in the functions of `input`
  input <- task$shared$input
  if (isTRUE(input$direct)) {
    from <- if (symmetric) 1 else a
    input <- .Call(gk_r_pcf_fetch, task$shared$target, as.double(c(from, b)), gk_threads())
    if (isFALSE(input)) return(list(written = FALSE))
    if (is.character(input)) return(list(written = NA))
    on.exit(.Call(gk_r_shared_free, input), add = TRUE)
    x_rows <- x_rows - (from - 1)
  }
  read <- gk_now()
  waited <- 0
  blocks <- 0   # sent (NA into a file)
  direct <- TRUE   # every part's blocks went straight into the file
  handed <- TRUE   # every part's blocks were handed over in place
  part <- function(y_set, y_range, row0) {
    at <- list(row0 = row0, col0 = 0)
    band <- list(input = input, x_range = x_rows, y_set = y_set, y_range = y_range,
                 target = c(task$shared$target, at),
                 file = if (!is.null(task$shared$file)) utils::modifyList(task$shared$file, at))
    sent <- pcf_matrix_call(NULL, NULL, task$kind, task$p, task$precision, task$backend,
                            task$devices, band = band)
    if (isFALSE(sent)) return(FALSE)
    waited <<- waited + sent[1L]
    direct <<- direct && sent[2L] == 1
    handed <<- handed && sent[2L] == 2
    blocks <<- blocks + sent[3L]
    TRUE
  }
  written <- if (task$kind == "pdist" && b < 2L) {
    TRUE   # row 1 of a dist holds nothing
  } else if (symmetric) {
    part(0L, c(0, 0), 0)   # in the result's own indices
  } else {
    part(2L, c(1, task$shared$n_cols), a - 1)
  }
  done <- gk_now()
  list(written = written, seconds = done - started, waited = waited, direct = direct,
       handed = handed && isTRUE(blocks > 0), blocks = blocks, lines = lines,
       times = c(started, read, done))
}

# A PCF matrix from `count` row bands run as futures (called by
# pcf_matrix_call with the arguments already checked). The result is an
# ordinary vector of this process, made with a result channel
# (device/gk_channel.h) where the system has shared memory: the workers on
# this machine hand their blocks to it through small shared slots and
# threads of this process scatter them into the result while they compute;
# the results of others are written into it as they arrive. Where the
# workers read their inputs from this process, the channel's small shared
# part and the table of where the inputs are (milliseconds) are made and
# offered first, then the futures launched: each starts reading as it
# starts; they copy the functions out of R's matrices while this process
# checks them, and compute once they passed. The result's allocation (R's
# collector runs first) then overlaps their reading and first blocks, which
# wait for it. The value is
# returned straight from .Call, never bound in a frame that a closure keeps
# alive: pcf_pdist()'s attr<- would then copy it.
# With `file` (pcf_dist_file(): list(target, bands, data_task, make)) the
# workers write their bands (the rows of `bands`) into the file's matrix
# `target` (a file target without row0, col0) instead: the channel only
# offers them the inputs, and there is no result; a worker on another machine
# runs `data_task(k)` with the data instead. `make()` makes the file once
# the inputs are checked, before the workers are told so. Returns NULL.
gk_pcf_distributed <- function(X, Y, kind, p, precision, backend, devices, count, file = NULL) {
  symmetric <- kind %in% c("pdist", "kernel_sym")
  n <- length(X)
  m <- if (symmetric) n else length(Y)
  if (symmetric) Y <- NULL
  single <- gk_check_precision(precision) == "single"
  size <- if (is.null(file)) (if (kind == "pdist") n * (n - 1) / 2 else as.double(n) * m) else 0
  bands <- if (is.null(file)) gk_row_bands(n, count, triangle = symmetric) else file$bands
  begun <- gk_now()
  channel <- .Call(gk_r_channel_create, size, if (is.null(file)) n else 0, nrow(bands))
  handle <- if (is.list(channel)) channel$handle else channel
  input <- table <- NULL
  on.exit({   # now, not when R collects them; the channel first (workers stop)
    .Call(gk_r_shared_free, handle)
    if (is.list(input)) .Call(gk_r_shared_free, input$handle)
    if (!is.null(table)) .Call(gk_r_shared_free, table)
  })
  xy <- list(unclass(X), if (!is.null(Y)) unclass(Y))
  share <- function() {   # the inputs in a segment, or NULL (none here)
    input <<- .Call(gk_r_pcf_share, xy[[1L]], xy[[2L]], kind, p, single)
    if (is.list(input)) input[-1L]
  }
  shared_of <- function(offered) if (!is.null(offered)) list(input = offered, n_cols = m,
    target = list(path = channel$path, token = channel$token, bytes = channel$bytes),
    file = file$target)
  use_shared <- is.list(channel) && isTRUE(getOption("gpukernels.future_shared", TRUE))
  direct <- use_shared && isTRUE(channel$direct)
  open <- function() if (is.null(file)) {
    .Call(gk_r_channel_open, handle, size, if (kind == "pdist") 0L else as.integer(n),
          gk_pcf_write_kind(kind), n, gk_threads())
  }
  # The inputs offered to the workers and checked (or shared through a
  # segment, or only checked) and the result: the value for the tasks'
  # `shared`. Where the workers copy the inputs out of this process, the
  # offer comes first: they read while this process checks.
  make_file <- function() if (!is.null(file)) file$make()
  check <- function(warn) .Call(gk_r_pcf_check, xy[[1L]], xy[[2L]], kind, p, single, warn, table)
  prepare <- function() {
    if (direct) {
      check(TRUE)   # float's warnings come from here: the workers' bands make none
      make_file()
      .Call(gk_r_channel_checked, handle)
      checked <- gk_now()
      open()
      return(structure(shared_of(list(direct = TRUE)), offered = c(offered, checked)))
    }
    open()
    if (use_shared) {
      shared <- shared_of(share())
      make_file()
      return(shared)
    }
    check(FALSE)
    make_file()
    NULL
  }
  offered <- NA_real_
  if (direct) {   # before the launches: the workers find it as they start
    table <- .Call(gk_r_pcf_table, xy[[1L]], xy[[2L]])
    .Call(gk_r_channel_offer, handle, table)
    offered <- gk_now()
  }
  early <- if (direct) gk_early_launches(nrow(bands)) else 0L
  phases <- gk_pcf_bands(X, Y, kind, p, precision, backend, devices, bands, handle,
                         if (early) shared_of(list(direct = TRUE)), prepare, early, begun,
                         share, file$data_task)
  start <- proc.time()[["elapsed"]]
  on.exit(if (gk_progress_lines()) {
    stats <- .Call(gk_r_channel_stats, handle)
    phases[1L] <- sprintf(
      "%s; this process scattered %.2f s (%d pieces, %d writers x %d threads), finished %.2f s",
      phases[1L], stats[1L], as.integer(stats[2L]), as.integer(stats[4L]),
      as.integer(stats[3L]), proc.time()[["elapsed"]] - start)
    message(paste(phases, collapse = "\n"))
  }, add = TRUE, after = FALSE)
  if (is.null(file)) .Call(gk_r_channel_finish, handle)
}

gk_pcf_write_kind <- function(kind) {
  gk_write_kinds[[switch(kind, pdist = "dist", kernel_sym = "symmetric", "dense")]]
}

# Runs the bands as futures: with `shared` (the inputs and the result
# channel) the workers read and send through shared memory or this
# process's memory; without, or for a worker that cannot attach it, they get
# the data and send back results, written into `out` (a result channel's
# handle) as they arrive. `prepare()` makes the result and readies the
# inputs, returning `shared` (with attribute `offered`, the times the inputs
# were offered and checked, where that came before the result): with `early` > 0
# (`shared` then given) after that many futures are launched, else first.
# A worker that may not read this process's memory runs again on inputs in
# a segment (`share()`); one on another machine gets the data (or runs
# `data_task(k)`, which writes its band itself). Returns the progress lines:
# the phases and their timeline, then the workers' engine lines.
gk_pcf_bands <- function(X, Y, kind, p, precision, backend, devices, bands, out, shared, prepare,
                         early, begun, share, data_task = NULL) {
  symmetric <- is.null(Y)
  n <- length(X)
  write_kind <- gk_pcf_write_kind(kind)
  ready <- NA_real_
  offered <- c(NA_real_, NA_real_)
  prepared <- function() {
    value <- prepare()
    ready <<- gk_now() - begun
    if (!is.null(attr(value, "offered"))) offered <<- attr(value, "offered") - begun
    attr(value, "offered") <- NULL
    value
  }
  if (!early) shared <- prepared()
  opts <- gk_chunk_options()
  # Workers on this machine share its cores (future's workers see them all).
  local_opts <- opts
  if (is.null(opts$gpukernels.threads)) {
    local_opts$gpukernels.threads <- max(1L, .Call(gk_r_omp_threads) %/%
                                           min(nrow(bands), future::nbrOfWorkers()))
  }
  # Into the result in memory, the workers share one block list: each takes
  # blocks of the whole result until none is left (device/block_scheduler.h),
  # so a slower one (a later start, slower writes) takes fewer. A file's
  # workers write their bands (their pages are theirs alone).
  listed <- !is.null(shared) && is.null(shared$file)
  task_of <- function(k, data) {
    rows <- if (listed && !data) c(1L, n) else bands[k, ]
    task <- list(fun = "gk_pcf_chunk", kind = kind, rows = rows, p = p, precision = precision,
                 backend = backend, options = if (data) opts else local_opts, devices = devices,
                 chunk = k, lines = gk_progress_lines())
    if (!data) {
      shared$target$ring <- k - 1
      if (listed) shared$target$sharers <- nrow(bands)
      return(c(task, list(shared = shared)))
    }
    if (!is.null(data_task)) return(data_task(k))
    c(task, list(X = X[rows[1L]:rows[2L]], Y = Y,
                 left = if (symmetric && rows[1L] > 1L) X[seq_len(rows[1L] - 1L)]))
  }
  resend <- reshare <- integer()
  worker_s <- waited_s <- numeric()
  route <- character()   # how each worker's blocks went; NA: sent none
  lines <- character()
  times <- matrix(NA_real_, nrow(bands), 3L)
  taken <- rep(NA_real_, nrow(bands))
  collect <- function(i, value) {
    if (isTRUE(value$written)) {
      worker_s <<- c(worker_s, value$seconds)
      waited_s <<- c(waited_s, value$waited)
      route <<- c(route, if (isTRUE(value$blocks == 0)) NA else
        if (isTRUE(value$handed)) "handed" else if (isTRUE(value$direct)) "direct" else "slots")
      taken[i] <<- value$blocks
      times[i, ] <<- value$times - begun
      if (length(value$lines)) lines <<- c(lines, paste0("  future ", i, ": ", value$lines))
      return()
    }
    if (isFALSE(value$written)) {
      resend <<- c(resend, i)
      return()
    }
    if (identical(value$written, NA)) {
      reshare <<- c(reshare, i)
      return()
    }
    r0 <- bands[i, 1L] - 1
    if (!is.null(value$rect)) {
      .Call(gk_r_block_write, out, write_kind, n, r0, 0, value$rect, FALSE)
    }
    if (!is.null(value$tri)) {
      .Call(gk_r_block_write, out, write_kind, n, r0, r0,
            if (kind == "pdist") unclass(value$tri) else value$tri, kind == "pdist")
    }
  }
  progress <- gk_progressor(nrow(bands))
  run <- gk_run_tasks(lapply(seq_len(nrow(bands)), task_of, data = is.null(shared)), collect,
                      progress, prepare = if (early) prepared, early = early,
                      abort = function() .Call(gk_r_shared_free, out))
  # A worker that ran the shared list took its blocks until none was left.
  list_done <- function() listed && length(worker_s) > 0L
  if (list_done()) reshare <- resend <- integer()
  if (length(reshare)) {   # workers that may not read this process's memory
    shared$input <- share()
    if (is.null(shared$input)) resend <- c(resend, reshare) else {
      gk_run_tasks(lapply(reshare, task_of, data = FALSE),
                   function(i, value) collect(reshare[i], value))
    }
  }
  if (list_done()) resend <- integer()
  if (length(resend)) {   # workers on other machines: the data travel, and the results
    again <- resend
    gk_run_tasks(lapply(again, task_of, data = TRUE), function(i, value) collect(again[i], value))
  }
  each <- if (length(worker_s)) paste(sprintf("%.2f", worker_s), collapse = " / ") else "-"
  routes <- function(route) {   # of the workers that sent blocks
    sent <- route[!is.na(route)]
    count <- function(how, what) {
      n <- sum(sent == how)
      if (n) sprintf(", %d of %d %s", n, length(sent), what)
    }
    paste0(count("handed", "handed over in place"),
           count("direct", "written straight into the file"),
           count("slots", "through shared slots"))
  }
  at <- function(x) paste(sprintf("%.2f", x), collapse = "/")
  c(sprintf("pcf (%d futures, %s): result and inputs ready in %.2f s, workers %.2f s (each: %s s%s)",
            nrow(bands), if (is.null(shared)) {
              if (is.null(data_task)) "results through the futures" else "data through the futures"
            } else
              paste0(if (isTRUE(shared$input$direct) && !length(reshare))
                       "inputs read from this process" else "shared memory",
                     routes(route),
                     if (length(reshare)) ", some ran again on shared inputs",
                     if (length(resend)) ", some resent"),
            ready, gk_now() - begun - ready, each,
            if (length(waited_s)) paste0(", of which waiting for free slots ",
                                         paste(sprintf("%.2f", waited_s), collapse = " / ")) else ""),
    sprintf(paste("  timeline (s from the call's start): %s; workers started %s, inputs read %s,",
                  "done %s; collected %s%s"),
            paste(c(sprintf("futures launched %s", at(run$launched - begun)),
                    if (is.na(offered[1L])) sprintf("result and inputs ready %.2f", ready) else
                      sprintf("inputs offered %.2f, checked %.2f, result ready %.2f",
                              offered[1L], offered[2L], ready))[
                        if (early) 1:2 else 2:1],
                  collapse = "; "),
            at(times[, 1L]), at(times[, 2L]), at(times[, 3L]), at(run$collected - begun),
            if (listed) paste0("; blocks taken ", paste(taken, collapse = "/")) else ""),
    lines)
}

# ---- kernel reductions ----

# One chunk of a reduction: its rows of the output side.
gk_reduce_chunk <- function(task) {
  task$args[[task$out_arg]] <- task$part
  task$args$workers <- FALSE
  task$args$devices <- task$devices
  do.call(kernel_reduce, task$args)
}

# A reduction split over futures by rows of its output (x for axis 1, y for
# axis 2); `args` are kernel_reduce()'s arguments.
gk_reduce_distributed <- function(args, count) {
  out_arg <- if (args$axis == 1) "x" else "y"
  rows_of <- args[[out_arg]]
  if (is.null(dim(rows_of))) rows_of <- matrix(rows_of, ncol = 1L)
  args[[out_arg]] <- NULL
  bands <- gk_row_bands(nrow(rows_of), count)
  opts <- gk_chunk_options()
  tasks <- lapply(seq_len(nrow(bands)), function(k) {
    rows <- bands[k, ]
    list(fun = "gk_reduce_chunk", rows = rows, part = rows_of[rows[1L]:rows[2L], , drop = FALSE],
         out_arg = out_arg, args = args, options = opts, chunk = k, devices = args$devices,
         backend = args$backend)
  })
  parts <- vector("list", length(tasks))
  gk_run_tasks(tasks, function(i, value) parts[[i]] <<- value, gk_progressor(length(tasks)))
  first <- parts[[1L]]
  if (is.list(first)) {
    return(list(values = do.call(rbind, lapply(parts, `[[`, "values")),
                index = do.call(rbind, lapply(parts, `[[`, "index"))))
  }
  if (is.matrix(first)) do.call(rbind, parts) else unlist(parts, use.names = FALSE)
}
