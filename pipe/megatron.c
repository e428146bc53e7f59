/* megatron.c — the `megatron` strategy's options and the layout they mean (megatron.h). */
#include "pipe/megatron.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/spec.h"

#define MEGATRON_KEYS "tp, pp, dp, mbs, v, sp, recompute"

bool hap_megatron_spec_is(const char *text) {
  return text != NULL && strncmp(text, "megatron", 8) == 0 && (text[8] == '\0' || text[8] == ':');
}

static hap_status positive(const char *key, const char *value, int32_t *out, hap_err *err) {
  char *end = NULL;
  long v = strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < 1 || v > 1 << 20)
    return hap_err_set(err, HAP_EINVAL, "megatron: %s='%s', expected a positive integer", key,
                       value);
  *out = (int32_t)v;
  return HAP_OK;
}

static hap_status set_key(hap_megatron_spec *m, const char *key, const char *value, hap_err *err) {
  if (strcmp(key, "tp") == 0)
    return positive(key, value, &m->tp, err);
  if (strcmp(key, "pp") == 0)
    return positive(key, value, &m->pp, err);
  if (strcmp(key, "dp") == 0)
    return positive(key, value, &m->dp, err);
  if (strcmp(key, "mbs") == 0)
    return positive(key, value, &m->mbs, err);
  if (strcmp(key, "v") == 0)
    return positive(key, value, &m->v, err);
  if (strcmp(key, "sp") == 0) {
    if (strcmp(value, "on") != 0 && strcmp(value, "off") != 0)
      return hap_err_set(err, HAP_EINVAL, "megatron: sp='%s', expected on or off", value);
    m->sp = strcmp(value, "on") == 0 ? HAP_SP_ON : HAP_SP_OFF;
    return HAP_OK;
  }
  if (strcmp(key, "recompute") == 0) {
    if (hap_recompute_parse(value, &m->recompute) != HAP_OK)
      return hap_err_set(err, HAP_EINVAL,
                         "megatron: recompute='%s', expected none, selective or full", value);
    m->recompute_given = true;
    return HAP_OK;
  }
  return hap_err_set(err, HAP_EINVAL, "megatron: unknown key '%s' (keys " MEGATRON_KEYS ")", key);
}

hap_status hap_megatron_spec_parse(const char *text, hap_megatron_spec *out, hap_err *err) {
  hap_megatron_spec m = {.pp = 1, .mbs = 1, .v = 1, .sp = HAP_SP_ON};
  if (!hap_megatron_spec_is(text))
    return hap_err_set(err, HAP_EINVAL, "megatron: '%s' is not megatron[:key=value,...]",
                       text ? text : "");
  hap_spec s;
  hap_err quiet = {0};
  hap_status st = hap_spec_parse(text, HAP_SPEC_PLAIN_NAME, &s, &quiet);
  if (st == HAP_ENOMEM) {
    hap_spec_free(&s);
    return hap_err_set(err, HAP_ENOMEM, "megatron: out of memory");
  }
  st = HAP_OK;
  for (int i = 0; i < s.n && st == HAP_OK; i++)
    st = set_key(&m, s.items[i].key, s.items[i].value, err);
  if (st == HAP_OK && s.fault != HAP_SPEC_OK)
    st = hap_err_set(err, HAP_EINVAL,
                     "megatron: '%s' is not of the form key=value (keys " MEGATRON_KEYS ")",
                     s.bad ? s.bad : "");
  hap_spec_free(&s);
  if (st == HAP_OK)
    *out = m;
  return st;
}

hap_status hap_megatron_layout(const hap_megatron_spec *m, const hap_graph *g, const hap_cluster *c,
                               const hap_synth_options *o, hap_megatron_spec *resolved,
                               hap_pipe_spec *pipe, hap_synth_options *stage, hap_err *err) {
  int32_t n = c->n_devices, tp = m->tp;
  if (tp == 0) {
    for (int32_t h = 1; h < c->n_hosts; h++)
      if (c->hosts[h].n_devices != c->hosts[0].n_devices)
        return hap_err_set(
            err, HAP_EINVAL, "megatron: hosts differ in size ('%s' %d devices, '%s' %d): give tp",
            c->hosts[0].name, c->hosts[0].n_devices, c->hosts[h].name, c->hosts[h].n_devices);
    tp = c->hosts[0].n_devices;
  }
  if (n % (tp * m->pp) != 0)
    return hap_err_set(err, HAP_EINVAL, "megatron: tp %d x pp %d does not divide the %d devices",
                       tp, m->pp, n);
  int32_t dp = m->dp > 0 ? m->dp : n / (tp * m->pp);
  if ((int64_t)tp * m->pp * dp != n)
    return hap_err_set(err, HAP_EINVAL,
                       "megatron: tp %d x pp %d x dp %d = %lld devices, the cluster has %d", tp,
                       m->pp, dp, (long long)tp * m->pp * dp, n);
  int64_t batch = hap_pipe_batch_of(g);
  if (batch <= 0 || batch % ((int64_t)m->mbs * dp) != 0)
    return hap_err_set(err, HAP_EINVAL,
                       "megatron: mbs %d x dp %d does not divide the batch of %lld samples", m->mbs,
                       dp, (long long)batch);
  *pipe = (hap_pipe_spec){.stages = m->pp,
                          .schedule = m->v > 1 ? HAP_PIPE_INTERLEAVED : HAP_PIPE_1F1B,
                          .chunks = m->v,
                          .micro_batches = (int32_t)(batch / ((int64_t)m->mbs * dp))};
  *stage = *o;
  stage->strategy = HAP_STRATEGY_MEGATRON_TP;
  stage->tensor_parallel = tp;
  stage->sequence_parallel = m->sp;
  if (m->recompute_given)
    stage->policy.recompute = m->recompute;
  stage->policy.micro_batches = pipe->micro_batches;
  *resolved = *m;
  resolved->tp = tp;
  resolved->dp = dp;
  return HAP_OK;
}

void hap_megatron_describe(const hap_megatron_spec *m, char *buf, size_t len) {
  snprintf(buf, len, "tp=%d,pp=%d,dp=%d,mbs=%d,v=%d,sp=%s", (int)m->tp, (int)m->pp, (int)m->dp,
           (int)m->mbs, (int)m->v, m->sp == HAP_SP_OFF ? "off" : "on");
}
