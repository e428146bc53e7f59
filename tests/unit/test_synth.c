/* hap-synth: HAP-SPEC §3.6 (ratios 2:1 on free communication), hap never worse than the
 * data-parallel baselines whose programs are in its search space, emitted plans pass the plan
 * validator, byte-identical plans for identical inputs, a clean stop on interrupt, and the search's
 * window-bound heuristic returning the same optimum as the plain per-node bound. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_io.h"
#include "model/zoo.h"
#include "plan/plan_io.h"
#include "synth/synth.h"
#include "synth_internal.h"
#include "test_util.h"

/* Two devices on one host joined by `link`, with `flops` FLOP/s each (the faster first) and
 * memory bandwidth `mem_bw` B/s. */
static hap_cluster *pair(const char *name, const double flops[2], hap_link link, double mem_bw) {
  hap_cluster *c = hap_cluster_create(name);
  cr_assert_eq(hap_cluster_add_host(c, "h", link, link, NULL, NULL), HAP_OK);
  for (int i = 0; i < 2; i++) {
    hap_device d = {0};
    d.model = flops[0] == flops[1] ? "even" : i == 0 ? "fast" : "slow";
    d.sustained_flops[HAP_F32] = d.peak_flops[HAP_F32] = flops[i];
    d.memory_bytes = 1e12;
    d.memory_bw_Bps = mem_bw;
    char dev[8];
    snprintf(dev, sizeof dev, "h:%d", i);
    cr_assert_eq(hap_cluster_add_device(c, dev, &d, NULL, NULL), HAP_OK);
  }
  cr_assert_eq(hap_cluster_validate(c, NULL), HAP_OK);
  return c;
}

/* Two devices, FLOP/s 2F and F, communication free (no latency, unbounded bandwidth), no launch
 * overhead and memory fast enough that every op is compute-bound. */
static hap_cluster *two_to_one(void) {
  return pair("two-to-one", (double[]){2e12, 1e12}, (hap_link){0, 1e30}, 1e30);
}

static hap_plan *synth(const hap_graph *g, const hap_cluster *c, hap_strategy s) {
  hap_synth_options o = {.strategy = s};
  hap_plan *p = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize(g, c, &o, &p, NULL, &err), HAP_OK, "%s", err.msg);
  cr_assert_not_null(p);
  hap_err_clear(&err);
  cr_assert_eq(hap_plan_validate(p, g, c, &err), HAP_OK, "%s: emitted plan invalid: %s",
               hap_strategy_name(s), err.msg);
  return p;
}

Test(synth, hap_spec_3_6_two_layer_mlp_ratios_two_to_one) {
  hap_graph *g = model("mlp:layers=2,batch=24,seq=8,hidden=32");
  hap_cluster *c = two_to_one();
  hap_plan *p = synth(g, c, HAP_STRATEGY_HAP);
  cr_assert_float_eq(p->ratios[0], 2.0 / 3, 1e-6);
  cr_assert_float_eq(p->ratios[1], 1.0 / 3, 1e-6);
  /* data parallel: both linear layers take their input sharded along the batch */
  int linears = 0;
  for (int32_t k = 0; k < p->n_steps; k++) {
    const hap_step *s = &p->steps[k];
    if (s->kind != HAP_STEP_COMPUTE || g->nodes[s->node].op != HAP_OP_LINEAR)
      continue;
    linears++;
    cr_assert_eq(s->variant.in[0], 0, "%s uses %s", g->nodes[s->node].name, s->variant.name);
  }
  cr_assert_eq(linears, 2);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

static void never_worse_than_baselines(const char *spec, const char *cluster) {
  hap_graph *g = model(spec);
  hap_cluster *c = bundled(cluster);
  hap_plan *h = synth(g, c, HAP_STRATEGY_HAP);
  for (int s = HAP_STRATEGY_DP_EV; s <= HAP_STRATEGY_DP_CP; s++) {
    hap_plan *b = synth(g, c, (hap_strategy)s);
    cr_assert(h->predicted_iteration_s <= b->predicted_iteration_s * (1 + 1e-12),
              "%s on %s: hap %.9g s > %s %.9g s", spec, cluster, h->predicted_iteration_s,
              b->strategy, b->predicted_iteration_s);
    hap_plan_destroy(b);
  }
  hap_plan_destroy(h);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(synth, never_worse_than_data_parallel, .timeout = 120) {
  static const char *models[] = {
      "mlp:layers=4,batch=64,seq=16,hidden=256",
      "bert-base:layers=2,batch=32,seq=32,width=128,hidden=512,heads=4,vocab=1024",
      "vit:layers=2,batch=32,width=128,hidden=512,heads=4",
      "bert-moe:layers=2,batch=32,seq=32,width=128,hidden=512,heads=4,vocab=1024,devices=8",
      "vgg19:batch=32"};
  static const char *clusters[] = {"paper-hetero:gpus_per_host=1", "paper-hetero:gpus_per_host=2"};
  for (size_t m = 0; m < sizeof models / sizeof *models; m++)
    for (size_t c = 0; c < sizeof clusters / sizeof *clusters; c++)
      never_worse_than_baselines(models[m], clusters[c]);
}

static char *plan_json(const hap_plan *p, const hap_graph *g, const hap_cluster *c) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  hap_err err = {0};
  cr_assert_eq(hap_plan_write(p, g, c, f, &err), HAP_OK, "%s", err.msg);
  fclose(f);
  return buf;
}

Test(synth, identical_inputs_identical_plan) {
  hap_graph *g = model("bert-base:layers=2,batch=16,seq=16,width=64,hidden=128,heads=4,vocab=256");
  hap_cluster *c = bundled("paper-hetero:gpus_per_host=1");
  hap_plan *a = synth(g, c, HAP_STRATEGY_HAP), *b = synth(g, c, HAP_STRATEGY_HAP);
  char *ja = plan_json(a, g, c), *jb = plan_json(b, g, c);
  cr_assert_str_eq(ja, jb);
  /* and the file reads back into the same plan */
  hap_plan *r = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_plan_from_json(ja, strlen(ja), "plan.json", g, c, &r, &err), HAP_OK, "%s",
               err.msg);
  char *jr = plan_json(r, g, c);
  cr_assert_str_eq(ja, jr);
  free(ja);
  free(jb);
  free(jr);
  hap_plan_destroy(r);
  hap_plan_destroy(a);
  hap_plan_destroy(b);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(synth, interrupt_keeps_a_valid_plan) {
  hap_graph *g = model("vit:layers=2,batch=16,width=64,hidden=128,heads=4");
  hap_cluster *c = bundled("paper-hetero:gpus_per_host=1");
  volatile sig_atomic_t stop = 1; /* as if Ctrl-C came right away */
  hap_synth_options o = {.strategy = HAP_STRATEGY_HAP, .interrupt = &stop};
  hap_plan *p = NULL;
  hap_synth_stats st;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize(g, c, &o, &p, &st, &err), HAP_OK, "%s", err.msg);
  cr_assert(st.interrupted);
  cr_assert_eq(hap_plan_validate(p, g, c, &err), HAP_OK, "%s", err.msg);
  cr_assert(isfinite(p->predicted_iteration_s) && p->predicted_iteration_s > 0);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(synth, plans_carry_consistent_predictions) {
  hap_graph *g = model("vgg19:batch=16");
  hap_cluster *c = bundled("paper-hetero:gpus_per_host=1");
  hap_plan *p = synth(g, c, HAP_STRATEGY_HAP);
  double sum = 0;
  for (int32_t k = 0; k < p->n_steps; k++) {
    cr_assert(p->steps[k].predicted_s >= 0);
    sum += p->steps[k].predicted_s;
  }
  cr_assert_float_eq(sum, p->predicted_iteration_s, 1e-9 * sum);
  for (int32_t i = 0; i < p->n_devices; i++) {
    cr_assert(p->device_compute_s[i] <= p->predicted_iteration_s * (1 + 1e-12));
    cr_assert(p->device_memory_bytes[i] > 0);
  }
  double r = 0;
  for (int32_t i = 0; i < p->n_devices; i++)
    r += p->ratios[i];
  cr_assert_float_eq(r, 1.0, 1e-9);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(synth, strategy_names_round_trip) {
  for (int s = 0; s < HAP_STRATEGY_COUNT; s++) {
    hap_strategy x;
    cr_assert_eq(hap_strategy_parse(hap_strategy_name((hap_strategy)s), &x), HAP_OK);
    cr_assert_eq(x, (hap_strategy)s);
  }
  hap_strategy x;
  cr_assert_eq(hap_strategy_parse("zero-infinity", &x), HAP_ENOTFOUND);
}

static hap_status synth_limited(const hap_graph *g, const hap_cluster *c, double limit,
                                hap_plan **p, hap_err *err) {
  hap_synth_options o = {.strategy = HAP_STRATEGY_HAP, .memory_limit_bytes = limit};
  return hap_synthesize(g, c, &o, p, NULL, err);
}

Test(synth, memory_limit_forces_sharded_parameters) {
  hap_graph *g = model("mlp:layers=2,batch=24,seq=8,hidden=512");
  hap_cluster *c = two_to_one();
  /* unconstrained: data parallel, every weight replicated (value + gradient: 2 x 1 MiB each) */
  hap_plan *p = NULL;
  hap_err err = {0};
  cr_assert_eq(synth_limited(g, c, 0, &p, &err), HAP_OK, "%s", err.msg);
  int replicated = 0;
  for (int32_t k = 0; k < p->n_steps; k++)
    replicated +=
        p->steps[k].kind == HAP_STEP_SOURCE && p->steps[k].storage == HAP_STORE_REPLICATED;
  cr_assert_geq(replicated, 2);
  double unconstrained = p->device_memory_bytes[0];
  hap_plan_destroy(p);
  /* 4.8 MiB per device cannot hold the replicated weights: the plan must shard them */
  double limit = 4.8 * 1048576;
  cr_assert(unconstrained > limit, "unconstrained plan uses %g bytes", unconstrained);
  cr_assert_eq(synth_limited(g, c, limit, &p, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_plan_validate(p, g, c, &err), HAP_OK, "%s", err.msg);
  for (int32_t i = 0; i < p->n_devices; i++)
    cr_assert(p->device_memory_bytes[i] <= limit, "device %d holds %g bytes", i,
              p->device_memory_bytes[i]);
  int sharded = 0;
  for (int32_t k = 0; k < p->n_steps; k++) {
    const hap_step *s = &p->steps[k];
    if (s->kind == HAP_STEP_SOURCE && g->tensors[s->tensor].kind == HAP_TENSOR_PARAMETER &&
        g->tensors[s->tensor].shape.rank == 2)
      sharded += s->storage == HAP_STORE_SHARDED || s->storage == HAP_STORE_ZERO;
  }
  cr_assert_geq(sharded, 1);
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(synth, memory_limit_too_small_for_anything_says_how_much_is_needed) {
  hap_graph *g = model("mlp:layers=2,batch=24,seq=8,hidden=512");
  hap_cluster *c = two_to_one();
  hap_plan *p = NULL;
  hap_err err = {0};
  cr_assert_eq(synth_limited(g, c, 1024, &p, &err), HAP_EINVAL);
  cr_assert_null(p);
  cr_assert(strstr(err.msg, "no program fits in 1.00 KiB per device") != NULL, "%s", err.msg);
  cr_assert(strstr(err.msg, "the leanest program found needs") != NULL, "%s", err.msg);
  cr_assert(strchr(err.msg, '\n') == NULL);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* A limit that the compute-proportional split overflows (the fast device holds 2/3 of the
 * activations) but the even split meets: the even starting point must still be searched, so hap
 * finds a plan wherever dp-ev's program (in its space) fits, and is no slower than it. */
Test(synth, memory_limit_met_only_by_even_ratios_still_finds_a_plan) {
  hap_graph *g = model("mlp:layers=4,batch=96,seq=64,hidden=64");
  hap_cluster *c = two_to_one();
  hap_synth_options o = {.strategy = HAP_STRATEGY_DP_EV};
  hap_plan *ev = NULL, *cp = NULL, *p = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize(g, c, &o, &ev, NULL, &err), HAP_OK, "%s", err.msg);
  o.strategy = HAP_STRATEGY_DP_CP;
  cr_assert_eq(hap_synthesize(g, c, &o, &cp, NULL, &err), HAP_OK, "%s", err.msg);
  double even = fmax(ev->device_memory_bytes[0], ev->device_memory_bytes[1]);
  double prop = fmax(cp->device_memory_bytes[0], cp->device_memory_bytes[1]);
  cr_assert(prop > 1.2 * even, "dp-cp %g bytes, dp-ev %g bytes", prop, even);
  double limit = 1.05 * even;
  hap_plan_destroy(ev);
  hap_plan_destroy(cp);
  o.memory_limit_bytes = limit;
  o.strategy = HAP_STRATEGY_DP_CP;
  hap_synth_stats st;
  cr_assert_eq(hap_synthesize(g, c, &o, &cp, &st, &err), HAP_EINVAL, "dp-cp fits in %g", limit);
  cr_assert(st.no_fit);
  hap_err_clear(&err);
  o.strategy = HAP_STRATEGY_DP_EV;
  cr_assert_eq(hap_synthesize(g, c, &o, &ev, NULL, &err), HAP_OK, "%s", err.msg);
  o.strategy = HAP_STRATEGY_HAP;
  cr_assert_eq(hap_synthesize(g, c, &o, &p, &st, &err), HAP_OK, "%s", err.msg);
  cr_assert(!st.no_fit);
  cr_assert_eq(hap_plan_validate(p, g, c, &err), HAP_OK, "%s", err.msg);
  for (int32_t i = 0; i < p->n_devices; i++)
    cr_assert(p->device_memory_bytes[i] <= limit, "device %d holds %g > %g bytes", i,
              p->device_memory_bytes[i], limit);
  cr_assert(p->predicted_iteration_s <= ev->predicted_iteration_s * (1 + 1e-12),
            "hap %.9g s > dp-ev %.9g s", p->predicted_iteration_s, ev->predicted_iteration_s);
  hap_plan_destroy(p);
  hap_plan_destroy(ev);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

typedef struct rescore_log {
  int calls;
  double worst;
} rescore_log;

/* A perverse scorer: prefers the slower candidate, so the hook demonstrably decides. */
static double prefer_slow(void *ctx, const hap_plan *p, const hap_graph *g, const hap_cluster *c) {
  (void)g;
  (void)c;
  rescore_log *log = ctx;
  log->calls++;
  if (p->predicted_iteration_s > log->worst)
    log->worst = p->predicted_iteration_s;
  return -p->predicted_iteration_s;
}

Test(synth, rescore_hook_chooses_among_candidates) {
  hap_graph *g =
      model("bert-base:layers=2,batch=32,seq=32,width=128,hidden=512,heads=4,vocab=1024");
  hap_cluster *c = bundled("paper-hetero:gpus_per_host=1");
  hap_plan *plain = synth(g, c, HAP_STRATEGY_HAP);
  rescore_log log = {0, 0};
  hap_synth_options o = {.strategy = HAP_STRATEGY_HAP, .rescore = prefer_slow, .rescore_ctx = &log};
  hap_plan *p = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize(g, c, &o, &p, NULL, &err), HAP_OK, "%s", err.msg);
  cr_assert_geq(log.calls, 1);
  cr_assert_float_eq(p->predicted_iteration_s, log.worst, 1e-12);
  cr_assert(p->predicted_iteration_s >= plain->predicted_iteration_s);
  cr_assert_eq(hap_plan_validate(p, g, c, &err), HAP_OK, "%s", err.msg);
  hap_plan_destroy(p);
  hap_plan_destroy(plain);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

Test(synth, segments_get_their_own_ratios_and_valid_resharding) {
  hap_graph *g = model("mlp:layers=4,batch=48,seq=8,hidden=256,segments=1");
  cr_assert_gt(g->n_segments, 1);
  hap_cluster *c = bundled("paper-hetero:gpus_per_host=1");
  hap_plan *p = synth(g, c, HAP_STRATEGY_HAP); /* synth() validates the property flow */
  cr_assert_eq(p->n_segments, g->n_segments);
  for (int32_t s = 0; s < p->n_segments; s++) {
    double sum = 0;
    for (int32_t i = 0; i < p->n_devices; i++) {
      cr_assert(p->ratios[(size_t)s * (size_t)p->n_devices + (size_t)i] >= 0);
      sum += p->ratios[(size_t)s * (size_t)p->n_devices + (size_t)i];
    }
    cr_assert_float_eq(sum, 1.0, 1e-9, "segment %d", s);
  }
  /* any Gather consumed in another segment than the one it was made in is re-sharded first */
  for (int32_t k = 0; k < p->n_steps; k++) {
    const hap_step *s = &p->steps[k];
    if (s->kind == HAP_STEP_COMM && s->comm == HAP_COMM_ALL_TO_ALL && s->from == s->to)
      cr_assert_neq(s->from_segment, s->segment);
  }
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* A segment boundary costs only what moves: with a segment per layer, an mlp whose layers all
 * favour one split costs what it costs without segments, under hap and dp-ev alike (it once paid
 * an all-to-all at every boundary: 203.7 ms against 74.7 ms). */
Test(synth, segments_cost_nothing_where_the_splits_agree) {
  hap_cluster *c = bundled("paper-hetero:gpus_per_host=1,hosts=1");
  hap_graph *plain = model("mlp:layers=4");
  hap_graph *seg = model("mlp:layers=4,segments=1");
  hap_strategy strategies[2] = {HAP_STRATEGY_HAP, HAP_STRATEGY_DP_EV};
  for (int i = 0; i < 2; i++) {
    hap_plan *a = synth(plain, c, strategies[i]), *b = synth(seg, c, strategies[i]);
    cr_assert_leq(b->predicted_iteration_s, a->predicted_iteration_s * (1 + 1e-12),
                  "%s: %g s with segments, %g s without", hap_strategy_name(strategies[i]),
                  b->predicted_iteration_s, a->predicted_iteration_s);
    for (int32_t k = 0; k < b->n_steps; k++)
      cr_assert(b->steps[k].kind != HAP_STEP_COMM || b->steps[k].comm != HAP_COMM_ALL_TO_ALL,
                "%s: steps[%d] re-shards between segments", hap_strategy_name(strategies[i]), k);
    hap_plan_destroy(a);
    hap_plan_destroy(b);
  }
  hap_graph_destroy(seg);
  hap_graph_destroy(plain);
  hap_cluster_destroy(c);
}

/* The search under fixed ratios with the plain per-node heuristic and with the window bounds: the
 * same optimal cost (both are admissible; only the number of expanded states may differ), the
 * window bound never above that cost, and the program it returns replays to its cost. Returns the
 * (window) search's expanded states; *failed when neither finds a program. */
static int64_t same_optimum(syn_ctx *x, const char *what, bool *failed) {
  int32_t n = x->g->n_nodes;
  int8_t *plain = calloc((size_t)n + 1, 1), *window = calloc((size_t)n + 1, 1);
  cr_assert(plain && window);
  double c_plain = 0, c_window = 0, replayed = 0;
  hap_synth_stats sp = {0}, sw = {0};
  hap_err ep = {0}, ew = {0};
  x->plain_heuristic = true;
  x->h_window_ready = false;
  hap_status st_plain = syn_search(x, NULL, 0, plain, &c_plain, NULL, &sp, &ep);
  x->plain_heuristic = false;
  x->h_window_ready = false;
  hap_status st_window = syn_search(x, NULL, 0, window, &c_window, NULL, &sw, &ew);
  /* under a memory limit the plain search may hit the state cap first: nothing to compare */
  bool capped = x->max_generated > 0 && st_plain != HAP_OK && strstr(ep.msg, "grew past") != NULL;
  if (!capped)
    cr_assert_eq(st_plain, st_window, "%s: plain %s / window %s", what, ep.msg, ew.msg);
  *failed = st_plain != HAP_OK;
  if (!*failed) {
    cr_assert(fabs(c_plain - c_window) <= 1e-9 * c_plain, "%s: plain %.17g s, window %.17g s", what,
              c_plain, c_window);
    cr_assert(x->h_window[0] <= c_window * (1 + 1e-12), "%s: bound %.17g s above the optimum %.17g",
              what, x->h_window[0], c_window);
    cr_assert(x->h_window[0] >= x->h_suffix[0] * (1 - 1e-9), "%s: window bound below the plain one",
              what);
    hap_err err = {0};
    cr_assert_eq(syn_replay(x, window, NULL, &replayed, &err), HAP_OK, "%s", err.msg);
    cr_assert(fabs(replayed - c_window) <= 1e-9 * c_window, "%s: replayed %.17g, searched %.17g",
              what, replayed, c_window);
  }
  free(plain);
  free(window);
  return sw.states_expanded;
}

Test(synth, window_bounds_keep_the_optimum, .timeout = 120) {
  static const char *models[] = {
      "mlp:layers=4,batch=64,seq=16,hidden=256",
      "bert-base:layers=3,batch=32,seq=32,width=128,hidden=512,heads=4,vocab=1024",
      "vit:layers=3,batch=32,width=128,hidden=512,heads=4",
      "bert-moe:layers=2,batch=32,seq=32,width=128,hidden=512,heads=4,vocab=1024,devices=8",
      "vgg19:batch=32", "gpt:layers=2,batch=8,seq=64,width=128,heads=4,vocab=512",
      /* small enough for the plain search to finish under a memory limit */
      "vit:layers=1,batch=16,width=64,hidden=128,heads=2",
      "bert-base:layers=1,batch=16,seq=16,width=64,hidden=128,heads=2,vocab=256"};
  static const char *clusters[] = {"paper-hetero:gpus_per_host=1", "paper-hetero:gpus_per_host=2",
                                   "paper-homo:gpus_per_host=1"};
  int lean_compared = 0; /* memory-bound cases where both searches found the optimum */
  for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
    hap_graph *g = model(models[m]);
    for (size_t cl = 0; cl < sizeof clusters / sizeof *clusters; cl++) {
      hap_cluster *c = bundled(clusters[cl]);
      syn_ctx x;
      hap_err err = {0};
      cr_assert_eq(syn_ctx_init(&x, g, c, HAP_STRATEGY_HAP, HAP_SP_FREE, 0, &err), HAP_OK, "%s",
                   err.msg);
      size_t nr = (size_t)x.n_segments * (size_t)x.n;
      double *ratios = malloc(nr * sizeof *ratios);
      cr_assert_not_null(ratios);
      /* even ratios, then uneven ones (device i gets a share growing with i) */
      for (int shape = 0; shape < 2; shape++) {
        for (int32_t s = 0; s < x.n_segments; s++)
          for (int32_t i = 0; i < x.n; i++)
            ratios[(size_t)s * (size_t)x.n + (size_t)i] =
                (shape == 0 ? 1.0 : (double)(i + 1 + s)) /
                (shape == 0 ? x.n : (double)x.n * (x.n + 1) / 2 + (double)s * x.n);
        cr_assert_eq(syn_set_ratios(&x, ratios, &err), HAP_OK, "%s", err.msg);
        char what[160];
        snprintf(what, sizeof what, "%s on %s, %s ratios", models[m], clusters[cl],
                 shape == 0 ? "even" : "uneven");
        bool failed = false;
        same_optimum(&x, what, &failed);
        cr_assert(!failed, "%s: no program", what);
        /* memory binding: under a limit halfway between the leanest program's peak and the free
         * optimum's, the lean search (keep_leaner) must agree between the two heuristics too */
        int8_t *prog = calloc((size_t)g->n_nodes + 1, 1);
        cr_assert_not_null(prog);
        double cost = 0, peak = 0, leanest = 0;
        hap_synth_stats st = {0};
        cr_assert_eq(syn_search(&x, NULL, 0, prog, &cost, &peak, &st, &err), HAP_OK, "%s", err.msg);
        x.minimize_memory = true;
        cr_assert_eq(syn_search(&x, NULL, 0, prog, &cost, &leanest, &st, &err), HAP_OK, "%s",
                     err.msg);
        x.minimize_memory = false;
        free(prog);
        double *saved = malloc((size_t)x.n_classes * sizeof *saved);
        cr_assert_not_null(saved);
        memcpy(saved, x.mem_limit, (size_t)x.n_classes * sizeof *saved);
        for (int32_t k = 0; k < x.n_classes; k++)
          x.mem_limit[k] = 0.5 * (leanest + peak);
        x.keep_leaner = true;
        x.max_generated = 200000;
        snprintf(what, sizeof what, "%s on %s, %s ratios, memory-bound", models[m], clusters[cl],
                 shape == 0 ? "even" : "uneven");
        same_optimum(&x, what, &failed);
        lean_compared += !failed && leanest < peak;
        x.keep_leaner = false;
        x.max_generated = 0;
        memcpy(x.mem_limit, saved, (size_t)x.n_classes * sizeof *saved);
        free(saved);
      }
      free(ratios);
      syn_ctx_free(&x);
      hap_cluster_destroy(c);
    }
    hap_graph_destroy(g);
  }
  cr_assert_geq(lean_compared, 12, "only %d memory-bound comparisons", lean_compared);
}

/* The reason for the window bounds: on repeated layers the states expanded grow linearly with the
 * layers (the plain per-node bound let them grow about as L^1.8). */
Test(synth, window_bounds_expand_linearly_in_layers, .timeout = 120) {
  hap_cluster *c = bundled("paper-hetero:gpus_per_host=1");
  int64_t expanded[2];
  static const int layers[2] = {4, 16};
  for (int i = 0; i < 2; i++) {
    char spec[96];
    snprintf(spec, sizeof spec, "vit:layers=%d,batch=256", layers[i]);
    hap_graph *g = model(spec);
    syn_ctx x;
    hap_err err = {0};
    cr_assert_eq(syn_ctx_init(&x, g, c, HAP_STRATEGY_HAP, HAP_SP_FREE, 0, &err), HAP_OK, "%s",
                 err.msg);
    double *ratios = malloc((size_t)x.n_segments * (size_t)x.n * sizeof *ratios);
    cr_assert_not_null(ratios);
    for (size_t r = 0; r < (size_t)x.n_segments * (size_t)x.n; r++)
      ratios[r] = 1.0 / x.n;
    cr_assert_eq(syn_set_ratios(&x, ratios, &err), HAP_OK, "%s", err.msg);
    bool failed = false;
    expanded[i] = same_optimum(&x, spec, &failed);
    cr_assert(!failed);
    free(ratios);
    syn_ctx_free(&x);
    hap_graph_destroy(g);
  }
  /* 4x the layers: at most 4x the states (plus a little for the fixed head and tail) */
  cr_assert(expanded[1] <= 4 * expanded[0] + 64, "4 layers: %lld states, 16 layers: %lld",
            (long long)expanded[0], (long long)expanded[1]);
  hap_cluster_destroy(c);
}

/* Two equal devices (10 TFLOP/s) joined by a 1 Gb/s link. */
static hap_cluster *slow_pair(void) {
  return pair("slow-pair", (double[]){1e13, 1e13}, (hap_link){1e-5, 1.25e8}, 1e12);
}

/* How the search sources the weight of mlp's one linear layer under its data-parallel variant
 * (input and output split on the batch, the weight whole). */
static hap_storage dp_weight_storage(const char *spec, hap_sfb_use use) {
  hap_cluster *c = slow_pair();
  hap_graph *g = model(spec);
  syn_ctx x;
  hap_err err = {0};
  cr_assert_eq(syn_ctx_init(&x, g, c, HAP_STRATEGY_HAP, HAP_SP_FREE, 0, &err), HAP_OK, "%s",
               err.msg);
  x.sfb = use;
  double ratios[2] = {0.5, 0.5};
  cr_assert_eq(syn_set_ratios(&x, ratios, &err), HAP_OK, "%s", err.msg);
  int32_t k = -1;
  for (int32_t n = 0; n < g->n_nodes && k < 0; n++)
    if (g->nodes[n].op == HAP_OP_LINEAR)
      k = n;
  cr_assert_geq(k, 0);
  int v = -1;
  for (int i = 0; i < x.nodes[k].n_variants && v < 0; i++) {
    const hap_variant *var = &x.nodes[k].variants[i];
    if (var->in[0] == 0 && var->in[1] == HAP_LAYOUT_IDENTITY && var->out[0] == 0)
      v = i;
  }
  cr_assert_geq(v, 0, "%s: no data-parallel variant", spec);
  syn_prop want = {g->nodes[k].inputs[1], HAP_LAYOUT_IDENTITY, 0, 1};
  syn_choice ch = syn_choose_input(&x, NULL, 0, &want, k, v, 1);
  cr_assert(ch.source && isfinite(ch.seconds));
  syn_ctx_free(&x);
  hap_graph_destroy(g);
  hap_cluster_destroy(c);
  return ch.storage;
}

/* Sufficient-factor broadcasting: a 4096 x 4096 weight (64 MiB of gradient) with 8 rows of
 * batch moves 2 x 8 x 4096 floats instead; with 8192 rows the factors outweigh the gradient. */
Test(synth, sfb_where_the_factors_are_smaller_than_the_gradient) {
  cr_assert_eq(dp_weight_storage("mlp:batch=8,seq=1,hidden=4096,layers=1", HAP_SFB_USE_AUTO),
               HAP_STORE_SFB);
  cr_assert_eq(dp_weight_storage("mlp:batch=8,seq=1,hidden=4096,layers=1", HAP_SFB_USE_OFF),
               HAP_STORE_REPLICATED, "--sfb off still chose sfb");
  cr_assert_eq(dp_weight_storage("mlp:batch=8192,seq=1,hidden=4096,layers=1", HAP_SFB_USE_AUTO),
               HAP_STORE_REPLICATED);
}
