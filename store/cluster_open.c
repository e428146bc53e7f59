#include "store/cluster_open.h"

#include <stdio.h>
#include <string.h>

#include "cluster/cluster_io.h"
#include "store/profile_store.h"

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

bool hap_is_hdf5_path(const char *path) {
  static const unsigned char magic[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  FILE *f = fopen(path, "rb");
  if (f != NULL) {
    unsigned char head[8];
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    if (n == sizeof head && memcmp(head, magic, sizeof magic) == 0)
      return true;
  }
  return has_suffix(path, ".h5") || has_suffix(path, ".hdf5");
}

hap_status hap_cluster_open(const char *spec_or_profile, hap_cluster **out, hap_err *err) {
  *out = NULL;
  if (!hap_is_hdf5_path(spec_or_profile))
    return hap_cluster_load(spec_or_profile, out, err);
  hap_profile *p = NULL;
  HAP_TRY(hap_profile_read(spec_or_profile, &p, err));
  hap_status st = hap_profile_to_cluster(p, out, err);
  hap_profile_destroy(p);
  return st;
}
