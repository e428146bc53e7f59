/* subset.c — the cluster of some of a cluster's devices (cluster.h: hap_cluster_of_devices). */
#include <stdio.h>
#include <stdlib.h>

#include "cluster/cluster.h"

/* devices[] strictly increasing and in range: one line naming the first that is not. */
static hap_status check_devices(const hap_cluster *c, const int32_t *devices, int32_t n,
                                hap_err *err) {
  if (n < 1)
    return hap_err_set(err, HAP_EINVAL, "a device subset of '%s' needs at least 1 device, got %d",
                       c->name, n);
  for (int32_t i = 0; i < n; i++) {
    if (devices[i] < 0 || devices[i] >= c->n_devices)
      return hap_err_set(err, HAP_EINVAL,
                         "devices[%d] is %d, expected 0 .. %d (the devices of '%s')", i, devices[i],
                         c->n_devices - 1, c->name);
    if (i > 0 && devices[i] <= devices[i - 1])
      return hap_err_set(err, HAP_EINVAL,
                         "devices[%d] is %d after %d, expected strictly increasing device ids", i,
                         devices[i], devices[i - 1]);
  }
  return HAP_OK;
}

/* The hosts and devices of the subset, in the cluster's order; new_id[d] the new id or -1. */
static hap_status add_devices(hap_cluster *s, const hap_cluster *c, const int32_t *devices,
                              int32_t n, const int32_t *new_id, hap_err *err) {
  int32_t id, last_host = -1;
  for (int32_t i = 0; i < n; i++) {
    const hap_device *d = &c->devices[devices[i]];
    if (d->host != last_host) {
      const hap_host *h = &c->hosts[d->host];
      HAP_TRY(hap_cluster_add_host(s, h->name, h->intra, h->nic, &id, err));
      s->hosts[id].intra_origin = h->intra_origin;
      s->hosts[id].nic_origin = h->nic_origin;
      last_host = d->host;
    }
    HAP_TRY(hap_cluster_add_device(s, d->name, d, &id, err));
    if (id != new_id[devices[i]])
      return hap_err_set(err, HAP_EINVAL, "device subset: '%s' got id %d, expected %d", d->name, id,
                         new_id[devices[i]]);
  }
  return HAP_OK;
}

/* Link overrides and collective fits among the subset's devices, renumbered. */
static hap_status copy_links_and_fits(hap_cluster *s, const hap_cluster *c, const int32_t *new_id,
                                      int32_t *ranks, hap_err *err) {
  size_t cursor = 0;
  int32_t src, dst;
  hap_link link;
  while (hap_cluster_next_link_override(c, &cursor, &src, &dst, &link))
    if (new_id[src] >= 0 && new_id[dst] >= 0)
      HAP_TRY(hap_cluster_set_link(s, new_id[src], new_id[dst], link, err));
  for (int32_t f = 0; f < c->n_fits; f++) {
    const hap_coll_fit *fit = &c->fits[f];
    bool inside = true;
    for (int32_t i = 0; i < fit->n_ranks && inside; i++) {
      inside = new_id[fit->ranks[i]] >= 0;
      if (inside)
        ranks[i] = new_id[fit->ranks[i]];
    }
    if (!inside)
      continue;
    hap_coll_fit copy = *fit;
    copy.ranks = ranks;
    HAP_TRY(hap_cluster_add_fit(s, &copy, err));
  }
  return HAP_OK;
}

hap_status hap_cluster_of_devices(const hap_cluster *c, const int32_t *devices, int32_t n,
                                  const char *name, hap_cluster **out, hap_err *err) {
  *out = NULL;
  HAP_TRY(check_devices(c, devices, n, err));
  int32_t *new_id = malloc((size_t)c->n_devices * sizeof *new_id);
  int32_t *ranks = malloc((size_t)c->n_devices * sizeof *ranks);
  hap_cluster *s = hap_cluster_create(name != NULL ? name : c->name);
  hap_status st = HAP_OK;
  if (new_id == NULL || ranks == NULL || s == NULL) {
    st = hap_err_set(err, HAP_ENOMEM, "out of memory taking %d devices of '%s'", n, c->name);
    goto done;
  }
  for (int32_t d = 0; d < c->n_devices; d++)
    new_id[d] = -1;
  for (int32_t i = 0; i < n; i++)
    new_id[devices[i]] = i;
  hap_cluster_set_inter_latency(s, c->inter_latency_s);
  st = add_devices(s, c, devices, n, new_id, err);
  if (st == HAP_OK)
    st = copy_links_and_fits(s, c, new_id, ranks, err);
  if (st == HAP_OK)
    st = hap_cluster_validate(s, err);
done:
  free(new_id);
  free(ranks);
  if (st != HAP_OK) {
    hap_cluster_destroy(s);
    return st;
  }
  *out = s;
  return HAP_OK;
}
