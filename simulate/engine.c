/* engine.c — building task lists (validated as they are added), reading results and the
 * engine's memory. The event loop is in engine_run.c, statistics and the critical path in
 * engine_report.c. */
#define _GNU_SOURCE /* mremap, MADV_HUGEPAGE */
#include "simulate/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"
#include "engine_internal.h"

/* Mapped arrays on Linux, but not under AddressSanitizer (it checks malloc'ed ones). */
#if defined(__SANITIZE_ADDRESS__)
#define SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIM_ASAN 1
#endif
#endif
#if defined(__linux__) && !defined(SIM_ASAN)
#include <sys/mman.h>
#define SIM_MAP 1
#endif

#define SIM_MAX_IDS INT32_MAX

/* ---- memory ---- */

/* Every block carries its size and whether it is mapped in front of the data, so growing or
 * freeing it never depends on a caller's count (a growth that fails half-way leaves arrays of
 * different sizes behind). 16 bytes keep the data aligned for doubles and 64-bit integers. */
typedef struct sim_block {
  size_t bytes;  /* data bytes */
  size_t mapped; /* 1: mmap'ed (SIM_MAP), 0: malloc'ed */
} sim_block;

static sim_block *block_of(void *p) { return (sim_block *)p - 1; }

#ifdef SIM_MAP
#define SIM_MAP_MIN ((size_t)4 << 20) /* arrays from this size are mapped, bytes */
#define SIM_HUGE    ((size_t)2 << 20) /* a transparent huge page, bytes */

static size_t map_size(size_t bytes) {
  return (bytes + sizeof(sim_block) + SIM_HUGE - 1) & ~(SIM_HUGE - 1);
}
#endif

/* A new block of `bytes` (zeroed when `zero`); NULL when out of memory. */
static void *block_new(size_t bytes, bool zero) {
  if (bytes > SIZE_MAX - sizeof(sim_block) - ((size_t)4 << 20))
    return NULL;
  sim_block *b = NULL;
#ifdef SIM_MAP
  if (bytes >= SIM_MAP_MIN) {
    void *q = mmap(NULL, map_size(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                   0); /* anonymous pages are zero */
    if (q == MAP_FAILED)
      return NULL;
    (void)madvise(q, map_size(bytes), MADV_HUGEPAGE); /* a hint: without THP, small pages */
    b = q;
    b->mapped = 1;
  }
#endif
  if (b == NULL) {
    b = zero ? calloc(1, sizeof *b + bytes) : malloc(sizeof *b + bytes);
    if (b == NULL)
      return NULL;
    b->mapped = 0;
  }
  b->bytes = bytes;
  return b + 1;
}

void sim_mem_free(void *p, size_t bytes) {
  (void)bytes; /* the block knows its size */
  if (p == NULL)
    return;
  sim_block *b = block_of(p);
#ifdef SIM_MAP
  if (b->mapped) {
    munmap(b, map_size(b->bytes));
    return;
  }
#endif
  free(b);
}

void *sim_mem_grow(void *p, size_t old_bytes, size_t new_bytes) {
  (void)old_bytes; /* the block knows its size */
  if (p == NULL)
    return block_new(new_bytes, false);
  sim_block *b = block_of(p);
#ifdef SIM_MAP
  bool map = new_bytes >= SIM_MAP_MIN;
  if (b->mapped && map) {
    void *q = mremap(b, map_size(b->bytes), map_size(new_bytes), MREMAP_MAYMOVE);
    if (q == MAP_FAILED)
      return NULL;
    (void)madvise(q, map_size(new_bytes), MADV_HUGEPAGE);
    b = q;
    b->bytes = new_bytes;
    return b + 1;
  }
  if (b->mapped || map) { /* from one kind to the other: copy */
    void *q = block_new(new_bytes, false);
    if (q == NULL)
      return NULL;
    memcpy(q, p, b->bytes < new_bytes ? b->bytes : new_bytes);
    sim_mem_free(p, 0);
    return q;
  }
#endif
  if (new_bytes > SIZE_MAX - sizeof *b)
    return NULL;
  sim_block *q = realloc(b, sizeof *b + new_bytes);
  if (q == NULL)
    return NULL;
  q->bytes = new_bytes;
  return q + 1;
}

void *sim_mem_zalloc(size_t bytes) { return block_new(bytes, true); }

/* Grow the array at `arr` (a pointer to the array variable) from old_cap to cap elements of
 * `elem` bytes; false when out of memory (the array unchanged). */
static bool grow(void *arr, int64_t old_cap, int64_t cap, size_t elem) {
  void **pp = arr;
  if ((uint64_t)cap > SIZE_MAX / elem)
    return false;
  void *q = sim_mem_grow(*pp, (size_t)old_cap * elem, (size_t)cap * elem);
  if (q == NULL)
    return false;
  *pp = q;
  return true;
}

static bool finite_nonneg(double x) { return isfinite(x) && x >= 0; }

hap_status hap_sim_create(int32_t n_devices, hap_sim **out, hap_err *err) {
  if (out == NULL)
    return hap_err_set(err, HAP_EINVAL, "simulator: no output pointer");
  *out = NULL;
  if (n_devices < 1 || n_devices > SIM_MAX_IDS / HAP_SIM_N_STREAMS - 1)
    return hap_err_set(err, HAP_EINVAL, "simulator: %d devices (expected 1..%d)", n_devices,
                       SIM_MAX_IDS / HAP_SIM_N_STREAMS - 1);
  hap_sim *s = calloc(1, sizeof *s);
  if (s == NULL)
    return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory");
  size_t keys = (size_t)n_devices * HAP_SIM_N_STREAMS;
  s->n_devices = n_devices;
  s->st_first = malloc(keys * sizeof *s->st_first);
  s->st_last = malloc(keys * sizeof *s->st_last);
  s->st_count = calloc(keys, sizeof *s->st_count);
  if (s->st_first == NULL || s->st_last == NULL || s->st_count == NULL) {
    hap_sim_destroy(s);
    return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory");
  }
  for (size_t k = 0; k < keys; k++)
    s->st_first[k] = s->st_last[k] = -1;
  *out = s;
  return HAP_OK;
}

void hap_sim_destroy(hap_sim *s) {
  if (s == NULL)
    return;
  sim_run_free(&s->run);
  size_t ct = (size_t)s->cap_tasks;
#define SIM_FREE(field, cap) sim_mem_free(s->field, (size_t)(cap) * sizeof *s->field)
  SIM_FREE(key, ct);
  SIM_FREE(flags, ct);
  SIM_FREE(duration_s, ct);
  SIM_FREE(aux, ct);
  SIM_FREE(st_next, ct);
  SIM_FREE(dep_head, ct);
  sim_mem_free(s->names, s->names_cap);
  SIM_FREE(edge_task, s->cap_edges);
  SIM_FREE(edge_next, s->cap_edges);
  SIM_FREE(nm_task, s->cap_nm);
  SIM_FREE(nm_off, s->cap_nm);
  SIM_FREE(pl_flops, s->cap_pl);
  SIM_FREE(pl_bytes, s->cap_pl);
  SIM_FREE(co_first, s->cap_coll);
  SIM_FREE(co_lastm, s->cap_coll);
  SIM_FREE(co_size, s->cap_coll);
  SIM_FREE(mb_next, s->cap_members);
  SIM_FREE(mb_coll, s->cap_members);
  SIM_FREE(mb_pay, s->cap_members);
  SIM_FREE(xf_task, s->cap_xfers);
  SIM_FREE(xf_latency_s, s->cap_xfers);
  SIM_FREE(xf_flops, s->cap_xfers);
  SIM_FREE(xf_bytes, s->cap_xfers);
  SIM_FREE(xf_path_off, s->cap_xfers);
  SIM_FREE(path_res, s->cap_path);
#undef SIM_FREE
  free(s->st_first);
  free(s->st_last);
  free(s->st_count);
  free(s->res_bw_Bps);
  free(s->res_name_off);
  free(s);
}

/* Copy a name into the pool (at most 4 GiB, offsets are 32-bit); its offset in *off. */
static hap_status push_name(hap_sim *s, const char *name, uint32_t *off, hap_err *err) {
  size_t len = strlen(name) + 1;
  if (s->names_len + len > UINT32_MAX)
    return hap_err_set(err, HAP_EOVERFLOW, "simulator: more than 4 GiB of names");
  if (s->names_len + len > s->names_cap) {
    size_t cap = s->names_cap > 0 ? s->names_cap : 4096;
    while (cap < s->names_len + len)
      cap *= 2;
    if (!grow(&s->names, (int64_t)s->names_cap, (int64_t)cap, 1))
      return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for names");
    s->names_cap = cap;
  }
  memcpy(s->names + s->names_len, name, len);
  *off = (uint32_t)s->names_len;
  s->names_len += len;
  return HAP_OK;
}

hap_status hap_sim_add_resource(hap_sim *s, const char *name, double bandwidth_Bps, int32_t *id,
                                hap_err *err) {
  if (s == NULL || name == NULL)
    return hap_err_set(err, HAP_EINVAL, "simulator: resource without a name");
  if (!isfinite(bandwidth_Bps) || bandwidth_Bps <= 0)
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: resource \"%s\": bandwidth %g bytes/s (expected > 0, finite)",
                       name, bandwidth_Bps);
  if (s->n_res == SIM_MAX_IDS)
    return hap_err_set(err, HAP_EOVERFLOW, "simulator: too many resources");
  if (s->n_res == s->cap_res) {
    int64_t cap = hap_vec_next_cap(s->cap_res, (int64_t)s->n_res + 1, 16, SIM_MAX_IDS);
    double *bw = hap_vec_realloc(s->res_bw_Bps, cap, sizeof *bw);
    if (bw != NULL)
      s->res_bw_Bps = bw;
    uint32_t *off = hap_vec_realloc(s->res_name_off, cap, sizeof *off);
    if (off != NULL)
      s->res_name_off = off;
    if (bw == NULL || off == NULL)
      return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for resources");
    s->cap_res = (int32_t)cap;
  }
  HAP_TRY(push_name(s, name, &s->res_name_off[s->n_res], err));
  s->res_bw_Bps[s->n_res] = bandwidth_Bps;
  if (id != NULL)
    *id = s->n_res;
  s->n_res++;
  s->has_results = false;
  return HAP_OK;
}

hap_status hap_sim_set_bandwidth(hap_sim *s, int32_t resource, double bandwidth_Bps, hap_err *err) {
  if (s == NULL || resource < 0 || resource >= s->n_res)
    return hap_err_set(err, HAP_EINVAL, "simulator: no resource %d", resource);
  if (!isfinite(bandwidth_Bps) || bandwidth_Bps <= 0)
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: resource \"%s\": bandwidth %g bytes/s (expected > 0, finite)",
                       s->names + s->res_name_off[resource], bandwidth_Bps);
  s->res_bw_Bps[resource] = bandwidth_Bps;
  s->has_results = false;
  return HAP_OK;
}

hap_status hap_sim_new_collective(hap_sim *s, int32_t *id, hap_err *err) {
  if (s == NULL || id == NULL)
    return hap_err_set(err, HAP_EINVAL, "simulator: no collective output");
  if (s->n_collectives == SIM_MAX_IDS)
    return hap_err_set(err, HAP_EOVERFLOW, "simulator: too many collectives");
  if (s->n_collectives == s->cap_coll) {
    int64_t cap = hap_vec_next_cap(s->cap_coll, (int64_t)s->n_collectives + 1, 64, SIM_MAX_IDS);
    if (!grow(&s->co_first, s->cap_coll, cap, sizeof *s->co_first) ||
        !grow(&s->co_lastm, s->cap_coll, cap, sizeof *s->co_lastm) ||
        !grow(&s->co_size, s->cap_coll, cap, sizeof *s->co_size))
      return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for collectives");
    s->cap_coll = (int32_t)cap;
  }
  int32_t c = s->n_collectives++;
  s->co_first[c] = s->co_lastm[c] = -1;
  s->co_size[c] = 0;
  *id = c;
  s->has_results = false;
  return HAP_OK;
}

/* Each array is replaced as soon as it has grown, so a failure leaves every array valid (the
 * capacity is raised only once all have grown). */
#define SIM_GROW(ok, field, old_cap, cap)                                                          \
  ((ok) = (ok) && grow(&s->field, (old_cap), (cap), sizeof *s->field))

static hap_status reserve_tasks(hap_sim *s, hap_err *err) {
  if (s->n_tasks < s->cap_tasks)
    return HAP_OK;
  if (s->n_tasks == SIM_MAX_IDS)
    return hap_err_set(err, HAP_EOVERFLOW, "simulator: too many tasks (%d)", s->n_tasks);
  int64_t cap = hap_vec_next_cap(s->cap_tasks, (int64_t)s->n_tasks + 1, 1024, SIM_MAX_IDS);
  int64_t old = s->cap_tasks;
  bool ok = true;
  SIM_GROW(ok, key, old, cap);
  SIM_GROW(ok, flags, old, cap);
  SIM_GROW(ok, duration_s, old, cap);
  SIM_GROW(ok, aux, old, cap);
  SIM_GROW(ok, st_next, old, cap);
  SIM_GROW(ok, dep_head, old, cap);
  if (!ok)
    return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for %lld tasks", (long long)cap);
  s->cap_tasks = (int32_t)cap;
  return HAP_OK;
}

static hap_status reserve_edges(hap_sim *s, int64_t more, hap_err *err) {
  if (s->n_edges + more <= s->cap_edges)
    return HAP_OK;
  if (s->n_edges + more > SIM_MAX_IDS)
    return hap_err_set(err, HAP_EOVERFLOW, "simulator: too many dependencies");
  int64_t cap = hap_vec_next_cap(s->cap_edges, s->n_edges + more, 1024, SIM_MAX_IDS);
  bool ok = true;
  SIM_GROW(ok, edge_task, s->cap_edges, cap);
  SIM_GROW(ok, edge_next, s->cap_edges, cap);
  if (!ok)
    return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for dependencies");
  s->cap_edges = (int32_t)cap;
  return HAP_OK;
}

/* Bit-identical doubles (-0 and 0 differ, a NaN equals its own bits). */
static bool same_bits(double a, double b) {
  uint64_t x, y;
  memcpy(&x, &a, sizeof x);
  memcpy(&y, &b, sizeof y);
  return x == y;
}

/* The payload entry of (flops, bytes): the last one when it holds the same, else a new one. */
static hap_status push_payload(hap_sim *s, double flops, double bytes, int32_t *p, hap_err *err) {
  if (s->n_pl > 0 && same_bits(s->pl_flops[s->n_pl - 1], flops) &&
      same_bits(s->pl_bytes[s->n_pl - 1], bytes)) {
    *p = s->n_pl - 1;
    return HAP_OK;
  }
  if (s->n_pl == s->cap_pl) {
    int64_t cap = hap_vec_next_cap(s->cap_pl, (int64_t)s->n_pl + 1, 64, SIM_MAX_IDS);
    bool ok = cap > 0;
    SIM_GROW(ok, pl_flops, s->cap_pl, cap);
    SIM_GROW(ok, pl_bytes, s->cap_pl, cap);
    if (!ok)
      return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for tasks");
    s->cap_pl = (int32_t)cap;
  }
  *p = s->n_pl++;
  s->pl_flops[*p] = flops;
  s->pl_bytes[*p] = bytes;
  return HAP_OK;
}

/* Task k is named `name`: the run before it goes on, or a new run starts. */
static hap_status push_task_name(hap_sim *s, int32_t k, const char *name, hap_err *err) {
  if (s->n_nm > 0 && strcmp(name, s->names + s->nm_off[s->n_nm - 1]) == 0)
    return HAP_OK; /* one task on many devices: its name stored once */
  if (s->n_nm == s->cap_nm) {
    int64_t cap = hap_vec_next_cap(s->cap_nm, (int64_t)s->n_nm + 1, 256, SIM_MAX_IDS);
    bool ok = cap > 0;
    SIM_GROW(ok, nm_task, s->cap_nm, cap);
    SIM_GROW(ok, nm_off, s->cap_nm, cap);
    if (!ok)
      return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for names");
    s->cap_nm = (int32_t)cap;
  }
  HAP_TRY(push_name(s, name, &s->nm_off[s->n_nm], err));
  s->nm_task[s->n_nm++] = k;
  return HAP_OK;
}

static hap_status reserve_member(hap_sim *s, hap_err *err) {
  if (s->n_members < s->cap_members)
    return HAP_OK;
  int64_t cap = hap_vec_next_cap(s->cap_members, (int64_t)s->n_members + 1, 256, SIM_MAX_IDS);
  int64_t old = s->cap_members;
  bool ok = cap > 0;
  SIM_GROW(ok, mb_next, old, cap);
  SIM_GROW(ok, mb_coll, old, cap);
  SIM_GROW(ok, mb_pay, old, cap);
  if (!ok)
    return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for collectives");
  s->cap_members = (int32_t)cap;
  return HAP_OK;
}

static hap_status reserve_transfer(hap_sim *s, int32_t n_path, hap_err *err) {
  if (s->n_xfers + 1 >= s->cap_xfers) {
    int64_t cap = hap_vec_next_cap(s->cap_xfers, (int64_t)s->n_xfers + 2, 16, SIM_MAX_IDS);
    int64_t old = s->cap_xfers;
    bool ok = cap > 0;
    SIM_GROW(ok, xf_task, old, cap);
    SIM_GROW(ok, xf_latency_s, old, cap);
    SIM_GROW(ok, xf_flops, old, cap);
    SIM_GROW(ok, xf_bytes, old, cap);
    SIM_GROW(ok, xf_path_off, old, cap);
    if (!ok)
      return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for transfers");
    if (s->cap_xfers == 0)
      s->xf_path_off[0] = 0;
    s->cap_xfers = (int32_t)cap;
  }
  if (s->n_path + n_path > s->cap_path) {
    int64_t cap = hap_vec_next_cap(s->cap_path, s->n_path + n_path, 16, INT64_MAX);
    bool ok = cap > 0;
    SIM_GROW(ok, path_res, s->cap_path, cap);
    if (!ok)
      return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory for transfer paths");
    s->cap_path = cap;
  }
  return HAP_OK;
}
#undef SIM_GROW

/* Everything about `t` that does not depend on the engine's state beyond sizes. */
static hap_status check_task(const hap_sim *s, const hap_sim_task *t, hap_err *err) {
  const char *nm = t->name;
  if (t->device < 0 || t->device >= s->n_devices)
    return hap_err_set(err, HAP_EINVAL, "simulator: task \"%s\": device %d (expected 0..%d)", nm,
                       t->device, s->n_devices - 1);
  if ((unsigned)t->stream >= HAP_SIM_N_STREAMS)
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: task \"%s\": stream %d (expected compute or comm)", nm,
                       (int)t->stream);
  if ((unsigned)t->kind > HAP_SIM_TRANSFER)
    return hap_err_set(err, HAP_EINVAL, "simulator: task \"%s\": kind %d", nm, (int)t->kind);
  if (t->kind != HAP_SIM_TRANSFER && t->duration_s != HAP_SIM_DURATION_FN &&
      !finite_nonneg(t->duration_s))
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: task \"%s\": duration %g s (expected >= 0, finite, or "
                       "HAP_SIM_DURATION_FN)",
                       nm, t->duration_s);
  if (!finite_nonneg(t->flops) || !finite_nonneg(t->bytes))
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: task \"%s\": flops %g, bytes %g (expected >= 0, finite)", nm,
                       t->flops, t->bytes);
  if (t->n_deps < 0 || (t->n_deps > 0 && t->deps == NULL))
    return hap_err_set(err, HAP_EINVAL, "simulator: task \"%s\": %d dependencies without an array",
                       nm, t->n_deps);
  for (int32_t i = 0; i < t->n_deps; i++)
    if (t->deps[i] < 0 || t->deps[i] >= s->n_tasks)
      return hap_err_set(err, HAP_EINVAL,
                         "simulator: task \"%s\": dependency %d is not a task added before it "
                         "(0..%d)",
                         nm, t->deps[i], s->n_tasks - 1);
  if (t->kind == HAP_SIM_COLLECTIVE && (t->collective < 0 || t->collective >= s->n_collectives))
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: task \"%s\": collective %d (expected an id from "
                       "hap_sim_new_collective)",
                       nm, t->collective);
  if (t->kind != HAP_SIM_TRANSFER)
    return HAP_OK;
  if (!finite_nonneg(t->latency_s))
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: transfer \"%s\": latency %g s (expected >= 0, finite)", nm,
                       t->latency_s);
  if (t->n_path < 1 || t->path == NULL)
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: transfer \"%s\": empty path (expected >= 1 resource)", nm);
  for (int32_t i = 0; i < t->n_path; i++) {
    if (t->path[i] < 0 || t->path[i] >= s->n_res)
      return hap_err_set(err, HAP_EINVAL,
                         "simulator: transfer \"%s\": resource %d (expected 0..%d)", nm, t->path[i],
                         s->n_res - 1);
    for (int32_t j = 0; j < i; j++)
      if (t->path[j] == t->path[i])
        return hap_err_set(err, HAP_EINVAL,
                           "simulator: transfer \"%s\": resource \"%s\" appears twice in its path",
                           nm, s->names + s->res_name_off[t->path[i]]);
  }
  return HAP_OK;
}

/* Task k waits for task `on`: an edge at the head of on's list (newest first). */
static void push_edge(hap_sim *s, int32_t k, int32_t on) {
  int32_t e = s->n_edges++;
  s->edge_task[e] = k;
  s->edge_next[e] = s->dep_head[on];
  s->dep_head[on] = e;
}

hap_status hap_sim_add_task(hap_sim *s, const hap_sim_task *t, int32_t *id, hap_err *err) {
  if (s == NULL || t == NULL || t->name == NULL)
    return hap_err_set(err, HAP_EINVAL, "simulator: task without a name");
  HAP_TRY(check_task(s, t, err));
  HAP_TRY(reserve_tasks(s, err));
  HAP_TRY(reserve_edges(s, t->n_deps, err));
  /* a FIXED task without flops and bytes (+0) has no payload entry */
  bool payload = !same_bits(t->flops, 0) || !same_bits(t->bytes, 0);
  int32_t pay = -1;
  if (t->kind == HAP_SIM_TRANSFER)
    HAP_TRY(reserve_transfer(s, t->n_path, err));
  else if (t->kind == HAP_SIM_COLLECTIVE)
    HAP_TRY(reserve_member(s, err));
  if (t->kind != HAP_SIM_TRANSFER && (payload || t->kind == HAP_SIM_COLLECTIVE))
    HAP_TRY(push_payload(s, t->flops, t->bytes, &pay, err));
  int32_t k = s->n_tasks;
  HAP_TRY(push_task_name(s, k, t->name, err));
  int32_t key = t->device * HAP_SIM_N_STREAMS + (int32_t)t->stream;
  bool fn = t->kind != HAP_SIM_TRANSFER && t->duration_s == HAP_SIM_DURATION_FN;
  s->key[k] = key;
  s->flags[k] = (uint8_t)((uint8_t)t->kind | (fn ? SIM_F_DURATION_FN : 0u));
  s->duration_s[k] = t->kind == HAP_SIM_TRANSFER ? 0 : t->duration_s;
  s->n_fn += fn;
  s->aux[k] = -1;
  s->st_next[k] = -1;
  s->dep_head[k] = -1;
  if (s->st_last[key] >= 0)
    s->st_next[s->st_last[key]] = k;
  else
    s->st_first[key] = k;
  s->st_last[key] = k;
  s->st_count[key]++;
  if (t->kind == HAP_SIM_FIXED) {
    s->aux[k] = pay;
  } else if (t->kind == HAP_SIM_COLLECTIVE) {
    int32_t m = s->n_members++, c = t->collective;
    s->aux[k] = m;
    s->mb_next[m] = -1;
    s->mb_coll[m] = c;
    s->mb_pay[m] = pay;
    if (s->co_lastm[c] >= 0)
      s->mb_next[s->co_lastm[c]] = k;
    else
      s->co_first[c] = k;
    s->co_lastm[c] = m;
    s->co_size[c]++;
  } else if (t->kind == HAP_SIM_TRANSFER) {
    int32_t x = s->n_xfers++;
    s->aux[k] = x;
    s->xf_task[x] = k;
    s->xf_latency_s[x] = t->latency_s;
    s->xf_flops[x] = t->flops;
    s->xf_bytes[x] = t->bytes;
    memcpy(s->path_res + s->n_path, t->path, (size_t)t->n_path * sizeof *t->path);
    s->n_path += t->n_path;
    s->xf_path_off[x + 1] = s->n_path;
  }
  for (int32_t i = 0; i < t->n_deps; i++)
    push_edge(s, k, t->deps[i]);
  s->n_tasks++;
  s->has_results = false;
  if (id != NULL)
    *id = k;
  return HAP_OK;
}

hap_status hap_sim_add_dep(hap_sim *s, int32_t task, int32_t on, hap_err *err) {
  if (s == NULL)
    return hap_err_set(err, HAP_EINVAL, "simulator: no engine");
  if (task < 0 || task >= s->n_tasks || on < 0 || on >= s->n_tasks)
    return hap_err_set(err, HAP_EINVAL, "simulator: dependency %d -> %d: no such task (0..%d)", on,
                       task, s->n_tasks - 1);
  if (task == on)
    return hap_err_set(err, HAP_EINVAL, "simulator: task \"%s\" cannot depend on itself",
                       sim_task_name(s, task));
  HAP_TRY(reserve_edges(s, 1, err));
  push_edge(s, task, on);
  s->has_results = false;
  return HAP_OK;
}

hap_status hap_sim_extend(hap_sim *s, int32_t task, double seconds, hap_err *err) {
  if (s == NULL || task < 0 || task >= s->n_tasks)
    return hap_err_set(err, HAP_EINVAL, "simulator: no task %d to extend", task);
  if (sim_kind(s, task) != HAP_SIM_FIXED || (s->flags[task] & SIM_F_DURATION_FN) != 0)
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: task \"%s\": only a FIXED task with a duration can be extended",
                       sim_task_name(s, task));
  double d = s->duration_s[task] + seconds;
  if (!finite_nonneg(seconds) || !isfinite(d))
    return hap_err_set(err, HAP_EINVAL,
                       "simulator: task \"%s\": extended by %g s (expected >= 0, finite)",
                       sim_task_name(s, task), seconds);
  s->duration_s[task] = d;
  s->has_results = false;
  return HAP_OK;
}

int32_t hap_sim_n_tasks(const hap_sim *s) { return s != NULL ? s->n_tasks : 0; }
int32_t hap_sim_n_devices(const hap_sim *s) { return s != NULL ? s->n_devices : 0; }

void sim_fill_record(const hap_sim *s, int32_t t, const char *name, bool with_times,
                     hap_sim_record *r) {
  hap_sim_kind kind = sim_kind(s, t);
  int32_t a = s->aux[t];
  r->task = t;
  r->name = name != NULL ? name : sim_task_name(s, t);
  r->device = s->key[t] / HAP_SIM_N_STREAMS;
  r->stream = (hap_sim_stream)(s->key[t] % HAP_SIM_N_STREAMS);
  r->kind = kind;
  r->collective = kind == HAP_SIM_COLLECTIVE ? s->mb_coll[a] : -1;
  r->flops = r->bytes = 0;
  int32_t p = kind == HAP_SIM_FIXED ? a : kind == HAP_SIM_COLLECTIVE ? s->mb_pay[a] : -1;
  if (p >= 0) {
    r->flops = s->pl_flops[p];
    r->bytes = s->pl_bytes[p];
  } else if (kind == HAP_SIM_TRANSFER) {
    r->flops = s->xf_flops[a];
    r->bytes = s->xf_bytes[a];
  }
  r->ready_s = with_times ? s->run.t_s[t] : 0;
  r->start_s = with_times ? sim_start(s, t) : 0;
  r->end_s = with_times ? sim_end(s, t) : 0;
}

hap_status hap_sim_run(hap_sim *s, const hap_sim_options *opt, hap_err *err) {
  if (s == NULL)
    return hap_err_set(err, HAP_EINVAL, "simulator: no engine");
  s->has_results = false;
  HAP_TRY(sim_run_all(s, opt, err));
  if (s->run.n_done < s->n_tasks)
    return sim_deadlock_error(s, err);
  HAP_TRY(sim_report(s, err));
  s->has_results = true;
  return HAP_OK;
}

const hap_sim_results *hap_sim_results_get(const hap_sim *s) {
  return s != NULL && s->has_results ? &s->run.results : NULL;
}

hap_status hap_sim_task_record(const hap_sim *s, int32_t task, hap_sim_record *out, hap_err *err) {
  if (s == NULL || out == NULL || !s->has_results)
    return hap_err_set(err, HAP_EINVAL, "simulator: no results (run hap_sim_run first)");
  if (task < 0 || task >= s->n_tasks)
    return hap_err_set(err, HAP_EINVAL, "simulator: no task %d (0..%d)", task, s->n_tasks - 1);
  sim_fill_record(s, task, NULL, true, out);
  return HAP_OK;
}

hap_status hap_sim_visit(const hap_sim *s, hap_sim_visit_fn fn, void *ctx, hap_err *err) {
  if (s == NULL || fn == NULL || !s->has_results)
    return hap_err_set(err, HAP_EINVAL, "simulator: no results to visit (run hap_sim_run first)");
  int32_t run = 0; /* the name run of t */
  for (int32_t t = 0; t < s->n_tasks; t++) {
    while (run + 1 < s->n_nm && s->nm_task[run + 1] <= t)
      run++;
    hap_sim_record r;
    sim_fill_record(s, t, s->names + s->nm_off[run], true, &r);
    HAP_TRY(fn(ctx, &r, err));
  }
  return HAP_OK;
}

const char *hap_sim_stream_name(hap_sim_stream st) {
  switch (st) {
  case HAP_SIM_COMPUTE: return "compute";
  case HAP_SIM_COMM: return "comm";
  case HAP_SIM_N_STREAMS: break;
  }
  return "unknown";
}

const char *hap_sim_kind_name(hap_sim_kind k) {
  switch (k) {
  case HAP_SIM_FIXED: return "fixed";
  case HAP_SIM_COLLECTIVE: return "collective";
  case HAP_SIM_TRANSFER: return "transfer";
  }
  return "unknown";
}

const char *hap_sim_edge_name(hap_sim_edge e) {
  switch (e) {
  case HAP_SIM_EDGE_START: return "start";
  case HAP_SIM_EDGE_STREAM: return "stream";
  case HAP_SIM_EDGE_DEPENDENCY: return "dependency";
  case HAP_SIM_EDGE_COLLECTIVE: return "collective";
  }
  return "unknown";
}
