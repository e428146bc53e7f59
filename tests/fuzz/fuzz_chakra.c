/* fuzz_chakra.c — libFuzzer target: one rank's Chakra execution trace (chakra/et.h) from
 * arbitrary bytes, read as if named "fuzz.et"; a trace that parses is then replayed
 * (chakra/replay.h) as both ranks of a two-rank set on cpu-2, which matches its collectives and
 * messages, resolves its dependencies and runs the engine. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "chakra/replay.h"
#include "cluster/cluster_io.h"
#include "fuzz_contract.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static hap_cluster *cluster;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hap_err err = {0};
  if (size > (1 << 20) || (cluster == NULL && hap_cluster_load("cpu-2", &cluster, &err) != HAP_OK))
    return 0;
  hap_et_rank *r = NULL;
  hap_status st = hap_et_parse("fuzz.et", data, size, &r, &err);
  fuzz_check_contract(st, r, &err);
  if (st != HAP_OK)
    return 0;
  hap_et_rank *ranks[2] = {r, r};
  char *paths[2] = {"fuzz.0.et", "fuzz.1.et"};
  hap_chakra_set set = {.n_ranks = 2, .ranks = ranks, .paths = paths};
  hap_chakra_replay_result res;
  hap_err rerr = {0};
  st = hap_chakra_replay(&set, cluster, &res, &rerr);
  fuzz_check_contract(st, st == HAP_OK ? (const void *)res.ranks : NULL, &rerr);
  if (st == HAP_OK)
    free(res.ranks);
  hap_et_rank_destroy(r);
  return 0;
}
