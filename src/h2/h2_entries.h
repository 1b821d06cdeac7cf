/*
 * The entries of the H2 data (leaf bases U, transfers E, couplings S, dense
 * blocks D) as GK_HD functions of the flattened structure, so that the CPU
 * build loops and the GPU build kernels compute identical numbers. All
 * arrays are the h2_tree's (or their device copies); `nn` is the number of
 * nodes (the stride of center/half), `rows` = n_leaves * leaf_size (the
 * stride of leaf_points).
 */
#ifndef GK_H2_ENTRIES_H
#define GK_H2_ENTRIES_H

#include "h2/h2.h"
#include "h2/h2_cheb.h"

typedef struct {
  h2_cheb cheb;
  int dim, order, rank, leaf_size, n_nodes, leaf_base;  /* leaf_base = level_ptr[depth] */
  size_t rows;
  double nugget;
  gk_kernel kernel;
  const double *center, *half, *leaf_points;
  const int *leaf_count;
} h2_geometry;

static inline h2_geometry h2_geometry_of(const h2_tree *t, const double *center,
                                         const double *half, const double *leaf_points,
                                         const int *leaf_count)
{
  h2_geometry g;
  g.cheb = h2_cheb_make(t->order);
  g.dim = t->dim;
  g.order = t->order;
  g.rank = t->rank;
  g.leaf_size = t->leaf_size;
  g.n_nodes = t->n_nodes;
  g.leaf_base = t->level_ptr[t->depth];
  g.rows = (size_t) t->n_leaves * t->leaf_size;
  g.nugget = t->nugget;
  g.kernel = t->kernel;
  g.center = center;
  g.half = half;
  g.leaf_points = leaf_points;
  g.leaf_count = leaf_count;
  return g;
}

GK_HD void h2_slot_point(const h2_geometry *g, size_t slot, double *x)
{
  for (int d = 0; d < g->dim; d++) x[d] = g->leaf_points[slot + d * g->rows];
}

/* U of leaf i, row r, column a; zero on padding rows. */
GK_HD double h2_basis_entry(const h2_geometry *g, int leaf, int r, int a)
{
  if (r >= g->leaf_count[leaf]) return 0.0;
  double x[H2_MAX_DIM];
  h2_slot_point(g, (size_t) leaf * g->leaf_size + r, x);
  int v = g->leaf_base + leaf;
  return h2_box_basis(&g->cheb, a, g->dim, g->center + v, g->half + v, g->n_nodes, x);
}

/* E of node c (not the root): parent's basis b at the child's node a. */
GK_HD double h2_transfer_entry(const h2_geometry *g, int c, int a, int b)
{
  double x[H2_MAX_DIM];
  int p = (c - 1) / 2;
  h2_box_node(&g->cheb, a, g->dim, g->center + c, g->half + c, g->n_nodes, x);
  return h2_box_basis(&g->cheb, b, g->dim, g->center + p, g->half + p, g->n_nodes, x);
}

/* S of the block (node i, node j): the kernel at their interpolation nodes. */
GK_HD double h2_coupling_entry(const h2_geometry *g, int i, int j, int a, int b)
{
  double x[H2_MAX_DIM], y[H2_MAX_DIM];
  h2_box_node(&g->cheb, a, g->dim, g->center + i, g->half + i, g->n_nodes, x);
  h2_box_node(&g->cheb, b, g->dim, g->center + j, g->half + j, g->n_nodes, y);
  return gk_kernel_eval(&g->kernel, h2_dist2(x, y, g->dim));
}

/* D of the leaf block (i, j) at rows r, s: the kernel (plus the nugget on the
 * diagonal); zero on padding. */
GK_HD double h2_dense_entry(const h2_geometry *g, int i, int j, int r, int s)
{
  if (r >= g->leaf_count[i] || s >= g->leaf_count[j]) return 0.0;
  double x[H2_MAX_DIM], y[H2_MAX_DIM];
  h2_slot_point(g, (size_t) i * g->leaf_size + r, x);
  h2_slot_point(g, (size_t) j * g->leaf_size + s, y);
  double v = gk_kernel_eval(&g->kernel, h2_dist2(x, y, g->dim));
  return (i == j && r == s) ? v + g->nugget : v;
}

#endif
