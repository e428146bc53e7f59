/* sgemm_calls — an LD_PRELOAD library that times every cblas_sgemm call of a process on
 * CLOCK_MONOTONIC and, at exit, writes one line per distinct call form to $HAP_SGEMM_CALLS_OUT:
 *   ta tb m n k beta0 calls seconds GFLOP/s
 * (ta, tb: 1 = transposed; beta0: 1 when beta was 0, i.e. OpenBLAS cleared C first). Used by
 * reports/gemm-calls.sh to see how fast OpenBLAS runs each GEMM shape of a hap-run iteration.
 * Without $HAP_SGEMM_CALLS_OUT, or in a process that made no call, it writes nothing. */
#define _GNU_SOURCE
#include <cblas.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef void (*sgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint,
                         blasint, blasint, float, const float *, blasint, const float *, blasint,
                         float, float *, blasint);

enum { MAX_FORMS = 1024 };
static struct {
  int ta, tb, beta0;
  long m, n, k, calls;
  double seconds;
} forms[MAX_FORMS];
static int n_forms, dropped;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                 blasint m, blasint n, blasint k, float alpha, const float *a, blasint lda,
                 const float *b, blasint ldb, float beta, float *c, blasint ldc) {
  static sgemm_fn real;
  if (real == NULL)
    real = (sgemm_fn)dlsym(RTLD_NEXT, "cblas_sgemm");
  double t0 = now_s();
  real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  double dt = now_s() - t0;
  int t_a = ta == CblasTrans, t_b = tb == CblasTrans, b0 = beta == 0.0f, i;
  for (i = 0; i < n_forms; i++)
    if (forms[i].ta == t_a && forms[i].tb == t_b && forms[i].m == m && forms[i].n == n &&
        forms[i].k == k && forms[i].beta0 == b0)
      break;
  if (i == n_forms && n_forms == MAX_FORMS) {
    dropped++;
    return;
  }
  if (i == n_forms) {
    forms[i].ta = t_a;
    forms[i].tb = t_b;
    forms[i].beta0 = b0;
    forms[i].m = m;
    forms[i].n = n;
    forms[i].k = k;
    n_forms++;
  }
  forms[i].calls++;
  forms[i].seconds += dt;
}

__attribute__((destructor)) static void write_forms(void) {
  const char *path = getenv("HAP_SGEMM_CALLS_OUT");
  if (path == NULL || n_forms == 0)
    return;
  FILE *f = fopen(path, "w");
  if (f == NULL)
    return;
  for (int i = 0; i < n_forms; i++)
    fprintf(f, "%d %d %ld %ld %ld %d %ld %.9f %.2f\n", forms[i].ta, forms[i].tb, forms[i].m,
            forms[i].n, forms[i].k, forms[i].beta0, forms[i].calls, forms[i].seconds,
            forms[i].seconds > 0
                ? 2.0 * (double)forms[i].m * (double)forms[i].n * (double)forms[i].k *
                      (double)forms[i].calls / forms[i].seconds / 1e9
                : 0.0);
  if (dropped > 0)
    fprintf(stderr, "sgemm_calls: %d calls of forms past the first %d not counted\n", dropped,
            MAX_FORMS);
  fclose(f);
}
