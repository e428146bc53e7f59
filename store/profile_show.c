/* profile_show.c — a profile's measured sweeps as a table, for `hap-profile show`. */
#include "store/profile_show.h"

#include <math.h>
#include <stdio.h>

#include "base/cli.h"
#include "cluster/cluster_show.h"
#include "store/fit.h"

/* The worst relative miss of fit `f` at the sweep's sizes (p50 times), and its size index. */
static double worst_miss(const hap_ab_fit *f, const int64_t *sizes, const double *p50, int32_t n,
                         int32_t *at) {
  double worst = 0;
  *at = 0;
  for (int32_t i = 0; i < n; i++) {
    double m = p50[i] > 0 ? fabs(hap_ab_fit_time(f, (double)sizes[i]) - p50[i]) / p50[i] : 0;
    if (m > worst) {
      worst = m;
      *at = i;
    }
  }
  return worst;
}

/* The column: "12%" or "1090% !" (flagged). */
static const char *miss_cell(double miss, char *buf, size_t cap) {
  snprintf(buf, cap, "%.0f%%%s", miss * 100, miss > HAP_FIT_MAX_MISS ? " !" : "");
  return buf;
}

/* The line under the table for a flagged sweep. */
static void explain_miss(FILE *f, const char *what, const hap_ab_fit *fit, const int64_t *sizes,
                         const double *p50, int32_t at, double miss) {
  char size[32];
  fprintf(f,
          "! %s: its fit misses %s by %.0f%% (measured %.3g ms, fitted %.3g ms): costs near that "
          "size are not to be trusted; measure again (the default plan, not --quick) or read "
          "the sweep\n",
          what, hap_fmt_bytes((double)sizes[at], size, sizeof size), miss * 100, p50[at] * 1e3,
          hap_ab_fit_time(fit, (double)sizes[at]) * 1e3);
}

void hap_profile_show_sweeps(FILE *f, const hap_profile *p) {
  fprintf(f, "\nprofile: %s, backend %s, created %s, %d hosts, %d devices\n", p->tool, p->backend,
          p->created, p->n_hosts, p->n_devices);
  if (p->n_p2p > 0) {
    fprintf(f, "\n%-28s %6s %12s  %10s %12s  %-20s %10s %10s %9s\n", "p2p sweep", "sizes",
            "largest", "latency us", "bandwidth GB/s", "piece (sizes)", "alpha us", "beta GB/s",
            "fit miss");
    for (int32_t i = 0; i < p->n_p2p; i++) {
      const hap_profile_p2p *s = &p->p2p[i];
      char pair[160], big[32], cell[24];
      int32_t at;
      double miss = worst_miss(&s->pieces, s->sizes_bytes, s->p50_s, s->n_sizes, &at);
      snprintf(pair, sizeof pair, "%s -> %s", p->devices[s->src].name, p->devices[s->dst].name);
      fprintf(f, "%-28s %6d %12s  %10.2f %12.3f", pair, s->n_sizes,
              hap_fmt_bytes((double)s->sizes_bytes[s->n_sizes - 1], big, sizeof big),
              s->fit.latency_s * 1e6, s->fit.bandwidth_Bps / 1e9);
      for (int32_t k = 0; k < s->pieces.n_pieces; k++) {
        char range[48];
        hap_fit_piece_range(&s->pieces, k, range, sizeof range);
        if (k > 0)
          fprintf(f, "%-28s %6s %12s  %10s %12s", "", "", "", "", "");
        fprintf(f, "  %-20s %10.2f %10.3f %9s\n", range, s->pieces.alpha_s[k] * 1e6,
                s->pieces.beta_Bps[k] / 1e9, k == 0 ? miss_cell(miss, cell, sizeof cell) : "");
      }
    }
    fprintf(f, "(latency and bandwidth: the one-piece link of the cluster model; the pieces: the "
               "piecewise fit; fit miss: its worst |fit - p50| / p50 at a measured size.)\n");
    for (int32_t i = 0; i < p->n_p2p; i++) {
      const hap_profile_p2p *s = &p->p2p[i];
      int32_t at;
      double miss = worst_miss(&s->pieces, s->sizes_bytes, s->p50_s, s->n_sizes, &at);
      char what[176];
      snprintf(what, sizeof what, "p2p %s -> %s", p->devices[s->src].name, p->devices[s->dst].name);
      if (miss > HAP_FIT_MAX_MISS)
        explain_miss(f, what, &s->pieces, s->sizes_bytes, s->p50_s, at, miss);
    }
  }
  if (p->n_colls > 0) {
    fprintf(f, "\n%-15s %-16s %6s %6s %12s %12s %12s %9s\n", "collective", "group", "ranks",
            "sizes", "largest", "p50 there", "busbw GB/s", "fit miss");
    for (int32_t i = 0; i < p->n_colls; i++) {
      const hap_profile_coll *s = &p->colls[i];
      int32_t last = s->n_sizes - 1, at;
      char big[32], cell[24];
      double miss = worst_miss(&s->fit, s->sizes_bytes, s->p50_s, s->n_sizes, &at);
      bool plan = hap_profile_is_plan_group(s->group); /* priced at its sizes, not by its fit */
      fprintf(f, "%-15s %-16s %6d %6d %12s %10.1fus %12.3f %9s\n", hap_coll_kind_name(s->kind),
              s->group, s->n_ranks, s->n_sizes,
              hap_fmt_bytes((double)s->sizes_bytes[last], big, sizeof big), s->p50_s[last] * 1e6,
              s->busbw_Bps[last] / 1e9, plan ? "-" : miss_cell(miss, cell, sizeof cell));
    }
    for (int32_t i = 0; i < p->n_colls; i++)
      if (hap_profile_is_plan_group(p->colls[i].group)) {
        fprintf(f,
                "(group %s: timed inside the plan's iterations at its own sizes, which these "
                "times price; fit miss '-')\n",
                HAP_PROFILE_PLAN_GROUP);
        break;
      }
    for (int32_t i = 0; i < p->n_colls; i++) {
      const hap_profile_coll *s = &p->colls[i];
      int32_t at;
      double miss = worst_miss(&s->fit, s->sizes_bytes, s->p50_s, s->n_sizes, &at);
      char what[160];
      snprintf(what, sizeof what, "%s over %s", hap_coll_kind_name(s->kind), s->group);
      if (miss > HAP_FIT_MAX_MISS && !hap_profile_is_plan_group(s->group))
        explain_miss(f, what, &s->fit, s->sizes_bytes, s->p50_s, at, miss);
    }
  }
}

/* ---- JSON ---------------------------------------------------------------------------------- */

static void json_pieces(hap_jw *w, const hap_ab_fit *f) {
  hap_jw_key(w, "pieces");
  hap_jw_begin_array_inline(w);
  for (int32_t k = 0; k < f->n_pieces; k++) {
    hap_jw_begin_object_inline(w);
    if (k + 1 < f->n_pieces) {
      hap_jw_key(w, "below_bytes");
      hap_jw_double(w, f->upper_bytes[k]);
    }
    hap_jw_key(w, "alpha_s");
    hap_jw_double(w, f->alpha_s[k]);
    hap_jw_key(w, "beta_Bps");
    hap_jw_double(w, f->beta_Bps[k]);
    hap_jw_end_object(w);
  }
  hap_jw_end_array(w);
}

/* "sizes_bytes" and "p50_s" of a sweep of n sizes. */
static void json_sizes(hap_jw *w, const int64_t *sizes, const double *p50, int32_t n) {
  hap_jw_key(w, "sizes_bytes");
  hap_jw_begin_array_inline(w);
  for (int32_t i = 0; i < n; i++)
    hap_jw_int(w, sizes[i]);
  hap_jw_end_array(w);
  hap_jw_key(w, "p50_s");
  hap_jw_begin_array_inline(w);
  for (int32_t i = 0; i < n; i++)
    hap_jw_double(w, p50[i]);
  hap_jw_end_array(w);
}

static void json_gemm(hap_jw *w, const hap_profile *p) {
  hap_jw_key(w, "gemm");
  hap_jw_begin_array(w);
  for (int32_t d = 0; d < p->n_devices; d++) {
    const hap_profile_device *dev = &p->devices[d];
    if (dev->n_gemm == 0)
      continue;
    hap_jw_begin_object_inline(w);
    hap_jw_key(w, "device");
    hap_jw_str(w, dev->name);
    hap_jw_key(w, "model");
    hap_jw_str(w, dev->model);
    hap_jw_key(w, "samples");
    hap_jw_begin_array_inline(w);
    for (int32_t i = 0; i < dev->n_gemm; i++) {
      const hap_profile_gemm *g = &dev->gemm[i];
      hap_jw_begin_object_inline(w);
      hap_jw_key(w, "m");
      hap_jw_int(w, g->m);
      hap_jw_key(w, "n");
      hap_jw_int(w, g->n);
      hap_jw_key(w, "k");
      hap_jw_int(w, g->k);
      hap_jw_key(w, "dtype");
      hap_jw_str(w, hap_dtype_name(g->dtype));
      hap_jw_key(w, "seconds");
      hap_jw_double(w, g->seconds);
      hap_jw_key(w, "flops_per_s");
      hap_jw_double(w, g->flops_per_s);
      hap_jw_end_object(w);
    }
    hap_jw_end_array(w);
    hap_jw_end_object(w);
  }
  hap_jw_end_array(w);
}

void hap_profile_sweeps_json(hap_jw *w, const void *arg) {
  const hap_profile *p = arg;
  hap_jw_key(w, "sweeps");
  hap_jw_begin_object(w);
  hap_jw_key(w, "tool");
  hap_jw_str(w, p->tool ? p->tool : "");
  hap_jw_key(w, "backend");
  hap_jw_str(w, p->backend ? p->backend : "");
  hap_jw_key(w, "created");
  hap_jw_str(w, p->created ? p->created : "");
  json_gemm(w, p);
  hap_jw_key(w, "p2p");
  hap_jw_begin_array(w);
  for (int32_t i = 0; i < p->n_p2p; i++) {
    const hap_profile_p2p *s = &p->p2p[i];
    hap_jw_begin_object_inline(w);
    hap_jw_key(w, "src");
    hap_jw_str(w, p->devices[s->src].name);
    hap_jw_key(w, "dst");
    hap_jw_str(w, p->devices[s->dst].name);
    json_sizes(w, s->sizes_bytes, s->p50_s, s->n_sizes);
    json_pieces(w, &s->pieces);
    hap_jw_end_object(w);
  }
  hap_jw_end_array(w);
  hap_jw_key(w, "collectives");
  hap_jw_begin_array(w);
  for (int32_t i = 0; i < p->n_colls; i++) {
    const hap_profile_coll *s = &p->colls[i];
    hap_jw_begin_object_inline(w);
    hap_jw_key(w, "kind");
    hap_jw_str(w, hap_coll_kind_name(s->kind));
    hap_jw_key(w, "group");
    hap_jw_str(w, s->group);
    hap_jw_key(w, "ranks");
    hap_jw_int(w, s->n_ranks);
    json_sizes(w, s->sizes_bytes, s->p50_s, s->n_sizes);
    hap_jw_key(w, "busbw_Bps");
    hap_jw_begin_array_inline(w);
    for (int32_t k = 0; k < s->n_sizes; k++)
      hap_jw_double(w, s->busbw_Bps[k]);
    hap_jw_end_array(w);
    json_pieces(w, &s->fit);
    hap_jw_end_object(w);
  }
  hap_jw_end_array(w);
  hap_jw_end_object(w);
}
