# A formula made ready for the engines: its body for points of a given
# dimension (F itself, F with x and y swapped, or a derivative), compiled for
# the CPU by R's C compiler or handed to the GPU engine's NVRTC, and its
# parameter values (the user's, then the derived ones) for this call.

gk_state$formulas <- list()       # prepared bodies, by formula, dimension and variant
gk_state$formula_dlls <- list()   # loaded CPU libraries, by function name
gk_state$formula_last <- new.env(hash = TRUE, parent = emptyenv())   # by formula: its last one-step call

# What kernel_reduce() passes to C for a formula (src/r_formula.c): list(functor,
# source, cpu, params, dim, scale) of class gk_formula_native. `swap`: F(y, x)
# (the transposed reduction); `wrt`: the derivative with respect to a
# coordinate symbol ("x2") or a parameter. `fold`: the caller's engine scales
# (and may shift) the points by `scale` when it is given (the reductions, not
# the kernel matrix or the GP's own C): a formula of one squared distance
# then drops its multiply per pair (formula_fold.R). The bodies are made
# once per formula (f$key), dimension and variant; the parameters are
# computed per call, and kept for the next call with the same values.
gk_formula_native <- function(f, dim, backend, precision = "double", swap = FALSE, wrt = NULL,
                              fold = FALSE) {
  key <- paste(f$key, dim, swap, wrt)
  prep <- gk_state$formulas[[key]]
  unit <- if (backend == "gpu" && precision == "double") 64 else 1
  params <- unlist(f$params)
  # the last call's native form, when its parameters were these
  call_key <- paste(backend, unit, fold, sep = "/")
  last <- prep$calls[[call_key]]
  if (!is.null(last) && identical(last$given, params)) return(last$native)
  if (is.null(prep)) {
    e <- gk_formula_expand(f, dim)
    if (!is.null(wrt)) e <- gk_formula_deriv(e, wrt)
    if (swap) e <- gk_formula_swap(e, dim)
    opt <- gk_formula_optimize(e)
    prep <- list(plain = opt, fold = gk_formula_fold(opt), bodies = list(), calls = list())
  }
  last <- gk_formula_call(prep, f, params, unit, fold && !is.null(prep$fold))
  body <- prep$bodies[[last$variant]]
  if (is.null(body)) {
    body <- gk_formula_body(if (last$variant == "plain") prep$plain else prep$fold[[last$variant]],
                            names(f$params), dim)
  }
  if (backend == "cpu" && is.null(body$cpu)) body$cpu <- gk_formula_compile_cpu(body$name, body$src$cpu)
  prep$bodies[[last$variant]] <- body
  last$native <- structure(list(functor = paste0("gkformula::", body$name),
                                source = if (backend == "gpu") body$src$gpu,
                                cpu = if (backend == "cpu") body$cpu, params = last$values,
                                dim = as.integer(dim), scale = last$scale),
                           class = "gk_formula_native")
  prep$calls[[call_key]] <- last
  gk_state$formulas[[key]] <- prep
  last$native
}

# A formula prepared for kernel_reduce()'s one-step path (gk_r_reduce_plain),
# or NULL when the arguments are not as that path takes them (a precision or
# axis to check, points that are not doubles): the general path then checks
# them and prepares the formula itself. The formula's last form is kept with
# the arguments it was made for, so that a repeated small call pays
# microseconds here.
gk_formula_plain <- function(f, y, axis, backend, precision) {
  call <- list(NCOL(y), axis, backend, precision, f$params, f$wrt)
  last <- gk_state$formula_last[[f$key]]
  if (identical(last$call, call)) return(last$native)
  if (!is.double(y) || !(identical(precision, "double") || identical(precision, "single")) ||
      !(identical(axis, 1L) || identical(axis, 1) || identical(axis, 2L) || identical(axis, 2))) {
    return(NULL)
  }
  native <- gk_formula_native(f, NCOL(y), backend, precision, swap = axis == 2, wrt = f$wrt,
                              fold = TRUE)
  gk_state$formula_last[[f$key]] <- list(call = call, native = native)
  native
}

# The variant ("plain", or folded "neg" or "pos"), the scale of the points
# (NULL: as given) and the parameter values (the user's, then the derived
# ones) of a call with the user's values `params` and the engine's `unit`.
gk_formula_call <- function(prep, f, params, unit, fold) {
  if (anyNA(params)) {
    stop("gk_formula: parameter `", names(f$params)[is.na(params)][1L], "` has no value (NA)",
         call. = FALSE)
  }
  env <- gk_formula_eval_env(f$params, unit)
  values <- function(opt) {
    derived <- vapply(opt$derived, function(d) as.double(eval(d, env)), 0)
    list(values = c(as.double(params), derived), bad = opt$derived[!is.finite(derived)])
  }
  if (fold) {
    q <- as.double(eval(prep$fold$anchor, env))
    scale <- as.double(eval(prep$fold$scale, env))
    if (is.finite(q) && q != 0 && is.finite(scale) && scale > 1e-150 && scale < 1e150) {
      variant <- if (q < 0) "neg" else "pos"
      v <- values(prep$fold[[variant]])
      if (!length(v$bad)) {
        return(list(given = params, variant = variant, scale = scale, values = v$values))
      }
    }
  }
  v <- values(prep$plain)
  if (length(v$bad)) {
    stop("gk_formula: at these parameters `", paste(deparse(v$bad[[1L]]), collapse = " "),
         "` is not finite", call. = FALSE)
  }
  list(given = params, variant = "plain", scale = NULL, values = v$values)
}

# The C function and GPU functor of an optimized body, named by the body and
# the helpers it calls (a new version of the package compiles its own): two
# formulas with the same body share one library and one GPU kernel.
gk_formula_body <- function(opt, pnames, dim) {
  code <- gk_formula_code(opt, pnames, dim)
  if (code$nparams > 32L) {
    stop("gk_formula: the formula needs ", code$nparams, " parameters with those it derives ",
         "(at most 32): write fewer distinct expressions of parameters alone", call. = FALSE)
  }
  name <- paste0("gkf_", .Call(gk_r_formula_hash, paste(c(gk_formula_salt(), dim, code$lines,
                                                           code$result), collapse = "\n")))
  list(name = name, src = gk_formula_sources(code, name), cpu = NULL)
}

gk_formula_salt <- function() {
  if (is.null(gk_state$formula_salt)) {
    inc <- system.file("include", "gpukernels", package = "gpukernels")
    files <- file.path(inc, c("gk_formula.h", "gk_kernel.h"))
    gk_state$formula_salt <- c(as.character(utils::packageVersion("gpukernels")),
                               vapply(files, function(f) readChar(f, file.size(f), useBytes = TRUE), ""))
  }
  gk_state$formula_salt
}

# Where compiled CPU formulas are kept: the kernel cache's directory
# (?gk_cache_info), else this session's temporary directory.
gk_formula_dir <- function() {
  dir <- gk_cache_dir()
  dir <- if (nzchar(dir)) file.path(dir, "formulas") else file.path(tempdir(), "gpukernels-formulas")
  dir.create(dir, recursive = TRUE, showWarnings = FALSE)
  dir
}

# The C function `name` of `src`, compiled with R CMD SHLIB (once: the
# library is kept in gk_formula_dir() and loaded from there by later
# sessions) and loaded; its address (a NativeSymbol).
gk_formula_compile_cpu <- function(name, src) {
  dll <- gk_state$formula_dlls[[name]]
  if (is.null(dll)) {
    dir <- gk_formula_dir()
    so <- file.path(dir, paste0(name, .Platform$dynlib.ext))
    # The source is in the file, and checked: a library from another
    # version of the translator is compiled again.
    c_file <- file.path(dir, paste0(name, ".c"))
    fresh <- file.exists(so) && file.exists(c_file) &&
      identical(paste(readLines(c_file, warn = FALSE), collapse = "\n"), src)
    if (!fresh) gk_formula_shlib(name, src, so)
    dll <- tryCatch(dyn.load(so), error = function(e) {
      stop("gk_formula: could not load the compiled formula ", so, ": ", conditionMessage(e),
           call. = FALSE)
    })
    gk_state$formula_dlls[[name]] <- dll
  }
  getNativeSymbolInfo(name, dll)$address
}

gk_formula_shlib <- function(name, src, so) {
  work <- tempfile("gkformula")
  dir.create(work)
  on.exit(unlink(work, recursive = TRUE), add = TRUE)
  writeLines(src, file.path(work, paste0(name, ".c")))
  inc <- system.file("include", package = "gpukernels")
  owd <- setwd(work)
  on.exit(setwd(owd), add = TRUE, after = FALSE)
  out <- suppressWarnings(tryCatch(
    system2(file.path(R.home("bin"), "R"),
            c("CMD", "SHLIB", "-o", paste0(name, .Platform$dynlib.ext), paste0(name, ".c")),
            stdout = TRUE, stderr = TRUE,
            env = paste0("PKG_CPPFLAGS=", shQuote(paste0("-I", inc)))),
    error = function(e) structure(conditionMessage(e), status = 127L)))
  built <- file.path(work, paste0(name, .Platform$dynlib.ext))
  status <- attr(out, "status")
  if ((!is.null(status) && status != 0L) || !file.exists(built)) {
    stop("gk_formula: compiling the formula for the CPU failed (backend = \"cpu\" compiles ",
         "formulas with R's C compiler, `R CMD SHLIB`: is one installed?):\n",
         paste(utils::tail(out, 25L), collapse = "\n"), call. = FALSE)
  }
  # Into place by renames, so that sessions sharing the directory see a
  # whole library or none.
  dir <- dirname(so)
  tmp <- tempfile(name, tmpdir = dir, fileext = .Platform$dynlib.ext)
  if (!file.copy(built, tmp)) {
    stop("gk_formula: could not write the compiled formula to ", dir, call. = FALSE)
  }
  file.rename(tmp, so)
  tmp_c <- tempfile(name, tmpdir = dir, fileext = ".c.tmp")
  writeLines(src, tmp_c)
  file.rename(tmp_c, file.path(dir, paste0(name, ".c")))
  invisible(so)
}

# Compiles a formula's GPU kernels for compute capability `arch` (e.g. 90)
# without a GPU, keeping nothing: a check that the translation compiles under
# NVRTC (the tests run it where there is no GPU). Needs a CUDA build.
gk_formula_gpu_check <- function(f, dim, arch = 90L, reduction = "sum", k = 1L,
                                 single = FALSE, swap = FALSE, wrt = NULL, fold = FALSE) {
  native <- gk_formula_native(f, dim, "gpu", if (single) "single" else "double", swap = swap,
                              wrt = wrt, fold = fold)
  .Call(gk_r_formula_gpu_check, native, as.integer(dim), as.integer(arch),
        gk_reductions[[reduction]], as.integer(k), single)
  invisible(TRUE)
}
