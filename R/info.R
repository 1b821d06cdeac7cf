#' What this build of gpukernels can use
#'
#' Reports how the package was built (with CUDA or CPU-only, the CUDA version
#' and target architectures), for each GPU its name, compute capability,
#' number of multiprocessors, and total and free memory, and the package's
#' tunables.
#'
#' @section Tunables:
#' The few settings the engines read from the environment are listed in one
#' registry, `gk_info()$tunables`; each is an environment variable that holds
#' a number. The defaults are what the package was tuned with; a variable
#' changes what the engines do from their next call (set it with
#' `Sys.setenv()` in the session, or before R starts), and results stay the
#' same up to rounding. A value that is not a whole number in the tunable's
#' range is ignored (the default applies) and the report says so.
#' \describe{
#'   \item{`GK_REDUCE_ROWS`}{rows per thread of the GPU gaussian-sum and
#'     squared-distance minimum (knn with k = 1) fast paths (1, 2 or 4); 0, the
#'     default, chooses by problem size (1 for the filtered double minimum).}
#'   \item{`GK_REDUCE_SLICE_PAIRS`}{kernel evaluations per launch of a long GPU
#'     reduction, with an interrupt check between launches; 0, the default,
#'     chooses.}
#'   \item{`GK_PCF_SHARED_BYTES`}{shared memory per thread block of the PCF GPU
#'     kernel for staged column functions (default 40960 bytes).}
#'   \item{`GK_H2_PROJECT_CHUNK_MB`}{size of the chunks in which the GPU H2
#'     compression projects a level's couplings (default 4096 MB): smaller
#'     chunks need less GPU memory and make more launches.}
#'   \item{`GK_H2_STACK_QR_MAX_RANK`}{highest level rank whose QRs in the GPU H2
#'     compression use the package's stack QR kernel (default 256, the
#'     kernel's limit); levels of higher rank use cuBLAS's batched QR in passes.}
#'   \item{`GK_H2_STACK_PIECES`}{coupling blocks per pass of those batched QRs
#'     (default 4).}
#'   \item{`GK_REDUCE_MIN_BLOCKS`}{blocks per multiprocessor that the GPU
#'     k-smallest (knn) and min/max kernels are compiled to fit, 1 to 4 (their
#'     registers are capped to match); 0, the default, chooses (3 for knn's
#'     double-precision lists of up to 16, 4 for its filtered double k = 1,
#'     else 1 in double precision and no floor in single).}
#'   \item{`GK_REDUCE_FLOAT_FILTER`}{1 (the default): the GPU `knn()` in double
#'     precision with k <= 16 (k = 1 included) first tests pairs by the distance of float copies
#'     of the points, with a bound that keeps the results the same; 0: every
#'     pair in double.}
#'   \item{`GK_FILE_ALLOCATE`}{1 (the default): [pcf_dist_file()] allocates
#'     the disk blocks of its file before the engines write it (`fallocate`,
#'     where the file system has it; not on tmpfs); 0: the file stays sparse
#'     and the first write to each page allocates its block.}
#'   \item{`GK_FILE_POPULATE`}{1 (the default): before its engines write,
#'     [pcf_dist_file()] makes the file's pages (the whole file in one
#'     process; workers of this machine a share each, in proportion to their
#'     bands' work; a worker elsewhere the columns it fills) in one system
#'     call per 2 MiB, on all its threads, when the file is at most a tenth
#'     of the machine's memory, unless the file is in memory (tmpfs, e.g.
#'     `/dev/shm`) or its file system makes its pages 2 MiB at a time (large
#'     folios: ext4 from Linux 6.16, XFS), where the faults of the engines'
#'     writes overlap the GPUs' work and cost less; 2: there too; 0: each
#'     first write to a page through the file's mapping faults it in.}
#'   \item{`GK_PCF_BAND_SLOTS`}{bands of PCFs (the functions of a block's
#'     rows or columns, packed) that one GPU keeps between blocks; 0, the
#'     default, keeps every band of the call within half the memory budget,
#'     so that each goes to each GPU once; smaller values (at least 4) upload
#'     bands again when a later block needs them.}
#'   \item{`GK_PIPELINE_DEPTH`}{blocks of a PCF matrix each GPU has in
#'     flight (2 to 4; 4, the default): while the host writes one into the
#'     result, the GPU computes the others, so that it does not wait for a
#'     slow write or for the result's allocation; each holds a block of
#'     results on the GPU, two at a time also in page-locked host memory.}
#'   \item{`GK_CHANNEL_DIRECT`}{1 (the default): future workers on this machine
#'     read the functions of a PCF matrix from the calling session's memory
#'     (see [gk_distributed]); 0 (in the calling session, or in a worker's
#'     environment for that worker): through shared memory.}
#'   \item{`GK_CHANNEL_HANDOVER`}{1 (the default): future workers on this
#'     machine hand their blocks of a PCF matrix to the calling session in
#'     place, and threads of that session (`GK_CHANNEL_WRITERS`, 1 to 8, 0
#'     chooses one per worker, 2 at least) write them from the workers'
#'     shared memory into the result; 0: each worker copies its blocks
#'     into shared slots of the calling session that those threads write
#'     into the result.}
#'   \item{`GK_RESULT_HUGE_PAGES`}{1, the default (or 0): a PCF result of
#'     64 MB or more, filled by this process's engines or by future workers,
#'     in memory or in [pcf_dist_file()]'s file, asks the system for 2 MiB
#'     pages, 512 times fewer page faults than 4 KiB pages; 2: never.}
#' }
#'
#' @return An object of class `gk_info`: a list with `cuda` (logical),
#'   `cuda_version`, `runtime_version`, `driver_version`, `device_count`,
#'   `no_device_reason`, `current_device`, `devices` (a data frame, one row per
#'   GPU) and `tunables` (a data frame, one row per tunable: `name`, the
#'   environment variable; `value`, the value in effect; `default`; `set`,
#'   whether the variable is set; `valid`, whether its value is accepted, `NA`
#'   where it is not set; `description`). It prints as a short report.
#' @examples
#' gk_info()
#' @export
gk_info <- function() {
  build <- .Call(gk_r_build_info)
  devices <- lapply(seq_len(build$device_count), function(i) {
    d <- .Call(gk_r_device_info, i)
    as.data.frame(d, stringsAsFactors = FALSE)
  })
  devices <- if (length(devices)) {
    do.call(rbind, devices)
  } else {
    data.frame(index = integer(), name = character(), compute_capability = character(),
               sm_count = integer(), total_memory = numeric(), free_memory = numeric(),
               l2_cache = numeric(), shared_memory_per_block = numeric(),
               stringsAsFactors = FALSE)
  }
  build$current_device <- if (build$device_count > 0L) .Call(gk_r_current_device) else NA_integer_
  build$devices <- devices
  build$tunables <- gk_tunables()
  structure(build, class = "gk_info")
}

#' @export
print.gk_info <- function(x, ...) {
  version_string <- function(v) if (v > 0) sprintf("%d.%d", v %/% 1000, (v %% 1000) %/% 10) else "none"
  cat("gpukernels", format(utils::packageVersion("gpukernels")), "\n")
  if (x$cuda) {
    cat("  build:   CUDA ", x$cuda_version, " (", trimws(gsub("-gencode arch=compute_[0-9]+,code=", "", x$nvcc_gencode)),
        ")\n", sep = "")
    cat("  driver:  ", version_string(x$driver_version), "\n", sep = "")
  } else {
    cat("  build:   CPU only (no CUDA toolkit when installed)\n")
  }
  cat("  CPU threads: ", gk_cpu_threads(), "\n", sep = "")
  if (x$device_count == 0L) {
    cat("  GPUs:    none (", x$no_device_reason, ")\n", sep = "")
    cat("  backend \"auto\" uses the CPU\n")
  } else {
    cat("  GPUs:\n")
    gib <- function(b) sprintf("%.1f GiB", b / 2^30)
    for (i in seq_len(nrow(x$devices))) {
      d <- x$devices[i, ]
      cat(sprintf("  %s[%d] %s, compute capability %s, %d SMs, %s total, %s free\n",
                  if (identical(d$index, x$current_device)) "*" else " ",
                  d$index, d$name, d$compute_capability, d$sm_count,
                  gib(d$total_memory), gib(d$free_memory)))
    }
    cat("  backend \"auto\" uses GPU ", x$current_device, "\n", sep = "")
  }
  tun <- x$tunables
  changed <- tun$set
  if (any(changed)) {
    cat("  tunables set in the environment (the others at their defaults; ?gk_info):\n")
    for (i in which(changed)) {
      cat(sprintf("    %s = %s%s\n", tun$name[i], format(tun$value[i], scientific = FALSE),
                  if (isTRUE(tun$valid[i])) "" else
                    sprintf(" (the default: \"%s\" is not valid)", Sys.getenv(tun$name[i]))))
    }
  } else {
    cat("  tunables: all at their defaults (", nrow(tun), " listed in $tunables)\n", sep = "")
  }
  invisible(x)
}

# The registry of tunables (src/device/gk_tunables.c), one row per tunable.
gk_tunables <- function() {
  as.data.frame(.Call(gk_r_tunables), stringsAsFactors = FALSE)
}

gk_cpu_threads <- function() {
  threads <- gk_threads()
  if (threads > 0L) threads else .Call(gk_r_omp_threads)
}
