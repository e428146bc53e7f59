/* chakra_report.c — hap-sim --chakra and --chakra-in (chakra_report.h). */
#include "chakra_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/json_write.h"
#include "chakra/export.h"
#include "chakra/replay.h"
#include "store/cluster_open.h"

hap_status hap_chakra_report_export(const char *prog, const hap_plan_sim *ps, const char *dir,
                                    const char *prefix, const char *label, bool quiet,
                                    hap_err *err) {
  char full[512];
  int len = label ? snprintf(full, sizeof full, "%s.%s", prefix, label)
                  : snprintf(full, sizeof full, "%s", prefix);
  if (len < 0 || (size_t)len >= sizeof full)
    return hap_err_set(err, HAP_EINVAL, "--chakra-prefix '%s': too long", prefix);
  for (char *p = full + strlen(prefix); *p; p++) /* the label as a file name */
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '=' || *p == '-' || *p == '.'))
      *p = '_';
  int64_t nodes = 0;
  HAP_TRY(hap_chakra_export(ps, dir, full, &nodes, err));
  if (!quiet)
    fprintf(stderr, "%s: wrote %d Chakra traces (%lld nodes): %s/%s.<rank>.et\n", prog,
            ps->n_devices, (long long)nodes, dir, full);
  return HAP_OK;
}

/* "12.345 ms" */
static const char *ms(double s, char *buf, size_t len) {
  snprintf(buf, len, "%.3f ms", s * 1e3);
  return buf;
}

static void print_table(const char *dir, const char *prefix, const char *cluster,
                        const hap_chakra_set *s, const hap_cluster *c,
                        const hap_chakra_replay_result *r) {
  char a[32], b[32], d[32], e[32];
  printf("chakra traces %s/%s.<rank>.et: %d ranks, %lld nodes (%lld collectives, %lld messages)\n",
         dir, prefix, r->n_ranks, (long long)r->nodes, (long long)r->collectives,
         (long long)r->messages);
  printf("cluster %s\n", cluster);
  printf("iteration %s", ms(r->iteration_s, a, sizeof a));
  double rec = s->ranks[0]->iteration_s;
  if (rec >= 0)
    printf(" (recorded %s, %+.4f %%)", ms(rec, b, sizeof b),
           rec > 0 ? (r->iteration_s - rec) / rec * 100 : 0.0);
  printf("\n\n%-5s %-24s %12s %12s %12s %12s\n", "rank", "device", "compute", "comm", "exposed",
         "idle");
  for (int32_t i = 0; i < r->n_ranks; i++) {
    const hap_chakra_replay_rank *k = &r->ranks[i];
    printf("%-5d %-24s %12s %12s %12s %12s\n", i, c->devices[i].name, ms(k->compute_s, a, sizeof a),
           ms(k->comm_s, b, sizeof b), ms(k->exposed_comm_s, d, sizeof d),
           ms(k->idle_s, e, sizeof e));
  }
}

static void print_json(const char *dir, const char *prefix, const char *cluster,
                       const hap_chakra_set *s, const hap_cluster *c,
                       const hap_chakra_replay_result *r) {
  hap_jw w;
  hap_jw_init(&w, stdout, 2);
  hap_jw_begin_object(&w);
  hap_jw_key(&w, "traces");
  hap_jw_str(&w, dir);
  hap_jw_key(&w, "prefix");
  hap_jw_str(&w, prefix);
  hap_jw_key(&w, "cluster");
  hap_jw_str(&w, cluster);
  hap_jw_key(&w, "ranks");
  hap_jw_int(&w, r->n_ranks);
  hap_jw_key(&w, "nodes");
  hap_jw_int(&w, r->nodes);
  hap_jw_key(&w, "collectives");
  hap_jw_int(&w, r->collectives);
  hap_jw_key(&w, "messages");
  hap_jw_int(&w, r->messages);
  hap_jw_key(&w, "iteration_s");
  hap_jw_double(&w, r->iteration_s);
  hap_jw_key(&w, "recorded_iteration_s");
  if (s->ranks[0]->iteration_s >= 0)
    hap_jw_double(&w, s->ranks[0]->iteration_s);
  else
    hap_jw_null(&w);
  hap_jw_key(&w, "per_rank");
  hap_jw_begin_array(&w);
  for (int32_t i = 0; i < r->n_ranks; i++) {
    const hap_chakra_replay_rank *k = &r->ranks[i];
    hap_jw_begin_object_inline(&w);
    hap_jw_key(&w, "rank");
    hap_jw_int(&w, i);
    hap_jw_key(&w, "device");
    hap_jw_str(&w, c->devices[i].name);
    hap_jw_key(&w, "compute_s");
    hap_jw_double(&w, k->compute_s);
    hap_jw_key(&w, "comm_s");
    hap_jw_double(&w, k->comm_s);
    hap_jw_key(&w, "exposed_comm_s");
    hap_jw_double(&w, k->exposed_comm_s);
    hap_jw_key(&w, "idle_s");
    hap_jw_double(&w, k->idle_s);
    hap_jw_end_object(&w);
  }
  hap_jw_end_array(&w);
  hap_jw_end_object(&w);
  hap_jw_finish(&w);
}

int hap_chakra_report_replay(const char *prog, const char *dir, const char *prefix,
                             const char *cluster, hap_format format) {
  hap_err err = {0};
  hap_chakra_set *s = NULL;
  hap_cluster *c = NULL;
  hap_chakra_replay_result r = {0};
  hap_status st = hap_chakra_load(dir, prefix, &s, &err);
  if (st == HAP_OK && cluster == NULL) {
    cluster = s->ranks[0]->cluster;
    if (cluster == NULL || cluster[0] == '\0')
      st = hap_err_set(&err, HAP_EINVAL,
                       "%s: the traces do not name the cluster they were recorded on: give "
                       "--cluster",
                       s->paths[0]);
  }
  if (st == HAP_OK)
    st = hap_cluster_open(cluster, &c, &err);
  if (st == HAP_OK && (st = hap_chakra_replay(s, c, &r, &err)) != HAP_OK &&
      strncmp(err.msg, dir, strlen(dir)) != 0) /* name the traces when the error does not */
    hap_err_prefix(&err, "%s/%s.<rank>.et on %s", dir, prefix, cluster);
  if (st == HAP_OK) {
    if (format == HAP_FORMAT_JSON)
      print_json(dir, prefix, cluster, s, c, &r);
    else
      print_table(dir, prefix, cluster, s, c, &r);
  } else {
    hap_cli_error(prog, &err);
  }
  free(r.ranks);
  hap_cluster_destroy(c);
  hap_chakra_set_destroy(s);
  return st == HAP_OK ? 0 : 1;
}
