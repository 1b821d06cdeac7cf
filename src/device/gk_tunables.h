/*
 * The package's tunables: every setting read from the environment, in one
 * table (gk_tunables.c) that gk_info() lists. Each has a name (its
 * environment variable), a default, the range of values it accepts and a
 * one-line description. A core asks gk_tunable() where it needs the value;
 * the environment is read at each call, so a test can set a variable with
 * Sys.setenv() in a running session. A value that is not a number within
 * the tunable's range is ignored (the default applies; gk_info() says so).
 *
 * Only settings with a use beyond one measurement belong here: a size that
 * trades speed for memory, or one that tests turn down so that small inputs
 * exercise a path (chunks, slices, passes) that large ones take.
 */
#ifndef GK_TUNABLES_H
#define GK_TUNABLES_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  GK_TUNE_REDUCE_ROWS,            /* GK_REDUCE_ROWS */
  GK_TUNE_REDUCE_SLICE_PAIRS,     /* GK_REDUCE_SLICE_PAIRS */
  GK_TUNE_KMIN_LARGE_ELEMENTS,    /* GK_KMIN_LARGE_ELEMENTS */
  GK_TUNE_PCF_SHARED_BYTES,       /* GK_PCF_SHARED_BYTES */
  GK_TUNE_H2_PROJECT_CHUNK_MB,    /* GK_H2_PROJECT_CHUNK_MB */
  GK_TUNE_H2_STACK_QR_MAX_RANK,   /* GK_H2_STACK_QR_MAX_RANK */
  GK_TUNE_H2_STACK_PIECES,        /* GK_H2_STACK_PIECES */
  GK_TUNE_CHANNEL_WRITERS,        /* GK_CHANNEL_WRITERS */
  GK_TUNE_REDUCE_MIN_BLOCKS,      /* GK_REDUCE_MIN_BLOCKS */
  GK_TUNE_REDUCE_FLOAT_FILTER,    /* GK_REDUCE_FLOAT_FILTER */
  GK_TUNE_FILE_ALLOCATE,          /* GK_FILE_ALLOCATE */
  GK_TUNE_RESULT_HUGE_PAGES,      /* GK_RESULT_HUGE_PAGES */
  GK_TUNE_CHANNEL_DIRECT,         /* GK_CHANNEL_DIRECT */
  GK_TUNE_FILE_POPULATE,          /* GK_FILE_POPULATE */
  GK_TUNE_PCF_BAND_SLOTS,         /* GK_PCF_BAND_SLOTS */
  GK_TUNE_PIPELINE_DEPTH,         /* GK_PIPELINE_DEPTH */
  GK_TUNE_CHANNEL_HANDOVER,       /* GK_CHANNEL_HANDOVER */
  GK_TUNE_COUNT
} gk_tunable_id;

/* The environment variable's value if it is set and valid, else the default. */
double gk_tunable(gk_tunable_id id);
/* Whether its environment variable is set (to a non-empty value, valid or
 * not), and whether it is set to a value the tunable accepts. */
int gk_tunable_is_set(gk_tunable_id id);
int gk_tunable_is_valid(gk_tunable_id id);
/* Its environment variable, e.g. "GK_REDUCE_ROWS". */
const char *gk_tunable_name(gk_tunable_id id);
/* One line: what it sets, its unit and the values it accepts. */
const char *gk_tunable_doc(gk_tunable_id id);
double gk_tunable_default(gk_tunable_id id);

#ifdef __cplusplus
}
#endif
#endif
