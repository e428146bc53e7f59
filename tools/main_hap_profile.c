/* hap-profile — measure, inspect and combine cluster profiles.
 *   measure -o OUT     (under mpirun) every rank measures its device, every pair and collective;
 *                      rank 0 writes one profile (also: no command name, with --backend)
 *   show FILE|SPEC     devices, hosts and links, collective fits (and, for a profile, its sweeps)
 *   merge OUT IN...    combine per-machine profiles into one */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/json_write.h"
#include "cluster/cluster_io.h"
#include "cluster/cluster_show.h"
#include "exec/comm_mpi.h"
#include "exec/comm_nccl.h"
#include "exec/device_cpu.h"
#include "exec/device_cuda.h"
#include "exec/devices.h"
#include "exec/emulate.h"
#include "hap_config.h"
#include "harness/format.h"
#include "harness/launcher.h"
#include "harness/mpi_start.h"
#include "harness/report.h"
#include "harness/watchdog.h"
#include "kx/kernels_run.h"
#include "model/zoo.h"
#include "plan/lower.h"
#include "plan/pipeline_io.h"
#include "plan/pipeline_lower.h"
#include "plan/plan_io.h"
#include "profile/kernel_times.h"
#include "profile/measure.h"
#include "profile/nccl_import.h"
#include "profile/replay.h"
#include "store/cluster_open.h"
#include "store/nccl_tests.h"
#include "store/profile_show.h"
#include "store/profile_store.h"

static const char *prog = "hap-profile";

static void usage(FILE *f) {
  fprintf(
      f, "Usage: hap-profile COMMAND [OPTIONS]\n"
         "       mpirun -np N hap-profile measure --backend cpu|cuda [--quick] -o OUT.h5\n"
         "\n"
         "Cluster profiles: what a cluster's devices, links and collectives measure.\n"
         "\n"
         "Commands:\n"
         "  measure -o OUT        run under mpirun: every rank is a device; measures GEMM\n"
         "                        FLOP/s, memory bandwidth, launch overhead, every rank pair\n"
         "                        (ping-pong) and the collectives; rank 0 writes one profile\n"
         "                        (atomic). 'hap-profile --backend cpu -o OUT' means the same\n"
         "  show FILE|SPEC        the cluster model of a profile (.h5) or a cluster spec\n"
         "                        ('paper-hetero:gpus_per_host=4', a hap-cluster JSON file):\n"
         "                        hosts and links, devices, collective fits; for a profile also\n"
         "                        its point-to-point and collective sweeps\n"
         "  merge -o OUT IN...    combine per-machine profiles into one (atomic write)\n"
         "  import-nccl-tests -o OUT LOG...\n"
         "                        a profile from nccl-tests output (all_reduce_perf,\n"
         "                        all_gather_perf, reduce_scatter_perf, alltoall_perf,\n"
         "                        broadcast_perf, sendrecv_perf; one log per test, the same\n"
         "                        GPUs in each); each log's test from its file name or --test\n"
         "\n"
         "Options:\n"
         "  -f, --format FMT      table (default), json, or for a profile nccl-tests (its\n"
         "                        collective sweeps as nccl-tests prints them)\n"
         "  -o, --output FILE     output of measure, merge and import-nccl-tests\n"
         "\n"
         "import-nccl-tests options:\n"
         "      --test NAME       the test that wrote logs whose file name does not say\n"
         "                        (all_reduce_perf, ...)\n"
         "      --device PRESET   the GPUs' published numbers (FLOP/s, memory): a device\n"
         "                        preset (docs/clusters.md); default: the one the logs'\n"
         "                        GPU model names\n"
         "\n"
         "Measure options:\n"
         "  -b, --backend NAME    device backend: cpu (each MPI rank a CPU device, GEMM through\n"
         "                        OpenBLAS, collectives over MPI) or cuda (each rank one GPU,\n"
         "                        GEMM through cuBLAS, collectives over NCCL)\n"
         "  -q, --quick           a small plan for CI (seconds) instead of the default (minutes)\n"
         "      --only WHAT       compute (GEMM sweep, memory, launch) or comm (memory, launch,\n"
         "                        pairs, collectives); default both\n"
         "      --emulate-speed L comma-separated speeds in (0, 1], one per rank: rank i's\n"
         "                        kernels take 1/s_i as long (heterogeneous clusters on one host)\n"
         "      --threads N       OpenBLAS threads per rank (default 1)\n"
         "      --plan FILE       time the kernels at exactly the local shapes each rank runs\n"
         "                        under this hap-plan (its model and cluster: the ones it\n"
         "                        records, or --model and --cluster), instead of the grid,\n"
         "                        and extend each collective's sweep to the plan's largest\n"
         "                        message of that kind; a pipelined plan: the programs of\n"
         "                        each rank's stages, one micro-batch each, on its group\n"
         "      --kernel-timing HOW  with --plan: replay (default) times each compute task\n"
         "                        inside the rank's whole task list run in plan order, as\n"
         "                        hap-run runs it (caches as the iteration leaves them, the\n"
         "                        runner's per-task overhead); loop times each shape alone\n"
         "                        in a hot loop\n"
         "      --coll-timing HOW  with --plan replayed: replay (default) also times each\n"
         "                        collective task of the plan in the replay, data crossing\n"
         "                        ranks as in hap-run (its time on the sub-group's fastest\n"
         "                        member), and prices the plan's own sizes with those times;\n"
         "                        sweep: the collective sweeps alone price them\n"
         "      --price HOW       with --plan replayed: mean (default) prices each timed\n"
         "                        kernel, the update and the plan's collectives at their\n"
         "                        samples' mean (what a mean iteration adds up); p50: at\n"
         "                        their median\n"
         "      --coll-caches HOW  warm (default): each collective sample averages calls made\n"
         "                        back to back; cold: every rank first writes 64 MiB\n"
         "                        elsewhere and a sample is one call, as a gradient's sum\n"
         "                        meets the caches inside hap-run's iteration\n"
         "      --model SPEC      the plan's model (zoo spec or hap-graph file)\n"
         "      --cluster SPEC    the plan's cluster (spec, hap-cluster file or profile)\n"
         "      --timeout SEC     stop every rank when no measurement step finishes for SEC\n"
         "                        seconds (a peer died or hangs); default 300\n"
         "      --single          profile this one process's device without mpirun (its\n"
         "                        collectives then sweep a single rank); without it, measure\n"
         "                        refuses to start outside an MPI launcher\n"
         "      --quiet           no progress on stderr (it is drawn only on a TTY anyway)\n"
         "  -h, --help            this help\n"
         "  -V, --version         print the version\n"
         "\n"
         "Exit status: 0 ok, 1 failure, 2 usage error.\n");
}

/* ---- commands ------------------------------------------------------------------------------ */

static int cmd_show(const char *what, hap_format format) {
  hap_err err = {0};
  hap_profile *p = NULL;
  hap_cluster *c = NULL;
  if (format == HAP_FORMAT_NCCL_TESTS) { /* the sweeps alone: no cluster model needed */
    if (!hap_is_hdf5_path(what))
      return hap_report_usage(prog, -1,
                              "--format nccl-tests prints a profile's sweeps: '%s' is not a "
                              "profile (.h5)",
                              what);
    if (hap_profile_read(what, &p, &err) != HAP_OK) {
      hap_cli_error(prog, &err);
      return 1;
    }
    hap_nt_print_profile(stdout, p);
    hap_profile_destroy(p);
    return 0;
  }
  if (hap_is_hdf5_path(what)) {
    if (hap_profile_read(what, &p, &err) != HAP_OK ||
        hap_profile_to_cluster(p, &c, &err) != HAP_OK) {
      hap_cli_error(prog, &err);
      hap_profile_destroy(p);
      return 1;
    }
  } else if (hap_cluster_load(what, &c, &err) != HAP_OK) {
    hap_cli_error(prog, &err);
    return 1;
  }
  int rc = 0;
  if (format == HAP_FORMAT_JSON) {
    rc = (p != NULL ? hap_cluster_show_json_more(stdout, c, hap_profile_sweeps_json, p)
                    : hap_cluster_show_json(stdout, c))
             ? 0
             : 1;
  } else {
    hap_cluster_show_table(stdout, c, what);
    if (p != NULL)
      hap_profile_show_sweeps(stdout, p);
  }
  hap_cluster_destroy(c);
  hap_profile_destroy(p);
  return rc;
}

/* Does any p2p sweep or collective of p involve devices of two hosts? */
static bool measured_across_hosts(const hap_profile *p) {
  for (int32_t i = 0; i < p->n_p2p; i++)
    if (strcmp(p->devices[p->p2p[i].src].host, p->devices[p->p2p[i].dst].host) != 0)
      return true;
  for (int32_t i = 0; i < p->n_colls; i++)
    for (int32_t r = 1; r < p->colls[i].n_ranks; r++)
      if (strcmp(p->devices[p->colls[i].ranks[0]].host, p->devices[p->colls[i].ranks[r]].host) != 0)
        return true;
  return false;
}

static int cmd_merge(const char *out, int n, char **inputs) {
  hap_err err = {0};
  hap_profile **parts = calloc((size_t)n, sizeof(hap_profile *));
  hap_profile *merged = NULL;
  int rc = 1;
  if (parts == NULL)
    return 1;
  for (int i = 0; i < n; i++) {
    if (hap_profile_read(inputs[i], &parts[i], &err) != HAP_OK)
      goto out;
    /* a part no tool could price (a --only comm profile: no FLOP/s) is refused here, in the
     * words show and hap-synth would use, not written into a merge they refuse */
    hap_cluster *as_cluster = NULL;
    hap_status st = hap_profile_to_cluster(parts[i], &as_cluster, &err); /* names the file */
    hap_cluster_destroy(as_cluster);
    if (st != HAP_OK)
      goto out;
  }
  if (hap_profile_merge(parts, n, &merged, &err) != HAP_OK ||
      hap_profile_write(merged, out, &err) != HAP_OK)
    goto out;
  fprintf(stderr, "%s: wrote %s (%d hosts, %d devices)\n", prog, out, merged->n_hosts,
          merged->n_devices);
  if (merged->n_hosts > 1 && !measured_across_hosts(merged))
    fprintf(stderr,
            "%s: warning: %s: no link between its %d hosts was measured (each part was profiled "
            "on its own host), so hap assumes %.1f GB/s and %.0f us per NIC between them; "
            "profile the hosts together (one mpirun over all of them) to measure those links\n",
            prog, out, merged->n_hosts, HAP_PROFILE_DEFAULT_NIC.bandwidth_Bps / 1e9,
            HAP_PROFILE_DEFAULT_NIC.latency_s * 1e6);
  rc = 0;
out:
  if (rc != 0)
    hap_cli_error(prog, &err);
  for (int i = 0; i < n; i++)
    hap_profile_destroy(parts[i]);
  free(parts);
  hap_profile_destroy(merged);
  return rc;
}

/* ---- import-nccl-tests ---------------------------------------------------------------------- */

static int cmd_import_nccl_tests(const char *out, int n, char **paths, int hint,
                                 const char *device) {
  hap_err err = {0};
  hap_nt_log *logs = calloc((size_t)n, sizeof *logs);
  hap_profile *p = NULL;
  int rc = 1, read = 0;
  if (logs == NULL)
    return 1;
  for (; read < n; read++)
    if (hap_nt_read(paths[read], hint, &logs[read], &err) != HAP_OK)
      goto out;
  if (hap_profile_from_nccl_tests(logs, (const char *const *)paths, n, device, &p, &err) !=
          HAP_OK ||
      hap_profile_write(p, out, &err) != HAP_OK)
    goto out;
  fprintf(stderr,
          "%s: wrote %s (%d GPUs on %d hosts, %d collective sweeps, %d pairs; devices: %s)\n", prog,
          out, (int)p->n_devices, (int)p->n_hosts, (int)p->n_colls, (int)p->n_p2p,
          hap_profile_get_env(p, "nccl-tests.devices"));
  rc = 0;
out:
  if (rc != 0)
    hap_cli_error(prog, &err);
  for (int i = 0; i < read; i++)
    hap_nt_log_free(&logs[i]);
  free(logs);
  hap_profile_destroy(p);
  return rc;
}

/* ---- measure -------------------------------------------------------------------------------- */

typedef struct measure_opts {
  const char *backend; /* NULL: not given */
  bool quick, quiet;
  bool single; /* --single: one rank without a launcher is meant */
  bool only_compute, only_comm;
  const char *emulate; /* NULL: native speed */
  int32_t threads;
  double timeout_s;
  const char *plan, *model, *cluster; /* --plan: kernel shapes from a plan */
  const char *kernel_timing;          /* "replay" (the default with --plan) or "loop" */
  bool coll_cold;                     /* --coll-caches cold */
  const char *coll_timing;            /* "replay" (the default when replaying) or "sweep" */
  const char *price;                  /* "mean" (the default when replaying) or "p50" */
} measure_opts;

static bool replaying(const measure_opts *o) {
  return o->plan != NULL && (o->kernel_timing == NULL || strcmp(o->kernel_timing, "replay") == 0);
}

/* Are the plan's collectives timed in its replay (replay.h)? */
static bool timing_colls(const measure_opts *o) {
  return replaying(o) && (o->coll_timing == NULL || strcmp(o->coll_timing, "replay") == 0);
}

/* The watchdog's lines (harness/watchdog.h); {phase} is the measurement step. */
static const hap_watchdog_text watchdog_text = {
    .timeout = "no measurement step finished for {timeout} s (--timeout) during {phase}; a peer "
               "rank died or hangs; stopping without writing a profile",
    .stopped = "stopped by {signal} during {phase} (mpirun stops every rank when one rank fails); "
               "no profile written"};

typedef struct progress_state {
  int rank;
  bool draw;
  double start_s; /* CLOCK_MONOTONIC when measuring began, s */
} progress_state;

static double monotonic_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "~42 s", "~3 min", "~2.5 h": the time left if the steps still to come take as long on average
 * as those done (a rough guide: GEMM, p2p and collective steps differ); from the third step and
 * 50 ms on, so that even a quick run on a fast machine shows one. */
static const char *time_left(const progress_state *ps, int32_t done, int32_t total, char *buf,
                             size_t size) {
  double spent = monotonic_s() - ps->start_s;
  if (done < 3 || spent < 0.05) {
    snprintf(buf, size, "estimating");
    return buf;
  }
  double left = spent / done * (total - done);
  if (left < 100)
    snprintf(buf, size, "~%.0f s left", left);
  else if (left < 6000)
    snprintf(buf, size, "~%.0f min left", left / 60);
  else
    snprintf(buf, size, "~%.1f h left", left / 3600);
  return buf;
}

static void on_progress(void *arg, const char *phase, int32_t done, int32_t total) {
  const progress_state *ps = arg;
  hap_watchdog_set_phase(phase);
  hap_watchdog_arm(); /* restarted at every step */
  char left[32];
  if (ps->draw && ps->rank == 0)
    fprintf(stderr, "\r\033[K%s: [%3d/%3d] %s (%s)", prog, done + 1, total, phase,
            time_left(ps, done, total, left, sizeof left));
}

/* Environment worth keeping with the numbers: thread and MPI settings, versions, the machine. */
static hap_status record_env(hap_profile *p, const measure_opts *o, int size, hap_err *err) {
  static const char *const keys[] = {"OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE",
                                     "OMP_NUM_THREADS",      "OMPI_MCA_btl",
                                     "OMPI_MCA_pml",         "OMPI_MCA_mpi_yield_when_idle",
                                     "HAP_DATASETS"};
  char buf[512];
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    const char *v = getenv(keys[i]);
    if (v != NULL)
      HAP_TRY(hap_profile_set_env(p, keys[i], v, err));
  }
  HAP_TRY(hap_profile_set_env(p, "mpi.library", hap_comm_mpi_library(buf, sizeof buf), err));
  snprintf(buf, sizeof buf, "%d", size);
  HAP_TRY(hap_profile_set_env(p, "hap.ranks", buf, err));
  HAP_TRY(hap_profile_set_env(p, "hap.plan", o->quick ? "quick" : "default", err));
  HAP_TRY(hap_profile_set_env(p, "hap.kernel_shapes", o->plan ? o->plan : "built-in grid", err));
  HAP_TRY(hap_profile_set_env(p, "hap.kernel_timing", replaying(o) ? "replay" : "loop", err));
  HAP_TRY(hap_profile_set_env(p, "hap.coll_caches", o->coll_cold ? "cold" : "warm", err));
  HAP_TRY(hap_profile_set_env(p, "hap.only",
                              o->only_compute ? "compute"
                              : o->only_comm  ? "comm"
                                              : "all",
                              err));
  HAP_TRY(hap_profile_set_env(p, "hap.emulate_speed", o->emulate ? o->emulate : "", err));
  struct utsname u;
  if (uname(&u) == 0) {
    snprintf(buf, sizeof buf, "%s %s %s", u.sysname, u.release, u.machine);
    HAP_TRY(hap_profile_set_env(p, "os", buf, err));
  }
  return HAP_OK;
}

/* Rank 0: can OUT's temporary `tmp` be created? (Fail before minutes of measuring, not after.) */
static hap_status check_output(const char *out, const char *tmp, hap_err *err) {
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0)
    return hap_err_set(err, HAP_EIO, "%s: cannot create %s: %s", out, tmp, strerror(errno));
  close(fd);
  unlink(tmp);
  return HAP_OK;
}

/* Open this rank's device: cpu, or the GPU local_rank mod the visible count. */
static hap_status open_device(const measure_opts *o, int32_t rank, double speed, hap_dev **dev,
                              hap_err *err) {
  if (strcmp(o->backend, "cpu") == 0)
    return hap_dev_cpu_open(o->threads, speed, dev, err);
  int count = 0;
  HAP_TRY(hap_gpu_query(NULL, 0, &count, err));
  return hap_dev_cuda_open(hap_local_rank(rank) % count, dev, err);
}

/* The largest message of each collective kind the plan sends (nccl-tests' S: all-reduce and
 * broadcast the buffer, all-gather and reduce-scatter the whole tensor, all-to-all what a rank
 * sends), bytes, into extend[HAP_COLL_KIND_COUNT]. */
static hap_status plan_messages(const hap_plan *p, const hap_graph *g, int64_t *extend,
                                hap_err *err) {
  hap_lowered *lw = NULL;
  HAP_TRY(hap_lower(p, g, &lw, err));
  double *per_rank = malloc((size_t)lw->n_devices * sizeof *per_rank);
  hap_status st = per_rank ? HAP_OK : hap_err_set(err, HAP_ENOMEM, "out of memory");
  for (int32_t t = 0; t < lw->n_tasks && st == HAP_OK; t++) {
    const hap_task *k = &lw->tasks[t];
    if (k->kind != HAP_TASK_COLLECTIVE || (st = hap_lowered_coll_bytes(lw, t, per_rank, err)))
      continue;
    double most = 0;
    for (int32_t d = 0; d < lw->n_devices; d++)
      most = fmax(most, per_rank[d]);
    bool whole = k->coll == HAP_COLL_ALL_GATHER || k->coll == HAP_COLL_REDUCE_SCATTER;
    int32_t members = k->span == HAP_SPAN_GROUP ? lw->group_size : lw->replicas;
    int64_t s = (int64_t)ceil(whole ? most * members : most);
    if (s > extend[k->coll])
      extend[k->coll] = s;
  }
  free(per_rank);
  hap_lowered_destroy(lw);
  return st;
}

/* The fewest timed iterations a replay takes (hap-run's default --iters): a long iteration's rows
 * then pool as many samples as the run they price averages. */
#define REPLAY_MIN_ITERS 10
/* The fewest warm-ups (hap-run's default --warmup): a second iteration still ran up to 36 % slow
 * (vit; bert-base 15-18 %), and the mean that prices a row would count it. */
#define REPLAY_MIN_WARMUP 2

/* --plan replayed (replay.h): what the kernel_rows hook of the measure configuration needs. */
typedef struct replay_ctx {
  hap_plan *plan; /* owned, with its graph; NULL for a pipelined plan */
  hap_graph *graph;
  hap_comm *world;
  /* a pipelined plan: its lowering (owned, with the pipeline, graph and cluster it borrows), this
   * rank's device group's communicator (owned) and group */
  hap_pipe_lowered *pw;
  hap_pipeline *pl;
  hap_cluster *cluster;
  hap_comm *group;
  int32_t my_group;
  const progress_state *ps;
  int32_t warmup, iters, max_iters;
  double min_s;
  /* --backend cuda: the GPU kernels hap-run runs (owned), as the replay's kernel table */
  hap_cuda_kernels *gpu;
  hap_run_kernels gpu_table;
  hap_dtype gpu_gemm;          /* the format its GEMMs compute in (the plan's policy) */
  bool colls;                  /* time the collectives too (a flat plan on the CPU runner) */
  hap_replay_colls *colls_out; /* where they go (the same on every rank) */
  bool price_p50;              /* --price p50 */
} replay_ctx;

static void replay_progress(void *arg, int32_t i, int32_t n) {
  const progress_state *ps = arg;
  hap_watchdog_arm(); /* restarted at every iteration */
  if (ps->draw && ps->rank == 0)
    fprintf(stderr, "\r\033[K%s: kernels: replayed iteration %d of %d", prog, i, n);
}

static void replay_free(replay_ctx *x) {
  hap_pipe_lowered_destroy(x->pw);
  hap_pipeline_destroy(x->pl);
  hap_cluster_destroy(x->cluster);
  hap_comm_destroy(x->group);
  hap_plan_destroy(x->plan);
  hap_graph_destroy(x->graph);
  hap_cuda_kernels_close(x->gpu);
  x->gpu = NULL;
  x->pw = NULL;
  x->pl = NULL;
  x->cluster = NULL;
  x->group = NULL;
  x->plan = NULL;
  x->graph = NULL;
}

/* A pipelined plan: each stage of this rank's group replayed on the group (the stage program on
 * one micro-batch of its stage graph, as hap-run runs it), the rows one after another. */
static hap_status replay_stages(const replay_ctx *x, const hap_replay_options *ro,
                                hap_profile_kernel **rows, int32_t *n_rows, double *update_Bps,
                                hap_err *err) {
  *rows = NULL;
  *n_rows = 0;
  *update_Bps = 0;
  hap_status st = HAP_OK;
  for (int32_t k = x->my_group; k < x->pw->n_stages && st == HAP_OK; k += x->pl->n_groups) {
    const hap_pipe_lowered_stage *ls = &x->pw->stages[k];
    hap_profile_kernel *more = NULL;
    int32_t n_more = 0;
    double bps = 0;
    st = hap_replay_kernel_rows(ls->plan, ls->graph, x->group, ro, &more, &n_more, &bps, err);
    if (st != HAP_OK) {
      hap_err_prefix(err, "stages[%d]", k);
      break;
    }
    hap_profile_kernel *all = realloc(*rows, (size_t)(*n_rows + n_more + 1) * sizeof *all);
    if (all == NULL) {
      free(more);
      st = hap_err_set(err, HAP_ENOMEM, "out of memory");
      break;
    }
    memcpy(all + *n_rows, more, (size_t)n_more * sizeof *all);
    *rows = all;
    *n_rows += n_more;
    *update_Bps = fmax(*update_Bps, bps);
    free(more);
  }
  return st;
}

static hap_status replay_rows(void *arg, double speed, hap_profile_kernel **rows, int32_t *n_rows,
                              double *update_Bps, hap_err *err) {
  const replay_ctx *x = arg;
  hap_replay_options ro = {.warmup = x->warmup,
                           .iters = x->iters,
                           .max_iters = x->max_iters,
                           .min_s = x->min_s,
                           .speed = speed,
                           .seed = 1,
                           .kernels = x->gpu != NULL ? &x->gpu_table : NULL,
                           .gemm = x->gpu != NULL ? x->gpu_gemm : HAP_F32,
                           .collectives = x->colls,
                           .price_p50 = x->price_p50,
                           .progress = replay_progress,
                           .progress_arg = (void *)x->ps};
  hap_status st = x->pw != NULL ? replay_stages(x, &ro, rows, n_rows, update_Bps, err)
                                : hap_replay_plan(x->plan, x->graph, x->world, &ro, rows, n_rows,
                                                  update_Bps, x->colls_out, err);
  if (st != HAP_OK && st != HAP_ENOMEM) { /* e.g. a float16 plan: hap-run's runner is float32 */
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    hap_err_clear(err);
    hap_err_set(err, st, "%s (--kernel-timing loop times the plan's shapes one by one instead)",
                why);
  }
  return st;
}

/* This rank's kernel cases: the plan's local shapes for this rank, or the built-in grid; with a
 * plan also its largest message per collective kind (extend, zeroed otherwise). When replaying,
 * no cases: the plan and its graph go to rx instead. */
/* `more` (n_more cases) appended to *all (*n cases); every case's attrs re-pointed after the copy.
 */
static hap_status add_kcases(hap_kcase **all, int32_t *n, const hap_kcase *more, int32_t n_more,
                             hap_err *err) {
  hap_kcase *grown = realloc(*all, (size_t)(*n + n_more + 1) * sizeof *grown);
  if (grown == NULL)
    return hap_err_set(err, HAP_ENOMEM, "out of memory");
  memcpy(grown + *n, more, (size_t)n_more * sizeof *grown);
  *all = grown;
  *n += n_more;
  for (int32_t i = 0; i < *n; i++)
    hap_kcase_fix(&grown[i]);
  return HAP_OK;
}

/* A pipelined plan (its stages on this rank's device group): the kernel cases of each, or the
 * lowering kept for the replay; the largest messages of every stage program. The world is split
 * into the device groups (collective: every rank calls this with --plan, st saying whether it
 * got this far). */
static hap_status pipeline_cases(const measure_opts *o, hap_status st, hap_graph *g, hap_cluster *c,
                                 hap_pipeline *pl, int32_t rank, hap_kcase **out, int32_t *n,
                                 int64_t *extend, replay_ctx *rx, hap_err *err) {
  int32_t my_group = -1;
  for (int32_t gi = 0; st == HAP_OK && gi < pl->n_groups; gi++) {
    int32_t nd;
    const int32_t *dev = hap_pipeline_group(pl, gi, &nd);
    for (int32_t i = 0; i < nd; i++)
      my_group = dev[i] == rank ? gi : my_group;
  }
  hap_err split_err = {0};
  hap_status sst = rx->world->ops->split(rx->world, my_group, rank, &rx->group, &split_err);
  if (st != HAP_OK)
    return st;
  if (sst != HAP_OK)
    return hap_err_set(err, sst, "%s", split_err.msg);
  rx->my_group = my_group;
  HAP_TRY(hap_pipe_lower(pl, g, c, &rx->pw, err));
  rx->pl = pl;
  rx->graph = g;
  rx->cluster = c;
  for (int32_t k = my_group; k < rx->pw->n_stages; k += pl->n_groups) {
    const hap_pipe_lowered_stage *ls = &rx->pw->stages[k];
    HAP_TRY(plan_messages(ls->plan, ls->graph, extend, err));
    if (replaying(o))
      continue;
    hap_kcase *more = NULL;
    int32_t n_more = 0;
    HAP_TRY(hap_kcases_from_plan(ls->plan, ls->graph, rx->group->rank, &more, &n_more, err));
    hap_status ast = add_kcases(out, n, more, n_more, err);
    free(more);
    HAP_TRY(ast);
  }
  return HAP_OK;
}

/* This rank's kernel cases: the plan's local shapes for this rank, or the built-in grid; with a
 * plan also its largest message per collective kind (extend, zeroed otherwise). When replaying,
 * no cases: the plan and its graph go to rx instead. A pipelined plan: its stages on this rank's
 * device group (pipeline_cases). */
static hap_status kernel_cases(const measure_opts *o, int32_t rank, int32_t size, hap_kcase **out,
                               int32_t *n, int64_t *extend, replay_ctx *rx, hap_err *err) {
  memset(extend, 0, HAP_COLL_KIND_COUNT * sizeof *extend);
  if (o->plan == NULL)
    return hap_kcases_default(o->quick, out, n, err);
  hap_graph *g = NULL;
  hap_cluster *c = NULL;
  hap_pipeline *pl = NULL;
  hap_plan *p = NULL;
  hap_status st = hap_model_load(o->model, &g, err);
  if (st == HAP_OK)
    st = hap_cluster_open(o->cluster, &c, err);
  if (st == HAP_OK)
    st = hap_pipeline_read_file(o->plan, g, c, &pl, err);
  if (st == HAP_OK && pl->n_devices != size)
    st = hap_err_set(err, HAP_EINVAL,
                     "%s: the plan has %d devices, this job %d ranks (rank i "
                     "runs device i)",
                     o->plan, pl->n_devices, size);
  if (st != HAP_OK || !hap_pipeline_is_flat(pl)) { /* every rank splits the world */
    st = pipeline_cases(o, st, g, c, pl, rank, out, n, extend, rx, err);
    if (rx->pl == NULL) { /* not kept */
      hap_pipeline_destroy(pl);
      hap_cluster_destroy(c);
      hap_graph_destroy(g);
    }
    return st;
  }
  p = pl->stages[0].plan;
  pl->stages[0].plan = NULL;
  hap_pipeline_destroy(pl);
  if (!replaying(o))
    st = hap_kcases_from_plan(p, g, rank, out, n, err);
  if (st == HAP_OK)
    st = plan_messages(p, g, extend, err);
  if (st == HAP_OK && replaying(o)) {
    rx->plan = p;
    rx->graph = g;
    p = NULL;
    g = NULL;
  }
  hap_plan_destroy(p);
  hap_cluster_destroy(c);
  hap_graph_destroy(g);
  return st;
}

static int measure(int *argc, char ***argv, const measure_opts *o, const char *out);

/* measure, with --plan's --model and --cluster defaulting to the specs the plan records. */
static int cmd_measure(int *argc, char ***argv, const measure_opts *o, const char *out) {
  if (o->plan == NULL || (o->model != NULL && o->cluster != NULL))
    return measure(argc, argv, o, out);
  hap_plan_specs specs = {0};
  hap_err err = {0};
  measure_opts mo = *o;
  if (hap_plan_default_specs(o->plan, &mo.model, &mo.cluster, "--model", "--cluster", &specs,
                             &err) != HAP_OK)
    return hap_report_usage(prog, -1, "--plan %s", err.msg);
  int rc = measure(argc, argv, &mo, out);
  hap_plan_specs_free(&specs);
  return rc;
}

static int measure(int *argc, char ***argv, const measure_opts *o, const char *out) {
  hap_err err = {0};
  double *speeds = NULL;
  int32_t n_speeds = 0;
  if (o->backend == NULL)
    return hap_report_usage(prog, -1, "measure needs --backend (expected cpu or cuda)");
  bool cuda = strcmp(o->backend, "cuda") == 0;
  if (!cuda && strcmp(o->backend, "cpu") != 0)
    return hap_report_usage(prog, -1, "--backend: unknown backend '%s' (expected cpu or cuda)",
                            o->backend);
  if (out == NULL)
    return hap_report_usage(prog, -1, "measure needs -o OUT (the profile to write)");
  if (o->plan == NULL && (o->model != NULL || o->cluster != NULL))
    return hap_report_usage(prog, -1, "--model and --cluster go with --plan");
  if (o->kernel_timing != NULL && o->plan == NULL)
    return hap_report_usage(prog, -1, "--kernel-timing goes with --plan");
  if (o->coll_timing != NULL && !replaying(o))
    return hap_report_usage(prog, -1, "--coll-timing goes with --plan and --kernel-timing replay");
  if (o->price != NULL && !replaying(o))
    return hap_report_usage(prog, -1, "--price goes with --plan and --kernel-timing replay");
  if (cuda && o->emulate != NULL)
    return hap_report_usage(prog, -1, "--emulate-speed is for --backend cpu");
  if (o->emulate != NULL && hap_emulate_parse(o->emulate, &speeds, &n_speeds, &err) != HAP_OK)
    return hap_report_usage(prog, -1, "%s", err.msg);
  if (cuda) {
    /* No GPU is the common failure: say so before MPI starts, once per job (launcher rank 0). */
    int count = 0;
    if (hap_gpu_query(NULL, 0, &count, &err) == HAP_ENOGPU) {
      if (hap_launcher_rank0())
        hap_report(prog, -1, "--backend cuda: no CUDA device (%s)", err.msg);
      free(speeds);
      return 1;
    }
    hap_err_clear(&err);
  }
  if (!o->single && !hap_launched_by_mpi()) {
    free(speeds);
    return hap_report_usage(prog, -1,
                            "measure runs one rank per device: start it with mpirun -np N (or "
                            "srun); alone it would profile one device and sweep collectives over "
                            "one rank, which --single asks for");
  }
  hap_comm *world = NULL;
  if (hap_harness_mpi_init(prog, argc, argv, &world) != HAP_OK) {
    free(speeds);
    return 1;
  }
  int rank = world->rank, size = world->size;
  if (speeds != NULL && n_speeds != size) {
    hap_report_usage(prog, rank, "--emulate-speed: %d speeds for %d ranks, expected one per rank",
                     n_speeds, size);
    free(speeds);
    hap_comm_mpi_finalize(world);
    return 2;
  }
  double speed = speeds != NULL ? speeds[rank] : 1.0;
  free(speeds);

  /* Set-up that fails alike on every rank (no GPU, a bad plan): all ranks agree, the lowest
   * failing rank says why, every rank exits 1 without an abort. */
  hap_dev *dev = NULL;
  hap_kcase *kcases = NULL;
  int32_t n_kcases = 0;
  int64_t extend[HAP_COLL_KIND_COUNT] = {0}; /* --plan: its largest messages */
  replay_ctx rx = {.world = world};
  hap_status st = open_device(o, rank, speed, &dev, &err);
  bool no_gpu = st == HAP_ENOGPU;
  if (st == HAP_OK && ((!o->only_comm && !cuda) || o->plan != NULL))
    st = kernel_cases(o, rank, size, &kcases, &n_kcases, extend, &rx, &err);
  /* a GPU replays the plan with the kernels hap-run --backend cuda runs (staged through host
   * memory, kernel times on the device), so its profile prices what hap-run does */
  bool gpu_replay = cuda && replaying(o) && !o->only_comm && (rx.plan != NULL || rx.pw != NULL);
  if (st == HAP_OK && gpu_replay) {
    st = hap_cuda_kernels_open(hap_dev_cuda_index(dev), &rx.gpu, &err);
    const hap_train_policy *pol = rx.plan != NULL ? &rx.plan->policy : &rx.pl->policy;
    rx.gpu_gemm = hap_policy_compute_dtype(pol);
    if (st == HAP_OK) /* the GEMMs of the plan's policy, as hap-run --backend cuda runs them */
      st = hap_cuda_kernels_set_gemm(rx.gpu, rx.gpu_gemm, &err);
    rx.gpu_table =
        (hap_run_kernels){"cuda", rx.gpu, hap_cuda_staged_forward, hap_cuda_staged_backward};
  }
  int32_t first = hap_harness_first_failure(world, st, &err);
  if (first < size) {
    if (rank == first && no_gpu)
      hap_report(prog, -1, "--backend cuda: no CUDA device (%s)", err.msg);
    else if (rank == first)
      hap_report_err(prog, -1, &err);
    free(kcases);
    replay_free(&rx);
    hap_dev_close(dev);
    hap_comm_mpi_finalize(world);
    return 1;
  }

  /* the watchdog; rank 0's OUT.tmp.<pid> goes on a fatal signal */
  char tmp[HAP_WATCHDOG_PATH_MAX] = "";
  if (rank == 0 &&
      (size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid()) >= sizeof tmp)
    hap_err_set(&err, HAP_EINVAL, "%s: path too long", out);
  else
    hap_watchdog_unlink_on_exit(tmp, &err);
  hap_watchdog_set_phase("start-up");
  hap_watchdog_install(prog, rank, o->timeout_s, &watchdog_text, &err);
  progress_state ps = {rank, hap_cli_progress_enabled(stderr, o->quiet), monotonic_s()};

  hap_measure_config cfg;
  hap_measure_defaults(&cfg, o->quick);
  if (cuda)
    hap_measure_gpu_gemm(&cfg, o->quick);
  cfg.gemm = !o->only_comm;
  cfg.comm = !o->only_compute;
  cfg.kernels = !o->only_comm && (!cuda || gpu_replay);
  cfg.kcases = kcases;
  cfg.n_kcases = n_kcases;
  rx.ps = &ps;
  rx.warmup = cfg.kernel_warmup > REPLAY_MIN_WARMUP ? cfg.kernel_warmup : REPLAY_MIN_WARMUP;
  /* as many timed iterations as hap-run's default run, however few the grid's reps; and samples
   * spread over time: robust to a noisy neighbour */
  rx.iters = cfg.kernel_reps > REPLAY_MIN_ITERS ? cfg.kernel_reps : REPLAY_MIN_ITERS;
  rx.min_s = o->quick ? 0.5 : 2.0;
  rx.max_iters = o->quick ? 50 : 200;
  hap_replay_colls colls = {0};
  if ((rx.plan != NULL || (rx.pw != NULL && replaying(o))) && cfg.kernels) {
    cfg.kernel_rows = replay_rows;
    cfg.kernel_rows_arg = &rx;
    /* collectives: hap-run's CPU runner over the world (a GPU's run over NCCL, and a pipelined
     * plan's over stage groups, keep the sweeps' prices) */
    rx.colls = timing_colls(o) && rx.plan != NULL && rx.gpu == NULL;
    rx.price_p50 = o->price != NULL && strcmp(o->price, "p50") == 0;
    rx.colls_out = &colls;
  }
  memcpy(cfg.coll_extend_bytes, extend, sizeof extend);
  cfg.coll_cold = o->coll_cold;
  cfg.progress = on_progress;
  cfg.progress_arg = &ps;

  hap_comm *nccl = NULL;
  hap_profile *p = NULL;
  st = err.status;
  if (st == HAP_OK && rank == 0)
    st = check_output(out, tmp, &err);
  if (st == HAP_OK && cuda && cfg.comm) {
    hap_watchdog_set_phase("NCCL start-up");
    hap_watchdog_arm();
    st = hap_comm_nccl_init(world, hap_dev_cuda_index(dev), &nccl, &err);
    cfg.data = nccl;
  }
  if (st == HAP_OK) {
    hap_watchdog_arm();
    st = hap_measure_profile(world, dev, &cfg, &p, &err);
  }
  if (ps.draw && rank == 0)
    fprintf(stderr, "\r\033[K");
  if (st == HAP_OK && rank == 0) {
    hap_watchdog_set_phase("writing the profile");
    st = hap_profile_set_meta(p, NULL, NULL, cuda ? "cuda+nccl" : "cpu+mpi", &err);
    if (st == HAP_OK)
      st = hap_replay_colls_to_profile(&colls, p, &err);
    if (st == HAP_OK)
      st = record_env(p, o, size, &err);
    if (st == HAP_OK) /* what priced the plan's collectives: its replay, or the sweeps */
      st = hap_profile_set_env(p, "hap.coll_timing", rx.colls ? "replay" : "sweep", &err);
    if (st == HAP_OK && replaying(o)) /* how its times price: the plan groups' points follow it */
      st = hap_profile_set_env(p, HAP_PROFILE_PRICE_ENV, rx.price_p50 ? "p50" : "mean", &err);
    if (st == HAP_OK && cuda) {
      char v[32];
      snprintf(v, sizeof v, "%d", hap_comm_nccl_version());
      st = hap_profile_set_env(p, "nccl.version", v, &err);
    }
    if (st == HAP_OK)
      st = hap_profile_write(p, out, &err);
  }
  hap_watchdog_disarm();
  free(kcases);
  hap_replay_colls_free(&colls);
  replay_free(&rx);
  if (st != HAP_OK) {
    hap_report_err(prog, rank, &err); /* "hap-profile: rank R: why" */
    hap_profile_destroy(p);
    if (size > 1 && nccl != NULL)
      nccl->ops->abort(nccl, 1); /* NCCL kernels of the others may wait on this rank */
    if (size > 1)
      world->ops->abort(world, 1); /* the other ranks may be waiting on this one */
    hap_comm_destroy(nccl);
    hap_dev_close(dev);
    hap_comm_mpi_finalize(world);
    return 1;
  }
  if (rank == 0 && !o->quiet) {
    int32_t kernels = 0;
    for (int32_t i = 0; i < p->n_devices; i++)
      kernels += p->devices[i].n_kernels;
    fprintf(stderr,
            "%s: wrote %s (%d devices on %d hosts, %d pairs, %d collective sweeps, %d kernel "
            "timings)\n",
            prog, out, p->n_devices, p->n_hosts, p->n_p2p, p->n_colls, kernels);
  }
  hap_profile_destroy(p);
  hap_comm_destroy(nccl);
  hap_dev_close(dev);
  hap_comm_mpi_finalize(world);
  return 0;
}

int main(int argc, char **argv) {
  enum {
    OPT_ONLY = 256,
    OPT_EMULATE,
    OPT_THREADS,
    OPT_TIMEOUT,
    OPT_QUIET,
    OPT_PLAN,
    OPT_MODEL,
    OPT_CLUSTER,
    OPT_KERNEL_TIMING,
    OPT_COLL_CACHES,
    OPT_COLL_TIMING,
    OPT_PRICE,
    OPT_SINGLE,
    OPT_TEST,
    OPT_DEVICE
  };
  static const struct option long_opts[] = {
      {"format", required_argument, NULL, 'f'},
      {"output", required_argument, NULL, 'o'},
      {"backend", required_argument, NULL, 'b'},
      {"quick", no_argument, NULL, 'q'},
      {"only", required_argument, NULL, OPT_ONLY},
      {"emulate-speed", required_argument, NULL, OPT_EMULATE},
      {"threads", required_argument, NULL, OPT_THREADS},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"quiet", no_argument, NULL, OPT_QUIET},
      {"plan", required_argument, NULL, OPT_PLAN},
      {"model", required_argument, NULL, OPT_MODEL},
      {"cluster", required_argument, NULL, OPT_CLUSTER},
      {"kernel-timing", required_argument, NULL, OPT_KERNEL_TIMING},
      {"coll-caches", required_argument, NULL, OPT_COLL_CACHES},
      {"coll-timing", required_argument, NULL, OPT_COLL_TIMING},
      {"price", required_argument, NULL, OPT_PRICE},
      {"single", no_argument, NULL, OPT_SINGLE},
      {"test", required_argument, NULL, OPT_TEST},
      {"device", required_argument, NULL, OPT_DEVICE},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0}};
  hap_format format = HAP_FORMAT_TABLE;
  const char *output = NULL;
  measure_opts mo = {.threads = 1, .timeout_s = 300};
  bool measure_flags = false; /* a measure-only option was given */
  int nt_test = -1;           /* import-nccl-tests --test */
  const char *nt_device = NULL;
  bool import_flags = false; /* an import-nccl-tests option was given */
  hap_err err = {0};
  double v = 0;
  int c;
  /* options are read before MPI starts, alike on every rank: rank 0 of the job speaks for all */
  bool talk = hap_launcher_rank0();
  opterr = talk;
  while ((c = getopt_long(argc, argv, "f:o:b:qhV", long_opts, NULL)) != -1) {
    switch (c) {
    case 'f':
      if (hap_format_select(optarg, HAP_FORMATS_TABLE_JSON | (1u << HAP_FORMAT_NCCL_TESTS), &format,
                            &err) != HAP_OK)
        return hap_report_usage(prog, -1, "%s", err.msg);
      break;
    case 'o': output = optarg; break;
    case 'b':
      mo.backend = optarg;
      measure_flags = true;
      break;
    case 'q':
      mo.quick = true;
      measure_flags = true;
      break;
    case OPT_ONLY:
      mo.only_compute = strcmp(optarg, "compute") == 0;
      mo.only_comm = strcmp(optarg, "comm") == 0;
      if (!mo.only_compute && !mo.only_comm)
        return hap_report_usage(prog, -1, "--only: unknown part '%s' (expected compute or comm)",
                                optarg);
      measure_flags = true;
      break;
    case OPT_EMULATE:
      mo.emulate = optarg;
      measure_flags = true;
      break;
    case OPT_THREADS: /* strtod's forms ("4.0", "0x10") of a whole number, as always */
      if (hap_cli_parse_double("--threads", optarg, 1, 1024, &v, NULL) != HAP_OK ||
          v != (double)(int32_t)v)
        return hap_report_usage(prog, -1, "--threads: '%s', expected a whole number in 1..1024",
                                optarg);
      mo.threads = (int32_t)v;
      measure_flags = true;
      break;
    case OPT_TIMEOUT:
      if (hap_cli_parse_double("--timeout", optarg, 1, 86400, &v, NULL) != HAP_OK ||
          v != (double)(int32_t)v)
        return hap_report_usage(prog, -1, "--timeout: '%s', expected whole seconds in 1..86400",
                                optarg);
      mo.timeout_s = v;
      measure_flags = true;
      break;
    case OPT_QUIET: mo.quiet = true; break;
    case OPT_SINGLE:
      mo.single = true;
      measure_flags = true;
      break;
    case OPT_PLAN:
      mo.plan = optarg;
      measure_flags = true;
      break;
    case OPT_MODEL:
      mo.model = optarg;
      measure_flags = true;
      break;
    case OPT_CLUSTER:
      mo.cluster = optarg;
      measure_flags = true;
      break;
    case OPT_KERNEL_TIMING:
      if (strcmp(optarg, "replay") != 0 && strcmp(optarg, "loop") != 0)
        return hap_report_usage(prog, -1, "--kernel-timing: '%s', expected replay or loop", optarg);
      mo.kernel_timing = optarg;
      measure_flags = true;
      break;
    case OPT_COLL_TIMING:
      if (strcmp(optarg, "replay") != 0 && strcmp(optarg, "sweep") != 0)
        return hap_report_usage(prog, -1, "--coll-timing: '%s', expected replay or sweep", optarg);
      mo.coll_timing = optarg;
      measure_flags = true;
      break;
    case OPT_PRICE:
      if (strcmp(optarg, "mean") != 0 && strcmp(optarg, "p50") != 0)
        return hap_report_usage(prog, -1, "--price: '%s', expected mean or p50", optarg);
      mo.price = optarg;
      measure_flags = true;
      break;
    case OPT_COLL_CACHES:
      if (strcmp(optarg, "warm") != 0 && strcmp(optarg, "cold") != 0)
        return hap_report_usage(prog, -1, "--coll-caches: '%s', expected warm or cold", optarg);
      mo.coll_cold = strcmp(optarg, "cold") == 0;
      measure_flags = true;
      break;
    case OPT_TEST:
      nt_test = -1;
      for (int t = 0; t < HAP_NT_TEST_COUNT; t++)
        if (strcmp(optarg, hap_nt_test_name((hap_nt_test)t)) == 0)
          nt_test = t;
      if (nt_test < 0)
        return hap_report_usage(prog, -1,
                                "--test: unknown test '%s' (expected all_reduce_perf, "
                                "all_gather_perf, reduce_scatter_perf, alltoall_perf, "
                                "broadcast_perf or sendrecv_perf)",
                                optarg);
      import_flags = true;
      break;
    case OPT_DEVICE:
      nt_device = optarg;
      import_flags = true;
      break;
    case 'h':
      if (talk)
        usage(stdout);
      return 0;
    case 'V':
      if (talk)
        printf("hap-profile %s\n", HAP_VERSION);
      return 0;
    default:
      if (talk)
        fprintf(stderr, "Try '%s --help'.\n", prog);
      return 2;
    }
  }
  if (optind >= argc && mo.backend != NULL) /* hap-profile --backend cpu -o OUT */
    return cmd_measure(&argc, &argv, &mo, output);
  if (optind >= argc)
    return hap_report_usage(prog, -1, "missing command (measure, show, merge, import-nccl-tests)");
  const char *cmd = argv[optind++];
  int rest = argc - optind;
  if (import_flags && strcmp(cmd, "import-nccl-tests") != 0)
    return hap_report_usage(prog, -1, "--test and --device belong to import-nccl-tests, not %s",
                            cmd);
  if (strcmp(cmd, "measure") == 0) {
    if (rest != 0)
      return hap_report_usage(prog, -1, "measure takes no arguments, got '%s'", argv[optind]);
    return cmd_measure(&argc, &argv, &mo, output);
  }
  if (measure_flags)
    return hap_report_usage(prog, -1,
                            "--backend, --quick, --only, --emulate-speed, --threads, --timeout, "
                            "--plan, --model, --cluster and --single belong to measure, not %s",
                            cmd);
  if (strcmp(cmd, "import-nccl-tests") == 0) {
    if (output == NULL || rest < 1)
      return hap_report_usage(prog, -1, "import-nccl-tests needs -o OUT and at least one log");
    return cmd_import_nccl_tests(output, rest, argv + optind, nt_test, nt_device);
  }
  if (strcmp(cmd, "show") == 0) {
    if (rest != 1)
      return hap_report_usage(prog, -1, "show takes one profile or cluster spec");
    return cmd_show(argv[optind], format);
  }
  if (strcmp(cmd, "merge") == 0) {
    if (output == NULL || rest < 1)
      return hap_report_usage(prog, -1, "merge needs -o OUT and at least one input profile");
    return cmd_merge(output, rest, argv + optind);
  }
  return hap_report_usage(
      prog, -1, "unknown command '%s' (expected measure, show, merge or import-nccl-tests)", cmd);
}
