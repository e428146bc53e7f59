/* spec.c — the spec grammar "NAME[:KEY=VALUE[,KEY=VALUE...]]" (spec.h). */
#include "base/spec.h"

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A NUL-terminated copy of s[0..n), or NULL. */
static char *copy(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (p != NULL) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

static hap_status no_memory(hap_err *err) {
  return hap_err_set(err, HAP_ENOMEM, "out of memory reading a spec");
}

/* Room for one more item. */
static bool reserve(hap_spec *s) {
  if (s->n < s->cap)
    return true;
  int cap = s->cap ? 2 * s->cap : 8;
  hap_spec_item *items = realloc(s->items, (size_t)cap * sizeof *items);
  if (items == NULL)
    return false;
  s->items = items;
  s->cap = cap;
  return true;
}

size_t hap_spec_name_len(const char *text, hap_spec_names names) {
  const char *from = text;
  if (names == HAP_SPEC_PATH_NAME) {
    const char *slash = strrchr(text, '/');
    if (slash != NULL)
      from = slash;
  }
  const char *colon = strchr(from, ':');
  return colon != NULL ? (size_t)(colon - text) : strlen(text);
}

/* The items of `params` (the text after ':') into s, which has its name. `text` names the spec in
 * messages. */
static hap_status parse_items(const char *text, const char *params, hap_spec *s, hap_err *err) {
  for (const char *p = params;;) {
    size_t n = strcspn(p, ",");
    const char *eq = memchr(p, '=', n);
    if (n == 0 || eq == NULL || eq == p) {
      s->fault = n == 0 ? HAP_SPEC_EMPTY_ITEM : HAP_SPEC_NOT_KEY_VALUE;
      s->bad = copy(p, n);
      if (s->bad == NULL)
        return no_memory(err);
      if (n == 0)
        return hap_err_set(err, HAP_EINVAL,
                           "spec '%s': empty item, expected key=value[,key=value...]", text);
      return hap_err_set(err, HAP_EINVAL, "spec '%s': item '%s' is not of the form key=value", text,
                         s->bad);
    }
    if (!reserve(s))
      return no_memory(err);
    hap_spec_item *it = &s->items[s->n];
    it->key = copy(p, (size_t)(eq - p));
    it->value = copy(eq + 1, n - (size_t)(eq - p) - 1);
    if (it->key == NULL || it->value == NULL) {
      free(it->key);
      free(it->value);
      return no_memory(err);
    }
    s->n++;
    if (p[n] == '\0')
      return HAP_OK;
    p += n + 1;
  }
}

hap_status hap_spec_parse(const char *text, hap_spec_names names, hap_spec *out, hap_err *err) {
  memset(out, 0, sizeof *out);
  size_t n = hap_spec_name_len(text, names);
  out->name = copy(text, n);
  if (out->name == NULL)
    return no_memory(err);
  return text[n] == ':' ? parse_items(text, text + n + 1, out, err) : HAP_OK;
}

hap_status hap_spec_parse_params(const char *params, hap_spec *out, hap_err *err) {
  memset(out, 0, sizeof *out);
  out->name = copy("", 0);
  if (out->name == NULL)
    return no_memory(err);
  return params != NULL ? parse_items(params, params, out, err) : HAP_OK;
}

int hap_spec_find(const hap_spec *s, const char *key) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->items[i].key, key) == 0)
      return i;
  return -1;
}

hap_status hap_spec_set(hap_spec *s, const char *key, const char *value, hap_err *err) {
  if (key[0] == '\0' || strpbrk(key, "=,") != NULL || strchr(value, ',') != NULL)
    return hap_err_set(err, HAP_EINVAL,
                       "spec '%s': cannot set '%s=%s', expected a non-empty key without '=' or "
                       "',' and a value without ','",
                       s->name ? s->name : "", key, value);
  if (!reserve(s))
    return no_memory(err);
  char *k = copy(key, strlen(key)), *v = copy(value, strlen(value));
  if (k == NULL || v == NULL) {
    free(k);
    free(v);
    return no_memory(err);
  }
  int kept = 0;
  for (int i = 0; i < s->n; i++) {
    if (strcmp(s->items[i].key, key) == 0) {
      free(s->items[i].key);
      free(s->items[i].value);
    } else {
      s->items[kept++] = s->items[i];
    }
  }
  memmove(s->items + 1, s->items, (size_t)kept * sizeof *s->items);
  s->items[0] = (hap_spec_item){k, v};
  s->n = kept + 1;
  return HAP_OK;
}

hap_status hap_spec_format(const hap_spec *s, char *buf, size_t len, hap_err *err) {
  const char *name = s->name ? s->name : "";
  size_t off = (size_t)snprintf(buf, len, "%s", name);
  for (int i = 0; i < s->n && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, "%c%s=%s", i ? ',' : ':', s->items[i].key,
                            s->items[i].value);
  if (off >= len)
    return hap_err_set(err, HAP_EINVAL, "spec '%s...': longer than %zu characters", name, len - 1);
  return HAP_OK;
}

void hap_spec_free(hap_spec *s) {
  for (int i = 0; i < s->n; i++) {
    free(s->items[i].key);
    free(s->items[i].value);
  }
  free(s->items);
  free(s->name);
  free(s->bad);
  memset(s, 0, sizeof *s);
}

bool hap_spec_number(const char *s, size_t n, double *out) {
  char buf[64];
  if (n == 0 || n >= sizeof buf || isspace((unsigned char)s[0]))
    return false;
  memcpy(buf, s, n);
  buf[n] = '\0';
  char *end;
  double v = strtod(buf, &end);
  if (end != buf + n || !isfinite(v))
    return false;
  *out = v;
  return true;
}
