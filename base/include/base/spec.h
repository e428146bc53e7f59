/* spec.h — the one grammar of specs, "NAME[:KEY=VALUE[,KEY=VALUE...]]": model specs
 * ("bert-base:layers=24"), cluster specs ("paper-hetero:gpus_per_host=4") and the specs hap-sim's
 * sweeps edit are all read, edited and written here.
 *
 * Grammar. NAME runs to the first ':' (with HAP_SPEC_PATH_NAME: to the first ':' after the last
 * '/', so a NAME that is a file path may have ':' in its directories); it may be empty. When a ':'
 * follows, the rest is one or more items separated by ','; an item is KEY=VALUE: KEY is not empty
 * and runs to the item's first '=', VALUE is the rest of the item (it may be empty and may hold
 * '=' but not ','). Nothing else is checked here: whether a NAME exists, which keys are known,
 * whether one may repeat and what a value must look like are the caller's (zoo.c, cluster_io.c),
 * and so are the words of its error messages.
 *
 * Ownership: a hap_spec owns copies of its strings; hap_spec_free releases them and leaves a
 * zeroed spec (safe to free twice, and after a failed parse). Nothing here keeps a pointer to the
 * text it parsed. */
#ifndef HAP_SPEC_H
#define HAP_SPEC_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

/* Where NAME ends. */
typedef enum hap_spec_names {
  HAP_SPEC_PLAIN_NAME = 0, /* at the first ':' (model names) */
  HAP_SPEC_PATH_NAME,      /* at the first ':' after the last '/' (cluster names and files) */
} hap_spec_names;

/* Why a parse stopped before the end of the text. */
typedef enum hap_spec_fault {
  HAP_SPEC_OK = 0,
  HAP_SPEC_EMPTY_ITEM,    /* "name:", "name:a=1,", "name:a=1,,b=2", "name:,a=1" */
  HAP_SPEC_NOT_KEY_VALUE, /* an item without '=', or with an empty key ("name:a", "name:=1") */
} hap_spec_fault;

typedef struct hap_spec_item {
  char *key;   /* not empty; no '=' or ',' */
  char *value; /* may be empty; no ',' */
} hap_spec_item;

typedef struct hap_spec {
  char *name;           /* NAME; "" for the bare parameters of hap_spec_parse_params */
  hap_spec_item *items; /* in the order written; a key may occur more than once */
  int n;                /* items */
  /* A malformed spec: `fault` says why, `bad` is a copy of the offending item ("" for an empty
   * one), and items holds those before it, so a caller that checks items one by one reports the
   * errors in the order they are written. HAP_SPEC_OK and NULL otherwise. */
  hap_spec_fault fault;
  char *bad;
  int cap; /* allocated items */
} hap_spec;

/* Parse `text` (not NULL) into `out` (overwritten; free it with hap_spec_free in every case).
 * HAP_OK; HAP_EINVAL for a malformed spec ("spec 'TEXT': ..." in err; out->fault and out->bad
 * as above); HAP_ENOMEM. */
hap_status hap_spec_parse(const char *text, hap_spec_names names, hap_spec *out, hap_err *err);

/* The same for the part after the ':' alone ("key=value,..."); NULL means no items (while ""
 * is an empty item). out->name is "". */
hap_status hap_spec_parse_params(const char *params, hap_spec *out, hap_err *err);

/* Bytes of `text` that are NAME (text[len] is ':' or the end). */
size_t hap_spec_name_len(const char *text, hap_spec_names names);

/* Index of the first item with `key`, or -1. */
int hap_spec_find(const hap_spec *s, const char *key);

/* Set key=value: every item with `key` is dropped and key=value becomes the first item, so a
 * reader meets the value just set before the others (hap-sim's sweeps rely on this order: a
 * point's error names the swept key first). HAP_EINVAL (with a message) when key is empty or
 * holds '=' or ',', or value holds ','; HAP_ENOMEM. */
hap_status hap_spec_set(hap_spec *s, const char *key, const char *value, hap_err *err);

/* "NAME" or "NAME:k=v,k=v" into buf (len > 0). HAP_EINVAL, with a message, when it does not fit
 * (buf then holds a truncated text). A well-formed spec parsed and formatted comes out as the
 * text it was parsed from. */
hap_status hap_spec_format(const hap_spec *s, char *buf, size_t len, hap_err *err);

void hap_spec_free(hap_spec *s);

/* A value that is a finite real in strtod syntax filling exactly s[0..n): no leading space,
 * nothing after it, at most 63 bytes. False otherwise (*out untouched). */
bool hap_spec_number(const char *s, size_t n, double *out);

#endif
