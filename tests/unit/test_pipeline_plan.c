/* Pipelined plans (plan/pipeline.h) and their files (plan/pipeline_io.h): a pipeline from the
 * stage-granularity estimate validates and reads back byte for byte; a one-stage plan is written as
 * the 1.x file it always was and a 1.x file reads as a one-stage pipeline; every malformed field
 * of a 2.0 file and every inconsistent pipeline gets one line naming it. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipe/estimate.h"
#include "plan/pipeline_io.h"
#include "synth/synth.h"
#include "test_util.h"

#define MLP   "mlp:layers=4,batch=16,seq=8,hidden=64"
#define HOSTS "paper-homo:gpus_per_host=2,hosts=2"

typedef struct fixture {
  hap_graph *g;
  hap_cluster *c;
  hap_pipe_estimate *e; /* its pipeline: 2 groups of 2 devices, 1f1b, 4 micro-batches */
  char *text;           /* the pipeline written */
} fixture;

static char *write_text(const hap_pipeline *pl, const hap_graph *g, const hap_cluster *c) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  hap_err err = {0};
  cr_assert_eq(hap_pipeline_write(pl, g, c, f, &err), HAP_OK, "%s", err.msg);
  fclose(f);
  return buf;
}

static void setup(fixture *f, const char *spec) {
  f->g = model(MLP);
  f->c = bundled(HOSTS);
  hap_pipe_spec ps;
  hap_err err = {0};
  cr_assert_eq(hap_pipe_spec_parse(spec, &ps, &err), HAP_OK, "%s", err.msg);
  hap_synth_options o = {.strategy = HAP_STRATEGY_HAP};
  cr_assert_eq(hap_pipe_estimate_run(f->g, f->c, &ps, &o, &f->e, &err), HAP_OK, "%s", err.msg);
  f->text = write_text(f->e->pipeline, f->g, f->c);
}

static void teardown(fixture *f) {
  free(f->text);
  hap_pipe_estimate_destroy(f->e);
  hap_cluster_destroy(f->c);
  hap_graph_destroy(f->g);
}

static hap_pipeline *read_text(const fixture *f, const char *text) {
  hap_pipeline *pl = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_pipeline_from_json(text, strlen(text), "p.json", f->g, f->c, &pl, &err), HAP_OK,
               "%s", err.msg);
  return pl;
}

/* `text` with its first `from` replaced by `to` (which must be there). */
static char *replace(const char *text, const char *from, const char *to) {
  const char *at = strstr(text, from);
  cr_assert_not_null(at, "'%s' not in the pipeline text", from);
  size_t head = (size_t)(at - text), n = strlen(text) - strlen(from) + strlen(to) + 1;
  char *out = malloc(n);
  cr_assert_not_null(out);
  snprintf(out, n, "%.*s%s%s", (int)head, text, to, at + strlen(from));
  return out;
}

/* Reading f's text with `from` replaced by `to` fails with `st` and one line that names the file
 * and holds `want`. */
static void expect_unreadable(const fixture *f, const char *from, const char *to, hap_status st,
                              const char *want) {
  char *text = replace(f->text, from, to);
  hap_pipeline *pl = (hap_pipeline *)1;
  hap_err err = {0};
  cr_expect_eq(hap_pipeline_from_json(text, strlen(text), "p.json", f->g, f->c, &pl, &err), st,
               "%s -> %s: status %d: %s", from, to, err.status, err.msg);
  cr_expect_null(pl);
  cr_expect_eq(strncmp(err.msg, "p.json: ", 8), 0, "names the file: %s", err.msg);
  cr_expect_null(strchr(err.msg, '\n'), "one line: %s", err.msg);
  cr_expect_not_null(strstr(err.msg, want), "'%s' not in: %s", want, err.msg);
  free(text);
}

/* hap_pipeline_validate on f's pipeline, changed by the caller, fails naming `want`. */
static void expect_invalid(const fixture *f, const char *want) {
  hap_err err = {0};
  cr_expect_eq(hap_pipeline_validate(f->e->pipeline, f->g, f->c, &err), HAP_EINVAL, "%s", err.msg);
  cr_expect_null(strchr(err.msg, '\n'), "one line: %s", err.msg);
  cr_expect_not_null(strstr(err.msg, want), "'%s' not in: %s", want, err.msg);
}

Test(pipeline_plan, an_estimate_pipeline_validates_and_reads_back_byte_for_byte) {
  fixture f;
  setup(&f, "stages=2,micro_batches=4");
  const hap_pipeline *pl = f.e->pipeline;
  hap_err err = {0};
  cr_assert_eq(hap_pipeline_validate(pl, f.g, f.c, &err), HAP_OK, "%s", err.msg);
  cr_expect_eq(pl->n_groups, 2);
  cr_expect_eq(pl->n_stages, 2);
  cr_expect_eq(pl->policy.micro_batches, 4);
  cr_expect_gt(pl->predicted_iteration_s, 0);
  cr_expect_eq(pl->stages[0].plan->n_devices, 2);
  cr_expect_not_null(strstr(f.text, "\"version\": \"2.0\""), "%s", f.text);
  cr_expect_not_null(strstr(f.text, "\"cluster\": {\"name\": \"paper-homo[group 1]\""),
                     "each stage plan names its group's cluster: %s", f.text);
  hap_pipeline *back = read_text(&f, f.text);
  cr_expect_eq(back->n_stages, 2);
  cr_expect_eq(back->schedule, HAP_PIPE_1F1B);
  cr_expect_eq(back->stages[1].first, pl->stages[1].first);
  cr_expect_eq(back->predicted_iteration_s, pl->predicted_iteration_s);
  char *again = write_text(back, f.g, f.c);
  cr_expect_str_eq(again, f.text);
  free(again);
  hap_pipeline_destroy(back);
  teardown(&f);
}

Test(pipeline_plan, interleaved_chunks_round_trip) {
  fixture f;
  setup(&f, "stages=2,schedule=interleaved,chunks=2,micro_batches=4");
  cr_expect_eq(f.e->pipeline->n_stages, 4);
  cr_expect_eq(f.e->pipeline->stages[3].group, 1);
  hap_pipeline *back = read_text(&f, f.text);
  cr_expect_eq(back->chunks, 2);
  cr_expect_eq(back->schedule, HAP_PIPE_INTERLEAVED);
  char *again = write_text(back, f.g, f.c);
  cr_expect_str_eq(again, f.text);
  free(again);
  hap_pipeline_destroy(back);
  teardown(&f);
}

/* A one-stage pipeline is an ordinary plan: written as format 1.0, the same bytes hap_plan_write
 * writes, and a 1.0 file reads back as a one-stage pipeline of every device. */
Test(pipeline_plan, one_stage_is_the_plan_file_it_always_was) {
  hap_graph *g = model(MLP);
  hap_cluster *c = bundled(HOSTS);
  hap_synth_options o = {.strategy = HAP_STRATEGY_HAP};
  hap_plan *plan = NULL;
  hap_err err = {0};
  cr_assert_eq(hap_synthesize(g, c, &o, &plan, NULL, &err), HAP_OK, "%s", err.msg);
  char *buf = NULL;
  size_t len = 0;
  FILE *mf = open_memstream(&buf, &len);
  cr_assert_eq(hap_plan_write(plan, g, c, mf, &err), HAP_OK, "%s", err.msg);
  fclose(mf);
  hap_pipeline *pl = NULL;
  cr_assert_eq(hap_pipeline_of_plan(plan, g, &pl, &err), HAP_OK, "%s", err.msg);
  cr_expect(hap_pipeline_is_flat(pl));
  cr_assert_eq(hap_pipeline_validate(pl, g, c, &err), HAP_OK, "%s", err.msg);
  char *text = write_text(pl, g, c);
  cr_expect_str_eq(text, buf);
  cr_expect_not_null(strstr(text, "\"version\": \"1.0\""));
  hap_pipeline *back = NULL;
  cr_assert_eq(hap_pipeline_from_json(buf, strlen(buf), "p.json", g, c, &back, &err), HAP_OK, "%s",
               err.msg);
  cr_expect(hap_pipeline_is_flat(back));
  cr_expect_eq(back->stages[0].end, g->n_nodes);
  cr_expect_eq(back->n_devices, 4);
  hap_pipeline_destroy(back);
  hap_pipeline_destroy(pl);
  free(text);
  free(buf);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
}

/* The one-stage reader refuses a pipelined file with a line that says what it is. */
Test(pipeline_plan, the_plan_reader_names_a_pipelined_file) {
  fixture f;
  setup(&f, "stages=2,micro_batches=4");
  hap_plan *p = NULL;
  hap_err err = {0};
  cr_expect_eq(hap_plan_from_json(f.text, strlen(f.text), "p.json", f.g, f.c, &p, &err),
               HAP_EINVAL);
  cr_expect_null(p);
  cr_expect_not_null(strstr(err.msg, "p.json: version: a pipelined plan"), "%s", err.msg);
  teardown(&f);
}

Test(pipeline_plan, malformed_files_get_one_line_naming_the_field) {
  fixture f;
  setup(&f, "stages=2,micro_batches=4");
  expect_unreadable(&f, "\"schedule\": \"1f1b\"", "\"schedule\": \"zigzag\"", HAP_EPARSE,
                    "p.json: pipeline.schedule: is \"zigzag\", expected one of gpipe, 1f1b");
  expect_unreadable(&f, "\"chunks\": 1", "\"chunks\": 0", HAP_EPARSE, "pipeline.chunks: is 0");
  expect_unreadable(&f, "\"chunks\": 1", "\"chunks\": 2", HAP_EPARSE,
                    "stages: has 2 entries, expected 4 (2 groups x 2 chunks)");
  expect_unreadable(&f, "[0, 1]", "[0, 2]", HAP_EINVAL,
                    "groups[1][0]: device 2 is in an earlier group");
  expect_unreadable(&f, "[0, 1]", "[1, 0]", HAP_EINVAL,
                    "groups[0][1]: device 0 after 1, expected increasing device ids");
  expect_unreadable(&f, "[0, 1]", "[0, 9]", HAP_EPARSE, "pipeline.groups[0][1]: is 9");
  expect_unreadable(&f, "[0, 1]", "[]", HAP_EPARSE, "pipeline.groups[0]: is empty");
  expect_unreadable(&f, "[0, 1]", "[0, 1, 2]", HAP_EPARSE,
                    "pipeline.groups: hold 5 devices, expected every one");
  expect_unreadable(&f, "\"group\": 1", "\"group\": 0", HAP_EINVAL,
                    "stages[1].group: 0, expected 1");
  expect_unreadable(&f, "\"group\": 1", "\"group\": 7", HAP_EPARSE, "stages[1].group: is 7");
  expect_unreadable(&f, "\"nodes\": [0, ", "\"nodes\": [1, ", HAP_EINVAL, "stages[0].nodes: [1, ");
  expect_unreadable(&f, "\"nodes\": [0, ", "\"nodes\": [0, 1, ", HAP_EPARSE,
                    "stages[0].nodes: has 3 entries, expected [first, end]");
  expect_unreadable(&f, "\"nodes\": [0, ", "\"colour\": 1, \"nodes\": [0, ", HAP_EPARSE,
                    "stages[0].colour: unknown key");
  expect_unreadable(&f, "\"predicted\": {\"iteration_s\": ", "\"predicted\": {\"iteration_s\": -",
                    HAP_EPARSE, "predicted.iteration_s: ");
  expect_unreadable(&f, "\"pipeline\": {", "\"pipeline\": {\"depth\": 2, ", HAP_EPARSE,
                    "pipeline.depth: unknown key");
  expect_unreadable(&f, "\"pipeline\": {", "\"pipe\": {", HAP_EPARSE, "pipe: unknown key");
  teardown(&f);
}

Test(pipeline_plan, a_stage_plans_errors_name_the_stage) {
  fixture f;
  setup(&f, "stages=2,micro_batches=4");
  /* the second stage plan was made for another cluster: one hex digit of its digest differs */
  const char *key = "paper-homo[group 1]\", \"digest\": \"";
  char *text = replace(f.text, key, key);
  char *digit = strstr(text, key);
  cr_assert_not_null(digit);
  digit += strlen(key);
  *digit = *digit == '0' ? '1' : '0';
  hap_pipeline *pl = (hap_pipeline *)1;
  hap_err err = {0};
  cr_expect_neq(hap_pipeline_from_json(text, strlen(text), "p.json", f.g, f.c, &pl, &err), HAP_OK);
  cr_expect_null(pl);
  cr_expect_not_null(strstr(err.msg, "p.json: stages[1].plan: cluster: made for cluster "
                                     "'paper-homo[group 1]'"),
                     "%s", err.msg);
  free(text);
  teardown(&f);
}

Test(pipeline_plan, inconsistent_pipelines_fail_validation) {
  fixture f;
  setup(&f, "stages=2,micro_batches=4");
  hap_pipeline *pl = f.e->pipeline;
  pl->stages[1].end -= 1;
  expect_invalid(&f, "stages[1].nodes: ends at");
  pl->stages[1].end += 1;
  pl->schedule = HAP_PIPE_INTERLEAVED;
  expect_invalid(&f, "chunks: 1 with schedule interleaved, expected 2 or more");
  pl->schedule = HAP_PIPE_GPIPE;
  pl->stages[1].plan->policy.optimizer = HAP_OPT_ADAM;
  expect_invalid(&f, "stages[1].plan.policy: differs from the pipeline's");
  pl->stages[1].plan->policy.optimizer = HAP_OPT_SGD;
  pl->group_devices[2] = 1;
  expect_invalid(&f, "groups[1][0]: device 1 is in an earlier group");
  pl->group_devices[2] = 2;
  hap_plan *keep = pl->stages[0].plan;
  pl->stages[0].plan = NULL;
  expect_invalid(&f, "stages[0].plan: missing");
  pl->stages[0].plan = keep;
  pl->graph_digest ^= 1;
  expect_invalid(&f, "graph: made for 'mlp'");
  pl->graph_digest ^= 1;
  hap_err err = {0};
  cr_expect_eq(hap_pipeline_validate(pl, f.g, f.c, &err), HAP_OK, "restored: %s", err.msg);
  teardown(&f);
}

Test(pipeline_plan, interleaving_needs_micro_batches_in_multiples_of_the_groups) {
  fixture f;
  setup(&f, "stages=2,schedule=interleaved,chunks=2,micro_batches=4");
  f.e->pipeline->policy.micro_batches = 1;
  expect_invalid(&f, "micro_batches: 1 with schedule interleaved over 2 groups, expected a "
                     "multiple of 2");
  teardown(&f);
}
