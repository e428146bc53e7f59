/* profile_read.c — the hap-profile HDF5 reader (layout: profile_store.c). Every group, dataset
 * and attribute is checked for presence, class, rank and shape before it is read; a failure is one
 * line "<file>: <path>: <what is wrong, what was expected>". HDF5's own error printing is off
 * while reading, so nothing reaches stderr. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fileio.h"
#include "base/vec.h"
#include "profile_h5.h"
#include "store/profile_store.h"

typedef char objbuf[320]; /* a path in the file, like /collectives/all_reduce/world/samples_s */

typedef struct reader {
  const char *file; /* for messages */
  hap_err *err;
  hap_profile *p;
} reader;

/* ---- messages ------------------------------------------------------------------------------- */

static hap_status r_err(const reader *r, hap_status st, const char *obj, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static hap_status r_err(const reader *r, hap_status st, const char *obj, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return hap_err_set(r->err, st, "%s: %s: %s", r->file, obj, msg);
}

/* A failed HDF5 call: "<what> (HDF5: <innermost message>)". Call before closing handles. */
static hap_status r_h5(const reader *r, const char *obj, const char *what) {
  char detail[200];
  hap_h5_detail(detail, sizeof detail);
  if (detail[0] == '\0')
    return r_err(r, HAP_EPARSE, obj, "%s", what);
  return r_err(r, HAP_EPARSE, obj, "%s (HDF5: %s)", what, detail);
}

static hap_status r_oom(const reader *r, const char *obj) {
  return r_err(r, HAP_ENOMEM, obj, "out of memory");
}

static void join(objbuf out, const char *obj, const char *name) {
  if (strcmp(obj, "/") == 0)
    snprintf(out, sizeof(objbuf), "/%.250s", name);
  else
    snprintf(out, sizeof(objbuf), "%s/%.250s", obj, name);
}

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d != NULL)
    memcpy(d, s, n);
  return d;
}

static void free_strs(char **v, int32_t n) {
  if (v == NULL)
    return;
  for (int32_t i = 0; i < n; i++)
    free(v[i]);
  free(v);
}

static hap_status to_i32(const reader *r, const char *obj, const char *name, int64_t v, int32_t lo,
                         int32_t *out) {
  if (v < lo || v > INT32_MAX)
    return r_err(r, HAP_EPARSE, obj, "%s is %lld, expected %d..%d", name, (long long)v, lo,
                 INT32_MAX);
  *out = (int32_t)v;
  return HAP_OK;
}

/* ---- groups --------------------------------------------------------------------------------- */

/* Open child group `name` of loc (whose path is obj); `path` gets the child's path. */
static hap_status open_group(const reader *r, hid_t loc, const char *obj, const char *name,
                             objbuf path, hid_t *g) {
  join(path, obj, name);
  *g = -1;
  htri_t exists = H5Lexists(loc, name, H5P_DEFAULT);
  if (exists < 0)
    return r_h5(r, path, "cannot look up the group");
  if (exists == 0)
    return r_err(r, HAP_EPARSE, path, "missing group");
  *g = H5Gopen2(loc, name, H5P_DEFAULT);
  if (*g < 0)
    return r_h5(r, path, "cannot open it as a group");
  return HAP_OK;
}

/* Names of the links in group g, in creation order when the group tracks it, else by name. */
static hap_status child_names(const reader *r, hid_t g, const char *obj, char ***names,
                              int32_t *n) {
  *names = NULL;
  *n = 0;
  H5G_info_t info;
  if (H5Gget_info(g, &info) < 0)
    return r_h5(r, obj, "cannot list the group");
  if (info.nlinks > INT32_MAX)
    return r_err(r, HAP_EPARSE, obj, "%llu members, expected fewer",
                 (unsigned long long)info.nlinks);
  H5_index_t index = H5_INDEX_CRT_ORDER;
  if (info.nlinks > 0 &&
      H5Lget_name_by_idx(g, ".", index, H5_ITER_INC, 0, NULL, 0, H5P_DEFAULT) < 0)
    index = H5_INDEX_NAME;
  char **v = calloc((size_t)info.nlinks + 1, sizeof *v);
  if (v == NULL)
    return r_oom(r, obj);
  hap_status st = HAP_OK;
  int32_t count = 0;
  for (hsize_t i = 0; i < info.nlinks && st == HAP_OK; i++) {
    ssize_t len = H5Lget_name_by_idx(g, ".", index, H5_ITER_INC, i, NULL, 0, H5P_DEFAULT);
    if (len < 0) {
      st = r_h5(r, obj, "cannot list the group");
      break;
    }
    v[count] = malloc((size_t)len + 1);
    if (v[count] == NULL) {
      st = r_oom(r, obj);
      break;
    }
    count++;
    if (H5Lget_name_by_idx(g, ".", index, H5_ITER_INC, i, v[count - 1], (size_t)len + 1,
                           H5P_DEFAULT) < 0)
      st = r_h5(r, obj, "cannot list the group");
  }
  if (st != HAP_OK) {
    free_strs(v, count);
    return st;
  }
  *names = v;
  *n = count;
  return HAP_OK;
}

/* ---- attributes ----------------------------------------------------------------------------- */

static void close_attr(hid_t attr, hid_t type, hid_t space) {
  if (space >= 0)
    H5Sclose(space);
  if (type >= 0)
    H5Tclose(type);
  if (attr >= 0)
    H5Aclose(attr);
}

/* Open attribute `name` of loc with its type and dataspace; an absent attribute is an error
 * unless `optional` (then *attr stays -1). */
static hap_status open_attr(const reader *r, hid_t loc, const char *obj, const char *name,
                            bool optional, hid_t *attr, hid_t *type, hid_t *space) {
  *attr = *type = *space = -1;
  htri_t exists = H5Aexists(loc, name);
  if (exists < 0)
    return r_h5(r, obj, "cannot look up an attribute");
  if (exists == 0)
    return optional ? HAP_OK : r_err(r, HAP_EPARSE, obj, "missing attribute %s", name);
  *attr = H5Aopen(loc, name, H5P_DEFAULT);
  if (*attr >= 0)
    *type = H5Aget_type(*attr);
  if (*type >= 0)
    *space = H5Aget_space(*attr);
  if (*space >= 0)
    return HAP_OK;
  hap_status st = r_h5(r, obj, "cannot open an attribute");
  close_attr(*attr, *type, *space);
  *attr = *type = *space = -1;
  return st;
}

/* Number of values in a scalar (rank 0) or 1-D dataspace; -1 for anything else. */
static int64_t values_in(hid_t space) {
  int rank = H5Sget_simple_extent_ndims(space);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  if (rank < 0 || rank > 1 || n < 0)
    return -1;
  return (int64_t)n;
}

/* Copy n strings read as vlen (raw[i] owned by HDF5) or fixed-length (stride bytes each). */
static hap_status copy_strs(const reader *r, const char *obj, char **raw, const char *fixed,
                            size_t stride, int64_t n, char **v) {
  for (int64_t i = 0; i < n; i++) {
    const char *s = raw ? (raw[i] ? raw[i] : "") : fixed + (size_t)i * stride;
    v[i] = dup_str(s);
    if (v[i] == NULL)
      return r_oom(r, obj);
  }
  return HAP_OK;
}

/* Read a string attribute (variable- or fixed-length, scalar or 1-D) as n owned strings. With
 * `scalar`, exactly one value is expected. */
static hap_status get_strs(const reader *r, hid_t loc, const char *obj, const char *name,
                           bool scalar, char ***out, int32_t *n_out) {
  *out = NULL;
  *n_out = 0;
  hid_t attr, type, space, mtype = -1;
  hap_status st = open_attr(r, loc, obj, name, false, &attr, &type, &space);
  char **raw = NULL, **v = NULL, *fixed = NULL;
  int64_t n = st == HAP_OK ? values_in(space) : -1;
  htri_t var = st == HAP_OK ? H5Tis_variable_str(type) : -1;
  size_t size = st == HAP_OK ? H5Tget_size(type) : 0;
  if (st != HAP_OK)
    goto out;
  st = HAP_EPARSE;
  if (H5Tget_class(type) != H5T_STRING || var < 0 || n < 0 || (scalar && n != 1) || n > INT32_MAX) {
    r_err(r, st, obj, "attribute %s: expected %s", name,
          scalar ? "a string" : "a 1-D array of strings");
    goto out;
  }
  mtype = H5Tcopy(H5T_C_S1);
  if (mtype < 0 || H5Tset_cset(mtype, H5Tget_cset(type)) < 0 ||
      H5Tset_size(mtype, var > 0 ? H5T_VARIABLE : size + 1) < 0 ||
      (var == 0 && H5Tset_strpad(mtype, H5T_STR_NULLTERM) < 0)) {
    r_h5(r, obj, "cannot read a string attribute");
    goto out;
  }
  v = calloc((size_t)n + 1, sizeof *v);
  if (var > 0)
    raw = calloc((size_t)n + 1, sizeof *raw);
  else
    fixed = calloc((size_t)n + 1, size + 1);
  if (v == NULL || (raw == NULL && fixed == NULL)) {
    st = r_oom(r, obj);
    goto out;
  }
  if (n > 0 && H5Aread(attr, mtype, raw ? (void *)raw : (void *)fixed) < 0) {
    r_h5(r, obj, "cannot read a string attribute");
    goto out;
  }
  st = copy_strs(r, obj, raw, fixed, size + 1, n, v);
out:
  if (raw != NULL)
    for (int64_t i = 0; i < n; i++)
      H5free_memory(raw[i]);
  free(raw);
  free(fixed);
  if (mtype >= 0)
    H5Tclose(mtype);
  close_attr(attr, type, space);
  if (st != HAP_OK) {
    free_strs(v, n > 0 ? (int32_t)n : 0);
    return st;
  }
  *out = v;
  *n_out = (int32_t)n;
  return HAP_OK;
}

static hap_status get_str(const reader *r, hid_t loc, const char *obj, const char *name,
                          char **out) {
  char **v;
  int32_t n;
  *out = NULL;
  HAP_TRY(get_strs(r, loc, obj, name, true, &v, &n));
  *out = v[0];
  free(v);
  return HAP_OK;
}

/* Read a numeric attribute of `n` values (n < 0: exactly one, scalar or 1-D) of class `cls`
 * (float also accepts integers) into out[] as mtype. */
static hap_status get_nums(const reader *r, hid_t loc, const char *obj, const char *name,
                           bool optional, H5T_class_t cls, hid_t mtype, void *out, int64_t n) {
  hid_t attr, type, space;
  HAP_TRY(open_attr(r, loc, obj, name, optional, &attr, &type, &space));
  if (attr < 0)
    return HAP_OK;
  hap_status st = HAP_OK;
  H5T_class_t have = H5Tget_class(type);
  int64_t count = values_in(space);
  bool class_ok = have == cls || (cls == H5T_FLOAT && have == H5T_INTEGER);
  if (!class_ok || count != (n < 0 ? 1 : n))
    st = r_err(r, HAP_EPARSE, obj, "attribute %s: expected %s %s", name,
               n < 0 ? "a scalar" : "a 1-D array of", cls == H5T_FLOAT ? "float64" : "int64");
  else if (count > 0 && H5Aread(attr, mtype, out) < 0)
    st = r_h5(r, obj, "cannot read a numeric attribute");
  close_attr(attr, type, space);
  return st;
}

static hap_status get_i64(const reader *r, hid_t loc, const char *obj, const char *name,
                          int64_t *v) {
  return get_nums(r, loc, obj, name, false, H5T_INTEGER, H5T_NATIVE_INT64, v, -1);
}

static hap_status get_f64(const reader *r, hid_t loc, const char *obj, const char *name,
                          double *v) {
  return get_nums(r, loc, obj, name, false, H5T_FLOAT, H5T_NATIVE_DOUBLE, v, -1);
}

static hap_status get_i32(const reader *r, hid_t loc, const char *obj, const char *name, int32_t lo,
                          int32_t *v) {
  int64_t x = 0;
  HAP_TRY(get_i64(r, loc, obj, name, &x));
  return to_i32(r, obj, name, x, lo, v);
}

/* Length of a 1-D integer attribute (for ranks). */
static hap_status attr_length(const reader *r, hid_t loc, const char *obj, const char *name,
                              int64_t *n) {
  hid_t attr, type, space;
  HAP_TRY(open_attr(r, loc, obj, name, false, &attr, &type, &space));
  *n = values_in(space);
  hap_status st = HAP_OK;
  if (H5Tget_class(type) != H5T_INTEGER || *n < 1 || *n > INT32_MAX)
    st = r_err(r, HAP_EPARSE, obj, "attribute %s: expected a 1-D array of int64 (device indices)",
               name);
  close_attr(attr, type, space);
  return st;
}

/* ---- datasets ------------------------------------------------------------------------------- */

/* What a dataset must look like: class, rank, dims (0 = any) and a description for messages. */
typedef struct data_spec {
  H5T_class_t cls;
  int rank;
  hsize_t dims[2];
  const char *shape; /* "[sizes]", "[sizes × reps]" */
} data_spec;

static const char *class_name(H5T_class_t c) {
  switch (c) {
  case H5T_INTEGER: return "integer";
  case H5T_FLOAT: return "float";
  case H5T_STRING: return "string";
  case H5T_COMPOUND: return "compound";
  default: return "other";
  }
}

/* "a 2-D float64 dataset [sizes × reps] = [12 × 5]" */
static void describe(const data_spec *s, char *buf, size_t len) {
  int n = snprintf(buf, len, "a %d-D %s dataset %s", s->rank,
                   s->cls == H5T_INTEGER ? "int64" : "float64", s->shape);
  bool known = s->dims[0] > 0 && (s->rank < 2 || s->dims[1] > 0);
  if (n > 0 && (size_t)n < len && known) {
    if (s->rank == 2)
      snprintf(buf + n, len - (size_t)n, " = [%llu × %llu]", (unsigned long long)s->dims[0],
               (unsigned long long)s->dims[1]);
    else
      snprintf(buf + n, len - (size_t)n, " = [%llu]", (unsigned long long)s->dims[0]);
  }
}

/* Check dataset `name` of loc against spec; dims gets its dims. With buf, also read it as mtype. */
static hap_status read_data(const reader *r, hid_t loc, const char *obj, const char *name,
                            const data_spec *spec, hid_t mtype, void *buf, hsize_t dims[2]) {
  objbuf path;
  char want[160];
  join(path, obj, name);
  describe(spec, want, sizeof want);
  htri_t exists = H5Lexists(loc, name, H5P_DEFAULT);
  if (exists <= 0)
    return exists < 0 ? r_h5(r, path, "cannot look up the dataset")
                      : r_err(r, HAP_EPARSE, path, "missing dataset, expected %s", want);
  hap_status st = HAP_EPARSE;
  hid_t dset = H5Dopen2(loc, name, H5P_DEFAULT), type = -1, space = -1;
  if (dset >= 0)
    type = H5Dget_type(dset);
  if (type >= 0)
    space = H5Dget_space(dset);
  if (space < 0) {
    r_h5(r, path, "cannot open it as a dataset");
    goto out;
  }
  H5T_class_t cls = H5Tget_class(type);
  int rank = H5Sget_simple_extent_ndims(space);
  hsize_t have[2] = {0, 0};
  if (rank != spec->rank || cls != spec->cls || H5Sget_simple_extent_dims(space, have, NULL) < 0) {
    r_err(r, st, path, "expected %s, found a %d-D %s dataset", want, rank, class_name(cls));
    goto out;
  }
  for (int i = 0; i < rank; i++) {
    bool ok =
        have[i] >= 1 && have[i] <= INT32_MAX && (spec->dims[i] == 0 || have[i] == spec->dims[i]);
    if (!ok && rank == 2)
      r_err(r, st, path, "expected %s, found [%llu × %llu]", want, (unsigned long long)have[0],
            (unsigned long long)have[1]);
    else if (!ok)
      r_err(r, st, path, "expected %s, found [%llu]", want, (unsigned long long)have[0]);
    if (!ok)
      goto out;
  }
  if (rank == 2 && have[0] * have[1] > INT32_MAX) {
    r_err(r, st, path, "expected %s of at most %d values", want, INT32_MAX);
    goto out;
  }
  dims[0] = have[0];
  dims[1] = have[1];
  if (buf != NULL && H5Dread(dset, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
    r_h5(r, path, "cannot read the dataset");
    goto out;
  }
  st = HAP_OK;
out:
  if (space >= 0)
    H5Sclose(space);
  if (type >= 0)
    H5Tclose(type);
  if (dset >= 0)
    H5Dclose(dset);
  return st;
}

static hap_status read_f64s(const reader *r, hid_t loc, const char *obj, const char *name,
                            int32_t n, int32_t cols, double *buf) {
  hsize_t dims[2];
  data_spec spec = {H5T_FLOAT, cols > 0 ? 2 : 1, {(hsize_t)n, (hsize_t)cols}, "[sizes]"};
  if (cols > 0)
    spec.shape = "[sizes × reps]";
  return read_data(r, loc, obj, name, &spec, H5T_NATIVE_DOUBLE, buf, dims);
}

/* A compound table: the fields it must have (by name and class) and how to describe it. */
typedef struct table_spec {
  const char *const *fields;
  const H5T_class_t *classes;
  int n_fields;
  const char *expect; /* "a 1-D compound dataset {...}" */
} table_spec;

static bool table_type_ok(hid_t ftype, const table_spec *t) {
  if (H5Tget_class(ftype) != H5T_COMPOUND)
    return false;
  for (int f = 0; f < t->n_fields; f++) {
    int idx = H5Tget_member_index(ftype, t->fields[f]);
    if (idx < 0 || H5Tget_member_class(ftype, (unsigned)idx) != t->classes[f])
      return false;
    if (t->classes[f] == H5T_STRING) {
      hid_t mt = H5Tget_member_type(ftype, (unsigned)idx);
      htri_t var = mt >= 0 ? H5Tis_variable_str(mt) : -1;
      if (mt >= 0)
        H5Tclose(mt);
      if (var != 0) /* inside compounds strings are fixed-length */
        return false;
    }
  }
  return true;
}

/* Read table `name` of loc into *rows (row_size bytes each, malloc'd) as mtype; *n rows. */
static hap_status read_table(const reader *r, hid_t loc, const char *obj, const char *name,
                             const table_spec *t, hid_t mtype, size_t row_size, void **rows,
                             int32_t *n) {
  objbuf path;
  join(path, obj, name);
  *rows = NULL;
  *n = 0;
  htri_t exists = H5Lexists(loc, name, H5P_DEFAULT);
  if (exists <= 0)
    return exists < 0 ? r_h5(r, path, "cannot look up the dataset")
                      : r_err(r, HAP_EPARSE, path, "missing dataset, expected %s", t->expect);
  hap_status st = HAP_EPARSE;
  hid_t dset = H5Dopen2(loc, name, H5P_DEFAULT), type = -1, space = -1;
  void *buf = NULL;
  if (dset >= 0)
    type = H5Dget_type(dset);
  if (type >= 0)
    space = H5Dget_space(dset);
  if (space < 0) {
    r_h5(r, path, "cannot open it as a dataset");
    goto out;
  }
  int64_t count = values_in(space);
  if (!table_type_ok(type, t) || H5Sget_simple_extent_ndims(space) != 1 || count < 0 ||
      count > INT32_MAX || mtype < 0) {
    r_err(r, st, path, "expected %s", t->expect);
    goto out;
  }
  buf = calloc((size_t)count + 1, row_size);
  if (buf == NULL) {
    st = r_oom(r, path);
    goto out;
  }
  if (count > 0 && H5Dread(dset, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
    r_h5(r, path, "cannot read the dataset");
    goto out;
  }
  *rows = buf;
  buf = NULL;
  *n = (int32_t)count;
  st = HAP_OK;
out:
  free(buf);
  if (space >= 0)
    H5Sclose(space);
  if (type >= 0)
    H5Tclose(type);
  if (dset >= 0)
    H5Dclose(dset);
  return st;
}

/* ---- root and environment ------------------------------------------------------------------- */

/* "MAJOR.MINOR" with decimal numbers; false otherwise. */
static bool parse_version(const char *s, int32_t *major, int32_t *minor) {
  char *end;
  if (s[0] < '0' || s[0] > '9')
    return false;
  errno = 0;
  long ma = strtol(s, &end, 10);
  if (*end != '.' || end[1] < '0' || end[1] > '9' || errno != 0 || ma > INT32_MAX)
    return false;
  long mi = strtol(end + 1, &end, 10);
  if (*end != '\0' || errno != 0 || mi > INT32_MAX)
    return false;
  *major = (int32_t)ma;
  *minor = (int32_t)mi;
  return true;
}

static hap_status read_format(const reader *r, hid_t file) {
  hap_profile *p = r->p;
  char *format = NULL, *version = NULL;
  hap_status st = get_str(r, file, "/", "format", &format);
  if (st == HAP_OK && strcmp(format, HAP_PROFILE_FORMAT) != 0)
    st = r_err(r, HAP_EPARSE, "/", "format is \"%.100s\", expected \"%s\"", format,
               HAP_PROFILE_FORMAT);
  if (st == HAP_OK)
    st = get_str(r, file, "/", "version", &version);
  if (st == HAP_OK && !parse_version(version, &p->version_major, &p->version_minor))
    st = r_err(r, HAP_EPARSE, "/", "version is \"%.100s\", expected \"MAJOR.MINOR\" like \"%d.%d\"",
               version, HAP_PROFILE_VERSION_MAJOR, HAP_PROFILE_VERSION_MINOR);
  if (st == HAP_OK && (p->version_major < 1 || p->version_major > HAP_PROFILE_VERSION_MAJOR))
    st = r_err(r, HAP_EVERSION, "/", "version is \"%s\", this hap reads hap-profile 1.x to %d.x%s",
               version, HAP_PROFILE_VERSION_MAJOR,
               p->version_major > HAP_PROFILE_VERSION_MAJOR ? " (newer file: upgrade hap)" : "");
  free(format);
  free(version);
  return st;
}

static hap_status read_root(const reader *r, hid_t file) {
  hap_profile *p = r->p;
  HAP_TRY(read_format(r, file));
  char *v = NULL;
  const char *names[] = {"created", "tool", "backend"};
  char **fields[] = {&p->created, &p->tool, &p->backend};
  for (int i = 0; i < 3; i++) {
    HAP_TRY(get_str(r, file, "/", names[i], &v));
    free(*fields[i]);
    *fields[i] = v;
  }
  char **hosts;
  int32_t n;
  HAP_TRY(get_strs(r, file, "/", "hosts", false, &hosts, &n));
  hap_status st = HAP_OK;
  for (int32_t h = 0; h < n && st == HAP_OK; h++)
    st = hap_profile_add_host(p, hosts[h], r->err);
  free_strs(hosts, n);
  return st;
}

typedef struct name_list {
  char **v;
  int32_t n, cap;
  bool oom;
} name_list;

static herr_t collect_attr(hid_t loc, const char *name, const H5A_info_t *info, void *data) {
  (void)loc;
  (void)info;
  name_list *l = data;
  if (HAP_VEC_RESERVE(l->v, l->cap, (int64_t)l->n + 1, 16) != 0) {
    l->oom = true;
    return -1;
  }
  l->v[l->n] = dup_str(name);
  if (l->v[l->n] == NULL) {
    l->oom = true;
    return -1;
  }
  l->n++;
  return 0;
}

static hap_status read_env(const reader *r, hid_t file) {
  objbuf obj;
  hid_t g;
  HAP_TRY(open_group(r, file, "/", "env", obj, &g));
  name_list names = {0};
  hap_status st = HAP_OK;
  if (H5Aiterate2(g, H5_INDEX_CRT_ORDER, H5_ITER_INC, NULL, collect_attr, &names) < 0) {
    free_strs(names.v, names.n);
    names = (name_list){0};
    if (H5Aiterate2(g, H5_INDEX_NAME, H5_ITER_INC, NULL, collect_attr, &names) < 0)
      st = names.oom ? r_oom(r, obj) : r_h5(r, obj, "cannot list the attributes");
  }
  for (int32_t i = 0; i < names.n && st == HAP_OK; i++) {
    char *value = NULL;
    st = get_str(r, g, obj, names.v[i], &value);
    if (st == HAP_OK)
      st = hap_profile_set_env(r->p, names.v[i], value, r->err);
    free(value);
  }
  free_strs(names.v, names.n);
  H5Gclose(g);
  return st;
}

/* ---- devices -------------------------------------------------------------------------------- */

static const char *const gemm_fields[] = {"m", "n", "k", "dtype", "seconds", "flops_per_s"};
static const H5T_class_t gemm_classes[] = {H5T_INTEGER, H5T_INTEGER, H5T_INTEGER,
                                           H5T_STRING,  H5T_FLOAT,   H5T_FLOAT};
static const table_spec gemm_table = {
    gemm_fields, gemm_classes, 6,
    "a 1-D compound dataset {m, n, k: int64; dtype: fixed string; seconds, flops_per_s: float64}"};

static const char *const kernel_fields[] = {"op",    "direction", "shape_key", "shape",
                                            "p50_s", "p95_s",     "reps"};
static const H5T_class_t kernel_classes[] = {H5T_STRING, H5T_STRING, H5T_INTEGER, H5T_STRING,
                                             H5T_FLOAT,  H5T_FLOAT,  H5T_INTEGER};
static const table_spec kernel_table = {
    kernel_fields, kernel_classes, 7,
    "a 1-D compound dataset {op, direction, shape: fixed string; shape_key, reps: integer; "
    "p50_s, p95_s: float64}"};

/* Copy a fixed-length string field of `size` bytes, always NUL-terminated. */
static void field_str(char *dst, const char *src, size_t size) {
  memcpy(dst, src, size);
  dst[size - 1] = '\0';
}

static hap_status read_gemm(const reader *r, hid_t g, const char *obj, hap_profile_device *d) {
  void *rows = NULL;
  int32_t n;
  hid_t mtype = hap_h5_gemm_type();
  hap_status st =
      read_table(r, g, obj, "gemm", &gemm_table, mtype, sizeof(hap_h5_gemm_row), &rows, &n);
  if (mtype >= 0)
    H5Tclose(mtype);
  const hap_h5_gemm_row *row = rows;
  for (int32_t i = 0; i < n && st == HAP_OK; i++) {
    char dtype[HAP_H5_DTYPE_MAX];
    field_str(dtype, row[i].dtype, sizeof dtype);
    hap_profile_gemm gm = {row[i].m, row[i].n,       row[i].k,
                           HAP_F32,  row[i].seconds, row[i].flops_per_s};
    if (hap_dtype_parse(dtype, &gm.dtype) != HAP_OK)
      st = r_err(r, HAP_EPARSE, obj, "gemm: row %d: dtype \"%s\" is not a known dtype", i, dtype);
    else
      st = hap_profile_add_gemm(d, &gm, r->err);
  }
  free(rows);
  return st;
}

static hap_status kernel_from_row(const reader *r, const char *obj, int32_t i,
                                  const hap_h5_kernel_row *row, hap_profile_kernel *k) {
  char op[HAP_H5_OP_MAX], dir[HAP_H5_DIR_MAX];
  field_str(op, row->op, sizeof op);
  field_str(dir, row->direction, sizeof dir);
  memset(k, 0, sizeof *k);
  if (hap_op_lookup(op, &k->op) != HAP_OK)
    return r_err(r, HAP_EPARSE, obj, "kernels: row %d: op \"%s\" is not in the op table", i, op);
  if (strcmp(dir, "fwd") != 0 && strcmp(dir, "bwd") != 0)
    return r_err(r, HAP_EPARSE, obj, "kernels: row %d: direction \"%s\", expected fwd or bwd", i,
                 dir);
  if (row->reps < 1 || row->reps > INT32_MAX)
    return r_err(r, HAP_EPARSE, obj, "kernels: row %d: reps %lld, expected 1..%d", i,
                 (long long)row->reps, INT32_MAX);
  k->backward = dir[0] == 'b';
  k->shape_key = row->shape_key;
  field_str(k->shape, row->shape, sizeof k->shape);
  k->p50_s = row->p50_s;
  k->p95_s = row->p95_s;
  k->mean_s = row->mean_s; /* 0 from a 2.1 file: the member is missing, the row zeroed */
  k->reps = (int32_t)row->reps;
  return HAP_OK;
}

static hap_status read_kernels(const reader *r, hid_t g, const char *obj, hap_profile_device *d) {
  void *rows = NULL;
  int32_t n;
  hid_t mtype = hap_h5_kernel_type();
  hap_status st =
      read_table(r, g, obj, "kernels", &kernel_table, mtype, sizeof(hap_h5_kernel_row), &rows, &n);
  if (mtype >= 0)
    H5Tclose(mtype);
  const hap_h5_kernel_row *row = rows;
  for (int32_t i = 0; i < n && st == HAP_OK; i++) {
    hap_profile_kernel k;
    st = kernel_from_row(r, obj, i, &row[i], &k);
    if (st == HAP_OK)
      st = hap_profile_add_kernel(d, &k, r->err);
  }
  free(rows);
  return st;
}

static hap_status read_device_attrs(const reader *r, hid_t g, const char *obj,
                                    hap_profile_device *d) {
  char *kind = NULL;
  HAP_TRY(get_str(r, g, obj, "kind", &kind));
  hap_status st = HAP_OK;
  if (strcmp(kind, "gpu") == 0)
    d->kind = HAP_DEVICE_GPU;
  else if (strcmp(kind, "cpu") == 0)
    d->kind = HAP_DEVICE_CPU;
  else
    st = r_err(r, HAP_EPARSE, obj, "kind is \"%.100s\", expected \"gpu\" or \"cpu\"", kind);
  free(kind);
  if (st == HAP_OK)
    st = get_i64(r, g, obj, "memory_bytes", &d->memory_bytes);
  if (st == HAP_OK)
    st = get_f64(r, g, obj, "memory_bw_Bps", &d->memory_bw_Bps);
  if (st == HAP_OK)
    st = get_f64(r, g, obj, "launch_s", &d->launch_s);
  if (st == HAP_OK) /* format 2.1; absent before */
    st = get_nums(r, g, obj, "update_bw_Bps", true, H5T_FLOAT, H5T_NATIVE_DOUBLE, &d->update_bw_Bps,
                  -1);
  for (int t = 0; t < HAP_DTYPE_COUNT && st == HAP_OK; t++) {
    char name[64];
    snprintf(name, sizeof name, "peak_flops_%s", hap_dtype_name((hap_dtype)t));
    st = get_nums(r, g, obj, name, true, H5T_FLOAT, H5T_NATIVE_DOUBLE, &d->peak_flops[t], -1);
  }
  return st;
}

static hap_status read_device_data(const reader *r, hid_t g, const char *obj,
                                   hap_profile_device *d) {
  HAP_TRY(read_device_attrs(r, g, obj, d));
  HAP_TRY(read_gemm(r, g, obj, d));
  return read_kernels(r, g, obj, d);
}

/* Device i of count (groups /devices/0 .. /devices/<count-1>). */
static hap_status read_device(const reader *r, hid_t devs, int32_t i, int32_t count) {
  char name[16];
  objbuf obj;
  snprintf(name, sizeof name, "%d", i);
  if (H5Lexists(devs, name, H5P_DEFAULT) == 0)
    return r_err(r, HAP_EPARSE, "/devices", "missing group %s, expected devices numbered 0..%d",
                 name, count - 1);
  hid_t g;
  HAP_TRY(open_group(r, devs, "/devices", name, obj, &g));
  char *dname = NULL, *host = NULL, *model = NULL;
  hap_status st = get_str(r, g, obj, "name", &dname);
  if (st == HAP_OK)
    st = get_str(r, g, obj, "host", &host);
  if (st == HAP_OK)
    st = get_str(r, g, obj, "model", &model);
  if (st == HAP_OK)
    st = hap_profile_add_device(r->p, dname, host, model, HAP_DEVICE_GPU, NULL, r->err);
  free(dname);
  free(host);
  free(model);
  if (st == HAP_OK)
    st = read_device_data(r, g, obj, &r->p->devices[r->p->n_devices - 1]);
  H5Gclose(g);
  return st;
}

/* True for "0", "1", ... "12" (canonical decimal, no sign or leading zero). */
static bool is_index_name(const char *s) {
  if (s[0] == '\0' || (s[0] == '0' && s[1] != '\0') || strlen(s) > 9)
    return false;
  for (const char *c = s; *c; c++)
    if (*c < '0' || *c > '9')
      return false;
  return true;
}

static hap_status read_devices(const reader *r, hid_t file) {
  objbuf obj;
  hid_t g;
  HAP_TRY(open_group(r, file, "/", "devices", obj, &g));
  char **names;
  int32_t n, count = 0;
  hap_status st = child_names(r, g, obj, &names, &n);
  for (int32_t i = 0; i < n && st == HAP_OK; i++)
    count += is_index_name(names[i]);
  free_strs(names, n);
  if (st == HAP_OK && count == 0)
    st = r_err(r, HAP_EPARSE, obj, "no devices, expected groups 0, 1, ...");
  for (int32_t i = 0; i < count && st == HAP_OK; i++)
    st = read_device(r, g, i, count);
  H5Gclose(g);
  return st;
}

/* ---- sweeps --------------------------------------------------------------------------------- */

/* The shape of a sweep group: N from sizes_bytes, reps from samples_s. */
static hap_status sweep_shape(const reader *r, hid_t g, const char *obj, int32_t *n,
                              int32_t *reps) {
  hsize_t dims[2];
  data_spec sizes = {H5T_INTEGER, 1, {0, 0}, "[sizes]"};
  HAP_TRY(read_data(r, g, obj, "sizes_bytes", &sizes, -1, NULL, dims));
  *n = (int32_t)dims[0];
  data_spec samples = {H5T_FLOAT, 2, {dims[0], 0}, "[sizes × reps]"};
  HAP_TRY(read_data(r, g, obj, "samples_s", &samples, -1, NULL, dims));
  *reps = (int32_t)dims[1];
  return HAP_OK;
}

/* Read the datasets and the warmup / iters attributes shared by p2p and collective sweeps. */
static hap_status read_sweep(const reader *r, hid_t g, const char *obj, int32_t n, int32_t reps,
                             int64_t *sizes, double *samples, double *p50, double *p95,
                             int32_t *warmup, int32_t *iters) {
  hsize_t dims[2];
  data_spec spec = {H5T_INTEGER, 1, {(hsize_t)n, 0}, "[sizes]"};
  HAP_TRY(read_data(r, g, obj, "sizes_bytes", &spec, H5T_NATIVE_INT64, sizes, dims));
  HAP_TRY(read_f64s(r, g, obj, "samples_s", n, reps, samples));
  HAP_TRY(read_f64s(r, g, obj, "p50_s", n, 0, p50));
  HAP_TRY(read_f64s(r, g, obj, "p95_s", n, 0, p95));
  HAP_TRY(get_i32(r, g, obj, "warmup", 0, warmup));
  return get_i32(r, g, obj, "iters", 1, iters);
}

/* FIT (profile_store.c): fit_upper_bytes, fit_alpha_s, fit_beta_Bps, f64[P] each, 1 <= P <= 8.
 * The values are checked by hap_profile_validate (hap_ab_fit_check). */
static hap_status read_fit(const reader *r, hid_t g, const char *obj, hap_ab_fit *f) {
  static const char *const names[3] = {"fit_upper_bytes", "fit_alpha_s", "fit_beta_Bps"};
  double *dst[3] = {f->upper_bytes, f->alpha_s, f->beta_Bps};
  int64_t n = 0;
  for (int k = 0; k < 3; k++) {
    hid_t attr, type, space;
    HAP_TRY(open_attr(r, g, obj, names[k], false, &attr, &type, &space));
    int64_t count = values_in(space);
    bool is_float = H5Tget_class(type) == H5T_FLOAT;
    close_attr(attr, type, space);
    if (!is_float || count < 1 || count > HAP_FIT_MAX_PIECES)
      return r_err(r, HAP_EPARSE, obj, "attribute %s: expected a 1-D array of 1 to %d float64",
                   names[k], HAP_FIT_MAX_PIECES);
    if (k > 0 && count != n)
      return r_err(r, HAP_EPARSE, obj,
                   "attribute %s: has %lld values, expected %lld (one per piece, as %s)", names[k],
                   (long long)count, (long long)n, names[0]);
    n = count;
    HAP_TRY(get_nums(r, g, obj, names[k], false, H5T_FLOAT, H5T_NATIVE_DOUBLE, dst[k], n));
  }
  f->n_pieces = (int32_t)n;
  return HAP_OK;
}

static hap_status read_p2p_data(const reader *r, hid_t g, const char *obj, hap_profile_p2p *s) {
  HAP_TRY(read_sweep(r, g, obj, s->n_sizes, s->reps, s->sizes_bytes, s->samples_s, s->p50_s,
                     s->p95_s, &s->warmup, &s->iters));
  HAP_TRY(get_f64(r, g, obj, "latency_s", &s->fit.latency_s));
  HAP_TRY(get_f64(r, g, obj, "bandwidth_Bps", &s->fit.bandwidth_Bps));
  if (r->p->version_major >= 2)
    return read_fit(r, g, obj, &s->pieces);
  s->pieces = hap_ab_fit_one(s->fit.latency_s, s->fit.bandwidth_Bps); /* 1.x: one piece */
  return HAP_OK;
}

static hap_status read_p2p(const reader *r, hid_t parent, const char *name) {
  objbuf obj;
  hid_t g;
  HAP_TRY(open_group(r, parent, "/p2p", name, obj, &g));
  int32_t src = 0, dst = 0, n = 0, reps = 0;
  hap_status st = get_i32(r, g, obj, "src", 0, &src);
  if (st == HAP_OK)
    st = get_i32(r, g, obj, "dst", 0, &dst);
  if (st == HAP_OK)
    st = sweep_shape(r, g, obj, &n, &reps);
  if (st == HAP_OK)
    st = hap_profile_add_p2p(r->p, src, dst, n, reps, NULL, r->err);
  if (st == HAP_OK)
    st = read_p2p_data(r, g, obj, &r->p->p2p[r->p->n_p2p - 1]);
  H5Gclose(g);
  return st;
}

static hap_status read_p2ps(const reader *r, hid_t file) {
  objbuf obj;
  hid_t g;
  HAP_TRY(open_group(r, file, "/", "p2p", obj, &g));
  char **names;
  int32_t n;
  hap_status st = child_names(r, g, obj, &names, &n);
  for (int32_t i = 0; i < n && st == HAP_OK; i++)
    st = read_p2p(r, g, names[i]);
  free_strs(names, n);
  H5Gclose(g);
  return st;
}

/* Ranks attribute → a new int32 array. */
static hap_status read_ranks(const reader *r, hid_t g, const char *obj, int32_t **ranks,
                             int32_t *n) {
  int64_t count;
  *ranks = NULL;
  HAP_TRY(attr_length(r, g, obj, "ranks", &count));
  int64_t *v = malloc((size_t)count * sizeof *v);
  int32_t *out = malloc((size_t)count * sizeof *out);
  if (v == NULL || out == NULL) {
    free(v);
    free(out);
    return r_oom(r, obj);
  }
  hap_status st = get_nums(r, g, obj, "ranks", false, H5T_INTEGER, H5T_NATIVE_INT64, v, count);
  for (int64_t i = 0; i < count && st == HAP_OK; i++)
    st = to_i32(r, obj, "a rank", v[i], 0, &out[i]);
  free(v);
  if (st != HAP_OK) {
    free(out);
    return st;
  }
  *ranks = out;
  *n = (int32_t)count;
  return HAP_OK;
}

static hap_status read_coll_fit(const reader *r, hid_t g, const char *obj, hap_ab_fit *f) {
  if (r->p->version_major >= 2)
    return read_fit(r, g, obj, f);
  double thr = 0, as = 0, bs = 0, al = 0, bl = 0; /* 1.x: two pieces (threshold 0 = one) */
  HAP_TRY(get_f64(r, g, obj, "threshold_bytes", &thr));
  HAP_TRY(get_f64(r, g, obj, "alpha_small_s", &as));
  HAP_TRY(get_f64(r, g, obj, "beta_small_Bps", &bs));
  HAP_TRY(get_f64(r, g, obj, "alpha_large_s", &al));
  HAP_TRY(get_f64(r, g, obj, "beta_large_Bps", &bl));
  if (!(thr >= 0))
    return r_err(r, HAP_EPARSE, obj, "attribute threshold_bytes: is %g, expected a size >= 0", thr);
  *f = hap_ab_fit_two(thr, as, bs, al, bl);
  return HAP_OK;
}

static hap_status read_coll_data(const reader *r, hid_t g, const char *obj, hap_profile_coll *c) {
  HAP_TRY(read_sweep(r, g, obj, c->n_sizes, c->reps, c->sizes_bytes, c->samples_s, c->p50_s,
                     c->p95_s, &c->warmup, &c->iters));
  HAP_TRY(read_f64s(r, g, obj, "algbw_Bps", c->n_sizes, 0, c->algbw_Bps));
  HAP_TRY(read_f64s(r, g, obj, "busbw_Bps", c->n_sizes, 0, c->busbw_Bps));
  return read_coll_fit(r, g, obj, &c->fit);
}

static hap_status read_coll(const reader *r, hid_t kind_g, const char *kind_obj, hap_coll_kind kind,
                            const char *name) {
  objbuf obj;
  hid_t g;
  HAP_TRY(open_group(r, kind_g, kind_obj, name, obj, &g));
  int32_t *ranks = NULL, n_ranks = 0, n = 0, reps = 0;
  hap_status st = read_ranks(r, g, obj, &ranks, &n_ranks);
  if (st == HAP_OK)
    st = sweep_shape(r, g, obj, &n, &reps);
  if (st == HAP_OK)
    st = hap_profile_add_coll(r->p, kind, name, ranks, n_ranks, n, reps, NULL, r->err);
  free(ranks);
  if (st == HAP_OK)
    st = read_coll_data(r, g, obj, &r->p->colls[r->p->n_colls - 1]);
  H5Gclose(g);
  return st;
}

static hap_status read_kind(const reader *r, hid_t colls, hap_coll_kind kind) {
  const char *kname = hap_coll_kind_name(kind);
  htri_t exists = H5Lexists(colls, kname, H5P_DEFAULT);
  if (exists < 0)
    return r_h5(r, "/collectives", "cannot look up a collective kind");
  if (exists == 0)
    return HAP_OK;
  objbuf obj;
  hid_t g;
  HAP_TRY(open_group(r, colls, "/collectives", kname, obj, &g));
  char **names;
  int32_t n;
  hap_status st = child_names(r, g, obj, &names, &n);
  for (int32_t i = 0; i < n && st == HAP_OK; i++)
    st = read_coll(r, g, obj, kind, names[i]);
  free_strs(names, n);
  H5Gclose(g);
  return st;
}

static hap_status read_collectives(const reader *r, hid_t file) {
  objbuf obj;
  hid_t g;
  HAP_TRY(open_group(r, file, "/", "collectives", obj, &g));
  hap_status st = HAP_OK;
  for (int k = 0; k < HAP_COLL_KIND_COUNT && st == HAP_OK; k++)
    st = read_kind(r, g, (hap_coll_kind)k);
  H5Gclose(g);
  return st;
}

/* ---- the file ------------------------------------------------------------------------------- */

static uint64_t le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

/* Walk the global heap collection at buf[at] ("GCOL", version 1, 8-byte lengths): its size (at
 * least 4 KiB, within the file), then each object {index u16, refs u16, reserved u32, size u64,
 * data padded to 8}; object 0 is the free space and its size covers its header. False (with the
 * offending offset) if the collection or an object overruns; true for a consistent collection or
 * another version (which HDF5 rejects itself). */
static bool heap_collection_ok(const unsigned char *buf, size_t len, size_t at, size_t *bad_at) {
  uint64_t size = le64(buf + at + 8);
  if (buf[at + 4] != 1)
    return true;
  *bad_at = at + 8;
  if (size < 4096 || size > len - at)
    return false;
  size_t end = at + (size_t)size, pos = at + 16;
  while (pos + 16 <= end) {
    unsigned idx = buf[pos] | (unsigned)buf[pos + 1] << 8;
    uint64_t obj = le64(buf + pos + 8);
    uint64_t need = idx == 0 ? obj : obj > end - pos ? UINT64_MAX : 16 + ((obj + 7) & ~7ULL);
    if (need == 0 || need > end - pos) {
      *bad_at = pos;
      return false;
    }
    pos += (size_t)need;
  }
  return true;
}

/* HDF5 1.10 trusts the object sizes of the global heap, where variable-length strings live, and
 * copies past its buffer when one is corrupted. Check every collection before HDF5 reads any.
 * Best effort: only files without a user block and with 8-byte lengths (what hap writes). */
static hap_status check_global_heaps(const char *path, hap_err *err) {
  static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  char *data;
  size_t len;
  if (hap_read_file(path, &data, &len, err) != HAP_OK)
    return HAP_EIO;
  const unsigned char *buf = (const unsigned char *)data;
  hap_status st = HAP_OK;
  size_t length_bytes = 0;
  if (len >= 16 && memcmp(buf, sig, sizeof sig) == 0)
    length_bytes = buf[8] < 2 ? buf[14] : buf[10]; /* superblock v0/1 vs v2/3 */
  for (size_t at = 0; length_bytes == 8 && at + 16 <= len && st == HAP_OK; at++) {
    const unsigned char *hit = memchr(buf + at, 'G', len - 16 - at + 1);
    if (hit == NULL)
      break;
    at = (size_t)(hit - buf);
    size_t bad_at = 0;
    if (memcmp(hit, "GCOL", 4) == 0 && !heap_collection_ok(buf, len, at, &bad_at))
      st = hap_err_set(err, HAP_EPARSE,
                       "%s: corrupted variable-length string storage (global heap collection at "
                       "byte %zu: inconsistent size at byte %zu)",
                       path, at, bad_at);
  }
  free(data);
  return st;
}

static hap_status open_file(const char *path, hid_t *file, hap_err *err) {
  *file = -1;
  struct stat sb;
  if (stat(path, &sb) != 0)
    return hap_err_set(err, HAP_EIO, "%s: cannot open: %s", path, strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return hap_err_set(err, HAP_EIO, "%s: cannot open: not a regular file", path);
  char detail[200];
#if H5_VERSION_GE(1, 12, 0)
  htri_t is = H5Fis_accessible(path, H5P_DEFAULT);
#else
  htri_t is = H5Fis_hdf5(path);
#endif
  if (is == 0)
    return hap_err_set(err, HAP_EPARSE,
                       "%s: not an HDF5 file (no HDF5 signature), expected a "
                       "hap-profile",
                       path);
  HAP_TRY(check_global_heaps(path, err));
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (is > 0 && fapl >= 0 && H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) >= 0)
    *file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  hap_status st = HAP_OK;
  if (*file < 0) {
    hap_h5_detail(detail, sizeof detail);
    st = hap_err_set(err, HAP_EPARSE,
                     "%s: cannot open as HDF5, the file is truncated or "
                     "corrupted%s%s%s",
                     path, detail[0] ? " (HDF5: " : "", detail, detail[0] ? ")" : "");
  }
  if (fapl >= 0)
    H5Pclose(fapl);
  return st;
}

static hap_status read_all(const reader *r, hid_t file) {
  HAP_TRY(read_root(r, file));
  HAP_TRY(read_env(r, file));
  HAP_TRY(read_devices(r, file));
  HAP_TRY(read_p2ps(r, file));
  return read_collectives(r, file);
}

hap_status hap_profile_read(const char *path, hap_profile **out, hap_err *err) {
  *out = NULL;
  hap_h5_silence();
  hid_t file;
  hap_status st = open_file(path, &file, err);
  hap_profile *p = NULL;
  if (st == HAP_OK) {
    p = hap_profile_create();
    st = p ? HAP_OK : hap_err_set(err, HAP_ENOMEM, "%s: out of memory", path);
  }
  if (st == HAP_OK) {
    reader r = {path, err, p};
    st = read_all(&r, file);
  }
  if (file >= 0 && H5Fclose(file) < 0 && st == HAP_OK)
    st = hap_err_set(err, HAP_EPARSE, "%s: cannot close the file", path);
  if (st == HAP_OK) {
    st = hap_profile_validate(p, err);
    if (st != HAP_OK) {
      st = HAP_EPARSE;
      if (err != NULL)
        err->status = st;
      hap_err_prefix(err, "%s", path);
    }
  }
  if (st == HAP_OK) {
    p->source = dup_str(path);
    if (p->source == NULL)
      st = hap_err_set(err, HAP_ENOMEM, "%s: out of memory", path);
  }
  if (st != HAP_OK) {
    hap_profile_destroy(p);
    return st;
  }
  *out = p;
  return HAP_OK;
}
