# The integer codes the C engines take (reductions, GPU methods, kernel
# families, block writers), named. They are made from the C enums when the
# package loads (gk_r_codes, src/r_codes.c), so a code is written once, in C;
# these NULLs only declare the names.
gk_reductions <- NULL
gk_reduction_names <- NULL
gk_reduce_methods <- NULL
gk_reduce_method_names <- NULL
gk_kernel_families <- NULL
# The range derivatives of the families that have one (gp_dlogrange_kernel()).
gk_kernel_dlogrange_families <- NULL
# How gk_r_block_write() places a block (block_writer.h).
gk_write_kinds <- NULL

gk_codes_setup <- function(ns = environment(gk_codes_setup)) {
  codes <- .Call(gk_r_codes)
  assign("gk_reductions", codes$reductions, envir = ns)
  assign("gk_reduction_names", names(codes$reductions), envir = ns)
  assign("gk_reduce_methods", codes$reduce_methods, envir = ns)
  assign("gk_reduce_method_names", names(codes$reduce_methods), envir = ns)
  assign("gk_kernel_families", codes$kernel_families, envir = ns)
  assign("gk_kernel_dlogrange_families", codes$kernel_dlogrange_families, envir = ns)
  assign("gk_write_kinds", codes$write_kinds, envir = ns)
  invisible(codes)
}
