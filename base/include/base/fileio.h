/* fileio.h — whole-file reads and atomic writes (write `path.tmp.<pid>`, then rename), so no tool
 * ever leaves a half-written output. Ownership: hap_read_file returns a malloc'd buffer the caller
 * frees; hap_atomic_file owns its FILE until commit or abort. */
#ifndef HAP_FILEIO_H
#define HAP_FILEIO_H

#include <stddef.h>
#include <stdio.h>

#include "base/status.h"

/* Read a whole file into a NUL-terminated buffer ("-" reads stdin). Errors name the path. */
hap_status hap_read_file(const char *path, char **data, size_t *len, hap_err *err);

typedef struct hap_atomic_file {
  FILE *f;         /* write here */
  char path[4096]; /* final path */
  char tmp[4200];  /* temporary path */
} hap_atomic_file;

/* Open a temporary file next to `path`. "-" means stdout (commit/abort then do nothing). */
hap_status hap_atomic_open(hap_atomic_file *af, const char *path, hap_err *err);
/* Flush, fsync, close and rename into place; on failure the temporary is removed. */
hap_status hap_atomic_commit(hap_atomic_file *af, hap_err *err);
/* Close and remove the temporary. Safe to call after a failed commit. */
void hap_atomic_abort(hap_atomic_file *af);
/* Whether `path` can be written as hap_atomic_open will write it (its temporary created and
 * removed at once): for a long job to refuse an unwritable output before it starts rather than
 * after. The error is hap_atomic_open's. */
hap_status hap_atomic_probe(const char *path, hap_err *err);

#endif
