/* test_util.h — what the unit tests share: fixtures (a zoo model or a bundled cluster, built or
 * the test fails with the error message) and temporary directories (made, listed, removed).
 * Header-only (static inline), for Criterion test files. */
#ifndef HAP_TEST_UTIL_H
#define HAP_TEST_UTIL_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cluster_io.h"
#include "model/graph_io.h"
#include "model/zoo.h"

/* A validated zoo model ("mlp:layers=2,..."); the caller destroys it. */
static inline hap_graph *model(const char *spec) {
  hap_graph *g = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_zoo_build(spec, &g, &err), HAP_OK, "%s", err.msg);
  return g;
}

/* The canonical hap-graph JSON of `g` (hap_graph_write) as a string; the caller frees it. */
static inline char *graph_json(const hap_graph *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  hap_err err = {0};
  cr_assert_eq(hap_graph_write(g, f, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(fclose(f), 0);
  return buf;
}

/* A bundled cluster spec ("paper-hetero:gpus_per_host=2"); the caller destroys it. */
static inline hap_cluster *bundled(const char *spec) {
  hap_cluster *c = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_cluster_load(spec, &c, &err), HAP_OK, "%s", err.msg);
  return c;
}

/* A new empty directory /tmp/hap_test_<tag>.XXXXXX; the caller removes it (rm_tree). */
static inline char *tmpdir_make(const char *tag) {
  size_t n = strlen(tag) + 32;
  char *dir = malloc(n);
  cr_assert_not_null(dir);
  snprintf(dir, n, "/tmp/hap_test_%s.XXXXXX", tag);
  cr_assert_not_null(mkdtemp(dir), "mkdtemp %s", dir);
  return dir;
}

/* "dir/name", malloc'd. */
static inline char *path_in(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  cr_assert_not_null(p);
  snprintf(p, n, "%s/%s", dir, name);
  return p;
}

/* Entries of dir other than . and .. (temporaries left behind show up here). */
static inline int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  cr_assert_not_null(d, "cannot open %s", dir);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      n++;
  closedir(d);
  return n;
}

/* Remove dir and the files in it (one level), then free the path. */
static inline void rm_tree(char *dir) {
  DIR *d = opendir(dir);
  if (d != NULL) {
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
        continue;
      char *p = path_in(dir, e->d_name);
      unlink(p);
      free(p);
    }
    closedir(d);
  }
  rmdir(dir);
  free(dir);
}

#endif
