/* main_hap_devices.c — hap-devices: list the GPUs this process can use and the GPU library
 * versions of this build. Exit 0 with a GPU, 1 without one or on CUDA errors, 2 on usage errors. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "exec/devices.h"
#include "hap_config.h"
#include "harness/format.h"
#include "harness/report.h"

static const char *prog = "hap-devices";

static void usage(FILE *f) {
  fputs("Usage: hap-devices [OPTION]...\n"
        "List the GPUs this process can use (index, name, compute capability, memory, SMs,\n"
        "PCI bus id) and the CUDA, NCCL, CUPTI and cuBLAS versions of this build.\n"
        "\n"
        "  -f, --format FMT   output format: table (default), csv or json\n"
        "  -s, --selftest     also run a small kernel on every GPU and report the result\n"
        "  -q, --quiet        print nothing; the exit status says whether a GPU is usable\n"
        "  -h, --help         show this help and exit\n"
        "  -V, --version      show the version and exit\n"
        "\n"
        "Exit status: 0 at least one GPU, 1 no usable GPU or a CUDA error, 2 usage error.\n",
        f);
}

/* "13.0" from CUDA's 1000*major + 10*minor; "-" when unknown. */
static const char *cuda_ver(int v, char *buf, size_t len) {
  if (v <= 0)
    snprintf(buf, len, "-");
  else
    snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
  return buf;
}

/* "2.28.9" from NCCL's code (10000*major + 100*minor + patch since 2.9, 1000*major before). */
static const char *nccl_ver(int v, char *buf, size_t len) {
  if (v <= 0)
    snprintf(buf, len, "-");
  else if (v >= 10000)
    snprintf(buf, len, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
  else
    snprintf(buf, len, "%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
  return buf;
}

/* "13.0.2" from cuBLAS's 10000*major + 100*minor + patch. */
static const char *cublas_ver(int v, char *buf, size_t len) {
  if (v <= 0)
    snprintf(buf, len, "-");
  else
    snprintf(buf, len, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
  return buf;
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

/* A JSON string for a version, or null when the library is absent. */
static void json_ver(FILE *f, const char *formatted) {
  if (strcmp(formatted, "-") == 0)
    fputs("null", f);
  else
    json_str(f, formatted);
}

static const double GIB = 1024.0 * 1024.0 * 1024.0;

int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"format", required_argument, NULL, 'f'}, {"selftest", no_argument, NULL, 's'},
      {"quiet", no_argument, NULL, 'q'},        {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},      {NULL, 0, NULL, 0},
  };
  hap_format fmt = HAP_FORMAT_TABLE;
  int quiet = 0, selftest = 0, c;
  opterr = 0; /* we print our own one-line usage errors */
  while ((c = getopt_long(argc, argv, ":f:sqhV", opts, NULL)) != -1) {
    switch (c) {
    case 'f':
      if (hap_format_select(optarg, HAP_FORMATS_ALL, &fmt, NULL) != HAP_OK)
        return hap_report_usage(prog, -1, "--format: expected table, csv or json, got '%s'",
                                optarg);
      break;
    case 's': selftest = 1; break;
    case 'q': quiet = 1; break;
    case 'h': usage(stdout); return 0;
    case 'V':
      printf("hap-devices (hap) %s, CUDA backend %s\n", HAP_VERSION,
             hap_gpu_compiled() ? "built in" : "not built");
      return 0;
    case ':': return hap_report_usage(prog, -1, "option '%s' needs an argument", argv[optind - 1]);
    default: {
      char opt[3] = {'-', (char)optopt, '\0'};
      return hap_report_usage(prog, -1, "unknown option '%s'",
                              optopt != 0 ? opt : argv[optind - 1]);
    }
    }
  }
  if (optind < argc)
    return hap_report_usage(prog, -1, "unexpected argument '%s'", argv[optind]);

  hap_err err = {0};
  int n = 0;
  hap_status st = hap_gpu_query(NULL, 0, &n, &err);
  hap_gpu_info *gpus = NULL;
  if (st == HAP_OK) {
    gpus = calloc((size_t)n, sizeof *gpus);
    if (gpus == NULL) {
      hap_report(prog, -1, "out of memory for %d devices", n);
      return 1;
    }
    st = hap_gpu_query(gpus, n, &n, &err);
  }
  if (st != HAP_OK) {
    if (!quiet) {
      if (st == HAP_ENOGPU)
        fprintf(stderr, "no GPU: %s\n", err.msg);
      else
        hap_report(prog, -1, "%s: %s", hap_status_str(st), err.msg);
    }
    free(gpus);
    return 1;
  }

  /* Self-test every device; remember failures (exit 1) but still print the list. */
  int failed = 0;
  char(*test_msg)[sizeof err.msg] = NULL;
  if (selftest) {
    test_msg = calloc((size_t)n, sizeof *test_msg);
    if (test_msg == NULL) {
      hap_report(prog, -1, "out of memory");
      free(gpus);
      return 1;
    }
    for (int i = 0; i < n; i++) {
      hap_err terr = {0};
      if (hap_gpu_selftest(gpus[i].index, &terr) == HAP_OK) {
        snprintf(test_msg[i], sizeof test_msg[i], "ok");
      } else {
        snprintf(test_msg[i], sizeof test_msg[i], "%s", terr.msg);
        failed++;
        if (!quiet)
          hap_report(prog, -1, "GPU %d self-test failed: %s", gpus[i].index, terr.msg);
      }
    }
  }
  if (quiet) {
    free(gpus);
    free(test_msg);
    return failed ? 1 : 0;
  }

  hap_gpu_lib_versions v;
  if (hap_gpu_versions(&v, &err) != HAP_OK)
    memset(&v, 0, sizeof v);
  char rt[32], drv[32], nccl[32], cublas[32];
  cuda_ver(v.cudart, rt, sizeof rt);
  cuda_ver(v.cuda_driver, drv, sizeof drv);
  nccl_ver(v.nccl, nccl, sizeof nccl);
  cublas_ver(v.cublas, cublas, sizeof cublas);

  if (fmt == HAP_FORMAT_TABLE) {
    printf("%3s  %-32s %4s %12s %5s  %-16s%s\n", "GPU", "name", "cc", "memory GiB", "SMs",
           "PCI bus id", selftest ? "  self-test" : "");
    for (int i = 0; i < n; i++) {
      const hap_gpu_info *g = &gpus[i];
      printf("%3d  %-32s %2d.%-1d %12.2f %5d  %-16s", g->index, g->name, g->cc_major, g->cc_minor,
             (double)g->memory_bytes / GIB, g->sm_count, g->pci_bus_id[0] ? g->pci_bus_id : "-");
      if (selftest)
        printf("  %s", test_msg[i]);
      putchar('\n');
    }
    printf("\nCUDA runtime %s, driver supports CUDA %s, NCCL %s, CUPTI API %d, cuBLAS %s\n", rt,
           drv, nccl, v.cupti, cublas);
  } else if (fmt == HAP_FORMAT_CSV) {
    printf("index,name,cc,memory_bytes,sm_count,pci_bus_id%s\n", selftest ? ",selftest" : "");
    for (int i = 0; i < n; i++) {
      const hap_gpu_info *g = &gpus[i];
      printf("%d,", g->index);
      hap_csv_field(stdout, g->name);
      printf(",%d.%d,%lld,%d,%s", g->cc_major, g->cc_minor, (long long)g->memory_bytes, g->sm_count,
             g->pci_bus_id);
      if (selftest) {
        putchar(',');
        hap_csv_field(stdout, test_msg[i]);
      }
      putchar('\n');
    }
  } else {
    printf("{\n  \"format\": \"hap-devices\",\n  \"version\": 1,\n  \"hap_version\": ");
    json_str(stdout, HAP_VERSION);
    printf(",\n  \"libraries\": {\"cudart\": ");
    json_ver(stdout, rt);
    printf(", \"cuda_driver\": ");
    json_ver(stdout, drv);
    printf(", \"nccl\": ");
    json_ver(stdout, nccl);
    printf(", \"cupti_api\": ");
    if (v.cupti > 0)
      printf("%d", v.cupti);
    else
      fputs("null", stdout);
    printf(", \"cublas\": ");
    json_ver(stdout, cublas);
    printf("},\n  \"devices\": [");
    for (int i = 0; i < n; i++) {
      const hap_gpu_info *g = &gpus[i];
      printf("%s\n    {\"index\": %d, \"name\": ", i ? "," : "", g->index);
      json_str(stdout, g->name);
      printf(", \"compute_capability\": \"%d.%d\", \"memory_bytes\": %lld, \"sm_count\": %d, "
             "\"pci_bus_id\": ",
             g->cc_major, g->cc_minor, (long long)g->memory_bytes, g->sm_count);
      json_str(stdout, g->pci_bus_id);
      if (selftest) {
        printf(", \"selftest\": ");
        json_str(stdout, test_msg[i]);
      }
      putchar('}');
    }
    printf("%s]\n}\n", n ? "\n  " : "");
  }
  free(gpus);
  free(test_msg);
  if (fflush(stdout) != 0 || ferror(stdout)) {
    hap_report(prog, -1, "error writing to stdout");
    return 1;
  }
  return failed ? 1 : 0;
}
