# The integer codes the C engines take (reductions, GPU methods, kernel
# families, block writers), named, and the memory budget's share. They are
# made from the C definitions when the package loads (gk_r_codes,
# src/r_codes.c), so each is written once, in C; these NULLs only declare the
# names.
gk_reductions <- NULL
gk_reduction_names <- NULL
gk_reduce_methods <- NULL
gk_reduce_method_names <- NULL
gk_kernel_families <- NULL
# The range derivatives of the families that have one (gp_dlogrange_kernel()).
gk_kernel_dlogrange_families <- NULL
# How gk_r_block_write() places a block (block_writer.h).
gk_write_kinds <- NULL
# Which pages of its file a PCF file call makes first (r_pcf.h).
gk_file_pages <- NULL
# The share of a GPU's free memory an engine may use (GK_MEMORY_BUDGET_FRACTION).
gk_memory_budget_fraction <- NULL

gk_codes_setup <- function(ns = environment(gk_codes_setup)) {
  codes <- .Call(gk_r_codes)
  assign("gk_reductions", codes$reductions, envir = ns)
  assign("gk_reduction_names", names(codes$reductions), envir = ns)
  assign("gk_reduce_methods", codes$reduce_methods, envir = ns)
  assign("gk_reduce_method_names", names(codes$reduce_methods), envir = ns)
  assign("gk_kernel_families", codes$kernel_families, envir = ns)
  assign("gk_kernel_dlogrange_families", codes$kernel_dlogrange_families, envir = ns)
  assign("gk_write_kinds", codes$write_kinds, envir = ns)
  assign("gk_memory_budget_fraction", codes$memory_budget_fraction, envir = ns)
  assign("gk_file_pages", codes$file_pages, envir = ns)
  invisible(codes)
}
