/* The run-time compiler's configuration and its disk cache (gk_jit.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include "device/gk_jit.h"

static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;
static char *cache_dir = NULL;
static char *version = NULL;
static int nsources = 0;
static char **source_names = NULL, **source_texts = NULL;
static uint64_t sources_hash = 0;
static gk_jit_stats stats;

uint64_t gk_jit_hash(uint64_t h, const void *data, size_t bytes)
{
  const unsigned char *p = (const unsigned char *) data;
  for (size_t i = 0; i < bytes; i++) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

static uint64_t hash_string(uint64_t h, const char *s)
{
  return gk_jit_hash(h, s, strlen(s) + 1);   /* with the NUL: "ab","c" != "a","bc" */
}

static void free_sources(void)
{
  for (int i = 0; i < nsources; i++) {
    free(source_names[i]);
    free(source_texts[i]);
  }
  free(source_names);
  free(source_texts);
  source_names = source_texts = NULL;
  nsources = 0;
}

static char *copy_string(const char *s)
{
  char *c = (char *) malloc(strlen(s) + 1);
  if (c) strcpy(c, s);
  return c;
}

gk_status gk_jit_configure(const char *dir, const char *package_version, int count,
                           const char *const *names, const char *const *texts, gk_error *err)
{
  pthread_mutex_lock(&config_lock);
  free_sources();
  free(cache_dir);
  free(version);
  cache_dir = copy_string(dir ? dir : "");
  version = copy_string(package_version ? package_version : "");
  source_names = (char **) calloc(count > 0 ? count : 1, sizeof(char *));
  source_texts = (char **) calloc(count > 0 ? count : 1, sizeof(char *));
  int ok = cache_dir && version && source_names && source_texts;
  uint64_t h = hash_string(GK_JIT_HASH_START, ok ? version : "");
  for (int i = 0; ok && i < count; i++) {
    source_names[i] = copy_string(names[i]);
    source_texts[i] = copy_string(texts[i]);
    nsources = i + 1;
    ok = source_names[i] && source_texts[i];
    if (ok) h = hash_string(hash_string(h, names[i]), texts[i]);
  }
  sources_hash = h;
  pthread_mutex_unlock(&config_lock);
  if (!ok) return gk_fail(err, GK_ERR_NOMEM, "out of memory for the kernel sources");
  return GK_OK;
}

int gk_jit_configured(void) { return nsources > 0; }
const char *gk_jit_cache_dir(void) { return cache_dir ? cache_dir : ""; }
uint64_t gk_jit_sources_hash(void) { return sources_hash; }
int gk_jit_source_count(void) { return nsources; }
const char *const *gk_jit_source_names(void) { return (const char *const *) source_names; }
const char *const *gk_jit_source_texts(void) { return (const char *const *) source_texts; }

void gk_jit_count(double compiled, double loaded, double rebuilt, double seconds, double in_memory)
{
  pthread_mutex_lock(&config_lock);
  stats.compiled += compiled;
  stats.loaded += loaded;
  stats.rebuilt += rebuilt;
  stats.compile_seconds += seconds;
  stats.in_memory += in_memory;
  pthread_mutex_unlock(&config_lock);
}

void gk_jit_stats_get(gk_jit_stats *out)
{
  pthread_mutex_lock(&config_lock);
  *out = stats;
  pthread_mutex_unlock(&config_lock);
}

/* ---- entries: a header, then the name expressions and their lowered names
 * (NUL-terminated, in pairs), then the image ---- */

static const char MAGIC[8] = {'G', 'K', 'J', 'I', 'T', '0', '1', '\n'};

typedef struct {
  char magic[8];
  uint64_t key;
  uint64_t count;
  uint64_t names_bytes;
  uint64_t image_bytes;
  uint64_t body_hash;   /* of the names and the image */
} entry_header;

static int entry_path(uint64_t key, char *path, size_t size)
{
  if (!cache_dir || !cache_dir[0]) return 0;
  return snprintf(path, size, "%s/%016llx.gkjit", cache_dir, (unsigned long long) key) < (int) size;
}

int gk_jit_cache_read(uint64_t key, int count, const char *const *names, void **block,
                      const char ***lowered, const void **image, size_t *image_bytes)
{
  char path[4096];
  *block = NULL;
  if (!entry_path(key, path, sizeof path)) return 1;
  FILE *f = fopen(path, "rb");
  if (!f) return 1;
  entry_header h;
  int status = 2;
  char *body = NULL;
  const char **low = NULL;
  if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, MAGIC, 8) != 0 || h.key != key ||
      h.count != (uint64_t) count || h.names_bytes > ((uint64_t) 1 << 24) ||
      h.image_bytes > ((uint64_t) 1 << 30))
    goto done;
  size_t body_bytes = (size_t) (h.names_bytes + h.image_bytes);
  body = (char *) malloc(body_bytes + 1 + (size_t) count * sizeof(char *));
  if (!body || fread(body, 1, body_bytes, f) != body_bytes || fgetc(f) != EOF ||
      gk_jit_hash(GK_JIT_HASH_START, body, body_bytes) != h.body_hash)
    goto done;
  body[body_bytes] = '\0';
  /* The lowered names' pointers live after the body in the same block. */
  low = (const char **) (body + body_bytes + 1);
  {
    size_t at = 0;
    for (int i = 0; i < count; i++) {
      const char *expr = body + at;
      size_t len = strnlen(expr, (size_t) h.names_bytes - at);
      if (at + len >= h.names_bytes || strcmp(expr, names[i]) != 0) goto done;
      at += len + 1;
      low[i] = body + at;
      len = strnlen(low[i], (size_t) h.names_bytes - at);
      if (at + len >= h.names_bytes) goto done;
      at += len + 1;
    }
    if (at != h.names_bytes) goto done;
  }
  status = 0;
  *block = body;
  *lowered = low;
  *image = body + h.names_bytes;
  *image_bytes = (size_t) h.image_bytes;
  body = NULL;
done:
  fclose(f);
  free(body);
  return status;
}

/* mkdir -p */
static int make_dirs(const char *dir)
{
  char path[4096];
  if (snprintf(path, sizeof path, "%s", dir) >= (int) sizeof path) return -1;
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

int gk_jit_cache_write(uint64_t key, int count, const char *const *names,
                       const char *const *lowered, const void *image, size_t image_bytes)
{
  char path[4096], temp[4200];
  if (!entry_path(key, path, sizeof path) || make_dirs(cache_dir) != 0) return -1;
  entry_header h;
  memcpy(h.magic, MAGIC, 8);
  h.key = key;
  h.count = (uint64_t) count;
  h.names_bytes = 0;
  for (int i = 0; i < count; i++) h.names_bytes += strlen(names[i]) + strlen(lowered[i]) + 2;
  h.image_bytes = image_bytes;
  uint64_t hash = GK_JIT_HASH_START;
  for (int i = 0; i < count; i++) {
    hash = gk_jit_hash(hash, names[i], strlen(names[i]) + 1);
    hash = gk_jit_hash(hash, lowered[i], strlen(lowered[i]) + 1);
  }
  h.body_hash = gk_jit_hash(hash, image, image_bytes);
  /* Unique per process and call: sessions sharing the directory never write
   * one temporary file, and a reader sees a whole entry or none. */
  static int serial = 0;
  snprintf(temp, sizeof temp, "%s.%ld.%d.tmp", path, (long) getpid(), serial++);
  FILE *f = fopen(temp, "wb");
  if (!f) return -1;
  int ok = fwrite(&h, sizeof h, 1, f) == 1;
  for (int i = 0; ok && i < count; i++)
    ok = fwrite(names[i], 1, strlen(names[i]) + 1, f) == strlen(names[i]) + 1 &&
         fwrite(lowered[i], 1, strlen(lowered[i]) + 1, f) == strlen(lowered[i]) + 1;
  ok = ok && fwrite(image, 1, image_bytes, f) == image_bytes;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(temp, path) != 0) {
    remove(temp);
    return -1;
  }
  return 0;
}
