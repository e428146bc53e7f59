/* plan_sim.c — price a lowered plan, fold identical devices, run the engine, collect results
 * (plan_sim.h). */
#include "simulate/plan_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/vec.h"
#include "plan/replica.h"
#include "simulate/stage_times.h"

static hap_status oom(hap_err *err) {
  return hap_err_set(err, HAP_ENOMEM, "simulator: out of memory");
}

void hap_plan_sim_destroy(hap_plan_sim *ps) {
  if (ps == NULL)
    return;
  free(ps->group);
  free(ps->group_rep);
  free(ps->dur_s);
  free(ps->start_s);
  free(ps->end_s);
  free(ps->devices);
  free(ps->critical);
  free(ps);
}

double hap_plan_sim_duration(const hap_plan_sim *ps, int32_t t, int32_t d) {
  return ps->dur_s[(size_t)ps->group[d] * (size_t)ps->n_tasks + (size_t)t];
}

/* A memory-bound kernel touching `bytes` on device d, s. */
/* A memory-bound task's time: `bytes` moved at the device's bandwidth for the task's kind (the
 * SGD update's own measured rate when the profile has one, else the copy bandwidth), s. */
static double memory_time(const hap_cluster *c, int32_t d, hap_task_kind kind, double bytes) {
  const hap_device *dev = &c->devices[d];
  if (bytes <= 0)
    return 0;
  double bw =
      kind == HAP_TASK_UPDATE && dev->update_bw_Bps > 0 ? dev->update_bw_Bps : dev->memory_bw_Bps;
  return dev->launch_s + (bw > 0 ? bytes / bw : 0);
}

typedef struct price_memo {
  int32_t cls;
  double key; /* local length or bytes */
  double s;
} price_memo;

/* Every sub-group of both spans, summarised for pricing: groups[span][sub]. The sub-groups of a
 * span run at the same time; those that cross a host's NIC share it (hap_group_share_nics). */
typedef struct span_groups {
  hap_group *g[2];
} span_groups;

static void span_groups_free(span_groups *sg) {
  free(sg->g[0]);
  free(sg->g[1]);
  sg->g[0] = sg->g[1] = NULL;
}

/* How many sub-groups of span sp share the busiest NIC: per host, the sub-groups spanning more
 * than one host with a run of members on it (hap_group_share_nics); at least 1. `ranks` holds
 * n_devices entries, `crossing` n_hosts (scratch). */
static int32_t span_sharers(const hap_lowered *lw, const hap_cluster *c, hap_task_span sp,
                            int32_t *ranks, int32_t *crossing) {
  int32_t ns = hap_lowered_n_subgroups(lw, sp), m = hap_lowered_subgroup_size(lw, sp);
  memset(crossing, 0, (size_t)c->n_hosts * sizeof *crossing);
  for (int32_t k = 0; k < ns; k++) {
    bool hosts = false;
    for (int32_t i = 0; i < m; i++) {
      ranks[i] = hap_lowered_subgroup_member(lw, sp, k, i);
      hosts = hosts || c->devices[ranks[i]].host != c->devices[ranks[0]].host;
    }
    for (int32_t i = 0; i < m && hosts; i++)
      if (i == 0 || c->devices[ranks[i]].host != c->devices[ranks[i - 1]].host)
        crossing[c->devices[ranks[i]].host]++;
  }
  int32_t sharers = 1;
  for (int32_t h = 0; h < c->n_hosts; h++)
    sharers = crossing[h] > sharers ? crossing[h] : sharers;
  return sharers;
}

hap_status hap_plan_sim_nic_sharers(const hap_lowered *lw, const hap_cluster *c, hap_task_span sp,
                                    int32_t *sharers, hap_err *err) {
  int32_t *ranks = malloc((size_t)lw->n_devices * sizeof *ranks);
  int32_t *crossing = calloc((size_t)c->n_hosts, sizeof *crossing);
  if (ranks && crossing)
    *sharers = span_sharers(lw, c, sp, ranks, crossing);
  hap_status st = ranks && crossing ? HAP_OK : oom(err);
  free(ranks);
  free(crossing);
  return st;
}

static hap_status span_groups_init(const hap_lowered *lw, const hap_cluster *c, span_groups *sg,
                                   hap_err *err) {
  memset(sg, 0, sizeof *sg);
  int32_t *ranks = malloc((size_t)lw->n_devices * sizeof *ranks);
  int32_t *crossing = calloc((size_t)c->n_hosts, sizeof *crossing);
  hap_status st = ranks && crossing ? HAP_OK : oom(err);
  for (int sp = 0; sp < 2 && st == HAP_OK; sp++) {
    int32_t ns = hap_lowered_n_subgroups(lw, (hap_task_span)sp),
            m = hap_lowered_subgroup_size(lw, (hap_task_span)sp);
    if ((sg->g[sp] = malloc((size_t)ns * sizeof *sg->g[sp])) == NULL) {
      st = oom(err);
      break;
    }
    for (int32_t k = 0; k < ns && st == HAP_OK; k++) {
      for (int32_t i = 0; i < m; i++)
        ranks[i] = hap_lowered_subgroup_member(lw, (hap_task_span)sp, k, i);
      st = hap_group_init(c, ranks, m, &sg->g[sp][k], err);
    }
    int32_t sharers = span_sharers(lw, c, (hap_task_span)sp, ranks, crossing);
    for (int32_t k = 0; k < ns && st == HAP_OK; k++)
      hap_group_share_nics(&sg->g[sp][k], sharers);
  }
  free(ranks);
  free(crossing);
  if (st != HAP_OK)
    span_groups_free(sg);
  return st;
}

/* The policy on a priced duration: the task runs `repeats` times, and a recomputation runs its
 * forward task again first (dur holds the earlier tasks' rows). */
static double policy_time(const hap_lowered *lw, const hap_task *k, const double *dur, int32_t d,
                          double s) {
  if (k->repeats != 1)
    s *= k->repeats;
  if (k->recompute_of >= 0)
    s += dur[(size_t)k->recompute_of * (size_t)lw->n_devices + (size_t)d];
  return s;
}

/* Whether device d holds the policy's half-precision values in float32 (hap-run's CPU backend). */
static bool emulates(const hap_lowered *lw, const hap_cluster *c, int32_t d) {
  return hap_device_emulates_dtype(&c->devices[d], hap_policy_compute_dtype(&lw->plan->policy));
}

/* The rounding pass hap-run's emulated storage adds to all-reduce task t on device d: the summed
 * half-precision values are rounded in their float32 buffer (run.c, round_grads), one read and one
 * write of per_rank_bytes (already in float32 bytes). Its rate: the update bandwidth when the
 * profile measured one (a streaming pass over the plan's parameters with every rank at it at once,
 * as every rank rounds its sum at once; a gradient is as large as its parameter), else the memory
 * bandwidth. 0 where nothing is emulated (a GPU's half-precision sum has no such pass). */
static double emulated_round_s(const hap_lowered *lw, const hap_cluster *c, int32_t t, int32_t d,
                               double per_rank_bytes) {
  if (lw->tasks[t].coll != HAP_COLL_ALL_REDUCE || hap_lowered_emulated_scale(lw, t) == 1 ||
      !emulates(lw, c, d))
    return 0;
  const hap_device *dev = &c->devices[d];
  return 2 * per_rank_bytes / (dev->update_bw_Bps > 0 ? dev->update_bw_Bps : dev->memory_bw_Bps);
}

/* A collective's duration on every device: its sub-group's time for the bytes its members hold
 * (hap_lowered_coll_moved_bytes), and an emulated all-reduce's rounding pass (emulated_round_s)
 * unless that time was measured in the plan's replay (hap_coll_measured), which ran it. */
static hap_status price_collective(hap_lowered *lw, const hap_cluster *c, int32_t t,
                                   const span_groups *sg, double *per_rank, double *sub_bytes,
                                   double *dur, hap_err *err) {
  double *row = dur + (size_t)t * (size_t)lw->n_devices;
  const hap_task *k = &lw->tasks[t];
  HAP_TRY(hap_lowered_coll_moved_bytes(lw, c, t, per_rank, err));
  int32_t ns = hap_lowered_n_subgroups(lw, k->span), m = hap_lowered_subgroup_size(lw, k->span);
  for (int32_t s = 0; s < ns; s++) {
    for (int32_t i = 0; i < m; i++)
      sub_bytes[i] = per_rank[hap_lowered_subgroup_member(lw, k->span, s, i)];
    hap_coll_bytes b = hap_coll_bytes_of(sub_bytes, m);
    const hap_group *g = &sg->g[k->span][s];
    double sec = m > 1 ? hap_coll_time(g, k->coll, k->impl, b) : 0;
    /* a time measured in the plan's replay holds the rounding pass already */
    bool measured = m > 1 && hap_coll_measured(g, k->coll, k->impl, b);
    if (!isfinite(sec) || sec < 0)
      return hap_err_set(err, HAP_EINVAL, "task '%s': the cluster prices it at %g s", k->name, sec);
    for (int32_t i = 0; i < m; i++) {
      int32_t d = hap_lowered_subgroup_member(lw, k->span, s, i);
      double round_s = measured ? 0 : emulated_round_s(lw, c, t, d, per_rank[d]);
      row[d] = policy_time(lw, k, dur, d, sec + round_s);
    }
  }
  return HAP_OK;
}

/* Durations of every task on every device: dur[t * n + d], s. Devices of one class with the same
 * local length (compute) or bytes (local, update) are priced once per task. */
static hap_status price(hap_lowered *lw, const hap_cluster *c, const int32_t *cls, double *dur,
                        hap_err *err) {
  int32_t n = lw->n_devices;
  hap_status st = HAP_OK;
  double *per_rank = malloc((size_t)n * sizeof *per_rank);
  double *sub_bytes = malloc((size_t)n * sizeof *sub_bytes);
  hap_task_work *w = malloc(sizeof *w);
  enum { MEMO = 32 };
  price_memo memo[MEMO];
  span_groups sg = {{NULL, NULL}};
  if (!sub_bytes || !per_rank || !w) {
    st = oom(err);
    goto out;
  }
  if ((st = span_groups_init(lw, c, &sg, err)) != HAP_OK)
    goto out;
  for (int32_t t = 0; t < lw->n_tasks && st == HAP_OK; t++) {
    const hap_task *k = &lw->tasks[t];
    double *row = dur + (size_t)t * (size_t)n;
    if (k->kind == HAP_TASK_COLLECTIVE) {
      st = price_collective(lw, c, t, &sg, per_rank, sub_bytes, dur, err);
      continue;
    }
    /* the key that decides the time on a device of a class: compute -> local length */
    const int64_t *len = NULL;
    if (k->kind == HAP_TASK_COMPUTE) {
      const hap_step *s = &lw->plan->steps[k->step];
      hap_op_io full;
      hap_graph_node_io(lw->priced_graph, k->node, &full);
      int64_t extent = hap_variant_extent(&full, &s->variant);
      if (extent > 0 &&
          (len = hap_lowered_lengths(lw, extent, s->variant.granule, s->segment)) == NULL) {
        st = oom(err);
        break;
      }
    }
    int n_memo = 0;
    double emu = k->kind == HAP_TASK_LOCAL ? hap_lowered_emulated_scale(lw, t) : 1;
    for (int32_t d = 0; d < n && st == HAP_OK; d++) {
      double key = len ? (double)len[d % lw->group_size] : -1;
      double s = -1;
      if (k->kind != HAP_TASK_COMPUTE) {
        if ((st = hap_lowered_priced_work(lw, t, d, w, err)) != HAP_OK)
          break;
        if (emu != 1 && emulates(lw, c, d))
          w->bytes *= emu; /* a local copy of half-precision values held in float32 */
        key = w->bytes;
      }
      for (int m = 0; m < n_memo && s < 0; m++)
        if (memo[m].cls == cls[d] && memo[m].key == key)
          s = memo[m].s;
      if (s < 0) {
        if (k->kind == HAP_TASK_COMPUTE) {
          if ((st = hap_lowered_priced_work(lw, t, d, w, err)) != HAP_OK)
            break;
          s = w->len == 0 ? 0 : hap_compute_time(c, d, w->op, &w->io, w->backward);
        } else {
          s = memory_time(c, d, k->kind, w->bytes);
        }
        if (!isfinite(s) || s < 0) {
          st = hap_err_set(err, HAP_EINVAL, "task '%s' on device '%s': priced at %g s", k->name,
                           c->devices[d].name, s);
          break;
        }
        if (n_memo < MEMO)
          memo[n_memo++] = (price_memo){cls[d], key, s};
      }
      row[d] = policy_time(lw, k, dur, d, s);
    }
  }
out:
  span_groups_free(&sg);
  free(sub_bytes);
  free(per_rank);
  free(w);
  return st;
}

hap_status hap_plan_sim_price(hap_lowered *lw, const hap_cluster *c, double *dur, hap_err *err) {
  if (c->n_devices != lw->n_devices)
    return hap_err_set(err, HAP_EINVAL, "simulator: the plan has %d devices, the cluster %d",
                       lw->n_devices, c->n_devices);
  int32_t *cls = malloc((size_t)lw->n_devices * sizeof *cls);
  if (cls == NULL)
    return oom(err);
  hap_device_classes(c, cls);
  hap_status st = price(lw, c, cls, dur, err);
  free(cls);
  return st;
}

/* Fold devices with identical duration columns into groups (exact: see plan_sim.h). */
static hap_status fold(hap_plan_sim *ps, const double *dur, bool no_fold, hap_err *err) {
  int32_t n = ps->n_devices, nt = ps->n_tasks;
  uint64_t *hash = malloc((size_t)n * sizeof *hash);
  ps->group = malloc((size_t)n * sizeof *ps->group);
  ps->group_rep = malloc((size_t)n * sizeof *ps->group_rep);
  if (!hash || !ps->group || !ps->group_rep) {
    free(hash);
    return oom(err);
  }
  for (int32_t d = 0; d < n; d++)
    hash[d] = HAP_KEY_HASH_BASIS;
  for (int32_t t = 0; t < nt; t++)
    for (int32_t d = 0; d < n; d++) {
      uint64_t bits;
      double v = dur[(size_t)t * (size_t)n + (size_t)d];
      memcpy(&bits, &v, sizeof bits);
      hash[d] = hap_fnv1a_word(hash[d], bits);
    }
  ps->n_groups = 0;
  for (int32_t d = 0; d < n; d++) {
    ps->group[d] = -1;
    for (int32_t g = 0; g < ps->n_groups && !no_fold && ps->group[d] < 0; g++) {
      int32_t r = ps->group_rep[g];
      if (hash[r] != hash[d])
        continue;
      bool same = true;
      for (int32_t t = 0; t < nt && same; t++)
        same = dur[(size_t)t * (size_t)n + (size_t)r] == dur[(size_t)t * (size_t)n + (size_t)d];
      if (same)
        ps->group[d] = g;
    }
    if (ps->group[d] < 0) {
      ps->group_rep[ps->n_groups] = d;
      ps->group[d] = ps->n_groups++;
    }
  }
  free(hash);
  return HAP_OK;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* Scratch for collective_ids, n_devices entries each. */
typedef struct coll_scratch {
  int32_t *members; /* one sub-group's simulated devices */
  int32_t *local;   /* [n_groups]: which of this task's collectives a simulated device joins */
  int32_t *size;    /* per collective: its simulated devices */
  int32_t *engine;  /* per collective: the engine id */
} coll_scratch;

/* The engine collective each simulated device joins for collective task t: coll[g]. A sub-group
 * of the task's span folds into a set of simulated devices; sub-groups with the same set are one
 * engine collective. Folding is exact only when every simulated device is in one set: otherwise
 * *folded_ok is false and nothing is added. */
static hap_status collective_ids(const hap_plan_sim *ps, int32_t t, hap_sim *sim, coll_scratch *x,
                                 int32_t *coll, bool *folded_ok, hap_err *err) {
  const hap_lowered *lw = ps->lw;
  const hap_task *k = &lw->tasks[t];
  int32_t ns = hap_lowered_n_subgroups(lw, k->span), m = hap_lowered_subgroup_size(lw, k->span),
          n_local = 0;
  *folded_ok = true;
  for (int32_t g = 0; g < ps->n_groups; g++)
    x->local[g] = -1;
  for (int32_t s = 0; s < ns && *folded_ok; s++) {
    int32_t u = 0;
    for (int32_t i = 0; i < m; i++)
      x->members[i] = ps->group[hap_lowered_subgroup_member(lw, k->span, s, i)];
    qsort(x->members, (size_t)m, sizeof *x->members, cmp_i32);
    for (int32_t i = 0; i < m; i++)
      if (i == 0 || x->members[i] != x->members[i - 1])
        x->members[u++] = x->members[i];
    int32_t li = x->local[x->members[0]];
    if (li < 0) {
      li = n_local++;
      x->size[li] = u;
    }
    *folded_ok = x->size[li] == u;
    for (int32_t i = 0; i < u && *folded_ok; i++) {
      *folded_ok = x->local[x->members[i]] < 0 || x->local[x->members[i]] == li;
      x->local[x->members[i]] = li;
    }
  }
  if (!*folded_ok)
    return HAP_OK;
  for (int32_t li = 0; li < n_local; li++)
    HAP_TRY(hap_sim_new_collective(sim, &x->engine[li], err));
  for (int32_t g = 0; g < ps->n_groups; g++) /* every simulated device is in some sub-group */
    coll[g] = x->local[g] >= 0 ? x->engine[x->local[g]] : -1;
  return HAP_OK;
}

/* Build the engine over the groups and run it; *folded_ok false (and nothing run) when the folding
 * does not respect the collectives' sub-groups. */
static hap_status simulate(hap_plan_sim *ps, const double *dur, bool serial, hap_sim *sim,
                           bool *folded_ok, hap_err *err) {
  const hap_lowered *lw = ps->lw;
  int32_t G = ps->n_groups, n = ps->n_devices;
  int32_t cap = 16;
  int32_t *deps = malloc((size_t)cap * sizeof *deps);
  int32_t *coll = malloc((size_t)(G > 0 ? G : 1) * sizeof *coll);
  coll_scratch x = {malloc((size_t)n * sizeof(int32_t)),
                    malloc((size_t)(G > 0 ? G : 1) * sizeof(int32_t)),
                    malloc((size_t)n * sizeof(int32_t)), malloc((size_t)n * sizeof(int32_t))};
  hap_status st = HAP_OK;
  *folded_ok = true;
  if (!deps || !coll || !x.members || !x.local || !x.size || !x.engine)
    st = oom(err);
  for (int32_t t = 0; t < lw->n_tasks && st == HAP_OK && *folded_ok; t++) {
    const hap_task *k = &lw->tasks[t];
    if (k->kind == HAP_TASK_COLLECTIVE &&
        ((st = collective_ids(ps, t, sim, &x, coll, folded_ok, err)) != HAP_OK || !*folded_ok))
      break;
    if (HAP_VEC_RESERVE(deps, cap, k->n_deps, 16) != 0) {
      st = oom(err);
      break;
    }
    for (int32_t g = 0; g < G && st == HAP_OK; g++) {
      for (int32_t i = 0; i < k->n_deps; i++)
        deps[i] = lw->deps[k->dep0 + i] * G + g; /* engine id = task * G + group */
      hap_sim_task e = {.name = k->name,
                        .device = g,
                        .stream = k->kind == HAP_TASK_COLLECTIVE && !serial ? HAP_SIM_COMM
                                                                            : HAP_SIM_COMPUTE,
                        .kind = k->kind == HAP_TASK_COLLECTIVE ? HAP_SIM_COLLECTIVE : HAP_SIM_FIXED,
                        .duration_s = dur[(size_t)t * (size_t)n + (size_t)ps->group_rep[g]],
                        .deps = deps,
                        .n_deps = k->n_deps,
                        .collective = k->kind == HAP_TASK_COLLECTIVE ? coll[g] : -1};
      st = hap_sim_add_task(sim, &e, NULL, err);
    }
  }
  free(deps);
  free(coll);
  free(x.members);
  free(x.local);
  free(x.size);
  free(x.engine);
  if (st == HAP_OK && *folded_ok)
    st = hap_sim_run(sim, NULL, err);
  return st;
}

static hap_status collect(hap_plan_sim *ps, const double *dur, hap_sim *sim, hap_err *err) {
  int32_t G = ps->n_groups, nt = ps->n_tasks, n = ps->n_devices;
  if (G < 1)
    return hap_err_set(err, HAP_EINVAL, "simulator: no devices");
  size_t cells = (size_t)G * (size_t)nt;
  if (cells == 0)
    cells = 1;
  ps->dur_s = malloc(cells * sizeof *ps->dur_s);
  ps->start_s = malloc(cells * sizeof *ps->start_s);
  ps->end_s = malloc(cells * sizeof *ps->end_s);
  ps->devices = calloc((size_t)n, sizeof *ps->devices);
  const hap_sim_results *r = hap_sim_results_get(sim);
  if (!ps->dur_s || !ps->start_s || !ps->end_s || !ps->devices || r == NULL)
    return oom(err);
  ps->critical = malloc((size_t)(r->n_critical ? r->n_critical : 1) * sizeof *ps->critical);
  if (ps->critical == NULL)
    return oom(err);
  ps->iteration_s = r->makespan_s;
  ps->n_events = r->n_events;
  ps->n_engine_tasks = r->n_tasks;
  for (int32_t t = 0; t < nt; t++)
    for (int32_t g = 0; g < G; g++) {
      hap_sim_record rec;
      HAP_TRY(hap_sim_task_record(sim, t * G + g, &rec, err));
      size_t i = (size_t)g * (size_t)nt + (size_t)t;
      ps->dur_s[i] = dur[(size_t)t * (size_t)n + (size_t)ps->group_rep[g]];
      ps->start_s[i] = rec.start_s;
      ps->end_s[i] = rec.end_s;
    }
  for (int32_t d = 0; d < n; d++) {
    const hap_sim_device_stats *s = &r->devices[ps->group[d]];
    hap_plan_sim_device *o = &ps->devices[d];
    o->compute_s = s->busy_s[HAP_SIM_COMPUTE];
    o->comm_s = s->busy_s[HAP_SIM_COMM];
    o->overlap_s = s->overlap_s;
    o->exposed_comm_s = s->exposed_comm_s;
    o->idle_s = s->idle_s;
    o->memory_bytes = ps->lw->plan->device_memory_bytes[d];
  }
  ps->n_critical = r->n_critical;
  for (int32_t i = 0; i < r->n_critical; i++)
    ps->critical[i] = (hap_plan_sim_crit){
        r->critical[i].task / G, ps->group_rep[r->critical[i].task % G], r->critical[i].via};
  return HAP_OK;
}

hap_status hap_plan_sim_run(hap_lowered *lw, const hap_cluster *c, const hap_plan_sim_options *o,
                            hap_plan_sim **out, hap_err *err) {
  *out = NULL;
  if (c->n_devices != lw->n_devices)
    return hap_err_set(err, HAP_EINVAL, "simulator: the plan has %d devices, the cluster %d",
                       lw->n_devices, c->n_devices);
  hap_plan_sim *ps = calloc(1, sizeof *ps);
  size_t cells = (size_t)lw->n_tasks * (size_t)lw->n_devices;
  double *dur = malloc((cells ? cells : 1) * sizeof *dur);
  int32_t *cls = malloc((size_t)lw->n_devices * sizeof *cls);
  hap_sim *sim = NULL;
  hap_status st = HAP_OK;
  if (!ps || !dur || !cls) {
    st = oom(err);
    goto out;
  }
  ps->lw = lw;
  ps->cluster = c;
  ps->n_devices = lw->n_devices;
  ps->n_tasks = lw->n_tasks;
  hap_device_classes(c, cls);
  if ((st = price(lw, c, cls, dur, err)) != HAP_OK)
    goto out;
  for (int32_t t = 0; o != NULL && o->skip_grad_sync && t < lw->n_tasks; t++)
    if (hap_task_is_grad_sync(lw, t))
      for (int32_t d = 0; d < lw->n_devices; d++)
        dur[(size_t)t * (size_t)lw->n_devices + (size_t)d] = 0;
  bool no_fold = o != NULL && o->no_fold, folded_ok = false;
  for (int attempt = 0; attempt < 2 && !folded_ok; attempt++) {
    if (attempt > 0) { /* sub-group collectives split a folded device: every device alone */
      free(ps->group);
      free(ps->group_rep);
      hap_sim_destroy(sim);
      sim = NULL;
      no_fold = true;
    }
    if ((st = fold(ps, dur, no_fold, err)) != HAP_OK ||
        (st = hap_sim_create(ps->n_groups, &sim, err)) != HAP_OK ||
        (st = simulate(ps, dur, o != NULL && o->serial, sim, &folded_ok, err)) != HAP_OK)
      goto out;
  }
  st = collect(ps, dur, sim, err);
out:
  hap_sim_destroy(sim);
  free(dur);
  free(cls);
  if (st != HAP_OK) {
    hap_plan_sim_destroy(ps);
    return st;
  }
  *out = ps;
  return HAP_OK;
}

static int64_t ns_of(double s) { return (int64_t)llround(s * 1e9); }

hap_status hap_plan_sim_trace(hap_plan_sim *ps, hap_trace *tr, int32_t max_devices, hap_err *err) {
  int32_t n = ps->n_devices;
  if (max_devices > 0 && max_devices < n)
    n = max_devices;
  hap_task_work *w = malloc(sizeof *w);
  if (w == NULL)
    return oom(err);
  hap_status st = HAP_OK;
  for (int32_t d = 0; d < n && st == HAP_OK; d++) {
    st = hap_trace_rank(tr, HAP_TRACE_SIM, d, ps->cluster->devices[d].name);
    int pid = hap_trace_pid(HAP_TRACE_SIM, d);
    size_t g0 = (size_t)ps->group[d] * (size_t)ps->n_tasks;
    for (int32_t t = 0; t < ps->n_tasks && st == HAP_OK; t++) {
      const hap_task *k = &ps->lw->tasks[t];
      if ((st = hap_lowered_priced_work(ps->lw, t, d, w, err)) != HAP_OK)
        break;
      bool coll = k->kind == HAP_TASK_COLLECTIVE;
      hap_trace_event e = HAP_TRACE_EVENT_INIT;
      e.name = k->name;
      e.task = k->name;
      e.cat = coll ? "collective" : hap_task_kind_name(k->kind);
      e.pid = pid;
      e.tid = coll ? HAP_TRACE_LANE_COLLECTIVE : HAP_TRACE_LANE_COMPUTE;
      e.ts_ns = ns_of(ps->start_s[g0 + (size_t)t]);
      e.dur_ns = ns_of(ps->end_s[g0 + (size_t)t]) - e.ts_ns;
      e.flops = w->flops * k->repeats; /* every run in the iteration */
      e.bytes = w->bytes * k->repeats;
      st = hap_trace_complete(tr, &e);
    }
  }
  free(w);
  if (st == HAP_OK && n < ps->n_devices) {
    char buf[32];
    snprintf(buf, sizeof buf, "%d", ps->n_devices - n);
    st = hap_trace_meta(tr, "devices_left_out", buf);
  }
  if (st != HAP_OK && err->status == HAP_OK)
    return hap_err_set(err, st, "writing the trace failed");
  return st;
}

double hap_plan_sim_rescore(void *ctx, const hap_plan *p, const hap_graph *g,
                            const hap_cluster *c) {
  (void)ctx;
  hap_err err = {0};
  hap_lowered *lw = NULL;
  hap_plan_sim *ps = NULL;
  double s = HUGE_VAL;
  if (hap_lower(p, g, &lw, &err) == HAP_OK && hap_plan_sim_run(lw, c, NULL, &ps, &err) == HAP_OK)
    s = ps->iteration_s;
  hap_plan_sim_destroy(ps);
  hap_lowered_destroy(lw);
  return s;
}
