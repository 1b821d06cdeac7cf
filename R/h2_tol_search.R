# h2_matrix(tol = ): the search for the order, storage and compression that
# meet a tolerance (the plan); the forms' words and summaries are in h2_print.R.

# h2_matrix(tol = ): raise the Chebyshev order (at the given eta, else 3)
# until the measured N(0, 1) error meets tol, and compress the order found,
# compressed products being the faster (h2_tol_compress: the errors of the
# order and of the compression add at most, and a compressed matrix is kept
# only if its measured error meets tol).
# Every form follows one rule (h2_tol_target): an order within tol is
# compressed at once by what tol leaves (at most half of tol) unless that is
# less than a tenth of tol; then the next order is built first. The orders
# whose error cannot come so close to tol, by a bound on how fast errors fall
# from one order to the next, are not built (h2_tol_next_order).
# - storage = "stored": when no higher order is built (it would not fit the
#   budget or cannot be built), the most accurate order within tol is
#   compressed by what tol leaves, however little.
# - "on_the_fly": on-the-fly forms (bases stored, blocks evaluated in every
#   product: O(nk) memory, so accuracy is limited by time, not memory),
#   compressed alike (h2_tol_compressed_fly); the result stores its
#   compressed couplings and, on the GPU, keeps its dense blocks on the fly.
#   When no compressed form meets tol (or a compression fails, e.g. for
#   memory), the uncompressed forms are searched (h2_tol_uncompressed_fly).
# - "auto": stored first, on the fly from the first order whose stored form
#   would not fit the budget or cannot be built (a stored order within tol is
#   compressed by what tol leaves first).
# The tree (and so the number of blocks) does not depend on the order, so the
# memory of the next order is known before it is built.
h2_matrix_to_tol <- function(locs, kernel, nugget, leaf_size, eta, order, precision, backend,
                             tol, storage, etas = eta) {
  # Every matrix built on the way is freed on return, not when R's garbage
  # collector gets to it: a large stored order holds tens of GB of the GPU,
  # which the search would otherwise hold after it returns.
  made <- new.env(parent = emptyenv())
  made$all <- list()
  track <- function(A) {
    made$all[[length(made$all) + 1L]] <- A
    A
  }
  # The points' tree at each eta, which every order built copies (h2_tol_tree)
  trees <- new.env(parent = emptyenv())
  on.exit({
    keep <- if (is.null(result)) NULL else .subset2(result, "native")
    for (A in made$all) if (!identical(.subset2(A, "native"), keep)) gk_free(A)
    for (tree in as.list(trees)) .Call(gk_r_h2_tree_free, tree)
  })
  result <- NULL
  result <- h2_tol_search(locs, kernel, nugget, leaf_size, eta, order, precision, backend, tol,
                          storage, etas, track, trees)
  result
}

# The parameters of the search, as fractions or multiples of tol unless said
# otherwise; the reason for each value beside it.
h2_tol_params <- list(
  # An order within tol is compressed to what tol leaves of its error (the
  # two add at most), but to no more than split * tol: an order well within
  # tol keeps a margin for the scatter of the measurement that checks the
  # result (h2_tol_target).
  split = 0.5,
  # ... and only when what tol leaves is at least rest * tol: less would
  # keep ranks near the built ones; the next order is built first.
  rest = 0.1,
  # An order's error is at least ratio times the order below's at eta <=
  # ratio_eta (exponential kernel, 3D, eta 3, 2^20 points: 0.22-0.33 from
  # order 3 to 6): the orders that cannot come within (1 - rest) tol so are
  # not built (h2_tol_next_order). A larger eta converges faster.
  ratio = 0.15,
  ratio_eta = 3,
  # An uncompressed form must measure below uncompressed * tol: one probe's
  # error scatters about the Frobenius error, and every eta tried is one more
  # chance to measure an error just below tol.
  uncompressed = 0.8,
  # The error of an order above stalled times the order below's (a ratio of
  # errors): raising the order further will not reach tol.
  stalled = 0.9,
  # Orders within near * tol count towards fly_orders: those below are the
  # cheap ones, and the uncompressed search would build them too.
  near = 10,
  # The orders near tol the compressed search builds on the fly at most: each
  # order takes two to three times the memory and time of the one before.
  fly_orders = 4L,
  # A compression whose measured error misses tol is tried once more at
  # retry times its target (rare: the estimate bounds the Frobenius error).
  retry = 0.25,
  # Rows sampled by the error measurements (h2_error), at most.
  rows = 2000L
)

# The state of one search: its inputs, the orders to try, the memory budget,
# and the on-the-fly orders built at eta by the compressed search (by order:
# a built list or the h2_unbuilt condition) for the uncompressed one.
h2_tol_state <- function(locs, kernel, nugget, leaf_size, eta, order, precision, backend, tol,
                         storage, etas, track, trees) {
  s <- new.env(parent = emptyenv())
  s$locs <- locs
  s$kernel <- kernel
  s$nugget <- nugget
  s$leaf_size <- leaf_size
  s$eta <- eta
  s$etas <- etas
  s$precision <- precision
  s$backend <- backend
  s$tol <- tol
  s$storage <- storage
  s$track <- track
  s$trees <- trees
  d <- ncol(locs)
  s$orders <- if (is.null(order)) (if (d == 2L) 4:16 else 3:10) else order
  s$budget <- h2_tol_budget(backend)
  s$rows <- min(nrow(locs), h2_tol_params$rows)
  # Every matrix is measured with the same 4 probes (h2_error_probes), drawn
  # with their exact products at the first measurement: what remains of a
  # measurement is one product of 4 columns by the matrix, and the largest of
  # 4 probes lies above the Frobenius error more surely than of 2.
  s$probes <- NULL
  s$measure <- function(A) {
    if (is.null(s$probes)) s$probes <- h2_error_probes(A, 4L, "normal", s$rows)
    h2_error_of(A, s$probes)
  }
  s$fly_at_eta <- new.env(parent = emptyenv())
  s
}

# Order o at eta e in `form`, or a condition of class "h2_unbuilt" saying why
# not. The blocks' memory follows from any built order of the same points.
h2_tol_build <- function(s, o, form, previous, e = s$eta) {
  if (!is.null(previous)) {
    need <- h2_order_bytes(previous$info, o, form)
    if (need > s$budget$bytes) {
      return(h2_unbuilt(sprintf("order %d %s would need %s of %s", o, h2_form_words(form),
                                h2_format_bytes(need), s$budget$words)))
    }
  }
  # what h2_matrix(s$locs, ..., eta = e, order = o, storage = form) builds,
  # its arguments checked already, from the tree at e
  tryCatch({
    h2_check_size(nrow(s$locs), ncol(s$locs), s$leaf_size, o, s$precision)
    s$track(h2_matrix_new(s$locs, s$kernel, s$nugget, s$leaf_size, o, e, s$precision, s$backend,
                          form, h2_tol_tree(s, e)))
  }, error = function(err) {
    h2_unbuilt(sprintf("order %d %s cannot be built (%s)", o, h2_form_words(form),
                       conditionMessage(err)), err)
  })
}

# The tree of the search's points at eta e (gk_r_h2_tree), built at its first
# use: the clusters and block lists do not depend on the order, so each
# order's build copies it rather than clustering and traversing again (a
# copy is a small part of a build's host time).
# Freed when the search returns (h2_matrix_to_tol).
h2_tol_tree <- function(s, e) {
  key <- sprintf("%.17g", e)
  if (is.null(s$trees[[key]])) {
    s$trees[[key]] <- .Call(gk_r_h2_tree, s$locs, s$kernel, s$leaf_size, e, gk_threads())
  }
  s$trees[[key]]
}

# A matrix superseded by a more accurate one is freed at once rather than on
# return: the orders after it may need its memory. (Should it be wanted after
# all, e.g. returned, it is rebuilt on first use.)
h2_tol_release <- function(built) if (!is.null(built)) gk_free(built$A)

# Compressed on the fly, at eta, from order `first` (`previous`: the stored
# order below it, or NULL). An order within tol is compressed as
# h2_tol_target says; one it leaves to the next order (within tol, but too
# close to it) is remembered and compressed by what tol leaves when the next
# order is not built or gives no compressed form meeting tol. One order at
# most is built beyond the first within tol, at most fly_orders near tol, and
# none once the error stalls or a compression fails (e.g. out of memory: a
# higher order needs more). Returns the chosen matrix, else list(why: why no
# compressed form was taken, stopped: why no higher order was built).
h2_tol_compressed_fly <- function(s, first, previous, why) {
  p <- h2_tol_params
  tol <- s$tol
  last <- previous       # the order below: its memory and its error
  within <- NULL         # the order within tol left to the next order
  first_within <- NULL   # the first order within tol
  stopped <- NULL
  missed <- NULL
  counted <- 0L          # orders built near tol
  next_order <- first
  for (o in s$orders[s$orders >= first]) {
    if (o < next_order) next
    if (counted >= p$fly_orders && is.null(within)) {
      stopped <- sprintf("the compressed search builds at most %d orders within %g tol",
                         p$fly_orders, p$near)
      break
    }
    A <- h2_tol_build(s, o, "on_the_fly", last)
    if (inherits(A, "h2_unbuilt")) {
      s$fly_at_eta[[as.character(o)]] <- A
      stopped <- conditionMessage(A)
      break
    }
    info <- h2_info(A)
    built <- list(A = A, order = o, eta = s$eta, form = "on_the_fly", error = s$measure(A),
                  ms = info$ms_on_the_fly, info = info)
    rm(A)
    s$fly_at_eta[[as.character(o)]] <- built
    err <- built$error$probe
    if (err < p$near * tol) counted <- counted + 1L
    # superseded: the uncompressed search would return a more accurate order
    if (!is.null(last) && err < last$error$probe && !identical(last, within)) h2_tol_release(last)
    if (err < tol) {
      first_within <- first_within %||% o
      to <- h2_tol_target(err, tol)
      if (!is.na(to)) {
        done <- h2_tol_compress(built, tol, to, s$measure, why, s$track)
        if (inherits(done, "h2matrix")) return(done)
        missed <- c(missed, conditionMessage(done))
        # failed or would not fit: a higher order needs more
        if (!isTRUE(done$missed)) break
      } else if (is.null(within) || err < within$error$probe) {
        within <- built
      }
    }
    if (!is.null(last) && err > p$stalled * last$error$probe) {
      stopped <- sprintf("the error stopped improving (order %d: %.3g, order %d: %.3g)",
                         last$order, last$error$probe, o, err)
      break
    }
    if (!is.null(first_within) && o > first_within) break
    last <- built
    next_order <- h2_tol_next_order(s, err, o, info)
  }
  if (!is.null(within)) {
    done <- h2_tol_compress_rest(within, tol, s$measure, c(why, stopped), s$track)
    if (inherits(done, "h2matrix")) return(done)
    missed <- c(missed, conditionMessage(done))
  }
  if (is.null(missed)) {
    missed <- sprintf("no order on the fly at eta %g was within tol%s", s$eta,
                      if (is.null(stopped)) "" else sprintf(" (%s)", stopped))
  }
  list(why = paste(missed, collapse = "; "), stopped = stopped)
}

# Uncompressed on the fly: at each eta (the given one, else h2_tol_etas), the
# lowest order from `first` that meets uncompressed tol; of those, the one
# with the fastest product (the storage model's prediction,
# h2_info()$ms_on_the_fly). A smaller eta evaluates more pairs per product
# but reaches a given error at a lower order, so the search at a later
# (smaller) eta starts one order below the one found so far and goes down
# while the orders meet tol or are predicted slower than that form, else up
# until one meets tol or is predicted slower: the orders far below the
# start, whose errors are far above tol, are not built and measured. This
# finds what a scan from the lowest order finds, errors falling and
# predicted times growing with the order. The orders the compressed search
# built at eta are not built again.
h2_tol_uncompressed_fly <- function(s, first, previous) {
  found <- NULL
  best <- previous
  stopped <- NULL
  failed <- NULL
  for (e in s$etas) {
    orders <- s$orders[s$orders >= (if (e == s$eta) first else s$orders[1L])]
    if (!length(orders)) next
    o <- orders[1L]
    if (e != s$eta && !is.null(found)) o <- max(orders[1L], min(found$order - 1L, max(orders)))
    step <- 0L   # 0 at the start, -1 going down, 1 going up
    repeat {
      built <- if (e == s$eta) s$fly_at_eta[[as.character(o)]]
      if (is.null(built)) built <- h2_tol_build(s, o, "on_the_fly", best, e)
      if (inherits(built, "h2_unbuilt")) {
        stopped <- conditionMessage(built)
        failed <- built
        break
      }
      if (inherits(built, "h2matrix")) {
        info <- h2_info(built)
        built <- list(A = built, order = o, eta = e, form = "on_the_fly", error = NULL,
                      ms = info$ms_on_the_fly, info = info)
      }
      if (!is.null(found) && built$ms >= found$ms) {
        if (step > 0L) break   # the orders above are slower still
        step <- -1L            # the orders below are faster
      } else {
        if (is.null(built$error)) built$error <- s$measure(built$A)
        if (built$error$probe <= h2_tol_params$uncompressed * s$tol) {
          found <- built
          if (step > 0L) break
          step <- -1L
        } else {
          if (is.null(best) || built$error$probe <= best$error$probe) best <- built
          if (step < 0L) break   # the orders below miss tol too
          step <- 1L
        }
      }
      o <- o + step
      if (!(o %in% orders)) break
    }
  }
  if (!is.null(found) && length(s$etas) > 1L) {
    found$why <- sprintf("predicted %.3g ms per product, the fastest on-the-fly form that meets tol",
                         found$ms)
  }
  if (is.null(found) && is.null(best)) stop(failed$parent %||% failed)   # nothing could be built
  list(found = found, best = best, stopped = stopped)
}

# On the fly from order `first`: compressed, else uncompressed.
h2_tol_finish_fly <- function(s, first, previous, why) {
  compressed <- h2_tol_compressed_fly(s, first, previous, why)
  if (inherits(compressed, "h2matrix")) return(compressed)
  fly <- h2_tol_uncompressed_fly(s, first, previous)
  if (!is.null(fly$found)) {
    return(h2_tol_chosen(fly$found, s$tol, paste(c(why, paste("uncompressed:", compressed$why),
                                                   fly$found$why), collapse = "; ")))
  }
  h2_tol_missed(fly$best, s$tol, fly$stopped %||% compressed$stopped %||% why[1L])
}

h2_tol_search <- function(locs, kernel, nugget, leaf_size, eta, order, precision, backend, tol,
                          storage, etas, track, trees) {
  s <- h2_tol_state(locs, kernel, nugget, leaf_size, eta, order, precision, backend, tol, storage,
                    etas, track, trees)
  if (storage == "on_the_fly") return(h2_tol_finish_fly(s, s$orders[1L], NULL, "as requested"))
  best <- NULL      # the most accurate stored matrix built: list(A, order, eta, form, error)
  stopped <- NULL   # why no higher order was built
  next_order <- s$orders[1L]
  for (o in s$orders) {
    if (o < next_order) next
    A <- h2_tol_build(s, o, "stored", best)
    if (inherits(A, "h2_unbuilt")) {
      if (is.null(best) && storage != "auto") stop(A$parent %||% A)
      stopped <- conditionMessage(A)
      if (storage == "auto") {
        done <- h2_tol_compress_rest(best, tol, s$measure, stopped, track)
        if (inherits(done, "h2matrix")) return(done)
        return(h2_tol_finish_fly(s, o, best, c(stopped, if (!is.null(done)) conditionMessage(done))))
      }
      break
    }
    built <- list(A = A, order = o, eta = eta, form = "stored", error = s$measure(A),
                  info = h2_info(A))
    rm(A)
    if (is.null(best) || built$error$probe <= best$error$probe) {
      h2_tol_release(best)
      best <- built
    }
    to <- if (built$error$probe < tol) h2_tol_target(built$error$probe, tol) else NA
    if (!is.na(to)) {
      done <- h2_tol_compress(built, tol, to, s$measure, NULL, track)
      if (inherits(done, "h2matrix")) return(done)
      return(h2_tol_chosen(built, tol, paste("uncompressed:", conditionMessage(done))))
    }
    # "auto" goes on the fly from the order predicted, should it not fit
    next_order <- h2_tol_next_order(s, built$error$probe, o,
                                    if (storage == "stored") built$info)
  }
  # No order was within (1 - rest) tol; a stored form within tol still does,
  # compressed by what is left.
  done <- h2_tol_compress_rest(best, tol, s$measure, stopped, track)
  if (inherits(done, "h2matrix")) return(done)
  h2_tol_missed(best, tol, stopped)
}

# No form met tol: a warning, and the most accurate matrix built.
h2_tol_missed <- function(best, tol, stopped) {
  if (best$error$probe <= tol) return(h2_tol_chosen(best, tol, stopped))
  if (is.null(stopped)) {
    stopped <- sprintf("the highest order tried (%d) gives a measured error of %.3g", best$order,
                       best$error$probe)
    advice <- "use a smaller `eta`"
  } else {
    advice <- if (best$form == "stored") {
      paste("for more accuracy use storage = \"auto\" (far less memory), a larger `eta`,",
            "single precision or the CPU")
    } else {   # the bases and transfers: fewer clusters, or smaller entries
      "for more accuracy use a larger `leaf_size`, single precision or the CPU"
    }
  }
  warning(sprintf(paste0("h2_matrix(tol = %g): %s; returning order %d %s with a measured error ",
                         "of %.3g; %s"),
                  tol, stopped, best$order, h2_form_words(best$form), best$error$probe, advice),
          call. = FALSE)
  h2_tol_chosen(best, tol, stopped, met = FALSE)
}

# The etas h2_matrix(tol = ) tries on the fly when none is given.
h2_tol_etas <- c(3, 2, 1.5)

`%||%` <- function(a, b) if (is.null(a)) b else a   # base R has it from 4.4.0

h2_unbuilt <- function(message, parent = NULL) {
  structure(class = c("h2_unbuilt", "error", "condition"),
            list(message = message, call = NULL, parent = parent))
}

# The memory one order's matrix may use in h2_matrix(tol = ), and its words for
# messages: options(gpukernels.h2_tol_budget) bytes, else 80% of the free GPU
# memory, unlimited on the CPU.
h2_tol_budget <- function(backend) {
  bytes <- getOption("gpukernels.h2_tol_budget")
  if (!is.null(bytes)) {
    if (!is.numeric(bytes) || length(bytes) != 1L || is.na(bytes) || bytes <= 0) {
      stop("option gpukernels.h2_tol_budget must be a number of bytes > 0 (or NULL)",
           call. = FALSE)
    }
    return(list(bytes = bytes, words = sprintf("memory, %s allowed by gpukernels.h2_tol_budget",
                                               h2_format_bytes(bytes))))
  }
  if (backend != "gpu") return(list(bytes = Inf, words = "memory"))
  free <- h2_gpu_free_budget()
  list(bytes = free, words = sprintf("GPU memory, %s free", h2_format_bytes(free)))
}

# Bytes of the current GPU's free memory that may be used: the budget every
# engine keeps to (GK_MEMORY_BUDGET_FRACTION, read from C at load: codes.R).
h2_gpu_free_budget <- function() {
  info <- gk_info()
  gk_memory_budget_fraction * info$devices$free_memory[info$current_device]
}

# Bytes of order o's matrix in `form`, from `info` of the same points at
# another order: the blocks are the same, the ranks grow as order^d. On the
# fly: bases, transfers and the Chebyshev nodes of every cluster.
h2_order_bytes <- function(info, o, form) {
  grow <- (o / info$order)^info$dim
  b <- info$bytes_per_entry
  bases <- b * (info$basis_entries * grow + info$transfer_entries * grow^2)
  if (form == "on_the_fly") return(bases + 8 * info$dim * info$nodes * info$rank * grow)
  bases + b * (info$coupling_entries * grow^2 + info$dense_entries)
}

# `built` (stored or on the fly) compressed to ctol (its errors and the
# compression's add at most), if the measured error of the result meets tol;
# else an h2_unbuilt condition saying why not (the compressed forms missed
# tol: its `missed` is TRUE; or the compression failed or would not fit the
# GPU's memory).
h2_tol_compress <- function(built, tol, ctol, measure, why, track = identity) {
  words <- h2_form_words(built$form)
  room <- h2_compress_room(built$A)
  if (!is.null(room)) {
    return(h2_unbuilt(sprintf("order %d %s not compressed: it would need about %s more GPU memory, %s",
                              built$order, words, h2_format_bytes(room$need), room$words)))
  }
  errors <- numeric()
  tos <- c(ctol, h2_tol_params$retry * ctol)   # rarely, the first misses: compress less
  for (to in tos) {
    B <- tryCatch(track(h2_compress(built$A, to)), error = function(err) err)
    if (inherits(B, "error")) {
      return(h2_unbuilt(sprintf("order %d %s compressed to %.3g failed (%s)", built$order, words,
                                to, conditionMessage(B)), B))
    }
    err <- measure(B)
    if (err$probe <= tol) {
      B$compression$tol_requested <- tol
      before <- sprintf("error %.3g before compression to %.3g", built$error$probe, to)
      return(h2_tol_chosen(list(A = B, order = built$order, form = built$form, error = err), tol,
                           paste(c(before, why), collapse = "; ")))
    }
    errors <- c(errors, err$probe)
    gk_free(B)   # not returned
  }
  missed <- h2_unbuilt(sprintf("order %d %s compressed to %s missed tol (measured %s)",
                               built$order, words, paste(sprintf("%.3g", tos), collapse = " and "),
                               paste(sprintf("%.3g", errors), collapse = " and ")))
  missed$missed <- TRUE
  missed
}

# NULL when the GPU compression of A should fit the GPU's free memory, else
# what it would need and the free memory's words. The compression's
# workspaces (the orthogonalization's projections and working copy, chunks of
# couplings of at most 4 GB and 1 GB of others: src/h2/h2_compress_cuda.cu)
# come to about A's bases, transfers and nodes again, plus 5 GB (its stored
# blocks are read or shared, not copied). Checked before the attempt, since a
# large compression can run for a minute before an allocation fails.
h2_compress_room <- function(A) {
  info <- h2_info(A)
  if (!info$gpu || !h2_compress_on_gpu()) return(NULL)
  need <- info$bytes_per_entry * (info$basis_entries + info$transfer_entries) +
    info$on_the_fly_bytes + 5e9
  # the free memory itself: gpukernels.h2_tol_budget bounds the matrices built
  free <- h2_gpu_free_budget()
  if (need <= free) return(NULL)
  list(need = need, words = sprintf("%s free", h2_format_bytes(free)))
}

# The order to build after order o, whose measured error is err: the lowest
# whose error may come within (1 - rest) tol (h2_tol_target compresses it),
# the error falling by at most h2_tol_params$ratio per order; the next at an
# eta above ratio_eta. At 2^20 in 3D (tol = 1e-3, order 3 at 1e-2) order 4
# (2.6e-3) is not built; had the bound been wrong, a higher order than needed
# would be built, not a less accurate one. With `info` (order o's h2_info()),
# no further than the highest order whose form fits the budget: should tol be
# out of reach, the most accurate order that can be built is still built.
h2_tol_next_order <- function(s, err, o, info = NULL) {
  p <- h2_tol_params
  target <- (1 - p$rest) * s$tol
  if (s$eta > p$ratio_eta || err <= target) return(o + 1L)
  skip <- as.integer(ceiling(log(target / err) / log(p$ratio) - 1e-9))
  to <- max(o + 1L, min(o + skip, max(s$orders)))
  form <- if (isTRUE(info$on_the_fly)) "on_the_fly" else "stored"
  while (!is.null(info) && to > o + 1L && h2_order_bytes(info, to, form) > s$budget$bytes) {
    to <- to - 1L
  }
  to
}

# The tolerance an order within tol whose measured error is err is compressed
# to (h2_tol_compress), or NA: build the next order first. What tol leaves
# (tol - err: the order's error and the compression's add at most), at most
# split * tol, when that is at least rest * tol. One rule for every form: a
# compression costs about the same at any target (its work is the factoring
# of the built blocks, whatever rank it keeps), the next order a build and a
# compression of ((o + 1) / o)^d times the rank, the work growing as rank^3.
# Below rest * tol the compressed ranks near the built
# ones, and the measured error of the result is err plus noise about as large
# as what is left.
h2_tol_target <- function(err, tol) {
  p <- h2_tol_params
  left <- tol - err
  if (left < p$rest * tol) return(NA_real_)
  min(left, p$split * tol)
}

# `best` compressed by what tol leaves, if its error is below tol
# (h2_tol_compress's result); else NULL.
h2_tol_compress_rest <- function(best, tol, measure, why, track = identity) {
  if (is.null(best) || best$error$probe >= tol) return(NULL)
  h2_tol_compress(best, tol, tol - best$error$probe, measure, why, track)
}

# The result of h2_matrix(tol = ): the matrix `chosen` holds, with its measured
# error and what was chosen and why (print() shows it).
h2_tol_chosen <- function(chosen, tol, why, met = TRUE) {
  A <- chosen$A
  compressed <- !is.null(A$compression)
  storage <- h2_form_words(chosen$form, compressed)
  A$tol_choice <- list(tol = tol, order = as.integer(chosen$order), eta = A$eta,
                       storage = storage, why = why, met = met)
  h2_with_accuracy(A, chosen$error)
}

h2_with_accuracy <- function(A, err) {
  A$accuracy <- err
  A
}
