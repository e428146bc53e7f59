/* fileio.c — whole-file reads and atomic writes (temporary file in the same directory, fsync,
 * rename), so readers never see a half-written output and a failed write keeps the old file. */
#include "base/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/vec.h"

/* Read all of `f` into a growing NUL-terminated buffer (works for pipes too). */
static hap_status slurp(FILE *f, const char *path, char **data, size_t *len, hap_err *err) {
  int64_t cap = 65536;
  size_t n = 0;
  char *buf = malloc((size_t)cap);
  if (buf == NULL)
    return hap_err_set(err, HAP_ENOMEM, "%s: out of memory reading the file", path);
  for (;;) {
    if (HAP_VEC_RESERVE64(buf, cap, (int64_t)n + 2, 65536) != 0) { /* the byte read and a NUL */
      free(buf);
      return hap_err_set(err, HAP_ENOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    size_t got = fread(buf + n, 1, (size_t)cap - n - 1, f);
    n += got;
    if (got == 0) {
      if (ferror(f)) {
        int e = errno;
        free(buf);
        return hap_err_set(err, HAP_EIO, "%s: cannot read: %s", path, strerror(e));
      }
      break;
    }
  }
  buf[n] = '\0';
  *data = buf;
  *len = n;
  return HAP_OK;
}

hap_status hap_read_file(const char *path, char **data, size_t *len, hap_err *err) {
  *data = NULL;
  *len = 0;
  if (strcmp(path, "-") == 0)
    return slurp(stdin, "-", data, len, err);
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return hap_err_set(err, HAP_EIO, "%s: cannot open: %s", path, strerror(errno));
  hap_status st = slurp(f, path, data, len, err);
  fclose(f);
  return st;
}

/* Create the temporary exclusively; a stale one left by a crashed process with our pid is
 * replaced once. New files get 0666 & ~umask; a replaced file keeps its permission bits. */
static int open_tmp(const char *tmp, const char *path) {
  mode_t mode = 0666;
  struct stat st;
  bool keep_mode = stat(path, &st) == 0 && S_ISREG(st.st_mode);
  if (keep_mode)
    mode = st.st_mode & 07777;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0 && errno == EEXIST && unlink(tmp) == 0)
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd >= 0 && keep_mode)
    (void)fchmod(fd, mode); /* open() applied the umask */
  return fd;
}

hap_status hap_atomic_open(hap_atomic_file *af, const char *path, hap_err *err) {
  memset(af, 0, sizeof *af);
  size_t n = strlen(path);
  if (n == 0)
    return hap_err_set(err, HAP_EINVAL, "output path is empty");
  if (n >= sizeof af->path)
    return hap_err_set(err, HAP_EINVAL, "%.200s...: path longer than %zu bytes", path,
                       sizeof af->path - 1);
  memcpy(af->path, path, n + 1);
  if (strcmp(path, "-") == 0) {
    af->f = stdout;
    return HAP_OK;
  }
  snprintf(af->tmp, sizeof af->tmp, "%s.tmp.%ld", path, (long)getpid());
  int fd = open_tmp(af->tmp, path);
  if (fd < 0) {
    int e = errno;
    af->tmp[0] = '\0';
    return hap_err_set(err, HAP_EIO, "%s: cannot create a temporary file next to it: %s", path,
                       strerror(e));
  }
  af->f = fdopen(fd, "wb");
  if (af->f == NULL) {
    int e = errno;
    close(fd);
    unlink(af->tmp);
    af->tmp[0] = '\0';
    return hap_err_set(err, HAP_EIO, "%s: cannot open a stream: %s", path, strerror(e));
  }
  return HAP_OK;
}

hap_status hap_atomic_probe(const char *path, hap_err *err) {
  hap_atomic_file af;
  HAP_TRY(hap_atomic_open(&af, path, err));
  hap_atomic_abort(&af);
  return HAP_OK;
}

/* fsync the directory holding `path` so the rename itself is durable (best effort). */
static void sync_dir(const char *path) {
  char dir[sizeof((hap_atomic_file *)0)->path];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == NULL)
    snprintf(dir, sizeof dir, ".");
  else if (slash == dir)
    slash[1] = '\0';
  else
    *slash = '\0';
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

static hap_status commit_stdout(hap_atomic_file *af, hap_err *err) {
  af->f = NULL;
  errno = 0;
  if (fflush(stdout) == EOF || ferror(stdout))
    return hap_err_set(err, HAP_EIO, "-: cannot write to standard output: %s",
                       errno ? strerror(errno) : "write error");
  return HAP_OK;
}

hap_status hap_atomic_commit(hap_atomic_file *af, hap_err *err) {
  if (af->f == NULL)
    return hap_err_set(err, HAP_EINVAL, "%s: file is not open for writing", af->path);
  if (af->f == stdout)
    return commit_stdout(af, err);
  const char *step = "write";
  int e = 0;
  errno = 0;
  if (fflush(af->f) == EOF || ferror(af->f)) {
    e = errno ? errno : EIO;
  } else if (fsync(fileno(af->f)) != 0) {
    e = errno;
    step = "sync";
  }
  int closed = fclose(af->f);
  af->f = NULL;
  if (e == 0 && closed != 0) {
    e = errno;
    step = "close";
  }
  if (e == 0 && rename(af->tmp, af->path) != 0) {
    e = errno;
    step = "rename the temporary file onto";
  }
  if (e != 0) {
    unlink(af->tmp);
    af->tmp[0] = '\0';
    return hap_err_set(err, HAP_EIO, "%s: cannot %s it: %s", af->path, step, strerror(e));
  }
  af->tmp[0] = '\0';
  sync_dir(af->path);
  return HAP_OK;
}

void hap_atomic_abort(hap_atomic_file *af) {
  if (af->f != NULL && af->f != stdout)
    fclose(af->f);
  af->f = NULL;
  if (af->tmp[0] != '\0')
    unlink(af->tmp);
  af->tmp[0] = '\0';
}
