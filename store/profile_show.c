/* profile_show.c — a profile's measured sweeps as a table, for `hap-profile show`. */
#include "store/profile_show.h"

#include <stdio.h>

#include "base/cli.h"
#include "cluster/cluster_show.h"

void hap_profile_show_sweeps(FILE *f, const hap_profile *p) {
  fprintf(f, "\nprofile: %s, backend %s, created %s, %d hosts, %d devices\n", p->tool, p->backend,
          p->created, p->n_hosts, p->n_devices);
  if (p->n_p2p > 0) {
    fprintf(f, "\n%-28s %6s %12s  %10s %12s  %-20s %10s %10s\n", "p2p sweep", "sizes", "largest",
            "latency us", "bandwidth GB/s", "piece (sizes)", "alpha us", "beta GB/s");
    for (int32_t i = 0; i < p->n_p2p; i++) {
      const hap_profile_p2p *s = &p->p2p[i];
      char pair[160], big[32];
      snprintf(pair, sizeof pair, "%s -> %s", p->devices[s->src].name, p->devices[s->dst].name);
      fprintf(f, "%-28s %6d %12s  %10.2f %12.3f", pair, s->n_sizes,
              hap_fmt_bytes((double)s->sizes_bytes[s->n_sizes - 1], big, sizeof big),
              s->fit.latency_s * 1e6, s->fit.bandwidth_Bps / 1e9);
      for (int32_t k = 0; k < s->pieces.n_pieces; k++) {
        char range[48];
        hap_fit_piece_range(&s->pieces, k, range, sizeof range);
        if (k > 0)
          fprintf(f, "%-28s %6s %12s  %10s %12s", "", "", "", "", "");
        fprintf(f, "  %-20s %10.2f %10.3f\n", range, s->pieces.alpha_s[k] * 1e6,
                s->pieces.beta_Bps[k] / 1e9);
      }
    }
    fprintf(f, "(latency and bandwidth: the one-piece link of the cluster model; the pieces: the "
               "piecewise fit.)\n");
  }
  if (p->n_colls > 0) {
    fprintf(f, "\n%-15s %-16s %6s %6s %12s %12s %12s\n", "collective", "group", "ranks", "sizes",
            "largest", "p50 there", "busbw GB/s");
    for (int32_t i = 0; i < p->n_colls; i++) {
      const hap_profile_coll *s = &p->colls[i];
      int32_t last = s->n_sizes - 1;
      char big[32];
      fprintf(f, "%-15s %-16s %6d %6d %12s %10.1fus %12.3f\n", hap_coll_kind_name(s->kind),
              s->group, s->n_ranks, s->n_sizes,
              hap_fmt_bytes((double)s->sizes_bytes[last], big, sizeof big), s->p50_s[last] * 1e6,
              s->busbw_Bps[last] / 1e9);
    }
  }
}
