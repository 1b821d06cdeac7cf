/*
 * Registration of every .Call entry point, grouped by engine. A CPU-only build
 * registers the same routines; GPU requests then fail with a clear error.
 * Engines add their prototypes and table rows in their own section.
 */
#define R_NO_REMAP
#include <R.h>
#include <Rinternals.h>
#include <R_ext/Rdynload.h>
#include "r_util.h"
#include "device/gk_device.h"
#include "r_shared.h"

/* device layer (r_device.c) */
SEXP gk_r_build_info(void);
SEXP gk_r_jit_configure(SEXP dir, SEXP version, SEXP names, SEXP texts);
SEXP gk_r_jit_info(void);
SEXP gk_r_jit_forget(void);
SEXP gk_r_reduce_warmup(SEXP cases, SEXP threads, SEXP check_arch);
/* users' formulas (r_formula.c) */
SEXP gk_r_formula_hash(SEXP text);
SEXP gk_r_formula_gpu_check(SEXP native, SEXP dim, SEXP arch, SEXP reduction, SEXP k, SEXP single);
SEXP gk_r_release_caches(void);
SEXP gk_r_device_info(SEXP device);
SEXP gk_r_set_device(SEXP device);
SEXP gk_r_current_device(void);
SEXP gk_r_omp_threads(void);
SEXP gk_r_tunables(void);

/* argument checks shared by the engines (r_util.c) */
SEXP gk_r_check_finite(SEXP x, SEXP arg);
SEXP gk_r_kernel_ok(SEXP spec);
SEXP gk_r_codes(void);
SEXP gk_r_knn_distances(SEXP squares, SEXP scale);
SEXP gk_r_knn_scale(SEXP x, SEXP y);
SEXP gk_r_knn_refine(SEXP x, SEXP y, SEXP index, SEXP distance);
SEXP gk_r_knn_plain(SEXP spec, SEXP methods);

/* the progress sink (r_progress.c) */
SEXP gk_r_progress_sink(SEXP fun);

/* kernel vocabulary (r_kernel.c) */
SEXP gk_r_kernel_matrix(SEXP x, SEXP y, SEXP spec, SEXP backend, SEXP threads);
SEXP gk_r_kernel_eval(SEXP spec, SEXP stat);

/* PCF engine (r_pcf.c) and the block scheduler it uses (r_blocks.c) */
SEXP gk_r_pcf_matrix(SEXP x, SEXP y, SEXP kind, SEXP p, SEXP single, SEXP backend,
                     SEXP threads, SEXP budget, SEXP devices, SEXP progress, SEXP file);
SEXP gk_r_pcf_validate(SEXP x);
SEXP gk_r_pcf_knn(SEXP x, SEXP y, SEXP k, SEXP p, SEXP single, SEXP backend, SEXP threads,
                  SEXP budget, SEXP devices, SEXP progress, SEXP column_lists);
SEXP gk_r_block_write(SEXP out, SEXP kind, SEXP n_rows, SEXP row0, SEXP col0, SEXP block,
                      SEXP triangle);
SEXP gk_r_alloc_result(SEXP length, SEXP rows);
/* memory shared with future workers (r_shared.c) */
SEXP gk_r_shared_create(SEXP bytes);
SEXP gk_r_channel_create(SEXP length, SEXP n_rows, SEXP rings);
SEXP gk_r_channel_open(SEXP handle, SEXP length, SEXP rows, SEXP layout, SEXP n_rows,
                       SEXP threads);
SEXP gk_r_channel_finish(SEXP handle);
SEXP gk_r_channel_stats(SEXP handle);
SEXP gk_r_shared_free(SEXP handle);
SEXP gk_r_pcf_share(SEXP x, SEXP y, SEXP kind, SEXP p, SEXP single);
SEXP gk_r_pcf_table(SEXP x, SEXP y);
SEXP gk_r_pcf_fetch(SEXP target, SEXP x_rows, SEXP threads);
SEXP gk_r_channel_offer(SEXP handle, SEXP input);
SEXP gk_r_channel_checked(SEXP handle);
SEXP gk_r_file_make(SEXP path, SEXP bytes);
SEXP gk_r_pcf_band(SEXP input, SEXP x_range, SEXP y_set, SEXP y_range, SEXP kind, SEXP p,
                   SEXP single, SEXP backend, SEXP threads, SEXP budget, SEXP devices,
                   SEXP progress, SEXP target, SEXP file);
SEXP gk_r_pcf_check(SEXP x, SEXP y, SEXP kind, SEXP p, SEXP single, SEXP warn, SEXP table);
SEXP gk_r_pcf_blocks_left(SEXP target);
SEXP gk_r_pcf_frames(SEXP x);
SEXP gk_r_block_plan(SEXP n_rows, SEXP n_cols, SEXP lower, SEXP max_elements,
                     SEXP split_hint, SEXP min_side, SEXP row_start, SEXP side);
SEXP gk_r_block_agree(SEXP own, SEXP max_elements, SEXP count);

/* Gaussian processes (r_gp.c) */
SEXP gk_r_gp_cg_step(SEXP x, SEXP r, SEXP p, SEXP q, SEXP active, SEXP rr, SEXP threads);
SEXP gk_r_gp_keep_preceding(SEXP cand, SEXP dist, SEXP first_row, SEXP nbr, SEXP row_of,
                            SEXP id, SEXP skip, SEXP threads);
SEXP gk_r_gp_neighbors(SEXP xo, SEXP m, SEXP gpu, SEXP threads, SEXP dense_pairs);
SEXP gk_r_gp_neighbors_start(SEXP xo, SEXP m, SEXP threads);
SEXP gk_r_gp_neighbors_join(SEXP handle, SEXP cancel);
SEXP gk_r_gp_factor(SEXP locs, SEXP nbr, SEXP spec, SEXP dspec, SEXP nugget, SEXP rows,
                    SEXP threads, SEXP gpu, SEXP keep);
SEXP gk_r_gp_factor_host(SEXP coef);
SEXP gk_r_gp_factor_free(SEXP coef);
SEXP gk_r_gp_vecchia_lik(SEXP locs, SEXP nbr, SEXP spec, SEXP nugget, SEXP r, SEXP terms,
                         SEXP want_info, SEXP threads);
SEXP gk_r_gp_apply(SEXP nbr, SEXP coef, SEXP x, SEXP transpose, SEXP threads);
SEXP gk_r_gp_solve(SEXP nbr, SEXP coef, SEXP x, SEXP threads);
SEXP gk_r_gp_rademacher(SEXP rows, SEXP cols, SEXP threads);
SEXP gk_r_gp_dense(SEXP locs, SEXP spec, SEXP nugget, SEXP rhs, SEXP terms, SEXP want_info);
SEXP gk_r_gp_dense_formula(SEXP locs, SEXP spec, SEXP nugget, SEXP rhs, SEXP terms,
                           SEXP want_info);
SEXP gk_r_gp_dense_krige(SEXP locs, SEXP newlocs, SEXP spec, SEXP nugget, SEXP X);
SEXP gk_r_gp_col_dots(SEXP a, SEXP ca, SEXP b, SEXP cb, SEXP threads);
SEXP gk_r_gp_block_cg_h2(SEXP sigma, SEXP nbr, SEXP coef, SEXP b, SEXP tol, SEXP maxit,
                         SEXP want);
SEXP gk_r_gp_block_cg_tiled(SEXP points, SEXP spec, SEXP nugget, SEXP nbr, SEXP coef, SEXP b,
                            SEXP tol, SEXP maxit, SEXP want);

/* H2 matrices (r_h2.c) */
SEXP gk_r_h2_build(SEXP locs, SEXP spec, SEXP nugget, SEXP leaf_size, SEXP order, SEXP eta,
                   SEXP single, SEXP backend, SEXP storage, SEXP threads, SEXP tree,
                   SEXP devices);
SEXP gk_r_h2_tree(SEXP locs, SEXP spec, SEXP leaf_size, SEXP eta, SEXP threads);
SEXP gk_r_h2_tree_free(SEXP ptr);
SEXP gk_r_h2_matmul(SEXP ptr, SEXP x);
SEXP gk_r_h2_matmul_rows(SEXP ptr, SEXP blocks, SEXP rows);
SEXP gk_r_h2_time(SEXP ptr, SEXP nrhs, SEXP reps, SEXP cublas_only);
SEXP gk_r_h2_info(SEXP ptr);
SEXP gk_r_h2_compress(SEXP ptr, SEXP tol, SEXP threads, SEXP on_gpu);
SEXP gk_r_h2_ranks(SEXP ptr);
SEXP gk_r_h2_orthogonality(SEXP ptr);
SEXP gk_r_h2_free(SEXP ptr);
SEXP gk_r_h2_svd_gpu(SEXP w, SEXP dims, SEXP single);
/* kernel reductions and device matrices (r_reduce.c) */
SEXP gk_r_reduce(SEXP spec, SEXP reductions, SEXP methods);
SEXP gk_r_reduce_plain(SEXP spec, SEXP reductions, SEXP methods);
SEXP gk_r_reduce_ranges_build(SEXP ranges_x, SEXP ranges_y, SEXP pair_x, SEXP pair_y);
SEXP gk_r_reduce_ranges_pairs(SEXP ranges);
SEXP gk_r_device_matrix(SEXP x, SEXP single, SEXP centre);
SEXP gk_r_device_matrix_download(SEXP ptr);
SEXP gk_r_device_matrix_free(SEXP ptr);
SEXP gk_r_device_matrix_centre(SEXP x);

/* memory that R can see (r_memory.c) */
SEXP gk_r_memory_held(void);
SEXP gk_r_ptr_stale(SEXP ptr);

static const R_CallMethodDef call_entries[] = {
  /* device layer */
  {"gk_r_build_info", (DL_FUNC) &gk_r_build_info, 0},
  {"gk_r_jit_configure", (DL_FUNC) &gk_r_jit_configure, 4},
  {"gk_r_jit_info", (DL_FUNC) &gk_r_jit_info, 0},
  {"gk_r_jit_forget", (DL_FUNC) &gk_r_jit_forget, 0},
  {"gk_r_reduce_warmup", (DL_FUNC) &gk_r_reduce_warmup, 3},
  {"gk_r_formula_hash", (DL_FUNC) &gk_r_formula_hash, 1},
  {"gk_r_formula_gpu_check", (DL_FUNC) &gk_r_formula_gpu_check, 6},
  {"gk_r_release_caches", (DL_FUNC) &gk_r_release_caches, 0},
  {"gk_r_device_info", (DL_FUNC) &gk_r_device_info, 1},
  {"gk_r_set_device", (DL_FUNC) &gk_r_set_device, 1},
  {"gk_r_current_device", (DL_FUNC) &gk_r_current_device, 0},
  {"gk_r_omp_threads", (DL_FUNC) &gk_r_omp_threads, 0},
  {"gk_r_tunables", (DL_FUNC) &gk_r_tunables, 0},
  {"gk_r_check_finite", (DL_FUNC) &gk_r_check_finite, 2},
  {"gk_r_kernel_ok", (DL_FUNC) &gk_r_kernel_ok, 1},
  {"gk_r_codes", (DL_FUNC) &gk_r_codes, 0},
  {"gk_r_knn_distances", (DL_FUNC) &gk_r_knn_distances, 2},
  {"gk_r_knn_scale", (DL_FUNC) &gk_r_knn_scale, 2},
  {"gk_r_knn_refine", (DL_FUNC) &gk_r_knn_refine, 4},
  {"gk_r_knn_plain", (DL_FUNC) &gk_r_knn_plain, 2},
  {"gk_r_progress_sink", (DL_FUNC) &gk_r_progress_sink, 1},
  /* kernel vocabulary */
  {"gk_r_kernel_matrix", (DL_FUNC) &gk_r_kernel_matrix, 5},
  {"gk_r_kernel_eval", (DL_FUNC) &gk_r_kernel_eval, 2},
  /* PCF engine */
  {"gk_r_pcf_matrix", (DL_FUNC) &gk_r_pcf_matrix, 11},
  {"gk_r_pcf_validate", (DL_FUNC) &gk_r_pcf_validate, 1},
  {"gk_r_pcf_knn", (DL_FUNC) &gk_r_pcf_knn, 11},
  {"gk_r_block_write", (DL_FUNC) &gk_r_block_write, 7},
  {"gk_r_alloc_result", (DL_FUNC) &gk_r_alloc_result, 2},
  {"gk_r_shared_create", (DL_FUNC) &gk_r_shared_create, 1},
  {"gk_r_channel_create", (DL_FUNC) &gk_r_channel_create, 3},
  {"gk_r_channel_open", (DL_FUNC) &gk_r_channel_open, 6},
  {"gk_r_channel_finish", (DL_FUNC) &gk_r_channel_finish, 1},
  {"gk_r_channel_stats", (DL_FUNC) &gk_r_channel_stats, 1},
  {"gk_r_shared_free", (DL_FUNC) &gk_r_shared_free, 1},
  {"gk_r_pcf_share", (DL_FUNC) &gk_r_pcf_share, 5},
  {"gk_r_pcf_table", (DL_FUNC) &gk_r_pcf_table, 2},
  {"gk_r_pcf_fetch", (DL_FUNC) &gk_r_pcf_fetch, 3},
  {"gk_r_channel_offer", (DL_FUNC) &gk_r_channel_offer, 2},
  {"gk_r_channel_checked", (DL_FUNC) &gk_r_channel_checked, 1},
  {"gk_r_file_make", (DL_FUNC) &gk_r_file_make, 2},
  {"gk_r_pcf_band", (DL_FUNC) &gk_r_pcf_band, 14},
  {"gk_r_pcf_check", (DL_FUNC) &gk_r_pcf_check, 7},
  {"gk_r_pcf_blocks_left", (DL_FUNC) &gk_r_pcf_blocks_left, 1},
  {"gk_r_pcf_frames", (DL_FUNC) &gk_r_pcf_frames, 1},
  {"gk_r_block_plan", (DL_FUNC) &gk_r_block_plan, 8},
  {"gk_r_block_agree", (DL_FUNC) &gk_r_block_agree, 3},
  /* H2 matrices */
  {"gk_r_gp_cg_step", (DL_FUNC) &gk_r_gp_cg_step, 7},
  {"gk_r_gp_keep_preceding", (DL_FUNC) &gk_r_gp_keep_preceding, 8},
  {"gk_r_gp_neighbors", (DL_FUNC) &gk_r_gp_neighbors, 5},
  {"gk_r_gp_neighbors_start", (DL_FUNC) &gk_r_gp_neighbors_start, 3},
  {"gk_r_gp_neighbors_join", (DL_FUNC) &gk_r_gp_neighbors_join, 2},
  {"gk_r_gp_factor", (DL_FUNC) &gk_r_gp_factor, 9},
  {"gk_r_gp_factor_host", (DL_FUNC) &gk_r_gp_factor_host, 1},
  {"gk_r_gp_factor_free", (DL_FUNC) &gk_r_gp_factor_free, 1},
  {"gk_r_gp_vecchia_lik", (DL_FUNC) &gk_r_gp_vecchia_lik, 8},
  {"gk_r_gp_apply", (DL_FUNC) &gk_r_gp_apply, 5},
  {"gk_r_gp_solve", (DL_FUNC) &gk_r_gp_solve, 4},
  {"gk_r_gp_rademacher", (DL_FUNC) &gk_r_gp_rademacher, 3},
  {"gk_r_gp_dense", (DL_FUNC) &gk_r_gp_dense, 6},
  {"gk_r_gp_dense_formula", (DL_FUNC) &gk_r_gp_dense_formula, 6},
  {"gk_r_gp_dense_krige", (DL_FUNC) &gk_r_gp_dense_krige, 5},
  {"gk_r_gp_col_dots", (DL_FUNC) &gk_r_gp_col_dots, 5},
  {"gk_r_gp_block_cg_h2", (DL_FUNC) &gk_r_gp_block_cg_h2, 7},
  {"gk_r_gp_block_cg_tiled", (DL_FUNC) &gk_r_gp_block_cg_tiled, 9},
  {"gk_r_h2_build", (DL_FUNC) &gk_r_h2_build, 12},
  {"gk_r_h2_tree", (DL_FUNC) &gk_r_h2_tree, 5},
  {"gk_r_h2_tree_free", (DL_FUNC) &gk_r_h2_tree_free, 1},
  {"gk_r_h2_matmul", (DL_FUNC) &gk_r_h2_matmul, 2},
  {"gk_r_h2_matmul_rows", (DL_FUNC) &gk_r_h2_matmul_rows, 3},
  {"gk_r_h2_time", (DL_FUNC) &gk_r_h2_time, 4},
  {"gk_r_h2_info", (DL_FUNC) &gk_r_h2_info, 1},
  {"gk_r_h2_compress", (DL_FUNC) &gk_r_h2_compress, 4},
  {"gk_r_h2_ranks", (DL_FUNC) &gk_r_h2_ranks, 1},
  {"gk_r_h2_orthogonality", (DL_FUNC) &gk_r_h2_orthogonality, 1},
  {"gk_r_h2_free", (DL_FUNC) &gk_r_h2_free, 1},
  {"gk_r_h2_svd_gpu", (DL_FUNC) &gk_r_h2_svd_gpu, 3},
  /* kernel reductions */
  {"gk_r_reduce", (DL_FUNC) &gk_r_reduce, 3},
  {"gk_r_reduce_plain", (DL_FUNC) &gk_r_reduce_plain, 3},
  {"gk_r_reduce_ranges_build", (DL_FUNC) &gk_r_reduce_ranges_build, 4},
  {"gk_r_reduce_ranges_pairs", (DL_FUNC) &gk_r_reduce_ranges_pairs, 1},
  {"gk_r_device_matrix", (DL_FUNC) &gk_r_device_matrix, 3},
  {"gk_r_device_matrix_download", (DL_FUNC) &gk_r_device_matrix_download, 1},
  {"gk_r_device_matrix_free", (DL_FUNC) &gk_r_device_matrix_free, 1},
  {"gk_r_device_matrix_centre", (DL_FUNC) &gk_r_device_matrix_centre, 1},
  /* memory that R can see */
  {"gk_r_memory_held", (DL_FUNC) &gk_r_memory_held, 0},
  {"gk_r_ptr_stale", (DL_FUNC) &gk_r_ptr_stale, 1},
  {NULL, NULL, 0}
};

void R_init_gpukernels(DllInfo *dll)
{
  R_registerRoutines(dll, NULL, call_entries, NULL, NULL);
  R_useDynamicSymbols(dll, FALSE);
  gk_install_r_hooks();
}

void R_unload_gpukernels(DllInfo *dll)
{
  (void) dll;
  gk_r_release_caches();
}
