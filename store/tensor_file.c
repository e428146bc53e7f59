/* tensor_file.c — hap-weights and hap-grads files (tensor_file.h). HDF5's own error printing is
 * off (hap_h5_silence); every failure is one line "<file>: <dataset>: <what was expected>". */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "profile_h5.h"
#include "store/tensor_file.h"

/* ---- reading -------------------------------------------------------------------------------- */

/* Root attribute `name` of `file`: a string equal to `want` (fixed or variable length). */
static hap_status check_attr(const char *path, hid_t file, const char *name, const char *want,
                             hap_err *err) {
  if (H5Aexists(file, name) <= 0)
    return hap_err_set(err, HAP_EPARSE, "%s: /: attribute '%s' missing, expected \"%s\"", path,
                       name, want);
  hid_t a = H5Aopen(file, name, H5P_DEFAULT), t = a >= 0 ? H5Aget_type(a) : -1;
  char buf[64] = "";
  bool ok = t >= 0 && H5Tget_class(t) == H5T_STRING;
  if (ok && H5Tis_variable_str(t) > 0) {
    char *s = NULL;
    hid_t mt = H5Tcopy(H5T_C_S1);
    ok = H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Aread(a, mt, &s) >= 0 && s != NULL;
    if (ok)
      snprintf(buf, sizeof buf, "%s", s);
    if (s != NULL)
      H5free_memory(s);
    H5Tclose(mt);
  } else if (ok) {
    size_t n = H5Tget_size(t);
    hid_t mt = H5Tcopy(H5T_C_S1);
    ok = n > 0 && n < sizeof buf && H5Tset_size(mt, n + 1) >= 0 && H5Aread(a, mt, buf) >= 0;
    H5Tclose(mt);
  }
  if (t >= 0)
    H5Tclose(t);
  if (a >= 0)
    H5Aclose(a);
  if (!ok || strcmp(buf, want) != 0)
    return hap_err_set(err, HAP_EPARSE, "%s: /: attribute '%s' is %s%s%s, expected \"%s\"", path,
                       name, ok ? "\"" : "not a short string", ok ? buf : "", ok ? "\"" : "", want);
  return HAP_OK;
}

static hap_status open_h5(const char *path, const char *format, hid_t *file, hap_err *err) {
  *file = -1;
  struct stat sb;
  if (stat(path, &sb) != 0)
    return hap_err_set(err, HAP_EIO, "%s: cannot open: %s", path, strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return hap_err_set(err, HAP_EIO, "%s: cannot open: not a regular file", path);
  if (H5Fis_hdf5(path) <= 0)
    return hap_err_set(err, HAP_EPARSE, "%s: not an HDF5 file, expected a %s file", path, format);
  *file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (*file < 0) {
    char detail[200];
    hap_h5_detail(detail, sizeof detail);
    return hap_err_set(err, HAP_EPARSE,
                       "%s: cannot open as HDF5, the file is truncated or "
                       "corrupted%s%s%s",
                       path, detail[0] ? " (HDF5: " : "", detail, detail[0] ? ")" : "");
  }
  hap_status st = check_attr(path, *file, "format", format, err);
  if (st == HAP_OK)
    st = check_attr(path, *file, "version", "1.0", err);
  if (st != HAP_OK) {
    H5Fclose(*file);
    *file = -1;
  }
  return st;
}

static void shape_text(const hap_shape *s, char *buf, size_t len) {
  size_t at = (size_t)snprintf(buf, len, "[");
  for (int k = 0; k < s->rank && at < len; k++)
    at += (size_t)snprintf(buf + at, len - at, "%s%lld", k ? ", " : "", (long long)s->dims[k]);
  if (at < len)
    snprintf(buf + at, len - at, "]");
}

/* Dataset `name` of `file` into t (the graph's tensor: dtype and shape as expected). */
static hap_status read_one(const char *path, hid_t file, const hap_tensor *tn, hap_named_tensor *t,
                           hap_err *err) {
  char want[160];
  shape_text(&tn->shape, want, sizeof want);
  const char *kind = hap_tensor_kind_name(tn->kind);
  if (H5Lexists(file, tn->name, H5P_DEFAULT) <= 0)
    return hap_err_set(err, HAP_EPARSE, "%s: /%s: missing, expected the graph's %s %s%s", path,
                       tn->name, kind, hap_dtype_name(tn->dtype), want);
  hid_t d = H5Dopen2(file, tn->name, H5P_DEFAULT);
  hid_t ty = d >= 0 ? H5Dget_type(d) : -1, sp = d >= 0 ? H5Dget_space(d) : -1;
  hap_status st = HAP_OK;
  H5T_class_t cls = ty >= 0 ? H5Tget_class(ty) : H5T_NO_CLASS;
  bool is_float = tn->dtype == HAP_F32, is_int = tn->dtype == HAP_I64 || tn->dtype == HAP_I32;
  int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
  hsize_t dims[HAP_MAX_DIMS] = {0};
  bool same = rank == tn->shape.rank && rank >= 0 && rank <= HAP_MAX_DIMS;
  hap_shape got = {.rank = rank >= 0 && rank <= HAP_MAX_DIMS ? rank : 0};
  if (rank > 0 && rank <= HAP_MAX_DIMS)
    H5Sget_simple_extent_dims(sp, dims, NULL);
  for (int k = 0; k < got.rank; k++) {
    got.dims[k] = (int64_t)dims[k];
    same = same && got.dims[k] == tn->shape.dims[k];
  }
  if (d < 0 || ty < 0 || sp < 0) {
    st = hap_err_set(err, HAP_EPARSE, "%s: /%s: not a readable dataset", path, tn->name);
  } else if (!is_float && !is_int) {
    st = hap_err_set(err, HAP_EUNSUPPORTED,
                     "%s: /%s: the graph's %s is %s, expected float32, "
                     "int64 or int32",
                     path, tn->name, kind, hap_dtype_name(tn->dtype));
  } else if ((is_float && cls != H5T_FLOAT) || (is_int && cls != H5T_INTEGER)) {
    st = hap_err_set(err, HAP_EPARSE, "%s: /%s: %s values, expected %s (the graph's %s)", path,
                     tn->name, cls == H5T_FLOAT ? "floating-point" : "non-float",
                     is_float ? "floating-point" : "integer", kind);
  } else if (!same) {
    char have[160] = "with more than 8 dims";
    if (rank <= HAP_MAX_DIMS)
      shape_text(&got, have, sizeof have);
    st = hap_err_set(err, HAP_EPARSE, "%s: /%s: shape %s, expected the graph's %s shape %s", path,
                     tn->name, have, kind, want);
  } else {
    int64_t n = 1;
    for (int k = 0; k < rank; k++)
      n *= tn->shape.dims[k];
    t->data = malloc((size_t)(n > 0 ? n : 1) * (size_t)hap_dtype_size(tn->dtype));
    hid_t mt = is_float               ? H5T_NATIVE_FLOAT
               : tn->dtype == HAP_I64 ? H5T_NATIVE_INT64
                                      : H5T_NATIVE_INT32;
    if (t->data == NULL)
      st = hap_err_set(err, HAP_ENOMEM, "%s: /%s: out of memory", path, tn->name);
    else if (H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, t->data) < 0) {
      char detail[200];
      hap_h5_detail(detail, sizeof detail);
      st = hap_err_set(err, HAP_EPARSE, "%s: /%s: cannot read (HDF5: %s)", path, tn->name, detail);
    }
    t->name = tn->name;
    t->dtype = tn->dtype;
    t->shape = tn->shape;
  }
  if (sp >= 0)
    H5Sclose(sp);
  if (ty >= 0)
    H5Tclose(ty);
  if (d >= 0)
    H5Dclose(d);
  return st;
}

hap_status hap_weights_read(const char *path, const hap_graph *g, hap_tensor_set **out,
                            hap_err *err) {
  *out = NULL;
  hap_h5_silence();
  hid_t file;
  HAP_TRY(open_h5(path, HAP_WEIGHTS_FORMAT, &file, err));
  hap_tensor_set *s = calloc(1, sizeof *s);
  hap_status st = HAP_OK;
  if (s == NULL || (s->t = calloc((size_t)g->n_tensors + 1, sizeof *s->t)) == NULL)
    st = hap_err_set(err, HAP_ENOMEM, "%s: out of memory", path);
  bool inputs = false; /* the file holds the graph's inputs (all of them), or none */
  for (int32_t i = 0; i < g->n_tensors; i++)
    inputs = inputs || (g->tensors[i].kind == HAP_TENSOR_INPUT &&
                        H5Lexists(file, g->tensors[i].name, H5P_DEFAULT) > 0);
  for (int32_t i = 0; st == HAP_OK && i < g->n_tensors; i++) {
    if (g->tensors[i].kind == HAP_TENSOR_ACTIVATION ||
        (g->tensors[i].kind == HAP_TENSOR_INPUT && !inputs))
      continue;
    st = read_one(path, file, &g->tensors[i], &s->t[s->n], err);
    s->t[s->n].tensor = i;
    s->n++; /* counted when it failed too: its buffer is freed */
  }
  H5Fclose(file);
  if (st != HAP_OK) {
    hap_tensor_set_destroy(s);
    return st;
  }
  *out = s;
  return HAP_OK;
}

void hap_tensor_set_destroy(hap_tensor_set *s) {
  if (s == NULL)
    return;
  for (int32_t i = 0; s->t != NULL && i < s->n; i++)
    free(s->t[i].data);
  free(s->t);
  free(s);
}

/* ---- writing -------------------------------------------------------------------------------- */

static bool put_attr(hid_t file, const char *name, const char *value) {
  hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR), a = -1;
  bool ok = t >= 0 && sp >= 0 && H5Tset_size(t, strlen(value)) >= 0 &&
            (a = H5Acreate2(file, name, t, sp, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
            H5Awrite(a, t, value) >= 0;
  if (a >= 0)
    H5Aclose(a);
  if (sp >= 0)
    H5Sclose(sp);
  if (t >= 0)
    H5Tclose(t);
  return ok;
}

/* Dataset `name` under loc; a name with '/' (as ONNX value names have) makes the groups on its
 * path, relative to loc. */
static bool put_data(hid_t loc, const char *name, hid_t mtype, hid_t ftype, const hap_shape *s,
                     const void *data) {
  hsize_t dims[HAP_MAX_DIMS];
  for (int k = 0; k < s->rank; k++)
    dims[k] = (hsize_t)s->dims[k];
  while (*name == '/')
    name++;
  hid_t sp = s->rank > 0 ? H5Screate_simple(s->rank, dims, NULL) : H5Screate(H5S_SCALAR);
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  hid_t d = sp >= 0 && lcpl >= 0 && H5Pset_create_intermediate_group(lcpl, 1) >= 0
                ? H5Dcreate2(loc, name, ftype, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT)
                : -1;
  bool ok = d >= 0 && H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0;
  if (lcpl >= 0)
    H5Pclose(lcpl);
  if (d >= 0)
    H5Dclose(d);
  if (sp >= 0)
    H5Sclose(sp);
  return ok;
}

static bool write_grads(hid_t file, const hap_graph *g, double loss, const float *const *grads,
                        const char **what) {
  hap_shape scalar = {.rank = 0};
  *what = "/";
  if (!put_attr(file, "format", HAP_GRADS_FORMAT) || !put_attr(file, "version", "1.0"))
    return false;
  *what = "/loss";
  if (!put_data(file, "loss", H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, &scalar, &loss))
    return false;
  *what = "/grad";
  hid_t grp = H5Gcreate2(file, "grad", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  bool ok = grp >= 0;
  for (int32_t t = 0; ok && t < g->n_tensors; t++) {
    const hap_tensor *tn = &g->tensors[t];
    if (tn->kind != HAP_TENSOR_PARAMETER || !tn->requires_grad || grads[t] == NULL)
      continue;
    *what = tn->name;
    ok = put_data(grp, tn->name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, &tn->shape, grads[t]);
  }
  if (grp >= 0)
    H5Gclose(grp);
  return ok;
}

static bool write_weights(hid_t file, const hap_graph *g, const void *const *values,
                          const char **what) {
  *what = "/";
  if (!put_attr(file, "format", HAP_WEIGHTS_FORMAT) || !put_attr(file, "version", "1.0"))
    return false;
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *tn = &g->tensors[t];
    if (values[t] == NULL)
      continue;
    *what = tn->name;
    bool ok =
        tn->dtype == HAP_F32
            ? put_data(file, tn->name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, &tn->shape, values[t])
        : tn->dtype == HAP_I64
            ? put_data(file, tn->name, H5T_NATIVE_INT64, H5T_STD_I64LE, &tn->shape, values[t])
            : put_data(file, tn->name, H5T_NATIVE_INT32, H5T_STD_I32LE, &tn->shape, values[t]);
    if (!ok)
      return false;
  }
  return true;
}

/* One hap-weights (values != NULL) or hap-grads file, written to a temporary and renamed. */
static hap_status write_file(const char *path, const hap_graph *g, const void *const *values,
                             double loss, const float *const *grads, hap_err *err) {
  hap_h5_silence();
  char tmp[4200];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp)
    return hap_err_set(err, HAP_EINVAL, "%s: path too long", path);
  hid_t file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0)
    return hap_err_set(err, HAP_EIO, "%s: cannot create the temporary file %s", path, tmp);
  const char *what = "/";
  bool ok = values != NULL ? write_weights(file, g, values, &what)
                           : write_grads(file, g, loss, grads, &what);
  char detail[200] = "";
  if (!ok)
    hap_h5_detail(detail, sizeof detail);
  ok = H5Fclose(file) >= 0 && ok;
  hap_status st = HAP_OK;
  if (!ok)
    st = hap_err_set(err, HAP_EIO, "%s: %s: cannot write (HDF5: %s)", path, what, detail);
  else if (rename(tmp, path) != 0)
    st = hap_err_set(err, HAP_EIO, "%s: cannot rename %s onto it: %s", path, tmp, strerror(errno));
  if (st != HAP_OK)
    unlink(tmp);
  return st;
}

hap_status hap_grads_write(const char *path, const hap_graph *g, double loss,
                           const float *const *grads, hap_err *err) {
  return write_file(path, g, NULL, loss, grads, err);
}

hap_status hap_weights_write(const char *path, const hap_graph *g, const void *const *values,
                             hap_err *err) {
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *tn = &g->tensors[t];
    if (values[t] != NULL &&
        (tn->kind == HAP_TENSOR_ACTIVATION ||
         (tn->dtype != HAP_F32 && tn->dtype != HAP_I64 && tn->dtype != HAP_I32)))
      return hap_err_set(err, HAP_EINVAL,
                         "%s: /%s: a %s %s, expected a float32, int64 or int32 parameter, buffer "
                         "or input",
                         path, tn->name, hap_dtype_name(tn->dtype), hap_tensor_kind_name(tn->kind));
  }
  return write_file(path, g, values, 0, NULL, err);
}
