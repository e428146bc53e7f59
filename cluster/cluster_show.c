/* cluster_show.c — the cluster as people read it (a table) and as programs read it (JSON), for
 * `hap-profile show`. */
#include "cluster/cluster_show.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/cli.h"
#include "base/json_write.h"
#include "cluster/cluster_io.h"

/* ---- table -------------------------------------------------------------------------- */

/* A host's intra link's origin as shown: "-" where the host has no pair of devices to link. */
static const char *intra_origin_text(const hap_host *x) {
  return x->n_devices < 2 ? "-" : hap_link_origin_name(x->intra_origin);
}

/* The hosts table; for a profile (origins other than stated) a column says where each link's
 * numbers come from, and a note explains the words in it. */
static void print_hosts(FILE *f, const hap_cluster *c) {
  bool origins = false, borrowed = false, assumed = false;
  for (int32_t h = 0; h < c->n_hosts; h++) {
    const hap_host *x = &c->hosts[h];
    hap_link_origin o[2] = {x->n_devices < 2 ? HAP_LINK_STATED : x->intra_origin, x->nic_origin};
    for (int k = 0; k < 2; k++) {
      origins = origins || o[k] != HAP_LINK_STATED;
      borrowed = borrowed || o[k] == HAP_LINK_BORROWED;
      assumed = assumed || o[k] == HAP_LINK_ASSUMED;
    }
  }
  fprintf(f, "\n%-16s %7s  %10s %9s  %10s %9s%s\n", "host", "devices", "intra GB/s", "intra us",
          "NIC GB/s", "NIC us", origins ? "  links (intra, NIC)" : "");
  for (int32_t h = 0; h < c->n_hosts; h++) {
    const hap_host *x = &c->hosts[h];
    fprintf(f, "%-16s %7d  %10.2f %9.2f  %10.3f %9.2f", x->name, x->n_devices,
            x->intra.bandwidth_Bps / 1e9, x->intra.latency_s * 1e6, x->nic.bandwidth_Bps / 1e9,
            x->nic.latency_s * 1e6);
    if (origins)
      fprintf(f, "  %s, %s", intra_origin_text(x), hap_link_origin_name(x->nic_origin));
    fputc('\n', f);
  }
  if (borrowed)
    fprintf(f, "borrowed: this host measured no such link; the median of other hosts' is used\n");
  if (assumed)
    fprintf(f, "assumed: no such link was measured on any host; hap's default is used (profile "
               "the hosts together, one launch over all of them, to measure their NICs)\n");
  if (c->inter_latency_s > 0)
    fprintf(f, "plus %.2f us on every path between hosts\n", c->inter_latency_s * 1e6);
  if (hap_cluster_n_link_overrides(c) > 0)
    fprintf(f, "%d per-pair link overrides\n", hap_cluster_n_link_overrides(c));
}

/* Devices with the same model and numbers print as one row. */
static bool same_spec(const hap_device *a, const hap_device *b) {
  for (int t = 0; t < HAP_DTYPE_COUNT; t++)
    if (a->sustained_flops[t] != b->sustained_flops[t] || a->peak_flops[t] != b->peak_flops[t])
      return false;
  return strcmp(a->model, b->model) == 0 && a->memory_bytes == b->memory_bytes &&
         a->memory_bw_Bps == b->memory_bw_Bps && a->update_bw_Bps == b->update_bw_Bps &&
         a->launch_s == b->launch_s && a->n_gemm == 0 && b->n_gemm == 0 && a->n_kernels == 0 &&
         b->n_kernels == 0;
}

/* A short time for a narrow column: "23ns", "5.0us", "1.25ms" (a launch overhead of tens of
 * nanoseconds is not "0.0us"). */
static const char *short_time(double s, char *buf, size_t len) {
  if (s < 1e-6)
    snprintf(buf, len, "%.0fns", s * 1e9);
  else if (s < 1e-3)
    snprintf(buf, len, "%.1fus", s * 1e6);
  else
    snprintf(buf, len, "%.2fms", s * 1e3);
  return buf;
}

static void print_devices(FILE *f, const hap_cluster *c) {
  fprintf(f, "\n%-20s %5s  %-16s %11s %11s %9s %10s %10s %7s %6s %7s\n", "devices", "count",
          "model", "fp32 TFLOP/s", "fp16 TFLOP/s", "memory", "mem GB/s", "upd GB/s", "launch",
          "GEMMs", "kernels");
  char mem[32];
  for (int32_t i = 0; i < c->n_devices;) {
    int32_t j = i + 1;
    while (j < c->n_devices && same_spec(&c->devices[i], &c->devices[j]))
      j++;
    const hap_device *d = &c->devices[i];
    char first[64];
    snprintf(first, sizeof first, "%s%s", d->name, j - i > 1 ? " .." : "");
    char upd[32] = "-"; /* not measured: updates are priced at mem GB/s */
    if (d->update_bw_Bps > 0)
      snprintf(upd, sizeof upd, "%.1f", d->update_bw_Bps / 1e9);
    char launch[32];
    fprintf(f, "%-20s %5d  %-16s %11.3f %11.3f %9s %10.1f %10s %7s %6d %7d\n", first, j - i,
            d->model, d->sustained_flops[HAP_F32] / 1e12, d->sustained_flops[HAP_F16] / 1e12,
            hap_fmt_bytes(d->memory_bytes, mem, sizeof mem), d->memory_bw_Bps / 1e9, upd,
            short_time(d->launch_s, launch, sizeof launch), d->n_gemm, d->n_kernels);
    i = j;
  }
  fprintf(f, "(FLOP/s are sustained rates that large GEMMs reach.)\n");
}

/* "< 4 KiB", "4 KiB..64 KiB", ">= 64 KiB" or "all" for piece k. */
void hap_fit_piece_range(const hap_ab_fit *f, int32_t k, char *buf, size_t len) {
  char lo[32], hi[32];
  bool first = k == 0, last = k + 1 == f->n_pieces;
  if (first && last)
    snprintf(buf, len, "all");
  else if (first)
    snprintf(buf, len, "< %s", hap_fmt_bytes(f->upper_bytes[0], hi, sizeof hi));
  else if (last)
    snprintf(buf, len, ">= %s", hap_fmt_bytes(f->upper_bytes[k - 1], lo, sizeof lo));
  else
    snprintf(buf, len, "%s..%s", hap_fmt_bytes(f->upper_bytes[k - 1], lo, sizeof lo),
             hap_fmt_bytes(f->upper_bytes[k], hi, sizeof hi));
}

static void print_fits(FILE *f, const hap_cluster *c) {
  if (c->n_fits == 0) {
    fprintf(f, "\nno profiled collective fits: collectives are priced from the links\n");
    return;
  }
  fprintf(f, "\n%-15s %6s  %-20s  %10s %10s\n", "collective fit", "ranks", "piece (sizes)",
          "alpha us", "beta GB/s");
  for (int32_t i = 0; i < c->n_fits; i++) {
    const hap_coll_fit *x = &c->fits[i];
    for (int32_t k = 0; k < x->fit.n_pieces; k++) {
      char range[48];
      hap_fit_piece_range(&x->fit, k, range, sizeof range);
      if (k == 0)
        fprintf(f, "%-15s %6d", hap_coll_kind_name(x->kind), x->n_ranks);
      else
        fprintf(f, "%-15s %6s", "", "");
      fprintf(f, "  %-20s  %10.2f %10.3f\n", range, x->fit.alpha_s[k] * 1e6,
              x->fit.beta_Bps[k] / 1e9);
    }
    if (x->n_points > 0)
      fprintf(f, "%-15s %6s  + %d sizes timed in the plan's iterations (they override the fit)\n",
              "", "", x->n_points);
  }
}

/* ---- JSON --------------------------------------------------------------------------- */

bool hap_cluster_show_json(FILE *f, const hap_cluster *c) {
  return hap_cluster_show_json_more(f, c, NULL, NULL);
}

bool hap_cluster_show_json_more(FILE *f, const hap_cluster *c,
                                void (*more)(hap_jw *w, const void *arg), const void *arg) {
  hap_jw w;
  hap_jw_init(&w, f, 2);
  hap_jw_begin_object(&w);
  hap_jw_key(&w, "name");
  hap_jw_str(&w, c->name);
  hap_jw_key(&w, "hosts");
  hap_jw_begin_array(&w);
  for (int32_t h = 0; h < c->n_hosts; h++) {
    hap_jw_begin_object_inline(&w);
    hap_jw_key(&w, "name");
    hap_jw_str(&w, c->hosts[h].name);
    hap_jw_key(&w, "devices");
    hap_jw_int(&w, c->hosts[h].n_devices);
    hap_cluster_write_link(&w, "intra_host", c->hosts[h].intra);
    hap_cluster_write_link(&w, "nic", c->hosts[h].nic);
    hap_jw_key(&w, "intra_host_origin"); /* "-": no pair of devices to link */
    hap_jw_str(&w, intra_origin_text(&c->hosts[h]));
    hap_jw_key(&w, "nic_origin");
    hap_jw_str(&w, hap_link_origin_name(c->hosts[h].nic_origin));
    hap_jw_end_object(&w);
  }
  hap_jw_end_array(&w);
  hap_jw_key(&w, "devices");
  hap_jw_begin_array(&w);
  for (int32_t i = 0; i < c->n_devices; i++) {
    const hap_device *d = &c->devices[i];
    hap_jw_begin_object_inline(&w);
    hap_jw_key(&w, "name");
    hap_jw_str(&w, d->name);
    hap_jw_key(&w, "host");
    hap_jw_str(&w, c->hosts[d->host].name);
    hap_jw_key(&w, "model");
    hap_jw_str(&w, d->model);
    hap_jw_key(&w, "kind");
    hap_jw_str(&w, d->kind == HAP_DEVICE_GPU ? "gpu" : "cpu");
    hap_jw_key(&w, "sustained_flops");
    hap_jw_begin_object_inline(&w);
    for (int t = 0; t < HAP_DTYPE_COUNT; t++) {
      if (d->sustained_flops[t] > 0) {
        hap_jw_key(&w, hap_dtype_name((hap_dtype)t));
        hap_jw_double(&w, d->sustained_flops[t]);
      }
    }
    hap_jw_end_object(&w);
    hap_jw_key(&w, "memory_bytes");
    hap_jw_double(&w, d->memory_bytes);
    hap_jw_key(&w, "memory_bw_Bps");
    hap_jw_double(&w, d->memory_bw_Bps);
    hap_jw_key(&w, "launch_s");
    hap_jw_double(&w, d->launch_s);
    hap_jw_key(&w, "update_bw_Bps");
    hap_jw_double(&w, d->update_bw_Bps);
    hap_jw_key(&w, "gemm_samples");
    hap_jw_int(&w, d->n_gemm);
    hap_jw_key(&w, "kernel_samples");
    hap_jw_int(&w, d->n_kernels);
    hap_jw_end_object(&w);
  }
  hap_jw_end_array(&w);
  hap_jw_key(&w, "collective_fits");
  hap_jw_begin_array(&w);
  for (int32_t i = 0; i < c->n_fits; i++) {
    const hap_coll_fit *x = &c->fits[i];
    hap_jw_begin_object_inline(&w);
    hap_jw_key(&w, "kind");
    hap_jw_str(&w, hap_coll_kind_name(x->kind));
    hap_jw_key(&w, "ranks");
    hap_jw_begin_array_inline(&w);
    for (int32_t r = 0; r < x->n_ranks; r++)
      hap_jw_str(&w, c->devices[x->ranks[r]].name);
    hap_jw_end_array(&w);
    hap_jw_key(&w, "pieces");
    hap_jw_begin_array_inline(&w);
    for (int32_t k = 0; k < x->fit.n_pieces; k++) {
      hap_jw_begin_object_inline(&w);
      if (k + 1 < x->fit.n_pieces) {
        hap_jw_key(&w, "below_bytes");
        hap_jw_double(&w, x->fit.upper_bytes[k]);
      }
      hap_jw_key(&w, "alpha_s");
      hap_jw_double(&w, x->fit.alpha_s[k]);
      hap_jw_key(&w, "beta_Bps");
      hap_jw_double(&w, x->fit.beta_Bps[k]);
      hap_jw_end_object(&w);
    }
    hap_jw_end_array(&w);
    hap_jw_key(&w, "points");
    hap_jw_begin_array_inline(&w);
    for (int32_t k = 0; k < x->n_points; k++) {
      hap_jw_begin_object_inline(&w);
      hap_jw_key(&w, "bytes");
      hap_jw_double(&w, x->points[k].bytes);
      hap_jw_key(&w, "s");
      hap_jw_double(&w, x->points[k].seconds);
      hap_jw_end_object(&w);
    }
    hap_jw_end_array(&w);
    hap_jw_end_object(&w);
  }
  hap_jw_end_array(&w);
  if (more != NULL)
    more(&w, arg);
  hap_jw_end_object(&w);
  return hap_jw_finish(&w);
}

void hap_cluster_show_table(FILE *f, const hap_cluster *c, const char *what) {
  fprintf(f, "cluster %s (%s): %d devices on %d hosts\n", c->name, c->source ? c->source : what,
          c->n_devices, c->n_hosts);
  print_hosts(f, c);
  print_devices(f, c);
  print_fits(f, c);
}
