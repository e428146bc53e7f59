/* test_cluster_io.c — device presets, hap-cluster files (reader, writer, round trip), cluster
 * specs with parameters, the bundled clusters and the malformed-file corpus. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"
#include "cluster/cluster.h"
#include "cluster/cluster_io.h"
#include "cluster/cluster_show.h"
#include "cluster/presets.h"

#define GOOD_DIR      HAP_TEST_DATA "/clusters/good"
#define BAD_DIR       HAP_TEST_DATA "/clusters/bad"
#define REPO_DATASETS HAP_TEST_DATA "/../../datasets"

/* ---- helpers -------------------------------------------------------------------------------- */

/* Bundled clusters from the source tree, whatever the build compiled in. */
static void use_repo_datasets(void) { cr_assert_eq(setenv("HAP_DATASETS", REPO_DATASETS, 1), 0); }

static hap_cluster *load(const char *spec) {
  hap_cluster *c = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_cluster_load(spec, &c, &err), HAP_OK, "%s: %s", spec, err.msg);
  cr_assert_not_null(c);
  return c;
}

static int32_t dev(const hap_cluster *c, const char *name) {
  int32_t id = hap_cluster_find_device(c, name);
  cr_assert_geq(id, 0, "no device '%s'", name);
  return id;
}

static bool close_to(double a, double b) { return fabs(a - b) <= 1e-12 * fabs(b); }

static char *to_string(const hap_cluster *c) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  hap_err err = {0};
  cr_assert_eq(hap_cluster_write(c, f, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(fclose(f), 0);
  return buf;
}

static hap_cluster *from_string(const char *s, const char *params) {
  hap_cluster *c = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_cluster_from_json(s, strlen(s), "mem", params, &c, &err), HAP_OK, "%s\n%s",
               err.msg, s);
  return c;
}

static hap_status from_string_err(const char *s, const char *params, hap_err *err) {
  hap_cluster *c = NULL;
  hap_status st = hap_cluster_from_json(s, strlen(s), "mem", params, &c, err);
  cr_assert_null(c, "out is NULL on failure");
  return st;
}

static void assert_link_eq(hap_link a, hap_link b, const char *what) {
  cr_assert(memcmp(&a.bandwidth_Bps, &b.bandwidth_Bps, sizeof(double)) == 0, "%s bandwidth", what);
  cr_assert(memcmp(&a.latency_s, &b.latency_s, sizeof(double)) == 0, "%s latency", what);
}

static void assert_doubles_eq(const double *a, const double *b, int n, const char *what,
                              const char *dev_name) {
  for (int i = 0; i < n; i++)
    cr_assert(memcmp(&a[i], &b[i], sizeof(double)) == 0, "%s %s[%d]: %.17g vs %.17g", dev_name,
              what, i, a[i], b[i]);
}

static void assert_devices_eq(const hap_device *x, const hap_device *y) {
  cr_assert_str_eq(x->name, y->name);
  cr_assert_str_eq(x->model, y->model, "%s model", x->name);
  cr_assert_eq(x->host, y->host, "%s host", x->name);
  cr_assert_eq(x->local_index, y->local_index, "%s local_index", x->name);
  cr_assert_eq(x->kind, y->kind, "%s kind", x->name);
  assert_doubles_eq(x->peak_flops, y->peak_flops, HAP_DTYPE_COUNT, "peak_flops", x->name);
  assert_doubles_eq(x->sustained_flops, y->sustained_flops, HAP_DTYPE_COUNT, "sustained_flops",
                    x->name);
  assert_doubles_eq(&x->memory_bytes, &y->memory_bytes, 1, "memory_bytes", x->name);
  assert_doubles_eq(&x->memory_bw_Bps, &y->memory_bw_Bps, 1, "memory_bw_Bps", x->name);
  assert_doubles_eq(&x->launch_s, &y->launch_s, 1, "launch_s", x->name);
  assert_doubles_eq(&x->update_bw_Bps, &y->update_bw_Bps, 1, "update_bw_Bps", x->name);
  cr_assert_eq(x->n_gemm, y->n_gemm, "%s n_gemm", x->name);
  for (int32_t i = 0; i < x->n_gemm; i++) {
    const hap_gemm_sample *a = &x->gemm[i], *b = &y->gemm[i];
    cr_assert(a->m == b->m && a->n == b->n && a->k == b->k && a->dtype == b->dtype, "%s gemm[%d]",
              x->name, i);
    assert_doubles_eq(&a->flops_per_s, &b->flops_per_s, 1, "gemm.flops_per_s", x->name);
  }
  cr_assert_eq(x->n_kernels, y->n_kernels, "%s n_kernels", x->name);
  for (int32_t i = 0; i < x->n_kernels; i++) {
    const hap_kernel_sample *a = &x->kernels[i], *b = &y->kernels[i];
    cr_assert(a->op == b->op && a->backward == b->backward && a->shape_key == b->shape_key,
              "%s kernels[%d]", x->name, i);
    assert_doubles_eq(&a->seconds, &b->seconds, 1, "kernels.seconds", x->name);
  }
}

/* Field by field, every path included. */
static void assert_clusters_eq(const hap_cluster *a, const hap_cluster *b) {
  cr_assert_str_eq(a->name, b->name);
  cr_assert_eq(a->source == NULL, b->source == NULL);
  if (a->source)
    cr_assert_str_eq(a->source, b->source);
  assert_doubles_eq(&a->inter_latency_s, &b->inter_latency_s, 1, "inter_latency_s", "cluster");
  cr_assert_eq(a->n_hosts, b->n_hosts);
  for (int32_t h = 0; h < a->n_hosts; h++) {
    const hap_host *x = &a->hosts[h], *y = &b->hosts[h];
    cr_assert_str_eq(x->name, y->name);
    cr_assert_eq(x->first_device, y->first_device, "%s first_device", x->name);
    cr_assert_eq(x->n_devices, y->n_devices, "%s n_devices", x->name);
    assert_link_eq(x->intra, y->intra, x->name);
    assert_link_eq(x->nic, y->nic, x->name);
  }
  cr_assert_eq(a->n_devices, b->n_devices);
  for (int32_t d = 0; d < a->n_devices; d++)
    assert_devices_eq(&a->devices[d], &b->devices[d]);
  cr_assert_eq(hap_cluster_n_link_overrides(a), hap_cluster_n_link_overrides(b));
  for (int32_t s = 0; s < a->n_devices; s++)
    for (int32_t t = 0; t < a->n_devices; t++)
      if (s != t)
        assert_link_eq(hap_cluster_link(a, s, t), hap_cluster_link(b, s, t), "path");
  cr_assert_eq(a->n_fits, b->n_fits);
  for (int32_t f = 0; f < a->n_fits; f++) {
    const hap_coll_fit *x = &a->fits[f], *y = &b->fits[f];
    cr_assert_eq(x->kind, y->kind);
    cr_assert_eq(x->n_ranks, y->n_ranks);
    cr_assert(memcmp(x->ranks, y->ranks, (size_t)x->n_ranks * sizeof *x->ranks) == 0);
    cr_assert_eq(x->fit.n_pieces, y->fit.n_pieces);
    assert_doubles_eq(x->fit.upper_bytes, y->fit.upper_bytes, x->fit.n_pieces, "fit", "cluster");
    assert_doubles_eq(x->fit.alpha_s, y->fit.alpha_s, x->fit.n_pieces, "fit", "cluster");
    assert_doubles_eq(x->fit.beta_Bps, y->fit.beta_Bps, x->fit.n_pieces, "fit", "cluster");
    cr_assert_eq(x->n_points, y->n_points);
    for (int32_t k = 0; k < x->n_points; k++) {
      assert_doubles_eq(&x->points[k].bytes, &y->points[k].bytes, 1, "point bytes", "cluster");
      assert_doubles_eq(&x->points[k].seconds, &y->points[k].seconds, 1, "point s", "cluster");
    }
  }
}

/* Write, read back, compare, write again: identical bytes. */
static void assert_round_trip(const hap_cluster *c) {
  char *s1 = to_string(c);
  hap_cluster *back = from_string(s1, NULL);
  assert_clusters_eq(c, back);
  char *s2 = to_string(back);
  cr_assert_str_eq(s1, s2, "second write differs");
  cr_assert_null(strstr(s1, "\"preset\""), "the explicit form names no presets");
  free(s1);
  free(s2);
  hap_cluster_destroy(back);
}

/* ---- presets -------------------------------------------------------------------------------- */

typedef struct peak_row {
  const char *name;
  double f32, f16, bf16, hbm_GBs, mem_GiB; /* TFLOP/s, GB/s, GiB (PEERS.md §4.3, brief) */
} peak_row;

static const peak_row peaks[] = {
    {"P100-16GB", 9.3, 18.7, 0, 732, 16},       {"V100-16GB", 15.7, 125, 0, 900, 16},
    {"V100-32GB", 15.7, 125, 0, 900, 32},       {"T4", 8.1, 65, 0, 320, 16},
    {"A100-40GB", 19.5, 312, 312, 1555, 40},    {"A100-80GB", 19.5, 312, 312, 2039, 80},
    {"H100-SXM", 66.9, 989.4, 989.4, 3350, 80}, {"H100-PCIe", 51, 756, 756, 2000, 80},
    {"H200", 66.9, 989.4, 989.4, 4800, 141},
};

Test(presets, required_presets_carry_published_peaks) {
  for (size_t i = 0; i < sizeof peaks / sizeof *peaks; i++) {
    const peak_row *r = &peaks[i];
    const hap_device_preset *p = hap_preset_find(r->name);
    cr_assert_not_null(p, "preset %s", r->name);
    cr_assert_str_eq(p->name, r->name);
    cr_expect(close_to(p->peak_flops[HAP_F32], r->f32 * 1e12), "%s fp32", r->name);
    cr_expect(close_to(p->peak_flops[HAP_F16], r->f16 * 1e12), "%s fp16", r->name);
    cr_expect_eq(p->peak_flops[HAP_BF16], r->bf16 * 1e12, "%s bf16", r->name);
    cr_expect(close_to(p->memory_bw_peak_Bps, r->hbm_GBs * 1e9), "%s HBM", r->name);
    cr_expect_eq(p->memory_bytes, r->mem_GiB * 1073741824.0, "%s memory", r->name);
    cr_expect_eq(p->kind, HAP_DEVICE_GPU);
    cr_expect_eq(p->launch_s, 5e-6);
  }
  const hap_device_preset *cpu = hap_preset_find("cpu");
  cr_assert_not_null(cpu);
  cr_expect_eq(cpu->kind, HAP_DEVICE_CPU);
  cr_expect_eq(cpu->peak_flops[HAP_F32], 1e11);
  cr_expect_eq(cpu->memory_bw_peak_Bps, 1e10);
  cr_expect_eq(cpu->launch_s, 1e-6);
  cr_expect_eq(hap_preset_count(), 10);
}

Test(presets, table_is_sane) {
  cr_assert_null(hap_preset_get(-1));
  cr_assert_null(hap_preset_get(hap_preset_count()));
  for (int i = 0; i < hap_preset_count(); i++) {
    const hap_device_preset *p = hap_preset_get(i);
    cr_assert_not_null(p);
    cr_expect_eq(hap_preset_find(p->name), p, "%s finds itself", p->name);
    cr_expect(p->doc != NULL && p->doc[0] != '\0', "%s has a doc line", p->name);
    cr_expect_gt(p->peak_flops[HAP_F32], 0, "%s fp32", p->name);
    cr_expect_gt(p->memory_bytes, 0);
    cr_expect_gt(p->memory_bw_peak_Bps, 0);
    for (int t = 0; t < HAP_DTYPE_COUNT; t++) {
      double f = p->sustained_fraction[t];
      cr_expect(p->peak_flops[t] > 0 ? f > 0.5 && f <= 1 : f == 0, "%s %s fraction %g", p->name,
                hap_dtype_name((hap_dtype)t), f);
    }
  }
  /* MAMF anchors (PEERS.md §4.1) */
  cr_expect_eq(hap_preset_find("A100-80GB")->sustained_fraction[HAP_BF16], 0.859);
  cr_expect_eq(hap_preset_find("H100-SXM")->sustained_fraction[HAP_BF16], 0.801);
}

Test(presets, lookup_ignores_case_and_suggests) {
  cr_assert_eq(hap_preset_find("v100-16gb"), hap_preset_find("V100-16GB"));
  cr_assert_eq(hap_preset_find("CPU"), hap_preset_find("cpu"));
  cr_assert_null(hap_preset_find("V100"));
  cr_assert_null(hap_preset_find(""));
  cr_assert_null(hap_preset_find(NULL));
  cr_assert_str_eq(hap_preset_suggest("V100"), "V100-16GB");
  cr_assert_eq(strncmp(hap_preset_suggest("h100"), "H100", 4), 0);
  cr_assert_str_eq(hap_preset_suggest("h100 sxm5"), "H100-SXM");
  cr_assert_str_eq(hap_preset_suggest("a100-80"), "A100-80GB");
  cr_assert_str_eq(hap_preset_suggest("pcie"), "H100-PCIe");
  cr_assert_str_eq(hap_preset_suggest("V100-16B"), "V100-16GB");
  cr_assert_str_eq(hap_preset_suggest("t5"), "T4");
  cr_assert_str_eq(hap_preset_suggest("cpus"), "cpu");
  cr_assert_null(hap_preset_suggest("banana"));
  cr_assert_null(hap_preset_suggest(""));
  cr_assert_null(hap_preset_suggest(NULL));
}

Test(presets, to_device_applies_fractions) {
  hap_device d;
  memset(&d, 0xff, sizeof d);
  const hap_device_preset *p = hap_preset_find("H100-SXM");
  hap_preset_to_device(p, &d);
  cr_assert_str_eq(d.model, "H100-SXM");
  cr_assert_null(d.name);
  cr_assert_eq(d.n_gemm, 0);
  cr_assert_null(d.kernels);
  cr_assert(close_to(d.sustained_flops[HAP_BF16], 989.4e12 * 0.801));
  cr_assert(close_to(d.sustained_flops[HAP_F32], 66.9e12 * 0.8));
  cr_assert(close_to(d.memory_bw_Bps, 3350e9 * 0.85));
  cr_assert_eq(d.sustained_flops[HAP_I64], 0);
  hap_preset_to_device(hap_preset_find("cpu"), &d);
  cr_assert_eq(d.kind, HAP_DEVICE_CPU);
  cr_assert_eq(d.launch_s, 1e-6);
  cr_assert_eq(d.sustained_flops[HAP_F16], 0);
}

/* ---- bundled clusters ----------------------------------------------------------------------- */

Test(bundled, paper_hetero) {
  use_repo_datasets();
  hap_cluster *c = load("paper-hetero");
  cr_assert_str_eq(c->name, "paper-hetero");
  cr_assert_str_eq(c->source, "paper-hetero");
  cr_assert_eq(c->n_hosts, 8);
  cr_assert_eq(c->n_devices, 64);
  cr_assert_str_eq(c->hosts[0].name, "v100-0");
  cr_assert_str_eq(c->hosts[2].name, "p100-0");
  cr_assert_str_eq(c->hosts[7].name, "p100-5");
  int32_t v = dev(c, "v100-0:0"), v2 = dev(c, "v100-0:7"), v3 = dev(c, "v100-1:0");
  int32_t p = dev(c, "p100-5:7");
  cr_assert_eq(c->devices[v].sustained_flops[HAP_F32], 3.86e12);
  cr_assert_eq(c->devices[p].sustained_flops[HAP_F32], 2.15e12);
  cr_assert_str_eq(c->devices[v].model, "V100-16GB");
  cr_assert_str_eq(c->devices[p].model, "P100-16GB");
  cr_assert_eq(c->devices[v].peak_flops[HAP_F32], 15.7e12, "peak stays the preset's");
  cr_assert_eq(c->devices[p].host, 7);
  cr_assert_eq(c->devices[p].local_index, 7);

  hap_link intra = hap_cluster_link(c, v, v2);
  cr_assert_eq(intra.bandwidth_Bps, 1.2e10);
  cr_assert_eq(intra.latency_s, 1e-5);
  hap_link inter = hap_cluster_link(c, v, v3);
  cr_assert_eq(inter.bandwidth_Bps, 1.3e9, "10.4 Gb/s");
  cr_assert(close_to(inter.latency_s, 5e-5));
  inter = hap_cluster_link(c, p, v);
  cr_assert_eq(inter.bandwidth_Bps, 1.3e9);
  cr_assert_eq(c->inter_latency_s, 0);
  cr_assert_eq(c->n_fits, 0);
  hap_cluster_destroy(c);
}

Test(bundled, paper_hetero_gpus_per_host) {
  use_repo_datasets();
  const int per[] = {8, 4, 2, 1};
  for (size_t i = 0; i < 4; i++) {
    char spec[64];
    snprintf(spec, sizeof spec, "paper-hetero:gpus_per_host=%d", per[i]);
    hap_cluster *c = load(spec);
    cr_assert_eq(c->n_hosts, 8);
    cr_assert_eq(c->n_devices, 8 * per[i], "%s", spec);
    cr_assert_eq(c->hosts[1].n_devices, per[i]);
    int v100 = 0;
    for (int32_t d = 0; d < c->n_devices; d++)
      v100 += strcmp(c->devices[d].model, "V100-16GB") == 0;
    cr_assert_eq(v100, 2 * per[i], "2:6 V100:P100 machines");
    cr_assert_str_eq(c->source, spec);
    hap_cluster_destroy(c);
  }
}

Test(bundled, others) {
  use_repo_datasets();
  hap_cluster *c = load("paper-homo");
  cr_assert_eq(c->n_hosts, 8);
  cr_assert_eq(c->n_devices, 64);
  for (int32_t d = 0; d < c->n_devices; d++)
    cr_assert_eq(c->devices[d].sustained_flops[HAP_F32], 3.86e12);
  hap_cluster_destroy(c);

  c = load("cpu-2");
  cr_assert_eq(c->n_hosts, 1);
  cr_assert_eq(c->n_devices, 2);
  cr_assert_str_eq(c->devices[1].name, "local:1");
  cr_assert_eq(c->devices[0].kind, HAP_DEVICE_CPU);
  hap_link l = hap_cluster_link(c, 0, 1);
  cr_assert_eq(l.bandwidth_Bps, 5e9);
  cr_assert_eq(l.latency_s, 2e-6);
  hap_cluster_destroy(c);

  c = load("a100-h100");
  cr_assert_eq(c->n_hosts, 4);
  cr_assert_eq(c->n_devices, 32);
  int32_t a = dev(c, "a100-0:0"), a2 = dev(c, "a100-0:1"), h = dev(c, "h100-1:7"),
          h2 = dev(c, "h100-1:6");
  cr_assert_str_eq(c->devices[h].model, "H100-SXM");
  cr_assert_eq(hap_cluster_link(c, a, a2).bandwidth_Bps, 2.4e11);
  cr_assert_eq(hap_cluster_link(c, h, h2).bandwidth_Bps, 3.6e11);
  cr_assert_eq(hap_cluster_link(c, a, h).bandwidth_Bps, 1.8e11, "the slower NIC");
  cr_assert(close_to(hap_cluster_link(c, h, a).latency_s, 5e-6));
  hap_cluster_destroy(c);
}

/* The Megatron papers' machines (TRAINING.md): 8 GPUs a node, NVSwitch inside, 8 InfiniBand NICs a
 * node modelled as one shared NIC of their sum (at 90 %). */
Test(bundled, dgx_nodes) {
  use_repo_datasets();
  hap_cluster *c = load("dgx-a100:hosts=2");
  cr_assert_eq(c->n_devices, 16);
  int32_t a = dev(c, "dgx-0:0"), a2 = dev(c, "dgx-0:7"), b = dev(c, "dgx-1:0");
  cr_assert_str_eq(c->devices[a].model, "A100-80GB");
  cr_assert_eq(hap_cluster_link(c, a, a2).bandwidth_Bps, 2.4e11);
  cr_assert_eq(hap_cluster_link(c, a, b).bandwidth_Bps, 1.8e11);
  hap_cluster_destroy(c);
  c = load("dgx-h100");
  cr_assert_eq(c->n_devices, 64);
  cr_assert_str_eq(c->devices[0].model, "H100-SXM");
  cr_assert_eq(hap_cluster_link(c, dev(c, "dgx-0:0"), dev(c, "dgx-1:0")).bandwidth_Bps, 3.6e11);
  hap_cluster_destroy(c);
}

Test(bundled, every_bundled_cluster_loads_and_round_trips) {
  use_repo_datasets();
  char names[512];
  hap_err err = {0};
  cr_assert_eq(hap_cluster_bundled_names(names, sizeof names, &err), HAP_OK, "%s", err.msg);
  cr_assert_str_eq(names, "a100-h100, cpu-2, dgx-a100, dgx-h100, paper-hetero, paper-homo");
  char *save = NULL;
  for (char *tok = strtok_r(names, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
    hap_cluster *c = load(tok);
    cr_assert_eq(hap_cluster_validate(c, &err), HAP_OK, "%s", err.msg);
    assert_round_trip(c);
    hap_cluster_destroy(c);
  }
}

Test(bundled, found_without_environment) {
  unsetenv("HAP_DATASETS");
  char names[512];
  hap_err err = {0};
  if (hap_cluster_bundled_names(names, sizeof names, &err) != HAP_OK)
    cr_skip_test("HAP_DATASETS_DIR is not compiled into hap_cluster: %s", err.msg);
  hap_cluster *c = load("paper-homo");
  cr_assert_eq(c->n_devices, 64);
  hap_cluster_destroy(c);
}

/* ---- spec parameters ------------------------------------------------------------------------ */

Test(params, links_and_counts) {
  use_repo_datasets();
  hap_cluster *c = load("paper-hetero:inter_gbps=100,intra_gbps=800,intra_latency_us=0");
  int32_t a = dev(c, "v100-0:0"), b = dev(c, "v100-0:1"), x = dev(c, "p100-2:3");
  cr_assert_eq(hap_cluster_link(c, a, x).bandwidth_Bps, 100e9 / 8);
  cr_assert(close_to(hap_cluster_link(c, a, x).latency_s, 5e-5), "NIC latencies stay");
  cr_assert_eq(hap_cluster_link(c, a, b).bandwidth_Bps, 1e11);
  cr_assert_eq(hap_cluster_link(c, a, b).latency_s, 0);
  hap_cluster_destroy(c);

  c = load("paper-hetero:inter_latency_us=10");
  a = dev(c, "v100-0:0");
  x = dev(c, "p100-2:3");
  cr_assert(close_to(hap_cluster_link(c, a, x).latency_s, 1e-5), "the whole host-to-host latency");
  cr_assert_eq(c->hosts[0].nic.latency_s, 0);
  cr_assert_eq(hap_cluster_link(c, a, x).bandwidth_Bps, 1.3e9);
  hap_cluster_destroy(c);

  c = load("paper-homo:hosts=2,gpus_per_host=4");
  cr_assert_eq(c->n_hosts, 2);
  cr_assert_eq(c->n_devices, 8);
  hap_cluster_destroy(c);
  c = load("paper-homo:hosts=1");
  cr_assert_eq(c->n_devices, 8);
  cr_assert_str_eq(c->hosts[0].name, "v100", "a group of one host is named after the group");
  cr_assert_geq(hap_cluster_find_device(c, "v100:7"), 0);
  hap_cluster_destroy(c);
}

typedef struct spec_case {
  const char *spec;
  hap_status status;
  const char *expect;
} spec_case;

static const spec_case spec_cases[] = {
    {"paper-hetero:gpu_per_host=4", HAP_ENOTFOUND,
     "cluster spec 'paper-hetero:gpu_per_host=4': unknown parameter 'gpu_per_host'; valid "
     "parameters: gpus_per_host, hosts, inter_gbps, inter_latency_us, intra_gbps, "
     "intra_latency_us"},
    {"paper-hetero:gpus_per_host=0", HAP_EINVAL,
     "parameter 'gpus_per_host' is '0', expected an integer 1..4096"},
    {"paper-hetero:gpus_per_host=2.5", HAP_EINVAL, "is '2.5', expected an integer 1..4096"},
    {"paper-hetero:gpus_per_host=4097", HAP_EINVAL, "expected an integer 1..4096"},
    {"paper-hetero:hosts=0", HAP_EINVAL, "parameter 'hosts' is '0', expected an integer 1..65536"},
    {"paper-hetero:inter_gbps=-1", HAP_EINVAL,
     "'inter_gbps' is '-1', expected a bandwidth in Gb/s > 0"},
    {"paper-hetero:inter_gbps=0", HAP_EINVAL, "expected a bandwidth in Gb/s > 0"},
    {"paper-hetero:intra_gbps=fast", HAP_EINVAL, "'intra_gbps' is 'fast'"},
    {"paper-hetero:inter_gbps=inf", HAP_EINVAL, "'inter_gbps' is 'inf'"},
    {"paper-hetero:inter_latency_us=-3", HAP_EINVAL, "expected a latency in microseconds >= 0"},
    {"paper-hetero:gpus_per_host=4,gpus_per_host=2", HAP_EINVAL,
     "parameter 'gpus_per_host' is given twice"},
    {"paper-hetero:", HAP_EINVAL, "empty parameter, expected key=value"},
    {"paper-hetero:hosts=1,,gpus_per_host=1", HAP_EINVAL, "empty parameter"},
    {"paper-hetero:gpus_per_host", HAP_EINVAL,
     "parameter 'gpus_per_host' is not of the form key=value"},
    {"paper-hetero:=4", HAP_EINVAL, "parameter '=4' is not of the form key=value"},
    {"paper-hetro", HAP_ENOTFOUND,
     "cluster spec 'paper-hetro': unknown cluster 'paper-hetro'; bundled clusters: a100-h100, "
     "cpu-2, dgx-a100, dgx-h100, paper-hetero, paper-homo"},
    {"..:hosts=1", HAP_ENOTFOUND, "unknown cluster '..'"},
    {"", HAP_EINVAL, "empty cluster spec"},
    {"no/such/file.json:hosts=2", HAP_EIO, "no/such/file.json: cannot open"},
    {GOOD_DIR "/explicit.json:gpus_per_host=2", HAP_EPARSE,
     "explicit.json: hosts[0].devices: parameter gpus_per_host cannot resize a group that lists "
     "its devices"},
    {GOOD_DIR "/explicit.json:hosts=2", HAP_EPARSE,
     "explicit.json: hosts[0].devices[0].name: device 'fast' is already defined"},
};

Test(params, errors_name_the_spec_and_list_the_choices) {
  use_repo_datasets();
  for (size_t i = 0; i < sizeof spec_cases / sizeof *spec_cases; i++) {
    const spec_case *sc = &spec_cases[i];
    static hap_cluster sentinel;
    hap_cluster *c = &sentinel;
    hap_err err = {0};
    hap_status st = hap_cluster_load(sc->spec, &c, &err);
    cr_expect_eq(st, sc->status, "%s: status %d, message: %s", sc->spec, st, err.msg);
    cr_expect_null(c, "%s: out is NULL on failure", sc->spec);
    cr_expect_not_null(strstr(err.msg, sc->expect), "%s: expected '%s' in: %s", sc->spec,
                       sc->expect, err.msg);
    cr_expect_null(strchr(err.msg, '\n'));
  }
}

Test(params, file_specs) {
  hap_cluster *c = load(GOOD_DIR "/explicit.json:inter_gbps=8");
  cr_assert_eq(c->hosts[0].nic.bandwidth_Bps, 1e9);
  cr_assert_eq(c->hosts[1].nic.bandwidth_Bps, 1e9);
  cr_assert_str_eq(c->source, GOOD_DIR "/explicit.json:inter_gbps=8");
  hap_cluster_destroy(c);
  hap_err err = {0};
  cr_assert_eq(hap_cluster_read_file(GOOD_DIR "/explicit.json", "intra_latency_us=1", &c, &err),
               HAP_OK, "%s", err.msg);
  cr_assert_eq(c->hosts[1].intra.latency_s, 1e-6);
  cr_assert_str_eq(c->source, GOOD_DIR "/explicit.json:intra_latency_us=1");
  hap_cluster_destroy(c);
  cr_assert_eq(hap_cluster_read_file(GOOD_DIR "/explicit.json", "hostz=1", &c, &err),
               HAP_ENOTFOUND);
  cr_assert_eq(
      strncmp(err.msg, GOOD_DIR "/explicit.json: unknown parameter 'hostz'", strlen(GOOD_DIR) + 40),
      0, "%s", err.msg);
}

Test(params, table) {
  cr_assert_eq(hap_cluster_param_count(), 6);
  cr_assert_str_eq(hap_cluster_param_get(0)->name, "gpus_per_host");
  cr_assert_null(hap_cluster_param_get(6));
  for (int i = 0; i < hap_cluster_param_count(); i++)
    cr_assert_not_null(hap_cluster_param_get(i)->doc);
}

/* ---- the explicit file: every feature ------------------------------------------------------- */

Test(cluster_io, explicit_file_contents) {
  hap_cluster *c = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_cluster_read_file(GOOD_DIR "/explicit.json", NULL, &c, &err), HAP_OK, "%s",
               err.msg);
  cr_assert_str_eq(c->source, GOOD_DIR "/explicit.json");
  cr_assert_eq(c->inter_latency_s, 3e-6);
  cr_assert_eq(c->n_hosts, 3);
  cr_assert_eq(c->n_devices, 7);
  cr_assert_str_eq(c->hosts[0].name, "mixed");
  cr_assert_str_eq(c->hosts[2].name, "cpus-1");
  /* links merged from defaults: the group's bandwidth, the default latency */
  cr_assert_eq(c->hosts[0].nic.bandwidth_Bps, 2e9);
  cr_assert_eq(c->hosts[0].nic.latency_s, 2e-5);
  cr_assert_eq(c->hosts[1].intra.bandwidth_Bps, 1e10);
  cr_assert_eq(c->hosts[1].intra.latency_s, 0);

  int32_t fast = dev(c, "fast"), custom = dev(c, "custom"), t4 = dev(c, "mixed:2");
  int32_t c00 = dev(c, "cpus-0:0"), c01 = dev(c, "cpus-0:1"), c10 = dev(c, "cpus-1:0"),
          c11 = dev(c, "cpus-1:1");
  const hap_device *d = &c->devices[fast];
  cr_assert_str_eq(d->model, "A100-40GB");
  cr_assert_eq(d->memory_bytes, 4e10, "override");
  cr_assert_eq(d->launch_s, 4e-6);
  cr_assert(close_to(d->sustained_flops[HAP_BF16], 312e12 * 0.859), "preset value kept");
  cr_assert_eq(d->n_gemm, 2);
  cr_assert_eq(d->gemm[1].dtype, HAP_BF16);
  cr_assert_eq(d->gemm[1].flops_per_s, 2.6e14);
  cr_assert_eq(d->n_kernels, 2);
  cr_assert_eq(d->kernels[0].op, HAP_OP_LINEAR, "kernels are sorted by op");
  cr_assert_eq(d->kernels[0].shape_key, 0x1f);
  cr_assert_eq(d->kernels[1].shape_key, 0xfffffffffffffff1ULL);
  cr_assert(d->kernels[1].backward);

  d = &c->devices[custom];
  cr_assert_str_eq(d->model, "FPGA-X");
  cr_assert_eq(d->kind, HAP_DEVICE_GPU);
  cr_assert_eq(d->peak_flops[HAP_F32], 1e12, "peak defaults to the sustained rate");
  cr_assert_eq(d->peak_flops[HAP_F16], 8e12);
  cr_assert_eq(d->launch_s, 5e-6);
  cr_assert_str_eq(c->devices[t4].model, "T4");

  d = &c->devices[c10];
  cr_assert_str_eq(d->model, "custom");
  cr_assert_eq(d->kind, HAP_DEVICE_CPU);
  cr_assert_eq(d->launch_s, 1e-6, "the kind's launch overhead");
  cr_assert_eq(d->sustained_flops[HAP_F64], 2e10);

  /* overrides: symmetric and one-way; everything else from hosts */
  cr_assert_eq(hap_cluster_n_link_overrides(c), 3);
  cr_assert_eq(hap_cluster_link(c, fast, c01).bandwidth_Bps, 3e9);
  cr_assert_eq(hap_cluster_link(c, c01, fast).bandwidth_Bps, 3e9);
  cr_assert_eq(hap_cluster_link(c, c10, custom).bandwidth_Bps, 7e8);
  hap_link back = hap_cluster_link(c, custom, c10);
  cr_assert_eq(back.bandwidth_Bps, 1.25e9, "min of the NICs");
  cr_assert(close_to(back.latency_s, 2e-5 + 5e-5 + 3e-6));
  cr_assert_eq(hap_cluster_link(c, c00, c01).bandwidth_Bps, 1e10);

  /* fits: ranks by name in any order; small values default to the large ones */
  const hap_coll_fit *f =
      hap_cluster_find_fit(c, HAP_COLL_ALL_REDUCE, (int32_t[]){custom, c11, fast}, 3);
  cr_assert_not_null(f);
  cr_assert_eq(f->fit.n_pieces, 2);
  cr_assert_eq(f->fit.upper_bytes[0], 65536);
  cr_assert_eq(f->fit.beta_Bps[0], 1e9);
  f = hap_cluster_find_fit(c, HAP_COLL_ALL_TO_ALL, (int32_t[]){c01, c00}, 2);
  cr_assert_not_null(f);
  cr_assert_eq(f->fit.n_pieces, 1, "threshold 0: one piece");
  cr_assert_eq(f->fit.alpha_s[0], 2e-6);
  cr_assert_eq(f->fit.beta_Bps[0], 2e9);
  assert_round_trip(c);
  hap_cluster_destroy(c);
}

Test(cluster_io, newer_minor_version_ignores_unknown_keys) {
  hap_cluster *c = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_cluster_read_file(GOOD_DIR "/v1_1.json", NULL, &c, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(c->n_devices, 1);
  cr_assert_str_eq(c->devices[0].name, "g:0");
  cr_assert_str_eq(c->devices[0].model, "H200");
  hap_cluster_destroy(c);
}

Test(cluster_io, written_form_is_explicit_and_stable) {
  use_repo_datasets();
  hap_cluster *c = load("cpu-2");
  char *s = to_string(c);
  const char *head =
      "{\n"
      "  \"format\": \"hap-cluster\",\n"
      "  \"version\": \"1.0\",\n"
      "  \"name\": \"cpu-2\",\n"
      "  \"source\": \"cpu-2\",\n"
      "  \"inter_latency_s\": 0.0,\n"
      "  \"hosts\": [\n"
      "    {\n"
      "      \"name\": \"local\",\n"
      "      \"intra_host\": {\"bandwidth_Bps\": 5000000000.0, \"latency_s\": 2e-06},\n"
      "      \"nic\": {\"bandwidth_Bps\": 1250000000.0, \"latency_s\": 2.5e-05},\n"
      "      \"devices\": [\n"
      "        {\"name\": \"local:0\", \"model\": \"cpu\", \"kind\": \"cpu\", "
      "\"peak_flops\": {\"float32\": 100000000000.0, \"float64\": 50000000000.0}, "
      "\"sustained_flops\": {\"float32\": 70000000000.0, \"float64\": "
      "35000000000.0}, \"memory_bytes\": 8589934592.0, \"memory_bw_Bps\": "
      "8500000000.0, \"launch_s\": 1e-06},\n";
  cr_assert(strncmp(s, head, strlen(head)) == 0, "got:\n%s", s);
  const char *tail = "\"launch_s\": 1e-06}\n      ]\n    }\n  ]\n}\n";
  cr_assert_str_eq(s + strlen(s) - strlen(tail), tail, "got:\n%s", s);
  free(s);
  hap_cluster_destroy(c);
}

Test(cluster_io, write_file_round_trip_and_refusals) {
  use_repo_datasets();
  char dir[] = "/tmp/hap_test_cluster_io.XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char p1[128], p2[128];
  snprintf(p1, sizeof p1, "%s/c1.json", dir);
  snprintf(p2, sizeof p2, "%s/c2.json", dir);
  hap_cluster *c = load("paper-hetero:gpus_per_host=2");
  hap_err err = {0};
  cr_assert_eq(hap_cluster_write_file(c, p1, &err), HAP_OK, "%s", err.msg);
  hap_cluster *back = load(p1);
  assert_clusters_eq(c, back);
  cr_assert_str_eq(back->source, "paper-hetero:gpus_per_host=2", "the file's source wins");
  cr_assert_eq(hap_cluster_write_file(back, p2, &err), HAP_OK, "%s", err.msg);
  char *s1, *s2;
  size_t n1, n2;
  cr_assert_eq(hap_read_file(p1, &s1, &n1, &err), HAP_OK);
  cr_assert_eq(hap_read_file(p2, &s2, &n2, &err), HAP_OK);
  cr_assert_eq(n1, n2);
  cr_assert(memcmp(s1, s2, n1) == 0, "byte-identical second write");
  free(s1);
  free(s2);
  hap_cluster_destroy(back);
  hap_cluster_destroy(c);

  /* an invalid cluster is refused and leaves no file */
  hap_cluster *empty = hap_cluster_create("empty");
  char p3[128];
  snprintf(p3, sizeof p3, "%s/c3.json", dir);
  cr_assert_eq(hap_cluster_write_file(empty, p3, &err), HAP_EINVAL);
  cr_assert_not_null(strstr(err.msg, p3), "%s", err.msg);
  cr_assert_neq(access(p3, F_OK), 0);
  hap_cluster_destroy(empty);

  /* a name the reader would refuse */
  hap_cluster *odd = hap_cluster_create("odd\nname");
  hap_link l = {1e-6, 1e9};
  hap_device proto;
  hap_preset_to_device(hap_preset_find("T4"), &proto);
  hap_err_clear(&err);
  cr_assert_eq(hap_cluster_add_host(odd, "h", l, l, NULL, &err), HAP_OK);
  cr_assert_eq(hap_cluster_add_device(odd, "h:0", &proto, NULL, &err), HAP_OK);
  FILE *f = fopen("/dev/null", "w");
  cr_assert_eq(hap_cluster_write(odd, f, &err), HAP_EINVAL);
  cr_assert_null(strchr(err.msg, '\n'), "%s", err.msg);
  fclose(f);
  hap_cluster_destroy(odd);
  unlink(p1);
  unlink(p2);
  cr_assert_eq(rmdir(dir), 0, "no temporary files are left behind");
}

Test(cluster_io, built_cluster_round_trips) {
  /* a cluster built through the API, as a profile would: odd names, samples, overrides, fits */
  hap_cluster *c = hap_cluster_create("built \"quoted\" caf\xc3\xa9");
  cr_assert_not_null(c);
  hap_err err = {0};
  cr_assert_eq(hap_cluster_set_source(c, "profile.h5"), HAP_OK);
  hap_link intra = {.latency_s = 1.0 / 3e5, .bandwidth_Bps = 0.1 + 0.2};
  hap_link nic = {.latency_s = 0, .bandwidth_Bps = 1e300};
  hap_device proto;
  hap_preset_to_device(hap_preset_find("V100-32GB"), &proto);
  proto.model = "Tesla V100-SXM2-32GB (measured)";
  hap_gemm_sample g[2] = {{4, 5, 6, HAP_F16, 1e13}, {1, 2, 3, HAP_F32, 7e12}};
  hap_kernel_sample k[1] = {{HAP_OP_GELU, true, UINT64_MAX, 1.5e-6}};
  proto.gemm = g;
  proto.n_gemm = 2;
  proto.kernels = k;
  proto.n_kernels = 1;
  proto.peak_flops[HAP_I32] = 1e12;  /* a peak without a sustained rate */
  proto.update_bw_Bps = 1.0 / 3e-12; /* measured by hap-profile (written only when > 0) */
  for (int h = 0; h < 3; h++) {
    char name[32];
    snprintf(name, sizeof name, "node%02d.example", h);
    cr_assert_eq(hap_cluster_add_host(c, name, intra, nic, NULL, &err), HAP_OK, "%s", err.msg);
    for (int i = 0; i < 2; i++) {
      snprintf(name, sizeof name, "n%d/gpu%d", h, i);
      cr_assert_eq(hap_cluster_add_device(c, name, &proto, NULL, &err), HAP_OK, "%s", err.msg);
      proto.n_gemm = 0;
      proto.n_kernels = 0;
    }
  }
  for (int32_t s = 5; s >= 0; s--)
    cr_assert_eq(hap_cluster_set_link(c, s, (s + 3) % 6, (hap_link){1e-7 * s, 1e9 + s}, &err),
                 HAP_OK);
  hap_coll_fit fit = {.kind = HAP_COLL_REDUCE_SCATTER,
                      .n_ranks = 3,
                      .ranks = (int32_t[]){5, 0, 3},
                      .fit = hap_ab_fit_two(1 << 20, 1e-6, 1e9, 2e-6, 4e9)};
  cr_assert_eq(hap_cluster_add_fit(c, &fit, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_cluster_validate(c, &err), HAP_OK, "%s", err.msg);
  assert_round_trip(c);
  char *s = to_string(c);
  cr_assert_not_null(strstr(s, "\"version\": \"1.0\""), "no points: the 1.0 form\n%s", s);
  free(s);
  /* the same group's all-reduce, timed at two sizes of a plan (hap-cluster 1.1) */
  hap_coll_point pts[] = {{1.0 / 3 * 3e6, 2.5e-4}, {4096, 1.0 / 3e4}};
  fit = (hap_coll_fit){.kind = HAP_COLL_ALL_REDUCE,
                       .n_ranks = 3,
                       .ranks = (int32_t[]){5, 0, 3},
                       .fit = hap_ab_fit_one(1e-5, 1e9),
                       .n_points = 2,
                       .points = pts};
  cr_assert_eq(hap_cluster_add_fit(c, &fit, &err), HAP_OK, "%s", err.msg);
  cr_assert_float_eq(c->fits[1].points[0].bytes, 4096, 0, "points sorted by size");
  assert_round_trip(c);
  s = to_string(c);
  cr_assert_not_null(strstr(s, "\"version\": \"1.1\""), "points: 1.1\n%s", s);
  cr_assert_not_null(strstr(s, "\"points\": [{\"bytes\": 4096.0, \"s\": "), "%s", s);
  free(s);
  s = to_string(c);
  cr_assert_not_null(strstr(s, "{\"src\": \"n0/gpu0\", \"dst\": \"n1/gpu1\", "), "sorted:\n%s", s);
  cr_assert_not_null(strstr(s, "\"shape_key\": \"0xffffffffffffffff\""), "%s", s);
  cr_assert_not_null(strstr(s, "\"int32\": 1000000000000.0"), "%s", s);
  cr_assert_not_null(strstr(s, "\"update_bw_Bps\": "), "%s", s);
  free(s);
  hap_cluster_destroy(c);
}

/* ---- bad files ------------------------------------------------------------------------------ */

typedef struct bad_case {
  const char *file;
  const char *expect; /* substring of the message after the file name */
} bad_case;

static const bad_case bad_cases[] = {
    {"empty.json", "the file is empty, expected a hap-cluster JSON object"},
    {"truncated.json", "line "},
    {"root_array.json", "root: expected a hap-cluster object"},
    {"duplicate_key.json", "duplicate object key"},
    {"huge_number.json", "real number overflow"},
    {"huge_integer.json", "too big integer"},
    {"wrong_format.json", "format: is \"hap-graph\", expected \"hap-cluster\""},
    {"missing_format.json", "format: missing, expected \"hap-cluster\""},
    {"newer_major.json", "version: the file was written by a newer hap (format version 2.0); "
                         "this build reads 1.x"},
    {"version_number.json", "version: expected a version string \"MAJOR.MINOR\" such as \"1.0\", "
                            "got a real number"},
    {"missing_name.json", "name: missing, expected the cluster's name"},
    {"zero_hosts.json", "hosts: is empty, expected at least one host group"},
    {"missing_hosts.json", "hosts: missing, expected an array of host groups"},
    {"hosts_not_array.json", "hosts: expected an array of host groups, got an object"},
    {"zero_devices.json", "hosts[0].devices_per_host: is 0, expected an integer 1..4096"},
    {"empty_device_list.json", "hosts[0].devices: is empty, expected at least one device"},
    {"no_devices.json", "hosts[1]: has no devices, expected \"device\" with \"devices_per_host\""},
    {"both_device_forms.json", "hosts[0]: has both \"device\" and \"devices\""},
    {"too_many_devices.json",
     "hosts[0]: the cluster would have 268435456 devices, expected at most 65536"},
    {"negative_bandwidth.json",
     "defaults.nic.bandwidth_Bps: is -1, expected a bandwidth in bytes/s > 0"},
    {"zero_bandwidth.json", "hosts[1].intra_host.bandwidth_Bps: is 0, expected a bandwidth in "
                            "bytes/s > 0"},
    {"negative_latency.json", "hosts[0].nic.latency_s: is -1e-06, expected a latency in s >= 0"},
    {"negative_inter_latency.json", "inter_latency_s: is -1, expected a latency in s >= 0"},
    {"wrong_type_bandwidth.json", "defaults.intra_host.bandwidth_Bps: expected a bandwidth in "
                                  "bytes/s > 0 (a number), got a string"},
    {"link_null.json", "hosts[0].intra_host: expected a link {\"bandwidth_Bps\""},
    {"missing_intra_link.json", "hosts[0].intra_host: missing, expected a link {\"bandwidth_Bps\": "
                                "bytes/s, \"latency_s\": s} here or in defaults.intra_host"},
    {"partial_nic_link.json", "hosts[0].nic.latency_s: missing, expected a latency in s >= 0 here "
                              "or in defaults.nic"},
    {"unknown_preset.json",
     "hosts[0].device: unknown device preset 'V100' (did you mean 'V100-16GB'?)"},
    {"unknown_preset_object.json",
     "hosts[1].device.preset: unknown device preset 'h100' (did you mean 'H100-SXM'?)"},
    {"unknown_preset_no_hint.json",
     "hosts[0].device: unknown device preset 'banana', expected one of P100-16GB, V100-16GB, "
     "V100-32GB, T4, A100-40GB, A100-80GB, H100-SXM, H100-PCIe, H200, cpu"},
    {"device_not_object.json", "hosts[0].device: expected a preset name such as \"V100-16GB\" or "
                               "a device object, got an integer"},
    {"unknown_dtype.json", "hosts[0].device.sustained_flops.fp32: unknown dtype 'fp32', expected "
                           "float32, float16, bfloat16, float64, int64, int32 or bool"},
    {"no_float_rate.json", "hosts[0].device.sustained_flops: no float dtype has a rate > 0"},
    {"explicit_missing_memory.json", "hosts[0].device.memory_bytes: missing, expected a size in "
                                     "bytes > 0"},
    {"bad_kind.json", "hosts[0].device.kind: is \"tpu\", expected \"gpu\" or \"cpu\""},
    {"name_in_shared_device.json", "hosts[0].device.name: unknown key, expected one of preset, "},
    {"negative_update_bandwidth.json",
     "hosts[0].devices[0].update_bw_Bps: is -5, expected a bandwidth in bytes/s (0: priced at "
     "memory_bw_Bps) >= 0"},
    {"gemm_zero_dim.json", "hosts[0].devices[0].gemm[0].m: is 0, expected a positive integer"},
    {"kernel_unknown_op.json", "hosts[0].devices[0].kernels[0].op: unknown op 'linaer'"},
    {"kernel_bad_shape_key.json", "hosts[0].devices[0].kernels[0].shape_key: is \"0xZZ\", "
                                  "expected \"0x\" and 1 to 16 hex digits"},
    {"duplicate_host.json",
     "hosts[1].name: host 'a' is already defined by hosts[0], expected unique host names"},
    {"duplicate_host_expanded.json", "hosts[2].name: host 'b-1' is already defined by hosts[1]"},
    {"duplicate_device.json", "hosts[0].devices[1].name: device 'x' is already defined"},
    {"name_control_char.json", "hosts[0].name: 'a\\x0ab' contains a control character"},
    {"empty_name.json", "hosts[0].name: is empty, expected a non-empty name"},
    {"unknown_key.json", "hosts[0].devices_per_hots: unknown key, expected one of name, doc, "
                         "count, devices_per_host, device, devices, intra_host, nic"},
    {"unknown_top_key.json", "parameters: unknown key, expected one of format, version"},
    {"wrong_type_count.json", "hosts[1].count: expected an integer 1..65536, got a string"},
    {"link_unknown_device.json",
     "links[0].dst: unknown device 'b-1:9', expected a device name such as 'a:0'"},
    {"link_same_device.json", "links[0].dst: is the same device as src"},
    {"link_missing_latency.json", "links[0].latency_s: missing, expected a latency in s >= 0"},
    {"collective_unknown_kind.json",
     "collectives[0].kind: unknown collective 'allreduce', expected all_reduce, all_gather, "
     "reduce_scatter, all_to_all or broadcast"},
    {"collective_unknown_rank.json", "collectives[0].ranks[1]: unknown device 'c:0'"},
    {"collective_duplicate_rank.json",
     "collectives[0].ranks[1]: device 'a:0' is already listed at [0], expected distinct ranks"},
    {"collective_missing_beta.json",
     "collectives[0].beta_large_Bps: missing, expected a bandwidth in bytes/s"},
    {"collective_no_ranks.json", "collectives[0].ranks: is empty, expected at least one device"},
    {"collective_point_negative.json",
     "collectives[0].points[1].bytes: is -5, expected a size in bytes > 0"},
    {"collective_point_twice.json", "two points at 1024 bytes, expected one time per size"},
};
#define N_BAD (sizeof bad_cases / sizeof *bad_cases)

static const bad_case *find_case(const char *file) {
  for (size_t i = 0; i < N_BAD; i++)
    if (strcmp(bad_cases[i].file, file) == 0)
      return &bad_cases[i];
  return NULL;
}

Test(cluster_io, bad_files_fail_with_one_line_naming_file_and_field) {
  for (size_t i = 0; i < N_BAD; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", BAD_DIR, bad_cases[i].file);
    static hap_cluster sentinel;
    hap_cluster *c = &sentinel; /* must be reset to NULL */
    hap_err err = {0};
    hap_status st = hap_cluster_read_file(path, NULL, &c, &err);
    cr_expect_neq(st, HAP_OK, "%s was accepted", bad_cases[i].file);
    cr_expect_eq(err.status, st, "%s", bad_cases[i].file);
    cr_expect_null(c, "%s: out is NULL on failure", bad_cases[i].file);
    cr_expect_eq(strncmp(err.msg, path, strlen(path)), 0,
                 "message does not start with the path: %s", err.msg);
    cr_expect_not_null(strstr(err.msg, bad_cases[i].expect), "%s: expected '%s' in: %s",
                       bad_cases[i].file, bad_cases[i].expect, err.msg);
    cr_expect_null(strchr(err.msg, '\n'), "message is one line: %s", err.msg);
    if (c != NULL && c != &sentinel)
      hap_cluster_destroy(c);
  }
}

Test(cluster_io, bad_corpus_is_complete_and_large) {
  DIR *d = opendir(BAD_DIR);
  cr_assert_not_null(d);
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    /* the malformed files; expected-errors.txt is tests/check_bad_files.sh's table */
    if (e->d_name[0] == '.' || len < 5 || strcmp(e->d_name + len - 5, ".json") != 0)
      continue;
    cr_expect_not_null(find_case(e->d_name), "%s has no entry in bad_cases", e->d_name);
    n++;
  }
  closedir(d);
  cr_assert_eq(n, N_BAD, "every bad_cases entry has a file");
  cr_assert_geq(n, 15);
}

Test(cluster_io, status_codes_and_labels) {
  hap_cluster *c = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_cluster_read_file(BAD_DIR "/newer_major.json", NULL, &c, &err), HAP_EVERSION);
  hap_err_clear(&err);
  cr_assert_eq(hap_cluster_read_file(BAD_DIR "/truncated.json", NULL, &c, &err), HAP_EPARSE);
  hap_err_clear(&err);
  cr_assert_eq(hap_cluster_read_file(BAD_DIR "/no_such_file.json", NULL, &c, &err), HAP_EIO);
  cr_assert_not_null(strstr(err.msg, "No such file or directory"), "%s", err.msg);
  hap_err_clear(&err);
  cr_assert_eq(from_string_err("{\"format\": \"hap-cluster\"}", NULL, &err), HAP_EPARSE);
  cr_assert_str_eq(err.msg, "mem: version: missing, expected a version string such as \"1.0\"");
  hap_err_clear(&err);
  static const char nul[] = "{\"format\": \"hap-cluster\"\0}";
  cr_assert_eq(hap_cluster_from_json(nul, sizeof nul - 1, NULL, NULL, &c, &err), HAP_EPARSE);
  cr_assert_eq(strncmp(err.msg, "<json>: line 1, column", 22), 0, "%s", err.msg);
  hap_err_clear(&err);
  cr_assert_eq(from_string_err("{}", "bogus", &err), HAP_EINVAL);
  cr_assert_str_eq(err.msg, "mem: parameter 'bogus' is not of the form key=value");
}

/* hap-profile show's device table: a launch overhead in the unit that shows it (a measured 23 ns
 * once printed as "0.0us"). */
Test(show, launch_overhead_in_its_unit) {
  use_repo_datasets();
  hap_cluster *c = load("paper-hetero:gpus_per_host=1,hosts=1");
  const double launch[3] = {23e-9, 5e-6, 1.25e-3};
  const char *want[3] = {" 23ns ", " 5.0us ", " 1.25ms "};
  for (int k = 0; k < 3; k++) {
    for (int32_t d = 0; d < c->n_devices; d++)
      c->devices[d].launch_s = launch[k];
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_not_null(f);
    hap_cluster_show_table(f, c, "test");
    fclose(f);
    cr_assert(strstr(text, want[k]) != NULL, "no '%s' in:\n%s", want[k], text);
    cr_assert(strstr(text, "0.0us") == NULL, "%s", text);
    free(text);
  }
  hap_cluster_destroy(c);
}
