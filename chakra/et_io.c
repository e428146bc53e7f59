/* et_io.c — one rank's Chakra trace to and from the wire: length-prefixed protobuf messages
 * through protobuf-c's code generated from et.proto (et.h). */
#include "chakra/et.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/vec.h"
#include "et.pb-c.h"

typedef ChakraProtoMsg__AttributeProto attr_pb;
typedef ChakraProtoMsg__Node node_pb;
typedef ChakraProtoMsg__GlobalMetadata meta_pb;

static hap_status oom(hap_err *err) {
  return hap_err_set(err, HAP_ENOMEM, "chakra: out of memory");
}

const char *hap_et_type_name(int type) {
  static const char *const names[] = {"INVALID_NODE",   "METADATA_NODE",  "MEM_LOAD_NODE",
                                      "MEM_STORE_NODE", "COMP_NODE",      "COMM_SEND_NODE",
                                      "COMM_RECV_NODE", "COMM_COLL_NODE", "STORAGE_NODE",
                                      "BATCH_NODE",     "CHECKPOINT_NODE"};
  return type >= 0 && type <= HAP_ET_TYPE_MAX ? names[type] : "unknown";
}

const char *hap_et_coll_name(int coll) {
  static const char *const names[] = {
      "ALL_REDUCE", "REDUCE",         "ALL_GATHER",           "GATHER", "SCATTER", "BROADCAST",
      "ALL_TO_ALL", "REDUCE_SCATTER", "REDUCE_SCATTER_BLOCK", "BARRIER"};
  return coll >= 0 && coll < HAP_ET_COLL_COUNT ? names[coll] : "unknown";
}

/* ---- the in-memory trace ------------------------------------------------------------------- */

hap_et_rank *hap_et_rank_create(void) {
  hap_et_rank *r = calloc(1, sizeof *r);
  if (r == NULL || (r->version = strdup(HAP_ET_VERSION)) == NULL) {
    free(r);
    return NULL;
  }
  r->rank = r->world_size = r->node_count = -1;
  r->flops_per_s = r->memory_Bps = r->iteration_s = -1;
  return r;
}

static void node_free(hap_et_node *n) {
  free(n->name);
  free(n->data_deps);
  free(n->ctrl_deps);
  free(n->pg_name);
  free(n->pg_ranks);
  free(n->coll_impl);
  free(n->kind);
}

void hap_et_rank_destroy(hap_et_rank *r) {
  if (r == NULL)
    return;
  for (int32_t i = 0; i < r->n_nodes; i++)
    node_free(&r->nodes[i]);
  free(r->nodes);
  free(r->version);
  free(r->device);
  free(r->device_model);
  free(r->dtype);
  free(r->cluster);
  free(r->strategy);
  free(r);
}

hap_et_node *hap_et_add_node(hap_et_rank *r) {
  if (r->n_nodes == INT32_MAX || HAP_VEC_RESERVE(r->nodes, r->cap_nodes, r->n_nodes + 1, 64) != 0)
    return NULL;
  hap_et_node *n = &r->nodes[r->n_nodes];
  *n = (hap_et_node){.id = r->n_nodes > 0 ? r->nodes[r->n_nodes - 1].id + 1 : 0,
                     .type = HAP_ET_COMP,
                     .exact_us = -1,
                     .num_ops = -1,
                     .tensor_size = -1,
                     .is_cpu_op = -1,
                     .comm_type = -1,
                     .comm_size = -1,
                     .comm_src = -1,
                     .comm_dst = -1,
                     .comm_tag = -1,
                     .nic_sharers = -1,
                     .repeats = -1,
                     .recompute_of = -1};
  r->n_nodes++;
  return n;
}

hap_status hap_et_set_str(char **dst, const char *s, hap_err *err) {
  char *c = strdup(s);
  if (c == NULL)
    return oom(err);
  free(*dst);
  *dst = c;
  return HAP_OK;
}

/* ---- writing ------------------------------------------------------------------------------- */

enum { MAX_ATTRS = 24 };

/* The attributes of one message being written; values point into the trace or into `lists`. */
typedef struct attr_set {
  attr_pb a[MAX_ATTRS];
  attr_pb *p[MAX_ATTRS];
  ChakraProtoMsg__Int64List list;
  size_t n;
} attr_set;

static attr_pb *attr_next(attr_set *s, const char *name,
                          ChakraProtoMsg__AttributeProto__ValueCase c) {
  attr_pb *a = &s->a[s->n];
  chakra_proto_msg__attribute_proto__init(a);
  a->name = (char *)name; /* packing only reads it */
  a->value_case = c;
  s->p[s->n] = a;
  s->n++;
  return a;
}
static void attr_i64(attr_set *s, const char *name, int64_t v) {
  attr_next(s, name, CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT64_VAL)->int64_val = v;
}
static void attr_u64(attr_set *s, const char *name, uint64_t v) {
  attr_next(s, name, CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_UINT64_VAL)->uint64_val = v;
}
static void attr_dbl(attr_set *s, const char *name, double v) {
  attr_next(s, name, CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_DOUBLE_VAL)->double_val = v;
}
static void attr_str(attr_set *s, const char *name, const char *v) {
  if (v != NULL)
    attr_next(s, name, CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_STRING_VAL)->string_val = (char *)v;
}
static void attr_bool(attr_set *s, const char *name, bool v) {
  attr_next(s, name, CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_BOOL_VAL)->bool_val = v;
}

/* An unsigned varint (protobuf's base-128 encoding) into buf (10 bytes); returns its length. */
static size_t varint(uint64_t v, uint8_t *buf) {
  size_t n = 0;
  do {
    buf[n] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v != 0)
      buf[n] |= 0x80;
    n++;
  } while (v != 0);
  return n;
}

/* Write one message with its length prefix; *scratch (of *cap bytes) grows as needed. */
static hap_status put_message(FILE *f, const ProtobufCMessage *m, uint8_t **scratch, size_t *cap,
                              const char *path, hap_err *err) {
  size_t len = protobuf_c_message_get_packed_size(m);
  if (len > *cap) {
    uint8_t *b = realloc(*scratch, len);
    if (b == NULL)
      return oom(err);
    *scratch = b;
    *cap = len;
  }
  uint8_t pre[10];
  size_t np = varint(len, pre);
  if (protobuf_c_message_pack(m, *scratch) != len || fwrite(pre, 1, np, f) != np ||
      fwrite(*scratch, 1, len, f) != len)
    return hap_err_set(err, HAP_EIO, "%s: write failed", path);
  return HAP_OK;
}

static hap_status put_meta(FILE *f, const hap_et_rank *r, uint8_t **scratch, size_t *cap,
                           const char *path, hap_err *err) {
  attr_set s = {.n = 0};
  if (r->rank >= 0)
    attr_i64(&s, "hap_rank", r->rank);
  if (r->world_size >= 0)
    attr_i64(&s, "hap_world_size", r->world_size);
  attr_str(&s, "hap_device", r->device);
  attr_str(&s, "hap_device_model", r->device_model);
  attr_str(&s, "hap_compute_dtype", r->dtype);
  if (r->flops_per_s > 0)
    attr_dbl(&s, "hap_device_flops_per_s", r->flops_per_s);
  if (r->memory_Bps > 0)
    attr_dbl(&s, "hap_device_memory_bw_Bps", r->memory_Bps);
  attr_str(&s, "hap_cluster", r->cluster);
  attr_str(&s, "hap_strategy", r->strategy);
  if (r->iteration_s >= 0)
    attr_dbl(&s, "hap_iteration_s", r->iteration_s);
  attr_i64(&s, "hap_node_count", r->n_nodes);
  meta_pb m;
  chakra_proto_msg__global_metadata__init(&m);
  m.version = r->version;
  m.n_attr = s.n;
  m.attr = s.p;
  return put_message(f, &m.base, scratch, cap, path, err);
}

static hap_status put_node(FILE *f, const hap_et_node *n, uint8_t **scratch, size_t *cap,
                           const char *path, hap_err *err) {
  attr_set s = {.n = 0};
  attr_str(&s, "hap_kind", n->kind);
  if (n->exact_us >= 0)
    attr_dbl(&s, "hap_duration_us", n->exact_us);
  if (n->num_ops >= 0)
    attr_i64(&s, "num_ops", (int64_t)llround(n->num_ops));
  if (n->tensor_size >= 0)
    attr_u64(&s, "tensor_size", (uint64_t)llround(n->tensor_size));
  if (n->is_cpu_op >= 0)
    attr_bool(&s, "is_cpu_op", n->is_cpu_op != 0);
  if (n->comm_type >= 0)
    attr_i64(&s, "comm_type", n->comm_type);
  if (n->comm_size >= 0)
    attr_i64(&s, "comm_size", (int64_t)llround(n->comm_size));
  if (n->comm_src >= 0)
    attr_i64(&s, "comm_src", n->comm_src);
  if (n->comm_dst >= 0)
    attr_i64(&s, "comm_dst", n->comm_dst);
  if (n->comm_tag >= 0)
    attr_i64(&s, "comm_tag", n->comm_tag);
  attr_str(&s, "pg_name", n->pg_name);
  if (n->pg_ranks != NULL) {
    s.list = (ChakraProtoMsg__Int64List)CHAKRA_PROTO_MSG__INT64_LIST__INIT;
    s.list.n_values = (size_t)n->n_pg_ranks;
    s.list.values = n->pg_ranks;
    attr_next(&s, "hap_pg_ranks", CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT64_LIST)->int64_list =
        &s.list;
  }
  attr_str(&s, "hap_coll_impl", n->coll_impl);
  if (n->nic_sharers >= 0)
    attr_i64(&s, "hap_nic_sharers", n->nic_sharers);
  if (n->repeats >= 0)
    attr_i64(&s, "hap_repeats", n->repeats);
  if (n->recompute_of >= 0)
    attr_u64(&s, "hap_recompute_of", (uint64_t)n->recompute_of);
  node_pb m;
  chakra_proto_msg__node__init(&m);
  m.id = n->id;
  m.name = n->name != NULL ? n->name : (char *)"";
  m.type = (ChakraProtoMsg__NodeType)n->type;
  m.n_data_deps = (size_t)n->n_data_deps;
  m.data_deps = n->data_deps;
  m.n_ctrl_deps = (size_t)n->n_ctrl_deps;
  m.ctrl_deps = n->ctrl_deps;
  m.start_time_micros = n->start_us;
  m.duration_micros = n->duration_us;
  m.n_attr = s.n;
  m.attr = s.p;
  return put_message(f, &m.base, scratch, cap, path, err);
}

hap_status hap_et_write(const char *path, const hap_et_rank *r, hap_err *err) {
  hap_atomic_file af;
  HAP_TRY(hap_atomic_open(&af, path, err));
  uint8_t *scratch = NULL;
  size_t cap = 0;
  hap_status st = put_meta(af.f, r, &scratch, &cap, path, err);
  for (int32_t i = 0; i < r->n_nodes && st == HAP_OK; i++)
    st = put_node(af.f, &r->nodes[i], &scratch, &cap, path, err);
  free(scratch);
  if (st != HAP_OK) {
    hap_atomic_abort(&af);
    return st;
  }
  return hap_atomic_commit(&af, err);
}

/* ---- reading ------------------------------------------------------------------------------- */

/* A scalar attribute as a number; false for lists, strings and bytes. */
static bool attr_number(const attr_pb *a, double *v) {
  switch (a->value_case) {
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_DOUBLE_VAL: *v = a->double_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_FLOAT_VAL: *v = a->float_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT32_VAL: *v = a->int32_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT64_VAL: *v = (double)a->int64_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_UINT32_VAL: *v = a->uint32_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_UINT64_VAL: *v = (double)a->uint64_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_SINT32_VAL: *v = a->sint32_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_SINT64_VAL: *v = (double)a->sint64_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_FIXED32_VAL: *v = a->fixed32_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_FIXED64_VAL: *v = (double)a->fixed64_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_SFIXED32_VAL: *v = a->sfixed32_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_SFIXED64_VAL: *v = (double)a->sfixed64_val; break;
  case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_BOOL_VAL: *v = a->bool_val ? 1 : 0; break;
  default: return false;
  }
  return isfinite(*v);
}

/* Where an attribute error points: the file, the message and the attribute. */
typedef struct where {
  const char *label;
  int64_t msg; /* -1: the GlobalMetadata */
  const char *attr;
} where;

static hap_status bad_attr(const where *w, const char *expected, hap_err *err) {
  if (w->msg < 0)
    return hap_err_set(err, HAP_EPARSE, "%s: GlobalMetadata: attribute %s: expected %s", w->label,
                       w->attr, expected);
  return hap_err_set(err, HAP_EPARSE, "%s: node message %lld: attribute %s: expected %s", w->label,
                     (long long)w->msg, w->attr, expected);
}

/* A number >= lo that is a whole number when `whole`. */
static hap_status get_number(const attr_pb *a, const where *w, double lo, bool whole, double *out,
                             hap_err *err) {
  double v = 0;
  if (!attr_number(a, &v) || v < lo || (whole && v != floor(v)) || v > 9.0e18)
    return bad_attr(w,
                    whole ? "a whole number attribute (int64_val, uint64_val, ...) >= 0"
                          : "a number attribute (double_val, int64_val, ...) >= 0",
                    err);
  *out = v;
  return HAP_OK;
}
static hap_status get_int(const attr_pb *a, const where *w, int64_t *out, hap_err *err) {
  double v = 0;
  HAP_TRY(get_number(a, w, 0, true, &v, err));
  *out = (int64_t)v;
  return HAP_OK;
}
static hap_status get_str(const attr_pb *a, const where *w, char **out, hap_err *err) {
  if (a->value_case != CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_STRING_VAL)
    return bad_attr(w, "a string attribute (string_val)", err);
  return hap_et_set_str(out, a->string_val, err);
}

static hap_status get_ranks(const attr_pb *a, const where *w, hap_et_node *n, hap_err *err) {
  size_t cnt = 0;
  if (a->value_case == CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT64_LIST)
    cnt = a->int64_list->n_values;
  else if (a->value_case == CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT32_LIST)
    cnt = a->int32_list->n_values;
  else
    return bad_attr(w, "a list of ranks (int64_list or int32_list)", err);
  if (cnt == 0 || cnt > INT32_MAX)
    return bad_attr(w, "a non-empty list of ranks", err);
  free(n->pg_ranks);
  if ((n->pg_ranks = malloc(cnt * sizeof *n->pg_ranks)) == NULL)
    return oom(err);
  n->n_pg_ranks = (int32_t)cnt;
  for (size_t i = 0; i < cnt; i++) {
    n->pg_ranks[i] = a->value_case == CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT64_LIST
                         ? a->int64_list->values[i]
                         : a->int32_list->values[i];
    if (n->pg_ranks[i] < 0 || n->pg_ranks[i] > INT32_MAX)
      return bad_attr(w, "ranks >= 0", err);
  }
  return HAP_OK;
}

static hap_status node_attr(const attr_pb *a, const where *w, hap_et_node *n, hap_err *err) {
  const char *k = a->name;
  int64_t i;
  if (strcmp(k, "hap_duration_us") == 0)
    return get_number(a, w, 0, false, &n->exact_us, err);
  if (strcmp(k, "num_ops") == 0)
    return get_number(a, w, 0, false, &n->num_ops, err);
  if (strcmp(k, "tensor_size") == 0)
    return get_number(a, w, 0, false, &n->tensor_size, err);
  if (strcmp(k, "comm_size") == 0)
    return get_number(a, w, 0, false, &n->comm_size, err);
  if (strcmp(k, "is_cpu_op") == 0) {
    HAP_TRY(get_int(a, w, &i, err));
    n->is_cpu_op = i != 0;
    return HAP_OK;
  }
  if (strcmp(k, "comm_type") == 0) {
    HAP_TRY(get_int(a, w, &i, err));
    if (i >= HAP_ET_COLL_COUNT)
      return bad_attr(w, "a CollectiveCommType value 0..9", err);
    n->comm_type = (int)i;
    return HAP_OK;
  }
  if (strcmp(k, "comm_src") == 0)
    return get_int(a, w, &n->comm_src, err);
  if (strcmp(k, "comm_dst") == 0)
    return get_int(a, w, &n->comm_dst, err);
  if (strcmp(k, "comm_tag") == 0)
    return get_int(a, w, &n->comm_tag, err);
  if (strcmp(k, "pg_name") == 0) {
    if (a->value_case != CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_STRING_VAL) {
      double v; /* some producers number their groups */
      if (!attr_number(a, &v))
        return bad_attr(w, "a string or a number", err);
      char buf[32];
      snprintf(buf, sizeof buf, "%.17g", v);
      return hap_et_set_str(&n->pg_name, buf, err);
    }
    return get_str(a, w, &n->pg_name, err);
  }
  if (strcmp(k, "hap_pg_ranks") == 0)
    return get_ranks(a, w, n, err);
  if (strcmp(k, "hap_coll_impl") == 0)
    return get_str(a, w, &n->coll_impl, err);
  if (strcmp(k, "hap_kind") == 0)
    return get_str(a, w, &n->kind, err);
  if (strcmp(k, "hap_nic_sharers") == 0)
    return get_int(a, w, &n->nic_sharers, err);
  if (strcmp(k, "hap_repeats") == 0)
    return get_int(a, w, &n->repeats, err);
  if (strcmp(k, "hap_recompute_of") == 0)
    return get_int(a, w, &n->recompute_of, err);
  return HAP_OK; /* an attribute hap does not use */
}

static hap_status meta_attr(const attr_pb *a, const where *w, hap_et_rank *r, hap_err *err) {
  const char *k = a->name;
  if (strcmp(k, "hap_rank") == 0)
    return get_int(a, w, &r->rank, err);
  if (strcmp(k, "hap_world_size") == 0)
    return get_int(a, w, &r->world_size, err);
  if (strcmp(k, "hap_node_count") == 0)
    return get_int(a, w, &r->node_count, err);
  if (strcmp(k, "hap_device") == 0)
    return get_str(a, w, &r->device, err);
  if (strcmp(k, "hap_device_model") == 0)
    return get_str(a, w, &r->device_model, err);
  if (strcmp(k, "hap_compute_dtype") == 0)
    return get_str(a, w, &r->dtype, err);
  if (strcmp(k, "hap_cluster") == 0)
    return get_str(a, w, &r->cluster, err);
  if (strcmp(k, "hap_strategy") == 0)
    return get_str(a, w, &r->strategy, err);
  if (strcmp(k, "hap_device_flops_per_s") == 0)
    return get_number(a, w, 0, false, &r->flops_per_s, err);
  if (strcmp(k, "hap_device_memory_bw_Bps") == 0)
    return get_number(a, w, 0, false, &r->memory_Bps, err);
  if (strcmp(k, "hap_iteration_s") == 0)
    return get_number(a, w, 0, false, &r->iteration_s, err);
  return HAP_OK;
}

/* A version as Chakra writes them: digits separated by single dots ("0.0.4"). */
static bool version_ok(const char *v) {
  bool digit = false;
  for (const char *p = v; *p; p++) {
    if (*p >= '0' && *p <= '9')
      digit = true;
    else if (*p == '.' && digit)
      digit = false;
    else
      return false;
  }
  return digit && strlen(v) <= 32;
}

static hap_status take_meta(const char *label, const meta_pb *m, hap_et_rank *r, hap_err *err) {
  if (!version_ok(m->version))
    return hap_err_set(err, HAP_EPARSE,
                       "%s: not a Chakra execution trace: expected a GlobalMetadata message with "
                       "a version such as %s first",
                       label, HAP_ET_VERSION);
  HAP_TRY(hap_et_set_str(&r->version, m->version, err));
  for (size_t i = 0; i < m->n_attr; i++) {
    where w = {label, -1, m->attr[i]->name};
    HAP_TRY(meta_attr(m->attr[i], &w, r, err));
  }
  return HAP_OK;
}

static hap_status copy_ids(uint64_t **dst, int32_t *n, const uint64_t *src, size_t cnt,
                           hap_err *err) {
  if (cnt == 0)
    return HAP_OK;
  if (cnt > INT32_MAX || (*dst = malloc(cnt * sizeof **dst)) == NULL)
    return oom(err);
  memcpy(*dst, src, cnt * sizeof **dst);
  *n = (int32_t)cnt;
  return HAP_OK;
}

static hap_status take_node(const char *label, int64_t msg, const node_pb *m, hap_et_rank *r,
                            hap_err *err) {
  if ((int)m->type <= HAP_ET_INVALID || (int)m->type > HAP_ET_TYPE_MAX)
    return hap_err_set(err, HAP_EPARSE,
                       "%s: node message %lld (id %llu): type %d, expected a NodeType 1..%d", label,
                       (long long)msg, (unsigned long long)m->id, (int)m->type, HAP_ET_TYPE_MAX);
  hap_et_node *n = hap_et_add_node(r);
  if (n == NULL)
    return oom(err);
  n->id = m->id;
  n->type = (int)m->type;
  n->start_us = m->start_time_micros;
  n->duration_us = m->duration_micros;
  HAP_TRY(hap_et_set_str(&n->name, m->name, err));
  HAP_TRY(copy_ids(&n->data_deps, &n->n_data_deps, m->data_deps, m->n_data_deps, err));
  HAP_TRY(copy_ids(&n->ctrl_deps, &n->n_ctrl_deps, m->ctrl_deps, m->n_ctrl_deps, err));
  for (size_t i = 0; i < m->n_attr; i++) {
    where w = {label, msg, m->attr[i]->name};
    HAP_TRY(node_attr(m->attr[i], &w, n, err));
  }
  return HAP_OK;
}

/* The varint at data[*pos..len) into *v; false when it runs past the end or past 10 bytes. */
static bool get_varint(const uint8_t *data, size_t len, size_t *pos, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *pos < len; shift += 7) {
    uint8_t b = data[(*pos)++];
    *v |= (uint64_t)(b & 0x7f) << shift;
    if ((b & 0x80) == 0)
      return true;
  }
  return false;
}

hap_status hap_et_parse(const char *label, const uint8_t *data, size_t len, hap_et_rank **out,
                        hap_err *err) {
  *out = NULL;
  if (len == 0)
    return hap_err_set(err, HAP_EPARSE,
                       "%s: empty: expected a Chakra execution trace (a GlobalMetadata message "
                       "first)",
                       label);
  hap_et_rank *r = hap_et_rank_create();
  if (r == NULL)
    return oom(err);
  r->version[0] = '\0';
  hap_status st = HAP_OK;
  size_t pos = 0;
  for (int64_t msg = -1; pos < len && st == HAP_OK; msg++) {
    size_t at = pos;
    uint64_t n;
    if (!get_varint(data, len, &pos, &n)) {
      if (msg < 0)
        st = hap_err_set(err, HAP_EPARSE,
                         "%s: not a Chakra execution trace: expected a length-prefixed "
                         "GlobalMetadata message at byte 0",
                         label);
      else
        st = hap_err_set(err, HAP_EPARSE,
                         "%s: truncated: the length of node message %lld at byte %zu runs past "
                         "the end",
                         label, (long long)msg, at);
      break;
    }
    if (n > len - pos) {
      st = msg < 0 ? hap_err_set(err, HAP_EPARSE,
                                 "%s: not a Chakra execution trace (or truncated): the first "
                                 "message wants %llu bytes, %zu are left",
                                 label, (unsigned long long)n, len - pos)
                   : hap_err_set(err, HAP_EPARSE,
                                 "%s: truncated: node message %lld at byte %zu wants %llu bytes, "
                                 "%zu are left",
                                 label, (long long)msg, at, (unsigned long long)n, len - pos);
      break;
    }
    if (msg < 0) {
      meta_pb *m = chakra_proto_msg__global_metadata__unpack(NULL, (size_t)n, data + pos);
      st = m != NULL ? take_meta(label, m, r, err)
                     : hap_err_set(err, HAP_EPARSE,
                                   "%s: not a Chakra execution trace: expected a GlobalMetadata "
                                   "message first",
                                   label);
      if (m != NULL)
        chakra_proto_msg__global_metadata__free_unpacked(m, NULL);
    } else {
      node_pb *m = chakra_proto_msg__node__unpack(NULL, (size_t)n, data + pos);
      st = m != NULL ? take_node(label, msg, m, r, err)
                     : hap_err_set(err, HAP_EPARSE,
                                   "%s: node message %lld at byte %zu: expected a Chakra Node "
                                   "message (the file is truncated or not a trace)",
                                   label, (long long)msg, at);
      if (m != NULL)
        chakra_proto_msg__node__free_unpacked(m, NULL);
    }
    pos += (size_t)n;
  }
  if (st == HAP_OK && r->version[0] == '\0')
    st = hap_err_set(err, HAP_EPARSE, "%s: not a Chakra execution trace: no GlobalMetadata", label);
  if (st == HAP_OK && r->node_count >= 0 && r->node_count != r->n_nodes)
    st = hap_err_set(err, HAP_EPARSE,
                     "%s: truncated: %d node messages, its GlobalMetadata (hap_node_count) says "
                     "%lld",
                     label, r->n_nodes, (long long)r->node_count);
  if (st != HAP_OK) {
    hap_et_rank_destroy(r);
    return st;
  }
  *out = r;
  return HAP_OK;
}

hap_status hap_et_read(const char *path, hap_et_rank **out, hap_err *err) {
  char *data = NULL;
  size_t len = 0;
  *out = NULL;
  HAP_TRY(hap_read_file(path, &data, &len, err));
  hap_status st = hap_et_parse(path, (const uint8_t *)data, len, out, err);
  free(data);
  return st;
}
