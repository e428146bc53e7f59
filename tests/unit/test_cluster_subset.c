/* The cluster of some of a cluster's devices (cluster.h: hap_cluster_of_devices): hosts, device
 * specs, link overrides and collective fits carried over and renumbered; bad lists refused. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "cluster/cluster.h"
#include "cluster/cluster_io.h"
#include "plan/replica.h"
#include "test_util.h"

/* tests/data/clusters/good/explicit.json: 0 fast, 1 custom, 2 mixed:2 (host mixed); 3, 4
 * cpus-0:0..1; 5, 6 cpus-1:0..1. Overrides fast <-> cpus-0:1 and cpus-1:0 -> custom; fits
 * all_reduce over {cpus-1:1, fast, custom} and all_to_all over {cpus-0:0, cpus-0:1}. */
static hap_cluster *explicit_cluster(void) {
  hap_cluster *c = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_cluster_read_file(HAP_TEST_DATA "/clusters/good/explicit.json", NULL, &c, &err),
               HAP_OK, "%s", err.msg);
  return c;
}

Test(cluster_subset, devices_hosts_links_and_fits_are_carried_over) {
  hap_cluster *c = explicit_cluster();
  const int32_t pick[5] = {0, 1, 4, 5, 6};
  hap_cluster *s = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_cluster_of_devices(c, pick, 5, "stage", &s, &err), HAP_OK, "%s", err.msg);
  cr_expect_str_eq(s->name, "stage");
  cr_assert_eq(s->n_devices, 5);
  cr_expect_eq(s->n_hosts, 3); /* mixed, cpus-0, cpus-1 */
  for (int32_t i = 0; i < 5; i++) {
    const hap_device *a = &c->devices[pick[i]], *b = &s->devices[i];
    cr_expect_str_eq(a->name, b->name);
    cr_expect_str_eq(c->hosts[a->host].name, s->hosts[b->host].name);
    cr_expect_eq(a->sustained_flops[HAP_F32], b->sustained_flops[HAP_F32]);
    cr_expect_eq(a->memory_bytes, b->memory_bytes);
  }
  cr_expect_eq(s->inter_latency_s, c->inter_latency_s);
  /* every path among the picked devices costs what it did */
  for (int32_t i = 0; i < 5; i++)
    for (int32_t j = 0; j < 5; j++) {
      if (i == j)
        continue;
      hap_link want = hap_cluster_link(c, pick[i], pick[j]), got = hap_cluster_link(s, i, j);
      cr_expect_eq(got.bandwidth_Bps, want.bandwidth_Bps, "%d -> %d", i, j);
      cr_expect_eq(got.latency_s, want.latency_s, "%d -> %d", i, j);
    }
  cr_expect_eq(hap_cluster_link(s, 0, 2).bandwidth_Bps, 3e9); /* the override fast <-> cpus-0:1 */
  const int32_t ar[3] = {4, 0, 1}, a2a[2] = {0, 1};
  cr_expect_not_null(hap_cluster_find_fit(s, HAP_COLL_ALL_REDUCE, ar, 3));
  cr_expect_null(hap_cluster_find_fit(s, HAP_COLL_ALL_TO_ALL, a2a, 2)); /* cpus-0:0 left out */
  hap_cluster_destroy(s);
  hap_cluster_destroy(c);
}

Test(cluster_subset, one_host_equals_cluster_of_host) {
  hap_cluster *c = bundled("paper-hetero:gpus_per_host=4");
  const hap_host *h = &c->hosts[2];
  int32_t pick[4];
  for (int32_t i = 0; i < 4; i++)
    pick[i] = h->first_device + i;
  hap_cluster *a = NULL, *b = NULL;
  hap_err err = {0};
  char name[256];
  snprintf(name, sizeof name, "%s[%s]", c->name, h->name); /* hap_cluster_of_host's name */
  cr_assert_eq(hap_cluster_of_devices(c, pick, 4, name, &a, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_cluster_of_host(c, 2, &b, &err), HAP_OK, "%s", err.msg);
  uint64_t da = 0, db = 1;
  cr_assert_eq(hap_cluster_digest(a, &da, &err), HAP_OK);
  cr_assert_eq(hap_cluster_digest(b, &db, &err), HAP_OK);
  cr_expect_eq(da, db);
  hap_cluster_destroy(a);
  hap_cluster_destroy(b);
  hap_cluster_destroy(c);
}

static void expect_refused(const hap_cluster *c, const int32_t *pick, int32_t n, const char *want) {
  hap_cluster *s = (hap_cluster *)1;
  hap_err err = {0};
  cr_expect_eq(hap_cluster_of_devices(c, pick, n, NULL, &s, &err), HAP_EINVAL);
  cr_expect_null(s);
  cr_expect_not_null(strstr(err.msg, want), "expected '%s' in: %s", want, err.msg);
  cr_expect_null(strchr(err.msg, '\n'));
}

Test(cluster_subset, bad_lists_are_refused_with_one_line) {
  hap_cluster *c = explicit_cluster();
  const int32_t unordered[2] = {4, 1}, twice[2] = {1, 1}, outside[2] = {1, 7}, negative[1] = {-1};
  expect_refused(c, unordered, 0, "needs at least 1 device, got 0");
  expect_refused(c, unordered, 2, "devices[1] is 1 after 4, expected strictly increasing");
  expect_refused(c, twice, 2, "devices[1] is 1 after 1");
  expect_refused(c, outside, 2, "devices[1] is 7, expected 0 .. 6");
  expect_refused(c, negative, 1, "devices[0] is -1");
  hap_cluster_destroy(c);
}
