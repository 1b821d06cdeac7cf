/* Glue shared by the PCF .Call files: r_pcf.c (matrices, knn) and
 * r_pcf_workers.c (future workers' bands in shared memory). */
#ifndef GK_R_PCF_H
#define GK_R_PCF_H

#include "r_util.h"
#include "r_pcf_flat.h"
#include "pcf/pcf.h"

/* Warns when float cannot keep a set's breakpoints apart: intervals vanish
 * and the results are not those of the functions given. */
void gk_pcf_warn_float_grid(const gk_pcf_flat *fs, const char *arg);

/* The engines' options from the R arguments. */
pcf_options gk_pcf_options_from_r(SEXP single, SEXP threads, SEXP budget, SEXP devices,
                                  SEXP progress);

/* The engines' checks of x and y (fy NULL: none), from the verdicts of the
 * flattening copy. */
gk_status gk_pcf_check_flat(const pcf_op *op, int single, const gk_pcf_flat *fx,
                            const gk_pcf_flat *fy, gk_error *err);

/* Flattens and checks x (and y unless NULL), running `during` meanwhile (see
 * gk_pcf_flatten; its value is returned); *yp is x's set when y is NULL. */
SEXP gk_pcf_sets_from_r(SEXP x, SEXP y, const pcf_op *op, int single, gk_pcf_flat *fx,
                        gk_pcf_flat *fy, const pcf_set **yp, SEXP (*during)(void *), void *data);

/* The checks before a split call (r_pcf.c), as .Call-ed: R_NilValue. */
SEXP gk_r_pcf_check(SEXP x, SEXP y, SEXP kind, SEXP p, SEXP single, SEXP warn, SEXP table);

/* The plans of x (plans[0]) and y (plans[1]; no functions where there is
 * none) in a table made by gk_r_pcf_table. */
void gk_pcf_plans_of_table(SEXP table, gk_pcf_plan plans[2]);

/* The CPU or GPU engine, as `backend` says. */
void gk_pcf_run_engine(SEXP backend, const pcf_op *op, const pcf_set *xs, const pcf_set *yp,
                       const gk_block_writer *writer, const pcf_options *opt, gk_error *err);

/* The operation of an R `kind` ("pdist", "cdist", "kernel", "kernel_sym") and `p`. */
pcf_op gk_pcf_op_of(SEXP kind, SEXP p);

/* The entries an R `kind` computes: a `dist` ("pdist"), a symmetric matrix
 * ("kernel_sym") or a dense one ("cdist", "kernel"). */
gk_write_kind gk_pcf_write_kind_of(SEXP kind);

/* Which pages of its file a call makes before its engine writes: none, the
 * pages it fills (gk_file_populate), or its band's share of the whole file
 * (gk_file_populate_share: for workers of one machine writing at once). */
enum { GK_FILE_PAGES_NONE = 0, GK_FILE_PAGES_WRITTEN = 1, GK_FILE_PAGES_SHARE = 2 };

/* Where a call's results go in a file's matrix (pcf_dist_file(); the R
 * list(path, float, layout, n_rows, bytes, row0, col0, sync, populate)): at
 * (row0, col0) of an n_rows-row column-major matrix of float or double of
 * `layout` (a symmetric one mirrored too), in the first `bytes` of the file;
 * `populate`: the pages made first (GK_FILE_PAGES_*); `sync`: written to
 * disk before the call returns (another machine's file). */
typedef struct {
  const char *path;   /* R's string: valid while the list is */
  int is_float, sync, populate;
  gk_write_kind layout;
  size_t n_rows, bytes, row0, col0;
} gk_pcf_file_target;

/* Reads the R list; an R error when it is not one. Before anything is held. */
gk_pcf_file_target gk_pcf_file_target_of(SEXP file);

/* The engine run with its blocks written straight into the file, mapped. */
void gk_pcf_run_into_file(const gk_pcf_file_target *t, gk_write_kind write_kind, SEXP backend,
                          const pcf_op *op, const pcf_set *xs, const pcf_set *ys,
                          const pcf_options *opt, gk_error *err);

#endif
