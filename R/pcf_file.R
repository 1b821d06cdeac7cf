#' Distance matrices larger than memory, written to a file
#'
#' Computes the same distances as [pcf_pdist()] (when `y` is `NULL`) or
#' [pcf_cdist()] and writes them, slab of rows by slab of rows, into a
#' file-backed `big.matrix` of the \pkg{bigmemory} package, so that the
#' result never has to fit in memory (2e5 functions: 320 GB in double, 160 GB
#' in float). The slabs are computed in this process, or by \pkg{future}
#' workers (see [gk_distributed]; the workers must see the same file system,
#' e.g. a cluster's shared disk); either way the engine writes its blocks
#' straight into the file, mapped, with no copy of a slab in R. Under a plan
#' whose workers all run on this machine (`plan(multisession)`,
#' `plan(multicore)`, \pkg{future.callr}) this process computes the file on
#' all its GPUs (`devices`) unless `workers = k` asks for futures: it maps
#' the file once, where each worker would map it again (see below).
#' Workers of other plans (`plan(cluster)`, \pkg{future.batchtools}), and
#' those asked for by number, each write their band: those on this machine
#' read the functions from this process's memory, as those of [pcf_pdist()]
#' do, and those on other machines receive them with their futures. The values
#' are in the file system's cache when the call returns, visible to every
#' process of this machine (workers on other machines sync theirs to the
#' shared disk before they finish); `bigmemory::flush()` writes them to disk.
#' The file's disk blocks are allocated when it is made, before any value is
#' written, so that its writers do not take them page by page
#' (`GK_FILE_ALLOCATE` in [gk_info()]). Its mapping asks for 2 MiB pages;
#' where the file system makes them (large folios: ext4 from Linux 6.16,
#' XFS) the engines' first writes make the pages, as on tmpfs (e.g.
#' `/dev/shm`); elsewhere the pages are made in the page cache before the
#' engines write them (`GK_FILE_POPULATE`).
#'
#' What to expect of its speed: the system makes a file's pages in its page
#' cache at a rate of its own, which more processes or threads hardly raise.
#' In 2 MiB pages a file takes about 1.2 times as long as the same matrix in
#' memory on one GPU. Two GPUs of this process shorten the call by 35 to 40
#' percent (5e4 functions, 10 GB); two workers with a GPU each by 30 to 33
#' percent at 10 GB (a band's mirrored writes reach every column, so both
#' workers' mappings make, dirty and free most of the file's pages) and 40
#' percent at 6 GB (`y` given). In 4 KiB pages a file takes about twice as
#' long, and two workers shorten the call by 15 to 25 percent. When the
#' result fits in memory, [pcf_pdist()] or [pcf_cdist()] is faster; a file
#' pays where it does not, or where workers on other machines share it.
#'
#' The result is a full `length(x)` x `length(y)` matrix (for `y = NULL`,
#' symmetric with a zero diagonal, so that column `i`, stored contiguously,
#' is also row `i`). Read it by rows or columns without loading it:
#' `D[i, ]`, `D[, j]`, `D[rows, ]`, or attach it in another session with
#' `bigmemory::attach.big.matrix(paste0(file, ".desc"))`.
#'
#' Files: `<file>.bin` (the values, column-major, no header) and
#' `<file>.desc` (bigmemory's descriptor). The values are written under a
#' temporary name and renamed at the end, the descriptor after them: a call
#' that fails (or a worker that fails: the call then fails with its error)
#' removes the values, so a `.desc` file exists only for a complete matrix.
#'
#' Two precisions are involved: `precision` is how the distances are
#' computed (as for [pcf_pdist()]), `file_type` how they are stored in the
#' file. Distances computed in double may be stored as float to halve the
#' file; `precision = "single"` with `file_type = "double"` stores the
#' single-precision results without loss.
#'
#' @inheritParams pcf_pdist
#' @param x A list of PCFs: a `pcf_list`, a `pcf`, or a list of two-column numeric
#'   matrices (times, values), as for [pcf_pdist()].
#' @param y `NULL` for the distances among `x`, or a list of PCFs (columns).
#' @param file Path of the result without extension.
#' @param file_type The file's element type: `"double"` (8 bytes) or
#'   `"float"` (4); independent of `precision`, the compute precision.
#' @param X,Y,type Deprecated names of `x`, `y` and `file_type`.
#' @param overwrite Replace existing files.
#' @param slab_bytes The most a slab of rows takes in the file (the unit of
#'   progress); by default `getOption("gpukernels.file_slab_bytes", 2^30)`.
#'   Each worker gets a band of rows of equal work, cut into slabs; there are
#'   no more workers than the matrix has slabs. Each process computes
#'   its slabs in one go and reports their progress when done;
#'   `options(gpukernels.file_progress_slabs = TRUE)` computes them slab by
#'   slab instead, with progress per slab (slower: each slab is a call of its
#'   own, whose set-up and last block the GPUs wait for).
#' @return The file-backed `big.matrix`, attached.
#' @examples
#' if (requireNamespace("bigmemory", quietly = TRUE)) {
#'   X <- lapply(1:100, function(i) pcf(c(0, sort(runif(5))), c(rnorm(5), 0)))
#'   file <- tempfile("dist")
#'   D <- pcf_dist_file(X, file = file)
#'   D[1:3, 1:3]
#' }
#' @export
pcf_dist_file <- function(x, y = NULL, file, p = 1, file_type = c("double", "float"),
                          precision = "double", devices = NULL, workers = NULL,
                          overwrite = FALSE,
                          slab_bytes = getOption("gpukernels.file_slab_bytes", 2^30),
                          backend = NULL, X, Y, type) {
  gk_use_new_names("pcf_dist_file", c(X = "x", Y = "y", type = "file_type"))
  if (!requireNamespace("bigmemory", quietly = TRUE)) {
    stop("pcf_dist_file() needs the bigmemory package", call. = FALSE)
  }
  X <- as_pcf_list(x, "x")
  Y <- y
  if (!is.null(Y)) Y <- as_pcf_list(Y, "y")
  p <- pcf_check_p(p)
  type <- gk_match_choice(file_type, c("double", "float"), "file_type")
  gk_check_precision(precision)
  if (!is.character(file) || length(file) != 1L || is.na(file) || !nzchar(file)) {
    stop("`file` must be a single path (without extension)", call. = FALSE)
  }
  gk_check_scalar(slab_bytes, "slab_bytes", lower = 1)
  symmetric <- is.null(Y)
  dir <- normalizePath(dirname(file), mustWork = TRUE)
  base <- basename(file)
  final <- file.path(dir, paste0(base, c(".bin", ".desc")))
  if (any(file.exists(final)) && !isTRUE(overwrite)) {
    stop("`", file, "` (.bin or .desc) exists: use overwrite = TRUE to replace it", call. = FALSE)
  }
  n <- length(X)
  m <- if (symmetric) n else length(Y)
  value_bytes <- if (type == "double") 8 else 4
  tag <- paste0(".partial-", Sys.getpid(), "-", as.integer(stats::runif(1, 0, 1e9)))
  partial <- paste0(final[1L], tag)   # the values until they are complete
  on.exit(unlink(partial), add = TRUE)   # a failed call leaves nothing behind
  # The file, made once the functions are checked (a bad input fails before
  # the disk is taken): by this function, or by the workers' route once it
  # has checked them, so that they are checked once.
  desc <- NULL
  make_file <- function() {
    # The file with its disk blocks, in one call: the engines' first writes
    # to the pages of a sparse file would take them one page at a time,
    # under a lock of the file that serializes every writer
    # (GK_FILE_ALLOCATE). Nothing maps it here: the engines write it.
    .Call(gk_r_file_make, partial, as.double(n) * m * value_bytes)
    desc <<- gk_file_descriptor(dir, basename(partial), n, m, type)
  }

  # A band of equal work per worker (one in this process), cut into slabs.
  slab_rows <- max(1L, floor(slab_bytes / (value_bytes * max(m, 1))))
  # Under a plan of this machine the file is this process's, on all its GPUs:
  # one mapping makes and frees each page of the file once, where every
  # worker's mapping touches most of them (a band's mirrored writes reach
  # every column), and the file's pages are made at the file's one rate.
  count <- gk_chunk_count(workers, ceiling(n / slab_rows), local_here = TRUE)
  cut <- gk_file_slabs(n, max(count, 1L), slab_rows, symmetric)
  bands <- cut$bands
  slabs <- cut$slabs
  groups <- cut$groups
  by_slab <- isTRUE(getOption("gpukernels.file_progress_slabs", FALSE))
  # The task of the slabs of group g that runs pcf_file_chunk (with the data).
  task_of <- function(g) {
    these <- slabs[groups[[g]], , drop = FALSE]
    last <- max(these[, 2L])
    list(fun = "pcf_file_chunk", rows = c(min(these[, 1L]), last), slabs = these,
         X = if (symmetric) X[seq_len(last)] else X[min(these[, 1L]):last],
         offset = if (symmetric) 0L else min(these[, 1L]) - 1L, Y = Y, p = p,
         precision = precision, backend = backend, devices = devices, chunk = g,
         desc = desc, dir = dir, host = Sys.info()[["nodename"]], options = gk_chunk_options(),
         by_slab = by_slab)
  }
  if (count > 0L) {
    # Workers on this machine read the functions from this process's memory
    # (as pcf_pdist()'s workers do) and each writes its rows' bands (slab by
    # slab with the option); workers elsewhere get the data (task_of). On
    # this machine the workers write at once: each band makes its share of
    # the file's pages, in proportion to its work, not the pages it fills.
    if (by_slab) {
      groups <- as.list(seq_len(nrow(slabs)))
      bands <- slabs
    }
    target <- list(path = partial, float = type == "float",
                   layout = gk_write_kinds[[if (symmetric) "symmetric" else "dense"]],
                   n_rows = n, bytes = as.double(n) * m * value_bytes, sync = FALSE,
                   populate = gk_file_pages[["share"]])
    gk_pcf_distributed(X, Y, if (symmetric) "pdist" else "cdist", p, precision, backend,
                       devices, nrow(bands),
                       file = list(target = target, bands = bands, data_task = task_of,
                                   make = make_file))
  } else {
    .Call(gk_r_pcf_check, unclass(X), if (symmetric) NULL else unclass(Y),
          if (symmetric) "pdist" else "cdist", p, precision == "single", FALSE, NULL)
    make_file()
    task <- task_of(1L)
    task$progress <- gk_progressor(nrow(slabs))
    pcf_file_chunk(task)   # in this process, on all its GPUs
  }
  # Complete: the values under their final name, then the descriptor naming them.
  if (!file.rename(partial, final[1L])) {
    stop("could not rename the finished values to `", final[1L], "`", call. = FALSE)
  }
  desc_final <- desc
  desc_final@description$filename <- basename(final[1L])
  dput(desc_final, final[2L])
  bigmemory::attach.big.matrix(final[2L])
}

# The rows 1..n cut into `count` bands of equal work (a band of a symmetric
# matrix: its rows against those before them), as pcf_pdist()'s workers
# have them (the call lasts as long as its longest band), and each band
# into slabs of at most slab_rows rows. Returns the bands and the slabs
# (rows start, end) and, for each band, the indices of its slabs (`groups`).
gk_file_slabs <- function(n, count, slab_rows, symmetric) {
  bands <- gk_row_bands(n, count, triangle = symmetric)
  band_slabs <- lapply(seq_len(nrow(bands)), function(k) {
    rows <- bands[k, 2L] - bands[k, 1L] + 1L
    gk_row_bands(rows, ceiling(rows / slab_rows)) + (bands[k, 1L] - 1L)
  })
  per_band <- vapply(band_slabs, nrow, 1L)
  list(bands = bands, slabs = do.call(rbind, c(list(matrix(0, 0L, 2L)), band_slabs)),
       groups = unname(split(seq_len(sum(per_band)), rep(seq_along(band_slabs), per_band))))
}

# bigmemory's descriptor of the n x m file-backed matrix of `type` in
# dir/filename, as bigmemory::describe() gives it (the .desc file format, the
# one bigmemory::attach.big.matrix() reads), made without mapping the file:
# a big.matrix of the caller would hold the file open until R collects it.
gk_file_descriptor <- function(dir, filename, n, m, type) {
  methods::new(methods::getClass("big.matrix.descriptor", where = asNamespace("bigmemory")),
               description = list(sharedType = "FileBacked", filename = filename,
                                  dirname = if (endsWith(dir, "/")) dir else paste0(dir, "/"),
                                  totalRows = as.integer(n), totalCols = as.integer(m),
                                  rowOffset = c(0, n), colOffset = c(0, m),
                                  nrow = as.double(n), ncol = as.double(m), rowNames = NULL,
                                  colNames = NULL, type = type, separated = FALSE))
}

# A worker's slabs: computes each and writes it straight into the file's
# matrix, mapped (the engine's block writer, float or double, a symmetric
# result mirrored). On another machine than the caller's (a cluster's shared
# disk) the writes are synced before the chunk returns.
pcf_file_chunk <- function(task) {
  old <- options(gpukernels.progress = FALSE)   # progress is counted in slabs
  on.exit(options(old))
  info <- task$desc@description
  float <- identical(info$type, "float")
  n_rows <- as.double(info$totalRows)
  path <- file.path(task$dir, info$filename)
  sync <- !identical(Sys.info()[["nodename"]], task$host)
  # `populate`: the call makes the pages of the file it fills first (where
  # they are whole columns, GK_FILE_POPULATE); a band's triangle fills the
  # columns its rectangle, made first, already did.
  call <- function(A, B, kind, layout, row0, col0, populate = TRUE) {
    file <- list(path = path, float = float, layout = layout, n_rows = n_rows,
                 bytes = n_rows * info$totalCols * if (float) 4 else 8, row0 = row0,
                 col0 = col0, sync = sync,
                 populate = gk_file_pages[[if (populate) "written" else "none"]])
    pcf_matrix_call(A, B, kind, task$p, task$precision, task$backend, task$devices,
                    workers = FALSE, file = file)
  }
  # The task's slabs are consecutive: by default one engine call for all
  # their rows (two for a symmetric band below the first row). Each call
  # flattens and checks its functions again, and its GPUs idle meanwhile and
  # while its last block is written. Slab by slab (the option) shows
  # progress per slab instead of per task.
  by_slab <- isTRUE(task$by_slab)
  ranges <- if (by_slab) task$slabs else
    matrix(c(min(task$slabs[, 1L]), max(task$slabs[, 2L])), 1L)
  symmetric <- gk_write_kinds[["symmetric"]]
  for (s in seq_len(nrow(ranges))) {
    a <- ranges[s, 1L]
    b <- ranges[s, 2L]
    if (is.null(task$Y)) {   # the diagonal stays 0, as the new file is
      rows <- task$X[a:b]
      if (a > 1L) call(rows, task$X[seq_len(a - 1L)], "cdist", symmetric, a - 1, 0)
      if (b > a) call(rows, NULL, "pdist", symmetric, a - 1, a - 1, populate = a == 1L)
    } else {
      call(task$X[(a:b) - task$offset], task$Y, "cdist", gk_write_kinds[["dense"]], a - 1, 0)
    }
    steps <- if (by_slab) 1L else nrow(task$slabs)
    if (!is.null(task$progress)) for (k in seq_len(steps)) task$progress()
  }
  invisible(NULL)
}
