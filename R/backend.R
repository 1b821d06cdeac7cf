#' Choose the engine backend
#'
#' Resolves a backend request to `"gpu"` or `"cpu"`. Every engine in the
#' package calls this with its `backend` argument, so the rule is the same
#' everywhere: `"auto"` means the GPU when this build has CUDA and a GPU is
#' present, and the CPU otherwise; `"gpu"` without a usable GPU is an error
#' that says why; `"cpu"` is always available.
#'
#' @param backend `"auto"`, `"gpu"` or `"cpu"`. `NULL` (the default) takes
#'   `getOption("gpukernels.backend", "auto")`.
#' @return `"gpu"` or `"cpu"`.
#' @examples
#' gk_backend()
#' gk_backend("cpu")
#' old <- options(gpukernels.backend = "cpu")
#' gk_backend()
#' options(old)
#' @export
gk_backend <- function(backend = NULL) {
  if (is.null(backend)) backend <- getOption("gpukernels.backend", "auto")
  # Comparisons rather than %in%: this runs in every call of every engine.
  if (!is.character(backend) || length(backend) != 1L || is.na(backend) ||
      !(backend == "auto" || backend == "cpu" || backend == "gpu")) {
    stop("`backend` must be one of \"auto\", \"gpu\" or \"cpu\"", call. = FALSE)
  }
  if (backend == "cpu") return("cpu")
  if (gk_build_info()$device_count > 0L) return("gpu")
  if (backend == "gpu") {
    stop("backend = \"gpu\" was requested, but no GPU can be used: ",
         gk_build_info()$no_device_reason, call. = FALSE)
  }
  "cpu"
}

#' Is a GPU available to gpukernels?
#'
#' @return `TRUE` when this build has CUDA and at least one GPU is usable.
#' @examples
#' gk_has_gpu()
#' @export
gk_has_gpu <- function() {
  gk_build_info()$device_count > 0L
}

# How the package was built and how many GPUs the driver reports. GPUs do not
# come and go within an R session, so this is asked once: every engine call
# resolves its backend through it.
gk_state <- new.env(parent = emptyenv())
gk_build_info <- function() {
  if (is.null(gk_state$build)) gk_state$build <- .Call(gk_r_build_info)
  gk_state$build
}

#' Select the GPU used by the engines
#'
#' On machines with several GPUs, chooses the one every later call uses.
#' Objects kept on a GPU ([gk_device_matrix()] and GPU-built [h2_matrix()]
#' objects) stay on the GPU that was selected when they were made: they keep
#' working, and are freed there, after another GPU is selected. A reduction
#' whose device matrices live on different GPUs is refused.
#'
#' @param device GPU number, from 1 to the number of GPUs (see [gk_info()]).
#' @return The selected device number, invisibly.
#' @examples
#' if (gk_has_gpu()) gk_set_device(1)
#' @export
gk_set_device <- function(device) {
  if (!is.numeric(device) || length(device) != 1L || is.na(device) || !is.finite(device) ||
      device != round(device) || device < 1 || device > .Machine$integer.max) {
    stop("`device` must be a single whole number from 1 to the number of GPUs (",
         gk_build_info()$device_count, " here)", call. = FALSE)
  }
  device <- as.integer(device)
  invisible(.Call(gk_r_set_device, device))
}

# Threads for the CPU engines (0 = all OpenMP threads).
gk_threads <- function() {
  threads <- getOption("gpukernels.threads")
  if (is.null(threads) || identical(threads, 0L)) return(0L)
  gk_check_count(threads, "option gpukernels.threads (0 = all cores)", 0L,
                 .Machine$integer.max)
}
