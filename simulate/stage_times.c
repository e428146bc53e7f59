/* stage_times.c — a pipeline stage's per-micro-batch times (stage_times.h). */
#include "simulate/stage_times.h"

bool hap_task_is_grad_sync(const hap_lowered *lw, int32_t t) {
  return hap_lowered_is_grad_sync(lw, t);
}

hap_status hap_stage_times_run(hap_lowered *lw, const hap_cluster *c, const hap_plan_sim_options *o,
                               hap_stage_times *out, double *iteration_s, hap_err *err) {
  hap_plan_sim_options full = o != NULL ? *o : (hap_plan_sim_options){0};
  hap_plan_sim_options micro = full;
  full.skip_grad_sync = false;
  micro.skip_grad_sync = true;
  hap_plan_sim *a = NULL, *b = NULL;
  hap_status st = hap_plan_sim_run(lw, c, &full, &a, err);
  if (st == HAP_OK)
    st = hap_plan_sim_run(lw, c, &micro, &b, err);
  if (st == HAP_OK) {
    hap_stage_times_of(b, out);
    double total = a->iteration_s > b->iteration_s ? a->iteration_s : b->iteration_s;
    out->tail_s = total - out->fwd_s - out->bwd_s;
    if (out->tail_s < 0)
      out->tail_s = 0;
    if (iteration_s != NULL)
      *iteration_s = out->fwd_s + out->bwd_s + out->tail_s;
  }
  hap_plan_sim_destroy(a);
  hap_plan_sim_destroy(b);
  return st;
}

void hap_stage_times_of(const hap_plan_sim *ps, hap_stage_times *out) {
  const hap_lowered *lw = ps->lw;
  double fwd_end = 0, bwd_end = 0;
  for (int32_t g = 0; g < ps->n_groups; g++)
    for (int32_t t = 0; t < ps->n_tasks; t++) {
      double end = ps->end_s[(size_t)g * (size_t)ps->n_tasks + (size_t)t];
      hap_task_phase ph = lw->tasks[t].phase;
      if (ph == HAP_PHASE_FWD && end > fwd_end)
        fwd_end = end;
      if (ph == HAP_PHASE_BWD && !hap_task_is_grad_sync(lw, t) && end > bwd_end)
        bwd_end = end;
    }
  if (bwd_end < fwd_end)
    bwd_end = fwd_end;
  double total = ps->iteration_s > bwd_end ? ps->iteration_s : bwd_end;
  out->fwd_s = fwd_end;
  out->bwd_s = bwd_end - fwd_end;
  out->tail_s = total - bwd_end;
}
