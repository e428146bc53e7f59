/* hap-report — a self-contained HTML report (inline SVG, no scripts, nothing fetched) of a hap-sim
 * sweep, a plan, a hap-run trace or a profile, from the tools' JSON outputs (report/report.h). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "base/cli.h"
#include "hap_config.h"
#include "harness/report.h"
#include "report/report.h"

static const char *prog = "hap-report";

static void usage(FILE *f) {
  fputs("Usage: hap-report [KIND] INPUT [-o OUT.html]\n"
        "\n"
        "Write one self-contained HTML page (inline SVG and CSS, no scripts, nothing fetched)\n"
        "about INPUT, a JSON file one of the hap tools wrote ('-': stdin). KIND (default auto:\n"
        "from the file's \"format\", else its shape):\n"
        "  sweep    hap-sim ... -f json: iteration time against the swept parameter, one line\n"
        "           per strategy, the speedups over dp-ev, every row\n"
        "  plan     a hap-plan file (hap-synth -o): sharding ratios, memory by component and\n"
        "           busy time per device, the program step by step\n"
        "  run      a hap-trace file (hap-run --trace): simulated and measured Gantt lanes per\n"
        "           rank, the task-error histogram, the largest differences\n"
        "  profile  hap-profile show -f json PROFILE.h5: GEMM throughput against size, p2p and\n"
        "           collective bandwidth against size with the fitted pieces\n"
        "hap-sim --report FILE and hap-run --report FILE write the same pages directly.\n"
        "\n"
        "Options:\n"
        "  -o, --output FILE  the page (default: INPUT with .html for its extension; stdout\n"
        "                     when INPUT is '-'); written whole or not at all\n"
        "  -h, --help         this help\n"
        "  -V, --version      print the version\n"
        "\n"
        "A malformed input is one line naming the file, the JSON field and what was expected.\n"
        "Exit status: 0 ok, 1 failure, 2 usage error.\n",
        f);
}

/* INPUT with its extension (after the last '.' of the last path component) replaced by .html. */
static void default_output(const char *in, char *out, size_t cap) {
  const char *slash = strrchr(in, '/');
  const char *dot = strrchr(slash ? slash + 1 : in, '.');
  size_t stem = dot != NULL && dot != (slash ? slash + 1 : in) ? (size_t)(dot - in) : strlen(in);
  snprintf(out, cap, "%.*s.html", (int)stem, in);
}

int main(int argc, char **argv) {
  static const struct option long_opts[] = {{"output", required_argument, NULL, 'o'},
                                            {"help", no_argument, NULL, 'h'},
                                            {"version", no_argument, NULL, 'V'},
                                            {NULL, 0, NULL, 0}};
  const char *out = NULL;
  int c;
  while ((c = getopt_long(argc, argv, "o:hV", long_opts, NULL)) != -1) {
    switch (c) {
    case 'o': out = optarg; break;
    case 'h': usage(stdout); return 0;
    case 'V': printf("hap-report %s\n", HAP_VERSION); return 0;
    default: fprintf(stderr, "Try '%s --help'.\n", prog); return 2;
    }
  }
  int rest = argc - optind;
  hap_report_kind kind = HAP_REPORT_AUTO;
  if (rest == 2 && hap_report_kind_parse(argv[optind], &kind) != HAP_OK)
    return hap_report_usage(prog, -1,
                            "unknown report kind '%s' (expected sweep, plan, run, profile or auto)",
                            argv[optind]);
  if (rest < 1 || rest > 2)
    return hap_report_usage(prog, -1, "%s", rest < 1 ? "missing INPUT" : "too many arguments");
  const char *in = argv[argc - 1];
  char def[4200];
  if (out == NULL) {
    if (strcmp(in, "-") == 0) {
      out = "-";
    } else {
      default_output(in, def, sizeof def);
      out = def;
    }
  }
  if (strcmp(in, out) == 0)
    return hap_report_usage(prog, -1, "the output '%s' is the input", out);
  hap_err err = {0};
  if (hap_report_file(in, kind, out, &err) != HAP_OK) {
    hap_cli_error(prog, &err);
    return 1;
  }
  return 0;
}
