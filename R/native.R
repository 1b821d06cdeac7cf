# Objects that hold native (C or GPU) memory: they survive saveRDS(), can be
# released early, and are counted so that R collects them in time.
#
# Such an object keeps, in R, everything that rebuilds its native data
# (locations, kernel and settings; a matrix's values) and an environment
# `native` that holds the external pointer. The environment is shared by every
# copy of the object, and saveRDS() stores it with a dead pointer (external
# pointers are saved without their address). gk_native_ptr() rebuilds the
# native data on first use after readRDS() or gk_free(), once for all copies.
# A new kind of object (e.g. a fitted model holding native data) uses the same
# pieces: gk_native_new() when made, gk_native_ptr(x, build) at every use, and
# a gk_free() method that releases the pointer's memory.

gk_native_new <- function(ptr) {
  native <- new.env(parent = emptyenv())
  native$ptr <- ptr
  native
}

# The external pointer of x, rebuilt by build(x) when it has no address (the
# glue checks anything else, e.g. a pointer from elsewhere, by its tag).
gk_native_ptr <- function(x, build) {
  native <- .subset2(x, "native")
  if (!is.environment(native)) {
    stop("this ", class(x)[1L], " was not made by this version of gpukernels: make it again",
         call. = FALSE)
  }
  if (.Call(gk_r_ptr_stale, native$ptr)) native$ptr <- build(x)
  native$ptr
}

# TRUE when x's native data are there (not saved and read back, nor freed).
gk_native_alive <- function(x) {
  native <- .subset2(x, "native")
  is.environment(native) && !.Call(gk_r_ptr_stale, native$ptr)
}

#' Release the memory of large objects now
#'
#' An [h2_matrix()] or a [gk_device_matrix()] holds host or GPU memory that R
#' does not see. It is freed when R's garbage collector finds the object
#' unreachable; the package counts the memory held by live objects
#' ([gk_memory()]) and runs a full collection itself before a large new
#' allocation when live objects hold much (more than twice what was live after
#' the previous such collection, or more than the budget: half the physical
#' memory, or `options(gpukernels.host_memory_budget = bytes)`, on the host; the
#' free memory on a GPU). A loop that replaces one large object by another
#' therefore holds about two of them, with no `gc()` in user code.
#'
#' `gk_free()` releases an object's memory at once. The object stays usable:
#' its native data are rebuilt (an `h2matrix`, from its locations, kernel and
#' settings) or uploaded again (a device matrix, from its values) the next time
#' it is used, as after [saveRDS()] and [readRDS()].
#'
#' @param x An `h2matrix` or a `gk_device_matrix`.
#' @return `gk_free()`: `x`, invisibly. `gk_memory()`: a named numeric vector of
#'   bytes held by live objects: `host`, then `gpu1`, `gpu2`, ... for each GPU.
#' @examples
#' A <- h2_matrix(matrix(runif(2000), ncol = 2), gk_kernel("exponential", range = 0.1),
#'                backend = "cpu")
#' gk_memory()
#' gk_free(A)
#' gk_memory()
#' y <- A %*% rnorm(1000)   # rebuilt on use
#' @export
gk_free <- function(x) UseMethod("gk_free")

#' @export
gk_free.default <- function(x) {
  stop("gk_free() releases h2matrix and gk_device_matrix objects, not an object of class \"",
       class(x)[1L], "\"", call. = FALSE)
}

#' @rdname gk_free
#' @export
gk_memory <- function() .Call(gk_r_memory_held)
