#' gpukernels: fast kernel-matrix computations on GPUs, with a CPU fallback
#'
#' Four engines share one device layer: tiled kernel reductions, block-sparse
#' reductions, H2 covariance matrices and distances between piecewise-constant
#' functions. Every engine runs on the GPU when one is present and on the CPU
#' otherwise, with the same answers.
#'
#' @section Backends:
#' Every engine takes `backend = c("auto", "gpu", "cpu")`. The default comes
#' from `getOption("gpukernels.backend", "auto")`. `"auto"` uses a GPU when the
#' package was built with CUDA and a GPU is present, and the CPU otherwise;
#' `"gpu"` without a usable GPU is an error. See [gk_backend()].
#'
#' @section Threads:
#' The CPU engines use OpenMP with `getOption("gpukernels.threads", 0)` threads
#' (0 means OpenMP's default: every core, or `OMP_NUM_THREADS` where it is
#' set). The GPU engines' host work (packing inputs, writing results into R's
#' memory) uses them too: on a host with several GPUs, an `OMP_NUM_THREADS`
#' set for one GPU's share of the cores leaves the GPUs waiting for the host.
#'
#' @section H2 matrices to a tolerance:
#' [h2_matrix()] with `tol` builds an order only when its estimated size fits
#' a budget: `getOption("gpukernels.h2_tol_budget")` bytes when set, else 80%
#' of the free GPU memory, no limit on the CPU. A smaller budget makes
#' `storage = "auto"` go on the fly sooner (the tests use it on the CPU).
#'
#' @section Tunables:
#' The few settings read from environment variables (sizes of GPU work
#' chunks and of shared-memory staging) form one registry, listed with their
#' values and defaults by [gk_info()] (`gk_info()$tunables`); see its help.
#'
#' @keywords internal
#' @useDynLib gpukernels, .registration = TRUE
"_PACKAGE"

# Unloading the namespace frees the GPU memory the engines keep between calls.
# The DLL stays loaded: finalizers of device matrices and H2 matrices still
# alive in the session point into it.
.onUnload <- function(libpath) {
  try(.Call(gk_r_release_caches), silent = TRUE)
}
