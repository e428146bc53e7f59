/* hap-model — list, inspect, export and check model graphs (zoo specs or hap-graph files), and
 * import ONNX models as hap-graph files. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/json_write.h"
#include "hap_config.h"
#include "harness/format.h"
#include "harness/report.h"
#include "import/onnx.h"
#include "model/graph_io.h"
#include "model/stats.h"
#include "model/zoo.h"
#include "store/tensor_file.h"

static const char *prog = "hap-model";

static void usage(FILE *f) {
  fprintf(
      f, "Usage: hap-model COMMAND [OPTIONS]\n"
         "\n"
         "Inspect the model graphs that hap plans, simulates and runs.\n"
         "\n"
         "Commands:\n"
         "  list                 the bundled models and their options\n"
         "  stats MODEL          parameters, FLOPs per iteration, activation memory, per-op table\n"
         "  export MODEL -o FILE write MODEL as a hap-graph JSON file\n"
         "  check FILE...        validate hap-graph files (one error line per bad file)\n"
         "  import FILE.onnx -o FILE  an ONNX model as a hap-graph file (docs/import.md)\n"
         "  ops                  the op table: inputs, attributes and what each op computes\n"
         "\n"
         "MODEL is a zoo name with options, e.g. 'bert-base:layers=24,batch=256,seq=128',\n"
         "or a path to a hap-graph file.\n"
         "\n"
         "Options:\n"
         "  -f, --format FMT     table (default), csv or json (list, stats, ops)\n"
         "  -o, --output FILE    output path for export ('-' = stdout)\n"
         "  -q, --quiet          print nothing on success (check, export, import)\n"
         "      --loss HOW       import: output (the model's output is the scalar loss;\n"
         "                       default), mean, sum, or cross_entropy (against a new int64\n"
         "                       input 'target')\n"
         "      --name NAME      import: the graph's name\n"
         "      --buffers A,B    import: these float initializers are buffers (constant\n"
         "                       state, no gradient), not parameters\n"
         "      --weights FILE   import: also write the parameters' and buffers' values as a\n"
         "                       hap-weights file (for hap-run --weights)\n"
         "  -h, --help           this help\n"
         "  -V, --version        print the version\n"
         "\n"
         "Exit status: 0 ok, 1 failure (e.g. an invalid graph), 2 usage error.\n");
}

static const struct {
  const char *cmd, *text;
} command_help[] = {
    {"list", "Usage: hap-model list [--format table|csv|json]\n\n"
             "The bundled models, each with its options, types and defaults.\n"},
    {"stats",
     "Usage: hap-model stats MODEL [--format table|csv|json]\n\n"
     "Parameters, forward and backward FLOP per iteration (2 per multiply-add), activation\n"
     "and input bytes, and a per-op-kind breakdown with each kind's share of the FLOPs.\n"
     "MODEL is a zoo spec ('vit:layers=24') or a hap-graph file.\n"},
    {"export", "Usage: hap-model export MODEL -o FILE\n\n"
               "Write MODEL as a hap-graph JSON file (atomically; '-' writes to stdout).\n"},
    {"check",
     "Usage: hap-model check FILE...\n\n"
     "Read and validate hap-graph files. A bad file gets one line on stderr naming the\n"
     "file, the JSON path and what was expected; the exit status is 1 if any file is bad.\n"},
    {"import",
     "Usage: hap-model import FILE.onnx -o FILE [--loss output|mean|sum|cross_entropy]\n"
     "                        [--name NAME] [--buffers NAME,...] [--weights FILE.h5]\n\n"
     "Map an ONNX model (fixed input shapes; e.g. torch.onnx.export) onto hap's ops and write\n"
     "it as a hap-graph file (atomically). Float initializers become parameters under their\n"
     "names (--buffers: buffers). The loss is the model's scalar output, or --loss appends one. "
     "Every node hap\n"
     "cannot map gets a line (node, op type, why); then nothing is written and the exit\n"
     "status is 1. --weights writes the initializers' values (and the constants the import\n"
     "made buffers, such as a mask) for hap-run --weights; the inputs then come from hap-run's\n"
     "own initialisation. docs/import.md lists the ops.\n"},
    {"ops",
     "Usage: hap-model ops [--format table|csv|json]\n\n"
     "The op table: each op's inputs (parameters marked), outputs, attributes and meaning.\n"},
};

typedef struct opts {
  hap_format format;
  const char *output, *name, *buffers, *weights;
  bool quiet;
  hap_onnx_loss loss;
} opts;

/* ---- list ---------------------------------------------------------------------------------- */

static const char *opt_type_name(hap_model_opt_type t) {
  return t == HAP_MOPT_INT ? "int" : t == HAP_MOPT_FLOAT ? "float" : "choice";
}

static void opt_default(const hap_model_opt *o, char *buf, size_t len) {
  if (o->type == HAP_MOPT_CHOICE) {
    /* choices are "a,b,c": print the def-th entry */
    const char *c = o->choices;
    for (int i = 0; i < (int)o->def && c; i++) {
      c = strchr(c, ',');
      if (c)
        c++;
    }
    size_t n = c ? strcspn(c, ",") : 0;
    snprintf(buf, len, "%.*s", (int)n, c ? c : "");
  } else {
    hap_format_double(o->def, buf, len);
  }
}

static int cmd_list(const opts *o) {
  if (o->format == HAP_FORMAT_JSON) {
    hap_jw w;
    hap_jw_init(&w, stdout, 2);
    hap_jw_begin_array(&w);
    for (int i = 0; i < hap_zoo_count(); i++) {
      const hap_model_def *m = hap_zoo_get(i);
      hap_jw_begin_object(&w);
      hap_jw_key(&w, "name");
      hap_jw_str(&w, m->name);
      hap_jw_key(&w, "summary");
      hap_jw_str(&w, m->summary);
      hap_jw_key(&w, "options");
      hap_jw_begin_array(&w);
      for (int k = 0; k < m->n_opts; k++) {
        char def[64];
        opt_default(&m->opts[k], def, sizeof def);
        hap_jw_begin_object_inline(&w);
        hap_jw_key(&w, "name");
        hap_jw_str(&w, m->opts[k].name);
        hap_jw_key(&w, "type");
        hap_jw_str(&w, opt_type_name(m->opts[k].type));
        hap_jw_key(&w, "default");
        hap_jw_str(&w, def);
        if (m->opts[k].choices) {
          hap_jw_key(&w, "choices");
          hap_jw_str(&w, m->opts[k].choices);
        }
        hap_jw_key(&w, "doc");
        hap_jw_str(&w, m->opts[k].doc);
        hap_jw_end_object(&w);
      }
      hap_jw_end_array(&w);
      hap_jw_end_object(&w);
    }
    hap_jw_end_array(&w);
    return hap_jw_finish(&w) ? 0 : 1;
  }
  if (o->format == HAP_FORMAT_CSV)
    printf("model,option,type,default,doc\n");
  for (int i = 0; i < hap_zoo_count(); i++) {
    const hap_model_def *m = hap_zoo_get(i);
    if (o->format == HAP_FORMAT_TABLE)
      printf("%s%-10s %s\n", i ? "\n" : "", m->name, m->summary);
    for (int k = 0; k < m->n_opts; k++) {
      const hap_model_opt *op = &m->opts[k];
      char def[64];
      opt_default(op, def, sizeof def);
      if (o->format == HAP_FORMAT_CSV)
        printf("%s,%s,%s,%s,\"%s\"\n", m->name, op->name, opt_type_name(op->type), def, op->doc);
      else if (op->type == HAP_MOPT_CHOICE)
        printf("  %-12s = %-10s %s (one of %s)\n", op->name, def, op->doc, op->choices);
      else
        printf("  %-12s = %-10s %s\n", op->name, def, op->doc);
    }
  }
  return 0;
}

/* ---- stats --------------------------------------------------------------------------------- */

static void stats_json(const hap_graph *g, const hap_graph_stats *s) {
  hap_jw w;
  hap_jw_init(&w, stdout, 2);
  hap_jw_begin_object(&w);
  hap_jw_key(&w, "model");
  hap_jw_str(&w, g->name);
  hap_jw_key(&w, "source");
  if (g->source)
    hap_jw_str(&w, g->source);
  else
    hap_jw_null(&w);
  hap_jw_key(&w, "nodes");
  hap_jw_int(&w, s->n_nodes);
  hap_jw_key(&w, "tensors");
  hap_jw_int(&w, s->n_tensors);
  hap_jw_key(&w, "segments");
  hap_jw_int(&w, s->n_segments);
  hap_jw_key(&w, "parameters");
  hap_jw_double(&w, s->params);
  hap_jw_key(&w, "parameter_bytes");
  hap_jw_double(&w, s->param_bytes);
  hap_jw_key(&w, "buffer_bytes");
  hap_jw_double(&w, s->buffer_bytes);
  hap_jw_key(&w, "input_bytes");
  hap_jw_double(&w, s->input_bytes);
  hap_jw_key(&w, "activation_bytes");
  hap_jw_double(&w, s->activation_bytes);
  hap_jw_key(&w, "forward_flop");
  hap_jw_double(&w, s->fwd_flops);
  hap_jw_key(&w, "backward_flop");
  hap_jw_double(&w, s->bwd_flops);
  hap_jw_key(&w, "ops");
  hap_jw_begin_array(&w);
  for (int k = 0; k < HAP_OP_COUNT; k++) {
    const hap_op_kind_stats *p = &s->per_op[k];
    if (p->nodes == 0)
      continue;
    hap_jw_begin_object_inline(&w);
    hap_jw_key(&w, "op");
    hap_jw_str(&w, hap_op_name((hap_op)k));
    hap_jw_key(&w, "nodes");
    hap_jw_int(&w, p->nodes);
    hap_jw_key(&w, "parameters");
    hap_jw_double(&w, p->params);
    hap_jw_key(&w, "forward_flop");
    hap_jw_double(&w, p->fwd_flops);
    hap_jw_key(&w, "backward_flop");
    hap_jw_double(&w, p->bwd_flops);
    hap_jw_end_object(&w);
  }
  hap_jw_end_array(&w);
  hap_jw_end_object(&w);
  hap_jw_finish(&w);
}

static void stats_table(const hap_graph *g, const hap_graph_stats *s, bool csv) {
  char a[64], b[64], c[64];
  double total = s->fwd_flops + s->bwd_flops;
  if (csv) {
    printf("op,nodes,parameters,forward_flop,backward_flop,share\n");
  } else {
    printf("model        %s\n", g->source ? g->source : g->name);
    printf("graph        %d nodes, %d tensors, %d segment%s\n", s->n_nodes, s->n_tensors,
           s->n_segments, s->n_segments == 1 ? "" : "s");
    printf("parameters   %s (%s)\n", hap_fmt_si(s->params, "", a, sizeof a),
           hap_fmt_bytes(s->param_bytes, b, sizeof b));
    printf("FLOP/iter    %s forward + %s backward = %s\n",
           hap_fmt_si(s->fwd_flops, "", a, sizeof a), hap_fmt_si(s->bwd_flops, "", b, sizeof b),
           hap_fmt_si(total, "", c, sizeof c));
    printf("activations  %s per forward pass (all kept), inputs %s, buffers %s\n",
           hap_fmt_bytes(s->activation_bytes, a, sizeof a),
           hap_fmt_bytes(s->input_bytes, b, sizeof b), hap_fmt_bytes(s->buffer_bytes, c, sizeof c));
    printf("\n%-22s %6s %12s %12s %12s %7s\n", "op", "nodes", "params", "fwd FLOP", "bwd FLOP",
           "share");
  }
  for (int k = 0; k < HAP_OP_COUNT; k++) {
    const hap_op_kind_stats *p = &s->per_op[k];
    if (p->nodes == 0)
      continue;
    double share = total > 0 ? 100 * (p->fwd_flops + p->bwd_flops) / total : 0;
    if (csv)
      printf("%s,%d,%.17g,%.17g,%.17g,%.4f\n", hap_op_name((hap_op)k), p->nodes, p->params,
             p->fwd_flops, p->bwd_flops, share);
    else
      printf("%-22s %6d %12s %12s %12s %6.2f%%\n", hap_op_name((hap_op)k), p->nodes,
             hap_fmt_si(p->params, "", a, sizeof a), hap_fmt_si(p->fwd_flops, "", b, sizeof b),
             hap_fmt_si(p->bwd_flops, "", c, sizeof c), share);
  }
}

static int cmd_stats(const opts *o, const char *spec) {
  hap_err err = {0};
  hap_graph *g = NULL;
  if (hap_model_load(spec, &g, &err) != HAP_OK) {
    hap_cli_error(prog, &err);
    return 1;
  }
  hap_graph_stats s;
  hap_graph_stats_compute(g, &s);
  if (o->format == HAP_FORMAT_JSON)
    stats_json(g, &s);
  else
    stats_table(g, &s, o->format == HAP_FORMAT_CSV);
  hap_graph_destroy(g);
  return 0;
}

/* ---- export / check ------------------------------------------------------------------------ */

static int cmd_export(const opts *o, const char *spec) {
  if (o->output == NULL)
    return hap_report_usage(prog, -1, "export needs -o FILE ('-' for stdout)");
  hap_err err = {0};
  hap_graph *g = NULL;
  if (hap_model_load(spec, &g, &err) != HAP_OK ||
      hap_graph_write_file(g, o->output, &err) != HAP_OK) {
    hap_cli_error(prog, &err);
    hap_graph_destroy(g);
    return 1;
  }
  if (!o->quiet && strcmp(o->output, "-") != 0)
    fprintf(stderr, "%s: wrote %s (%d nodes, %d tensors)\n", prog, o->output, g->n_nodes,
            g->n_tensors);
  hap_graph_destroy(g);
  return 0;
}

static int cmd_check(const opts *o, int n, char **files) {
  int bad = 0;
  for (int i = 0; i < n; i++) {
    hap_err err = {0};
    hap_graph *g = NULL;
    if (hap_graph_read_file(files[i], &g, &err) != HAP_OK) {
      hap_cli_error(prog, &err);
      bad++;
      continue;
    }
    hap_graph_stats s;
    hap_graph_stats_compute(g, &s);
    char a[64];
    if (!o->quiet)
      printf("%s: ok: %s, %d nodes, %d tensors, %s parameters\n", files[i], g->name, g->n_nodes,
             g->n_tensors, hap_fmt_si(s.params, "", a, sizeof a));
    hap_graph_destroy(g);
  }
  return bad ? 1 : 0;
}

/* --weights: every parameter's and buffer's values from the ONNX file (or made by the import). */
static hap_status write_weights(const char *path, const char *onnx, const hap_graph *g,
                                const void *const *values, hap_err *err) {
  for (int32_t t = 0; t < g->n_tensors; t++) {
    const hap_tensor *tn = &g->tensors[t];
    if ((tn->kind == HAP_TENSOR_PARAMETER || tn->kind == HAP_TENSOR_BUFFER) && values[t] == NULL)
      return hap_err_set(err, HAP_EUNSUPPORTED,
                         "--weights %s: %s: %s '%s' is %s; hap-weights holds float32, int64 and "
                         "int32 values",
                         path, onnx, hap_tensor_kind_name(tn->kind), tn->name,
                         hap_dtype_name(tn->dtype));
  }
  return hap_weights_write(path, g, values, err);
}

/* A note (stderr) when parameters or buffers feed more than two nodes each: one tensor shared far
 * apart (tied weights, or initializers an exporter merged because their values were equal) keeps
 * its layouts in every state of hap-synth's search over its whole span (docs/import.md). */
static void note_shared(const char *file, const hap_graph *g) {
  int32_t *uses = calloc((size_t)g->n_tensors + 1, sizeof *uses);
  if (uses == NULL)
    return;
  for (int32_t n = 0; n < g->n_nodes; n++)
    for (int32_t i = 0; i < g->nodes[n].n_inputs; i++)
      uses[g->nodes[n].inputs[i]]++;
  int32_t shared = 0, most = -1;
  for (int32_t t = 0; t < g->n_tensors; t++) {
    hap_tensor_kind k = g->tensors[t].kind;
    if ((k != HAP_TENSOR_PARAMETER && k != HAP_TENSOR_BUFFER) || uses[t] <= 2)
      continue;
    shared++;
    most = most < 0 || uses[t] > uses[most] ? t : most;
  }
  if (shared > 0)
    fprintf(stderr,
            "%s: note: %s: %d parameter%s or buffer%s feed%s more than 2 nodes each (up to %d: "
            "'%s'); a tensor shared far apart slows hap-synth's search (docs/import.md)\n",
            prog, file, shared, shared > 1 ? "s" : "", shared > 1 ? "s" : "", shared > 1 ? "" : "s",
            uses[most], g->tensors[most].name);
  free(uses);
}

static int cmd_import(const opts *o, const char *file) {
  if (o->output == NULL)
    return hap_report_usage(prog, -1, "import needs -o FILE ('-' for stdout)");
  hap_err err = {0};
  hap_graph *g = NULL;
  char *report = NULL;
  hap_onnx_options io = {.loss = o->loss, .name = o->name, .buffers = o->buffers};
  void **values = NULL;
  hap_status st =
      hap_onnx_import(file, &io, &g, o->weights != NULL ? &values : NULL, &report, &err);
  if (report != NULL)
    for (const char *line = report; *line != '\0';) {
      size_t n = strcspn(line, "\n");
      fprintf(stderr, "%s: %.*s\n", prog, (int)n, line);
      line += n + (line[n] == '\n');
    }
  free(report);
  if (st == HAP_OK && o->weights != NULL)
    st = write_weights(o->weights, file, g, (const void *const *)values, &err);
  hap_onnx_values_free(values, g);
  if (st == HAP_OK && (st = hap_graph_write_file(g, o->output, &err)) != HAP_OK &&
      o->weights != NULL)
    unlink(o->weights); /* both files or neither */
  if (st != HAP_OK) {
    hap_cli_error(prog, &err);
    hap_graph_destroy(g);
    return 1;
  }
  if (!o->quiet && strcmp(o->output, "-") != 0)
    fprintf(stderr, "%s: wrote %s (%d nodes, %d tensors)\n", prog, o->output, g->n_nodes,
            g->n_tensors);
  if (!o->quiet)
    note_shared(file, g);
  hap_graph_destroy(g);
  return 0;
}

/* ---- ops ----------------------------------------------------------------------------------- */

static const char *attr_type_name(hap_attr_type t) {
  static const char *const names[] = {"int", "float", "bool", "ints", "str"};
  return names[t];
}

static int cmd_ops(const opts *o) {
  hap_jw w;
  bool json = o->format == HAP_FORMAT_JSON;
  if (json) {
    hap_jw_init(&w, stdout, 2);
    hap_jw_begin_array(&w);
  } else if (o->format == HAP_FORMAT_CSV) {
    printf("op,inputs,outputs,attributes,doc\n");
  }
  for (int k = 0; k < HAP_OP_COUNT; k++) {
    const hap_op_def *d = hap_op_get((hap_op)k);
    char ins[256] = "", outs[64] = "", attrs[256] = "";
    size_t off = 0;
    for (int i = 0; i < d->max_in; i++)
      off +=
          (size_t)snprintf(ins + off, sizeof ins - off, "%s%s%s%s", i ? " " : "", d->in_names[i],
                           i >= d->min_in ? "?" : "", (d->param_inputs >> i) & 1 ? "(param)" : "");
    off = 0;
    for (int i = 0; i < d->n_out; i++)
      off += (size_t)snprintf(outs + off, sizeof outs - off, "%s%s", i ? " " : "", d->out_names[i]);
    off = 0;
    for (int i = 0; i < d->n_attrs; i++)
      off += (size_t)snprintf(attrs + off, sizeof attrs - off, "%s%s:%s%s", i ? " " : "",
                              d->attrs[i].name, attr_type_name(d->attrs[i].type),
                              d->attrs[i].required ? "!" : "");
    if (json) {
      hap_jw_begin_object_inline(&w);
      hap_jw_key(&w, "op");
      hap_jw_str(&w, d->name);
      hap_jw_key(&w, "inputs");
      hap_jw_str(&w, ins);
      hap_jw_key(&w, "outputs");
      hap_jw_str(&w, outs);
      hap_jw_key(&w, "attributes");
      hap_jw_str(&w, attrs);
      hap_jw_key(&w, "doc");
      hap_jw_str(&w, d->doc);
      hap_jw_end_object(&w);
    } else if (o->format == HAP_FORMAT_CSV) {
      printf("%s,%s,%s,%s,\"%s\"\n", d->name, ins, outs, attrs, d->doc);
    } else {
      printf("%-21s %s\n  in: %s  out: %s%s%s\n", d->name, d->doc, ins, outs,
             d->n_attrs ? "  attrs: " : "", attrs);
    }
  }
  if (json) {
    hap_jw_end_array(&w);
    return hap_jw_finish(&w) ? 0 : 1;
  }
  if (o->format == HAP_FORMAT_TABLE)
    printf("\n'?' marks an optional input, '!' a required attribute.\n");
  return 0;
}

int main(int argc, char **argv) {
  static const struct option long_opts[] = {
      {"format", required_argument, NULL, 'f'},  {"output", required_argument, NULL, 'o'},
      {"quiet", no_argument, NULL, 'q'},         {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},       {"loss", required_argument, NULL, 'L'},
      {"name", required_argument, NULL, 'N'},    {"buffers", required_argument, NULL, 'B'},
      {"weights", required_argument, NULL, 'W'}, {NULL, 0, NULL, 0}};
  opts o = {.format = HAP_FORMAT_TABLE};
  hap_err err = {0};
  bool help = false;
  int c;
  while ((c = getopt_long(argc, argv, "f:o:qhV", long_opts, NULL)) != -1) {
    switch (c) {
    case 'f':
      if (hap_format_select(optarg, HAP_FORMATS_ALL, &o.format, &err) != HAP_OK)
        return hap_report_usage(prog, -1, "%s", err.msg);
      break;
    case 'o': o.output = optarg; break;
    case 'q': o.quiet = true; break;
    case 'L':
      if (hap_onnx_loss_parse(optarg, &o.loss) != HAP_OK)
        return hap_report_usage(prog, -1,
                                "--loss: unknown loss '%s' (expected output, mean, sum or "
                                "cross_entropy)",
                                optarg);
      break;
    case 'N': o.name = optarg; break;
    case 'B': o.buffers = optarg; break;
    case 'W': o.weights = optarg; break;
    case 'h': help = true; break;
    case 'V': printf("hap-model %s\n", HAP_VERSION); return 0;
    default: fprintf(stderr, "Try '%s --help'.\n", prog); return 2;
    }
  }
  if (help) {
    for (size_t i = 0; optind < argc && i < sizeof command_help / sizeof *command_help; i++) {
      if (strcmp(argv[optind], command_help[i].cmd) == 0) {
        fputs(command_help[i].text, stdout);
        return 0;
      }
    }
    usage(stdout);
    return 0;
  }
  if (optind >= argc)
    return hap_report_usage(prog, -1, "missing command (list, stats, export, check, import, ops)");
  const char *cmd = argv[optind++];
  int rest = argc - optind;
  char **args = argv + optind;
  if (strcmp(cmd, "list") == 0 && rest == 0)
    return cmd_list(&o);
  if (strcmp(cmd, "ops") == 0 && rest == 0)
    return cmd_ops(&o);
  if (strcmp(cmd, "stats") == 0 && rest == 1)
    return cmd_stats(&o, args[0]);
  if (strcmp(cmd, "export") == 0 && rest == 1)
    return cmd_export(&o, args[0]);
  if (strcmp(cmd, "check") == 0 && rest >= 1)
    return cmd_check(&o, rest, args);
  if (strcmp(cmd, "import") == 0 && rest == 1)
    return cmd_import(&o, args[0]);
  if (strcmp(cmd, "list") == 0 || strcmp(cmd, "ops") == 0 || strcmp(cmd, "stats") == 0 ||
      strcmp(cmd, "export") == 0 || strcmp(cmd, "check") == 0 || strcmp(cmd, "import") == 0)
    return hap_report_usage(prog, -1, "wrong number of arguments for '%s'", cmd);
  return hap_report_usage(prog, -1,
                          "unknown command '%s' (expected list, stats, export, check, import, "
                          "ops)",
                          cmd);
}
