/* hap-profile — inspect and combine cluster profiles; (measuring comes with the profiling issue).
 *   show FILE|SPEC     devices, hosts and links, collective fits (and, for a profile, its sweeps)
 *   merge OUT IN...    combine per-machine profiles into one */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cluster_io.h"
#include "cluster_open.h"
#include "hap_config.h"
#include "json_write.h"
#include "profile_store.h"

static const char *prog = "hap-profile";

static void usage(FILE *f) {
  fprintf(f,
          "Usage: hap-profile COMMAND [OPTIONS]\n"
          "\n"
          "Cluster profiles: what a cluster's devices, links and collectives measure.\n"
          "\n"
          "Commands:\n"
          "  show FILE|SPEC        the cluster model of a profile (.h5) or a cluster spec\n"
          "                        ('paper-hetero:gpus_per_host=4', a hap-cluster JSON file):\n"
          "                        hosts and links, devices, collective fits; for a profile also\n"
          "                        its point-to-point and collective sweeps\n"
          "  merge -o OUT IN...    combine per-machine profiles into one (atomic write)\n"
          "\n"
          "Measuring (hap-profile run under mpirun) is not built yet: see README.md.\n"
          "\n"
          "Options:\n"
          "  -f, --format FMT      table (default) or json\n"
          "  -o, --output FILE     output of merge\n"
          "  -h, --help            this help\n"
          "  -V, --version         print the version\n"
          "\n"
          "Exit status: 0 ok, 1 failure, 2 usage error.\n");
}

/* ---- table output -------------------------------------------------------------------------- */

static void print_hosts(const hap_cluster *c) {
  printf("\n%-16s %7s  %10s %9s  %10s %9s\n", "host", "devices", "intra GB/s", "intra us",
         "NIC GB/s", "NIC us");
  for (int32_t h = 0; h < c->n_hosts; h++) {
    const hap_host *x = &c->hosts[h];
    printf("%-16s %7d  %10.2f %9.2f  %10.3f %9.2f\n", x->name, x->n_devices,
           x->intra.bandwidth_Bps / 1e9, x->intra.latency_s * 1e6, x->nic.bandwidth_Bps / 1e9,
           x->nic.latency_s * 1e6);
  }
  if (c->inter_latency_s > 0)
    printf("plus %.2f us on every path between hosts\n", c->inter_latency_s * 1e6);
  if (hap_cluster_n_link_overrides(c) > 0)
    printf("%d per-pair link overrides\n", hap_cluster_n_link_overrides(c));
}

/* Devices with the same model and numbers print as one row. */
static bool same_spec(const hap_device *a, const hap_device *b) {
  for (int t = 0; t < HAP_DTYPE_COUNT; t++)
    if (a->sustained_flops[t] != b->sustained_flops[t] || a->peak_flops[t] != b->peak_flops[t])
      return false;
  return strcmp(a->model, b->model) == 0 && a->memory_bytes == b->memory_bytes &&
         a->memory_bw_Bps == b->memory_bw_Bps && a->launch_s == b->launch_s && a->n_gemm == 0 &&
         b->n_gemm == 0 && a->n_kernels == 0 && b->n_kernels == 0;
}

static void print_devices(const hap_cluster *c) {
  printf("\n%-20s %5s  %-16s %11s %11s %9s %10s %7s %6s %7s\n", "devices", "count", "model",
         "fp32 TFLOP/s", "fp16 TFLOP/s", "memory", "mem GB/s", "launch", "GEMMs", "kernels");
  char mem[32];
  for (int32_t i = 0; i < c->n_devices;) {
    int32_t j = i + 1;
    while (j < c->n_devices && same_spec(&c->devices[i], &c->devices[j]))
      j++;
    const hap_device *d = &c->devices[i];
    char first[64];
    snprintf(first, sizeof first, "%s%s", d->name, j - i > 1 ? " .." : "");
    printf("%-20s %5d  %-16s %11.3f %11.3f %9s %10.1f %5.1fus %6d %7d\n", first, j - i, d->model,
           d->sustained_flops[HAP_F32] / 1e12, d->sustained_flops[HAP_F16] / 1e12,
           hap_fmt_bytes(d->memory_bytes, mem, sizeof mem), d->memory_bw_Bps / 1e9,
           d->launch_s * 1e6, d->n_gemm, d->n_kernels);
    i = j;
  }
  printf("(FLOP/s are sustained rates that large GEMMs reach.)\n");
}

static void print_fits(const hap_cluster *c) {
  if (c->n_fits == 0) {
    printf("\nno profiled collective fits: collectives are priced from the links\n");
    return;
  }
  printf("\n%-15s %6s  %12s  %10s %10s  %10s %10s\n", "collective fit", "ranks", "threshold",
         "a_small us", "b_small GB/s", "a_large us", "b_large GB/s");
  for (int32_t f = 0; f < c->n_fits; f++) {
    const hap_coll_fit *x = &c->fits[f];
    char thr[32];
    printf("%-15s %6d  %12s  %10.2f %10.3f  %10.2f %10.3f\n", hap_coll_kind_name(x->kind),
           x->n_ranks, hap_fmt_bytes(x->threshold_bytes, thr, sizeof thr), x->alpha_small_s * 1e6,
           x->beta_small_Bps / 1e9, x->alpha_large_s * 1e6, x->beta_large_Bps / 1e9);
  }
}

static void print_sweeps(const hap_profile *p) {
  printf("\nprofile: %s, backend %s, created %s, %d hosts, %d devices\n", p->tool, p->backend,
         p->created, p->n_hosts, p->n_devices);
  if (p->n_p2p > 0) {
    printf("\n%-28s %6s %12s  %10s %12s\n", "p2p sweep", "sizes", "largest", "latency us",
           "bandwidth GB/s");
    for (int32_t i = 0; i < p->n_p2p; i++) {
      const hap_profile_p2p *s = &p->p2p[i];
      char pair[160], big[32];
      snprintf(pair, sizeof pair, "%s -> %s", p->devices[s->src].name, p->devices[s->dst].name);
      printf("%-28s %6d %12s  %10.2f %12.3f\n", pair, s->n_sizes,
             hap_fmt_bytes((double)s->sizes_bytes[s->n_sizes - 1], big, sizeof big),
             s->fit.latency_s * 1e6, s->fit.bandwidth_Bps / 1e9);
    }
  }
  if (p->n_colls > 0) {
    printf("\n%-15s %-16s %6s %6s %12s %12s %12s\n", "collective", "group", "ranks", "sizes",
           "largest", "p50 there", "busbw GB/s");
    for (int32_t i = 0; i < p->n_colls; i++) {
      const hap_profile_coll *s = &p->colls[i];
      int32_t last = s->n_sizes - 1;
      char big[32];
      printf("%-15s %-16s %6d %6d %12s %10.1fus %12.3f\n", hap_coll_kind_name(s->kind), s->group,
             s->n_ranks, s->n_sizes, hap_fmt_bytes((double)s->sizes_bytes[last], big, sizeof big),
             s->p50_s[last] * 1e6, s->busbw_Bps[last] / 1e9);
    }
  }
}

/* ---- json output --------------------------------------------------------------------------- */

static void json_link(hap_jw *w, const char *key, hap_link l) {
  hap_jw_key(w, key);
  hap_jw_begin_object_inline(w);
  hap_jw_key(w, "bandwidth_Bps");
  hap_jw_double(w, l.bandwidth_Bps);
  hap_jw_key(w, "latency_s");
  hap_jw_double(w, l.latency_s);
  hap_jw_end_object(w);
}

static bool print_json(const hap_cluster *c) {
  hap_jw w;
  hap_jw_init(&w, stdout, 2);
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
    json_link(&w, "intra_host", c->hosts[h].intra);
    json_link(&w, "nic", c->hosts[h].nic);
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
    hap_jw_key(&w, "gemm_samples");
    hap_jw_int(&w, d->n_gemm);
    hap_jw_key(&w, "kernel_samples");
    hap_jw_int(&w, d->n_kernels);
    hap_jw_end_object(&w);
  }
  hap_jw_end_array(&w);
  hap_jw_key(&w, "collective_fits");
  hap_jw_begin_array(&w);
  for (int32_t f = 0; f < c->n_fits; f++) {
    const hap_coll_fit *x = &c->fits[f];
    hap_jw_begin_object_inline(&w);
    hap_jw_key(&w, "kind");
    hap_jw_str(&w, hap_coll_kind_name(x->kind));
    hap_jw_key(&w, "ranks");
    hap_jw_begin_array_inline(&w);
    for (int32_t r = 0; r < x->n_ranks; r++)
      hap_jw_str(&w, c->devices[x->ranks[r]].name);
    hap_jw_end_array(&w);
    hap_jw_key(&w, "threshold_bytes");
    hap_jw_double(&w, x->threshold_bytes);
    hap_jw_key(&w, "alpha_small_s");
    hap_jw_double(&w, x->alpha_small_s);
    hap_jw_key(&w, "beta_small_Bps");
    hap_jw_double(&w, x->beta_small_Bps);
    hap_jw_key(&w, "alpha_large_s");
    hap_jw_double(&w, x->alpha_large_s);
    hap_jw_key(&w, "beta_large_Bps");
    hap_jw_double(&w, x->beta_large_Bps);
    hap_jw_end_object(&w);
  }
  hap_jw_end_array(&w);
  hap_jw_end_object(&w);
  return hap_jw_finish(&w);
}

/* ---- commands ------------------------------------------------------------------------------ */

static int cmd_show(const char *what, hap_format format) {
  hap_err err = {0};
  hap_profile *p = NULL;
  hap_cluster *c = NULL;
  if (hap_is_hdf5_path(what)) {
    if (hap_profile_read(what, &p, &err) != HAP_OK ||
        hap_profile_to_cluster(p, &c, &err) != HAP_OK) {
      hap_cli_error(prog, &err);
      hap_profile_destroy(p);
      return 1;
    }
  } else if (hap_cluster_load(what, &c, &err) != HAP_OK) {
    hap_cli_error(prog, &err);
    return 1;
  }
  int rc = 0;
  if (format == HAP_FORMAT_JSON) {
    rc = print_json(c) ? 0 : 1;
  } else {
    printf("cluster %s (%s): %d devices on %d hosts\n", c->name, c->source ? c->source : what,
           c->n_devices, c->n_hosts);
    print_hosts(c);
    print_devices(c);
    print_fits(c);
    if (p != NULL)
      print_sweeps(p);
  }
  hap_cluster_destroy(c);
  hap_profile_destroy(p);
  return rc;
}

static int cmd_merge(const char *out, int n, char **inputs) {
  hap_err err = {0};
  hap_profile **parts = calloc((size_t)n, sizeof(hap_profile *));
  hap_profile *merged = NULL;
  int rc = 1;
  if (parts == NULL)
    return 1;
  for (int i = 0; i < n; i++)
    if (hap_profile_read(inputs[i], &parts[i], &err) != HAP_OK)
      goto out;
  if (hap_profile_merge(parts, n, &merged, &err) != HAP_OK ||
      hap_profile_write(merged, out, &err) != HAP_OK)
    goto out;
  fprintf(stderr, "%s: wrote %s (%d hosts, %d devices)\n", prog, out, merged->n_hosts,
          merged->n_devices);
  rc = 0;
out:
  if (rc != 0)
    hap_cli_error(prog, &err);
  for (int i = 0; i < n; i++)
    hap_profile_destroy(parts[i]);
  free(parts);
  hap_profile_destroy(merged);
  return rc;
}

int main(int argc, char **argv) {
  static const struct option long_opts[] = {{"format", required_argument, NULL, 'f'},
                                            {"output", required_argument, NULL, 'o'},
                                            {"help", no_argument, NULL, 'h'},
                                            {"version", no_argument, NULL, 'V'},
                                            {NULL, 0, NULL, 0}};
  hap_format format = HAP_FORMAT_TABLE;
  const char *output = NULL;
  int c;
  while ((c = getopt_long(argc, argv, "f:o:hV", long_opts, NULL)) != -1) {
    switch (c) {
    case 'f':
      if (hap_format_parse(optarg, &format) != HAP_OK || format == HAP_FORMAT_CSV) {
        hap_cli_usage_error(prog, "unknown format '%s' (expected table or json)", optarg);
        return 2;
      }
      break;
    case 'o': output = optarg; break;
    case 'h': usage(stdout); return 0;
    case 'V': printf("hap-profile %s\n", HAP_VERSION); return 0;
    default: fprintf(stderr, "Try '%s --help'.\n", prog); return 2;
    }
  }
  if (optind >= argc) {
    hap_cli_usage_error(prog, "missing command (show, merge)");
    return 2;
  }
  const char *cmd = argv[optind++];
  int rest = argc - optind;
  if (strcmp(cmd, "show") == 0) {
    if (rest != 1) {
      hap_cli_usage_error(prog, "show takes one profile or cluster spec");
      return 2;
    }
    return cmd_show(argv[optind], format);
  }
  if (strcmp(cmd, "merge") == 0) {
    if (output == NULL || rest < 1) {
      hap_cli_usage_error(prog, "merge needs -o OUT and at least one input profile");
      return 2;
    }
    return cmd_merge(output, rest, argv + optind);
  }
  hap_cli_usage_error(prog, "unknown command '%s' (expected show or merge)", cmd);
  return 2;
}
