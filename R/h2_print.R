# Words and printed summaries of H2 matrices built to a tolerance or
# compressed (print.h2matrix and summary.h2matrix call these).

# Words for a form built by h2_matrix(tol = ) ("stored" or "on_the_fly"),
# compressed or not. A compressed on-the-fly matrix stores its compressed
# couplings and keeps its dense blocks on the fly (on either backend).
h2_form_words <- function(form, compressed = FALSE) {
  if (form != "on_the_fly") return(if (compressed) "stored, compressed" else "stored")
  if (compressed) "on the fly, compressed (dense blocks on the fly, couplings compressed)" else "on the fly"
}

h2_format_bytes <- function(bytes) {
  if (bytes >= 1e9) sprintf("%.1f GB", bytes / 1e9) else sprintf("%.1f MB", bytes / 1e6)
}

h2_print_tol_choice <- function(ch) {
  cat(sprintf("  chosen for tol = %g%s: order %d, eta %g, %s%s\n", ch$tol,
              if (ch$met) "" else " (not met)", ch$order, ch$eta %||% NA_real_, ch$storage,
              if (is.null(ch$why)) "" else sprintf(" (%s)", ch$why)))
}

h2_print_compression <- function(cmp) {
  mb <- function(b) sprintf("%.1f MB", sum(b) / 2^20)
  used <- which(cmp$ranks > 1)
  if (!length(used)) used <- seq_along(cmp$ranks)
  ranks <- function(r) paste(r[used], collapse = " ")
  if (is.na(cmp$tol)) {
    cat(sprintf("  orthogonalized in %.3f s; ranks per level (levels %d-%d): %s\n", cmp$seconds,
                min(used) - 1, max(used) - 1, ranks(cmp$ranks)))
  } else {
    cat(sprintf("  compressed to tol = %g in %.3f s: Frobenius error estimate %.3g\n", cmp$tol,
                cmp$seconds, cmp$error_frobenius))
    cat(sprintf("    ranks per level (levels %d-%d): %s (before: %s)\n", min(used) - 1,
                max(used) - 1, ranks(cmp$ranks), ranks(cmp$ranks_before)))
  }
  cat(sprintf("    memory: %s before, %s after (low rank %s -> %s)\n", mb(cmp$bytes_before),
              mb(cmp$bytes), mb(cmp$bytes_before[["low_rank"]]), mb(cmp$bytes[["low_rank"]])))
}
