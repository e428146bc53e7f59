/* bench_cost — collective and compute cost queries per second on a large cluster.
 * Usage: bench_cost [DEVICES] [QUERIES]  (defaults 1024 devices as 128 hosts x 8, 10,000,000
 * queries). Groups (whole cluster, one host, one rank per host) are summarised once, then the
 * queries cycle through every collective kind, implementation and 64 message sizes. Then
 * QUERIES / 10 compute queries (relu and linear at 64 shapes, none in the kernel table) on a
 * device without kernel rows (roofline) and on one holding every quick-grid row (the fallback
 * model, cluster/kernel_model.h). Prints the median over 5 runs of the wall time (CLOCK_MONOTONIC).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cluster/cluster.h"
#include "cluster/cost.h"
#include "cluster/kernel_model.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* hap_compute_time on off-grid relu and linear shapes: roofline device 0, modelled device 1. */
static bool bench_compute(long queries) {
  if (queries < 1)
    return true;
  hap_cluster *c = hap_cluster_create("bench-cpu");
  hap_device proto = {0};
  proto.model = "bench-cpu";
  proto.kind = HAP_DEVICE_CPU;
  proto.sustained_flops[HAP_F32] = 1e11;
  proto.memory_bytes = 8e9;
  proto.memory_bw_Bps = 5e10;
  proto.launch_s = 1e-7;
  hap_gemm_sample gemm[27];
  for (int i = 0; i < 27; i++) /* a 3 x 3 x 3 sweep as hap-profile --quick */
    gemm[i] = (hap_gemm_sample){64 << (2 * (i % 3)), 64 << (2 * (i / 3 % 3)), 64 << (2 * (i / 9)),
                                HAP_F32, 2e10 * (1 + i % 5)};
  proto.gemm = gemm;
  proto.n_gemm = 27;
  hap_kernel_sample rows[2 * 64];
  int32_t n = 0;
  for (int32_t i = 0; i < hap_kernel_grid_count(true) && n + 2 <= 2 * 64; i++) {
    hap_kgrid_case g;
    if (hap_kernel_grid_case(true, i, &g, NULL) != HAP_OK)
      return false;
    for (int b = 0; b < 2; b++)
      rows[n++] = (hap_kernel_sample){g.op, b == 1, hap_kernel_shape_key(&g.io), 1e-5 * (i + 1)};
  }
  hap_cluster_add_host(c, "h", (hap_link){2e-6, 1e10}, (hap_link){5e-6, 1e9}, NULL, NULL);
  hap_cluster_add_device(c, "h:0", &proto, NULL, NULL);
  proto.kernels = rows;
  proto.n_kernels = n;
  hap_cluster_add_device(c, "h:1", &proto, NULL, NULL);
  hap_attrs ar, al;
  hap_attrs_init(&ar, HAP_OP_RELU);
  hap_attrs_init(&al, HAP_OP_LINEAR);
  hap_op_io io[64];
  for (int i = 0; i < 64; i++) {
    bool lin = i % 2 == 1;
    io[i] = (hap_op_io){0};
    io[i].attrs = lin ? &al : &ar;
    io[i].n_in = lin ? 2 : 1;
    io[i].in[0] = (hap_shape){2, {24 * (int64_t)(i + 1), 96 + 8 * (int64_t)i}};
    io[i].in[1] = (hap_shape){2, {200 + 4 * (int64_t)i, 96 + 8 * (int64_t)i}};
    io[i].in_dtype[0] = io[i].in_dtype[1] = HAP_F32;
    io[i].in_grad[0] = io[i].in_grad[1] = true;
    if (hap_op_infer(lin ? HAP_OP_LINEAR : HAP_OP_RELU, &io[i], NULL) != HAP_OK)
      return false;
  }
  for (int dev = 0; dev < 2; dev++) {
    double runs[5], checksum = 0;
    for (int r = 0; r < 5; r++) {
      double start = now_s();
      for (long q = 0; q < queries; q++) {
        int i = (int)(q & 63);
        checksum +=
            hap_compute_time(c, dev, i % 2 ? HAP_OP_LINEAR : HAP_OP_RELU, &io[i], (q >> 6) & 1);
      }
      runs[r] = now_s() - start;
    }
    qsort(runs, 5, sizeof *runs, cmp_double);
    printf("%ld compute queries, %s: median %.3f s = %.1f ns/query (checksum %.6g)\n", queries,
           dev == 0 ? "roofline (no kernel rows)" : "fallback model (quick-grid rows)", runs[2],
           runs[2] / (double)queries * 1e9, checksum);
  }
  hap_cluster_destroy(c);
  return true;
}

int main(int argc, char **argv) {
  int devices = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 1024;
  long queries = argc > 2 ? strtol(argv[2], NULL, 10) : 10000000L;
  int per_host = 8;
  if (devices < per_host || devices % per_host != 0 || queries < 1) {
    fprintf(stderr, "usage: bench_cost [DEVICES (multiple of 8)] [QUERIES]\n");
    return 2;
  }
  int hosts = devices / per_host;
  hap_cluster *c = hap_cluster_create("bench");
  hap_device proto = {0};
  proto.model = "bench-gpu";
  proto.sustained_flops[HAP_F32] = 1e13;
  proto.memory_bytes = 16e9;
  proto.memory_bw_Bps = 1e12;
  for (int h = 0; h < hosts; h++) {
    char name[32];
    snprintf(name, sizeof name, "h%d", h);
    hap_cluster_add_host(c, name, (hap_link){2e-6, 1e11}, (hap_link){5e-6, 1.25e10}, NULL, NULL);
    for (int d = 0; d < per_host; d++) {
      char dn[48];
      snprintf(dn, sizeof dn, "h%d:%d", h, d);
      hap_cluster_add_device(c, dn, &proto, NULL, NULL);
    }
  }
  int32_t *all = malloc((size_t)devices * sizeof *all);
  int32_t *cross = malloc((size_t)hosts * sizeof *cross);
  for (int i = 0; i < devices; i++)
    all[i] = i;
  for (int h = 0; h < hosts; h++)
    cross[h] = h * per_host;
  hap_group groups[3];
  hap_err err = {0};
  double t0 = now_s();
  if (hap_group_init(c, all, devices, &groups[0], &err) != HAP_OK ||
      hap_group_init(c, all, per_host, &groups[1], &err) != HAP_OK ||
      hap_group_init(c, cross, hosts, &groups[2], &err) != HAP_OK) {
    fprintf(stderr, "bench_cost: %s\n", err.msg);
    return 1;
  }
  double init_s = now_s() - t0;
  hap_coll_bytes sizes[64];
  for (int i = 0; i < 64; i++) {
    double shard = 1024.0 * (double)(1 << (i % 20));
    sizes[i] = (hap_coll_bytes){shard * (1 + (i % 3)), shard, shard * devices, devices};
  }
  double runs[5];
  double checksum = 0;
  for (int r = 0; r < 5; r++) {
    double start = now_s();
    for (long q = 0; q < queries; q++) {
      const hap_group *g = &groups[q % 3];
      hap_coll_kind kind = (hap_coll_kind)(q % HAP_COLL_KIND_COUNT);
      hap_coll_impl impl = (hap_coll_impl)((q / 5) % HAP_IMPL_COUNT);
      double t = hap_coll_time(g, kind, impl, sizes[q & 63]);
      if (t < 1e30)
        checksum += t;
    }
    runs[r] = now_s() - start;
  }
  qsort(runs, 5, sizeof *runs, cmp_double);
  printf("cluster: %d devices (%d hosts x %d); group summaries: %.3f ms for 3 groups\n", devices,
         hosts, per_host, init_s * 1e3);
  printf("%ld collective cost queries: median %.3f s (min %.3f, max %.3f) = %.1f ns/query "
         "(checksum %.6g)\n",
         queries, runs[2], runs[0], runs[4], runs[2] / (double)queries * 1e9, checksum);
  free(all);
  free(cross);
  hap_cluster_destroy(c);
  return bench_compute(queries / 10) ? 0 : 1;
}
