/* test_kernel_rows.c — a measured profile's kernel tables reach the cost model: reads PROFILE.h5
 * (hap-profile measure --quick, CPU ranks), loads it into the cluster model and checks, on every
 * device, that each case of the quick grid (kernel_times.h) has a forward row and, when it has
 * gradients, a backward row, and that hap_compute_time at that shape returns the row's price
 * exactly: its p50, or for a replayed row (--plan) its mean_s, which it must have. With --plan
 * PLAN --model M --cluster C (a profile measured with the same --plan), the
 * cases are those the plan gives each device instead. Exits 0 when every check holds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cost.h"
#include "model/zoo.h"
#include "plan/pipeline_io.h"
#include "plan/pipeline_lower.h"
#include "plan/plan_io.h"
#include "profile/kernel_times.h"
#include "store/cluster_open.h"
#include "store/profile_store.h"

static int failures = 0;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      failures++;                                                                                  \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                       \
      printf(__VA_ARGS__);                                                                         \
      putchar('\n');                                                                               \
    }                                                                                              \
  } while (0)

static const hap_profile_kernel *find_row(const hap_profile_device *d, hap_op op, bool bwd,
                                          uint64_t key) {
  for (int32_t i = 0; i < d->n_kernels; i++)
    if (d->kernels[i].op == op && d->kernels[i].backward == bwd && d->kernels[i].shape_key == key)
      return &d->kernels[i];
  return NULL;
}

/* Check device `dev`'s rows against its cases; returns the rows matched. */
static int check_device(const hap_profile *p, const hap_cluster *c, int32_t dev,
                        const hap_kcase *kc, int32_t n) {
  const hap_profile_device *d = &p->devices[dev];
  const char *timing = hap_profile_get_env(p, "hap.kernel_timing");
  bool replayed = timing != NULL && strcmp(timing, "replay") == 0;
  int matched = 0;
  for (int32_t i = 0; i < n; i++) {
    bool any_grad = false;
    for (int32_t j = 0; j < kc[i].io.n_in; j++)
      any_grad |= kc[i].io.in_grad[j];
    for (int b = 0; b < 2; b++) {
      bool want = b ? kc[i].bwd && any_grad : kc[i].fwd;
      /* a backward leaving some input's gradient out has its own row (hap_kernel_key) */
      const hap_profile_kernel *row = find_row(d, kc[i].op, b, hap_kernel_key(&kc[i].io, b));
      if (!want)
        continue;
      CHECK(row != NULL, "device %s: no %s row for %s", d->name, b ? "backward" : "forward",
            hap_op_name(kc[i].op));
      if (row == NULL)
        continue;
      CHECK(row->p50_s > 0 && row->p95_s >= row->p50_s && row->reps >= 1,
            "%s %s: p50 %g, p95 %g, reps %d", hap_op_name(row->op), row->shape, row->p50_s,
            row->p95_s, row->reps);
      CHECK(replayed == (row->mean_s > 0), "%s %s: mean %g in a %s profile", hap_op_name(row->op),
            row->shape, row->mean_s, replayed ? "replayed" : "hot-loop");
      double t = hap_compute_time(c, dev, kc[i].op, &kc[i].io, b);
      double price = row->mean_s > 0 ? row->mean_s : row->p50_s;
      CHECK(t == price, "device %s %s %s %s: hap_compute_time %.9g s, the row's price %.9g s",
            d->name, hap_op_name(kc[i].op), b ? "bwd" : "fwd", row->shape, t, price);
      if (dev == 0)
        printf("%-22s %s %-48s p50 %9.1f us  p95 %9.1f us\n", hap_op_name(row->op),
               b ? "bwd" : "fwd", row->shape, row->p50_s * 1e6, row->p95_s * 1e6);
      matched++;
    }
  }
  return matched;
}

/* The cases device `dev` runs under the plan: for a pipelined plan, each stage of its group's
 * program on one micro-batch of its stage graph, as hap-profile --plan times them. */
static hap_status plan_cases(const hap_pipe_lowered *pw, int32_t dev, hap_kcase **out, int32_t *n,
                             hap_err *err) {
  const hap_pipeline *pl = pw->pipeline;
  *out = NULL;
  *n = 0;
  if (hap_pipeline_is_flat(pl))
    return hap_kcases_from_plan(pl->stages[0].plan, pw->graph, dev, out, n, err);
  for (int32_t k = 0; k < pw->n_stages; k++) {
    const hap_pipe_lowered_stage *ls = &pw->stages[k];
    for (int32_t i = 0; i < ls->lw->n_devices; i++) {
      if (ls->devices[i] != dev)
        continue;
      hap_kcase *more = NULL;
      int32_t n_more = 0;
      HAP_TRY(hap_kcases_from_plan(ls->plan, ls->graph, i, &more, &n_more, err));
      hap_kcase *all = realloc(*out, (size_t)(*n + n_more + 1) * sizeof *all);
      if (all == NULL) {
        free(more);
        return hap_err_set(err, HAP_ENOMEM, "out of memory");
      }
      memcpy(all + *n, more, (size_t)n_more * sizeof *all);
      free(more);
      *out = all;
      *n += n_more;
      for (int32_t j = 0; j < *n; j++)
        hap_kcase_fix(&all[j]);
    }
  }
  return HAP_OK;
}

int main(int argc, char **argv) {
  const char *plan = NULL, *model = NULL, *cluster = NULL;
  if (argc == 8 && strcmp(argv[2], "--plan") == 0 && strcmp(argv[4], "--model") == 0 &&
      strcmp(argv[6], "--cluster") == 0) {
    plan = argv[3];
    model = argv[5];
    cluster = argv[7];
  } else if (argc != 2) {
    fprintf(stderr, "usage: %s PROFILE.h5 [--plan PLAN --model MODEL --cluster CLUSTER]\n",
            argv[0]);
    return 2;
  }
  hap_err err = {0};
  hap_profile *p = NULL;
  hap_cluster *c = NULL;
  if (hap_profile_read(argv[1], &p, &err) != HAP_OK ||
      hap_profile_to_cluster(p, &c, &err) != HAP_OK) {
    printf("FAIL: %s\n", err.msg);
    hap_profile_destroy(p);
    return 1;
  }
  hap_graph *g = NULL;
  hap_cluster *pc = NULL;
  hap_pipeline *pl = NULL;
  hap_pipe_lowered *pw = NULL;
  if (plan != NULL && (hap_model_load(model, &g, &err) != HAP_OK ||
                       hap_cluster_open(cluster, &pc, &err) != HAP_OK ||
                       hap_pipeline_read_file(plan, g, pc, &pl, &err) != HAP_OK ||
                       hap_pipe_lower(pl, g, pc, &pw, &err) != HAP_OK)) {
    printf("FAIL: %s\n", err.msg);
    return 1;
  }
  int total = 0;
  for (int32_t dev = 0; dev < p->n_devices; dev++) {
    hap_kcase *kc = NULL;
    int32_t n = 0;
    hap_status st =
        plan != NULL ? plan_cases(pw, dev, &kc, &n, &err) : hap_kcases_default(true, &kc, &n, &err);
    CHECK(st == HAP_OK, "cases: %s", err.msg);
    CHECK(c->devices[dev].n_kernels == p->devices[dev].n_kernels, "%d rows loaded of %d",
          c->devices[dev].n_kernels, p->devices[dev].n_kernels);
    if (plan == NULL) {
      /* the grid covers the main ops */
      static const hap_op ops[] = {HAP_OP_LINEAR,    HAP_OP_MATMUL,     HAP_OP_BMM,
                                   HAP_OP_CONV2D,    HAP_OP_LAYER_NORM, HAP_OP_SOFTMAX,
                                   HAP_OP_GELU,      HAP_OP_RELU,       HAP_OP_MULTI_HEAD_ATTENTION,
                                   HAP_OP_EMBEDDING, HAP_OP_EINSUM};
      for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        bool seen = false;
        for (int32_t i = 0; i < p->devices[dev].n_kernels; i++)
          seen |= p->devices[dev].kernels[i].op == ops[o];
        CHECK(seen, "device %d: no row for %s", dev, hap_op_name(ops[o]));
      }
    }
    total += check_device(p, c, dev, kc, n);
    free(kc);
  }
  CHECK(total > 0, "no kernel rows matched");
  /* A shape nobody measured falls back to the roofline (not a measured row). */
  hap_kcase *kc = NULL;
  int32_t n = 0;
  if (hap_kcases_default(true, &kc, &n, &err) == HAP_OK && n > 0) {
    hap_op_io io = kc[0].io;
    io.attrs = &kc[0].attrs;
    io.in[0].dims[0] += 1; /* [65, 128]: not in the grid */
    const hap_profile_kernel *row =
        find_row(&p->devices[0], kc[0].op, false, hap_kernel_shape_key(&io));
    double t = hap_compute_time(c, 0, kc[0].op, &io, false);
    CHECK(row == NULL && isfinite(t) && t > 0, "unmeasured shape: %g s", t);
  }
  free(kc);
  printf("%d kernel rows matched on %d devices, %d check(s) failed\n", total, p->n_devices,
         failures);
  hap_pipe_lowered_destroy(pw);
  hap_pipeline_destroy(pl);
  hap_cluster_destroy(pc);
  hap_graph_destroy(g);
  hap_cluster_destroy(c);
  hap_profile_destroy(p);
  return failures ? 1 : 0;
}
