/* list_ops.c — kref_list_ops: every op of the op table (model/ops.h HAP_OP_LIST), one a line, as
 * "<name> <float inputs>": how many of its inputs (up to max_in) hold float values rather than
 * indices, i.e. may take a gradient. tests/unit/test_kernel_faults.sh reads it so that its op
 * list is the op table's, never a hand-typed copy. Exit 1 if an op has no float64 reference. */
#include <stdio.h>

#include "kref.h"

int main(void) {
  int missing = 0;
  for (int op = 0; op < HAP_OP_COUNT; op++) {
    const hap_op_def *d = hap_op_get((hap_op)op);
    int n_float = 0;
    for (int i = 0; i < d->max_in; i++)
      n_float += !hap_kref_index_input((hap_op)op, i);
    printf("%s %d\n", d->name, n_float);
    if (!hap_kref_has((hap_op)op)) {
      fprintf(stderr, "kref_list_ops: op '%s' has no float64 reference (tests/kref)\n", d->name);
      missing = 1;
    }
  }
  return missing;
}
