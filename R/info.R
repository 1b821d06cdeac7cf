#' What this build of gpukernels can use
#'
#' Reports how the package was built (with CUDA or CPU-only, the CUDA version
#' and target architectures) and, for each GPU, its name, compute capability,
#' number of multiprocessors, and total and free memory.
#'
#' @return An object of class `gk_info`: a list with `cuda` (logical),
#'   `cuda_version`, `runtime_version`, `driver_version`, `device_count`,
#'   `no_device_reason`, `current_device` and `devices` (a data frame, one row per
#'   GPU). It prints as a short report.
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
  invisible(x)
}

gk_cpu_threads <- function() {
  threads <- gk_threads()
  if (threads > 0L) threads else .Call(gk_r_omp_threads)
}
