/* test_harness.c — what the tools' mains share (harness/) and the bounded option values of
 * base/cli.h (and its CSV fields): local rank from the launcher's environment, integer and number
 * options, --format selection, messages said once, the watchdog's lines (built, and written by a
 * real handler in a child process), Ctrl-C as a flag, and the lowest failing rank over a fake
 * communicator. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/cli.h"
#include "harness/format.h"
#include "harness/interrupt.h"
#include "harness/launcher.h"
#include "harness/mpi_start.h"
#include "harness/report.h"
#include "harness/watchdog.h"

/* ---- launcher.h ------------------------------------------------------------------------------ */

static void clear_launcher_env(void) {
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("MPI_LOCALRANKID");
  unsetenv("SLURM_LOCALID");
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("PMI_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("PMI_SIZE");
  unsetenv("PMIX_RANK");
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_STEP_NUM_TASKS");
  unsetenv("SLURM_NTASKS");
}

/* Slurm's environment for task `procid` of an srun step of `tasks` tasks. */
static void srun_task(const char *procid, const char *tasks) {
  setenv("SLURM_PROCID", procid, 1);
  setenv("SLURM_LOCALID", procid, 1);
  setenv("SLURM_STEP_NUM_TASKS", tasks, 1);
  setenv("SLURM_NTASKS", tasks, 1);
}

Test(launcher, launched_by_any_mpi_launcher) {
  clear_launcher_env();
  cr_expect_not(hap_launched_by_mpi(), "no variable: started alone");
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    clear_launcher_env();
    setenv(vars[i], "1", 1);
    cr_expect(hap_launched_by_mpi(), "%s set: launched", vars[i]);
  }
  clear_launcher_env();
  setenv("SLURM_LOCALID", "0", 1); /* an allocation is not a launch */
  cr_expect_not(hap_launched_by_mpi());
}

Test(launcher, local_rank_from_each_variable) {
  clear_launcher_env();
  cr_expect_eq(hap_local_rank(7), 7, "no variable: the world rank");
  setenv("SLURM_LOCALID", "3", 1);
  cr_expect_eq(hap_local_rank(7), 3);
  setenv("MPI_LOCALRANKID", "2", 1);
  cr_expect_eq(hap_local_rank(7), 2, "MPICH's before Slurm's");
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  cr_expect_eq(hap_local_rank(7), 1, "Open MPI's first");
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  cr_expect_eq(hap_local_rank(7), 0, "0 is a local rank");
}

Test(launcher, bad_values_are_skipped) {
  static const char *const bad[] = {
      "", "x", "-1", "3x", "1.5", "2147483647", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    clear_launcher_env();
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", bad[i], 1);
    cr_expect_eq(hap_local_rank(5), 5, "'%s' alone: the world rank", bad[i]);
    setenv("SLURM_LOCALID", "4", 1);
    cr_expect_eq(hap_local_rank(5), 4, "'%s' skipped for the next variable", bad[i]);
  }
  clear_launcher_env();
  setenv("MPI_LOCALRANKID", "2147483646", 1);
  cr_expect_eq(hap_local_rank(5), 2147483646, "the largest accepted");
}

Test(launcher, rank0_before_mpi) {
  clear_launcher_env();
  cr_expect(hap_launcher_rank0(), "not launched: says it");
  setenv("PMI_RANK", "1", 1);
  cr_expect_not(hap_launcher_rank0());
  setenv("PMI_RANK", "0", 1);
  cr_expect(hap_launcher_rank0());
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  cr_expect_not(hap_launcher_rank0(), "Open MPI's before PMI's");
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("PMI_RANK", "1", 1);
  cr_expect(hap_launcher_rank0());
}

/* srun's tasks are launched, and task 0 speaks for the job; a batch script's own environment
 * (SLURM_PROCID=0, SLURM_NTASKS, no step task count) is not a task. */
Test(launcher, srun_tasks) {
  clear_launcher_env();
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "4", 1);
  cr_expect_not(hap_launched_by_mpi(), "a batch script is not an srun task");
  cr_expect_eq(hap_launcher_size(NULL), -1);
  clear_launcher_env();
  srun_task("1", "4");
  cr_expect(hap_launched_by_mpi());
  cr_expect_not(hap_launcher_rank0(), "task 1");
  const char *var = NULL;
  cr_expect_eq(hap_launcher_size(&var), 4);
  cr_expect_str_eq(var, "SLURM_STEP_NUM_TASKS");
  cr_expect_eq(hap_local_rank(9), 1);
  srun_task("0", "4");
  cr_expect(hap_launcher_rank0(), "task 0");
  setenv("OMPI_COMM_WORLD_RANK", "3", 1); /* mpirun inside an allocation: its rank first */
  setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  cr_expect_not(hap_launcher_rank0());
  cr_expect_eq(hap_launcher_size(&var), 8);
  cr_expect_str_eq(var, "OMPI_COMM_WORLD_SIZE");
}

Test(launcher, launcher_size_bad_values_are_skipped) {
  static const char *const bad[] = {"", "x", "0", "-2", "1.5", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    clear_launcher_env();
    setenv("OMPI_COMM_WORLD_SIZE", bad[i], 1);
    cr_expect_eq(hap_launcher_size(NULL), -1, "'%s' alone: unknown", bad[i]);
    setenv("PMI_SIZE", "3", 1);
    cr_expect_eq(hap_launcher_size(NULL), 3, "'%s' skipped for the next variable", bad[i]);
  }
}

/* ---- cli.h: bounded options ------------------------------------------------------------------ */

Test(cli_parse, int_bounds_and_junk) {
  hap_err err = {0};
  long long v = -42;
  cr_expect_eq(hap_cli_parse_int("--iters", "1", 1, 10, &v, &err), HAP_OK);
  cr_expect_eq(v, 1, "lower bound inclusive");
  cr_expect_eq(hap_cli_parse_int("--iters", "10", 1, 10, &v, &err), HAP_OK);
  cr_expect_eq(v, 10, "upper bound inclusive");
  cr_expect_eq(hap_cli_parse_int("--n", "-5", -5, 5, &v, &err), HAP_OK);
  cr_expect_eq(v, -5);
  cr_expect_eq(hap_cli_parse_int("--n", " +7", 0, 9, &v, &err), HAP_OK, "strtoll's forms");
  cr_expect_eq(v, 7);
  static const char *const bad[] = {"0",
                                    "11",
                                    "",
                                    "x",
                                    "5x",
                                    "5 ",
                                    "1.0",
                                    "0x5",
                                    "-",
                                    "99999999999999999999",
                                    "-99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    v = -42;
    hap_err e = {0};
    cr_expect_eq(hap_cli_parse_int("--iters", bad[i], 1, 10, &v, &e), HAP_EINVAL, "'%s'", bad[i]);
    cr_expect_eq(v, -42, "'%s': out untouched", bad[i]);
    char want[128];
    snprintf(want, sizeof want, "--iters wants an integer 1..10, got '%s'", bad[i]);
    cr_expect_str_eq(e.msg, want);
  }
  cr_expect_eq(hap_cli_parse_int("--x", "3", 0, 2, &v, NULL), HAP_EINVAL, "err may be NULL");
  cr_expect_eq(hap_cli_parse_int("--x", "9223372036854775807", 0, 9223372036854775807LL, &v, NULL),
               HAP_OK, "LLONG_MAX itself");
  cr_expect_eq(hap_cli_parse_int("--x", "9223372036854775808", 0, 9223372036854775807LL, &v, NULL),
               HAP_EINVAL, "one past: overflow, not saturation");
}

Test(cli_parse, double_bounds_and_junk) {
  hap_err err = {0};
  double v = -42;
  cr_expect_eq(hap_cli_parse_double("--lr", "0", 0, 1e6, &v, &err), HAP_OK);
  cr_expect_eq(v, 0.0);
  cr_expect_eq(hap_cli_parse_double("--lr", "1e6", 0, 1e6, &v, &err), HAP_OK);
  cr_expect_eq(v, 1e6, "upper bound inclusive");
  cr_expect_eq(hap_cli_parse_double("--lr", "0.25", 0, 1e6, &v, &err), HAP_OK);
  cr_expect_eq(v, 0.25);
  cr_expect_eq(hap_cli_parse_double("--lr", "0x10", 0, 1e6, &v, &err), HAP_OK, "strtod's hex");
  cr_expect_eq(v, 16.0);
  cr_expect_eq(hap_cli_parse_double("--lr", "1e-400", 0, 1, &v, &err), HAP_OK,
               "underflow: the tiny value");
  cr_expect_leq(v, 1e-300);
  static const char *const bad[] = {"-1",  "1000001", "",     "x",     "1x",
                                    "nan", "inf",     "-inf", "1e999", " "};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    v = -42;
    hap_err e = {0};
    cr_expect_eq(hap_cli_parse_double("--lr", bad[i], 0, 1e6, &v, &e), HAP_EINVAL, "'%s'", bad[i]);
    cr_expect_eq(v, -42.0, "'%s': out untouched", bad[i]);
    char want[128];
    snprintf(want, sizeof want, "--lr wants a number in 0..1e+06, got '%s'", bad[i]);
    cr_expect_str_eq(e.msg, want);
  }
  hap_err e = {0};
  hap_cli_parse_double("--timeout", "0.5", 1, 86400, &v, &e);
  cr_expect_str_eq(e.msg, "--timeout wants a number in 1..86400, got '0.5'");
}

/* ---- format.h ----------------------------------------------------------------------------- */

/* fields as RFC 4180 reads them: plain unless a comma, quote or line break needs quotes */
static const char *csv_of(const char *field, char *buf, size_t len) {
  memset(buf, 0, len); /* fmemopen leaves an untouched buffer as it was */
  FILE *f = fmemopen(buf, len, "w");
  cr_assert_not_null(f);
  hap_csv_field(f, field);
  fclose(f);
  return buf;
}

Test(cli_csv, quoted_only_when_needed) {
  char buf[64];
  cr_expect_str_eq(csv_of("layers.0.fc1.fwd", buf, sizeof buf), "layers.0.fc1.fwd");
  cr_expect_str_eq(csv_of("", buf, sizeof buf), "");
  cr_expect_str_eq(csv_of("a,b", buf, sizeof buf), "\"a,b\"");
  cr_expect_str_eq(csv_of("say \"hi\"", buf, sizeof buf), "\"say \"\"hi\"\"\"");
  cr_expect_str_eq(csv_of("two\nlines", buf, sizeof buf), "\"two\nlines\"");
  cr_expect_str_eq(csv_of("cr\r", buf, sizeof buf), "\"cr\r\"");
}

Test(format, select_among_offered) {
  hap_format f = HAP_FORMAT_CSV;
  cr_expect_eq(hap_format_select("json", HAP_FORMATS_TABLE_JSON, &f, NULL), HAP_OK);
  cr_expect_eq(f, HAP_FORMAT_JSON);
  cr_expect_eq(hap_format_select("table", HAP_FORMATS_TABLE_JSON, &f, NULL), HAP_OK);
  cr_expect_eq(f, HAP_FORMAT_TABLE);
  cr_expect_eq(hap_format_select("csv", HAP_FORMATS_ALL, &f, NULL), HAP_OK);
  cr_expect_eq(f, HAP_FORMAT_CSV);

  hap_err err = {0};
  f = HAP_FORMAT_JSON;
  cr_expect_eq(hap_format_select("csv", HAP_FORMATS_TABLE_JSON, &f, &err), HAP_EINVAL,
               "known but not offered");
  cr_expect_eq(f, HAP_FORMAT_JSON, "out untouched");
  cr_expect_str_eq(err.msg, "unknown format 'csv' (expected table or json)");
  hap_err_clear(&err);
  cr_expect_eq(hap_format_select("yaml", HAP_FORMATS_ALL, &f, &err), HAP_EINVAL);
  cr_expect_str_eq(err.msg, "unknown format 'yaml' (expected table, csv or json)");
  hap_err_clear(&err);
  cr_expect_eq(hap_format_select("JSON", HAP_FORMATS_ALL, &f, &err), HAP_EINVAL, "exact names");
  hap_err_clear(&err);
  cr_expect_eq(hap_format_select("", 1u << HAP_FORMAT_JSON, &f, &err), HAP_EINVAL);
  cr_expect_str_eq(err.msg, "unknown format '' (expected json)");
}

/* ---- report.h ----------------------------------------------------------------------------- */

/* Run fn with stderr sent to a temporary file; its contents into out. */
static void capture_stderr(void (*fn)(void), char *out, size_t len) {
  char path[] = "/tmp/hap-test-harness-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  fn();
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  lseek(fd, 0, SEEK_SET);
  ssize_t n = read(fd, out, len - 1);
  out[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(path);
}

static int usage_rc[3];

static void say_things(void) {
  hap_report("hap-run", 3, "task '%s': %s", "a.fwd", "broken");
  hap_report("hap-run", -1, "--backend cuda: no CUDA device (%s)", "none");
  hap_err err = {0};
  hap_report_err("hap-profile", -1, &err); /* empty message: the status name */
  hap_err_set(&err, HAP_EIO, "x.h5: cannot create");
  hap_report_err("hap-profile", 0, &err);
  usage_rc[0] = hap_report_usage("hap-run", 1, "not said by rank %d", 1);
  usage_rc[1] = hap_report_usage("hap-run", 0, "--iters wants %s", "more");
  usage_rc[2] = hap_report_usage("hap-model", -1, "missing command");
}

Test(report, lines_once_per_rank) {
  char got[1024];
  capture_stderr(say_things, got, sizeof got);
  cr_expect_str_eq(got, "hap-run: rank 3: task 'a.fwd': broken\n"
                        "hap-run: --backend cuda: no CUDA device (none)\n"
                        "hap-profile: ok\n"
                        "hap-profile: rank 0: x.h5: cannot create\n"
                        "hap-run: --iters wants more\n"
                        "Try 'hap-run --help'.\n"
                        "hap-model: missing command\n"
                        "Try 'hap-model --help'.\n");
  cr_expect_eq(usage_rc[0], 2, "every rank exits 2");
  cr_expect_eq(usage_rc[1], 2);
  cr_expect_eq(usage_rc[2], 2);
}

/* Before MPI starts (rank -1), under a launcher: only the launcher's rank 0 says it. */
static void say_usage_as_launched_ranks(void) {
  clear_launcher_env();
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  usage_rc[0] = hap_report_usage("hap-profile", -1, "said by rank %d", 1);
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  usage_rc[1] = hap_report_usage("hap-profile", -1, "said by rank %d", 0);
  clear_launcher_env();
}

Test(report, usage_before_mpi_once_per_job) {
  char got[1024];
  capture_stderr(say_usage_as_launched_ranks, got, sizeof got);
  cr_expect_str_eq(got, "hap-profile: said by rank 0\n"
                        "Try 'hap-profile --help'.\n");
  cr_expect_eq(usage_rc[0], 2, "the silent rank exits 2 too");
  cr_expect_eq(usage_rc[1], 2);
}

static void say_long(void) {
  char big[5000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  hap_report("p", 1, "%s|", big);
}

Test(report, long_line_whole) {
  static char got[6000];
  capture_stderr(say_long, got, sizeof got);
  cr_expect_eq(strlen(got), strlen("p: rank 1: ") + 4999 + 2, "nothing cut");
  cr_expect_eq(strncmp(got, "p: rank 1: aaa", 14), 0);
  cr_expect_str_eq(got + strlen(got) - 3, "a|\n");
}

/* ---- watchdog.h: the lines ------------------------------------------------------------------ */

static const hap_watchdog_text profile_text = {
    .timeout = "no measurement step finished for {timeout} s (--timeout) during {phase}; a peer "
               "rank died or hangs; stopping without writing a profile",
    .stopped = "stopped by {signal} during {phase} (mpirun stops every rank when one rank fails); "
               "no profile written"};

static const hap_watchdog_text run_text = {
    .timeout = "task '{phase}' did not finish within {timeout} s (--timeout): a peer rank died or "
               "hangs; stopping",
    .stopped = "stopped by {signal} during task '{phase}' (mpirun stops every rank when one rank "
               "fails)"};

static const char *task_names[] = {"embed.fwd", "fc1.weight.grad.all_reduce"};
static volatile int current = -1;

static const char *task_phase(const void *ctx) {
  const char *const *names = ctx;
  return names != NULL && current >= 0 ? names[current] : "(between tasks)";
}

Test(watchdog, lines_with_the_tools_wording) {
  hap_err err = {0};
  cr_assert_eq(hap_watchdog_install("hap-profile", 3, 300, &profile_text, &err), HAP_OK, "%s",
               err.msg);
  hap_watchdog_set_phase("p2p");
  char line[1024];
  size_t n = hap_watchdog_message(SIGALRM, line, sizeof line);
  cr_expect_str_eq(line, "hap-profile: rank 3: no measurement step finished for 300 s (--timeout) "
                         "during p2p; a peer rank died or hangs; stopping without writing a "
                         "profile\n");
  cr_expect_eq(n, strlen(line));
  hap_watchdog_message(SIGTERM, line, sizeof line);
  cr_expect_str_eq(line, "hap-profile: rank 3: stopped by SIGTERM during p2p (mpirun stops every "
                         "rank when one rank fails); no profile written\n");
  hap_watchdog_set_phase("collectives: all_reduce");
  hap_watchdog_message(SIGINT, line, sizeof line);
  cr_expect_str_eq(line, "hap-profile: rank 3: stopped by SIGINT during collectives: all_reduce "
                         "(mpirun stops every rank when one rank fails); no profile written\n");

  /* hap-run: a fractional timeout rounds up; the phase is the runner's current task */
  cr_assert_eq(hap_watchdog_install("hap-run", 0, 2.5, &run_text, &err), HAP_OK);
  hap_watchdog_set_phase_fn(task_phase, NULL);
  hap_watchdog_message(SIGALRM, line, sizeof line);
  cr_expect_str_eq(line, "hap-run: rank 0: task '(between tasks)' did not finish within 3 s "
                         "(--timeout): a peer rank died or hangs; stopping\n");
  hap_watchdog_set_phase_fn(task_phase, task_names);
  current = 1;
  hap_watchdog_message(SIGTERM, line, sizeof line);
  cr_expect_str_eq(line, "hap-run: rank 0: stopped by SIGTERM during task "
                         "'fc1.weight.grad.all_reduce' (mpirun stops every rank when one rank "
                         "fails)\n");
  current = -1;
  hap_watchdog_set_phase("start-up"); /* back to a string */
  hap_watchdog_message(SIGINT, line, sizeof line);
  cr_expect_str_eq(line, "hap-run: rank 0: stopped by SIGINT during task 'start-up' (mpirun stops "
                         "every rank when one rank fails)\n");
}

Test(watchdog, cut_lines_keep_the_newline) {
  hap_watchdog_text t = {.timeout = "{timeout} s, {phase}, {unknown} {", .stopped = "{signal}"};
  cr_assert_eq(hap_watchdog_install("p", -1, 0, &t, NULL), HAP_OK);
  hap_watchdog_set_phase("x");
  char line[64];
  hap_watchdog_message(SIGALRM, line, sizeof line);
  cr_expect_str_eq(line, "p: 0 s, x, {unknown} {\n", "no rank; unknown names copied");
  char small[8];
  size_t n = hap_watchdog_message(SIGTERM, small, sizeof small);
  cr_expect_eq(n, 7);
  cr_expect_str_eq(small, "p: SIG\n");
  cr_expect_eq(hap_watchdog_message(SIGTERM, small, 1), 0);
  cr_expect_str_eq(small, "");
}

Test(watchdog, refuses_bad_setup) {
  hap_err err = {0};
  cr_expect_eq(hap_watchdog_install("p", 0, -1, &run_text, &err), HAP_EINVAL);
  hap_err_clear(&err);
  cr_expect_eq(hap_watchdog_install("p", 0, 2e6, &run_text, &err), HAP_EINVAL);
  char big[300];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  hap_watchdog_text t = {.timeout = big, .stopped = "s"};
  hap_err_clear(&err);
  cr_expect_eq(hap_watchdog_install("p", 0, 1, &t, &err), HAP_EINVAL);
  char path[HAP_WATCHDOG_PATH_MAX + 1];
  memset(path, 'p', sizeof path - 1);
  path[sizeof path - 1] = '\0';
  hap_err_clear(&err);
  cr_expect_eq(hap_watchdog_unlink_on_exit(path, &err), HAP_EINVAL);
  cr_expect_eq(hap_watchdog_unlink_on_exit(NULL, &err), HAP_OK, "NULL: nothing to remove");
}

/* ---- watchdog.h: the real handler in a child --------------------------------------------------
 */

typedef struct child {
  pid_t pid;
  int err_fd;   /* the child's stderr */
  int ready_fd; /* one byte once the child is set up */
} child;

/* Fork a child that installs the watchdog (timeout_s, hap-profile's wording, rank 2, phase "p2p"),
 * registers `unlink_path` (may be NULL), arms the watchdog when `arm`, goes quiet when `quiet`
 * (hap_watchdog_quiet), says it is ready and
 * waits for a signal: 10 s at most, then exit 9 (a broken watchdog fails the test, not hangs it).
 * Its stdout goes to /dev/null, so it never holds the test runner's pipes. */
static child start_child(double timeout_s, bool arm, const char *unlink_path, bool quiet) {
  int errp[2], readyp[2];
  cr_assert_eq(pipe(errp), 0);
  cr_assert_eq(pipe(readyp), 0);
  child c = {fork(), errp[0], readyp[0]};
  cr_assert_geq(c.pid, 0);
  if (c.pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    dup2(errp[1], STDERR_FILENO);
    close(errp[0]);
    close(readyp[0]);
    if (hap_watchdog_install("hap-profile", 2, timeout_s, &profile_text, NULL) != HAP_OK ||
        hap_watchdog_unlink_on_exit(unlink_path, NULL) != HAP_OK)
      _exit(3);
    hap_watchdog_set_phase("p2p");
    if (quiet)
      hap_watchdog_quiet();
    if (arm)
      hap_watchdog_arm();
    if (write(readyp[1], "r", 1) != 1)
      _exit(4);
    for (int i = 0; i < 100; i++) /* a signal ends the sleep, and the handler the process */
      nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
    _exit(9);
  }
  close(errp[1]);
  close(readyp[1]);
  char r;
  cr_assert_eq(read(c.ready_fd, &r, 1), 1, "the child got ready");
  return c;
}

/* Wait for the child; its stderr into out; its wait status. */
static int finish_child(child c, char *out, size_t len) {
  size_t n = 0;
  ssize_t k;
  while (n + 1 < len && (k = read(c.err_fd, out + n, len - 1 - n)) > 0)
    n += (size_t)k;
  out[n] = '\0';
  int status = 0;
  cr_assert_eq(waitpid(c.pid, &status, 0), c.pid);
  close(c.err_fd);
  close(c.ready_fd);
  return status;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

Test(watchdog_process, timeout_line_and_exit_1, .timeout = 20) {
  double t0 = now_s();
  child c = start_child(1, true, NULL, false);
  char got[1024];
  int status = finish_child(c, got, sizeof got);
  double took = now_s() - t0;
  cr_expect(WIFEXITED(status), "exited, not killed (status %#x)", status);
  cr_expect_eq(WEXITSTATUS(status), 1);
  cr_expect_str_eq(got,
                   "hap-profile: rank 2: no measurement step finished for 1 s (--timeout) during "
                   "p2p; a peer rank died or hangs; stopping without writing a profile\n");
  cr_expect_geq(took, 0.9, "after the timeout, not before (%.3f s)", took);
  cr_expect_leq(took, 10, "about the timeout (%.3f s)", took);
}

Test(watchdog_process, sigterm_line_removes_the_temporary, .timeout = 20) {
  char path[] = "/tmp/hap-test-harness-tmp-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  child c = start_child(60, true, path, false);
  kill(c.pid, SIGTERM);
  char got[1024];
  int status = finish_child(c, got, sizeof got);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 1, "exit 1 (status %#x)", status);
  cr_expect_str_eq(got,
                   "hap-profile: rank 2: stopped by SIGTERM during p2p (mpirun stops every rank "
                   "when one rank fails); no profile written\n");
  struct stat st;
  cr_expect_neq(stat(path, &st), 0, "the temporary is gone");
  unlink(path);
}

Test(watchdog_process, disarmed_does_not_fire, .timeout = 20) {
  child c = start_child(1, false, NULL, false); /* installed, never armed */
  nanosleep(&(struct timespec){.tv_sec = 1, .tv_nsec = 500000000}, NULL);
  int status = 0;
  cr_expect_eq(waitpid(c.pid, &status, WNOHANG), 0, "still waiting after the timeout");
  kill(c.pid, SIGINT);
  char got[1024];
  status = finish_child(c, got, sizeof got);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  cr_expect_str_eq(got,
                   "hap-profile: rank 2: stopped by SIGINT during p2p (mpirun stops every rank "
                   "when one rank fails); no profile written\n");
}

/* Arms closer together than the timeout keep the rank alive for several timeouts (the alarm set
 * by the first arm rings and is set again for the time left); once they stop, the line comes
 * after the timeout and at most a second or so later. */
Test(watchdog_process, arms_keep_it_quiet_until_they_stop, .timeout = 20) {
  int errp[2];
  cr_assert_eq(pipe(errp), 0);
  double t0 = now_s();
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(errp[1], STDERR_FILENO);
    close(errp[0]);
    if (hap_watchdog_install("hap-profile", 2, 2, &profile_text, NULL) != HAP_OK)
      _exit(3);
    hap_watchdog_set_phase("p2p");
    for (int i = 0; i < 16; i++) { /* 4 s of arms 0.25 s apart: twice the timeout */
      hap_watchdog_arm();
      nanosleep(&(struct timespec){.tv_nsec = 250000000}, NULL);
    }
    if (write(STDERR_FILENO, "alive\n", 6) != 6)
      _exit(4);
    for (int i = 0; i < 100; i++)
      nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
    _exit(9);
  }
  close(errp[1]);
  child c = {pid, errp[0], -1};
  char got[1024];
  size_t n = 0;
  ssize_t k;
  while (n + 1 < sizeof got && (k = read(c.err_fd, got + n, sizeof got - 1 - n)) > 0)
    n += (size_t)k;
  got[n] = '\0';
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  close(c.err_fd);
  double took = now_s() - t0;
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 1, "exit 1 (status %#x)", status);
  cr_expect_str_eq(got,
                   "alive\nhap-profile: rank 2: no measurement step finished for 2 s (--timeout) "
                   "during p2p; a peer rank died or hangs; stopping without writing a profile\n");
  cr_expect_geq(took, 5.8, "the timeout counts from the last arm (%.3f s)", took);
  cr_expect_leq(took, 14, "about the timeout after the last arm (%.3f s)", took);
}

/* Quiet (the failure was said already): SIGTERM ends the rank with exit 1, no line, the temporary
 * removed; the timeout still speaks. */
Test(watchdog_process, quiet_sigterm_says_nothing, .timeout = 20) {
  char path[] = "/tmp/hap-test-harness-tmp-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  child c = start_child(60, true, path, true);
  kill(c.pid, SIGTERM);
  char got[1024];
  int status = finish_child(c, got, sizeof got);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 1, "exit 1 (status %#x)", status);
  cr_expect_str_eq(got, "", "no line");
  struct stat st;
  cr_expect_neq(stat(path, &st), 0, "the temporary is gone");
  unlink(path);
  child t = start_child(1, true, NULL, true);
  status = finish_child(t, got, sizeof got);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  cr_expect_not_null(strstr(got, "no measurement step finished for 1 s"), "%s", got);
}

/* ---- interrupt.h -------------------------------------------------------------------------- */

Test(interrupt, first_sigint_sets_the_flag_second_ends, .timeout = 20) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    volatile sig_atomic_t *flag = hap_interrupt_on_sigint();
    if (*flag != 0)
      _exit(3);
    raise(SIGINT);
    if (*flag != 1)
      _exit(4);
    raise(SIGINT); /* the default action now */
    _exit(5);
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT,
            "flag set by the first, killed by the second (status %#x)", status);
}

/* ---- mpi_start.h: the lowest failing rank over a fake communicator -------------------------- */

/* A fake all_reduce(MIN, int32) over 4 ranks: the others contribute `others`; fails when set. */
typedef struct fake_world {
  int32_t others;
  bool fail;
} fake_world;

static hap_status fake_all_reduce(hap_comm *c, const void *send, void *recv, int64_t count,
                                  hap_dtype dtype, hap_reduce_op op, hap_err *err) {
  const fake_world *w = c->impl;
  cr_assert(count == 1 && dtype == HAP_I32 && op == HAP_REDUCE_MIN);
  if (w->fail)
    return hap_err_set(err, HAP_EMPI, "mpi: all_reduce failed");
  int32_t mine = *(const int32_t *)send;
  *(int32_t *)recv = mine < w->others ? mine : w->others;
  return HAP_OK;
}

static const hap_comm_ops fake_ops = {.name = "fake", .all_reduce = fake_all_reduce};

Test(mpi_start, first_failure) {
  fake_world w = {.others = 4};
  hap_comm comm = {.ops = &fake_ops, .rank = 2, .size = 4, .impl = &w};
  hap_err err = {0};
  cr_expect_eq(hap_harness_first_failure(&comm, HAP_OK, &err), 4, "none failed: size");
  cr_expect_eq(err.status, HAP_OK);

  hap_err_set(&err, HAP_ENOGPU, "no GPU here");
  cr_expect_eq(hap_harness_first_failure(&comm, HAP_ENOGPU, &err), 2, "this rank alone");
  cr_expect_str_eq(err.msg, "no GPU here", "its own error kept");

  w.others = 1; /* rank 1 failed too */
  cr_expect_eq(hap_harness_first_failure(&comm, HAP_ENOGPU, &err), 1, "the lowest");
  hap_err_clear(&err);
  cr_expect_eq(hap_harness_first_failure(&comm, HAP_OK, &err), 1, "seen by a healthy rank");

  w.fail = true; /* the agreement fails: a failing rank speaks for itself, a healthy one is 0 */
  hap_err_set(&err, HAP_EINVAL, "bad plan");
  cr_expect_eq(hap_harness_first_failure(&comm, HAP_EINVAL, &err), 2);
  cr_expect_str_eq(err.msg, "bad plan");
  hap_err_clear(&err);
  cr_expect_eq(hap_harness_first_failure(&comm, HAP_OK, &err), 0);
  cr_expect_eq(err.status, HAP_EMPI);
  cr_expect_str_eq(err.msg, "mpi: all_reduce failed", "the agreement's error to say");
}
