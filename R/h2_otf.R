# The storage of H2 matrices (h2_matrix(storage = )): stored blocks, or
# coupling and dense blocks evaluated on the fly by the reduction engine
# (src/h2/h2_otf.h). The choice of "auto" is made in C once the tree is known
# (h2_otf_choose); these helpers check the argument and describe the choice.

h2_storages <- c("auto", "stored", "on_the_fly", "stored_if_fits")

h2_check_storage <- function(storage) {
  if (identical(storage, h2_storages[1:3])) storage <- "auto"   # the default
  if (!is.character(storage) || length(storage) != 1L || is.na(storage) ||
      !storage %in% h2_storages) {
    stop("`storage` must be one of \"auto\", \"stored\", \"on_the_fly\" or \"stored_if_fits\"",
         call. = FALSE)
  }
  storage
}

# The code gk_r_h2_build takes (objects saved before `storage` existed: stored).
h2_storage_code <- function(storage) {
  if (is.null(storage)) return(0L)
  match(storage, c("stored", "on_the_fly", "auto", "stored_if_fits")) - 1L
}

# on_the_fly: the dense blocks are computed on the fly; couplings_on_the_fly:
# the couplings too (an h2_matrix(storage = "on_the_fly")). Dense blocks alone
# on the fly: the compression of such a matrix (h2_compress()), whose
# compressed couplings are stored.
h2_storage_summary <- function(info) {
  list(on_the_fly = info$on_the_fly,
       couplings_on_the_fly = isTRUE(info$couplings_on_the_fly),
       reason = c("requested", "faster", "memory")[info$storage_reason + 1L],
       ms_stored = info$ms_stored, ms_on_the_fly = info$ms_on_the_fly,
       kernel_pairs = info$kernel_pairs, bytes = info$on_the_fly_bytes)
}

h2_print_storage <- function(s) {
  mixed <- s$on_the_fly && !isTRUE(s$couplings_on_the_fly)
  form <- if (mixed) {
    "dense blocks on the fly, compressed couplings stored"
  } else if (s$on_the_fly) {
    "on the fly"
  } else {
    "stored"
  }
  why <- switch(s$reason,
                # a compression keeps the form of its input
                requested = if (mixed) "from an on-the-fly matrix" else "as requested",
                faster = sprintf("auto: predicted HMV %.3g ms on the fly, %.3g ms stored",
                                 s$ms_on_the_fly, s$ms_stored),
                memory = "auto: the stored blocks would not fit in the memory budget",
                tol = "chosen for `tol`, see below")
  cat(sprintf("  storage: %s (%s)\n", form, why))
  if (s$on_the_fly) {
    pairs <- if (is.na(s$kernel_pairs)) "kernel evaluations not known" else
      sprintf("%.3g kernel evaluations", s$kernel_pairs)
    cat(sprintf("    %s per product and right-hand side; %s %.1f MB\n", pairs,
                if (mixed) "ranges" else "nodes and ranges", s$bytes / 2^20))
  }
}
