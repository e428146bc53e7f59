/* search.c — the program search. Nodes are visited in the graph's topological order (the cost of a
 * program does not depend on the order, so one fixed order loses nothing); a state after k nodes
 * is the set of properties (tensor, layout) of the tensors still needed later. A transition
 * applies node k with one of its sharding variants: each input property it needs is already
 * there, or made by the cheapest source or single communication (the other properties stay, so
 * the resulting state does not depend on which one was used, only the cost does), its outputs are
 * added and dead tensors dropped (HAP's removal of irrelevant properties). A* with the admissible
 * and consistent heuristic "every remaining node at its cheapest variant, communication free"
 * returns an optimal program at the first complete pop. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "synth_internal.h"

typedef struct syn_state {
  struct syn_state *parent;
  double g;    /* cost of the nodes done, s */
  int64_t seq; /* creation order, for deterministic ties */
  uint64_t hash;
  int32_t k; /* nodes done */
  int32_t n_props;
  int8_t variant;  /* variant of node k-1 */
  syn_prop *props; /* sorted */
  double *mem;     /* [n_classes] bytes held so far by the fullest device of each class */
} syn_state;

/* ---- memory -------------------------------------------------------------------------------- */

typedef struct pool_chunk {
  struct pool_chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
} pool_chunk;

typedef struct pool {
  pool_chunk *head;
  size_t total; /* bytes reserved */
} pool;

static void *pool_alloc(pool *p, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (p->head == NULL || p->head->cap - p->head->used < n) {
    size_t cap = n > (1u << 20) ? n : (1u << 20);
    pool_chunk *c = malloc(sizeof *c + cap);
    if (c == NULL)
      return NULL;
    c->next = p->head;
    c->used = 0;
    c->cap = cap;
    p->head = c;
    p->total += cap;
  }
  void *r = p->head->data + p->head->used;
  p->head->used += n;
  return r;
}

static void pool_free(pool *p) {
  while (p->head != NULL) {
    pool_chunk *n = p->head->next;
    free(p->head);
    p->head = n;
  }
  p->total = 0;
}

/* ---- properties ---------------------------------------------------------------------------- */

static int prop_cmp(const syn_prop *a, const syn_prop *b) {
  if (a->tensor != b->tensor)
    return a->tensor < b->tensor ? -1 : 1;
  if (a->layout != b->layout)
    return a->layout < b->layout ? -1 : 1;
  if (a->segment != b->segment)
    return a->segment < b->segment ? -1 : 1;
  return (a->granule > b->granule) - (a->granule < b->granule);
}

static int prop_qcmp(const void *a, const void *b) { return prop_cmp(a, b); }

static bool prop_eq(const syn_prop *a, const syn_prop *b) { return prop_cmp(a, b) == 0; }

static uint64_t props_hash(int32_t k, const syn_prop *p, int32_t n) {
  uint64_t h = 1469598103934665603ULL ^ (uint64_t)(uint32_t)k;
  for (int32_t i = 0; i < n; i++) {
    uint64_t v = (uint64_t)(uint32_t)p[i].tensor << 32 ^ (uint64_t)(uint8_t)p[i].layout << 24 ^
                 (uint64_t)(uint32_t)p[i].segment << 8 ^ (uint64_t)p[i].granule;
    h = (h ^ v) * 1099511628211ULL;
    h ^= h >> 29;
  }
  return h;
}

/* ---- the open list (binary heap) and the closed table (open addressing) ---------------------- */

typedef struct heap_item {
  double f;
  int32_t k;
  int64_t seq;
  syn_state *s;
} heap_item;

static bool heap_before(const heap_item *a, const heap_item *b) {
  if (a->f != b->f)
    return a->f < b->f;
  if (a->k != b->k)
    return a->k > b->k; /* deeper first among equals */
  return a->seq < b->seq;
}

typedef struct search {
  syn_ctx *x;
  pool mem;
  heap_item *heap;
  int64_t n_heap, cap_heap;
  syn_state **table; /* best state per (k, props) */
  size_t cap_table, n_table;
  int64_t seq;
  int64_t expanded, generated;
  syn_prop *scratch; /* working property set */
  int32_t cap_scratch;
  double *wmem; /* [n_classes] working memory of the state being built */
} search;

static int heap_push(search *s, heap_item it) {
  if (s->n_heap == s->cap_heap) {
    int64_t cap = s->cap_heap ? 2 * s->cap_heap : 4096;
    heap_item *h = realloc(s->heap, (size_t)cap * sizeof *h);
    if (h == NULL)
      return -1;
    s->heap = h;
    s->cap_heap = cap;
  }
  int64_t i = s->n_heap++;
  s->heap[i] = it;
  while (i > 0 && heap_before(&s->heap[i], &s->heap[(i - 1) / 2])) {
    heap_item t = s->heap[i];
    s->heap[i] = s->heap[(i - 1) / 2];
    s->heap[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
  return 0;
}

static heap_item heap_pop(search *s) {
  heap_item top = s->heap[0];
  s->heap[0] = s->heap[--s->n_heap];
  for (int64_t i = 0;;) {
    int64_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < s->n_heap && heap_before(&s->heap[l], &s->heap[m]))
      m = l;
    if (r < s->n_heap && heap_before(&s->heap[r], &s->heap[m]))
      m = r;
    if (m == i)
      break;
    heap_item t = s->heap[i];
    s->heap[i] = s->heap[m];
    s->heap[m] = t;
    i = m;
  }
  return top;
}

static bool same_key(const syn_state *a, int32_t k, uint64_t hash, const syn_prop *p, int32_t n) {
  if (a->k != k || a->hash != hash || a->n_props != n)
    return false;
  for (int32_t i = 0; i < n; i++)
    if (!prop_eq(&a->props[i], &p[i]))
      return false;
  return true;
}

/* The slot of (k, props): its best state, or the empty slot to fill. */
static syn_state **table_slot(search *s, int32_t k, uint64_t hash, const syn_prop *p, int32_t n) {
  size_t mask = s->cap_table - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    if (s->table[i] == NULL || same_key(s->table[i], k, hash, p, n))
      return &s->table[i];
  }
}

static int table_grow(search *s) {
  size_t cap = s->cap_table ? 2 * s->cap_table : 1u << 14;
  syn_state **t = calloc(cap, sizeof(syn_state *));
  if (t == NULL)
    return -1;
  for (size_t i = 0; i < s->cap_table; i++) {
    syn_state *st = s->table[i];
    if (st == NULL)
      continue;
    size_t j = st->hash & (cap - 1);
    while (t[j] != NULL)
      j = (j + 1) & (cap - 1);
    t[j] = st;
  }
  free(s->table);
  s->table = t;
  s->cap_table = cap;
  return 0;
}

/* ---- transitions --------------------------------------------------------------------------- */

static syn_prop needed_prop(const syn_ctx *x, int32_t tensor, hap_layout l, int32_t seg,
                            int64_t granule) {
  (void)x;
  syn_prop p = {tensor, l, 0, 1};
  if (l >= 0) {
    p.segment = seg;
    p.granule = granule;
  }
  return p;
}

static bool has_prop(const syn_prop *p, int32_t n, const syn_prop *q) {
  for (int32_t i = 0; i < n; i++)
    if (prop_eq(&p[i], q))
      return true;
  return false;
}

static bool has_tensor(const syn_prop *p, int32_t n, int32_t tensor) {
  for (int32_t i = 0; i < n; i++)
    if (p[i].tensor == tensor)
      return true;
  return false;
}

syn_choice syn_choose_input(syn_ctx *x, const syn_prop *have, int32_t n, const syn_prop *want) {
  syn_choice c = {.seconds = HUGE_VAL};
  if (has_prop(have, n, want)) {
    c.seconds = 0;
    c.present = true;
    return c;
  }
  const hap_tensor *t = &x->g->tensors[want->tensor];
  bool is_source = t->kind != HAP_TENSOR_ACTIVATION;
  /* Every source is made once (one storage, one gradient synchronisation); another layout of it
   * is a communication (slicing a replica is free). */
  if (is_source && !has_tensor(have, n, want->tensor)) {
    hap_storage st;
    double sec = syn_source_time(x, want, &st);
    if (sec < c.seconds) {
      c.seconds = sec;
      c.source = true;
      c.storage = st;
    }
  }
  for (int32_t i = 0; i < n; i++) {
    if (have[i].tensor != want->tensor)
      continue;
    hap_comm_op op;
    hap_coll_impl impl;
    double sec = syn_comm_time(x, &have[i], want, &op, &impl);
    if (sec < c.seconds) {
      c = (syn_choice){.seconds = sec, .from = have[i], .op = op, .impl = impl};
    }
  }
  return c;
}

/* Apply node k with variant v to the properties of `from` (n props) into s->scratch; returns the
 * new count and adds the triple's cost to *g, or -1 when the variant cannot be applied. */
static bool within_limits(const syn_ctx *x, const double *mem) {
  for (int32_t c = 0; c < x->n_classes; c++)
    if (mem[c] > x->mem_limit[c])
      return false;
  return true;
}

static int32_t apply(search *s, const syn_prop *from, const double *from_mem, int32_t n, int32_t k,
                     int v, double *g) {
  syn_ctx *x = s->x;
  const hap_node *node = &x->g->nodes[k];
  const syn_node *sn = &x->nodes[k];
  const hap_variant *var = &sn->variants[v];
  int32_t need = n + node->n_inputs + node->n_outputs + 1;
  if (need > s->cap_scratch || s->scratch == NULL) {
    syn_prop *p = realloc(s->scratch, (size_t)need * 2 * sizeof *p);
    if (p == NULL)
      return -1;
    s->scratch = p;
    s->cap_scratch = need * 2;
  }
  syn_prop *w = s->scratch;
  if (n > 0)
    memcpy(w, from, (size_t)n * sizeof *w);
  int32_t m = n;
  double cost = sn->cost_s[v];
  double *mem = s->wmem;
  memcpy(mem, from_mem, (size_t)x->n_classes * sizeof *mem);
  for (int i = 0; i < node->n_inputs; i++) {
    syn_prop want = needed_prop(x, node->inputs[i], var->in[i], sn->segment, var->granule);
    syn_choice c = syn_choose_input(x, w, m, &want);
    if (!isfinite(c.seconds))
      return -1;
    cost += c.seconds;
    if (!c.present) {
      w[m++] = want;
      syn_prop_memory(x, &want, c.source ? c.storage : HAP_STORE_INPUT, NULL, mem);
    }
  }
  for (int o = 0; o < node->n_outputs; o++) {
    w[m] = needed_prop(x, node->outputs[o], var->out[o], sn->segment, var->granule);
    syn_prop_memory(x, &w[m++], HAP_STORE_INPUT, NULL, mem);
  }
  if (!within_limits(x, mem))
    return -1;
  /* drop the properties of tensors no later node needs */
  int32_t keep = 0;
  for (int32_t i = 0; i < m; i++)
    if (x->last_use[w[i].tensor] > k)
      w[keep++] = w[i];
  qsort(w, (size_t)keep, sizeof *w, prop_qcmp);
  int32_t u = 0;
  for (int32_t i = 0; i < keep; i++)
    if (u == 0 || !prop_eq(&w[u - 1], &w[i]))
      w[u++] = w[i];
  if (k + 1 == x->g->n_nodes) {
    bool loss_ok = false;
    for (int32_t i = 0; i < u; i++)
      if (w[i].tensor == x->g->loss && w[i].layout < 0)
        loss_ok = true;
    if (!loss_ok)
      return -1;
  }
  *g += cost;
  return u;
}

static syn_state *new_state(search *s, syn_state *parent, int32_t k, int v, double g,
                            const syn_prop *p, int32_t n, uint64_t hash, const double *mem) {
  int32_t nc = s->x->n_classes;
  syn_state *st = pool_alloc(&s->mem, sizeof *st);
  syn_prop *props = n ? pool_alloc(&s->mem, (size_t)n * sizeof *props) : NULL;
  double *m = pool_alloc(&s->mem, (size_t)nc * sizeof *m);
  if (st == NULL || (n && props == NULL) || m == NULL)
    return NULL;
  if (n > 0)
    memcpy(props, p, (size_t)n * sizeof *props);
  if (mem != NULL)
    memcpy(m, mem, (size_t)nc * sizeof *m);
  else
    memset(m, 0, (size_t)nc * sizeof *m);
  *st = (syn_state){parent, g, s->seq++, hash, k, n, (int8_t)v, props, m};
  return st;
}

static double max_mem(const syn_ctx *x, const double *mem) {
  double m = 0;
  for (int32_t c = 0; c < x->n_classes; c++)
    m = fmax(m, mem[c]);
  return m;
}

/* a no worse than b in cost and in every class's memory */
static bool dominates(const syn_ctx *x, const syn_state *a, double g, const double *mem) {
  if (a->g > g)
    return false;
  for (int32_t c = 0; c < x->n_classes; c++)
    if (a->mem[c] > mem[c])
      return false;
  return true;
}

/* Expand `st`: push every improving successor. */
static hap_status expand(search *s, syn_state *st, hap_err *err) {
  syn_ctx *x = s->x;
  int32_t k = st->k;
  for (int v = 0; v < x->nodes[k].n_variants; v++) {
    if (!isfinite(x->nodes[k].cost_s[v]))
      continue;
    double g = st->g;
    int32_t n = apply(s, st->props, st->mem, st->n_props, k, v, &g);
    if (n < 0)
      continue;
    s->generated++;
    uint64_t hash = props_hash(k + 1, s->scratch, n);
    if ((s->n_table + 1) * 2 > s->cap_table && table_grow(s) != 0)
      return hap_err_set(err, HAP_ENOMEM, "out of memory in the program search");
    /* The table keeps the cheapest state per property set; a costlier one survives only if it
     * holds less memory somewhere (it may fit where the cheaper one will not). */
    syn_state **slot = table_slot(s, k + 1, hash, s->scratch, n);
    if (*slot != NULL && (x->minimize_memory ? max_mem(x, (*slot)->mem) <= max_mem(x, s->wmem)
                          : x->keep_leaner   ? dominates(x, *slot, g, s->wmem)
                                             : (*slot)->g <= g))
      continue;
    if (x->max_generated > 0 && s->generated > x->max_generated)
      return hap_err_set(err, HAP_EUNSUPPORTED,
                         "the search under the memory limit grew past %lld states",
                         (long long)x->max_generated);
    syn_state *child = new_state(s, st, k + 1, v, g, s->scratch, n, hash, s->wmem);
    if (child == NULL)
      return hap_err_set(err, HAP_ENOMEM, "out of memory in the program search (%.0f MiB)",
                         (double)s->mem.total / 1048576.0);
    if (*slot == NULL)
      s->n_table++;
    if (*slot == NULL || g < (*slot)->g || x->minimize_memory)
      *slot = child;
    heap_item it = {x->minimize_memory ? max_mem(x, s->wmem) : g + x->h_suffix[k + 1], k + 1,
                    child->seq, child};
    if (heap_push(s, it) != 0)
      return hap_err_set(err, HAP_ENOMEM, "out of memory in the program search");
  }
  return HAP_OK;
}

/* Finish greedily from `st` (after an interrupt): the cheapest variant node by node. */
static syn_state *complete_greedily(search *s, syn_state *st) {
  syn_ctx *x = s->x;
  while (st != NULL && st->k < x->g->n_nodes) {
    int32_t k = st->k;
    syn_state *best = NULL;
    for (int v = 0; v < x->nodes[k].n_variants; v++) {
      if (!isfinite(x->nodes[k].cost_s[v]))
        continue;
      double g = st->g;
      int32_t n = apply(s, st->props, st->mem, st->n_props, k, v, &g);
      if (n < 0 || (best != NULL && g >= best->g))
        continue;
      /* NOLINTNEXTLINE(clang-analyzer-unix.Malloc): states live in s->mem, freed with the pool */
      best =
          new_state(s, st, k + 1, v, g, s->scratch, n, props_hash(k + 1, s->scratch, n), s->wmem);
    }
    st = best;
  }
  return st;
}

hap_status syn_search(syn_ctx *x, const hap_synth_options *o, int round, int8_t *variants,
                      double *cost_s, double *peak_bytes, hap_synth_stats *stats, hap_err *err) {
  search s;
  memset(&s, 0, sizeof s);
  s.x = x;
  hap_status st = HAP_OK;
  syn_state *done = NULL, *deepest = NULL;
  s.wmem = malloc((size_t)x->n_classes * sizeof *s.wmem);
  if (s.wmem == NULL || table_grow(&s) != 0) {
    st = hap_err_set(err, HAP_ENOMEM, "out of memory in the program search");
    goto out;
  }
  syn_state *root = new_state(&s, NULL, 0, -1, 0, NULL, 0, props_hash(0, NULL, 0), NULL);
  if (root != NULL) {
    *table_slot(&s, 0, root->hash, NULL, 0) = root;
    s.n_table++;
  }
  if (root == NULL || heap_push(&s, (heap_item){x->h_suffix[0], 0, root->seq, root}) != 0) {
    st = hap_err_set(err, HAP_ENOMEM, "out of memory in the program search");
    goto out;
  }
  if (x->g->n_nodes == 0) {
    done = root;
  }
  while (done == NULL && s.n_heap > 0) {
    heap_item it = heap_pop(&s);
    syn_state *cur = it.s;
    syn_state **slot = table_slot(&s, cur->k, cur->hash, cur->props, cur->n_props);
    if (*slot != cur && (!x->keep_leaner || dominates(x, *slot, cur->g, cur->mem)))
      continue; /* superseded by a cheaper path to the same state, holding no more memory */
    if (cur->k == x->g->n_nodes) {
      done = cur;
      break;
    }
    if (deepest == NULL || cur->k > deepest->k)
      deepest = cur;
    s.expanded++;
    if (o != NULL && o->interrupt != NULL && *o->interrupt) {
      done = complete_greedily(&s, deepest);
      if (stats)
        stats->interrupted = true;
      break;
    }
    if (o != NULL && o->progress != NULL && s.expanded % 4096 == 0)
      o->progress(o->progress_ctx, round, s.expanded, it.f);
    st = expand(&s, cur, err);
    if (st != HAP_OK)
      goto out;
  }
  if (done == NULL) {
    st = hap_err_set(err, HAP_EUNSUPPORTED,
                     "no program reaches the loss '%s' within the devices' memory",
                     x->g->tensors[x->g->loss].name);
    goto out;
  }
  *cost_s = done->g;
  if (peak_bytes != NULL) {
    *peak_bytes = 0;
    for (int32_t c = 0; c < x->n_classes; c++)
      *peak_bytes = fmax(*peak_bytes, done->mem[c]);
  }
  for (syn_state *p = done; p->parent != NULL; p = p->parent)
    variants[p->k - 1] = p->variant;
out:
  if (stats) {
    stats->states_expanded += s.expanded;
    stats->states_generated += s.generated;
  }
  pool_free(&s.mem);
  free(s.heap);
  free(s.table);
  free(s.scratch);
  free(s.wmem);
  return st;
}
