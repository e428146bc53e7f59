/* schedule.c — per-group forward/backward orders of GPipe, 1F1B and interleaved 1F1B, their
 * consistency check and peak in-flight activations (schedule.h). */
#include "plan/schedule.h"

#include <stdlib.h>
#include <string.h>

struct hap_pipe_order {
  hap_pipe_schedule schedule;
  int32_t p, m, v;
  int32_t n_per_group; /* 2*m*v */
  hap_pipe_op *ops;    /* [p][n_per_group] */
};

static const char *const schedule_names[HAP_PIPE_SCHEDULE_COUNT] = {"gpipe", "1f1b", "interleaved"};

const char *hap_pipe_schedule_name(hap_pipe_schedule s) {
  return (int)s >= 0 && (int)s < HAP_PIPE_SCHEDULE_COUNT ? schedule_names[s] : "?";
}

hap_status hap_pipe_schedule_parse(const char *s, hap_pipe_schedule *out) {
  for (int i = 0; s != NULL && i < HAP_PIPE_SCHEDULE_COUNT; i++)
    if (strcmp(s, schedule_names[i]) == 0) {
      *out = (hap_pipe_schedule)i;
      return HAP_OK;
    }
  return HAP_ENOTFOUND;
}

/* ---- orders ---- */

/* The k-th forward (or backward) a group runs under interleaving: micro-batches in groups of p,
 * each group through chunks 0..v-1 (backwards v-1..0). With v = 1 it is micro-batch k. */
static hap_pipe_op nth_op(int32_t p, int32_t v, int32_t k, bool backward) {
  int32_t pv = p * v;
  int32_t chunk = (k % pv) / p;
  hap_pipe_op op = {.backward = backward, .micro = (k / pv) * p + k % p, .chunk = chunk};
  if (backward)
    op.chunk = v - 1 - chunk;
  return op;
}

/* warmup forwards, then (forward, backward) pairs, then the remaining backwards: n = 2*total. */
static void fill_1f1b(hap_pipe_op *ops, int32_t p, int32_t v, int32_t total, int32_t warmup) {
  int32_t n = 0;
  for (int32_t k = 0; k < warmup; k++)
    ops[n++] = nth_op(p, v, k, false);
  for (int32_t s = 0; s < total - warmup; s++) {
    ops[n++] = nth_op(p, v, warmup + s, false);
    ops[n++] = nth_op(p, v, s, true);
  }
  for (int32_t k = total - warmup; k < total; k++)
    ops[n++] = nth_op(p, v, k, true);
}

static void fill_gpipe(hap_pipe_op *ops, int32_t m) {
  for (int32_t k = 0; k < m; k++) {
    ops[k] = (hap_pipe_op){.backward = false, .micro = k, .chunk = 0};
    ops[m + k] = (hap_pipe_op){.backward = true, .micro = m - 1 - k, .chunk = 0};
  }
}

static int32_t warmup_of(const hap_pipe_order *o, int32_t i) {
  int32_t total = o->m * o->v;
  int64_t w = o->schedule == HAP_PIPE_1F1B
                  ? (int64_t)o->p - i - 1
                  : ((int64_t)o->p - i - 1) * 2 + ((int64_t)o->v - 1) * o->p;
  return w < total ? (int32_t)w : total;
}

static hap_status check_shape(hap_pipe_schedule s, int32_t p, int32_t m, int32_t v, hap_err *err) {
  if ((int)s < 0 || (int)s >= HAP_PIPE_SCHEDULE_COUNT)
    return hap_err_set(err, HAP_EINVAL, "pipeline: schedule: %d, expected one of %s", (int)s,
                       HAP_PIPE_SCHEDULE_CHOICES);
  if (p < 1)
    return hap_err_set(err, HAP_EINVAL, "pipeline: stages: %d, expected >= 1", p);
  if (m < 1)
    return hap_err_set(err, HAP_EINVAL, "pipeline: micro_batches: %d, expected >= 1", m);
  if (v < 1)
    return hap_err_set(err, HAP_EINVAL, "pipeline: chunks: %d, expected >= 1", v);
  int64_t n = (int64_t)p * m * v;
  if (n > HAP_PIPE_MAX_OPS)
    return hap_err_set(err, HAP_EINVAL,
                       "pipeline: stages %d x micro_batches %d x chunks %d = %lld, expected <= %d",
                       p, m, v, (long long)n, HAP_PIPE_MAX_OPS);
  if (s != HAP_PIPE_INTERLEAVED && v != 1)
    return hap_err_set(err, HAP_EINVAL,
                       "pipeline: chunks: %d, expected 1 for %s (more chunks per group need "
                       "interleaved)",
                       v, hap_pipe_schedule_name(s));
  if (s == HAP_PIPE_INTERLEAVED && v < 2)
    return hap_err_set(err, HAP_EINVAL,
                       "pipeline: chunks: %d, expected >= 2 for interleaved (one chunk per group "
                       "is 1f1b)",
                       v);
  if (s == HAP_PIPE_INTERLEAVED && m % p != 0)
    return hap_err_set(err, HAP_EINVAL,
                       "interleaved 1F1B needs micro_batches a multiple of the %d stages, got %d",
                       p, m);
  return HAP_OK;
}

hap_status hap_pipe_order_build(hap_pipe_schedule s, int32_t p, int32_t m, int32_t v,
                                hap_pipe_order **out, hap_err *err) {
  *out = NULL;
  HAP_TRY(check_shape(s, p, m, v, err));
  hap_pipe_order *o = malloc(sizeof *o);
  hap_pipe_op *ops = malloc((size_t)p * 2 * (size_t)m * (size_t)v * sizeof *ops);
  if (o == NULL || ops == NULL) {
    free(o);
    free(ops);
    return hap_err_set(err, HAP_ENOMEM, "pipeline: out of memory building the order");
  }
  *o =
      (hap_pipe_order){.schedule = s, .p = p, .m = m, .v = v, .n_per_group = 2 * m * v, .ops = ops};
  for (int32_t i = 0; i < p; i++) {
    hap_pipe_op *g = o->ops + (size_t)i * (size_t)o->n_per_group;
    if (s == HAP_PIPE_GPIPE)
      fill_gpipe(g, m);
    else
      fill_1f1b(g, p, v, m * v, warmup_of(o, i));
  }
  *out = o;
  return HAP_OK;
}

void hap_pipe_order_destroy(hap_pipe_order *o) {
  if (o == NULL)
    return;
  free(o->ops);
  free(o);
}

hap_pipe_schedule hap_pipe_order_schedule(const hap_pipe_order *o) { return o->schedule; }
int32_t hap_pipe_order_groups(const hap_pipe_order *o) { return o->p; }
int32_t hap_pipe_order_micro(const hap_pipe_order *o) { return o->m; }
int32_t hap_pipe_order_chunks(const hap_pipe_order *o) { return o->v; }

int32_t hap_pipe_order_n_ops(const hap_pipe_order *o, int32_t group) {
  return group >= 0 && group < o->p ? o->n_per_group : 0;
}

hap_pipe_op hap_pipe_order_op(const hap_pipe_order *o, int32_t group, int32_t k) {
  return o->ops[(size_t)group * (size_t)o->n_per_group + (size_t)k];
}

int32_t hap_pipe_order_in_flight(const hap_pipe_order *o, int32_t group) {
  int32_t held = 0, peak = 0;
  for (int32_t k = 0; k < hap_pipe_order_n_ops(o, group); k++) {
    held += hap_pipe_order_op(o, group, k).backward ? -1 : 1;
    if (held > peak)
      peak = held;
  }
  return peak;
}

/* ---- consistency ---- */

static hap_status check_op(int32_t m, int32_t v, int32_t k, hap_pipe_op op, uint8_t *state,
                           hap_err *err) {
  if (op.micro < 0 || op.micro >= m)
    return hap_err_set(err, HAP_EINVAL, "op %d: micro-batch %d, expected 0..%d", k, op.micro,
                       m - 1);
  if (op.chunk < 0 || op.chunk >= v)
    return hap_err_set(err, HAP_EINVAL, "op %d: chunk %d, expected 0..%d", k, op.chunk, v - 1);
  uint8_t *st = &state[(size_t)op.micro * (size_t)v + (size_t)op.chunk]; /* 0, 1 fwd, 2 bwd */
  const char *why = NULL;
  if (!op.backward && *st != 0)
    why = *st == 1 ? "twice" : "after its backward";
  else if (op.backward && *st != 1)
    why = *st == 0 ? "before its forward" : "twice";
  if (why != NULL)
    return hap_err_set(err, HAP_EINVAL, "op %d: %s of micro-batch %d chunk %d %s", k,
                       op.backward ? "backward" : "forward", op.micro, op.chunk, why);
  *st = op.backward ? 2 : 1;
  return HAP_OK;
}

hap_status hap_pipe_ops_check(int32_t m, int32_t v, const hap_pipe_op *ops, int32_t n_ops,
                              hap_err *err) {
  if (m < 1 || v < 1 || (int64_t)m * v > HAP_PIPE_MAX_OPS || n_ops < 0 || (ops == NULL && n_ops))
    return hap_err_set(err, HAP_EINVAL,
                       "pipeline order: micro_batches %d, chunks %d, %d ops: expected m, v >= 1 "
                       "and ops",
                       m, v, n_ops);
  uint8_t *state = calloc((size_t)m * (size_t)v, 1);
  if (state == NULL)
    return hap_err_set(err, HAP_ENOMEM, "pipeline order: out of memory checking");
  hap_status st = HAP_OK;
  for (int32_t k = 0; k < n_ops && st == HAP_OK; k++)
    st = check_op(m, v, k, ops[k], state, err);
  for (int64_t i = 0; i < (int64_t)m * v && st == HAP_OK; i++)
    if (state[i] != 2)
      st = hap_err_set(err, HAP_EINVAL, "micro-batch %d chunk %d: no %s", (int)(i / v),
                       (int)(i % v), state[i] == 0 ? "forward" : "backward");
  free(state);
  return st;
}

hap_status hap_pipe_order_check(const hap_pipe_order *o, hap_err *err) {
  for (int32_t g = 0; g < o->p; g++) {
    hap_status st = hap_pipe_ops_check(o->m, o->v, o->ops + (size_t)g * (size_t)o->n_per_group,
                                       o->n_per_group, err);
    if (st != HAP_OK) {
      hap_err_prefix(err, "group %d", g);
      return st;
    }
  }
  return HAP_OK;
}
