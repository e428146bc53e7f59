/* Cost queries against closed forms: collectives (every kind and implementation, uneven shards,
 * multi-host groups, NIC sharing, profiled fits), point-to-point, compute. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cluster/cluster.h"
#include "cluster/cost.h"

#define A_INTRA 2e-6 /* s */
#define B_INTRA 1e11 /* bytes/s */
#define A_NIC   5e-6 /* s per NIC */
#define B_NIC   1e10 /* bytes/s */

static void expect_close(double got, double want) {
  cr_assert(fabs(got - want) <= 1e-12 * fabs(want) + 1e-18, "got %.17g, want %.17g", got, want);
}

static hap_device proto_device(double sustained) {
  hap_device d = {0};
  d.model = "test-gpu";
  d.kind = HAP_DEVICE_GPU;
  d.peak_flops[HAP_F32] = 2 * sustained;
  d.sustained_flops[HAP_F32] = sustained;
  d.memory_bytes = 16e9;
  d.memory_bw_Bps = 1e12;
  d.launch_s = 5e-6;
  return d;
}

/* hosts x per_host devices, all the same; host h's devices are ids h*per_host ... */
static hap_cluster *make_cluster(int hosts, int per_host) {
  hap_cluster *c = hap_cluster_create("test");
  cr_assert_not_null(c);
  hap_device proto = proto_device(1e13);
  for (int h = 0; h < hosts; h++) {
    char name[32];
    snprintf(name, sizeof name, "h%d", h);
    cr_assert_eq(hap_cluster_add_host(c, name, (hap_link){A_INTRA, B_INTRA},
                                      (hap_link){A_NIC, B_NIC}, NULL, NULL),
                 HAP_OK);
    for (int d = 0; d < per_host; d++) {
      char dn[48];
      snprintf(dn, sizeof dn, "h%d:%d", h, d);
      cr_assert_eq(hap_cluster_add_device(c, dn, &proto, NULL, NULL), HAP_OK);
    }
  }
  cr_assert_eq(hap_cluster_validate(c, NULL), HAP_OK);
  return c;
}

static hap_group group_of(const hap_cluster *c, const int32_t *ranks, int32_t n) {
  hap_group g;
  hap_err err = {0};
  cr_assert_eq(hap_group_init(c, ranks, n, &g, &err), HAP_OK, "%s", err.msg);
  return g;
}

static const int32_t first8[] = {0, 1, 2, 3, 4, 5, 6, 7};

Test(cost, ring_all_reduce_one_host) {
  hap_cluster *c = make_cluster(1, 4);
  hap_group g = group_of(c, first8, 4);
  double s = 64e6;
  double want = 2 * 3 * A_INTRA + 2.0 * 3 / 4 * s / B_INTRA;
  expect_close(hap_coll_time(&g, HAP_COLL_ALL_REDUCE, HAP_IMPL_RING, hap_coll_bytes_uniform(s, 4)),
               want);
  hap_cluster_destroy(c);
}

Test(cost, tree_all_reduce_and_auto_choice) {
  hap_cluster *c = make_cluster(1, 8);
  hap_group g = group_of(c, first8, 8);
  /* tree: 2 ceil(log2 8) a + 2 S/B; wins for tiny messages, ring wins for large ones */
  double small = 1024, large = 256e6;
  expect_close(
      hap_coll_time(&g, HAP_COLL_ALL_REDUCE, HAP_IMPL_TREE, hap_coll_bytes_uniform(small, 8)),
      2 * 3 * A_INTRA + 2 * small / B_INTRA);
  double t;
  cr_assert_eq(hap_coll_best(&g, HAP_COLL_ALL_REDUCE, hap_coll_bytes_uniform(small, 8), &t),
               HAP_IMPL_TREE);
  expect_close(t, 2 * 3 * A_INTRA + 2 * small / B_INTRA);
  cr_assert_eq(hap_coll_best(&g, HAP_COLL_ALL_REDUCE, hap_coll_bytes_uniform(large, 8), &t),
               HAP_IMPL_RING);
  expect_close(t, 2 * 7 * A_INTRA + 2.0 * 7 / 8 * large / B_INTRA);
  /* hierarchical needs several hosts */
  cr_assert(isinf(hap_coll_time(&g, HAP_COLL_ALL_REDUCE, HAP_IMPL_HIERARCHICAL,
                                hap_coll_bytes_uniform(large, 8))));
  hap_cluster_destroy(c);
}

Test(cost, multi_host_ring_and_hierarchical_all_reduce) {
  hap_cluster *c = make_cluster(2, 4);
  hap_group g = group_of(c, first8, 8);
  cr_assert_eq(g.n_hosts, 2);
  cr_assert_eq(g.max_per_host, 4);
  double s = 128e6, a_e = 2 * A_NIC;
  /* flat ring: one edge leaves each host, so the bottleneck is one NIC, latency the inter path */
  expect_close(hap_coll_time(&g, HAP_COLL_ALL_REDUCE, HAP_IMPL_RING, hap_coll_bytes_uniform(s, 8)),
               2 * 7 * a_e + 2.0 * 7 / 8 * s / B_NIC);
  /* hierarchical: intra RS + inter AR of S/4 per local rank (S per NIC) + intra AG */
  double intra = 3 * A_INTRA + 3.0 / 4 * s / B_INTRA;
  double inter = 2 * 1 * a_e + 2.0 * 1 / 2 * s / B_NIC;
  expect_close(
      hap_coll_time(&g, HAP_COLL_ALL_REDUCE, HAP_IMPL_HIERARCHICAL, hap_coll_bytes_uniform(s, 8)),
      2 * intra + inter);
  double t;
  cr_assert_eq(hap_coll_best(&g, HAP_COLL_ALL_REDUCE, hap_coll_bytes_uniform(s, 8), &t),
               HAP_IMPL_HIERARCHICAL);
  hap_cluster_destroy(c);
}

Test(cost, ring_edges_share_a_nic) {
  hap_cluster *c = make_cluster(2, 2);
  /* interleaved order h0, h1, h0, h1: every edge crosses, two leave each host */
  const int32_t order[] = {0, 2, 1, 3};
  hap_group g = group_of(c, order, 4);
  expect_close(g.ring.bandwidth_Bps, B_NIC / 2);
  double s = 1e8;
  expect_close(hap_coll_time(&g, HAP_COLL_ALL_REDUCE, HAP_IMPL_RING, hap_coll_bytes_uniform(s, 4)),
               2 * 3 * 2 * A_NIC + 2.0 * 3 / 4 * s / (B_NIC / 2));
  hap_cluster_destroy(c);
}

Test(cost, uneven_all_gather_padded_vs_grouped) {
  hap_cluster *c = make_cluster(1, 4);
  hap_group g = group_of(c, first8, 4);
  const double shards[] = {4e6, 2e6, 1e6, 1e6};
  hap_coll_bytes b = hap_coll_bytes_of(shards, 4);
  expect_close(b.max, 4e6);
  expect_close(b.min, 1e6);
  expect_close(b.sum, 8e6);
  double padded = 3 * A_INTRA + 3 * 4e6 / B_INTRA;
  double grouped = 4 * A_INTRA + (8e6 - 1e6) / B_INTRA;
  for (int k = HAP_COLL_ALL_GATHER; k <= HAP_COLL_REDUCE_SCATTER; k++) {
    expect_close(hap_coll_time(&g, (hap_coll_kind)k, HAP_IMPL_RING, b), padded);
    expect_close(hap_coll_time(&g, (hap_coll_kind)k, HAP_IMPL_GROUPED, b), grouped);
    double t;
    cr_assert_eq(hap_coll_best(&g, (hap_coll_kind)k, b, &t), HAP_IMPL_GROUPED);
    cr_assert(isinf(hap_coll_time(&g, (hap_coll_kind)k, HAP_IMPL_TREE, b)));
  }
  /* even shards: padding costs nothing and saves one latency, so the ring wins */
  hap_coll_bytes even = hap_coll_bytes_uniform(2e6, 4);
  double t;
  cr_assert_eq(hap_coll_best(&g, HAP_COLL_ALL_GATHER, even, &t), HAP_IMPL_RING);
  expect_close(t, 3 * A_INTRA + 3 * 2e6 / B_INTRA);
  hap_cluster_destroy(c);
}

Test(cost, all_to_all_pairwise) {
  hap_cluster *c = make_cluster(1, 4);
  hap_group g = group_of(c, first8, 4);
  double s = 8e6; /* bytes each rank sends in total */
  expect_close(
      hap_coll_time(&g, HAP_COLL_ALL_TO_ALL, HAP_IMPL_PAIRWISE, hap_coll_bytes_uniform(s, 4)),
      3 * (A_INTRA + s / (4 * B_INTRA)));
  cr_assert(
      isinf(hap_coll_time(&g, HAP_COLL_ALL_TO_ALL, HAP_IMPL_RING, hap_coll_bytes_uniform(s, 4))));
  hap_cluster_destroy(c);

  /* 2 hosts x 4: each NIC carries 4 ranks x S x 4/8 leaving the host */
  c = make_cluster(2, 4);
  g = group_of(c, first8, 8);
  double pairwise = 7 * (2 * A_NIC + s / (8 * B_NIC));
  double nic = 7 * 2 * A_NIC + 4 * s * 4 / (8 * B_NIC);
  expect_close(hap_coll_time(&g, HAP_COLL_ALL_TO_ALL, HAP_IMPL_AUTO, hap_coll_bytes_uniform(s, 8)),
               fmax(pairwise, nic));
  hap_cluster_destroy(c);
}

/* A re-shard that moves nothing costs nothing; one that moves M bytes from a rank is priced as
 * the all-to-all of M * n / (n - 1): M over the link, n - 1 latencies. */
Test(cost, reshard_all_to_all) {
  hap_cluster *c = make_cluster(1, 4);
  hap_group g = group_of(c, first8, 4);
  cr_assert_eq(
      hap_coll_time(&g, HAP_COLL_ALL_TO_ALL, HAP_IMPL_PAIRWISE, hap_coll_bytes_uniform(0, 4)), 0);
  cr_assert_eq(hap_coll_time(&g, HAP_COLL_ALL_TO_ALL, HAP_IMPL_AUTO, hap_coll_bytes_uniform(0, 4)),
               0);
  expect_close(hap_reshard_spread(4), 4.0 / 3);
  cr_assert_eq(hap_reshard_spread(1), 1);
  double m = 6e6, moved[4] = {m * hap_reshard_spread(4), 0, 0, m * hap_reshard_spread(4)};
  expect_close(
      hap_coll_time(&g, HAP_COLL_ALL_TO_ALL, HAP_IMPL_PAIRWISE, hap_coll_bytes_of(moved, 4)),
      3 * A_INTRA + m / B_INTRA);
  hap_cluster_destroy(c);
}

Test(cost, broadcast_ring_and_tree) {
  hap_cluster *c = make_cluster(1, 8);
  hap_group g = group_of(c, first8, 8);
  double s = 32e6;
  expect_close(hap_coll_time(&g, HAP_COLL_BROADCAST, HAP_IMPL_RING, hap_coll_bytes_uniform(s, 8)),
               7 * A_INTRA + s / B_INTRA);
  expect_close(hap_coll_time(&g, HAP_COLL_BROADCAST, HAP_IMPL_TREE, hap_coll_bytes_uniform(s, 8)),
               3 * A_INTRA + 2 * s / B_INTRA);
  hap_cluster_destroy(c);
}

Test(cost, profiled_fit_wins_under_auto) {
  hap_cluster *c = make_cluster(2, 2);
  int32_t ranks[] = {3, 0, 1, 2}; /* any order matches the sorted fit */
  hap_coll_fit fit = {.kind = HAP_COLL_ALL_REDUCE,
                      .n_ranks = 4,
                      .ranks = ranks,
                      .fit = hap_ab_fit_two(1e6, 1e-5, 1e9, 1e-4, 4e9)};
  cr_assert_eq(hap_cluster_add_fit(c, &fit, NULL), HAP_OK);
  hap_group g = group_of(c, (int32_t[]){0, 1, 2, 3}, 4);
  cr_assert_not_null(g.fit[HAP_COLL_ALL_REDUCE]);
  cr_assert_null(g.fit[HAP_COLL_ALL_GATHER]);
  expect_close(
      hap_coll_time(&g, HAP_COLL_ALL_REDUCE, HAP_IMPL_AUTO, hap_coll_bytes_uniform(1e5, 4)),
      1e-5 + 1e5 / 1e9);
  expect_close(
      hap_coll_time(&g, HAP_COLL_ALL_REDUCE, HAP_IMPL_AUTO, hap_coll_bytes_uniform(1e7, 4)),
      1e-4 + 1e7 / 4e9);
  /* an explicit implementation is priced by the fit too (the library picks its own algorithm);
   * one that does not apply to the kind stays impossible */
  expect_close(
      hap_coll_time(&g, HAP_COLL_ALL_REDUCE, HAP_IMPL_RING, hap_coll_bytes_uniform(1e7, 4)),
      1e-4 + 1e7 / 4e9);
  cr_assert(isinf(
      hap_coll_time(&g, HAP_COLL_ALL_REDUCE, HAP_IMPL_PAIRWISE, hap_coll_bytes_uniform(1e7, 4))));
  /* without a fit for the kind: the link formula, as on the same cluster without fits */
  hap_cluster *bare = make_cluster(2, 2);
  hap_group gb = group_of(bare, (int32_t[]){0, 1, 2, 3}, 4);
  expect_close(
      hap_coll_time(&g, HAP_COLL_ALL_GATHER, HAP_IMPL_RING, hap_coll_bytes_uniform(1e7, 4)),
      hap_coll_time(&gb, HAP_COLL_ALL_GATHER, HAP_IMPL_RING, hap_coll_bytes_uniform(1e7, 4)));
  hap_cluster_destroy(bare);
  /* a different rank set has no fit */
  hap_group g3 = group_of(c, (int32_t[]){0, 1, 2}, 3);
  cr_assert_null(g3.fit[HAP_COLL_ALL_REDUCE]);
  hap_cluster_destroy(c);
}

/* Uneven gathers under a fit: grouped moves the shares' total, padded n times the largest. */
Test(cost, profiled_fit_prices_grouped_and_padded_gathers) {
  hap_cluster *c = make_cluster(1, 4);
  int32_t ranks[] = {0, 1, 2, 3};
  hap_coll_fit fit = {.kind = HAP_COLL_ALL_GATHER,
                      .n_ranks = 4,
                      .ranks = ranks,
                      .fit = hap_ab_fit_two(1e6, 2e-5, 1e9, 1e-4, 5e9)};
  cr_assert_eq(hap_cluster_add_fit(c, &fit, NULL), HAP_OK);
  hap_group g = group_of(c, ranks, 4);
  double shares[4] = {4e6, 2e6, 1e6, 1e6};
  hap_coll_bytes b = hap_coll_bytes_of(shares, 4);
  expect_close(hap_coll_time(&g, HAP_COLL_ALL_GATHER, HAP_IMPL_GROUPED, b), 1e-4 + 8e6 / 5e9);
  expect_close(hap_coll_time(&g, HAP_COLL_ALL_GATHER, HAP_IMPL_RING, b), 1e-4 + 16e6 / 5e9);
  hap_cluster_destroy(c);
}

Test(cost, single_rank_costs_nothing) {
  hap_cluster *c = make_cluster(1, 2);
  hap_group g = group_of(c, first8, 1);
  for (int k = 0; k < HAP_COLL_KIND_COUNT; k++)
    cr_assert_eq(hap_coll_time(&g, (hap_coll_kind)k, HAP_IMPL_AUTO, hap_coll_bytes_uniform(1e6, 1)),
                 0.0);
  hap_cluster_destroy(c);
}

Test(cost, group_errors) {
  hap_cluster *c = make_cluster(1, 2);
  hap_group g;
  hap_err err = {0};
  cr_assert_eq(hap_group_init(c, (int32_t[]){0, 0}, 2, &g, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "appears twice") != NULL, "%s", err.msg);
  hap_err_clear(&err);
  cr_assert_eq(hap_group_init(c, (int32_t[]){0, 5}, 2, &g, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "does not exist") != NULL, "%s", err.msg);
  hap_err_clear(&err);
  cr_assert_eq(hap_group_init(c, NULL, 0, &g, &err), HAP_EINVAL);
  hap_cluster_destroy(c);
}

Test(cost, p2p_links_and_overrides) {
  hap_cluster *c = make_cluster(2, 2);
  double s = 1e6;
  expect_close(hap_p2p_time(c, 0, 1, s), A_INTRA + s / B_INTRA);
  expect_close(hap_p2p_time(c, 0, 2, s), 2 * A_NIC + s / B_NIC);
  cr_assert_eq(hap_p2p_time(c, 1, 1, s), 0.0);
  cr_assert_eq(hap_cluster_set_link(c, 0, 2, (hap_link){1e-3, 1e8}, NULL), HAP_OK);
  expect_close(hap_p2p_time(c, 0, 2, s), 1e-3 + s / 1e8);
  expect_close(hap_p2p_time(c, 2, 0, s), 2 * A_NIC + s / B_NIC); /* ordered pair */
  /* the override slows a group containing both devices */
  hap_group g = group_of(c, (int32_t[]){0, 1, 2, 3}, 4);
  expect_close(g.inter.bandwidth_Bps, 1e8);
  expect_close(g.worst.latency_s, 1e-3);
  hap_cluster_destroy(c);
}

static hap_op_io linear_io(int64_t m, int64_t k, int64_t n) {
  hap_op_io io = {0};
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_LINEAR);
  static hap_attrs keep;
  keep = a;
  io.attrs = &keep;
  io.n_in = 2;
  io.in[0] = (hap_shape){2, {m, k}};
  io.in[1] = (hap_shape){2, {n, k}};
  io.in_dtype[0] = io.in_dtype[1] = HAP_F32;
  io.in_grad[0] = io.in_grad[1] = true;
  cr_assert_eq(hap_op_infer(HAP_OP_LINEAR, &io, NULL), HAP_OK);
  return io;
}

Test(cost, compute_roofline_and_measured_kernels) {
  hap_cluster *c = make_cluster(1, 1);
  hap_op_io io = linear_io(1024, 1024, 1024);
  double flops = 2.0 * 1024 * 1024 * 1024;
  /* compute-bound: launch + flops / sustained */
  expect_close(hap_compute_time(c, 0, HAP_OP_LINEAR, &io, false), 5e-6 + flops / 1e13);
  expect_close(hap_compute_time(c, 0, HAP_OP_LINEAR, &io, true), 5e-6 + 2 * flops / 1e13);
  /* memory-bound: relu over 1M floats reads 4 MB and writes 4 MB */
  hap_op_io r = {0};
  hap_attrs ra;
  hap_attrs_init(&ra, HAP_OP_RELU);
  r.attrs = &ra;
  r.n_in = 1;
  r.in[0] = (hap_shape){1, {1 << 20}};
  r.in_dtype[0] = HAP_F32;
  cr_assert_eq(hap_op_infer(HAP_OP_RELU, &r, NULL), HAP_OK);
  expect_close(hap_compute_time(c, 0, HAP_OP_RELU, &r, false), 5e-6 + 8.0 * (1 << 20) / 1e12);
  hap_cluster_destroy(c);

  /* a measured kernel time wins for exactly its shapes */
  c = hap_cluster_create("measured");
  hap_cluster_add_host(c, "h", (hap_link){A_INTRA, B_INTRA}, (hap_link){A_NIC, B_NIC}, NULL, NULL);
  hap_device proto = proto_device(1e13);
  hap_kernel_sample ks = {HAP_OP_LINEAR, false, hap_kernel_shape_key(&io), 1.25e-3};
  proto.kernels = &ks;
  proto.n_kernels = 1;
  cr_assert_eq(hap_cluster_add_device(c, "h:0", &proto, NULL, NULL), HAP_OK);
  expect_close(hap_compute_time(c, 0, HAP_OP_LINEAR, &io, false), 1.25e-3);
  expect_close(hap_compute_time(c, 0, HAP_OP_LINEAR, &io, true), 5e-6 + 2 * flops / 1e13);
  hap_op_io other = linear_io(512, 1024, 1024);
  expect_close(hap_compute_time(c, 0, HAP_OP_LINEAR, &other, false), 5e-6 + flops / 2 / 1e13);
  hap_cluster_destroy(c);
}

/* A backward that leaves the input's gradient out (a first layer) does half the work of the full
 * one of the same shapes: it keys apart (hap_kernel_key), so each is priced by its own row; the
 * forward, and a backward computing every gradient, key as the shapes alone. */
Test(cost, a_backward_without_the_input_gradient_has_its_own_row) {
  hap_op_io full = linear_io(256, 256, 256);
  hap_op_io first = full;
  first.in_grad[0] = false;
  cr_assert_eq(hap_kernel_key(&full, false), hap_kernel_shape_key(&full));
  cr_assert_eq(hap_kernel_key(&first, false), hap_kernel_shape_key(&full));
  cr_assert_eq(hap_kernel_key(&full, true), hap_kernel_shape_key(&full));
  cr_assert_neq(hap_kernel_key(&first, true), hap_kernel_key(&full, true));
  hap_op_io no_weight = full; /* another input left out: another key */
  no_weight.in_grad[1] = false;
  cr_assert_neq(hap_kernel_key(&no_weight, true), hap_kernel_key(&first, true));
  hap_cluster *c = hap_cluster_create("rows");
  hap_cluster_add_host(c, "h", (hap_link){A_INTRA, B_INTRA}, (hap_link){A_NIC, B_NIC}, NULL, NULL);
  hap_device proto = proto_device(1e13);
  hap_kernel_sample ks[] = {{HAP_OP_LINEAR, true, hap_kernel_key(&full, true), 2e-3},
                            {HAP_OP_LINEAR, true, hap_kernel_key(&first, true), 1e-3}};
  proto.kernels = ks;
  proto.n_kernels = 2;
  cr_assert_eq(hap_cluster_add_device(c, "h:0", &proto, NULL, NULL), HAP_OK);
  expect_close(hap_compute_time(c, 0, HAP_OP_LINEAR, &full, true), 2e-3);
  expect_close(hap_compute_time(c, 0, HAP_OP_LINEAR, &first, true), 1e-3);
  hap_cluster_destroy(c);
}

/* io with every float input and output in `dt` */
static hap_op_io in_dtype(hap_op_io io, hap_dtype dt) {
  for (int i = 0; i < io.n_in; i++)
    io.in_dtype[i] = dt;
  for (int i = 0; i < io.n_out; i++)
    io.out_dtype[i] = dt;
  return io;
}

/* A device without half-precision FLOP/s (a CPU) runs bfloat16 and float16 applications as the
 * float32 ones: same time from the roofline (float32 bytes) and from its measured rows; a device
 * with a bfloat16 rate prices them at that rate and half the bytes, and its float32 rows do not
 * serve them. */
Test(cost, half_precision_on_a_device_without_it_is_float32) {
  hap_op_io io = linear_io(1024, 1024, 1024);
  hap_op_io r = {0};
  hap_attrs ra;
  hap_attrs_init(&ra, HAP_OP_RELU);
  r.attrs = &ra;
  r.n_in = 1;
  r.in[0] = (hap_shape){1, {1 << 20}};
  r.in_dtype[0] = HAP_F32;
  cr_assert_eq(hap_op_infer(HAP_OP_RELU, &r, NULL), HAP_OK);
  hap_kernel_sample ks = {HAP_OP_LINEAR, false, hap_kernel_shape_key(&io), 1.25e-3};
  for (int rows = 0; rows < 2; rows++) {
    hap_cluster *c = hap_cluster_create("half");
    hap_cluster_add_host(c, "h", (hap_link){A_INTRA, B_INTRA}, (hap_link){A_NIC, B_NIC}, NULL,
                         NULL);
    hap_device cpu = proto_device(1e11);
    cpu.kind = HAP_DEVICE_CPU;
    cpu.memory_bw_Bps = 1e10;
    hap_device gpu = proto_device(1e13);
    gpu.sustained_flops[HAP_BF16] = gpu.peak_flops[HAP_BF16] = 4e13;
    if (rows) {
      cpu.kernels = gpu.kernels = &ks;
      cpu.n_kernels = gpu.n_kernels = 1;
    }
    cr_assert_eq(hap_cluster_add_device(c, "h:0", &cpu, NULL, NULL), HAP_OK);
    cr_assert_eq(hap_cluster_add_device(c, "h:1", &gpu, NULL, NULL), HAP_OK);
    cr_assert(hap_device_emulates_dtype(&c->devices[0], HAP_BF16));
    cr_assert(hap_device_emulates_dtype(&c->devices[0], HAP_F16));
    cr_assert(!hap_device_emulates_dtype(&c->devices[0], HAP_F32));
    cr_assert(!hap_device_emulates_dtype(&c->devices[1], HAP_BF16));
    cr_assert(hap_device_emulates_dtype(&c->devices[1], HAP_F16)); /* no float16 rate given */
    for (int dt = 0; dt < 2; dt++) {
      hap_dtype half = dt ? HAP_F16 : HAP_BF16;
      for (int bwd = 0; bwd < 2; bwd++) {
        hap_op_io h = in_dtype(io, half), hr = in_dtype(r, half);
        expect_close(hap_compute_time(c, 0, HAP_OP_LINEAR, &h, bwd),
                     hap_compute_time(c, 0, HAP_OP_LINEAR, &io, bwd));
        expect_close(hap_compute_time(c, 0, HAP_OP_RELU, &hr, bwd),
                     hap_compute_time(c, 0, HAP_OP_RELU, &r, bwd));
      }
    }
    if (rows)
      expect_close(hap_compute_time(c, 0, HAP_OP_LINEAR, &io, false), 1.25e-3);
    /* the GPU: bfloat16 at its own rate (the float32 row, when there is one, not used) */
    hap_op_io hb = in_dtype(io, HAP_BF16);
    double flops = 2.0 * 1024 * 1024 * 1024;
    expect_close(hap_compute_time(c, 1, HAP_OP_LINEAR, &hb, false), 5e-6 + flops / 4e13);
    hap_op_io hrb = in_dtype(r, HAP_BF16);
    expect_close(hap_compute_time(c, 1, HAP_OP_RELU, &hrb, false), 5e-6 + 4.0 * (1 << 20) / 1e12);
    hap_cluster_destroy(c);
  }
}

/* Rows timed in half precision (a GPU's replay under a bf16 policy) are keyed with their format:
 * they serve half-precision applications of their shapes on a device with half arithmetic, and
 * neither float32 applications nor a device that runs the half ones in float32 (a CPU). */
Test(cost, half_precision_rows_serve_half_precision_applications) {
  hap_op_io io = linear_io(1024, 1024, 1024);
  hap_op_io hb = in_dtype(io, HAP_BF16), hh = in_dtype(io, HAP_F16);
  uint64_t k32 = hap_kernel_shape_key(&io), kb = hap_kernel_shape_key(&hb);
  cr_assert(k32 != kb && kb != hap_kernel_shape_key(&hh) && k32 != hap_kernel_shape_key(&hh));
  cr_assert_eq(hap_io_compute_dtype(&hb), HAP_BF16);
  hap_kernel_sample ks[] = {{HAP_OP_LINEAR, false, k32, 1.25e-3},
                            {HAP_OP_LINEAR, false, kb, 0.5e-3}};
  hap_cluster *c = hap_cluster_create("half-rows");
  hap_cluster_add_host(c, "h", (hap_link){A_INTRA, B_INTRA}, (hap_link){A_NIC, B_NIC}, NULL, NULL);
  hap_device cpu = proto_device(1e11);
  cpu.kind = HAP_DEVICE_CPU;
  hap_device gpu = proto_device(1e13);
  gpu.sustained_flops[HAP_BF16] = gpu.peak_flops[HAP_BF16] = 4e13;
  cpu.kernels = gpu.kernels = ks;
  cpu.n_kernels = gpu.n_kernels = 2;
  cr_assert_eq(hap_cluster_add_device(c, "h:0", &cpu, NULL, NULL), HAP_OK);
  cr_assert_eq(hap_cluster_add_device(c, "h:1", &gpu, NULL, NULL), HAP_OK);
  expect_close(hap_compute_time(c, 1, HAP_OP_LINEAR, &hb, false), 0.5e-3);
  expect_close(hap_compute_time(c, 1, HAP_OP_LINEAR, &io, false), 1.25e-3);
  /* float16 has no row (and no rate on this GPU: it runs as float32, from the float32 row) */
  expect_close(hap_compute_time(c, 1, HAP_OP_LINEAR, &hh, false), 1.25e-3);
  /* the CPU runs bfloat16 in float32: the float32 row */
  expect_close(hap_compute_time(c, 0, HAP_OP_LINEAR, &hb, false), 1.25e-3);
  hap_cluster_destroy(c);
}

Test(cost, gemm_sweep_interpolation) {
  hap_device d = proto_device(1e13);
  hap_gemm_sample s[] = {{256, 256, 256, HAP_F32, 2e12}, {4096, 4096, 4096, HAP_F32, 8e12}};
  d.gemm = s;
  d.n_gemm = 2;
  /* exact at samples, geometric in between (equal log distance: mean of the logs) */
  expect_close(hap_gemm_rate(&d, HAP_F32, 256, 256, 256), 2e12);
  expect_close(hap_gemm_rate(&d, HAP_F32, 4096, 4096, 4096), 8e12);
  expect_close(hap_gemm_rate(&d, HAP_F32, 1024, 1024, 1024), 4e12);
  /* nearer to the large sample: closer to its rate */
  double r = hap_gemm_rate(&d, HAP_F32, 2048, 2048, 2048);
  cr_assert(r > 4e12 && r < 8e12, "%g", r);
  /* no samples for the dtype: the sustained rate, float32 when the dtype has none */
  expect_close(hap_gemm_rate(&d, HAP_F16, 1024, 1024, 1024), 1e13);
}

Test(cost, impl_names_round_trip) {
  for (int i = 0; i < HAP_IMPL_COUNT; i++) {
    hap_coll_impl x;
    cr_assert_eq(hap_coll_impl_parse(hap_coll_impl_name((hap_coll_impl)i), &x), HAP_OK);
    cr_assert_eq(x, (hap_coll_impl)i);
  }
  for (int k = 0; k < HAP_COLL_KIND_COUNT; k++) {
    hap_coll_kind x;
    cr_assert_eq(hap_coll_kind_parse(hap_coll_kind_name((hap_coll_kind)k), &x), HAP_OK);
    cr_assert_eq(x, (hap_coll_kind)k);
  }
  hap_coll_impl x;
  cr_assert_eq(hap_coll_impl_parse("butterfly", &x), HAP_ENOTFOUND);
}
