/* search.c — the program search. Nodes are visited in the graph's topological order (the cost of a
 * program does not depend on the order, so one fixed order loses nothing); a state after k nodes
 * is the set of properties (tensor, layout) of the tensors still needed later. A transition
 * applies node k with one of its sharding variants: each input property it needs is already
 * there, or made by the cheapest source or single communication (the other properties stay, so
 * the resulting state does not depend on which one was used, only the cost does), its outputs are
 * added and dead tensors dropped (HAP's removal of irrelevant properties). A* returns an optimal
 * program at the first complete pop.
 *
 * The heuristic (window bounds). Which tensors a state after k nodes holds does not depend on the
 * program (each enters with its producer or first consumer and leaves after its last consumer);
 * only their layouts do, and what a node pays for an input depends only on that tensor's own
 * properties. So W(a, b), the cheapest way through nodes [a, b) when every tensor live after a
 * nodes is free in every layout (memory ignored), is a lower bound on what any state after a nodes
 * pays for those nodes. The nodes are cut into windows of at most MAX_WINDOW nodes at points where
 * few tensors are live; at a cut a, h(a) = W(a, b) + h(b) for the next cut b, and inside a window
 * h is the per-node bound (each node at its cheapest variant, communication free, plus the
 * sources of parameters only it uses) of the window's remaining nodes + h(b). The per-node bound
 * alone leaves out all communication, so A* expanded every state dearer than the optimum by less
 * than the communication of all remaining layers: a number that grew faster than the layers.
 * W(a, b) counts the communication inside each window; each is a small search of its own (the
 * same A*, relaxed, with the per-node bound as its heuristic). h is admissible but not consistent
 * (it drops after a cut), so f is kept monotone along paths (pathmax): it stays a lower bound on
 * every completion, and a state inside a window keeps its window's bound. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/vec.h"
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
  double *mem;     /* [n_mem * n_classes] bytes held so far by the fullest device of each class
                      (syn_mem_*: kept, and with recomputation the layer working sets) */
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
  uint64_t h = HAP_KEY_HASH_BASIS ^ (uint64_t)(uint32_t)k;
  for (int32_t i = 0; i < n; i++) {
    uint64_t v = (uint64_t)(uint32_t)p[i].tensor << 32 ^ (uint64_t)(uint8_t)p[i].layout << 24 ^
                 (uint64_t)(uint32_t)p[i].segment << 8 ^ (uint64_t)p[i].granule;
    h = hap_fnv1a_word(h, v);
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
  double *wmem; /* [n_mem * n_classes] working memory of the state being built */
  /* What is solved: nodes from the root's k up to `end`, f = g + h[k] */
  int32_t end;
  const double *h; /* [n_nodes + 1] admissible cost still to pay after k nodes, s */
  /* -1, or the relaxation the window bounds solve: tensors that entered the states before this
   * many nodes are free in every layout and never enter a state; memory is not tracked */
  int32_t free_before;
} search;

static int heap_push(search *s, heap_item it) {
  if (HAP_VEC_RESERVE64(s->heap, s->cap_heap, s->n_heap + 1, 4096) != 0)
    return -1;
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

/* Twice the slots (256 at first), every state re-inserted: a rehash, not an array growing. */
static int table_rehash(search *s) {
  size_t cap = s->cap_table ? 2 * s->cap_table : 256;
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

/* Whether q is among p[0..n): a Gather under a segment that splits alike counts. */
static bool has_prop(const syn_ctx *x, const syn_prop *p, int32_t n, const syn_prop *q) {
  for (int32_t i = 0; i < n; i++)
    if (p[i].tensor == q->tensor && p[i].layout == q->layout && p[i].granule == q->granule &&
        (p[i].segment == q->segment ||
         (q->layout >= 0 && syn_same_split(x, p[i].segment, q->segment))))
      return true;
  return false;
}

static bool has_tensor(const syn_prop *p, int32_t n, int32_t tensor) {
  for (int32_t i = 0; i < n; i++)
    if (p[i].tensor == tensor)
      return true;
  return false;
}

syn_choice syn_choose_input(syn_ctx *x, const syn_prop *have, int32_t n, const syn_prop *want,
                            int32_t k, int v, int input) {
  syn_choice c = {.seconds = HUGE_VAL};
  if (has_prop(x, have, n, want)) {
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
    if (st == HAP_STORE_REPLICATED && input == 1) {
      double sfb = syn_sfb_time(x, k, v);
      if (sfb < c.seconds) {
        c.seconds = sfb;
        c.source = true;
        c.storage = HAP_STORE_SFB;
      }
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
static int32_t apply(search *s, const syn_prop *from, const double *from_mem, int32_t n, int32_t k,
                     int v, double *g) {
  syn_ctx *x = s->x;
  const hap_node *node = &x->g->nodes[k];
  const syn_node *sn = &x->nodes[k];
  const hap_variant *var = &sn->variants[v];
  int32_t need = n + node->n_inputs + node->n_outputs + 1;
  if (HAP_VEC_RESERVE(s->scratch, s->cap_scratch, need, 64) != 0)
    return -1;
  syn_prop *w = s->scratch;
  if (n > 0)
    memcpy(w, from, (size_t)n * sizeof *w);
  int32_t m = n;
  double cost = sn->cost_s[v];
  double *mem = s->wmem;
  memcpy(mem, from_mem, (size_t)x->n_mem * (size_t)x->n_classes * sizeof *mem);
  bool relaxed = s->free_before >= 0;
  if (!relaxed)
    syn_mem_enter(x, k, mem);
  for (int i = 0; i < node->n_inputs; i++) {
    if (x->avail[node->inputs[i]] < s->free_before)
      continue;
    syn_prop want = needed_prop(x, node->inputs[i], var->in[i], sn->segment, var->granule);
    syn_choice c = syn_choose_input(x, w, m, &want, k, v, i);
    if (!isfinite(c.seconds))
      return -1;
    cost += c.seconds;
    if (!c.present) {
      w[m++] = want;
      if (!relaxed)
        syn_mem_add(x, &want, c.source ? c.storage : HAP_STORE_INPUT, mem);
    }
  }
  for (int o = 0; o < node->n_outputs; o++) {
    w[m] = needed_prop(x, node->outputs[o], var->out[o], sn->segment, var->granule);
    if (!relaxed)
      syn_mem_add(x, &w[m], HAP_STORE_INPUT, mem);
    m++;
  }
  if (!relaxed && !syn_mem_fits(x, mem))
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
  if (k + 1 == x->g->n_nodes && x->avail[x->g->loss] >= s->free_before) {
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
  int32_t nc = s->x->n_classes * s->x->n_mem;
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
    m = fmax(m, syn_mem_class(x, mem, c));
  return m;
}

/* a no worse than b in cost and in every class's memory (every vector: kept and working sets) */
static bool dominates(const syn_ctx *x, const syn_state *a, double g, const double *mem) {
  if (a->g > g)
    return false;
  for (int32_t c = 0; c < x->n_classes * x->n_mem; c++)
    if (a->mem[c] > mem[c])
      return false;
  return true;
}

/* Expand `st` (popped at f, s): push every improving successor. */
static hap_status expand(search *s, syn_state *st, double f, hap_err *err) {
  syn_ctx *x = s->x;
  int32_t k = st->k;
  bool relaxed = s->free_before >= 0;
  for (int v = 0; v < x->nodes[k].n_variants; v++) {
    if (!isfinite(x->nodes[k].cost_s[v]))
      continue;
    double g = st->g;
    int32_t n = apply(s, st->props, st->mem, st->n_props, k, v, &g);
    if (n < 0)
      continue;
    s->generated++;
    if (x->cost_bound > 0 && !relaxed && !x->minimize_memory &&
        fmax(f, g + s->h[k + 1]) > x->cost_bound) {
      x->pruned = true; /* every program through it is estimated over the bound */
      continue;
    }
    uint64_t hash = props_hash(k + 1, s->scratch, n);
    if ((s->n_table + 1) * 2 > s->cap_table && table_rehash(s) != 0)
      return hap_err_set(err, HAP_ENOMEM, "out of memory in the program search");
    /* The table keeps the cheapest state per property set; a costlier one survives only if it
     * holds less memory somewhere (it may fit where the cheaper one will not). */
    syn_state **slot = table_slot(s, k + 1, hash, s->scratch, n);
    bool keep_leaner = x->keep_leaner && !relaxed;
    bool by_memory = x->minimize_memory && !relaxed;
    if (*slot != NULL && (by_memory     ? max_mem(x, (*slot)->mem) <= max_mem(x, s->wmem)
                          : keep_leaner ? dominates(x, *slot, g, s->wmem)
                                        : (*slot)->g <= g))
      continue;
    if (!relaxed && x->max_generated > 0 && s->generated > x->max_generated)
      return hap_err_set(err, HAP_EUNSUPPORTED,
                         "the search under the memory limit grew past %lld states",
                         (long long)x->max_generated);
    syn_state *child = new_state(s, st, k + 1, v, g, s->scratch, n, hash, s->wmem);
    if (child == NULL)
      return hap_err_set(err, HAP_ENOMEM, "out of memory in the program search (%.0f MiB)",
                         (double)s->mem.total / 1048576.0);
    if (*slot == NULL)
      s->n_table++;
    if (*slot == NULL || g < (*slot)->g || by_memory)
      *slot = child;
    /* pathmax: f never falls along a path (h is admissible but not consistent across cuts) */
    heap_item it = {by_memory ? max_mem(x, s->wmem) : fmax(f, g + s->h[k + 1]), k + 1, child->seq,
                    child};
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

/* Empty the open list, the table and the state pool (its newest chunk is kept for reuse). */
static void search_reset(search *s) {
  s->n_heap = 0;
  if (s->n_table > 0)
    memset(s->table, 0, s->cap_table * sizeof(syn_state *));
  s->n_table = 0;
  while (s->mem.head != NULL && s->mem.head->next != NULL) {
    pool_chunk *older = s->mem.head->next;
    s->mem.head->next = older->next;
    s->mem.total -= older->cap;
    free(older);
  }
  if (s->mem.head != NULL)
    s->mem.head->used = 0;
}

static void search_free(search *s) {
  pool_free(&s->mem);
  free(s->heap);
  free(s->table);
  free(s->scratch);
  free(s->wmem);
}

/* A* from an empty state after k0 nodes to the first pop of a state after s->end nodes (*done; NULL
 * when none is reachable). `o` (may be NULL) gives the interrupt and the progress callback. */
static hap_status search_run(search *s, int32_t k0, const hap_synth_options *o, int round,
                             syn_state **done, bool *interrupted, hap_err *err) {
  syn_ctx *x = s->x;
  *done = NULL;
  syn_state *deepest = NULL;
  uint64_t hash0 = props_hash(k0, NULL, 0);
  syn_state *root = new_state(s, NULL, k0, -1, 0, NULL, 0, hash0, NULL);
  if (root == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory in the program search");
  *table_slot(s, k0, hash0, NULL, 0) = root;
  s->n_table++;
  /* the root's f: h[k0] is not known yet in a bound search (it is what the search finds) */
  double f0 = s->free_before >= 0 || x->minimize_memory ? 0 : s->h[k0];
  if (heap_push(s, (heap_item){f0, k0, root->seq, root}) != 0)
    return hap_err_set(err, HAP_ENOMEM, "out of memory in the program search");
  if (k0 == s->end) {
    *done = root;
    return HAP_OK;
  }
  bool relaxed = s->free_before >= 0;
  while (s->n_heap > 0) {
    heap_item it = heap_pop(s);
    syn_state *cur = it.s;
    syn_state **slot = table_slot(s, cur->k, cur->hash, cur->props, cur->n_props);
    if (*slot != cur && (relaxed || !x->keep_leaner || dominates(x, *slot, cur->g, cur->mem)))
      continue; /* superseded by a cheaper path to the same state, holding no more memory */
    if (cur->k == s->end) {
      *done = cur;
      return HAP_OK;
    }
    if (deepest == NULL || cur->k > deepest->k)
      deepest = cur;
    s->expanded++;
    if (o != NULL && o->interrupt != NULL && *o->interrupt) {
      *done = complete_greedily(s, deepest);
      *interrupted = true;
      return HAP_OK;
    }
    if (o != NULL && o->progress != NULL && s->expanded % 4096 == 0)
      o->progress(o->progress_ctx, round, s->expanded, it.f);
    HAP_TRY(expand(s, cur, it.f, err));
  }
  return HAP_OK;
}

/* Window cuts cut[0] = 0 < cut[1] < ... < cut[m] = n nodes: from a cut, the next is the point at
 * most MAX_WINDOW nodes on where the fewest tensors are live (the farthest among equals), so the
 * relaxation frees few tensors. Returns m; live needs n + 2 entries, cut n + 1. */
enum { MAX_WINDOW = 12 }; /* nodes; a transformer layer is about 11 */

static int32_t window_cuts(const syn_ctx *x, int32_t *live, int32_t *cut) {
  int32_t n = x->g->n_nodes;
  memset(live, 0, ((size_t)n + 2) * sizeof *live);
  for (int32_t t = 0; t < x->g->n_tensors; t++) {
    int32_t from = x->avail[t] + 1, to = x->last_use[t]; /* in the states after k nodes for k in
                                                             [from, to] */
    if (x->avail[t] < 0 || to < from)
      continue;
    live[from]++;
    live[to + 1]--;
  }
  for (int32_t k = 1; k <= n; k++)
    live[k] += live[k - 1];
  int32_t m = 0;
  cut[0] = 0;
  while (cut[m] < n) {
    int32_t a = cut[m], b = n;
    if (n - a > MAX_WINDOW) {
      b = a + 1;
      for (int32_t j = a + 2; j <= a + MAX_WINDOW; j++)
        if (live[j] <= live[b])
          b = j;
    }
    cut[++m] = b;
  }
  return m;
}

/* Fill x->h_window (see the top of this file): at a cut a, h(a) = W(a, b) + h(b) with b the next
 * cut; inside a window, the per-node bound of its remaining nodes + h(b). s is a search of x, used
 * for its buffers and left reset; the bound searches' expansions are added to *expanded. */
static hap_status window_bounds(syn_ctx *x, search *s, int64_t *expanded, hap_err *err) {
  int32_t n = x->g->n_nodes;
  double *h = x->h_window;
  if (x->plain_heuristic) {
    memcpy(h, x->h_suffix, ((size_t)n + 1) * sizeof *h);
    x->h_window_ready = true;
    return HAP_OK;
  }
  int32_t *cut = malloc(((size_t)n + 1) * sizeof *cut);
  int32_t *live = malloc(((size_t)n + 2) * sizeof *live);
  double *w = malloc(((size_t)n + 1) * sizeof *w); /* per-node bound to the window's end, s */
  hap_status st = HAP_OK;
  if (cut == NULL || live == NULL || w == NULL) {
    st = hap_err_set(err, HAP_ENOMEM, "out of memory in the program search");
    goto out;
  }
  int32_t m = window_cuts(x, live, cut);
  h[n] = 0;
  s->h = w; /* the bound searches' heuristic */
  for (int32_t c = m - 1; c >= 0; c--) {
    int32_t a = cut[c], b = cut[c + 1];
    for (int32_t j = a; j <= b; j++)
      w[j] = x->h_suffix[j] - x->h_suffix[b];
    search_reset(s);
    s->free_before = a;
    s->end = b;
    syn_state *done = NULL;
    bool interrupted = false;
    st = search_run(s, a, NULL, 0, &done, &interrupted, err);
    *expanded += s->expanded;
    s->expanded = 0;
    if (st != HAP_OK)
      goto out;
    /* never below the per-node bound; nothing reachable: the per-node bound (the real search
     * finds nothing either) */
    h[a] = (done != NULL ? fmax(done->g, w[a]) : w[a]) + h[b];
    for (int32_t j = a + 1; j < b; j++)
      h[j] = w[j] + h[b];
  }
  /* a little under the bound, so that rounding in the sums never makes it inadmissible */
  for (int32_t k = 0; k < n; k++)
    h[k] *= 1 - 1e-12;
  x->h_window_ready = true;
out:
  s->free_before = -1;
  s->h = NULL;
  s->generated = 0;
  search_reset(s);
  free(cut);
  free(live);
  free(w);
  return st;
}

hap_status syn_search(syn_ctx *x, const hap_synth_options *o, int round, int8_t *variants,
                      double *cost_s, double *peak_bytes, hap_synth_stats *stats, hap_err *err) {
  search s;
  memset(&s, 0, sizeof s);
  s.x = x;
  s.free_before = -1;
  hap_status st = HAP_OK;
  syn_state *done = NULL;
  int64_t bound_expanded = 0;
  bool interrupted = false;
  s.wmem = calloc((size_t)x->n_classes * (size_t)x->n_mem, sizeof *s.wmem);
  if (s.wmem == NULL || table_rehash(&s) != 0) {
    st = hap_err_set(err, HAP_ENOMEM, "out of memory in the program search");
    goto out;
  }
  if (!x->h_window_ready && !x->minimize_memory &&
      (st = window_bounds(x, &s, &bound_expanded, err)) != HAP_OK)
    goto out;
  s.h = x->minimize_memory ? x->h_suffix : x->h_window;
  s.end = x->g->n_nodes;
  x->pruned = false;
  if (x->cost_bound > 0 && !x->minimize_memory && s.h[0] > x->cost_bound)
    x->pruned = true; /* even the lower bound is over: nothing to search */
  else if ((st = search_run(&s, 0, o, round, &done, &interrupted, err)) != HAP_OK)
    goto out;
  if (interrupted && stats)
    stats->interrupted = true;
  if (done == NULL && x->pruned) {
    if (stats)
      stats->over_bound = true;
    st = hap_err_set(err, HAP_EUNSUPPORTED,
                     "no program is estimated under %.6g s per iteration (the bound)",
                     x->cost_bound);
    goto out;
  }
  if (done == NULL) {
    st = hap_err_set(err, HAP_EUNSUPPORTED,
                     "no program reaches the loss '%s' within the devices' memory",
                     x->g->tensors[x->g->loss].name);
    goto out;
  }
  *cost_s = done->g;
  if (peak_bytes != NULL)
    *peak_bytes = max_mem(x, done->mem);
  for (syn_state *p = done; p->parent != NULL; p = p->parent)
    variants[p->k - 1] = p->variant;
out:
  if (stats) {
    stats->states_expanded += s.expanded + bound_expanded;
    stats->states_generated += s.generated;
  }
  search_free(&s);
  return st;
}
