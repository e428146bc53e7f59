/* lp.h — a small sparse linear program (minimise c·x subject to row and variable bounds) solved
 * with GLPK's dual simplex. The model is plain data in hap_lp; every solve or write builds a fresh
 * GLPK problem from it, so adding rows and solving again just works. Inputs are checked before
 * GLPK sees them (GLPK aborts the process on misuse), GLPK never prints, and a GLPK abort that
 * slips through anyway becomes HAP_ELP (hap_lp_run_guarded). docs/lp.md describes the LP the
 * synthesizer builds with it.
 * Ownership: hap_lp_create returns an owned object freed with hap_lp_destroy; it copies its name
 * and every row it is given. No GLPK object outlives a call. Not thread-safe per object; separate
 * objects may be used from separate threads (GLPK keeps one environment per thread). */
#ifndef HAP_LP_H
#define HAP_LP_H

#include <stdbool.h>

#include "base/status.h"

typedef struct hap_lp hap_lp;

/* An empty LP called `name` (NULL: "lp"; used in messages). NULL if memory runs out. */
hap_lp *hap_lp_create(const char *name);
void hap_lp_destroy(hap_lp *lp);

/* Add a variable with bounds lo <= x <= hi (lo may be -INFINITY, hi INFINITY; lo == hi fixes it)
 * and objective coefficient obj. Its index (0, 1, 2, ... in order of addition) goes to *var.
 * HAP_EINVAL for a NaN bound, lo == +inf, hi == -inf, lo > hi or a non-finite obj; HAP_ENOMEM. */
hap_status hap_lp_add_var(hap_lp *lp, double lo, double hi, double obj, int *var, hap_err *err);

/* Add the row lo <= sum_k coefs[k] * x[vars[k]] <= hi (lo may be -INFINITY, hi INFINITY; lo == hi
 * is an equality). Repeated variables are summed and zero sums dropped. All or nothing: on error
 * the LP is unchanged. HAP_EINVAL for n < 0, an unknown variable, a non-finite coefficient (or a
 * sum that overflows), or bounds as in hap_lp_add_var; HAP_ENOMEM. */
hap_status hap_lp_add_row(hap_lp *lp, const int *vars, const double *coefs, int n, double lo,
                          double hi, hap_err *err);

/* Mark variable `var` integer (with bounds [0, 1]: binary): a solve then solves the mixed
 * integer program by GLPK's branch and cut from the relaxation's optimum. HAP_EINVAL for an
 * unknown variable. */
hap_status hap_lp_set_integer(hap_lp *lp, int var, hap_err *err);
/* Branch and cut stops after `seconds` (<= 0: no limit) with the best integer point so far. */
void hap_lp_set_mip_time_limit(hap_lp *lp, double seconds);

int hap_lp_n_vars(const hap_lp *lp);
int hap_lp_n_rows(const hap_lp *lp);
int hap_lp_n_nonzeros(const hap_lp *lp); /* matrix entries after merging */

/* Minimise. On HAP_OK, x[0..n_vars) holds an optimal point (each value clamped into its bounds,
 * which GLPK's basic solution may miss by rounding) and *objective (if non-NULL) its objective.
 * HAP_ELP with a message naming the LP for an infeasible or unbounded LP or a solver failure
 * ("LP 'ratios' is infeasible: ..."); HAP_EINVAL for an LP without variables; HAP_ENOMEM.
 * x is left unchanged on error. GLPK's dual simplex with presolve; when the presolver gives up
 * without an optimum, the LP is solved again without it to tell infeasible from unbounded. With
 * integer variables: the optimum integer point (or, past the time limit, the best one found);
 * HAP_ELP when there is none. */
hap_status hap_lp_solve(const hap_lp *lp, double *x, double *objective, hap_err *err);

/* hap_lp_solve, and *stopped: whether branch and cut hit the time limit (the point is then the
 * best integer point found, not proven optimal). */
hap_status hap_lp_solve_mip(const hap_lp *lp, double *x, double *objective, bool *stopped,
                            hap_err *err);

/* Write the LP in CPLEX LP format (glp_write_lp; `glpsol --lp FILE` re-solves it) to `path`,
 * atomically (a temporary next to it, then rename). Variables are x1..xn and rows r1..rm, numbered
 * from 1 in order of addition. HAP_EIO if the file cannot be written. */
hap_status hap_lp_write(const hap_lp *lp, const char *path, hap_err *err);

/* Run fn(ctx, err) with GLPK silenced and guarded: terminal output off, and an abnormal GLPK
 * termination (a fatal error or failed assertion, which would call abort()) is caught with
 * glp_error_hook + longjmp, GLPK's environment freed (glp_free_env) and HAP_ELP returned with
 * GLPK's message, "<what>: GLPK aborted: ...". Otherwise returns fn's status. Every GLPK call in
 * hap goes through here. Contract for fn: it creates and deletes its own GLPK objects (none may
 * exist in this thread outside a guarded call, since an abort frees them all), and memory it
 * allocates itself must be owned by ctx, so that the caller can free it after an abort. Not
 * re-entrant. */
typedef hap_status (*hap_lp_glpk_fn)(void *ctx, hap_err *err);
hap_status hap_lp_run_guarded(const char *what, hap_lp_glpk_fn fn, void *ctx, hap_err *err);

#endif
