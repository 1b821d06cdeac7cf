/* The table of tunables (gk_tunables.h). */
#include <math.h>
#include <stdlib.h>
#include "device/gk_tunables.h"

typedef struct {
  const char *name;
  double fallback;        /* the default */
  double lo, hi;          /* accepted values: integers in [lo, hi] ... */
  int powers_of_two;      /* ... that are 0 or a power of two, when set */
  const char *doc;
} tunable;

/* In the order of gk_tunable_id. */
static const tunable table[GK_TUNE_COUNT] = {
  {"GK_REDUCE_ROWS", 0, 0, 4, 1,
   "Rows per thread of the GPU gaussian-sum and squared-distance minimum (knn k = 1) fast "
   "paths: 1, 2 or 4 (4 for one weight column only); 0 chooses by problem size."},
  {"GK_REDUCE_SLICE_PAIRS", 0, 0, 1e18, 0,
   "Kernel evaluations per launch of a long GPU reduction (an interrupt check between "
   "launches); 0 chooses (about 2^36 gaussian ones). Tests set small values to exercise slicing."},
  {"GK_KMIN_LARGE_ELEMENTS", 0, 0, 1e18, 0,
   "Kernel values per chunk of rows sorted by the GPU k-smallest reduction beyond k = 128; 0 "
   "chooses (within half the memory budget, at most 1 GB). Tests set small values for several chunks."},
  {"GK_PCF_SHARED_BYTES", 40960, 64, 49152, 0,
   "Shared memory per thread block of the PCF GPU kernel for staged column functions, in "
   "bytes (64 to 49152); longer functions are read from global memory."},
  {"GK_H2_PROJECT_CHUNK_MB", 4096, 1, 1048576, 0,
   "MB of one chunk of a level's orthogonal couplings, projected just before its QRs in the "
   "GPU H2 compression: larger means fewer QR launches, smaller less memory."},
  /* 256: STACK_QR_MAX_COLUMNS of h2/h2_stack_qr.cuh, the kernel's own limit. */
  {"GK_H2_STACK_QR_MAX_RANK", 256, 0, 256, 0,
   "Highest level rank whose QRs in the GPU H2 compression use the stack QR kernel (where it "
   "fits); higher ranks take geqrfBatched passes. 0 sends every level there (tests)."},
  {"GK_H2_STACK_PIECES", 4, 1, 64, 0,
   "Coupling blocks per geqrfBatched pass of the GPU H2 compression (levels beyond the stack "
   "QR kernel): more take more memory per stack and re-factor less."},
  {"GK_CHANNEL_WRITERS", 0, 0, 8, 0,
   "Threads of the calling process that write future workers' blocks into a PCF result "
   "(1 to 8, sharing its OpenMP threads); 0 chooses (one per worker's chunk, 2 at least)."},
  {"GK_REDUCE_MIN_BLOCKS", 0, 0, 4, 0,
   "Blocks per multiprocessor the GPU k-smallest and min/max reduction kernels are compiled "
   "to fit (registers capped to match): 1 to 4; 0 chooses (see reduce_launch_cuda.cu)."},
  {"GK_REDUCE_FLOAT_FILTER", 1, 0, 1, 0,
   "1: GPU knn in double precision with k <= 16 (and the squared distance's min and argmin) "
   "first tests pairs by the distance of float copies of the points (a conservative bound: "
   "the same results); 0: every pair in double."},
  {"GK_FILE_ALLOCATE", 1, 0, 1, 0,
   "1: pcf_dist_file() allocates its file's disk blocks before writing (fallocate; not on "
   "tmpfs); 0: the file stays sparse and each first write to a page allocates its block."},
  {"GK_RESULT_HUGE_PAGES", 1, 0, 2, 0,
   "1 (or 0): a PCF result of 64 MB or more, filled by this process or by future workers, in "
   "memory or in pcf_dist_file()'s file, asks for 2 MiB pages (fewer page faults); 2: never."},
  {"GK_CHANNEL_DIRECT", 1, 0, 1, 0,
   "1: future workers on this machine read a PCF matrix's functions from the caller's memory "
   "(Linux process_vm_readv) where they may; 0: through shared memory."},
  {"GK_FILE_POPULATE", 1, 0, 2, 0,
   "1: pcf_dist_file() makes its file's pages before its engines write (those a call fills; "
   "workers of this machine an equal share each), when the file is at most a tenth of memory, "
   "unless it is in memory (tmpfs) or its file system makes 2 MiB pages (large folios); 2: "
   "there too; 0: each first write to a page faults it in."},
  {"GK_PCF_BAND_SLOTS", 0, 0, 1e9, 0,
   "Bands of PCFs one GPU keeps at once (4 at least; 0 chooses: every band of the call, within "
   "half the memory budget). Tests set 4 so that small calls evict bands and upload them again."},
  {"GK_PIPELINE_DEPTH", 4, 2, 4, 0,
   "Blocks each GPU has in flight in the PCF block pipeline (2 to 4): while the host scatters "
   "one, the GPU computes the others; each holds a block of results on the GPU (two at a time "
   "also in page-locked host memory). 4: on four GPUs, whose scatters share the host's memory, "
   "three left the GPUs waiting longer on some hosts, and 4 was never slower."},
  {"GK_CHANNEL_HANDOVER", 1, 0, 1, 0,
   "1: future workers on this machine hand their blocks of a PCF matrix to the caller in place "
   "(its threads write them from the workers' shared memory); 0: through shared slots."},
};

static int valid(const tunable *t, double v)
{
  if (!isfinite(v) || v != floor(v) || v < t->lo || v > t->hi) return 0;
  if (t->powers_of_two && v > 0) {
    double e = log2(v);
    return e == floor(e);
  }
  return 1;
}

/* The variable's value, or NAN when it is unset or not a number in range. */
static double from_environment(const tunable *t)
{
  const char *s = getenv(t->name);
  if (!s || !*s) return NAN;
  char *end;
  double v = strtod(s, &end);
  while (*end == ' ' || *end == '\t') end++;
  return *end == '\0' && valid(t, v) ? v : NAN;
}

static const tunable *entry(gk_tunable_id id)
{
  return (int) id >= 0 && (int) id < GK_TUNE_COUNT ? &table[id] : NULL;
}

double gk_tunable(gk_tunable_id id)
{
  const tunable *t = entry(id);
  if (!t) return NAN;
  double v = from_environment(t);
  return isnan(v) ? t->fallback : v;
}

int gk_tunable_is_set(gk_tunable_id id)
{
  const tunable *t = entry(id);
  const char *s = t ? getenv(t->name) : NULL;
  return s && *s;
}

int gk_tunable_is_valid(gk_tunable_id id)
{
  const tunable *t = entry(id);
  return t && !isnan(from_environment(t));
}

const char *gk_tunable_name(gk_tunable_id id)
{
  const tunable *t = entry(id);
  return t ? t->name : "";
}

const char *gk_tunable_doc(gk_tunable_id id)
{
  const tunable *t = entry(id);
  return t ? t->doc : "";
}

double gk_tunable_default(gk_tunable_id id)
{
  const tunable *t = entry(id);
  return t ? t->fallback : NAN;
}
