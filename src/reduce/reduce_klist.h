/* The k smallest values seen so far, sorted, with their indices: the list of
 * the CPU k-smallest reduction, knn's exact re-search and the GP neighbour
 * search. A new value goes after equal ones, so ties keep the index pushed
 * first; a value that is not below the k-th of a full list (NaN included) is
 * dropped, and a NaN in a list that is not full goes after its entries. */
#ifndef GK_REDUCE_KLIST_H
#define GK_REDUCE_KLIST_H

static inline void klist_push(double *val, int *idx, int *filled, int k, double v, int j)
{
  if (*filled == k && !(v < val[k - 1])) return;
  int p = *filled < k ? (*filled)++ : k - 1;
  while (p > 0 && v < val[p - 1]) {
    val[p] = val[p - 1];
    idx[p] = idx[p - 1];
    p--;
  }
  val[p] = v;
  idx[p] = j;
}

#endif
