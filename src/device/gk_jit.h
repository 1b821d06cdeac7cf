/*
 * Run-time compilation of GPU kernels (the device layer's compiler cache).
 *
 * Kernels with many specializations (the reductions: kernel family x
 * reduction x precision x dimension x row scheme) are not compiled when the
 * package is installed. Their sources are installed (inst/include) and handed
 * to the layer once at load time; a specialization is compiled by NVRTC the
 * first time a call needs it, for the GPU in use, and kept:
 *   - in memory for the rest of the session (every later call pays nothing);
 *   - on disk in the cache directory, one file per program, keyed by a hash
 *     of the sources, the name expressions, the target architecture, the
 *     compile options, NVRTC's version and the package version, so that a
 *     reinstall of the same version finds its kernels and a new version (or
 *     another GPU) compiles its own. A file that fails its checksum, or that
 *     the driver refuses, is compiled again and replaced.
 * A compile that takes longer than a second prints one progress line.
 * Thread-safe: the multi-GPU engines ask from several host threads.
 */
#ifndef GK_JIT_H
#define GK_JIT_H

#include <stddef.h>
#include <stdint.h>
#include "device/gk_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The sources (include name -> text, copied) and the cache directory ("" or
 * NULL: memory only); may be called again (tests point it elsewhere). */
gk_status gk_jit_configure(const char *cache_dir, const char *package_version, int nsources,
                           const char *const *names, const char *const *texts, gk_error *err);
int gk_jit_configured(void);
const char *gk_jit_cache_dir(void);

/* What this session has done, for gk_cache_info(). */
typedef struct {
  double compiled;          /* programs compiled by NVRTC               */
  double loaded;            /* programs read from the disk cache        */
  double rebuilt;           /* disk entries found invalid and replaced  */
  double compile_seconds;   /* wall time spent in NVRTC                  */
  double in_memory;         /* programs loaded in this session           */
} gk_jit_stats;
void gk_jit_stats_get(gk_jit_stats *stats);

/* Kernel handles (cudaKernel_t, usable where the runtime takes a kernel
 * pointer) for `count` name expressions (e.g. "ns::kernel<float, 3>") of the
 * program `source` (which #includes configured sources), compiled for the
 * device in use. `what` names the program in messages. */
gk_status gk_jit_kernels(const char *source, int count, const char *const *names,
                         const char *what, const void **kernels, gk_error *err);

/* Compiles the program for compute capability `arch` (10 major + minor)
 * without a GPU, keeping nothing: a check that the installed sources
 * compile (tests run it where there is no GPU). */
gk_status gk_jit_compile_check(const char *source, int count, const char *const *names,
                               int arch, const char *what, gk_error *err);

/* Forgets the programs loaded in this session (the next call reads the disk
 * cache as a new session would); for tests. */
void gk_jit_forget(void);

/* ---- the disk cache (gk_jit_cache.c), used by the compiler above ---- */

/* FNV-1a, 64 bits, continued from h (start with GK_JIT_HASH_START). */
#define GK_JIT_HASH_START 14695981039346656037ULL
uint64_t gk_jit_hash(uint64_t h, const void *data, size_t bytes);
/* The hash of the configured sources and package version. */
uint64_t gk_jit_sources_hash(void);
/* The configured sources, for NVRTC's in-memory headers. */
int gk_jit_source_count(void);
const char *const *gk_jit_source_names(void);
const char *const *gk_jit_source_texts(void);

/* The entry `key` for these name expressions: 0 with the lowered names
 * (count strings) and the image, both in one malloc'd block *block, when a
 * valid entry exists; 1 when there is none; 2 when there is one but it is
 * invalid (truncated, checksum, other names). */
int gk_jit_cache_read(uint64_t key, int count, const char *const *names, void **block,
                      const char ***lowered, const void **image, size_t *image_bytes);
/* Writes the entry atomically (a temporary file renamed); 0 on success.
 * Failures (a read-only directory) only cost the next session a compile. */
int gk_jit_cache_write(uint64_t key, int count, const char *const *names,
                       const char *const *lowered, const void *image, size_t image_bytes);

void gk_jit_count(double compiled, double loaded, double rebuilt, double seconds, double in_memory);

#ifdef __cplusplus
}
#endif
#endif
