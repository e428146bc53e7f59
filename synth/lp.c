/* lp.c — hap_lp: the LP as plain arrays (variables, rows, merged sparse entries), turned into a
 * fresh GLPK problem by each solve or write inside hap_lp_run_guarded. */
#include "synth/lp.h"

#include <errno.h>
#include <glpk.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/vec.h"

typedef struct lp_var {
  double lo, hi, obj;
  int slot;     /* scratch for hap_lp_add_row: position in the row being merged, or -1 */
  bool integer; /* hap_lp_set_integer */
} lp_var;

typedef struct lp_row {
  double lo, hi;
  int first, count; /* its entries are entries[first .. first + count) */
} lp_row;

typedef struct lp_entry {
  int var;
  double coef; /* non-zero, finite */
} lp_entry;

struct hap_lp {
  char *name;
  lp_var *vars;
  int n_vars;
  int32_t cap_vars;
  lp_row *rows;
  int n_rows;
  int32_t cap_rows;
  lp_entry *entries;
  int n_entries;
  int32_t cap_entries;
  int n_integer;     /* variables marked integer */
  double mip_time_s; /* branch-and-cut time limit, s (0: none) */
};

/* Largest count of anything: GLPK's 1-based arrays need one more slot, in int. */
#define LP_MAX_COUNT (INT_MAX - 1)

/* ---------------------------------------------------------------------------------------------
 * The model */

hap_lp *hap_lp_create(const char *name) {
  hap_lp *lp = calloc(1, sizeof *lp);
  if (lp == NULL)
    return NULL;
  lp->name = strdup(name != NULL ? name : "lp");
  if (lp->name == NULL) {
    free(lp);
    return NULL;
  }
  return lp;
}

void hap_lp_destroy(hap_lp *lp) {
  if (lp == NULL)
    return;
  free(lp->name);
  free(lp->vars);
  free(lp->rows);
  free(lp->entries);
  free(lp);
}

hap_status hap_lp_set_integer(hap_lp *lp, int var, hap_err *err) {
  if (lp == NULL || var < 0 || var >= lp->n_vars)
    return hap_err_set(err, HAP_EINVAL, "hap_lp_set_integer: variable %d of %d", var,
                       lp ? lp->n_vars : 0);
  if (!lp->vars[var].integer)
    lp->n_integer++;
  lp->vars[var].integer = true;
  return HAP_OK;
}

void hap_lp_set_mip_time_limit(hap_lp *lp, double seconds) {
  if (lp != NULL)
    lp->mip_time_s = seconds > 0 && isfinite(seconds) ? seconds : 0;
}

int hap_lp_n_vars(const hap_lp *lp) { return lp != NULL ? lp->n_vars : 0; }
int hap_lp_n_rows(const hap_lp *lp) { return lp != NULL ? lp->n_rows : 0; }
int hap_lp_n_nonzeros(const hap_lp *lp) { return lp != NULL ? lp->n_entries : 0; }

/* lo <= hi with lo < +inf and hi > -inf, neither NaN. `what` and `index` name the owner. */
static hap_status check_bounds(const hap_lp *lp, const char *what, int index, double lo, double hi,
                               hap_err *err) {
  if (isnan(lo) || isnan(hi) || lo == INFINITY || hi == -INFINITY || lo > hi)
    return hap_err_set(err, HAP_EINVAL,
                       "LP '%s': %s %d: bounds [%g, %g]; expected numbers with lo <= hi, lo < inf "
                       "and hi > -inf",
                       lp->name, what, index, lo, hi);
  return HAP_OK;
}

hap_status hap_lp_add_var(hap_lp *lp, double lo, double hi, double obj, int *var, hap_err *err) {
  if (lp == NULL || var == NULL)
    return hap_err_set(err, HAP_EINVAL, "hap_lp_add_var: lp and var must not be NULL");
  HAP_TRY(check_bounds(lp, "variable", lp->n_vars, lo, hi, err));
  if (!isfinite(obj))
    return hap_err_set(err, HAP_EINVAL,
                       "LP '%s': variable %d: objective coefficient %g; expected a finite number",
                       lp->name, lp->n_vars, obj);
  if (lp->n_vars == LP_MAX_COUNT)
    return hap_err_set(err, HAP_EINVAL, "LP '%s': more than %d variables", lp->name, LP_MAX_COUNT);
  if (HAP_VEC_RESERVE(lp->vars, lp->cap_vars, (int64_t)lp->n_vars + 1, 16) != 0)
    return hap_err_set(err, HAP_ENOMEM, "LP '%s': out of memory adding variable %d", lp->name,
                       lp->n_vars);
  lp->vars[lp->n_vars] = (lp_var){.lo = lo, .hi = hi, .obj = obj, .slot = -1};
  *var = lp->n_vars++;
  return HAP_OK;
}

/* Every (vars[k], coefs[k]) names a known variable with a finite coefficient. */
static hap_status check_terms(const hap_lp *lp, const int *vars, const double *coefs, int n,
                              hap_err *err) {
  for (int k = 0; k < n; k++) {
    if (vars[k] < 0 || vars[k] >= lp->n_vars)
      return hap_err_set(err, HAP_EINVAL,
                         "LP '%s': row %d, term %d: variable %d; expected 0 .. %d (the variables "
                         "added so far)",
                         lp->name, lp->n_rows, k, vars[k], lp->n_vars - 1);
    if (!isfinite(coefs[k]))
      return hap_err_set(err, HAP_EINVAL,
                         "LP '%s': row %d, term %d (variable %d): coefficient %g; expected a "
                         "finite number",
                         lp->name, lp->n_rows, k, vars[k], coefs[k]);
  }
  return HAP_OK;
}

/* Append the row's terms after the last entry (room for n is there): a repeated variable adds to
 * its first entry (lp_var.slot remembers where), sums of zero are dropped, first-seen order is kept
 * and every slot is reset. Returns the entries kept, or -1 if a sum overflowed to infinity. */
static int merge_terms(hap_lp *lp, const int *vars, const double *coefs, int n) {
  lp_entry *out = lp->entries + lp->n_entries;
  int count = 0;
  for (int k = 0; k < n; k++) {
    lp_var *v = &lp->vars[vars[k]];
    if (v->slot < 0) {
      v->slot = count;
      out[count++] = (lp_entry){.var = vars[k], .coef = coefs[k]};
    } else {
      out[v->slot].coef += coefs[k];
    }
  }
  bool finite = true;
  int kept = 0;
  for (int k = 0; k < count; k++) {
    lp->vars[out[k].var].slot = -1;
    finite = finite && isfinite(out[k].coef);
    if (out[k].coef != 0.0)
      out[kept++] = out[k];
  }
  return finite ? kept : -1;
}

hap_status hap_lp_add_row(hap_lp *lp, const int *vars, const double *coefs, int n, double lo,
                          double hi, hap_err *err) {
  if (lp == NULL)
    return hap_err_set(err, HAP_EINVAL, "hap_lp_add_row: lp must not be NULL");
  if (n < 0 || (n > 0 && (vars == NULL || coefs == NULL)))
    return hap_err_set(err, HAP_EINVAL,
                       "LP '%s': row %d: %d terms; expected n >= 0 and, for n > 0, vars and coefs",
                       lp->name, lp->n_rows, n);
  HAP_TRY(check_bounds(lp, "row", lp->n_rows, lo, hi, err));
  HAP_TRY(check_terms(lp, vars, coefs, n, err));
  if (lp->n_rows == LP_MAX_COUNT || n > LP_MAX_COUNT - lp->n_entries)
    return hap_err_set(err, HAP_EINVAL, "LP '%s': row %d: more than %d rows or matrix entries",
                       lp->name, lp->n_rows, LP_MAX_COUNT);
  if (HAP_VEC_RESERVE(lp->rows, lp->cap_rows, (int64_t)lp->n_rows + 1, 16) != 0)
    return hap_err_set(err, HAP_ENOMEM, "LP '%s': out of memory adding row %d", lp->name,
                       lp->n_rows);
  if (n > 0 && HAP_VEC_RESERVE(lp->entries, lp->cap_entries, (int64_t)lp->n_entries + n, 16) != 0)
    return hap_err_set(err, HAP_ENOMEM, "LP '%s': out of memory adding row %d (%d terms)", lp->name,
                       lp->n_rows, n);
  int count = merge_terms(lp, vars, coefs, n);
  if (count < 0)
    return hap_err_set(err, HAP_EINVAL,
                       "LP '%s': row %d: coefficients of a repeated variable sum to infinity",
                       lp->name, lp->n_rows);
  lp->rows[lp->n_rows++] = (lp_row){.lo = lo, .hi = hi, .first = lp->n_entries, .count = count};
  lp->n_entries += count;
  return HAP_OK;
}

/* ---------------------------------------------------------------------------------------------
 * The GLPK guard */

typedef struct glpk_guard {
  jmp_buf jump;
  char text[512]; /* what GLPK printed (with terminal output off: its fatal-error message) */
  size_t len;
} glpk_guard;

static void capture_char(glpk_guard *g, char c) {
  if (g->len + 1 < sizeof g->text)
    g->text[g->len++] = c;
  g->text[g->len] = '\0';
}

/* glp_term_hook: keep GLPK's text, newlines turned into "; ", and swallow it (non-zero). */
static int capture_text(void *info, const char *s) {
  glpk_guard *g = info;
  for (; *s != '\0'; s++) {
    if (*s == '\n') {
      capture_char(g, ';');
      capture_char(g, ' ');
    } else {
      capture_char(g, *s);
    }
  }
  return 1;
}

/* glp_error_hook: GLPK is about to abort(); jump back into call_catching_abort instead. */
static void on_glpk_abort(void *info) {
  glpk_guard *g = info;
  longjmp(g->jump, 1);
}

/* True if GLPK aborted inside fn (then *st is not set). setjmp lives in this small function so
 * that no object local to it changes between setjmp and longjmp (C17 7.13.2.1); the guard's
 * captured text belongs to the caller's frame. */
static bool call_catching_abort(glpk_guard *g, hap_lp_glpk_fn fn, void *ctx, hap_err *err,
                                hap_status *st) {
  if (setjmp(g->jump) != 0)
    return true;
  *st = fn(ctx, err);
  return false;
}

hap_status hap_lp_run_guarded(const char *what, hap_lp_glpk_fn fn, void *ctx, hap_err *err) {
  glpk_guard g = {.len = 0};
  g.text[0] = '\0';
  int term_was = glp_term_out(GLP_OFF);
  glp_term_hook(capture_text, &g);
  glp_error_hook(on_glpk_abort, &g);
  hap_status st = HAP_OK;
  if (call_catching_abort(&g, fn, ctx, err, &st)) {
    /* GLPK's state is unusable after its error: free all of it in this thread (GLPK's rule after
     * a longjmp out of the hook); hooks and settings go with it. */
    glp_free_env();
    while (g.len > 0 && (g.text[g.len - 1] == ' ' || g.text[g.len - 1] == ';'))
      g.text[--g.len] = '\0';
    return hap_err_set(err, HAP_ELP, "%s: GLPK aborted: %s", what,
                       g.len > 0 ? g.text : "(no message)");
  }
  glp_error_hook(NULL, NULL);
  glp_term_hook(NULL, NULL);
  glp_term_out(term_was);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * Building the GLPK problem */

/* The matrix as glp_load_matrix wants it: 1-based triplets (index 0 unused), n_entries + 1 each.
 * Allocated outside the guard so that a GLPK abort cannot leak them. */
typedef struct lp_triplets {
  int *ia, *ja; /* row, column (1-based) */
  double *ar;   /* coefficient */
} lp_triplets;

static void triplets_free(lp_triplets *t) {
  free(t->ia);
  free(t->ja);
  free(t->ar);
}

static hap_status triplets_make(const hap_lp *lp, lp_triplets *t, hap_err *err) {
  size_t n = (size_t)lp->n_entries + 1;
  t->ia = malloc(n * sizeof *t->ia);
  t->ja = malloc(n * sizeof *t->ja);
  t->ar = malloc(n * sizeof *t->ar);
  if (t->ia == NULL || t->ja == NULL || t->ar == NULL) {
    triplets_free(t);
    return hap_err_set(err, HAP_ENOMEM, "LP '%s': out of memory for %d matrix entries", lp->name,
                       lp->n_entries);
  }
  int k = 1;
  for (int r = 0; r < lp->n_rows; r++) {
    const lp_row *row = &lp->rows[r];
    for (int e = row->first; e < row->first + row->count; e++, k++) {
      t->ia[k] = r + 1;
      t->ja[k] = lp->entries[e].var + 1;
      t->ar[k] = lp->entries[e].coef;
    }
  }
  return HAP_OK;
}

/* GLPK's bound type for lo <= x <= hi (checked by check_bounds). */
static int bound_type(double lo, double hi) {
  bool has_lo = lo > -INFINITY, has_hi = hi < INFINITY;
  if (has_lo && has_hi)
    return lo == hi ? GLP_FX : GLP_DB;
  if (has_lo)
    return GLP_LO;
  return has_hi ? GLP_UP : GLP_FR;
}

static double finite_or_zero(double v) { return isfinite(v) ? v : 0.0; }

/* A name GLPK accepts (1 to 255 printable characters) that cannot end the comment glp_write_lp
 * puts it in. Other names are simply not passed on. */
static bool name_fits_glpk(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > 255 || strstr(name, "*\\") != NULL)
    return false;
  for (size_t i = 0; i < n; i++)
    if (name[i] < 0x20 || name[i] > 0x7e)
      return false;
  return true;
}

/* The GLPK problem for lp; `names` gives columns x<i> and rows r<k> (0-based, as in the API).
 * Call only inside a guarded function: GLPK aborts rather than return an error. */
static glp_prob *build_glpk(const hap_lp *lp, const lp_triplets *t, bool names) {
  glp_prob *P = glp_create_prob();
  if (name_fits_glpk(lp->name))
    glp_set_prob_name(P, lp->name);
  glp_set_obj_dir(P, GLP_MIN);
  char label[32];
  if (lp->n_vars > 0)
    glp_add_cols(P, lp->n_vars);
  for (int i = 0; i < lp->n_vars; i++) {
    const lp_var *v = &lp->vars[i];
    glp_set_col_bnds(P, i + 1, bound_type(v->lo, v->hi), finite_or_zero(v->lo),
                     finite_or_zero(v->hi));
    glp_set_obj_coef(P, i + 1, v->obj);
    if (v->integer)
      glp_set_col_kind(P, i + 1, GLP_IV);
    if (names) {
      snprintf(label, sizeof label, "x%d", i);
      glp_set_col_name(P, i + 1, label);
    }
  }
  if (lp->n_rows > 0)
    glp_add_rows(P, lp->n_rows);
  for (int r = 0; r < lp->n_rows; r++) {
    const lp_row *row = &lp->rows[r];
    glp_set_row_bnds(P, r + 1, bound_type(row->lo, row->hi), finite_or_zero(row->lo),
                     finite_or_zero(row->hi));
    if (names) {
      snprintf(label, sizeof label, "r%d", r);
      glp_set_row_name(P, r + 1, label);
    }
  }
  glp_load_matrix(P, lp->n_entries, t->ia, t->ja, t->ar);
  return P;
}

/* ---------------------------------------------------------------------------------------------
 * Solving */

static const char *glpk_rc_str(int rc) {
  switch (rc) {
  case 0: return "finished";
  case GLP_EBADB: return "invalid initial basis";
  case GLP_ESING: return "singular basis matrix";
  case GLP_ECOND: return "ill-conditioned basis matrix";
  case GLP_EBOUND: return "invalid bounds";
  case GLP_EFAIL: return "solver failure";
  case GLP_EOBJLL: return "objective lower limit reached";
  case GLP_EOBJUL: return "objective upper limit reached";
  case GLP_EITLIM: return "iteration limit exceeded";
  case GLP_ETMLIM: return "time limit exceeded";
  case GLP_ENOPFS: return "no primal feasible solution";
  case GLP_ENODFS: return "no dual feasible solution";
  default: return "unknown return code";
  }
}

static const char *glpk_stat_str(int stat) {
  switch (stat) {
  case GLP_UNDEF: return "undefined";
  case GLP_FEAS: return "feasible";
  case GLP_INFEAS: return "infeasible";
  case GLP_NOFEAS: return "no feasible solution";
  case GLP_OPT: return "optimal";
  case GLP_UNBND: return "unbounded";
  default: return "unknown";
  }
}

typedef struct solve_ctx {
  const hap_lp *lp;
  const lp_triplets *t;
  double *x;        /* n_vars values, owned by hap_lp_solve */
  double objective; /* on success */
  bool stopped;     /* branch and cut hit the time limit */
} solve_ctx;

static int run_simplex(glp_prob *P, int method, int presolve) {
  glp_smcp parm;
  glp_init_smcp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  parm.meth = method;
  parm.presolve = presolve;
  return glp_simplex(P, &parm);
}

static bool is_optimal(glp_prob *P, int rc) { return rc == 0 && glp_get_status(P) == GLP_OPT; }

/* The verdict on a finished simplex run that is not optimal. */
static hap_status report_failure(const hap_lp *lp, glp_prob *P, int rc, hap_err *err) {
  int prim = glp_get_prim_stat(P), dual = glp_get_dual_stat(P);
  if (prim == GLP_NOFEAS)
    return hap_err_set(err, HAP_ELP,
                       "LP '%s' is infeasible: no point satisfies every row and variable bound "
                       "(%d rows, %d variables)",
                       lp->name, lp->n_rows, lp->n_vars);
  if (prim == GLP_FEAS && dual == GLP_NOFEAS)
    return hap_err_set(err, HAP_ELP,
                       "LP '%s' is unbounded: the objective decreases without limit (a variable "
                       "that lowers it lacks a bound or a row that limits it)",
                       lp->name);
  return hap_err_set(err, HAP_ELP,
                     "LP '%s': the simplex method stopped without an optimum (%s; primal "
                     "solution %s, dual solution %s)",
                     lp->name, glpk_rc_str(rc), glpk_stat_str(prim), glpk_stat_str(dual));
}

/* The integer variables, from the optimal relaxation in P: GLPK's branch and cut (glp_intopt)
 * within the time limit. An integer point found before the limit is kept (s->stopped). */
static hap_status branch_and_cut(solve_ctx *s, glp_prob *P, hap_err *err) {
  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  parm.presolve = GLP_OFF; /* P holds an optimal basis of the relaxation already */
  parm.mip_gap = 1e-6;     /* relative: stop once the best bound is this close */
  if (s->lp->mip_time_s > 0)
    parm.tm_lim = (int)fmin(s->lp->mip_time_s * 1e3, 2e9);
  int rc = glp_intopt(P, &parm);
  int stat = glp_mip_status(P);
  if ((rc == 0 || rc == GLP_ETMLIM) && (stat == GLP_OPT || stat == GLP_FEAS)) {
    for (int i = 0; i < s->lp->n_vars; i++) {
      double v = glp_mip_col_val(P, i + 1);
      s->x[i] = fmin(fmax(v, s->lp->vars[i].lo), s->lp->vars[i].hi);
    }
    s->objective = glp_mip_obj_val(P);
    s->stopped = stat != GLP_OPT;
    return HAP_OK;
  }
  if (stat == GLP_NOFEAS)
    return hap_err_set(err, HAP_ELP,
                       "MIP '%s' is infeasible: no integer point satisfies every row (%d rows, "
                       "%d variables, %d integer)",
                       s->lp->name, s->lp->n_rows, s->lp->n_vars, s->lp->n_integer);
  return hap_err_set(err, HAP_ELP, "MIP '%s': branch and cut stopped without an integer point (%s)",
                     s->lp->name, rc == GLP_ETMLIM ? "time limit" : glpk_rc_str(rc));
}

/* Guarded: dual simplex with presolve. Any other outcome than an optimum is settled by the primal
 * simplex on the scaled, unreduced LP: the presolver only says "no optimum", and the dual simplex
 * cannot tell an unbounded LP from an infeasible one; the primal simplex can. */
static hap_status solve_guarded(void *ctx, hap_err *err) {
  solve_ctx *s = ctx;
  glp_prob *P = build_glpk(s->lp, s->t, false);
  int rc = run_simplex(P, GLP_DUALP, GLP_ON);
  if (!is_optimal(P, rc)) {
    glp_scale_prob(P, GLP_SF_AUTO);
    rc = run_simplex(P, GLP_PRIMAL, GLP_OFF);
  }
  hap_status st = HAP_OK;
  if (is_optimal(P, rc) && s->lp->n_integer > 0) {
    st = branch_and_cut(s, P, err);
  } else if (is_optimal(P, rc)) {
    for (int i = 0; i < s->lp->n_vars; i++) {
      double v = glp_get_col_prim(P, i + 1);
      s->x[i] = fmin(fmax(v, s->lp->vars[i].lo), s->lp->vars[i].hi);
    }
    s->objective = glp_get_obj_val(P);
  } else {
    st = report_failure(s->lp, P, rc, err);
  }
  glp_delete_prob(P);
  return st;
}

static hap_status solve(const hap_lp *lp, double *x, double *objective, bool *stopped,
                        hap_err *err) {
  if (lp == NULL || x == NULL)
    return hap_err_set(err, HAP_EINVAL, "hap_lp_solve: lp and x must not be NULL");
  if (lp->n_vars == 0)
    return hap_err_set(err, HAP_EINVAL, "LP '%s' has no variables; expected at least one",
                       lp->name);
  lp_triplets t;
  HAP_TRY(triplets_make(lp, &t, err));
  solve_ctx s = {.lp = lp, .t = &t, .x = malloc((size_t)lp->n_vars * sizeof *s.x)};
  if (s.x == NULL) {
    triplets_free(&t);
    return hap_err_set(err, HAP_ENOMEM, "LP '%s': out of memory for %d values", lp->name,
                       lp->n_vars);
  }
  char what[300];
  snprintf(what, sizeof what, "LP '%.200s'", lp->name);
  hap_status st = hap_lp_run_guarded(what, solve_guarded, &s, err);
  if (st == HAP_OK && stopped != NULL)
    *stopped = s.stopped;
  if (st == HAP_OK) {
    memcpy(x, s.x, (size_t)lp->n_vars * sizeof *x);
    if (objective != NULL)
      *objective = s.objective;
  }
  free(s.x);
  triplets_free(&t);
  return st;
}

hap_status hap_lp_solve(const hap_lp *lp, double *x, double *objective, hap_err *err) {
  return solve(lp, x, objective, NULL, err);
}

hap_status hap_lp_solve_mip(const hap_lp *lp, double *x, double *objective, bool *stopped,
                            hap_err *err) {
  *stopped = false;
  return solve(lp, x, objective, stopped, err);
}

/* ---------------------------------------------------------------------------------------------
 * Writing */

typedef struct write_ctx {
  const hap_lp *lp;
  const lp_triplets *t;
  const char *tmp_path; /* the atomic file's temporary; GLPK rewrites it by name */
  const char *path;     /* for messages */
} write_ctx;

static hap_status write_guarded(void *ctx, hap_err *err) {
  const write_ctx *w = ctx;
  glp_prob *P = build_glpk(w->lp, w->t, true);
  errno = 0;
  int rc = glp_write_lp(P, NULL, w->tmp_path);
  int e = errno;
  glp_delete_prob(P);
  if (rc != 0)
    return hap_err_set(err, HAP_EIO, "%s: cannot write LP '%s': %s", w->path, w->lp->name,
                       e != 0 ? strerror(e) : "GLPK's writer failed");
  return HAP_OK;
}

hap_status hap_lp_write(const hap_lp *lp, const char *path, hap_err *err) {
  if (lp == NULL || path == NULL)
    return hap_err_set(err, HAP_EINVAL, "hap_lp_write: lp and path must not be NULL");
  if (strcmp(path, "-") == 0)
    return hap_err_set(err, HAP_EINVAL, "LP '%s': expected a file to write to, not '-'", lp->name);
  hap_atomic_file af;
  HAP_TRY(hap_atomic_open(&af, path, err));
  lp_triplets t;
  hap_status st = triplets_make(lp, &t, err);
  if (st == HAP_OK) {
    char what[300];
    snprintf(what, sizeof what, "LP '%.200s'", lp->name);
    write_ctx w = {.lp = lp, .t = &t, .tmp_path = af.tmp, .path = path};
    st = hap_lp_run_guarded(what, write_guarded, &w, err);
    triplets_free(&t);
  }
  if (st != HAP_OK) {
    hap_atomic_abort(&af);
    return st;
  }
  /* GLPK wrote the temporary through its own handle; af's stream holds nothing, and committing it
   * syncs the file and renames it into place. */
  return hap_atomic_commit(&af, err);
}
