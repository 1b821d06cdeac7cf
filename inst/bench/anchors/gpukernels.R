# gpukernels' side of inst/bench/anchors/run.sh: times the same cases on the
# arrays that data.R wrote, reads the anchors' times (anchor_times.tsv from
# anchors.py), and prints one table: case, anchor, both times, the ratio
# (anchor time / gpukernels time: above 1, gpukernels is faster) and the
# largest difference between the two results on a sample.
# Usage: Rscript gpukernels.R DIR PARTS   (writes DIR/table.md too)
suppressPackageStartupMessages(library(gpukernels))
args <- commandArgs(trailingOnly = TRUE)
dir <- if (length(args) >= 1) args[1] else "anchors-data"
parts <- strsplit(if (length(args) >= 2) args[2] else "keops,masspcf", ",")[[1]]
reps <- as.integer(Sys.getenv("REPS", "5"))
RANGE <- 0.5   # the gaussian's range, as in anchors.py

manifest <- utils::read.delim(file.path(dir, "manifest.tsv"), stringsAsFactors = FALSE)
manifest <- manifest[!duplicated(manifest$name, fromLast = TRUE), ]
load_array <- function(name) {
  row <- manifest[manifest$name == name, ]
  if (nrow(row) != 1) stop(name, " is not in the data (run data.R with its part)")
  path <- file.path(dir, paste0(name, ".", row$type))
  count <- row$rows * row$cols
  x <- if (row$type == "f64") readBin(path, "double", count, size = 8, endian = "little")
       else readBin(path, "integer", count, size = 4, endian = "little")
  if (row$cols == 1) x else matrix(x, row$rows, row$cols)
}
anchor_sample <- function(case) {
  path <- file.path(dir, paste0("anchor_", case, ".f64"))
  if (file.exists(path)) readBin(path, "double", file.size(path) / 8, size = 8) else NULL
}

# Median wall time of `reps` samples after a warm-up (warm: a cheaper warm-up
# call). The clock counts milliseconds: a sample of a call shorter than 50 ms
# times a batch of calls that lasts about 50 ms, divided by its length.
timed <- function(f, reps, warm = f) {
  warm()
  s <- proc.time()[["elapsed"]]
  out <- f()
  once <- proc.time()[["elapsed"]] - s
  batch <- if (once < 0.05) ceiling(0.05 / max(once, 1e-4)) else 1L
  t <- vapply(seq_len(reps), function(i) {
    s <- proc.time()[["elapsed"]]
    for (q in seq_len(batch)) out <<- f()
    (proc.time()[["elapsed"]] - s) / batch
  }, 0)
  list(seconds = stats::median(t), value = out)
}

rows <- list()
add <- function(case, seconds, diff = NA_real_, note = "") {
  rows[[length(rows) + 1L]] <<- data.frame(case = case, gk_s = seconds, diff = diff,
                                           gk_note = note, stringsAsFactors = FALSE)
  cat(sprintf("%-24s gpukernels %10.4g s  diff %s\n", case, seconds, format(diff, digits = 3)))
}
rel_diff <- function(mine, theirs) {
  if (is.null(theirs) || length(theirs) != length(mine)) return(NA_real_)
  max(abs(mine - theirs)) / max(abs(theirs), .Machine$double.xmin)
}
gpu <- gk_has_gpu()
if (!gpu) cat("gpukernels sees no GPU: its GPU cases are skipped\n")

if ("keops" %in% parts && gpu) {
  x <- load_array("x")
  y <- load_array("y")
  b <- load_array("b")
  kern <- gk_kernel("gaussian", range = RANGE)
  formula_gauss <- gk_formula(exp(-sqdist(x, y) / (2 * r^2)), r = RANGE)
  for (prec in c("single", "double")) for (size in c(1e6, 1e4)) {
    case <- sprintf("gauss_%s_%s", if (prec == "single") "f32" else "f64",
                    if (size == 1e6) "1e6" else "1e4")
    xs <- x[seq_len(size), ]
    ys <- y[seq_len(size), ]
    bs <- b[seq_len(size)]
    r <- timed(function() kernel_matvec(xs, ys, bs, kern, precision = prec),
               if (size == 1e6 && prec == "double") 3 else reps)
    add(case, r$seconds, rel_diff(r$value[1:1000], anchor_sample(case)))
    # the same gaussian written as a formula (issue 39); its first call compiles
    kernel_matvec(xs[1:10, ], ys[1:10, ], bs[1:10], formula_gauss, precision = prec)
    r <- timed(function() kernel_matvec(xs, ys, bs, formula_gauss, precision = prec),
               if (size == 1e6 && prec == "double") 3 else reps)
    add(paste0("formula_", case), r$seconds,
        rel_diff(r$value[1:1000], anchor_sample(paste0("formula_", case))))
  }
  # 2D scheme: y and b resident on the GPU as device matrices.
  dy <- gk_device_matrix(load_array("y_big"), precision = "single")
  db <- gk_device_matrix(matrix(load_array("b_big")), precision = "single")
  x3 <- x[1:1000, ]
  r <- timed(function() kernel_matvec(x3, dy, db, kern, precision = "single"), reps)
  add("gauss2d_f32", r$seconds, rel_diff(as.vector(r$value), anchor_sample("gauss2d_f32")),
      "y, b device matrices")
  gk_free(dy)
  gk_free(db)
  for (prec in c("single", "double")) {
    tag <- if (prec == "single") "f32" else "f64"
    xs <- x[1:1e5, ]
    ys <- y[1:1e5, ]
    r <- timed(function() kernel_reduce(xs, ys, kernel = kern, reduction = "logsumexp",
                                        precision = prec), reps)
    add(paste0("lse_", tag, "_1e5"), r$seconds,
        rel_diff(r$value[1:1000], anchor_sample(paste0("lse_", tag, "_1e5"))))
  }
}

# knn at N = M = 1e5 for k = 1, 10, 32, 100 (part "keops", or "knn" alone).
if (any(c("keops", "knn") %in% parts) && gpu) {
  x <- load_array("x")
  y <- load_array("y")
  xs <- x[1:1e5, ]
  ys <- y[1:1e5, ]
  for (prec in c("single", "double")) for (k in c(1L, 10L, 32L, 100L)) {
    tag <- if (prec == "single") "f32" else "f64"
    case <- if (k == 10) paste0("knn_", tag, "_1e5") else sprintf("knn_k%d_%s_1e5", k, tag)
    r <- timed(function() knn(xs, ys, k = k, precision = prec), reps)
    # Compare the anchor's neighbours through exact distances (ties may pick
    # other indices): the largest difference of the neighbours' distances,
    # first 100 rows.
    theirs <- anchor_sample(case)
    diff <- NA_real_
    if (length(theirs) == 100 * k) {
      theirs <- matrix(theirs, 100, k)
      dist_of <- function(idx) sqrt(rowSums((xs[rep(1:100, k), ] - ys[as.vector(idx), ])^2))
      diff <- max(abs(dist_of(r$value$index[1:100, , drop = FALSE]) - dist_of(theirs)))
    }
    add(case, r$seconds, diff, sprintf("k = %d", k))
  }
}

if ("masspcf" %in% parts) {
  counts <- load_array("pcf_counts")
  tt <- load_array("pcf_t")
  vv <- load_array("pcf_v")
  ends <- cumsum(as.numeric(counts))
  starts <- ends - counts + 1
  X <- lapply(seq_along(counts), function(i) {
    s <- starts[i]:ends[i]
    cbind(t = tt[s], v = vv[s])
  })
  warm <- X[1:10]
  row0 <- function(d, n) c(0, as.vector(d)[seq_len(min(n, 200) - 1)])   # d(1, j), j = 1..200
  preps <- min(reps, 3L)
  if (gpu) {
    r <- timed(function() pcf_pdist(X, p = 1, precision = "single", backend = "gpu"), preps,
               function() pcf_pdist(warm, precision = "single", backend = "gpu"))
    add("pdist_l1_f32_5e4", r$seconds, rel_diff(row0(r$value, 5e4), anchor_sample("pdist_l1_f32_5e4")))
    X2 <- X[1:2e4]
    r <- timed(function() pcf_pdist(X2, p = 1, precision = "double", backend = "gpu"), preps,
               function() pcf_pdist(warm, backend = "gpu"))
    add("pdist_l1_f64_2e4", r$seconds, rel_diff(row0(r$value, 2e4), anchor_sample("pdist_l1_f64_2e4")))
    r <- timed(function() pcf_kernel(X2, precision = "single", backend = "gpu"), preps,
               function() pcf_kernel(warm, precision = "single", backend = "gpu"))
    add("l2_kernel_f32_2e4", r$seconds,
        rel_diff(r$value[1, 1:200], anchor_sample("l2_kernel_f32_2e4")))
    rm(X2)
  }
  X5 <- X[1:5e3]
  r <- timed(function() pcf_pdist(X5, p = 1, backend = "cpu"), preps,
             function() pcf_pdist(warm, backend = "cpu"))
  add("pdist_cpu_f32_5e3", r$seconds, rel_diff(row0(r$value, 5e3), anchor_sample("pdist_cpu_f32_5e3")),
      sprintf("CPU (double), %d threads", parallel::detectCores()))
}

# ---- the merged table
gk <- if (length(rows)) do.call(rbind, rows) else
  data.frame(case = character(), gk_s = numeric(), diff = numeric(), gk_note = character())
times_path <- file.path(dir, "anchor_times.tsv")
an <- if (file.exists(times_path)) utils::read.delim(times_path, stringsAsFactors = FALSE,
                                                     na.strings = "NA") else
  data.frame(case = character(), anchor = character(), seconds = numeric(), note = character())
tab <- merge(an, gk, by = "case", all = TRUE)
tab$ratio <- tab$seconds / tab$gk_s
fmt_s <- function(s) ifelse(is.na(s), "-", ifelse(s < 0.1, sprintf("%.3g ms", 1e3 * s),
                                                  sprintf("%.3g s", s)))
notes <- trimws(paste(ifelse(is.na(tab$note), "", tab$note), ifelse(is.na(tab$gk_note), "", tab$gk_note)))
lines <- c(sprintf("Side by side, %s, gpukernels %s, %s", format(Sys.time(), "%Y-%m-%d %H:%M"),
                   utils::packageVersion("gpukernels"),
                   if (gpu) gk_info()$devices$name[1] else "no GPU"),
           "",
           "| case | anchor | anchor time | gpukernels time | ratio (anchor / gk) | max diff | notes |",
           "|---|---|---|---|---|---|---|",
           sprintf("| %s | %s | %s | %s | %s | %s | %s |", tab$case,
                   ifelse(is.na(tab$anchor), "-", tab$anchor), fmt_s(tab$seconds), fmt_s(tab$gk_s),
                   ifelse(is.na(tab$ratio), "-", sprintf("%.2f", tab$ratio)),
                   ifelse(is.na(tab$diff), "-", format(tab$diff, digits = 2)), notes))
writeLines(lines)
writeLines(lines, file.path(dir, "table.md"))
