/* cost.c — compute, point-to-point and collective cost queries (cost.h).
 *
 * Collective formulas (alpha-beta / Hockney; n ranks, S bytes, a link of latency a and
 * bandwidth B):
 *   all-reduce   ring          2(n-1) a + 2(n-1)/n S/B                 (B, a: the ring's
 * bottleneck) tree          2 ceil(log2 n) a + 2 S/B                (worst link of the group)
 *                hierarchical  2[(k-1) a_i + (k-1)/k S/B_i] + 2(h-1) a_e + 2(h-1)/h S/B_nic
 *                              (k members per host, h hosts: intra reduce-scatter, k parallel
 *                               inter-host rings of S/k sharing each NIC, intra all-gather)
 *   all-gather / reduce-scatter of shards s_i:
 *                ring (padded) (n-1) a + (n-1) max(s)/B                every rank sends the largest
 *                grouped       n a + (sum(s) - min(s))/B               one pipelined broadcast per
 *                                                                      rank, run concurrently: the
 *                                                                      busiest ring link carries
 *                                                                      every shard but one
 *   all-to-all   pairwise      max( (n-1)(a_w + max(s)/(n B_w)),
 *                                   (n-1) a_e + k max(s)(n-k)/(n B_nic) )  (NIC carries the
 *                                                                      traffic of k members)
 *   broadcast    ring          (n-1) a + S/B                           (pipelined chain)
 *                tree          ceil(log2 n) a + min(2, n-1) S/B        (pipelined binary tree)
 */
#include "cluster/cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/kernel_model.h"

static const char *const impl_names[HAP_IMPL_COUNT] = {"auto",         "ring",     "tree",
                                                       "hierarchical", "pairwise", "grouped"};

const char *hap_coll_impl_name(hap_coll_impl i) {
  return (unsigned)i < HAP_IMPL_COUNT ? impl_names[i] : "?";
}

hap_status hap_coll_impl_parse(const char *s, hap_coll_impl *out) {
  for (int i = 0; i < HAP_IMPL_COUNT; i++) {
    if (strcmp(s, impl_names[i]) == 0) {
      *out = (hap_coll_impl)i;
      return HAP_OK;
    }
  }
  return HAP_ENOTFOUND;
}

hap_coll_bytes hap_coll_bytes_of(const double *per_rank, int32_t n) {
  hap_coll_bytes b = {0, 0, 0, n};
  for (int32_t i = 0; i < n; i++) {
    if (i == 0 || per_rank[i] > b.max)
      b.max = per_rank[i];
    if (i == 0 || per_rank[i] < b.min)
      b.min = per_rank[i];
    b.sum += per_rank[i];
  }
  return b;
}

double hap_reshard_spread(int32_t n) { return n > 1 ? (double)n / (double)(n - 1) : 1; }

hap_coll_bytes hap_coll_bytes_uniform(double bytes, int32_t n) {
  hap_coll_bytes b = {bytes, bytes, bytes * n, n};
  return b;
}

/* ---- groups -------------------------------------------------------------------------------- */

static const hap_link no_link = {0, HUGE_VAL}; /* "no such path": never the bottleneck */

static void take_worse(hap_link *acc, hap_link l) {
  if (l.bandwidth_Bps < acc->bandwidth_Bps)
    acc->bandwidth_Bps = l.bandwidth_Bps;
  if (l.latency_s > acc->latency_s)
    acc->latency_s = l.latency_s;
}

hap_status hap_group_init(const hap_cluster *c, const int32_t *ranks, int32_t n, hap_group *g,
                          hap_err *err) {
  memset(g, 0, sizeof *g);
  if (n < 1)
    return hap_err_set(err, HAP_EINVAL, "a collective group needs at least one rank");
  int32_t *count = calloc((size_t)c->n_hosts, sizeof *count);
  int32_t *out_edges = calloc((size_t)c->n_hosts, sizeof *out_edges);
  int32_t *in_edges = calloc((size_t)c->n_hosts, sizeof *in_edges);
  unsigned char *member = calloc((size_t)c->n_devices, 1);
  hap_status st = HAP_OK;
  if (!count || !out_edges || !in_edges || !member) {
    st = hap_err_set(err, HAP_ENOMEM, "out of memory summarising a group of %d ranks", n);
    goto out;
  }
  for (int32_t i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= c->n_devices) {
      st = hap_err_set(err, HAP_EINVAL, "group rank %d: device %d does not exist", i, ranks[i]);
      goto out;
    }
    if (member[ranks[i]]) {
      st = hap_err_set(err, HAP_EINVAL, "group rank %d: device '%s' appears twice", i,
                       c->devices[ranks[i]].name);
      goto out;
    }
    member[ranks[i]] = 1;
    int32_t h = c->devices[ranks[i]].host;
    if (count[h]++ == 0)
      g->n_hosts++;
    if (count[h] > g->max_per_host)
      g->max_per_host = count[h];
  }
  g->n = n;
  g->intra = g->inter = no_link;
  g->nic_bw_Bps = HUGE_VAL;
  double lat1 = 0, lat2 = 0; /* the two largest NIC latencies among spanned hosts */
  for (int32_t h = 0; h < c->n_hosts; h++) {
    if (count[h] == 0)
      continue;
    const hap_host *host = &c->hosts[h];
    if (count[h] >= 2)
      take_worse(&g->intra, host->intra);
    if (host->nic.bandwidth_Bps < g->nic_bw_Bps)
      g->nic_bw_Bps = host->nic.bandwidth_Bps;
    if (host->nic.latency_s > lat1) {
      lat2 = lat1;
      lat1 = host->nic.latency_s;
    } else if (host->nic.latency_s > lat2) {
      lat2 = host->nic.latency_s;
    }
  }
  if (g->n_hosts > 1) {
    g->inter.bandwidth_Bps = g->nic_bw_Bps;
    g->inter.latency_s = lat1 + lat2 + c->inter_latency_s;
  }
  /* Per-pair overrides between members refine the intra/inter bottlenecks. */
  size_t cursor = 0;
  int32_t src, dst;
  hap_link l;
  while (hap_cluster_next_link_override(c, &cursor, &src, &dst, &l)) {
    if (!member[src] || !member[dst] || src == dst)
      continue;
    take_worse(c->devices[src].host == c->devices[dst].host ? &g->intra : &g->inter, l);
  }
  g->worst = g->intra;
  take_worse(&g->worst, g->inter);
  if (n == 1)
    g->worst = no_link;

  /* The ring in member order; crossing edges share their hosts' NICs. */
  g->ring = no_link;
  for (int32_t i = 0; n > 1 && i < n; i++) {
    int32_t a = ranks[i], b = ranks[(i + 1) % n];
    int32_t ha = c->devices[a].host, hb = c->devices[b].host;
    if (ha != hb) {
      out_edges[ha]++;
      in_edges[hb]++;
    }
  }
  for (int32_t i = 0; n > 1 && i < n; i++) {
    int32_t a = ranks[i], b = ranks[(i + 1) % n];
    int32_t ha = c->devices[a].host, hb = c->devices[b].host;
    hap_link e = hap_cluster_link(c, a, b);
    if (ha != hb) {
      e.bandwidth_Bps = fmin(e.bandwidth_Bps, c->hosts[ha].nic.bandwidth_Bps / out_edges[ha]);
      e.bandwidth_Bps = fmin(e.bandwidth_Bps, c->hosts[hb].nic.bandwidth_Bps / in_edges[hb]);
    }
    take_worse(&g->ring, e);
  }
  for (int k = 0; k < HAP_COLL_KIND_COUNT; k++)
    g->fit[k] = hap_cluster_find_fit(c, (hap_coll_kind)k, ranks, n);
out:
  free(count);
  free(out_edges);
  free(in_edges);
  free(member);
  return st;
}

/* ---- collectives --------------------------------------------------------------------------- */

static double log2_ceil(int32_t n) {
  double r = 0;
  for (int64_t p = 1; p < n; p *= 2)
    r += 1;
  return r;
}

static double all_reduce_time(const hap_group *g, hap_coll_impl impl, double s) {
  double n = g->n;
  switch (impl) {
  case HAP_IMPL_RING:
    return 2 * (n - 1) * g->ring.latency_s + 2 * (n - 1) / n * s / g->ring.bandwidth_Bps;
  case HAP_IMPL_TREE:
    return 2 * log2_ceil(g->n) * g->worst.latency_s + 2 * s / g->worst.bandwidth_Bps;
  case HAP_IMPL_HIERARCHICAL: {
    if (g->n_hosts < 2 || g->max_per_host < 2)
      return HUGE_VAL;
    double k = g->max_per_host, h = g->n_hosts;
    double intra = (k - 1) * g->intra.latency_s + (k - 1) / k * s / g->intra.bandwidth_Bps;
    double inter = 2 * (h - 1) * g->inter.latency_s + 2 * (h - 1) / h * s / g->nic_bw_Bps;
    return 2 * intra + inter;
  }
  default: return HUGE_VAL;
  }
}

static double gather_scatter_time(const hap_group *g, hap_coll_impl impl, hap_coll_bytes b) {
  double n = g->n;
  switch (impl) {
  case HAP_IMPL_RING: return (n - 1) * g->ring.latency_s + (n - 1) * b.max / g->ring.bandwidth_Bps;
  case HAP_IMPL_GROUPED: return n * g->ring.latency_s + (b.sum - b.min) / g->ring.bandwidth_Bps;
  default: return HUGE_VAL;
  }
}

static double all_to_all_time(const hap_group *g, hap_coll_impl impl, hap_coll_bytes b) {
  if (impl != HAP_IMPL_PAIRWISE)
    return HUGE_VAL;
  double n = g->n;
  double t = (n - 1) * (g->worst.latency_s + b.max / (n * g->worst.bandwidth_Bps));
  if (g->n_hosts > 1) {
    double k = g->max_per_host;
    double nic = (n - 1) * g->inter.latency_s + k * b.max * (n - k) / (n * g->nic_bw_Bps);
    t = fmax(t, nic);
  }
  return t;
}

static double broadcast_time(const hap_group *g, hap_coll_impl impl, double s) {
  double n = g->n;
  switch (impl) {
  case HAP_IMPL_RING: return (n - 1) * g->ring.latency_s + s / g->ring.bandwidth_Bps;
  case HAP_IMPL_TREE:
    return log2_ceil(g->n) * g->worst.latency_s + fmin(2, n - 1) * s / g->worst.bandwidth_Bps;
  default: return HUGE_VAL;
  }
}

double hap_coll_fit_bytes(hap_coll_kind kind, hap_coll_impl impl, hap_coll_bytes b) {
  if (impl == HAP_IMPL_GROUPED)
    return b.sum; /* the shares as they are */
  switch (kind) {
  case HAP_COLL_ALL_GATHER:
  case HAP_COLL_REDUCE_SCATTER: return b.max * b.n; /* padded: every rank sends the largest */
  default: return b.max;
  }
}

static double formula_time(const hap_group *g, hap_coll_kind kind, hap_coll_impl impl,
                           hap_coll_bytes b) {
  switch (kind) {
  case HAP_COLL_ALL_REDUCE: return all_reduce_time(g, impl, b.max);
  case HAP_COLL_ALL_GATHER:
  case HAP_COLL_REDUCE_SCATTER: return gather_scatter_time(g, impl, b);
  case HAP_COLL_ALL_TO_ALL: return all_to_all_time(g, impl, b);
  case HAP_COLL_BROADCAST: return broadcast_time(g, impl, b.max);
  default: return HUGE_VAL;
  }
}

hap_coll_impl hap_coll_best(const hap_group *g, hap_coll_kind kind, hap_coll_bytes b,
                            double *seconds) {
  if (g->n <= 1 || (unsigned)kind >= HAP_COLL_KIND_COUNT) {
    *seconds = g->n <= 1 ? 0 : HUGE_VAL;
    return HAP_IMPL_AUTO;
  }
  if (g->fit[kind] != NULL) {
    *seconds = hap_coll_fit_time(g->fit[kind], hap_coll_fit_bytes(kind, HAP_IMPL_AUTO, b));
    return HAP_IMPL_AUTO;
  }
  hap_coll_impl best = HAP_IMPL_AUTO;
  double t_best = HUGE_VAL;
  for (int i = HAP_IMPL_RING; i < HAP_IMPL_COUNT; i++) {
    double t = formula_time(g, kind, (hap_coll_impl)i, b);
    if (t < t_best) {
      t_best = t;
      best = (hap_coll_impl)i;
    }
  }
  *seconds = t_best;
  return best;
}

double hap_coll_time(const hap_group *g, hap_coll_kind kind, hap_coll_impl impl, hap_coll_bytes b) {
  if (g->n <= 1 || (kind == HAP_COLL_ALL_TO_ALL && b.max <= 0))
    return 0; /* one rank, or a re-shard that moves nothing */
  if (impl == HAP_IMPL_AUTO) {
    double t;
    hap_coll_best(g, kind, b, &t);
    return t;
  }
  /* A measured fit prices the library's own algorithm whatever impl names: the executor calls the
   * library (MPI, NCCL), which picks its algorithm itself. A grouped (uneven) gather or scatter
   * moves the shares as they are (b.sum), a padded one every rank's share at the largest. */
  double t = formula_time(g, kind, impl, b);
  if (isfinite(t) && g->fit[kind] != NULL)
    return hap_coll_fit_time(g->fit[kind], hap_coll_fit_bytes(kind, impl, b));
  return t;
}

bool hap_coll_measured(const hap_group *g, hap_coll_kind kind, hap_coll_impl impl,
                       hap_coll_bytes b) {
  if (g->n <= 1 || (unsigned)kind >= HAP_COLL_KIND_COUNT || g->fit[kind] == NULL ||
      (kind == HAP_COLL_ALL_TO_ALL && b.max <= 0))
    return false;
  if (impl != HAP_IMPL_AUTO && !isfinite(formula_time(g, kind, impl, b)))
    return false; /* hap_coll_time does not read the fit */
  return hap_coll_fit_point(g->fit[kind], hap_coll_fit_bytes(kind, impl, b)) != NULL;
}

double hap_p2p_time(const hap_cluster *c, int32_t src, int32_t dst, double bytes) {
  if (src == dst)
    return 0;
  hap_link l = hap_cluster_link(c, src, dst);
  return l.latency_s + bytes / l.bandwidth_Bps;
}

/* ---- compute ------------------------------------------------------------------------------- */

bool hap_device_emulates_dtype(const hap_device *d, hap_dtype dtype) {
  return (dtype == HAP_F16 || dtype == HAP_BF16) && !(d->sustained_flops[dtype] > 0);
}

double hap_compute_time(const hap_cluster *c, int32_t dev, hap_op op, const hap_op_io *io,
                        bool backward) {
  const hap_device *d = &c->devices[dev];
  hap_dtype dtype = hap_io_compute_dtype(io);
  hap_op_io as_f32;
  if (hap_device_emulates_dtype(d, dtype)) {
    /* no half-precision arithmetic (a CPU): the application runs in float32 on float32 buffers,
     * as hap-run's CPU kernels run it, so it is priced as the float32 one (measured rows, the
     * kernel model, the roofline's bytes) */
    as_f32 = *io;
    for (int i = 0; i < as_f32.n_in; i++)
      if (as_f32.in_dtype[i] == dtype)
        as_f32.in_dtype[i] = HAP_F32;
    for (int i = 0; i < as_f32.n_out; i++)
      if (as_f32.out_dtype[i] == dtype)
        as_f32.out_dtype[i] = HAP_F32;
    io = &as_f32;
    dtype = HAP_F32;
  }
  /* a row serves the application's shapes in its format (hap_kernel_shape_key): float32 rows
   * no half-precision application on a device with half-precision arithmetic of its own */
  if (d->n_kernels > 0) {
    const hap_kernel_sample *s = hap_device_kernel(d, op, backward, hap_kernel_key(io, backward));
    if (s != NULL)
      return s->seconds;
  }
  hap_op_cost cost;
  hap_op_cost_of(op, io, &cost);
  double flops = backward ? cost.bwd_flops : cost.fwd_flops;
  double bytes = backward ? cost.bwd_bytes_read + cost.bwd_bytes_written
                          : cost.fwd_bytes_read + cost.fwd_bytes_written;
  if (flops <= 0 && bytes <= 0)
    return 0;
  double m, n, k;
  double rate = hap_op_gemm_dims(op, io, &m, &n, &k) ? hap_gemm_rate(d, dtype, m, n, k)
                                                     : hap_device_flops(d, dtype);
  double work_s = fmax(flops / rate, bytes / d->memory_bw_Bps); /* roofline, s */
  double model_s = hap_kernel_model_time(d, op, backward, dtype, work_s);
  return model_s >= 0 ? model_s : d->launch_s + work_s;
}

static bool same_compute_spec(const hap_device *a, const hap_device *b) {
  for (int t = 0; t < HAP_DTYPE_COUNT; t++)
    if (a->sustained_flops[t] != b->sustained_flops[t] || a->peak_flops[t] != b->peak_flops[t])
      return false;
  return strcmp(a->model, b->model) == 0 && a->memory_bw_Bps == b->memory_bw_Bps &&
         a->update_bw_Bps == b->update_bw_Bps && a->launch_s == b->launch_s && a->n_gemm == 0 &&
         b->n_gemm == 0 && a->n_kernels == 0 && b->n_kernels == 0;
}

int32_t hap_device_classes(const hap_cluster *c, int32_t *class_of) {
  int32_t n_classes = 0;
  for (int32_t i = 0; i < c->n_devices; i++) {
    class_of[i] = -1;
    for (int32_t j = 0; j < i && class_of[i] < 0; j++)
      if (same_compute_spec(&c->devices[i], &c->devices[j]))
        class_of[i] = class_of[j];
    if (class_of[i] < 0)
      class_of[i] = n_classes++;
  }
  return n_classes;
}
