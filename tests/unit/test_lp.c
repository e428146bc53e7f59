/* The sparse LP layer over GLPK (synth/lp.h): real LPs with hand-derived optima (HAP's ratio
 * balance, constant terms, one epigraph variable per step, bounds, equalities, free variables),
 * infeasible and unbounded LPs, bad input refused before GLPK sees it, GLPK aborts caught, silence
 * on stdout/stderr, CPLEX-LP output, and a synthesizer-sized LP. */
#include <criterion/criterion.h>
#include <glpk.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/fileio.h"
#include "synth/lp.h"

#define TOL 1e-9

static hap_lp *new_lp(const char *name) {
  hap_lp *lp = hap_lp_create(name);
  cr_assert_not_null(lp);
  return lp;
}

static int add_var(hap_lp *lp, double lo, double hi, double obj) {
  hap_err err = {0};
  int v = -1;
  cr_assert_eq(hap_lp_add_var(lp, lo, hi, obj, &v, &err), HAP_OK, "%s", err.msg);
  cr_assert_eq(v, hap_lp_n_vars(lp) - 1);
  return v;
}

static void add_row(hap_lp *lp, const int *vars, const double *coefs, int n, double lo, double hi) {
  hap_err err = {0};
  cr_assert_eq(hap_lp_add_row(lp, vars, coefs, n, lo, hi, &err), HAP_OK, "%s", err.msg);
}

static double solve_ok(const hap_lp *lp, double *x) {
  hap_err err = {0};
  double obj = NAN;
  cr_assert_eq(hap_lp_solve(lp, x, &obj, &err), HAP_OK, "%s", err.msg);
  return obj;
}

static void expect_near(double got, double want, const char *what) {
  cr_expect(fabs(got - want) <= TOL * fmax(1.0, fabs(want)), "%s: got %.17g, want %.17g", what, got,
            want);
}

/* HAP's ratio LP for one step: minimise t subject to c_i + a_i r_i <= t on every device i
 * (a_i r_i - t <= -c_i; a_i in s per unit ratio, c_i in s) and sum_i r_i = 1, r_i >= 0. Variable
 * 0 is t, variable 1 + i is r_i. */
static hap_lp *ratio_lp(int n, const double *a, const double *c) {
  hap_lp *lp = new_lp("ratios");
  int t = add_var(lp, -INFINITY, INFINITY, 1.0);
  int r[64];
  double ones[64];
  cr_assert(n <= 64);
  for (int i = 0; i < n; i++) {
    r[i] = add_var(lp, 0.0, INFINITY, 0.0);
    ones[i] = 1.0;
  }
  for (int i = 0; i < n; i++)
    add_row(lp, (int[]){r[i], t}, (double[]){a[i], -1.0}, 2, -INFINITY, c != NULL ? -c[i] : 0.0);
  add_row(lp, r, ones, n, 1.0, 1.0);
  return lp;
}

/* ---------------------------------------------------------------------------------------------
 * (1) HAP-SPEC 3.6: device FLOP rates (2F, F) give a = (1/(2F), 1/F) and r = (2/3, 1/3). */

Test(lp, two_devices_balance_by_speed) {
  /* Several magnitudes of a (s per unit ratio): GLPK's tolerances are absolute, so scaling
   * (the presolver's glp_scale_prob) must carry the tiny ones. */
  const double works[] = {1.0, 1e-3, 1e-6, 1e-9};
  for (size_t k = 0; k < sizeof works / sizeof works[0]; k++) {
    double F = 1.0 / works[k]; /* the slow device's rate, in units of work per second */
    double a[2] = {1.0 / (2 * F), 1.0 / F};
    hap_lp *lp = ratio_lp(2, a, NULL);
    double x[3];
    double obj = solve_ok(lp, x);
    expect_near(x[1], 2.0 / 3.0, "r_fast");
    expect_near(x[2], 1.0 / 3.0, "r_slow");
    cr_expect(fabs(x[0] - 1.0 / (3 * F)) <= 1e-9 / F, "t = %g, want %g", x[0], 1.0 / (3 * F));
    cr_expect(fabs(obj - x[0]) <= 1e-12 / F);
    hap_lp_destroy(lp);
  }
}

Test(lp, sixty_four_devices_of_two_speeds) {
  /* 32 devices at 2F interleaved with 32 at F (F = 1e13 FLOP/s, 1e12 FLOP of work): every device
   * finishes together, r_fast = 2 / (32 * 2 + 32) = 1/48, r_slow = 1/96, t = 1e12/(96 F) s. */
  const double F = 1e13, W = 1e12;
  double a[64];
  for (int i = 0; i < 64; i++)
    a[i] = W / (i % 2 == 0 ? 2 * F : F);
  hap_lp *lp = ratio_lp(64, a, NULL);
  double x[65], sum = 0.0;
  solve_ok(lp, x);
  for (int i = 0; i < 64; i++) {
    expect_near(x[1 + i], i % 2 == 0 ? 1.0 / 48 : 1.0 / 96, "r_i");
    sum += x[1 + i];
  }
  expect_near(sum, 1.0, "sum r");
  expect_near(x[0], W / (96 * F), "t");
  hap_lp_destroy(lp);
}

Test(lp, resolve_after_adding_rows) {
  double a[2] = {0.5, 1.0}; /* s */
  hap_lp *lp = ratio_lp(2, a, NULL);
  double x[3];
  expect_near(solve_ok(lp, x), 1.0 / 3.0, "t before");
  /* Cap the fast device at half the work: r = (1/2, 1/2), t = 1 * 1/2 s. */
  add_row(lp, (int[]){1}, (double[]){1.0}, 1, -INFINITY, 0.5);
  expect_near(solve_ok(lp, x), 0.5, "t after");
  expect_near(x[1], 0.5, "r_fast");
  expect_near(x[2], 0.5, "r_slow");
  cr_expect_eq(hap_lp_n_rows(lp), 4);
  hap_lp_destroy(lp);
}

/* ---------------------------------------------------------------------------------------------
 * (2) Constant terms are kept. HAP's LP dropped them; here device 0 pays a fixed 0.2 s (say a
 * launch or a latency term) and both take 1 s for the whole work. */

Test(lp, constant_terms_change_the_optimum) {
  double a[2] = {1.0, 1.0}, c[2] = {0.2, 0.0}; /* s */
  hap_lp *kept = ratio_lp(2, a, c);
  double x[3];
  /* 0.2 + r0 = r1 and r0 + r1 = 1: r = (0.4, 0.6), makespan 0.6 s. */
  expect_near(solve_ok(kept, x), 0.6, "t with constants");
  expect_near(x[1], 0.4, "r0");
  expect_near(x[2], 0.6, "r1");
  hap_lp_destroy(kept);

  /* Without them the LP balances r = (1/2, 1/2) and reports 0.5 s, but that split really takes
   * max(0.2 + 0.5, 0.5) = 0.7 s: worse than 0.6, and not what the LP said. */
  hap_lp *dropped = ratio_lp(2, a, NULL);
  expect_near(solve_ok(dropped, x), 0.5, "t without constants");
  expect_near(x[1], 0.5, "r0 (constants dropped)");
  expect_near(fmax(c[0] + a[0] * x[1], c[1] + a[1] * x[2]), 0.7, "true makespan");
  hap_lp_destroy(dropped);
}

/* ---------------------------------------------------------------------------------------------
 * (3) One epigraph variable per step: minimise t_0 + t_1 + t_2 with t_j >= a_ij r_i.
 * Devices 0, 1 are twice as fast at step 0 (3 units of work), devices 2, 3 twice as fast at step 2
 * (1 unit); step 1 (1 unit) runs at the same speed everywhere:
 *   a_0 = (1.5, 1.5, 3, 3), a_1 = (1, 1, 1, 1), a_2 = (1, 1, 0.5, 0.5)   (s per unit ratio).
 * On the symmetric line r = (p, p, q, q), q = 1/2 - p, the objective is
 *   3 max(p/2, q) + max(p, q) + max(p, q/2),
 * whose slope is -1 on (1/4, 1/3) and +3.5 beyond, so p = 1/3: r = (1/3, 1/3, 1/6, 1/6),
 * t = (1/2, 1/3, 1/3), objective 7/6. Off that line, for any direction d (sum d = 0) the
 * derivative 3 max(d0/2, d1/2, d2, d3) + 2 max(d0, d1) is > 0, so this optimum is unique. */

Test(lp, epigraph_per_step) {
  const double a[3][4] = {{1.5, 1.5, 3, 3}, {1, 1, 1, 1}, {1, 1, 0.5, 0.5}};
  hap_lp *lp = new_lp("steps");
  int r[4], t[3];
  for (int i = 0; i < 4; i++)
    r[i] = add_var(lp, 0.0, INFINITY, 0.0);
  for (int j = 0; j < 3; j++)
    t[j] = add_var(lp, -INFINITY, INFINITY, 1.0);
  for (int j = 0; j < 3; j++)
    for (int i = 0; i < 4; i++)
      add_row(lp, (int[]){r[i], t[j]}, (double[]){a[j][i], -1.0}, 2, -INFINITY, 0.0);
  add_row(lp, r, (double[]){1, 1, 1, 1}, 4, 1.0, 1.0);
  double x[7];
  double obj = solve_ok(lp, x);
  const double want_r[4] = {1.0 / 3, 1.0 / 3, 1.0 / 6, 1.0 / 6};
  const double want_t[3] = {0.5, 1.0 / 3, 1.0 / 3};
  for (int i = 0; i < 4; i++)
    expect_near(x[r[i]], want_r[i], "r_i");
  for (int j = 0; j < 3; j++)
    expect_near(x[t[j]], want_t[j], "t_j");
  expect_near(obj, 7.0 / 6.0, "objective");

  /* Cross-check against the objective at 2000 random splits: none is better. */
  unsigned seed = 12345;
  for (int s = 0; s < 2000; s++) {
    double p[4], sum = 0.0;
    for (int i = 0; i < 4; i++) {
      seed = seed * 1103515245u + 12345u;
      p[i] = (double)(seed >> 8) / (double)(1u << 24) + 1e-6;
      sum += p[i];
    }
    double f = 0.0;
    for (int j = 0; j < 3; j++) {
      double m = 0.0;
      for (int i = 0; i < 4; i++)
        m = fmax(m, a[j][i] * p[i] / sum);
      f += m;
    }
    cr_expect(f >= obj - TOL, "split %d has objective %.17g < %.17g", s, f, obj);
  }
  hap_lp_destroy(lp);
}

/* ---------------------------------------------------------------------------------------------
 * (4) Bounds, equality and range rows, free and fixed variables, merged terms. */

Test(lp, bounds_equalities_free_variables) {
  /* minimise x + 2y - z + w, x in [1, 4], y free, z <= 3, w = 2 (fixed), subject to
   *   x + y = 5 (given as 0.5x + y + 0.5x + 0z), 0 <= x - w <= 1.5, y - 2z >= -4.
   * With y = 5 - x the objective is 12 - (x + z); x <= 3.5 and z <= min(3, (9 - x) / 2), so
   * x + z is largest at x = 3.5, z = 2.75: y = 1.5, objective 5.75. */
  hap_lp *lp = new_lp("mixed");
  int x = add_var(lp, 1.0, 4.0, 1.0);
  int y = add_var(lp, -INFINITY, INFINITY, 2.0);
  int z = add_var(lp, -INFINITY, 3.0, -1.0);
  int w = add_var(lp, 2.0, 2.0, 1.0);
  add_row(lp, (int[]){x, y, x, z}, (double[]){0.5, 1.0, 0.5, 0.0}, 4, 5.0, 5.0);
  cr_expect_eq(hap_lp_n_nonzeros(lp), 2, "repeated x merged, zero z dropped");
  add_row(lp, (int[]){x, w}, (double[]){1.0, -1.0}, 2, 0.0, 1.5);
  add_row(lp, (int[]){y, z}, (double[]){1.0, -2.0}, 2, -4.0, INFINITY);
  double v[4];
  expect_near(solve_ok(lp, v), 5.75, "objective");
  expect_near(v[x], 3.5, "x");
  expect_near(v[y], 1.5, "y");
  expect_near(v[z], 2.75, "z");
  expect_near(v[w], 2.0, "w");
  hap_lp_destroy(lp);
}

Test(lp, bounds_only_and_cancelling_terms) {
  /* No rows at all: minimise 2a - b with a in [1, 2], b in [-1, 3]: a = 1, b = 3. */
  hap_lp *lp = new_lp("box");
  int a = add_var(lp, 1.0, 2.0, 2.0);
  int b = add_var(lp, -1.0, 3.0, -1.0);
  double v[2];
  expect_near(solve_ok(lp, v), -1.0, "objective");
  expect_near(v[a], 1.0, "a");
  expect_near(v[b], 3.0, "b");
  /* a - a cancels: an empty row, satisfied by 0 in [-1, 1]. */
  add_row(lp, (int[]){a, a}, (double[]){1.0, -1.0}, 2, -1.0, 1.0);
  cr_expect_eq(hap_lp_n_nonzeros(lp), 0);
  cr_expect_eq(hap_lp_n_rows(lp), 1);
  expect_near(solve_ok(lp, v), -1.0, "objective with an empty row");
  hap_lp_destroy(lp);
}

/* ---------------------------------------------------------------------------------------------
 * (5) No optimum: HAP_ELP, with a message that says why, and x untouched. */

static void expect_lp_error(const hap_lp *lp, const char *needle) {
  double x[4] = {42, 42, 42, 42}, obj = 42;
  hap_err err = {0};
  cr_assert_eq(hap_lp_solve(lp, x, &obj, &err), HAP_ELP, "%s", err.msg);
  cr_expect_not_null(strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
  cr_expect_eq(x[0], 42.0);
  cr_expect_eq(obj, 42.0);
}

Test(lp, infeasible) {
  hap_lp *lp = new_lp("ratios");
  int r1 = add_var(lp, 0.0, 0.4, 0.0), r2 = add_var(lp, 0.0, 0.4, 0.0);
  add_row(lp, (int[]){r1, r2}, (double[]){1, 1}, 2, 1.0, 1.0);
  expect_lp_error(lp, "LP 'ratios' is infeasible");
  hap_lp_destroy(lp);

  /* Contradicting rows on free variables. */
  lp = new_lp("rows");
  int x = add_var(lp, -INFINITY, INFINITY, 1.0), y = add_var(lp, -INFINITY, INFINITY, 1.0);
  add_row(lp, (int[]){x, y}, (double[]){1, 1}, 2, 3.0, INFINITY);
  add_row(lp, (int[]){x, y}, (double[]){2, 2}, 2, -INFINITY, 4.0);
  expect_lp_error(lp, "LP 'rows' is infeasible");
  hap_lp_destroy(lp);
}

Test(lp, unbounded) {
  hap_lp *lp = new_lp("down");
  add_var(lp, 0.0, INFINITY, -1.0); /* minimise -x, x >= 0 */
  expect_lp_error(lp, "LP 'down' is unbounded");
  hap_lp_destroy(lp);

  /* With rows: minimise -x - y, x - y <= 1: unbounded along (1, 1). */
  lp = new_lp("ray");
  int x = add_var(lp, 0.0, INFINITY, -1.0), y = add_var(lp, 0.0, INFINITY, -1.0);
  add_row(lp, (int[]){x, y}, (double[]){1, -1}, 2, -INFINITY, 1.0);
  expect_lp_error(lp, "LP 'ray' is unbounded");
  hap_lp_destroy(lp);
}

/* ---------------------------------------------------------------------------------------------
 * (6) Bad input is refused with HAP_EINVAL before GLPK sees it, and leaves the LP unchanged. */

static void expect_row_refused(hap_lp *lp, const int *vars, const double *coefs, int n, double lo,
                               double hi, const char *needle) {
  int rows = hap_lp_n_rows(lp), nnz = hap_lp_n_nonzeros(lp);
  hap_err err = {0};
  cr_assert_eq(hap_lp_add_row(lp, vars, coefs, n, lo, hi, &err), HAP_EINVAL, "accepted: %s",
               needle);
  cr_expect_not_null(strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
  cr_expect_eq(hap_lp_n_rows(lp), rows);
  cr_expect_eq(hap_lp_n_nonzeros(lp), nnz);
}

static void expect_var_refused(hap_lp *lp, double lo, double hi, double obj, const char *needle) {
  int n = hap_lp_n_vars(lp), v = -7;
  hap_err err = {0};
  cr_assert_eq(hap_lp_add_var(lp, lo, hi, obj, &v, &err), HAP_EINVAL, "accepted: %s", needle);
  cr_expect_not_null(strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
  cr_expect_eq(hap_lp_n_vars(lp), n);
  cr_expect_eq(v, -7);
}

Test(lp, bad_input_refused) {
  hap_lp *lp = new_lp("bad");
  hap_err err = {0};
  double x[2];
  cr_expect_eq(hap_lp_solve(lp, x, NULL, &err), HAP_EINVAL, "no variables");
  cr_expect_not_null(strstr(err.msg, "no variables"), "%s", err.msg);

  int a = add_var(lp, 0.0, 1.0, 1.0), b = add_var(lp, 0.0, 1.0, 1.0);
  add_row(lp, (int[]){a, b}, (double[]){1, 1}, 2, 1.0, 1.0);
  expect_row_refused(lp, (int[]){a, b}, (double[]){1, NAN}, 2, 0, 1, "coefficient nan");
  expect_row_refused(lp, (int[]){a}, (double[]){INFINITY}, 1, 0, 1, "coefficient inf");
  expect_row_refused(lp, (int[]){a, 2}, (double[]){1, 1}, 2, 0, 1, "variable 2; expected 0 .. 1");
  expect_row_refused(lp, (int[]){-1}, (double[]){1}, 1, 0, 1, "variable -1");
  expect_row_refused(lp, (int[]){a}, (double[]){1}, 1, 2.0, 1.0, "row 1: bounds [2, 1]");
  expect_row_refused(lp, (int[]){a}, (double[]){1}, 1, NAN, 1.0, "bounds [nan, 1]");
  expect_row_refused(lp, (int[]){a}, (double[]){1}, 1, INFINITY, INFINITY, "bounds [inf, inf]");
  expect_row_refused(lp, (int[]){a}, (double[]){1}, 1, -INFINITY, -INFINITY, "bounds [-inf");
  expect_row_refused(lp, (int[]){a, a}, (double[]){1e308, 1e308}, 2, 0, 1, "sum to infinity");
  expect_row_refused(lp, NULL, NULL, 1, 0, 1, "1 terms");
  expect_row_refused(lp, (int[]){a}, (double[]){1}, -1, 0, 1, "-1 terms");

  expect_var_refused(lp, 1.0, 0.0, 0.0, "variable 2: bounds [1, 0]");
  expect_var_refused(lp, NAN, 0.0, 0.0, "bounds [nan, 0]");
  expect_var_refused(lp, 0.0, -INFINITY, 0.0, "bounds [0, -inf]");
  expect_var_refused(lp, 0.0, 1.0, NAN, "objective coefficient nan");
  expect_var_refused(lp, 0.0, 1.0, -INFINITY, "objective coefficient -inf");

  /* The LP is still whole: minimise a + b with a + b = 1. */
  expect_near(solve_ok(lp, x), 1.0, "objective after refusals");
  hap_lp_destroy(lp);
}

/* ---------------------------------------------------------------------------------------------
 * The guard: a GLPK abort (here a deliberate misuse) becomes HAP_ELP, and GLPK works afterwards. */

static hap_status misuse_glpk(void *ctx, hap_err *err) {
  (void)ctx;
  (void)err;
  glp_prob *P = glp_create_prob();
  glp_add_cols(P, -1); /* GLPK: "invalid number of columns", then abort() */
  glp_delete_prob(P);
  return HAP_OK;
}

static hap_status pass_through(void *ctx, hap_err *err) {
  (void)ctx;
  return hap_err_set(err, HAP_ENOTFOUND, "from fn");
}

Test(lp, glpk_abort_becomes_hap_elp) {
  hap_err err = {0};
  cr_assert_eq(hap_lp_run_guarded("test", misuse_glpk, NULL, &err), HAP_ELP);
  cr_expect_not_null(strstr(err.msg, "test: GLPK aborted: glp_add_cols"), "%s", err.msg);
  cr_expect_null(strchr(err.msg, '\n'), "one line: %s", err.msg);
  hap_err_clear(&err);
  cr_expect_eq(hap_lp_run_guarded("test", pass_through, NULL, &err), HAP_ENOTFOUND);
  cr_expect_str_eq(err.msg, "from fn");
  /* Twice more, then a normal solve: the freed environment comes back. */
  cr_expect_eq(hap_lp_run_guarded("again", misuse_glpk, NULL, NULL), HAP_ELP);
  cr_expect_eq(hap_lp_run_guarded("again", misuse_glpk, NULL, NULL), HAP_ELP);
  double a[2] = {0.5, 1.0};
  hap_lp *lp = ratio_lp(2, a, NULL);
  double x[3];
  expect_near(solve_ok(lp, x), 1.0 / 3.0, "t after aborts");
  hap_lp_destroy(lp);
}

/* ---------------------------------------------------------------------------------------------
 * (7) Nothing reaches stdout or stderr: optimal, infeasible, unbounded, aborted, written. */

Test(lp, silent) {
  fflush(stdout);
  fflush(stderr);
  FILE *sink = tmpfile();
  cr_assert_not_null(sink);
  int out = dup(STDOUT_FILENO), errfd = dup(STDERR_FILENO);
  cr_assert(out >= 0 && errfd >= 0);
  cr_assert(dup2(fileno(sink), STDOUT_FILENO) >= 0 && dup2(fileno(sink), STDERR_FILENO) >= 0);

  double a[2] = {0.5, 1.0}, x[3], obj = 0.0;
  hap_lp *ok = ratio_lp(2, a, NULL);
  hap_status st_ok = hap_lp_solve(ok, x, &obj, NULL);
  char path[] = "/tmp/hap_test_lp_XXXXXX";
  int fd = mkstemp(path);
  hap_status st_write = fd >= 0 ? hap_lp_write(ok, path, NULL) : HAP_EIO;
  hap_lp *bad = new_lp("infeasible");
  int r = add_var(bad, 0.0, 0.4, 0.0);
  hap_status st_add = hap_lp_add_row(bad, &r, (double[]){1.0}, 1, 1.0, 1.0, NULL);
  hap_status st_infeasible = hap_lp_solve(bad, x, NULL, NULL);
  hap_lp *down = new_lp("unbounded");
  int d = 0;
  hap_status st_var = hap_lp_add_var(down, -INFINITY, 0.0, 1.0, &d, NULL);
  hap_status st_unbounded = hap_lp_solve(down, x, NULL, NULL);
  hap_status st_abort = hap_lp_run_guarded("silent", misuse_glpk, NULL, NULL);
  hap_status st_bad_path = hap_lp_write(ok, "/nonexistent-dir/x.lp", NULL);

  fflush(stdout);
  fflush(stderr);
  dup2(out, STDOUT_FILENO);
  dup2(errfd, STDERR_FILENO);
  close(out);
  close(errfd);
  if (fd >= 0) {
    close(fd);
    unlink(path);
  }
  char seen[256] = "";
  rewind(sink);
  size_t n = fread(seen, 1, sizeof seen - 1, sink);
  fclose(sink);
  cr_expect_eq(n, 0, "printed: '%s'", seen);
  cr_expect_eq(st_ok, HAP_OK);
  cr_expect_eq(st_write, HAP_OK);
  cr_expect_eq(st_add, HAP_OK);
  cr_expect_eq(st_infeasible, HAP_ELP);
  cr_expect_eq(st_var, HAP_OK);
  cr_expect_eq(st_unbounded, HAP_ELP);
  cr_expect_eq(st_abort, HAP_ELP);
  cr_expect_eq(st_bad_path, HAP_EIO);
  hap_lp_destroy(ok);
  hap_lp_destroy(bad);
  hap_lp_destroy(down);
}

/* ---------------------------------------------------------------------------------------------
 * CPLEX-LP output. */

Test(lp, write_cplex_lp) {
  hap_lp *lp = new_lp("ratios");
  int t = add_var(lp, -INFINITY, INFINITY, 1.0);
  int r0 = add_var(lp, 0.0, INFINITY, 0.0), r1 = add_var(lp, 0.0, INFINITY, 0.0);
  add_row(lp, (int[]){r0, t}, (double[]){0.5, -1.0}, 2, -INFINITY, -0.25);
  add_row(lp, (int[]){r1, t}, (double[]){1.0, -1.0}, 2, -INFINITY, 0.0);
  add_row(lp, (int[]){r0, r1}, (double[]){1.0, 1.0}, 2, 1.0, 1.0);
  char dir[] = "/tmp/hap_test_lp_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char path[64];
  snprintf(path, sizeof path, "%s/ratios.lp", dir);
  hap_err err = {0};
  cr_assert_eq(hap_lp_write(lp, path, &err), HAP_OK, "%s", err.msg);
  char *text = NULL;
  size_t len = 0;
  cr_assert_eq(hap_read_file(path, &text, &len, &err), HAP_OK, "%s", err.msg);
  /* Variables x<i> and rows r<k> carry the API's 0-based indices. GLPK lists a row's terms in
   * its own order, so rows are checked term by term. */
  const char *want[] = {"\\* Problem: ratios *\\",
                        "Minimize",
                        " obj: + x0",
                        "Subject To",
                        "Bounds",
                        " x0 free",
                        "End"};
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
    cr_expect_not_null(strstr(text, want[k]), "no '%s' in:\n%s", want[k], text);
  const char *rows[][4] = {{" r0: ", "- x0", "+ 0.5 x1", " <= -0.25\n"},
                           {" r1: ", "- x0", "+ x2", " <= 0\n"},
                           {" r2: ", "+ x1", "+ x2", " = 1\n"}};
  for (size_t k = 0; k < 3; k++) {
    const char *line = strstr(text, rows[k][0]);
    cr_assert_not_null(line, "no '%s' in:\n%s", rows[k][0], text);
    const char *eol = strchr(line, '\n');
    for (size_t p = 1; p < 4; p++) {
      const char *at = strstr(line, rows[k][p]);
      cr_expect(at != NULL && at <= eol, "row %zu lacks '%s' in:\n%s", k, rows[k][p], text);
    }
  }
  free(text);
  cr_expect_eq(rmdir(dir), -1, "the file is there");
  unlink(path);
  cr_expect_eq(rmdir(dir), 0, "and nothing else (no temporary left)");

  cr_expect_eq(hap_lp_write(lp, "/nonexistent-dir/x.lp", &err), HAP_EIO);
  hap_lp_destroy(lp);
}

/* ---------------------------------------------------------------------------------------------
 * (8) Synthesizer-sized: 8 segments x 64 devices of 4 speeds, 200 steps, one row per (step,
 * device): t_j >= c_j + w_j r_{s(j),i} / f_i. Every step of a segment prefers r proportional to
 * f, so the optimum is known: r_{s,i} = f_i / sum f, objective sum_j (c_j + w_j / sum f). */

enum { SEGMENTS = 8, DEVICES = 64, STEPS = 200 };

Test(lp, synthesizer_sized, .timeout = 120) {
  const double speeds[4] = {1e13, 1.5e13, 2e13, 3e13}; /* FLOP/s */
  double f[DEVICES], fsum = 0.0;
  for (int i = 0; i < DEVICES; i++) {
    f[i] = speeds[(i * 7) % 4];
    fsum += f[i];
  }
  hap_lp *lp = new_lp("ratios");
  int r[SEGMENTS][DEVICES], t[STEPS];
  for (int s = 0; s < SEGMENTS; s++)
    for (int i = 0; i < DEVICES; i++)
      r[s][i] = add_var(lp, 0.0, INFINITY, 0.0);
  double want_obj = 0.0;
  unsigned seed = 7;
  for (int j = 0; j < STEPS; j++) {
    t[j] = add_var(lp, -INFINITY, INFINITY, 1.0);
    seed = seed * 1103515245u + 12345u;
    double w = 1e9 * (1 + (seed >> 16) % 100); /* FLOP of the whole step */
    double c = 5e-6 * (1 + j % 3);             /* s, launch and latency */
    int s = j * SEGMENTS / STEPS;
    for (int i = 0; i < DEVICES; i++)
      add_row(lp, (int[]){r[s][i], t[j]}, (double[]){w / f[i], -1.0}, 2, -INFINITY, -c);
    want_obj += c + w / fsum;
  }
  double ones[DEVICES];
  for (int i = 0; i < DEVICES; i++)
    ones[i] = 1.0;
  for (int s = 0; s < SEGMENTS; s++)
    add_row(lp, r[s], ones, DEVICES, 1.0, 1.0);
  int n_vars = hap_lp_n_vars(lp);
  double *x = malloc((size_t)n_vars * sizeof *x);
  cr_assert_not_null(x);

  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  double obj = solve_ok(lp, x);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  fprintf(stderr, "unit_lp: %d x %d ratios, %d steps: %d variables, %d rows, %d nonzeros: %.3f s\n",
          SEGMENTS, DEVICES, STEPS, n_vars, hap_lp_n_rows(lp), hap_lp_n_nonzeros(lp), secs);

  for (int s = 0; s < SEGMENTS; s++) {
    double sum = 0.0;
    for (int i = 0; i < DEVICES; i++) {
      expect_near(x[r[s][i]], f[i] / fsum, "r_si");
      sum += x[r[s][i]];
    }
    expect_near(sum, 1.0, "sum of a segment's ratios");
  }
  cr_expect(fabs(obj - want_obj) <= 1e-9 * want_obj, "objective %.17g, want %.17g", obj, want_obj);
  cr_expect(secs < 30.0, "a sparse LP of this size takes about a second, not %.1f s", secs);
  free(x);
  hap_lp_destroy(lp);
}

/* ---------------------------------------------------------------------------------------------
 * Integer variables (branch and cut): a knapsack whose relaxation is fractional. Maximise
 * 5a + 4b + 3c (minimise the negative) with 2a + 3b + c <= 5 (weights), a, b, c binary: the
 * relaxation takes a, c and 2/3 of b (objective -10.67); the integer optimum is a, b (-9)
 * against a, c (-8). */

Test(lp, integer_knapsack) {
  hap_lp *lp = new_lp("knapsack");
  hap_err err = {0};
  int a = add_var(lp, 0, 1, -5), b = add_var(lp, 0, 1, -4), c = add_var(lp, 0, 1, -3);
  add_row(lp, (int[]){a, b, c}, (double[]){2, 3, 1}, 3, -INFINITY, 5);
  double x[3];
  expect_near(solve_ok(lp, x), -5 - 4 * 2.0 / 3 - 3, "relaxation");
  for (int i = 0; i < 3; i++)
    cr_assert_eq(hap_lp_set_integer(lp, (int[]){a, b, c}[i], &err), HAP_OK, "%s", err.msg);
  bool stopped = true;
  double obj = NAN;
  cr_assert_eq(hap_lp_solve_mip(lp, x, &obj, &stopped, &err), HAP_OK, "%s", err.msg);
  expect_near(obj, -9, "integer optimum");
  cr_expect(!stopped);
  expect_near(x[a], 1, "a");
  expect_near(x[b], 1, "b");
  expect_near(x[c], 0, "c");
  cr_expect_eq(hap_lp_set_integer(lp, 3, &err), HAP_EINVAL, "an unknown variable");
  hap_lp_destroy(lp);
}

/* An LP whose relaxation is feasible but no integer point is: 2a = 1. */
Test(lp, integer_infeasible) {
  hap_lp *lp = new_lp("parity");
  hap_err err = {0};
  int a = add_var(lp, 0, 1, 1);
  add_row(lp, (int[]){a}, (double[]){2}, 1, 1, 1);
  cr_assert_eq(hap_lp_set_integer(lp, a, &err), HAP_OK, "%s", err.msg);
  expect_lp_error(lp, "MIP 'parity' is infeasible");
  hap_lp_destroy(lp);
}
