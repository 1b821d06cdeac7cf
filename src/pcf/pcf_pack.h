/*
 * The packed layout the integration walks, shared by the CPU and GPU engines.
 * A function with breakpoints t_1..t_n and values v_1..v_n becomes n + 1
 * "intervals" (value, end): (0, t_1), (v_1, t_2), ..., (v_n, inf). Walking two
 * functions then needs one load per step, and the inf sentinel ends the walk
 * without bounds checks.
 */
#ifndef GK_PCF_PACK_H
#define GK_PCF_PACK_H

#include <stddef.h>
#include "pcf/pcf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 16- and 8-byte aligned so that the GPU loads one interval in one instruction. */
typedef struct __attribute__((aligned(16))) { double v, t; } pcf_interval_d;
typedef struct __attribute__((aligned(8))) { float v, t; } pcf_interval_f;

/* Intervals of functions [first, first + count) of s. */
size_t pcf_packed_size(const pcf_set *s, size_t first, size_t count);

/* Packs functions first + order[k], k < count (order NULL: first + k) into
 * `out` (float or double intervals), with offsets[0..count] counted from 0;
 * a large set on `threads` OpenMP threads (<= 0: all). */
void pcf_pack(const pcf_set *s, size_t first, const int *order, size_t count, int single,
              void *out, size_t *offsets, int threads);

#ifdef __cplusplus
}
#endif
#endif
