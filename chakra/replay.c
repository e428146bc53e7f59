/* replay.c — a directory of Chakra traces loaded and simulated on a hap cluster (replay.h). */
#include "chakra/replay.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"
#include "chakra/export.h"
#include "cluster/cost.h"
#include "plan/replica.h"
#include "simulate/engine.h"

static hap_status oom(hap_err *err) {
  return hap_err_set(err, HAP_ENOMEM, "chakra: out of memory");
}

/* ---- loading ------------------------------------------------------------------------------- */

enum { MAX_RANKS = 1 << 20 };

void hap_chakra_set_destroy(hap_chakra_set *s) {
  if (s == NULL)
    return;
  for (int32_t r = 0; r < s->n_ranks; r++) {
    hap_et_rank_destroy(s->ranks[r]);
    free(s->paths[r]);
  }
  free(s->ranks);
  free(s->paths);
  free(s);
}

/* The rank of "<prefix>.<rank>.et" (a decimal without leading zeros); false for other names. */
static bool rank_of(const char *name, const char *prefix, int32_t *rank) {
  size_t lp = strlen(prefix), ln = strlen(name);
  if (ln < lp + 5 || strncmp(name, prefix, lp) != 0 || name[lp] != '.' ||
      strcmp(name + ln - 3, ".et") != 0)
    return false;
  const char *p = name + lp + 1, *e = name + ln - 3;
  if (e - p > 7 || (e - p > 1 && *p == '0'))
    return false;
  int32_t v = 0;
  for (; p < e; p++) {
    if (*p < '0' || *p > '9')
      return false;
    v = v * 10 + (*p - '0');
  }
  *rank = v;
  return v < MAX_RANKS;
}

/* The ranks present in dir: present[0 .. *n) (n = the largest rank + 1). */
static hap_status scan(const char *dir, const char *prefix, bool **present, int32_t *n,
                       hap_err *err) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return hap_err_set(err, HAP_EIO, "%s: cannot read the directory: %s", dir, strerror(errno));
  int32_t cap = 0, rank;
  *present = NULL;
  *n = 0;
  hap_status st = HAP_OK;
  for (struct dirent *e; (e = readdir(d)) != NULL && st == HAP_OK;) {
    if (!rank_of(e->d_name, prefix, &rank))
      continue;
    if (HAP_VEC_RESERVE(*present, cap, rank + 1, 16) != 0) {
      st = oom(err);
      break;
    }
    for (int32_t i = *n; i <= rank; i++)
      (*present)[i] = false;
    (*present)[rank] = true;
    *n = rank + 1 > *n ? rank + 1 : *n;
  }
  closedir(d);
  if (st == HAP_OK && *n == 0)
    st = hap_err_set(err, HAP_ENOTFOUND,
                     "%s: no Chakra traces: expected %s.0.et, %s.1.et, ... (one per rank; "
                     "--chakra-prefix names another prefix)",
                     dir, prefix, prefix);
  return st;
}

hap_status hap_chakra_load(const char *dir, const char *prefix, hap_chakra_set **out,
                           hap_err *err) {
  *out = NULL;
  bool *present = NULL;
  int32_t n = 0;
  HAP_TRY(scan(dir, prefix, &present, &n, err));
  hap_chakra_set *s = calloc(1, sizeof *s);
  hap_status st = s ? HAP_OK : oom(err);
  if (st == HAP_OK) {
    s->ranks = calloc((size_t)n, sizeof(hap_et_rank *));
    s->paths = calloc((size_t)n, sizeof *s->paths);
    st = s->ranks && s->paths ? HAP_OK : oom(err);
  }
  if (st == HAP_OK)
    s->n_ranks = n;
  for (int32_t r = 0; r < n && st == HAP_OK; r++) {
    char path[4096];
    if (!hap_chakra_path(dir, prefix, r, path, sizeof path)) {
      st = hap_err_set(err, HAP_EINVAL, "%s: the path is too long", dir);
      break;
    }
    if ((s->paths[r] = strdup(path)) == NULL) {
      st = oom(err);
      break;
    }
    if (!present[r]) {
      st = hap_err_set(err, HAP_ENOTFOUND, "%s: missing: expected one trace per rank 0..%d", path,
                       n - 1);
      break;
    }
    if ((st = hap_et_read(path, &s->ranks[r], err)) != HAP_OK)
      break;
    const hap_et_rank *t = s->ranks[r];
    if (t->rank >= 0 && t->rank != r)
      st = hap_err_set(err, HAP_EPARSE, "%s: its GlobalMetadata says rank %lld, the name rank %d",
                       path, (long long)t->rank, r);
    else if (t->world_size >= 0 && t->world_size != n)
      st = hap_err_set(err, HAP_ENOTFOUND,
                       "%s: its GlobalMetadata says %lld ranks, but %s holds %s.0.et .. %s.%d.et: "
                       "expected a trace for every rank",
                       path, (long long)t->world_size, dir, prefix, prefix, n - 1);
  }
  free(present);
  if (st != HAP_OK) {
    hap_chakra_set_destroy(s);
    return st;
  }
  *out = s;
  return HAP_OK;
}

/* ---- replay -------------------------------------------------------------------------------- */

/* A node of the set: rank and index in its file. */
typedef struct ref {
  int32_t rank, node;
} ref;

typedef struct replay {
  const hap_chakra_set *s;
  const hap_cluster *c;
  hap_sim *sim;
  int64_t *off;   /* [n_ranks + 1]: the first flat index of each rank's nodes */
  int32_t *by_id; /* [total]: per rank, its node indices sorted by id */
  double *dur;    /* [total]: s */
  int32_t *coll;  /* [total]: engine collective, or -1 */
  int32_t *eid;   /* [total]: engine task */
  int64_t collectives, messages;
} replay;

static const hap_et_node *node_of(const replay *x, ref f) {
  return &x->s->ranks[f.rank]->nodes[f.node];
}
static size_t flat(const replay *x, ref f) { return (size_t)(x->off[f.rank] + f.node); }

static hap_status node_err(const replay *x, ref f, hap_status st, const char *what, hap_err *err) {
  const hap_et_node *n = node_of(x, f);
  return hap_err_set(err, st, "%s: node id %llu ('%s'): %s", x->s->paths[f.rank],
                     (unsigned long long)n->id, n->name, what);
}

static const hap_et_rank *sort_rank; /* qsort has no context argument */
static int cmp_by_id(const void *a, const void *b) {
  uint64_t x = sort_rank->nodes[*(const int32_t *)a].id;
  uint64_t y = sort_rank->nodes[*(const int32_t *)b].id;
  return (x > y) - (x < y);
}

/* Index of node `id` in rank r's file, or -1. */
static int32_t find_id(const replay *x, int32_t r, uint64_t id) {
  const hap_et_rank *t = x->s->ranks[r];
  const int32_t *v = x->by_id + x->off[r];
  int32_t lo = 0, hi = t->n_nodes;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (t->nodes[v[mid]].id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < t->n_nodes && t->nodes[v[lo]].id == id ? v[lo] : -1;
}

static hap_status index_ids(replay *x, hap_err *err) {
  for (int32_t r = 0; r < x->s->n_ranks; r++) {
    const hap_et_rank *t = x->s->ranks[r];
    int32_t *v = x->by_id + x->off[r];
    for (int32_t i = 0; i < t->n_nodes; i++)
      v[i] = i;
    sort_rank = t;
    qsort(v, (size_t)t->n_nodes, sizeof *v, cmp_by_id);
    for (int32_t i = 1; i < t->n_nodes; i++)
      if (t->nodes[v[i]].id == t->nodes[v[i - 1]].id)
        return node_err(x, (ref){r, v[i]}, HAP_EPARSE, "a second node with this id", err);
  }
  return HAP_OK;
}

static bool is_comm(int type) {
  return type == HAP_ET_COLL || type == HAP_ET_SEND || type == HAP_ET_RECV;
}

/* A node's recorded duration, s. */
static double recorded_s(const hap_et_node *n) {
  return (n->exact_us >= 0 ? n->exact_us : (double)n->duration_us) * 1e-6;
}

/* The compute time of a non-communication node on its rank's device (replay.h's rules), s. */
static double compute_s(const hap_et_rank *t, const hap_et_node *n, const hap_device *dev) {
  hap_dtype dt = HAP_F32;
  if (t->dtype == NULL || hap_dtype_parse(t->dtype, &dt) != HAP_OK)
    dt = HAP_F32;
  double s = recorded_s(n), to = hap_device_flops(dev, dt);
  if (n->num_ops > 0 && to > 0)
    return t->flops_per_s > 0 ? s * (t->flops_per_s / to) : n->num_ops / to;
  if (n->num_ops <= 0 && t->memory_Bps > 0 && dev->memory_bw_Bps > 0)
    return s * (t->memory_Bps / dev->memory_bw_Bps);
  return s;
}

/* ---- collectives ---- */

typedef struct coll_entry {
  const char *pg; /* "" = unnamed */
  int32_t rank, node;
} coll_entry;

static int cmp_coll(const void *a, const void *b) {
  const coll_entry *x = a, *y = b;
  int c = strcmp(x->pg, y->pg);
  if (c != 0)
    return c;
  if (x->rank != y->rank)
    return (x->rank > y->rank) - (x->rank < y->rank);
  return (x->node > y->node) - (x->node < y->node);
}

/* hap's collective for a Chakra type. Reduce, gather and scatter are priced as the hap
 * collective that moves the same data (broadcast, all-gather, reduce-scatter); a barrier as an
 * all-reduce of nothing. */
static hap_coll_kind coll_kind(int type) {
  switch (type) {
  case HAP_ET_ALL_GATHER:
  case HAP_ET_GATHER: return HAP_COLL_ALL_GATHER;
  case HAP_ET_REDUCE_SCATTER:
  case HAP_ET_REDUCE_SCATTER_BLOCK:
  case HAP_ET_SCATTER: return HAP_COLL_REDUCE_SCATTER;
  case HAP_ET_ALL_TO_ALL: return HAP_COLL_ALL_TO_ALL;
  case HAP_ET_REDUCE:
  case HAP_ET_BROADCAST: return HAP_COLL_BROADCAST;
  default: return HAP_COLL_ALL_REDUCE;
  }
}

/* Scratch of one process group: where each rank's run of entries starts (-1: not a member), its
 * length, the members in ring order and their bytes. */
typedef struct pg_scratch {
  int32_t *start, *count, *members;
  double *bytes;
} pg_scratch;

/* Price the j-th collective of a process group whose members are m->members[0..m). */
static hap_status price_one(replay *x, const coll_entry *e, const pg_scratch *p, int32_t m,
                            const hap_group *g0, int32_t j, hap_err *err) {
  ref f0 = {p->members[0], e[p->start[p->members[0]] + j].node};
  const hap_et_node *n0 = node_of(x, f0);
  for (int32_t i = 0; i < m; i++) {
    ref f = {p->members[i], e[p->start[p->members[i]] + j].node};
    const hap_et_node *n = node_of(x, f);
    if (n->comm_type < 0)
      return node_err(x, f, HAP_EPARSE, "a COMM_COLL_NODE without comm_type", err);
    if (n->comm_type != n0->comm_type) {
      char what[512];
      snprintf(what, sizeof what, "%s, but collective %d of process group '%s' is %s on rank %d",
               hap_et_coll_name(n->comm_type), j, e->pg, hap_et_coll_name(n0->comm_type), f0.rank);
      return node_err(x, f, HAP_EINVAL, what, err);
    }
    if (n->comm_size < 0 && n->comm_type != HAP_ET_BARRIER)
      return node_err(x, f, HAP_EPARSE, "a COMM_COLL_NODE without comm_size", err);
    p->bytes[i] = n->comm_type == HAP_ET_BARRIER ? 0 : n->comm_size;
  }
  hap_group g = *g0;
  if (n0->nic_sharers > 1)
    hap_group_share_nics(&g, (int32_t)n0->nic_sharers);
  hap_coll_impl impl = HAP_IMPL_AUTO;
  if (n0->coll_impl != NULL && hap_coll_impl_parse(n0->coll_impl, &impl) != HAP_OK)
    return node_err(x, f0, HAP_EPARSE,
                    "hap_coll_impl: expected auto, ring, tree, hierarchical, pairwise or grouped",
                    err);
  double sec =
      m > 1 ? hap_coll_time(&g, coll_kind(n0->comm_type), impl, hap_coll_bytes_of(p->bytes, m)) : 0;
  if (!isfinite(sec) || sec < 0) {
    char what[256];
    snprintf(what, sizeof what, "the cluster cannot price %s (%s) over %d ranks",
             hap_et_coll_name(n0->comm_type), hap_coll_impl_name(impl), m);
    return node_err(x, f0, HAP_EUNSUPPORTED, what, err);
  }
  int32_t id;
  HAP_TRY(hap_sim_new_collective(x->sim, &id, err));
  for (int32_t i = 0; i < m; i++) {
    ref f = {p->members[i], e[p->start[p->members[i]] + j].node};
    x->dur[flat(x, f)] = sec;
    x->coll[flat(x, f)] = id;
  }
  x->collectives++;
  return HAP_OK;
}

/* The entries e[0..k) of one process group: its members, then each collective in order. */
static hap_status price_group(replay *x, const coll_entry *e, int32_t k, pg_scratch *p,
                              hap_err *err) {
  int32_t n = x->s->n_ranks, m = 0;
  for (int32_t r = 0; r < n; r++)
    p->start[r] = -1;
  for (int32_t i = 0; i < k; i++) {
    if (i == 0 || e[i].rank != e[i - 1].rank) {
      p->start[e[i].rank] = i;
      p->count[e[i].rank] = 0;
      p->members[m++] = e[i].rank;
    }
    p->count[e[i].rank]++;
  }
  const hap_et_node *n0 = node_of(x, (ref){e[0].rank, e[0].node});
  if (n0->pg_ranks != NULL) { /* the ring order the trace gives */
    bool ok = n0->n_pg_ranks == m;
    for (int32_t i = 0; i < m && ok; i++) {
      int64_t r = n0->pg_ranks[i];
      ok = r < n && p->start[r] >= 0;
      for (int32_t q = 0; q < i && ok; q++)
        ok = n0->pg_ranks[q] != r;
      if (ok)
        p->members[i] = (int32_t)r;
    }
    if (!ok) {
      char what[512];
      snprintf(what, sizeof what,
               "hap_pg_ranks of process group '%s': expected the %d distinct ranks whose "
               "traces use it",
               e->pg, m);
      return node_err(x, (ref){e[0].rank, e[0].node}, HAP_EINVAL, what, err);
    }
  }
  for (int32_t i = 1; i < m; i++)
    if (p->count[p->members[i]] != p->count[p->members[0]]) {
      int32_t a = p->members[0], b = p->members[i];
      return hap_err_set(err, HAP_EINVAL,
                         "%s: %d collectives of process group '%s', but %s has %d: expected "
                         "every member to issue the same collectives",
                         x->s->paths[b], p->count[b], e->pg, x->s->paths[a], p->count[a]);
    }
  hap_group g0;
  HAP_TRY(hap_group_init(x->c, p->members, m, &g0, err));
  for (int32_t j = 0; j < p->count[p->members[0]]; j++)
    HAP_TRY(price_one(x, e, p, m, &g0, j, err));
  return HAP_OK;
}

static hap_status collectives(replay *x, hap_err *err) {
  int32_t n = x->s->n_ranks;
  int64_t total = x->off[n], k = 0;
  coll_entry *e = malloc((size_t)(total > 0 ? total : 1) * sizeof *e);
  pg_scratch p = {malloc((size_t)n * sizeof(int32_t)), malloc((size_t)n * sizeof(int32_t)),
                  malloc((size_t)n * sizeof(int32_t)), malloc((size_t)n * sizeof(double))};
  hap_status st = e && p.start && p.count && p.members && p.bytes ? HAP_OK : oom(err);
  for (int32_t r = 0; r < n && st == HAP_OK; r++)
    for (int32_t i = 0; i < x->s->ranks[r]->n_nodes; i++) {
      const hap_et_node *nd = &x->s->ranks[r]->nodes[i];
      if (nd->type == HAP_ET_COLL)
        e[k++] = (coll_entry){nd->pg_name ? nd->pg_name : "", r, i};
    }
  if (st == HAP_OK)
    qsort(e, (size_t)k, sizeof *e, cmp_coll);
  for (int64_t i = 0, j; i < k && st == HAP_OK; i = j) {
    for (j = i + 1; j < k && strcmp(e[j].pg, e[i].pg) == 0; j++)
      ;
    st = price_group(x, e + i, (int32_t)(j - i), &p, err);
  }
  free(e);
  free(p.start);
  free(p.count);
  free(p.members);
  free(p.bytes);
  return st;
}

/* ---- point-to-point ---- */

typedef struct msg_entry {
  int64_t src, dst, tag;
  int32_t rank, node;
} msg_entry;

/* Messages of one (sender, receiver, tag). */
static int cmp_key(const msg_entry *x, const msg_entry *y) {
  if (x->src != y->src)
    return (x->src > y->src) - (x->src < y->src);
  if (x->dst != y->dst)
    return (x->dst > y->dst) - (x->dst < y->dst);
  return (x->tag > y->tag) - (x->tag < y->tag);
}
/* ... in the order their rank issues them (all on one rank: the sender's, or the receiver's). */
static int cmp_msg(const void *a, const void *b) {
  const msg_entry *x = a, *y = b;
  int c = cmp_key(x, y);
  return c != 0 ? c : (x->node > y->node) - (x->node < y->node);
}

static hap_status unmatched(const replay *x, const msg_entry *m, bool send, hap_err *err) {
  char what[256];
  if (send)
    snprintf(what, sizeof what, "a send to rank %lld (tag %lld) that rank never receives",
             (long long)m->dst, (long long)m->tag);
  else
    snprintf(what, sizeof what, "a receive from rank %lld (tag %lld) that rank never sends",
             (long long)m->src, (long long)m->tag);
  return node_err(x, (ref){m->rank, m->node}, HAP_EINVAL, what, err);
}

static hap_status messages(replay *x, hap_err *err) {
  int32_t n = x->s->n_ranks;
  int64_t total = x->off[n], ns = 0, nr = 0;
  msg_entry *snd = malloc((size_t)(total > 0 ? total : 1) * sizeof *snd);
  msg_entry *rcv = malloc((size_t)(total > 0 ? total : 1) * sizeof *rcv);
  hap_status st = snd && rcv ? HAP_OK : oom(err);
  for (int32_t r = 0; r < n && st == HAP_OK; r++)
    for (int32_t i = 0; i < x->s->ranks[r]->n_nodes && st == HAP_OK; i++) {
      const hap_et_node *nd = &x->s->ranks[r]->nodes[i];
      if (nd->type != HAP_ET_SEND && nd->type != HAP_ET_RECV)
        continue;
      bool send = nd->type == HAP_ET_SEND;
      int64_t peer = send ? nd->comm_dst : nd->comm_src;
      if (peer < 0 || peer >= n || peer == r) {
        char what[160];
        snprintf(what, sizeof what, "%s: expected another rank 0..%d",
                 send ? "comm_dst" : "comm_src", n - 1);
        st = node_err(x, (ref){r, i}, HAP_EPARSE, what, err);
        break;
      }
      msg_entry m = {send ? r : peer, send ? peer : r, nd->comm_tag, r, i};
      if (send)
        snd[ns++] = m;
      else
        rcv[nr++] = m;
    }
  if (st == HAP_OK) {
    qsort(snd, (size_t)ns, sizeof *snd, cmp_msg);
    qsort(rcv, (size_t)nr, sizeof *rcv, cmp_msg);
  }
  int64_t i = 0, j = 0;
  while (st == HAP_OK && (i < ns || j < nr)) {
    int c = i >= ns ? 1 : j >= nr ? -1 : cmp_key(&snd[i], &rcv[j]);
    if (c != 0) {
      st = c < 0 ? unmatched(x, &snd[i], true, err) : unmatched(x, &rcv[j], false, err);
      break;
    }
    ref fs = {snd[i].rank, snd[i].node}, fr = {rcv[j].rank, rcv[j].node};
    double bytes =
        node_of(x, fs)->comm_size >= 0 ? node_of(x, fs)->comm_size : node_of(x, fr)->comm_size;
    if (bytes < 0) {
      st = node_err(x, fs, HAP_EPARSE, "a send without comm_size (nor on its receive)", err);
      break;
    }
    double sec = hap_p2p_time(x->c, snd[i].src, snd[i].dst, bytes);
    int32_t id;
    if ((st = hap_sim_new_collective(x->sim, &id, err)) != HAP_OK)
      break;
    x->dur[flat(x, fs)] = x->dur[flat(x, fr)] = sec;
    x->coll[flat(x, fs)] = x->coll[flat(x, fr)] = id;
    x->messages++;
    i++;
    j++;
  }
  free(snd);
  free(rcv);
  return st;
}

/* ---- the engine ---- */

/* Collectives' repeats and recomputation (hap's policy), in file order. */
static hap_status policy(replay *x, hap_err *err) {
  for (int32_t r = 0; r < x->s->n_ranks; r++)
    for (int32_t i = 0; i < x->s->ranks[r]->n_nodes; i++) {
      const hap_et_node *n = &x->s->ranks[r]->nodes[i];
      double *d = &x->dur[flat(x, (ref){r, i})];
      if (n->type != HAP_ET_COLL)
        continue;
      if (n->repeats > 1)
        *d *= (double)n->repeats;
      if (n->recompute_of >= 0) {
        int32_t k = find_id(x, r, (uint64_t)n->recompute_of);
        if (k < 0 || k >= i)
          return node_err(x, (ref){r, i}, HAP_EPARSE,
                          "hap_recompute_of: expected the id of an earlier node", err);
        *d += x->dur[flat(x, (ref){r, k})];
      }
    }
  return HAP_OK;
}

static hap_status add_tasks(replay *x, hap_err *err) {
  for (int32_t r = 0; r < x->s->n_ranks; r++)
    for (int32_t i = 0; i < x->s->ranks[r]->n_nodes; i++) {
      const hap_et_node *n = &x->s->ranks[r]->nodes[i];
      size_t f = flat(x, (ref){r, i});
      bool comm = is_comm(n->type);
      hap_sim_task e = {.name = n->name,
                        .device = r,
                        .stream = comm ? HAP_SIM_COMM : HAP_SIM_COMPUTE,
                        .kind = comm ? HAP_SIM_COLLECTIVE : HAP_SIM_FIXED,
                        .duration_s = x->dur[f],
                        .flops = n->num_ops > 0 ? n->num_ops : 0,
                        .bytes = comm ? fmax(n->comm_size, 0) : fmax(n->tensor_size, 0),
                        .collective = x->coll[f]};
      if (!isfinite(e.duration_s) || e.duration_s < 0)
        return node_err(x, (ref){r, i}, HAP_EINVAL, "its duration is not a time >= 0", err);
      HAP_TRY(hap_sim_add_task(x->sim, &e, &x->eid[f], err));
    }
  return HAP_OK;
}

static hap_status add_deps(replay *x, hap_err *err) {
  for (int32_t r = 0; r < x->s->n_ranks; r++)
    for (int32_t i = 0; i < x->s->ranks[r]->n_nodes; i++) {
      const hap_et_node *n = &x->s->ranks[r]->nodes[i];
      for (int32_t q = 0; q < n->n_data_deps + n->n_ctrl_deps; q++) {
        bool data = q < n->n_data_deps;
        uint64_t id = data ? n->data_deps[q] : n->ctrl_deps[q - n->n_data_deps];
        int32_t k = find_id(x, r, id);
        if (k < 0 || k == i) {
          char what[160];
          snprintf(what, sizeof what, "%s names node %llu: expected another node of this trace",
                   data ? "data_deps" : "ctrl_deps", (unsigned long long)id);
          return node_err(x, (ref){r, i}, HAP_EPARSE, what, err);
        }
        HAP_TRY(hap_sim_add_dep(x->sim, x->eid[flat(x, (ref){r, i})], x->eid[flat(x, (ref){r, k})],
                                err));
      }
    }
  return HAP_OK;
}

static hap_status results(const replay *x, hap_chakra_replay_result *out, hap_err *err) {
  const hap_sim_results *res = hap_sim_results_get(x->sim);
  int32_t n = x->s->n_ranks;
  if (res == NULL || (out->ranks = calloc((size_t)n, sizeof *out->ranks)) == NULL)
    return oom(err);
  out->iteration_s = res->makespan_s;
  out->nodes = x->off[n];
  out->collectives = x->collectives;
  out->messages = x->messages;
  out->events = res->n_events;
  out->n_ranks = n;
  for (int32_t r = 0; r < n; r++) {
    const hap_sim_device_stats *d = &res->devices[r];
    out->ranks[r] = (hap_chakra_replay_rank){d->busy_s[HAP_SIM_COMPUTE], d->busy_s[HAP_SIM_COMM],
                                             d->exposed_comm_s, d->idle_s};
  }
  return HAP_OK;
}

hap_status hap_chakra_replay(const hap_chakra_set *s, const hap_cluster *c,
                             hap_chakra_replay_result *out, hap_err *err) {
  memset(out, 0, sizeof *out);
  int32_t n = s->n_ranks;
  if (c->n_devices != n)
    return hap_err_set(err, HAP_EINVAL,
                       "the traces have %d ranks, cluster '%s' %d devices: expected one device "
                       "per rank",
                       n, c->name, c->n_devices);
  replay x = {.s = s, .c = c};
  hap_status st = (x.off = malloc((size_t)(n + 1) * sizeof *x.off)) ? HAP_OK : oom(err);
  if (st == HAP_OK) {
    x.off[0] = 0;
    for (int32_t r = 0; r < n; r++)
      x.off[r + 1] = x.off[r] + s->ranks[r]->n_nodes;
    size_t total = (size_t)(x.off[n] > 0 ? x.off[n] : 1);
    x.by_id = malloc(total * sizeof *x.by_id);
    x.dur = malloc(total * sizeof *x.dur);
    x.coll = malloc(total * sizeof *x.coll);
    x.eid = malloc(total * sizeof *x.eid);
    st = x.by_id && x.dur && x.coll && x.eid ? HAP_OK : oom(err);
  }
  for (int32_t r = 0; r < n && st == HAP_OK; r++)
    for (int32_t i = 0; i < s->ranks[r]->n_nodes; i++) {
      const hap_et_node *nd = &s->ranks[r]->nodes[i];
      size_t f = flat(&x, (ref){r, i});
      x.coll[f] = -1;
      x.dur[f] = is_comm(nd->type) ? 0 : compute_s(s->ranks[r], nd, &c->devices[r]);
    }
  if (st == HAP_OK)
    st = hap_sim_create(n, &x.sim, err);
  if (st == HAP_OK)
    st = index_ids(&x, err);
  if (st == HAP_OK)
    st = collectives(&x, err);
  if (st == HAP_OK)
    st = messages(&x, err);
  if (st == HAP_OK)
    st = policy(&x, err);
  if (st == HAP_OK)
    st = add_tasks(&x, err);
  if (st == HAP_OK)
    st = add_deps(&x, err);
  if (st == HAP_OK)
    st = hap_sim_run(x.sim, NULL, err);
  if (st == HAP_OK)
    st = results(&x, out, err);
  hap_sim_destroy(x.sim);
  free(x.off);
  free(x.by_id);
  free(x.dur);
  free(x.coll);
  free(x.eid);
  return st;
}
