/* Unit tests of cluster/kernel_model.h: the built-in grid and the fallback pricing of kernel shapes
 * a device's kernel table did not time (through hap_compute_time). */
#include <math.h>
#include <stdio.h>

#include <criterion/criterion.h>

#include "cluster/cost.h"
#include "cluster/kernel_model.h"
#include "test_util.h"

/* A relu application on a float32 [rows, cols] input. */
static hap_op_io relu_io(hap_attrs *a, int64_t rows, int64_t cols) {
  hap_op_io io = {0};
  hap_attrs_init(a, HAP_OP_RELU);
  io.attrs = a;
  io.n_in = 1;
  io.in[0] = (hap_shape){2, {rows, cols}};
  io.in_dtype[0] = HAP_F32;
  io.in_grad[0] = true;
  cr_assert_eq(hap_op_infer(HAP_OP_RELU, &io, NULL), HAP_OK);
  return io;
}

static hap_device cpu_proto(void) {
  hap_device d = {0};
  d.model = "test-cpu";
  d.kind = HAP_DEVICE_CPU;
  d.peak_flops[HAP_F32] = 2e11;
  d.sustained_flops[HAP_F32] = 1e11;
  d.memory_bytes = 8e9;
  d.memory_bw_Bps = 1e10;
  d.launch_s = 1e-6;
  return d;
}

/* A one-device cluster whose device holds `n` kernel rows. */
static hap_cluster *one_device(const hap_kernel_sample *rows, int32_t n) {
  hap_cluster *c = hap_cluster_create("km");
  cr_assert_not_null(c);
  cr_assert_eq(
      hap_cluster_add_host(c, "h", (hap_link){1e-6, 1e10}, (hap_link){1e-5, 1e9}, NULL, NULL),
      HAP_OK);
  hap_device proto = cpu_proto();
  proto.kernels = (hap_kernel_sample *)rows;
  proto.n_kernels = n;
  hap_err err = {0};
  cr_assert_eq(hap_cluster_add_device(c, "h:0", &proto, NULL, &err), HAP_OK, "%s", err.msg);
  return c;
}

/* The quick grid's relu cases (two shapes), smaller work first. */
static void relu_grid(hap_kgrid_case out[2]) {
  int32_t k = 0;
  for (int32_t i = 0; i < hap_kernel_grid_count(true) && k < 2; i++) {
    hap_kgrid_case g;
    cr_assert_eq(hap_kernel_grid_case(true, i, &g, NULL), HAP_OK);
    if (g.op == HAP_OP_RELU) {
      out[k] = g;
      hap_kgrid_case_fix(&out[k]);
      k++;
    }
  }
  cr_assert_eq(k, 2, "the quick grid has %d relu shapes, expected 2", k);
  hap_device d = cpu_proto();
  if (hap_kernel_work_s(&d, HAP_OP_RELU, &out[0].io, false, HAP_F32) >
      hap_kernel_work_s(&d, HAP_OP_RELU, &out[1].io, false, HAP_F32)) {
    hap_kgrid_case t = out[0];
    out[0] = out[1];
    out[1] = t;
    hap_kgrid_case_fix(&out[0]);
    hap_kgrid_case_fix(&out[1]);
  }
}

static void expect_rel(double got, double want, double tol) {
  cr_assert(fabs(got - want) <= tol * fabs(want), "got %.9g, expected %.9g", got, want);
}

Test(kernel_model, every_grid_case_builds_and_covers_the_zoo_ops) {
  bool has[2][HAP_OP_COUNT] = {{false}};
  for (int q = 0; q < 2; q++) {
    cr_assert_gt(hap_kernel_grid_count(q), 0);
    for (int32_t i = 0; i < hap_kernel_grid_count(q); i++) {
      hap_kgrid_case g;
      hap_err err = {0};
      cr_assert_eq(hap_kernel_grid_case(q, i, &g, &err), HAP_OK, "%s grid case %d: %s",
                   q ? "quick" : "default", i, err.msg);
      has[q][g.op] = true;
    }
  }
  hap_kgrid_case g;
  cr_assert_eq(hap_kernel_grid_case(true, hap_kernel_grid_count(true), &g, NULL), HAP_EINVAL);
  const char *zoo[] = {"mlp", "bert-base", "vit", "bert-moe", "vgg19", "gpt"};
  for (size_t m = 0; m < sizeof zoo / sizeof zoo[0]; m++) {
    hap_graph *gr = model(zoo[m]);
    for (int32_t n = 0; n < gr->n_nodes; n++)
      for (int q = 0; q < 2; q++)
        cr_assert(has[q][gr->nodes[n].op], "%s uses %s, not in the %s grid", zoo[m],
                  hap_op_name(gr->nodes[n].op), q ? "quick" : "default");
    hap_graph_destroy(gr);
  }
}

Test(kernel_model, no_rows_is_the_roofline) {
  hap_attrs a;
  hap_op_io io = relu_io(&a, 300, 700);
  double roof = 1e-6 + 2.0 * 4 * 300 * 700 / 1e10; /* launch + read + write at 10 GB/s */
  hap_cluster *c = one_device(NULL, 0);
  expect_rel(hap_compute_time(c, 0, HAP_OP_RELU, &io, false), roof, 1e-12);
  cr_assert_lt(hap_kernel_model_time(&c->devices[0], HAP_OP_RELU, false, HAP_F32, 1e-4), 0);
  hap_cluster_destroy(c);
  /* rows of another op or direction, or a row at a shape outside the grid: still the roofline */
  hap_kgrid_case g[2];
  relu_grid(g);
  hap_attrs b;
  hap_op_io off = relu_io(&b, 3, 5);
  hap_kernel_sample rows[] = {{HAP_OP_GELU, false, hap_kernel_shape_key(&g[0].io), 1e-3},
                              {HAP_OP_RELU, true, hap_kernel_shape_key(&g[0].io), 1e-3},
                              {HAP_OP_RELU, false, hap_kernel_shape_key(&off), 1e-3}};
  c = one_device(rows, 3);
  expect_rel(hap_compute_time(c, 0, HAP_OP_RELU, &io, false), roof, 1e-12);
  hap_cluster_destroy(c);
}

Test(kernel_model, measured_shapes_keep_their_times) {
  hap_kgrid_case g[2];
  relu_grid(g);
  hap_attrs b;
  hap_op_io plan = relu_io(&b, 300, 700); /* a --plan row outside the grid */
  hap_kernel_sample rows[] = {{HAP_OP_RELU, false, hap_kernel_shape_key(&g[0].io), 2e-5},
                              {HAP_OP_RELU, false, hap_kernel_shape_key(&g[1].io), 7e-4},
                              {HAP_OP_RELU, false, hap_kernel_shape_key(&plan), 3.5e-4}};
  hap_cluster *c = one_device(rows, 3);
  cr_assert_eq(hap_compute_time(c, 0, HAP_OP_RELU, &g[0].io, false), 2e-5);
  cr_assert_eq(hap_compute_time(c, 0, HAP_OP_RELU, &g[1].io, false), 7e-4);
  cr_assert_eq(hap_compute_time(c, 0, HAP_OP_RELU, &plan, false), 3.5e-4);
  /* the model itself passes through its rows */
  const hap_device *d = &c->devices[0];
  for (int i = 0; i < 2; i++)
    expect_rel(hap_kernel_model_time(d, HAP_OP_RELU, false, HAP_F32,
                                     hap_kernel_work_s(d, HAP_OP_RELU, &g[i].io, false, HAP_F32)),
               rows[i].seconds, 1e-12);
  hap_cluster_destroy(c);
}

Test(kernel_model, exact_recovery_on_synthetic_rows) {
  hap_kgrid_case g[2];
  relu_grid(g);
  hap_device p = cpu_proto();
  double w0 = hap_kernel_work_s(&p, HAP_OP_RELU, &g[0].io, false, HAP_F32);
  double w1 = hap_kernel_work_s(&p, HAP_OP_RELU, &g[1].io, false, HAP_F32);
  cr_assert(w1 > w0 && w0 > 0, "grid relu works %g %g", w0, w1);
  /* constant efficiency 25 %: every shape, inside and outside the grid, is recovered */
  hap_kernel_sample rows[] = {{HAP_OP_RELU, false, hap_kernel_shape_key(&g[0].io), 4 * w0},
                              {HAP_OP_RELU, false, hap_kernel_shape_key(&g[1].io), 4 * w1}};
  hap_cluster *c = one_device(rows, 2);
  int64_t shapes[][2] = {{2, 3}, {64, 100}, {200, 300}, {4096, 4096}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    hap_attrs a;
    hap_op_io io = relu_io(&a, shapes[i][0], shapes[i][1]);
    double w = hap_kernel_work_s(&p, HAP_OP_RELU, &io, false, HAP_F32);
    expect_rel(hap_compute_time(c, 0, HAP_OP_RELU, &io, false), 4 * w, 1e-9);
  }
  hap_cluster_destroy(c);
  /* a power law t = k w^0.8 between and below the rows (slope 0.8 kept below the grid) */
  rows[0].seconds = 3e-3 * pow(w0, 0.8);
  rows[1].seconds = 3e-3 * pow(w1, 0.8);
  c = one_device(rows, 2);
  for (size_t i = 0; i < 2; i++) {
    hap_attrs a;
    hap_op_io io = relu_io(&a, shapes[i + 1][0] / (i == 0 ? 8 : 1), shapes[i + 1][1]);
    double w = hap_kernel_work_s(&p, HAP_OP_RELU, &io, false, HAP_F32);
    expect_rel(hap_compute_time(c, 0, HAP_OP_RELU, &io, false), 3e-3 * pow(w, 0.8), 1e-9);
  }
  hap_cluster_destroy(c);
}

Test(kernel_model, a_shape_between_two_rows_is_priced_between_them) {
  hap_kgrid_case g[2];
  relu_grid(g);
  /* measured times far from the roofline: 30 us and 2 ms */
  hap_kernel_sample rows[] = {{HAP_OP_RELU, true, hap_kernel_shape_key(&g[0].io), 3e-5},
                              {HAP_OP_RELU, true, hap_kernel_shape_key(&g[1].io), 2e-3}};
  hap_cluster *c = one_device(rows, 2);
  int64_t lo = g[0].io.in[0].dims[0] * g[0].io.in[0].dims[1];
  int64_t hi = g[1].io.in[0].dims[0] * g[1].io.in[0].dims[1];
  double prev = 3e-5;
  for (int64_t n = lo * 2; n < hi; n *= 2) {
    hap_attrs a;
    hap_op_io io = relu_io(&a, n / 64, 64);
    double t = hap_compute_time(c, 0, HAP_OP_RELU, &io, true);
    cr_assert(t > prev && t < 2e-3, "%lld elements: %g s, expected in (%g, 2e-3)", (long long)n, t,
              prev);
    prev = t;
  }
  /* float16 queries keep the roofline */
  cr_assert_lt(hap_kernel_model_time(&c->devices[0], HAP_OP_RELU, true, HAP_F16, 1e-4), 0);
  hap_cluster_destroy(c);
}
