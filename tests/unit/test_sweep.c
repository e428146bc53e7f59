/* test_sweep.c — hap-sim's what-if grid (simulate/sweep.h): parsing axes and their errors, the
 * grid's size and order, each point's specs, batch per device, device substitution, and what a
 * point's failure leaves. */
#include <criterion/criterion.h>
#include <string.h>

#include "cluster/cluster_io.h"
#include "cluster/presets.h"
#include "model/graph.h"
#include "simulate/sweep.h"

#define SMALL "mlp:layers=2,batch=24,seq=8,hidden=32"

/* A sweep over `model` on `cluster` with the given axes, which must parse. */
static void init_ok(hap_sweep *s, const char *model, const char *cluster, int batch_per_device,
                    const char *const *axes, int n_axes) {
  hap_sweep_config cfg = {.model = model,
                          .cluster = cluster,
                          .batch_per_device = batch_per_device,
                          .axes = axes,
                          .n_axes = n_axes};
  hap_err err = {0};
  cr_assert_eq(hap_sweep_init(s, &cfg, &err), HAP_OK, "%s", err.msg);
}

/* hap_sweep_init must fail with HAP_EINVAL and a one-line message containing `want`. */
static void init_fails(const hap_sweep_config *cfg, const char *want) {
  static hap_sweep s;
  hap_err err = {0};
  cr_assert_eq(hap_sweep_init(&s, cfg, &err), HAP_EINVAL, "expected: %s", want);
  cr_assert_not_null(strstr(err.msg, want), "'%s' not in: %s", want, err.msg);
  cr_assert_null(strchr(err.msg, '\n'), "%s", err.msg);
}

static void axis_fails(const char *model, const char *axis, const char *want) {
  const char *axes[] = {axis};
  hap_sweep_config cfg = {.model = model, .cluster = "cpu-2", .axes = axes, .n_axes = 1};
  init_fails(&cfg, want);
}

/* ---- axes ------------------------------------------------------------------------------------ */

Test(sweep_axes, kinds_and_values) {
  static hap_sweep s;
  const char *axes[] = {"gpus_per_host=1,2,4", "batch=8,16", "device[P100]=V100-16GB,A100-80GB"};
  init_ok(&s, SMALL, "paper-hetero", 0, axes, 3);
  cr_assert_eq(s.n_axes, 3);
  cr_assert_eq(s.axes[0].kind, HAP_SWEEP_CLUSTER);
  cr_assert_str_eq(s.axes[0].key, "gpus_per_host");
  cr_assert_eq(s.axes[0].n, 3);
  cr_assert_str_eq(s.axes[0].values[2], "4");
  cr_assert_eq(s.axes[1].kind, HAP_SWEEP_MODEL);
  cr_assert_eq(s.axes[1].n, 2);
  cr_assert_eq(s.axes[2].kind, HAP_SWEEP_DEVICE);
  cr_assert_str_eq(s.axes[2].key, "device[P100]");
  cr_assert_str_eq(s.axes[2].match, "P100");
  cr_assert_str_eq(s.axes[2].values[1], "A100-80GB");
}

Test(sweep_axes, unknown_key_lists_the_valid_keys) {
  axis_fails(SMALL, "gpus=1,2",
             "--sweep: unknown key 'gpus'; valid keys: gpus_per_host, hosts, inter_gbps, "
             "inter_latency_us, intra_gbps, intra_latency_us, batch, seq, hidden, layers, "
             "segments, device[MODEL]");
  /* a model option of another model, and any option of a model given as a file */
  axis_fails(SMALL, "heads=2", "unknown key 'heads'");
  axis_fails("graphs/model.json", "batch=2",
             "valid keys: gpus_per_host, hosts, inter_gbps, inter_latency_us, intra_gbps, "
             "intra_latency_us, device[MODEL]");
  /* "device[]" has no model to match: not a device axis */
  axis_fails(SMALL, "device[]=V100-16GB", "unknown key 'device[]'");
}

Test(sweep_axes, malformed) {
  static const char *const forms[] = {"gpus_per_host", "=1,2", "gpus_per_host="};
  for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
    char want[128];
    snprintf(want, sizeof want, "--sweep '%s' is not of the form KEY=V1,V2,...", forms[i]);
    axis_fails(SMALL, forms[i], want);
  }
  char key[80];
  memset(key, 'k', 64);
  snprintf(key + 64, sizeof key - 64, "=1");
  axis_fails(SMALL, key, "is not of the form KEY=V1,V2,...");
  axis_fails(SMALL, "gpus_per_host=1,,2",
             "--sweep gpus_per_host: empty or too long value list in 'gpus_per_host=1,,2'");
  axis_fails(SMALL, "gpus_per_host=1,2,", "empty or too long value list");
  axis_fails(SMALL, "gpus_per_host=,1", "empty or too long value list");
  axis_fails(SMALL, "batch=1234567890123456789012345678901234567890123456789012345678901234567890",
             "empty or too long value list");
  char many[512] = "batch=1";
  for (int i = 1; i <= HAP_SWEEP_MAX_VALUES; i++) /* 65 values */
    snprintf(many + strlen(many), sizeof many - strlen(many), ",%d", i + 1);
  axis_fails(SMALL, many, "empty or too long value list");
}

Test(sweep_axes, twice_presets_and_limits) {
  const char *twice[] = {"batch=8", "batch=16"};
  hap_sweep_config cfg = {.model = SMALL, .cluster = "cpu-2", .axes = twice, .n_axes = 2};
  init_fails(&cfg, "--sweep: key 'batch' is given twice");
  axis_fails(SMALL, "device[cpu]=V100-16",
             "--sweep device[cpu]: unknown device preset 'V100-16' (did you mean 'V100-16GB'?)");
  axis_fails(SMALL, "device[cpu]=zzzzzzzzzzzz",
             "--sweep device[cpu]: unknown device preset 'zzzzzzzzzzzz'");
  const char *nine[] = {
      "gpus_per_host=1",    "hosts=1", "inter_gbps=1", "intra_gbps=1", "inter_latency_us=1",
      "intra_latency_us=1", "batch=1", "layers=1",     "seq=8"};
  hap_sweep_config many = {.model = SMALL, .cluster = "cpu-2", .axes = nine, .n_axes = 9};
  init_fails(&many, "at most 8 --sweep axes");
}

Test(sweep_axes, batch_per_device_and_profiles) {
  hap_sweep_config file = {.model = "graphs/model.json", .cluster = "cpu-2", .batch_per_device = 4};
  init_fails(&file, "--batch-per-device needs a zoo model, not the file 'graphs/model.json'");
  /* checked before the axes, on their text */
  const char *axes[] = {"gpus=1", "batch=8"};
  hap_sweep_config both = {
      .model = SMALL, .cluster = "cpu-2", .batch_per_device = 4, .axes = axes, .n_axes = 2};
  init_fails(&both, "--batch-per-device and --sweep batch=... exclude each other");
  const char *cl[] = {"device[P100]=V100-16GB", "inter_gbps=10"};
  hap_sweep_config prof = {
      .model = SMALL, .cluster = "m.h5", .cluster_is_profile = true, .axes = cl, .n_axes = 2};
  init_fails(&prof, "--sweep inter_gbps: cluster parameters apply to cluster specs and "
                    "hap-cluster files, not to the measured profile 'm.h5'");
  static hap_sweep s;
  prof.n_axes = 1; /* device substitutions still apply to a profile */
  hap_err err = {0};
  cr_assert_eq(hap_sweep_init(&s, &prof, &err), HAP_OK, "%s", err.msg);
}

/* ---- points ---------------------------------------------------------------------------------- */

Test(sweep_points, grid_size_and_order) {
  static hap_sweep s;
  const char *axes[] = {"gpus_per_host=1,2", "inter_gbps=10,25,100"};
  init_ok(&s, SMALL, "paper-hetero:hosts=1", 0, axes, 2);
  cr_assert_eq(hap_sweep_points(&s), 6);
  static const char *const labels[] = {
      "gpus_per_host=1 inter_gbps=10",  "gpus_per_host=1 inter_gbps=25",
      "gpus_per_host=1 inter_gbps=100", "gpus_per_host=2 inter_gbps=10",
      "gpus_per_host=2 inter_gbps=25",  "gpus_per_host=2 inter_gbps=100"};
  for (int p = 0; p < 6; p++) {
    hap_sweep_point pt;
    hap_err err = {0};
    cr_assert_eq(hap_sweep_point_init(&s, p, &pt, &err), HAP_OK, "%s", err.msg);
    cr_assert_eq(pt.index, p);
    cr_assert_eq(pt.pos[0], p / 3, "the first axis varies slowest");
    cr_assert_eq(pt.pos[1], p % 3, "the last axis varies fastest");
    cr_assert_str_eq(pt.label, labels[p]);
    cr_assert_str_eq(pt.model, SMALL, "no model axis: the model spec as given");
  }
  hap_sweep_point pt;
  cr_assert_eq(hap_sweep_point_init(&s, 4, &pt, NULL), HAP_OK);
  /* values set in axis order, the last set first; the base's own parameters kept */
  cr_assert_str_eq(pt.cluster, "paper-hetero:inter_gbps=25,gpus_per_host=2,hosts=1");
}

Test(sweep_points, no_axes_is_one_point) {
  static hap_sweep s;
  init_ok(&s, SMALL, "cpu-2", 0, NULL, 0);
  cr_assert_eq(hap_sweep_points(&s), 1);
  hap_sweep_point pt;
  cr_assert_eq(hap_sweep_point_init(&s, 0, &pt, NULL), HAP_OK);
  cr_assert_str_eq(pt.label, "");
  cr_assert_str_eq(pt.model, SMALL);
  cr_assert_str_eq(pt.cluster, "cpu-2");
}

Test(sweep_points, model_options_replace_the_given_ones) {
  static hap_sweep s;
  const char *axes[] = {"layers=1,3", "batch=8"};
  init_ok(&s, SMALL, "cpu-2", 0, axes, 2);
  hap_sweep_point pt;
  cr_assert_eq(hap_sweep_point_init(&s, 1, &pt, NULL), HAP_OK);
  cr_assert_str_eq(pt.model, "mlp:batch=8,layers=3,seq=8,hidden=32");
  cr_assert_str_eq(pt.cluster, "cpu-2");
  cr_assert_str_eq(pt.label, "layers=3 batch=8");
}

/* A base spec that does not parse is passed on as it is, for its loader to say why. */
Test(sweep_points, malformed_base_left_for_the_loader) {
  static hap_sweep s;
  const char *axes[] = {"gpus_per_host=1", "batch=8"};
  init_ok(&s, "mlp:layers", "paper-hetero:", 0, axes, 2);
  hap_sweep_point pt;
  cr_assert_eq(hap_sweep_point_init(&s, 0, &pt, NULL), HAP_OK);
  cr_assert_str_eq(pt.model, "mlp:layers");
  cr_assert_str_eq(pt.cluster, "paper-hetero:");
  hap_err err = {0};
  hap_graph *g = (hap_graph *)1;
  hap_cluster *c = (hap_cluster *)1;
  cr_assert_eq(hap_sweep_point_load(&s, &pt, hap_cluster_load, &g, &c, &err), HAP_EINVAL);
  cr_assert_str_eq(err.msg, "cluster spec 'paper-hetero:': empty parameter, expected "
                            "key=value[,key=value...] with keys gpus_per_host, hosts, inter_gbps, "
                            "inter_latency_us, intra_gbps, intra_latency_us");
  cr_assert_null(g);
  cr_assert_null(c);
  cr_assert_eq(pt.devices, 0);
}

Test(sweep_points, specs_that_do_not_fit) {
  static char model[HAP_SWEEP_SPEC_MAX + 8];
  memset(model, 0, sizeof model);
  snprintf(model, sizeof model, "mlp:layers=2");
  while (strlen(model) + 9 < HAP_SWEEP_SPEC_MAX - 1) /* ",seq=8" items up to 1016 characters */
    snprintf(model + strlen(model), sizeof model - strlen(model), ",seq=8");
  static hap_sweep s;
  const char *axes[] = {"batch=12345678"};
  init_ok(&s, model, "cpu-2", 0, axes, 1);
  hap_sweep_point pt;
  hap_err err = {0};
  cr_assert_eq(hap_sweep_point_init(&s, 0, &pt, &err), HAP_EINVAL);
  cr_assert_str_eq(err.msg, "a model or cluster spec is longer than 1024 characters");
  const char *short_axes[] = {"batch=1"};
  init_ok(&s, model, "cpu-2", 0, short_axes, 1);
  cr_assert_eq(hap_sweep_point_init(&s, 0, &pt, NULL), HAP_OK, "%zu characters fit",
               strlen(model) + 8);
}

/* ---- loading a point ------------------------------------------------------------------------- */

Test(sweep_load, batch_per_device_scales_with_the_devices) {
  static hap_sweep s;
  const char *axes[] = {"gpus_per_host=1,2"};
  init_ok(&s, "mlp:layers=2,seq=8,hidden=32", "paper-hetero", 4, axes, 1);
  static const int devices[] = {8, 16};
  for (int p = 0; p < 2; p++) {
    hap_sweep_point pt;
    hap_err err = {0};
    cr_assert_eq(hap_sweep_point_init(&s, p, &pt, &err), HAP_OK, "%s", err.msg);
    hap_graph *g = NULL;
    hap_cluster *c = NULL;
    cr_assert_eq(hap_sweep_point_load(&s, &pt, hap_cluster_load, &g, &c, &err), HAP_OK, "%s",
                 err.msg);
    cr_assert_eq(pt.devices, devices[p]);
    cr_assert_eq(c->n_devices, devices[p]);
    char want[128];
    snprintf(want, sizeof want, "gpus_per_host=%d batch=%d", p + 1, 4 * devices[p]);
    cr_assert_str_eq(pt.label, want);
    snprintf(want, sizeof want, "mlp:batch=%d,layers=2,seq=8,hidden=32", 4 * devices[p]);
    cr_assert_str_eq(pt.model, want);
    snprintf(want, sizeof want, "mlp:batch=%d,", 4 * devices[p]);
    cr_assert_eq(strncmp(g->source, want, strlen(want)), 0, "the graph is built with it: %s",
                 g->source);
    hap_graph_destroy(g);
    hap_cluster_destroy(c);
  }
}

Test(sweep_load, batch_per_device_without_axes) {
  static hap_sweep s;
  init_ok(&s, "mlp:layers=2,seq=8,hidden=32", "cpu-2", 3, NULL, 0);
  hap_sweep_point pt;
  hap_graph *g = NULL;
  hap_cluster *c = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_sweep_point_init(&s, 0, &pt, &err), HAP_OK);
  cr_assert_eq(hap_sweep_point_load(&s, &pt, hap_cluster_load, &g, &c, &err), HAP_OK, "%s",
               err.msg);
  cr_assert_str_eq(pt.label, "batch=6", "no leading space");
  hap_graph_destroy(g);
  hap_cluster_destroy(c);
}

Test(sweep_load, device_substitution) {
  static hap_sweep s;
  const char *axes[] = {"device[p100]=A100-80GB,V100-16GB"};
  init_ok(&s, SMALL, "paper-hetero:gpus_per_host=1", 0, axes, 1);
  cr_assert_eq(hap_sweep_points(&s), 2);
  hap_sweep_point pt;
  hap_err err = {0};
  cr_assert_eq(hap_sweep_point_init(&s, 0, &pt, &err), HAP_OK);
  cr_assert_str_eq(pt.cluster, "paper-hetero:gpus_per_host=1", "the spec is not edited");
  hap_graph *g = NULL;
  hap_cluster *c = NULL;
  cr_assert_eq(hap_sweep_point_load(&s, &pt, hap_cluster_load, &g, &c, &err), HAP_OK, "%s",
               err.msg);
  const hap_device_preset *a100 = hap_preset_find("A100-80GB");
  int n_a100 = 0, n_v100 = 0;
  for (int32_t i = 0; i < c->n_devices; i++) {
    n_a100 += strcmp(c->devices[i].model, "A100-80GB") == 0;
    n_v100 += strcmp(c->devices[i].model, "V100-16GB") == 0;
  }
  cr_assert_eq(n_a100, 6, "the 6 P100 (matched ignoring case) became A100-80GB");
  cr_assert_eq(n_v100, 2);
  hap_device proto;
  memset(&proto, 0, sizeof proto);
  hap_preset_to_device(a100, &proto);
  cr_assert_eq(c->devices[c->n_devices - 1].memory_bytes, proto.memory_bytes);
  hap_graph_destroy(g);
  hap_cluster_destroy(c);
}

Test(sweep_load, device_without_a_match_fails_the_point) {
  static hap_sweep s;
  const char *axes[] = {"device[H100]=A100-80GB"};
  init_ok(&s, SMALL, "cpu-2", 0, axes, 1);
  hap_sweep_point pt;
  hap_err err = {0};
  cr_assert_eq(hap_sweep_point_init(&s, 0, &pt, &err), HAP_OK);
  hap_graph *g = (hap_graph *)1;
  hap_cluster *c = (hap_cluster *)1;
  cr_assert_eq(hap_sweep_point_load(&s, &pt, hap_cluster_load, &g, &c, &err), HAP_EINVAL);
  cr_assert_str_eq(err.msg,
                   "--sweep device[H100]: no device of cpu-2 has a model containing 'H100'");
  cr_assert_eq(pt.devices, 2, "the cluster opened: its devices are known");
  cr_assert_null(g);
  cr_assert_null(c);
}

static int opened;

static hap_status refuse(const char *spec, hap_cluster **out, hap_err *err) {
  opened++;
  *out = NULL;
  return hap_err_set(err, HAP_EIO, "%s: refused", spec);
}

Test(sweep_load, the_callback_opens_the_cluster) {
  static hap_sweep s;
  const char *axes[] = {"hosts=3"};
  init_ok(&s, SMALL, "my.h5", 0, axes, 1); /* not a profile to the sweep: parameters apply */
  hap_sweep_point pt;
  hap_err err = {0};
  cr_assert_eq(hap_sweep_point_init(&s, 0, &pt, &err), HAP_OK);
  hap_graph *g = NULL;
  hap_cluster *c = NULL;
  opened = 0;
  cr_assert_eq(hap_sweep_point_load(&s, &pt, refuse, &g, &c, &err), HAP_EIO);
  cr_assert_eq(opened, 1);
  cr_assert_str_eq(err.msg, "my.h5:hosts=3: refused");
  cr_assert_eq(pt.devices, 0);
  cr_assert_null(g);
  cr_assert_null(c);
}

Test(sweep_load, a_model_that_does_not_build) {
  static hap_sweep s;
  const char *axes[] = {"layers=0,1"};
  init_ok(&s, SMALL, "cpu-2", 0, axes, 1);
  hap_sweep_point pt;
  hap_err err = {0};
  cr_assert_eq(hap_sweep_point_init(&s, 0, &pt, &err), HAP_OK);
  hap_graph *g = NULL;
  hap_cluster *c = NULL;
  cr_assert_eq(hap_sweep_point_load(&s, &pt, hap_cluster_load, &g, &c, &err), HAP_EINVAL);
  cr_assert_not_null(strstr(err.msg, "option 'layers' is '0'"), "%s", err.msg);
  cr_assert_eq(pt.devices, 2);
  cr_assert_null(c, "nothing is returned on failure");
}

Test(sweep_load, substitute_drops_measurements) {
  hap_cluster *c = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_cluster_load("paper-hetero:gpus_per_host=1", &c, &err), HAP_OK, "%s", err.msg);
  c->devices[0].n_gemm = 3; /* pretend v100-0:0 was measured (no samples are read here) */
  const hap_device_preset *h100 = hap_preset_find("H100-SXM");
  cr_assert_not_null(h100);
  cr_assert_eq(hap_sweep_substitute(c, "v100", h100), 2);
  cr_assert_str_eq(c->devices[0].model, "H100-SXM");
  cr_assert_eq(c->devices[0].n_gemm, 0);
  cr_assert_str_eq(c->devices[2].model, "P100-16GB", "the others are kept");
  cr_assert_eq(hap_sweep_substitute(c, "TPU", h100), 0);
  hap_cluster_destroy(c);
}
