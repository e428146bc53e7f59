/* grad_buckets.c — gradient buckets whose sums overlap compute (grad_buckets.h). */
#include "grad_buckets.h"

#include <stdlib.h>
#include <string.h>

/* Gradients of this many floats (64 KiB) or more are summed in place, each on its own: copying
 * them through a bucket cost VGG19's dp-ev plan (80 MB of convolution gradients) 4-5 % of its
 * iteration on dev-2c, while a sum of 64 KiB costs a few tens of us more than its share of a
 * bucket. Buckets gather the small ones (biases, norms), as DDP's do. */
enum { IN_PLACE_FLOATS = 16384 };

/* A staging buffer, kept across iterations (MPI is faster on a buffer it has seen). */
typedef struct bucket {
  float *buf;
  int64_t cap, used; /* floats */
  bool started;
} bucket;

/* A queued gradient: where its copy sits (bucket -1: summed in place, no copy). */
typedef struct entry {
  float *grad;
  int64_t count, offset;
  int32_t bucket;
} entry;

struct hap_buckets {
  hap_comm *c;
  int64_t bucket_elems;
  bucket *buckets;
  int32_t n_buckets, open; /* allocated; the one filling */
  entry *entries;
  int32_t n_entries, cap_entries;
  int64_t started;
};

static hap_status oom(hap_err *err) {
  return hap_err_set(err, HAP_ENOMEM, "hap-run: gradient buckets: out of memory");
}

hap_status hap_buckets_create(hap_comm *c, int64_t bucket_bytes, hap_buckets **out, hap_err *err) {
  *out = NULL;
  if (c->ops->all_reduce_start == NULL || c->ops->reduce_test == NULL ||
      c->ops->reduce_wait == NULL)
    return hap_err_set(err, HAP_EUNSUPPORTED,
                       "hap-run: the %s backend has no all-reduce that does not wait",
                       c->ops->name);
  if (bucket_bytes < (int64_t)sizeof(float))
    return hap_err_set(err, HAP_EINVAL, "hap-run: bucket size %lld bytes, expected >= 4",
                       (long long)bucket_bytes);
  hap_buckets *b = calloc(1, sizeof *b);
  if (b == NULL)
    return oom(err);
  b->c = c;
  b->bucket_elems = bucket_bytes / (int64_t)sizeof(float);
  *out = b;
  return HAP_OK;
}

void hap_buckets_destroy(hap_buckets *b) {
  if (b == NULL)
    return;
  for (int32_t i = 0; i < b->n_buckets; i++)
    free(b->buckets[i].buf);
  free(b->buckets);
  free(b->entries);
  free(b);
}

static hap_status start(hap_buckets *b, bucket *k, hap_err *err) {
  k->started = true;
  b->started++;
  return b->c->ops->all_reduce_start(b->c, k->buf, k->used, HAP_F32, HAP_REDUCE_SUM, err);
}

/* Bucket `open` exists, is not started and has room for count more floats (grown while empty). */
static hap_status room_for(hap_buckets *b, int64_t count, hap_err *err) {
  if (b->open == b->n_buckets) {
    bucket *grown = realloc(b->buckets, (size_t)(b->n_buckets + 1) * sizeof *grown);
    if (grown == NULL)
      return oom(err);
    b->buckets = grown;
    b->buckets[b->n_buckets++] = (bucket){0};
  }
  bucket *k = &b->buckets[b->open];
  if (k->used + count <= k->cap)
    return HAP_OK;
  if (k->used > 0) { /* full: start it, and fill the next */
    HAP_TRY(start(b, k, err));
    b->open++;
    return room_for(b, count, err);
  }
  int64_t cap = count > b->bucket_elems ? count : b->bucket_elems;
  float *buf = malloc((size_t)cap * sizeof(float));
  if (buf == NULL)
    return oom(err);
  free(k->buf);
  k->buf = buf;
  k->cap = cap;
  return HAP_OK;
}

hap_status hap_buckets_add(hap_buckets *b, float *grad, int64_t count, hap_err *err) {
  if (count <= 0)
    return HAP_OK;
  if (b->n_entries == b->cap_entries) {
    int32_t cap = b->cap_entries > 0 ? 2 * b->cap_entries : 64;
    entry *grown = realloc(b->entries, (size_t)cap * sizeof *grown);
    if (grown == NULL)
      return oom(err);
    b->entries = grown;
    b->cap_entries = cap;
  }
  if (count >= b->bucket_elems || count >= IN_PLACE_FLOATS) { /* summed where it lies */
    b->entries[b->n_entries++] = (entry){grad, count, 0, -1};
    b->started++;
    return b->c->ops->all_reduce_start(b->c, grad, count, HAP_F32, HAP_REDUCE_SUM, err);
  }
  HAP_TRY(room_for(b, count, err));
  bucket *k = &b->buckets[b->open];
  memcpy(k->buf + k->used, grad, (size_t)count * sizeof(float));
  b->entries[b->n_entries++] = (entry){grad, count, k->used, b->open};
  k->used += count;
  if (k->used >= b->bucket_elems) {
    HAP_TRY(start(b, k, err));
    b->open++;
  }
  return HAP_OK;
}

hap_status hap_buckets_progress(hap_buckets *b, hap_err *err) {
  bool done = false;
  return b->started > 0 ? b->c->ops->reduce_test(b->c, &done, err) : HAP_OK;
}

hap_status hap_buckets_finish(hap_buckets *b, hap_err *err) {
  if (b->n_entries == 0)
    return HAP_OK;
  if (b->open < b->n_buckets && b->buckets[b->open].used > 0 && !b->buckets[b->open].started)
    HAP_TRY(start(b, &b->buckets[b->open], err));
  HAP_TRY(b->c->ops->reduce_wait(b->c, err));
  for (int32_t i = 0; i < b->n_entries; i++) {
    const entry *e = &b->entries[i];
    if (e->bucket >= 0)
      memcpy(e->grad, b->buckets[e->bucket].buf + e->offset, (size_t)e->count * sizeof(float));
  }
  for (int32_t i = 0; i < b->n_buckets; i++) {
    b->buckets[i].used = 0;
    b->buckets[i].started = false;
  }
  b->open = 0;
  b->n_entries = 0;
  return HAP_OK;
}

bool hap_buckets_pending(const hap_buckets *b) { return b->n_entries > 0; }

int64_t hap_buckets_started(const hap_buckets *b) { return b->started; }
