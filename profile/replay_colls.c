/* replay_colls.c — collective times of a plan replay (replay_colls.h, replay.h). */
#include "replay_colls.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"
#include "cluster/cost.h"
#include "profile/fit_rel.h"

struct hap_coll_timer {
  hap_lowered *lw;
  int32_t n_tasks;    /* collective tasks timed */
  int32_t *task;      /* [n_tasks] their ids */
  int32_t *key_of;    /* [n_tasks * n_devices]: (task j, sub-group s) -> key, or -1 */
  double *all;        /* [world size * n_tasks]: every rank's */
  int32_t world_size; /* of the last sample's world (all holds that many rows) */
  int32_t n_keys, cap_keys;
  hap_replay_coll *keys;
  double *sum;  /* [n_keys]: this iteration's times per key, s */
  int32_t *cnt; /* [n_keys]: tasks in sum */
  int32_t max_iters;
};

static hap_status oom(hap_err *err) {
  return hap_err_set(err, HAP_ENOMEM, "collective replay: out of memory");
}

void hap_replay_colls_free(hap_replay_colls *c) {
  for (int32_t i = 0; c->v != NULL && i < c->n; i++) {
    free(c->v[i].ranks);
    free(c->v[i].samples_s);
  }
  free(c->v);
  memset(c, 0, sizeof *c);
}

void hap_coll_timer_destroy(hap_coll_timer *x) {
  if (x == NULL)
    return;
  hap_replay_colls keys = {x->n_keys, x->keys, 0};
  hap_replay_colls_free(&keys);
  free(x->task);
  free(x->key_of);
  free(x->all);
  free(x->sum);
  free(x->cnt);
  free(x);
}

/* The key of (kind, ranks, bytes), added when new; -1 when out of memory. */
static int32_t key_of(hap_coll_timer *x, hap_coll_kind kind, const int32_t *ranks, int32_t m,
                      int64_t bytes) {
  for (int32_t i = 0; i < x->n_keys; i++) {
    const hap_replay_coll *k = &x->keys[i];
    if (k->kind == kind && k->bytes == bytes && k->n_ranks == m &&
        memcmp(k->ranks, ranks, (size_t)m * sizeof *ranks) == 0)
      return i;
  }
  if (HAP_VEC_RESERVE(x->keys, x->cap_keys, (int64_t)x->n_keys + 1, 8) != 0)
    return -1;
  hap_replay_coll *k = &x->keys[x->n_keys];
  *k = (hap_replay_coll){.kind = kind, .n_ranks = m, .bytes = bytes};
  k->ranks = malloc((size_t)m * sizeof *k->ranks);
  k->samples_s = malloc(((size_t)x->max_iters + 1) * sizeof *k->samples_s);
  if (k->ranks == NULL || k->samples_s == NULL) {
    free(k->ranks);
    free(k->samples_s);
    return -1;
  }
  memcpy(k->ranks, ranks, (size_t)m * sizeof *ranks);
  return x->n_keys++;
}

/* Task t's keys into keys[s] per sub-group s (-1: not timed there); *timed: in some sub-group.
 * per_rank, sub and ranks: n_devices entries of scratch. */
static hap_status task_keys(hap_coll_timer *x, int32_t t, double *per_rank, double *sub,
                            int32_t *ranks, int32_t *keys, bool *timed, hap_err *err) {
  *timed = false;
  hap_lowered *lw = x->lw;
  const hap_task *k = &lw->tasks[t];
  HAP_TRY(hap_lowered_coll_moved_bytes(lw, NULL, t, per_rank, err));
  int32_t ns = hap_lowered_n_subgroups(lw, k->span), m = hap_lowered_subgroup_size(lw, k->span);
  for (int32_t s = 0; s < ns; s++) {
    keys[s] = -1;
    if (m <= 1)
      continue; /* one device: priced 0 */
    for (int32_t i = 0; i < m; i++) {
      ranks[i] = hap_lowered_subgroup_member(lw, k->span, s, i);
      sub[i] = per_rank[ranks[i]];
    }
    double bytes = hap_coll_fit_bytes(k->coll, k->impl, hap_coll_bytes_of(sub, m));
    if (!(bytes >= 0.5) || !(bytes < 9e18))
      continue; /* moves nothing (a re-shard priced 0), or no size a profile can store */
    if ((keys[s] = key_of(x, k->coll, ranks, m, llround(bytes))) < 0)
      return oom(err);
    *timed = true;
  }
  return HAP_OK;
}

hap_status hap_coll_timer_create(hap_lowered *lw, int32_t max_iters, hap_coll_timer **out,
                                 hap_err *err) {
  *out = NULL;
  hap_coll_timer *x = calloc(1, sizeof *x);
  if (x == NULL)
    return oom(err);
  size_t nt = (size_t)lw->n_tasks, nd = (size_t)lw->n_devices;
  x->lw = lw;
  x->max_iters = max_iters;
  x->task = malloc((nt + 1) * sizeof *x->task);
  x->key_of = malloc((nt * nd + 1) * sizeof *x->key_of);
  double *per_rank = malloc((nd + 1) * sizeof *per_rank);
  double *sub = malloc((nd + 1) * sizeof *sub);
  int32_t *ranks = malloc((nd + 1) * sizeof *ranks);
  hap_status st = x->task && x->key_of && per_rank && sub && ranks ? HAP_OK : oom(err);
  for (int32_t t = 0; t < lw->n_tasks && st == HAP_OK; t++) {
    const hap_task *k = &lw->tasks[t];
    if (k->kind != HAP_TASK_COLLECTIVE)
      continue;
    int32_t *keys = x->key_of + (size_t)x->n_tasks * nd;
    bool timed = false;
    st = task_keys(x, t, per_rank, sub, ranks, keys, &timed, err);
    if (st == HAP_OK && timed)
      x->task[x->n_tasks++] = t;
  }
  free(per_rank);
  free(sub);
  free(ranks);
  if (st == HAP_OK) {
    x->sum = malloc(((size_t)x->n_keys + 1) * sizeof *x->sum);
    x->cnt = malloc(((size_t)x->n_keys + 1) * sizeof *x->cnt);
    if (x->sum == NULL || x->cnt == NULL)
      st = oom(err);
  }
  if (st != HAP_OK) {
    hap_coll_timer_destroy(x);
    return st;
  }
  *out = x;
  return HAP_OK;
}

const int32_t *hap_coll_timer_tasks(const hap_coll_timer *x, int32_t *n) {
  *n = x->n_tasks;
  return x->task;
}

hap_status hap_coll_timer_sample(hap_coll_timer *x, const double *mine, hap_comm *world,
                                 hap_err *err) {
  if (x->n_tasks == 0)
    return HAP_OK;
  if (x->all == NULL || x->world_size != world->size) {
    free(x->all);
    x->world_size = world->size;
    if ((x->all = malloc((size_t)world->size * (size_t)x->n_tasks * sizeof *x->all)) == NULL)
      return oom(err);
  }
  HAP_TRY(world->ops->all_gather(world, mine, x->all, (int64_t)x->n_tasks * (int64_t)sizeof *mine,
                                 err));
  hap_lowered *lw = x->lw;
  memset(x->sum, 0, (size_t)x->n_keys * sizeof *x->sum);
  memset(x->cnt, 0, (size_t)x->n_keys * sizeof *x->cnt);
  for (int32_t j = 0; j < x->n_tasks; j++) {
    const hap_task *k = &lw->tasks[x->task[j]];
    int32_t ns = hap_lowered_n_subgroups(lw, k->span), m = hap_lowered_subgroup_size(lw, k->span);
    for (int32_t s = 0; s < ns; s++) {
      int32_t key = x->key_of[(size_t)j * (size_t)lw->n_devices + (size_t)s];
      if (key < 0)
        continue;
      double fastest = INFINITY;
      for (int32_t i = 0; i < m; i++) {
        int32_t d = hap_lowered_subgroup_member(lw, k->span, s, i);
        double v = d < world->size ? x->all[(size_t)d * (size_t)x->n_tasks + (size_t)j] : -1;
        if (v < 0)
          return HAP_OK; /* not run everywhere: no sample this iteration */
        fastest = fmin(fastest, v);
      }
      x->sum[key] += fastest;
      x->cnt[key]++;
    }
  }
  for (int32_t i = 0; i < x->n_keys; i++)
    if (x->cnt[i] == 0 || x->keys[i].n_samples >= x->max_iters)
      return HAP_OK;
  for (int32_t i = 0; i < x->n_keys; i++) {
    hap_replay_coll *k = &x->keys[i];
    k->samples_s[k->n_samples++] = x->sum[i] / x->cnt[i];
  }
  return HAP_OK;
}

void hap_coll_timer_take(hap_coll_timer *x, int32_t warmup, hap_replay_colls *out) {
  *out = (hap_replay_colls){x->n_keys, x->keys, warmup};
  x->keys = NULL;
  x->n_keys = x->cap_keys = 0;
}

/* ---- into a profile ---------------------------------------------------------------------- */

static int cmp_key_bytes(const void *a, const void *b) {
  int64_t x = (*(const hap_replay_coll *const *)a)->bytes;
  int64_t y = (*(const hap_replay_coll *const *)b)->bytes;
  return (x > y) - (x < y);
}

static bool same_group(const hap_replay_coll *a, const hap_replay_coll *b) {
  return a->kind == b->kind && a->n_ranks == b->n_ranks &&
         memcmp(a->ranks, b->ranks, (size_t)a->n_ranks * sizeof *a->ranks) == 0;
}

/* "plan" over every device of p in order, else "plan:<id>-<id>-..." (false: too long). */
static bool group_name(const hap_profile *p, const hap_replay_coll *k, char *buf, size_t len) {
  bool world = k->n_ranks == p->n_devices;
  for (int32_t i = 0; i < k->n_ranks && world; i++)
    world = k->ranks[i] == i;
  size_t n = (size_t)snprintf(buf, len, "%s", HAP_PROFILE_PLAN_GROUP);
  for (int32_t i = 0; i < k->n_ranks && !world && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%c%d", i == 0 ? ':' : '-', k->ranks[i]);
  return n < len;
}

/* One group's keys (same kind and ranks, sorted by bytes) as a sweep of p. */
static hap_status add_group(const hap_replay_colls *c, hap_replay_coll *const *keys, int32_t n,
                            hap_profile *p, hap_err *err) {
  const hap_replay_coll *k0 = keys[0];
  char name[256];
  if (!group_name(p, k0, name, sizeof name))
    return hap_err_set(err, HAP_EINVAL, "collective replay: a sub-group of %d devices has no name",
                       k0->n_ranks);
  if (hap_profile_find_coll(p, k0->kind, name) != NULL)
    return hap_err_set(err, HAP_EINVAL,
                       "collective replay: the profile already has %s group '%s' (one replay per "
                       "profile)",
                       hap_coll_kind_name(k0->kind), name);
  for (int32_t i = 0; i < k0->n_ranks; i++)
    if (k0->ranks[i] < 0 || k0->ranks[i] >= p->n_devices)
      return hap_err_set(err, HAP_EINVAL, "collective replay: device %d is not in the profile",
                         k0->ranks[i]);
  int32_t reps = k0->n_samples, idx = -1;
  HAP_TRY(hap_profile_add_coll(p, k0->kind, name, k0->ranks, k0->n_ranks, n, reps, &idx, err));
  hap_profile_coll *pc = &p->colls[idx];
  pc->warmup = c->warmup;
  pc->iters = 1;
  for (int32_t i = 0; i < n; i++) {
    pc->sizes_bytes[i] = keys[i]->bytes;
    memcpy(pc->samples_s + (size_t)i * (size_t)reps, keys[i]->samples_s,
           (size_t)reps * sizeof(double));
  }
  return HAP_OK;
}

hap_status hap_replay_colls_to_profile(const hap_replay_colls *c, hap_profile *p, hap_err *err) {
  if (c->n <= 0)
    return HAP_OK;
  for (int32_t i = 0; i < c->n; i++)
    if (c->v[i].n_samples < 1 || c->v[i].n_samples != c->v[0].n_samples)
      return hap_err_set(err, HAP_EINVAL,
                         "collective replay: %d samples of one collective, %d of another, expected "
                         "the same number >= 1",
                         c->v[i].n_samples, c->v[0].n_samples);
  hap_replay_coll **group = malloc((size_t)c->n * sizeof(hap_replay_coll *));
  bool *done = calloc((size_t)c->n, sizeof *done);
  hap_status st = group && done ? HAP_OK : oom(err);
  for (int32_t i = 0; i < c->n && st == HAP_OK; i++) {
    if (done[i])
      continue;
    int32_t n = 0;
    for (int32_t j = i; j < c->n; j++)
      if (!done[j] && same_group(&c->v[i], &c->v[j])) {
        done[j] = true;
        group[n++] = &c->v[j];
      }
    qsort(group, (size_t)n, sizeof(hap_replay_coll *), cmp_key_bytes);
    st = add_group(c, group, n, p, err);
  }
  free(group);
  free(done);
  if (st == HAP_OK)
    st = hap_profile_compute_stats(p, err);
  if (st == HAP_OK)
    st = hap_profile_fit_rel(p, err);
  return st;
}
