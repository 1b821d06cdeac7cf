# Names retired by the API review before 1.0 (issue 35; NEWS.md has the
# table). Each keeps working for one release with one warning per call that
# names every old argument used and its replacement.

# Warns once for the old argument names `old` (given in this call) of `fun`,
# replaced by `new`.
gk_deprecated_args <- function(fun, old, new) {
  if (!length(old)) return(invisible())
  what <- paste0("`", old, "` -> `", new, "`", collapse = ", ")
  msg <- paste0(fun, "(): deprecated since the API review (issue 35), removed in the next ",
                "release: ", what)
  warning(warningCondition(msg, class = "deprecatedWarning", call = NULL))
}

# An argument given under its new and its deprecated name.
gk_given_twice <- function(fun, new, old) {
  stop(fun, "(): give `", new, "` or the deprecated `", old, "`, not both", call. = FALSE)
}

# Moves values given under old argument names to the new ones in the caller's
# frame (`renamed`: new names named by the old ones, e.g. c(X = "x")), with
# one warning for all of them; a value under both names is an error.
gk_use_new_names <- function(fun, renamed, env = parent.frame()) {
  old <- names(renamed)[vapply(names(renamed), gk_arg_given, NA, env = env)]
  for (o in old) {
    if (gk_arg_given(renamed[[o]], env)) gk_given_twice(fun, renamed[[o]], o)
    assign(renamed[[o]], get(o, envir = env), envir = env)
  }
  gk_deprecated_args(fun, old, unname(renamed[old]))
}

# Whether argument `name` of the function whose frame is `env` was given. Not
# a closure inside gk_use_new_names: one would keep the caller's frame alive
# after it returns, and R would then copy its (possibly huge) result at the
# caller's next attr<-.
gk_arg_given <- function(name, env) !eval(call("missing", as.name(name)), env)
