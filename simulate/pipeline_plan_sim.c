/* pipeline_plan_sim.c — a pipelined plan's iteration on one engine (pipeline_plan_sim.h).
 *
 * The engine runs a device's tasks on a stream in the order they are added, and a task may only
 * wait for tasks added before it. So the groups' orders are merged: a group's next op is added
 * once the ops it receives from are (the sender's forward for a boundary value, the consumer's
 * backward for a gradient); a round that adds nothing is a schedule that cannot run. */
#include "simulate/pipeline_plan_sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"
#include "cluster/cost.h"
#include "simulate/engine.h"
#include "simulate/plan_sim.h"

static hap_status oom(hap_err *err) {
  return hap_err_set(err, HAP_ENOMEM, "pipeline simulation: out of memory");
}

void hap_pipe_plan_sim_destroy(hap_pipe_plan_sim *r) {
  if (r == NULL)
    return;
  free(r->busy_s);
  free(r->bubble);
  free(r->group_bubble);
  free(r);
}

/* Engine ids of one op instance of a stage: ids[t * n + i] for task t on local device i (-1 for
 * tasks of other parts). */
typedef struct instance {
  int32_t *ids;
} instance;

typedef struct stage_state {
  double *dur;        /* [n_tasks * n]: priced durations, s */
  int32_t n;          /* devices in the group */
  instance *fwd;      /* [m]: each micro-batch's forward, until its backward is added */
  instance last_fwd;  /* the forward of the micro-batch of the last backward added */
  instance last_bwd;  /* the last backward added */
  uint8_t *fwd_added; /* [m] */
  uint8_t *bwd_added; /* [m] */
  uint8_t *coll_dep;  /* [n_tasks]: a collective waits for this task (a chain ends at it) */
  int32_t *last_comp; /* [n]: the op just added, last compute-stream task per device, or -1 */
  int32_t *last_comm; /* [n]: likewise on the communication stream */
  int32_t *local;     /* [cluster devices]: the local index of a device of the group, or -1 */
} stage_state;

typedef struct sim_build {
  hap_pipe_lowered *pw;
  bool serial;
  hap_sim *sim;
  bool no_chains;
  int32_t m, p;
  stage_state *st; /* [n_stages] */
  /* arrivals[x * m + j]: engine ids per pair of transfer x for micro-batch j (a pair within one
   * device: the sender's last task), NULL until sent */
  int32_t **arrivals;
  int32_t *res_dev_out;              /* [n_devices] intra-host link out, or -1 until used */
  int32_t *res_nic_out, *res_nic_in; /* [n_hosts] */
  int32_t *deps;
  int32_t cap_deps;
  int32_t *root_deps; /* per local device: the arrivals it waits for */
  int32_t *root_first, *root_n;
  int32_t cap_root;
  int32_t *tails; /* [2 * n_tails]: ranges [first, end) of engine ids of the tails, ascending */
  int32_t n_tails, cap_tails;
  double transfer_bytes;
} sim_build;

static void instance_free(instance *in) {
  free(in->ids);
  in->ids = NULL;
}

static hap_status instance_new(const hap_pipe_lowered_stage *s, int32_t n, instance *in,
                               hap_err *err) {
  size_t cells = (size_t)s->lw->n_tasks * (size_t)n;
  in->ids = malloc((cells ? cells : 1) * sizeof *in->ids);
  if (in->ids == NULL)
    return oom(err);
  for (size_t i = 0; i < cells; i++)
    in->ids[i] = -1;
  return HAP_OK;
}

/* The engine tasks added since `first` are a tail (ids are consecutive). */
static hap_status mark_tail(sim_build *b, int32_t first, hap_err *err) {
  int32_t end = hap_sim_n_tasks(b->sim);
  if (end == first)
    return HAP_OK;
  if (HAP_VEC_RESERVE(b->tails, b->cap_tails, 2 * ((int64_t)b->n_tails + 1), 16) != 0)
    return oom(err);
  b->tails[2 * (size_t)b->n_tails] = first;
  b->tails[2 * (size_t)b->n_tails + 1] = end;
  b->n_tails++;
  return HAP_OK;
}

/* Is engine task `id` part of a tail? Asked in ascending id order: *cursor is the first range that
 * does not end before it. */
static bool is_tail(const sim_build *b, int32_t *cursor, int32_t id) {
  while (*cursor < b->n_tails && b->tails[2 * (size_t)*cursor + 1] <= id)
    (*cursor)++;
  return *cursor < b->n_tails && b->tails[2 * (size_t)*cursor] <= id;
}

/* ---- resources and transfers ---------------------------------------------------------------- */

static hap_status resource(sim_build *b, int32_t *slot, const char *what, int32_t i, double bw,
                           hap_err *err) {
  if (*slot >= 0)
    return HAP_OK;
  char name[160];
  snprintf(name, sizeof name, "%s %d", what, i);
  if (!(bw > 0) || !isfinite(bw))
    return hap_err_set(err, HAP_EINVAL, "pipeline simulation: %s %d has bandwidth %g B/s", what, i,
                       bw);
  return hap_sim_add_resource(b->sim, name, bw, slot, err);
}

/* A transfer of `bytes` from device src to dst (distinct), after `after` (n_after ids). */
static hap_status add_transfer(sim_build *b, const hap_pipe_xfer *x, int32_t src, int32_t dst,
                               double bytes, const int32_t *after, int32_t n_after, int32_t *id,
                               hap_err *err) {
  const hap_cluster *c = b->pw->cluster;
  int32_t hs = c->devices[src].host, hd = c->devices[dst].host;
  hap_link link = hap_cluster_link(c, src, dst);
  int32_t path[2], n_path = 0;
  if (hs == hd) {
    HAP_TRY(resource(b, &b->res_dev_out[src], "device link out", src, link.bandwidth_Bps, err));
    path[n_path++] = b->res_dev_out[src];
  } else {
    HAP_TRY(
        resource(b, &b->res_nic_out[hs], "host NIC out", hs, c->hosts[hs].nic.bandwidth_Bps, err));
    HAP_TRY(
        resource(b, &b->res_nic_in[hd], "host NIC in", hd, c->hosts[hd].nic.bandwidth_Bps, err));
    path[n_path++] = b->res_nic_out[hs];
    path[n_path++] = b->res_nic_in[hd];
  }
  const char *name = b->pw->graph->tensors[x->tensor].name;
  char label[256];
  snprintf(label, sizeof label, "%s.%s", name, x->gradient ? "grad.send" : "send");
  hap_sim_task t = {.name = label,
                    .device = src,
                    .stream = b->serial ? HAP_SIM_COMPUTE : HAP_SIM_COMM,
                    .kind = HAP_SIM_TRANSFER,
                    .bytes = bytes,
                    .deps = after,
                    .n_deps = n_after,
                    .path = path,
                    .n_path = n_path,
                    .latency_s = link.latency_s};
  b->transfer_bytes += bytes;
  return hap_sim_add_task(b->sim, &t, id, err);
}

/* What marks the end of the op just added on local device i of a stage: its last task on each
 * stream, into after[0..2); returns how many. */
static int32_t op_end(const stage_state *ss, int32_t i, int32_t after[2]) {
  int32_t n = 0;
  if (ss->last_comp[i] >= 0)
    after[n++] = ss->last_comp[i];
  if (ss->last_comm[i] >= 0)
    after[n++] = ss->last_comm[i];
  return n;
}

/* A boundary collective over replica r of stage k's program (the replica's devices of its
 * group): a new engine collective id and its time for `shard` bytes per member, s. */
static hap_status replica_collective(sim_build *b, int32_t k, int32_t r, hap_coll_kind kind,
                                     double shard, const char *label, int32_t *coll, double *sec,
                                     hap_err *err) {
  const hap_pipe_lowered_stage *s = &b->pw->stages[k];
  int32_t gs = s->lw->group_size;
  int32_t *ranks = malloc((size_t)gs * sizeof *ranks);
  if (ranks == NULL)
    return oom(err);
  for (int32_t i = 0; i < gs; i++)
    ranks[i] = r * gs + i; /* devices of the stage's cluster */
  hap_group grp;
  hap_status st = hap_group_init(s->cluster, ranks, gs, &grp, err);
  free(ranks);
  *sec = 0;
  if (st == HAP_OK)
    (void)hap_coll_best(&grp, kind, hap_coll_bytes_uniform(shard, gs), sec);
  if (st == HAP_OK && (!isfinite(*sec) || *sec < 0))
    st = hap_err_set(err, HAP_EINVAL, "pipeline simulation: '%s' priced at %g s", label, *sec);
  if (st == HAP_OK)
    st = hap_sim_new_collective(b->sim, coll, err);
  return st;
}

/* Member `dev` (a cluster device) of collective `coll`, after deps[0..n). */
static hap_status add_member(sim_build *b, int32_t dev, const char *label, double sec, double bytes,
                             int32_t coll, const int32_t *deps, int32_t n, int32_t *id,
                             hap_err *err) {
  hap_sim_task t = {.name = label,
                    .device = dev,
                    .stream = b->serial ? HAP_SIM_COMPUTE : HAP_SIM_COMM,
                    .kind = HAP_SIM_COLLECTIVE,
                    .duration_s = sec,
                    .bytes = bytes,
                    .deps = deps,
                    .n_deps = n,
                    .collective = coll};
  return hap_sim_add_task(b->sim, &t, id, err);
}

/* The reduce-scatter that turns a Reduce boundary into shards before the send: one engine
 * collective per replica of stage k's program, each member after its op; rs[i] gets the member
 * task of local device i. */
static hap_status add_reduce_scatter(sim_build *b, int32_t k, const hap_pipe_xfer *x, int32_t *rs,
                                     hap_err *err) {
  const hap_pipe_lowered_stage *s = &b->pw->stages[k];
  const stage_state *ss = &b->st[k];
  int32_t gs = s->lw->group_size;
  hap_status st = HAP_OK;
  char label[256];
  snprintf(label, sizeof label, "%s.send.reduce_scatter", b->pw->graph->tensors[x->tensor].name);
  for (int32_t r = 0; r < s->lw->replicas && st == HAP_OK; r++) {
    int32_t coll = -1;
    double sec = 0;
    st = replica_collective(b, k, r, HAP_COLL_REDUCE_SCATTER, x->shard_bytes, label, &coll, &sec,
                            err);
    for (int32_t i = r * gs; i < (r + 1) * gs && st == HAP_OK; i++) {
      int32_t after[2], n_after = op_end(ss, i, after);
      st = add_member(b, s->devices[i], label, sec, x->shard_bytes, coll, after, n_after, &rs[i],
                      err);
    }
  }
  return st;
}

/* Send the boundary transfers stage k makes in the op just added (gradient: a backward op) for
 * micro-batch j. */
static hap_status send_from(sim_build *b, int32_t k, bool gradient, int32_t j, hap_err *err) {
  hap_pipe_lowered *pw = b->pw;
  stage_state *ss = &b->st[k];
  int32_t *rs = calloc((size_t)ss->n, sizeof *rs);
  if (rs == NULL)
    return oom(err);
  hap_status st = HAP_OK;
  for (int32_t xi = 0; xi < pw->n_xfers && st == HAP_OK; xi++) {
    const hap_pipe_xfer *x = &pw->xfers[xi];
    if (x->from_stage != k || x->gradient != gradient)
      continue;
    int32_t *ids = malloc((size_t)(x->n_pairs ? x->n_pairs : 1) * sizeof *ids);
    if (ids == NULL) {
      st = oom(err);
      break;
    }
    b->arrivals[(size_t)xi * (size_t)b->m + (size_t)j] = ids;
    for (int32_t i = 0; i < ss->n; i++)
      rs[i] = -1;
    if (x->reduce_scatter)
      st = add_reduce_scatter(b, k, x, rs, err);
    for (int32_t q = 0; q < x->n_pairs && st == HAP_OK; q++) {
      const hap_pipe_pair *pr = &pw->pairs[x->pair0 + q];
      int32_t i = ss->local[pr->src];
      int32_t after[2], n_after = 0;
      ids[q] = -1;
      if (i < 0)
        continue; /* not a device of the stage: lowering keeps pairs inside it */
      if (x->reduce_scatter) {
        if (rs[i] >= 0)
          after[n_after++] = rs[i];
      } else {
        n_after = op_end(ss, i, after);
      }
      if (pr->src == pr->dst) { /* already there: wait for what made it on that device */
        ids[q] = n_after == 0 ? -1 : n_after == 1 || after[0] > after[1] ? after[0] : after[1];
        continue;
      }
      st = add_transfer(b, x, pr->src, pr->dst, pr->bytes, after, n_after, &ids[q], err);
    }
  }
  free(rs);
  return st;
}

/* The all-gather of an arriving boundary's shards on stage k's devices: one engine collective per
 * replica, each member after the shards that arrive at its device (`ids`: x's pairs); ag[i] gets
 * local device i's member. */
static hap_status add_all_gather(sim_build *b, int32_t k, const hap_pipe_xfer *x,
                                 const int32_t *ids, int32_t *ag, hap_err *err) {
  const hap_pipe_lowered *pw = b->pw;
  const hap_pipe_lowered_stage *s = &pw->stages[k];
  const stage_state *ss = &b->st[k];
  int32_t gs = s->lw->group_size;
  /* the arrivals per local device, in pair order: device i's are after[first[i] .. first[i+1]) */
  int32_t *after = malloc((size_t)(x->n_pairs ? x->n_pairs : 1) * sizeof *after);
  int32_t *first = calloc((size_t)ss->n + 1, sizeof *first);
  hap_status st = after && first ? HAP_OK : oom(err);
  for (int32_t q = 0; st == HAP_OK && ids != NULL && q < x->n_pairs; q++) {
    int32_t i = ss->local[pw->pairs[x->pair0 + q].dst];
    if (i >= 0 && ids[q] >= 0)
      first[i + 1]++;
  }
  for (int32_t i = 0; st == HAP_OK && i < ss->n; i++)
    first[i + 1] += first[i];
  for (int32_t q = 0, i; st == HAP_OK && ids != NULL && q < x->n_pairs; q++)
    if ((i = ss->local[pw->pairs[x->pair0 + q].dst]) >= 0 && ids[q] >= 0)
      after[first[i]++] = ids[q];
  for (int32_t i = ss->n; st == HAP_OK && i > 0; i--) /* the cursors back to the starts */
    first[i] = first[i - 1];
  if (st == HAP_OK)
    first[0] = 0;
  char label[256];
  snprintf(label, sizeof label, "%s.%s.all_gather", pw->graph->tensors[x->tensor].name,
           x->gradient ? "grad.recv" : "recv");
  for (int32_t r = 0; r < s->lw->replicas && st == HAP_OK; r++) {
    int32_t coll = -1;
    double sec = 0;
    st = replica_collective(b, k, r, HAP_COLL_ALL_GATHER, x->gather_shard_bytes, label, &coll, &sec,
                            err);
    for (int32_t i = r * gs; i < (r + 1) * gs && st == HAP_OK; i++)
      st = add_member(b, s->devices[i], label, sec, x->gather_shard_bytes, coll, after + first[i],
                      first[i + 1] - first[i], &ag[i], err);
  }
  free(after);
  free(first);
  return st;
}

/* The arrivals each local device of stage k waits for in op (gradient?, j): root_first/root_n
 * into root_deps. The arrival arrays are freed. */
static hap_status collect_arrivals(sim_build *b, int32_t k, bool gradient, int32_t j,
                                   hap_err *err) {
  hap_pipe_lowered *pw = b->pw;
  int32_t n = b->st[k].n, total = 0;
  int32_t *ag = malloc((size_t)n * sizeof *ag);
  if (ag == NULL)
    return oom(err);
  hap_status st = HAP_OK;
  for (int32_t i = 0; i < n; i++)
    b->root_n[i] = 0;
  for (int pass = 0; pass < 2 && st == HAP_OK; pass++) {
    for (int32_t xi = 0; xi < pw->n_xfers && st == HAP_OK; xi++) {
      const hap_pipe_xfer *x = &pw->xfers[xi];
      if (x->to_stage != k || x->gradient != gradient)
        continue;
      int32_t *ids = b->arrivals[(size_t)xi * (size_t)b->m + (size_t)j];
      if (x->all_gather) { /* the op waits for the all-gather of the shards */
        if (pass == 1)
          st = add_all_gather(b, k, x, ids, ag, err);
        for (int32_t i = 0; i < n && st == HAP_OK; i++) {
          if (pass == 1)
            b->root_deps[b->root_first[i] + b->root_n[i]] = ag[i];
          b->root_n[i]++;
        }
      }
      for (int32_t q = 0; q < x->n_pairs && ids != NULL && !x->all_gather; q++) {
        int32_t i = b->st[k].local[pw->pairs[x->pair0 + q].dst];
        if (i < 0 || ids[q] < 0)
          continue;
        if (pass == 0)
          b->root_n[i]++;
        else
          b->root_deps[b->root_first[i] + b->root_n[i]++] = ids[q];
      }
      if (pass == 1) {
        free(ids);
        b->arrivals[(size_t)xi * (size_t)b->m + (size_t)j] = NULL;
      }
    }
    if (pass == 0) {
      total = 0;
      for (int32_t i = 0; i < n; i++) {
        b->root_first[i] = total;
        total += b->root_n[i];
        b->root_n[i] = 0;
      }
      if (HAP_VEC_RESERVE(b->root_deps, b->cap_root, total, 64) != 0)
        st = oom(err);
    }
  }
  free(ag);
  return st;
}

/* ---- ops ------------------------------------------------------------------------------------ */

static bool in_op(hap_pipe_part part, hap_pipe_part op) {
  return op == HAP_PIPE_PART_FWD   ? part == HAP_PIPE_PART_FWD
         : op == HAP_PIPE_PART_BWD ? part == HAP_PIPE_PART_LOSS || part == HAP_PIPE_PART_BWD
                                   : part == HAP_PIPE_PART_TAIL;
}

/* The engine id a dependency u of a task of op kind `op` on local device i maps to. */
static int32_t dep_id(const hap_pipe_lowered_stage *s, const stage_state *ss, hap_pipe_part op,
                      const instance *cur, const instance *fwd, int32_t u, int32_t i) {
  hap_pipe_part pu = (hap_pipe_part)s->part[u];
  size_t cell = (size_t)u * (size_t)ss->n + (size_t)i;
  if (in_op(pu, op))
    return cur->ids[cell];
  if (op == HAP_PIPE_PART_BWD) /* a forward task of the same micro-batch */
    return fwd->ids[cell];
  /* the tail: the last backward, or the forward of its micro-batch */
  return pu == HAP_PIPE_PART_FWD ? ss->last_fwd.ids[cell] : ss->last_bwd.ids[cell];
}

/* Add stage k's tasks of op kind `op` into `cur`; root tasks on a device wait for its arrivals
 * (root_deps) when `roots` is set.
 * A device's run of compute-stream tasks is one engine task (a chain) while nothing else can
 * start inside it: a task joins the open chain when all it waits for is on the compute stream
 * (done by stream order) and no collective waits for the chain's last task; the chain's duration
 * is the sum (hap_sim_extend as tasks join, in their order). Exact: the stream runs them back to
 * back either way. */
static hap_status add_op_tasks(sim_build *b, int32_t k, hap_pipe_part op, instance *cur,
                               const instance *fwd, bool roots, hap_err *err) {
  const hap_pipe_lowered_stage *s = &b->pw->stages[k];
  stage_state *ss = &b->st[k];
  const hap_lowered *lw = s->lw;
  int32_t n = ss->n;
  for (int32_t i = 0; i < n; i++)
    ss->last_comp[i] = ss->last_comm[i] = -1;
  int32_t *coll = malloc((size_t)n * sizeof *coll);
  int32_t *chain = malloc((size_t)n * sizeof *chain);           /* open chain's engine id, or -1 */
  int32_t *chain_last = malloc((size_t)n * sizeof *chain_last); /* its last task */
  int32_t *sub_id = malloc((size_t)n * sizeof *sub_id); /* a collective task's ids per sub-group */
  if (coll == NULL || chain == NULL || chain_last == NULL || sub_id == NULL) {
    free(coll);
    free(chain);
    free(chain_last);
    free(sub_id);
    return oom(err);
  }
  for (int32_t i = 0; i < n; i++)
    chain[i] = -1;
  hap_status st = HAP_OK;
  for (int32_t t = 0; t < lw->n_tasks && st == HAP_OK; t++) {
    if (!in_op((hap_pipe_part)s->part[t], op))
      continue;
    const hap_task *kt = &lw->tasks[t];
    bool is_coll = kt->kind == HAP_TASK_COLLECTIVE;
    if (is_coll) { /* one engine collective per sub-group of the task's span */
      bool by_group = kt->span == HAP_SPAN_GROUP;
      int32_t n_sub = by_group ? lw->replicas : lw->group_size;
      for (int32_t sub = 0; sub < n_sub && st == HAP_OK; sub++)
        st = hap_sim_new_collective(b->sim, &sub_id[sub], err);
      for (int32_t i = 0; i < n && st == HAP_OK; i++) {
        int32_t sub = by_group ? i / lw->group_size : i % lw->group_size;
        coll[i] = sub < n_sub ? sub_id[sub] : -1;
      }
    }
    bool root = roots;
    bool stream_deps = !is_coll; /* all it waits for runs on the compute stream */
    for (int32_t q = 0; q < kt->n_deps; q++) {
      int32_t u = lw->deps[kt->dep0 + q];
      root = root && !in_op((hap_pipe_part)s->part[u], op);
      stream_deps = stream_deps && (b->serial || lw->tasks[u].kind != HAP_TASK_COLLECTIVE);
    }
    for (int32_t i = 0; i < n && st == HAP_OK; i++) {
      int32_t extra = root ? b->root_n[i] : 0;
      size_t cell = (size_t)t * (size_t)n + (size_t)i;
      double dur = ss->dur[cell];
      bool joins = !b->no_chains && !is_coll && stream_deps && extra == 0 && chain[i] >= 0 &&
                   !ss->coll_dep[chain_last[i]];
      if (joins) {
        st = hap_sim_extend(b->sim, chain[i], dur, err);
        chain_last[i] = t;
        cur->ids[cell] = chain[i];
        continue;
      }
      chain[i] = -1;
      int32_t nd = 0;
      if (HAP_VEC_RESERVE(b->deps, b->cap_deps, kt->n_deps + extra, 16) != 0) {
        st = oom(err);
        break;
      }
      for (int32_t q = 0; q < kt->n_deps; q++) {
        int32_t id = dep_id(s, ss, op, cur, fwd, lw->deps[kt->dep0 + q], i);
        if (id >= 0)
          b->deps[nd++] = id;
      }
      for (int32_t q = 0; q < extra; q++)
        b->deps[nd++] = b->root_deps[b->root_first[i] + q];
      bool comm = is_coll && !b->serial;
      hap_sim_task e = {.name = kt->name,
                        .device = s->devices[i],
                        .stream = comm ? HAP_SIM_COMM : HAP_SIM_COMPUTE,
                        .kind = is_coll ? HAP_SIM_COLLECTIVE : HAP_SIM_FIXED,
                        .duration_s = dur,
                        .deps = b->deps,
                        .n_deps = nd,
                        .collective = is_coll ? coll[i] : -1};
      int32_t id;
      st = hap_sim_add_task(b->sim, &e, &id, err);
      if (st != HAP_OK)
        break;
      cur->ids[cell] = id;
      if (comm) {
        ss->last_comm[i] = id;
      } else {
        ss->last_comp[i] = id;
        if (!is_coll) {
          chain[i] = id;
          chain_last[i] = t;
        }
      }
    }
  }
  free(coll);
  free(chain);
  free(chain_last);
  free(sub_id);
  return st;
}

/* Is op (group g, its op index) ready: everything it receives has been sent? */
static bool ready(const sim_build *b, int32_t g, const hap_pipe_op *op) {
  int32_t k = op->chunk * b->p + g;
  const hap_pipe_lowered *pw = b->pw;
  for (int32_t xi = 0; xi < pw->n_xfers; xi++) {
    const hap_pipe_xfer *x = &pw->xfers[xi];
    if (x->to_stage != k || x->gradient != op->backward)
      continue;
    const stage_state *from = &b->st[x->from_stage];
    if (!(op->backward ? from->bwd_added : from->fwd_added)[op->micro])
      return false;
  }
  return true;
}

static hap_status add_op(sim_build *b, int32_t g, const hap_pipe_op *op, hap_err *err) {
  int32_t k = op->chunk * b->p + g, j = op->micro;
  stage_state *ss = &b->st[k];
  const hap_pipe_lowered_stage *s = &b->pw->stages[k];
  HAP_TRY(collect_arrivals(b, k, op->backward, j, err));
  instance cur;
  HAP_TRY(instance_new(s, ss->n, &cur, err));
  hap_status st;
  if (!op->backward) {
    st = add_op_tasks(b, k, HAP_PIPE_PART_FWD, &cur, NULL, true, err);
    ss->fwd[j] = cur;
    ss->fwd_added[j] = 1;
  } else {
    st = add_op_tasks(b, k, HAP_PIPE_PART_BWD, &cur, &ss->fwd[j], true, err);
    instance_free(&ss->last_fwd);
    instance_free(&ss->last_bwd);
    ss->last_fwd = ss->fwd[j];
    ss->fwd[j].ids = NULL;
    ss->last_bwd = cur;
    ss->bwd_added[j] = 1;
  }
  if (st == HAP_OK)
    st = send_from(b, k, op->backward, j, err);
  return st;
}

static hap_status add_tail(sim_build *b, int32_t k, hap_err *err) {
  const hap_pipe_lowered_stage *s = &b->pw->stages[k];
  instance cur;
  HAP_TRY(instance_new(s, b->st[k].n, &cur, err));
  for (int32_t i = 0; i < b->st[k].n; i++)
    b->root_n[i] = 0;
  int32_t first = hap_sim_n_tasks(b->sim);
  hap_status st = add_op_tasks(b, k, HAP_PIPE_PART_TAIL, &cur, NULL, false, err);
  instance_free(&cur);
  return st == HAP_OK ? mark_tail(b, first, err) : st;
}

/* A parameter several stages use (GPT's tied embedding): its gradients summed with an all-reduce
 * over the devices of those stages (as hap-run does, Megatron-LM's embedding group), each member
 * after every tail of its device's stages, priced as a tail. Not placed between the
 * synchronisation and the updates as hap-run runs it: it ends the iteration either way when
 * communication does not overlap (serial), and after the update it delays nothing else. */
static hap_status add_tied_sum(sim_build *b, int32_t t, hap_err *err) {
  const hap_pipe_lowered *pw = b->pw;
  const hap_pipeline *pl = pw->pipeline;
  int32_t n_dev = pw->cluster->n_devices, n = 0;
  int32_t *ranks = malloc((size_t)n_dev * sizeof *ranks);
  uint8_t *holds = calloc((size_t)pl->n_groups, 1);
  hap_status st = ranks && holds ? HAP_OK : oom(err);
  int32_t holders = 0;
  for (int32_t k = 0; k < pw->n_stages && st == HAP_OK; k++)
    if (pw->stages[k].sg == NULL || pw->stages[k].sg->stage_of[t] >= 0) {
      holders++;
      holds[pl->stages[k].group] = 1;
    }
  for (int32_t g = 0; g < pl->n_groups && st == HAP_OK; g++) {
    int32_t nd;
    const int32_t *dev = hap_pipeline_group(pl, g, &nd);
    for (int32_t i = 0; i < nd && holds[g]; i++)
      ranks[n++] = dev[i];
  }
  if (st != HAP_OK || holders < 2) {
    free(ranks);
    free(holds);
    return st;
  }
  hap_group grp;
  double sec = 0, bytes = (double)hap_tensor_bytes(&pw->graph->tensors[t]);
  int32_t coll = -1;
  char label[256];
  snprintf(label, sizeof label, "%s.grad.tied_all_reduce", pw->graph->tensors[t].name);
  if ((st = hap_group_init(pw->cluster, ranks, n, &grp, err)) == HAP_OK) {
    (void)hap_coll_best(&grp, HAP_COLL_ALL_REDUCE, hap_coll_bytes_uniform(bytes, n), &sec);
    if (!isfinite(sec) || sec < 0)
      st = hap_err_set(err, HAP_EINVAL, "pipeline simulation: '%s' priced at %g s", label, sec);
  }
  if (st == HAP_OK)
    st = hap_sim_new_collective(b->sim, &coll, err);
  int32_t first = hap_sim_n_tasks(b->sim);
  for (int32_t g = 0; g < pl->n_groups && st == HAP_OK; g++) {
    int32_t nd;
    const int32_t *dev = hap_pipeline_group(pl, g, &nd);
    for (int32_t i = 0; i < nd && holds[g] && st == HAP_OK; i++) {
      int32_t after[64], n_after = 0; /* every tail of the device's stages (2 per chunk) */
      for (int32_t k = g; k < pw->n_stages && n_after + 2 <= 64; k += pl->n_groups)
        n_after += op_end(&b->st[k], i, after + n_after);
      int32_t id = -1;
      st = add_member(b, dev[i], label, sec, bytes, coll, after, n_after, &id, err);
    }
  }
  if (st == HAP_OK)
    st = mark_tail(b, first, err);
  free(ranks);
  free(holds);
  return st;
}

/* Merge the groups' orders into the engine (see the top of the file). */
static hap_status build(sim_build *b, hap_err *err) {
  const hap_pipe_order *o = b->pw->order;
  int32_t p = b->p, ops = hap_pipe_order_n_ops(o, 0), v = hap_pipe_order_chunks(o);
  int32_t *next = calloc((size_t)p, sizeof *next);
  if (next == NULL)
    return oom(err);
  hap_status st = HAP_OK;
  int32_t done = 0;
  while (done < p && st == HAP_OK) {
    bool progress = false;
    for (int32_t g = 0; g < p && st == HAP_OK; g++) {
      while (next[g] < ops && st == HAP_OK) {
        hap_pipe_op op = hap_pipe_order_op(o, g, next[g]);
        if (!ready(b, g, &op))
          break;
        st = add_op(b, g, &op, err);
        next[g]++;
        progress = true;
        if (next[g] == ops) {
          for (int32_t c = v - 1; c >= 0 && st == HAP_OK; c--)
            st = add_tail(b, c * p + g, err);
          done++;
        }
      }
    }
    if (st == HAP_OK && !progress) {
      int32_t g = 0;
      while (next[g] == ops)
        g++;
      hap_pipe_op op = hap_pipe_order_op(o, g, next[g]);
      st = hap_err_set(err, HAP_EINVAL,
                       "pipeline simulation: group %d's op %d (%s of micro-batch %d, chunk %d) "
                       "waits for a stage that never sends; the schedule cannot run",
                       g, next[g], op.backward ? "backward" : "forward", op.micro, op.chunk);
    }
  }
  free(next);
  const hap_graph *g = b->pw->graph;
  for (int32_t t = 0; t < g->n_tensors && st == HAP_OK && b->pw->n_stages > 1; t++)
    if (g->tensors[t].kind == HAP_TENSOR_PARAMETER && g->tensors[t].requires_grad)
      st = add_tied_sum(b, t, err);
  return st;
}

/* ---- results -------------------------------------------------------------------------------- */

typedef struct visit_ctx {
  const sim_build *b;
  int32_t cursor; /* into b->tails */
  hap_pipe_plan_sim *r;
} visit_ctx;

static hap_status visit(void *ctx, const hap_sim_record *rec, hap_err *err) {
  (void)err;
  visit_ctx *v = ctx;
  if (is_tail(v->b, &v->cursor, rec->task))
    return HAP_OK;
  if (rec->end_s > v->r->flush_s)
    v->r->flush_s = rec->end_s;
  if (rec->stream == HAP_SIM_COMPUTE)
    v->r->busy_s[rec->device] += rec->end_s - rec->start_s;
  return HAP_OK;
}

static hap_status results(sim_build *b, hap_pipe_plan_sim *r, hap_err *err) {
  const hap_sim_results *res = hap_sim_results_get(b->sim);
  const hap_pipeline *pl = b->pw->pipeline;
  r->iteration_s = res->makespan_s;
  r->n_events = res->n_events;
  r->n_engine_tasks = res->n_tasks;
  r->transfer_bytes = b->transfer_bytes;
  visit_ctx v = {b, 0, r};
  HAP_TRY(hap_sim_visit(b->sim, visit, &v, err));
  for (int32_t d = 0; d < r->n_devices; d++)
    r->bubble[d] = r->flush_s > 0 ? 1 - r->busy_s[d] / r->flush_s : 0;
  r->mean_bubble = 0;
  for (int32_t g = 0; g < r->n_groups; g++) {
    int32_t n;
    const int32_t *dev = hap_pipeline_group(pl, g, &n);
    double sum = 0;
    for (int32_t i = 0; i < n; i++)
      sum += r->bubble[dev[i]];
    r->group_bubble[g] = sum / n;
    r->mean_bubble += r->group_bubble[g] / r->n_groups;
  }
  return HAP_OK;
}

typedef struct trace_ctx {
  hap_trace *t;
  int32_t max_devices;
  const sim_build *b;
  int32_t cursor; /* into b->tails */
} trace_ctx;

static hap_status trace_one(void *ctx, const hap_sim_record *rec, hap_err *err) {
  trace_ctx *x = ctx;
  bool tail = is_tail(x->b, &x->cursor, rec->task);
  if (rec->device >= x->max_devices)
    return HAP_OK;
  hap_trace_event e = HAP_TRACE_EVENT_INIT;
  e.name = rec->name;
  e.task = rec->name;
  e.cat = tail                              ? "tail"
          : rec->kind == HAP_SIM_TRANSFER   ? "p2p"
          : rec->kind == HAP_SIM_COLLECTIVE ? "collective"
                                            : "compute";
  e.pid = hap_trace_pid(HAP_TRACE_SIM, rec->device);
  e.tid = rec->kind == HAP_SIM_TRANSFER     ? HAP_TRACE_LANE_P2P
          : rec->kind == HAP_SIM_COLLECTIVE ? HAP_TRACE_LANE_COLLECTIVE
                                            : HAP_TRACE_LANE_COMPUTE;
  e.ts_ns = (int64_t)llround(rec->start_s * 1e9);
  e.dur_ns = (int64_t)llround(rec->end_s * 1e9) - e.ts_ns;
  e.bytes = rec->bytes > 0 ? rec->bytes : NAN;
  hap_status st = hap_trace_complete(x->t, &e);
  if (st != HAP_OK && err->status == HAP_OK)
    return hap_err_set(err, st, "writing the pipeline trace failed");
  return st;
}

static hap_status write_trace(sim_build *b, hap_trace *t, int32_t max_devices, hap_err *err) {
  const hap_cluster *c = b->pw->cluster;
  int32_t n = max_devices > 0 && max_devices < c->n_devices ? max_devices : c->n_devices;
  for (int32_t d = 0; d < n; d++)
    if (hap_trace_rank(t, HAP_TRACE_SIM, d, c->devices[d].name) != HAP_OK)
      return hap_err_set(err, HAP_EIO, "writing the pipeline trace failed");
  trace_ctx x = {t, n, b, 0};
  HAP_TRY(hap_sim_visit(b->sim, trace_one, &x, err));
  if (n < c->n_devices) {
    char buf[32];
    snprintf(buf, sizeof buf, "%d", c->n_devices - n);
    if (hap_trace_meta(t, "devices_left_out", buf) != HAP_OK)
      return hap_err_set(err, HAP_EIO, "writing the pipeline trace failed");
  }
  return HAP_OK;
}

static void build_free(sim_build *b) {
  const hap_pipe_lowered *pw = b->pw;
  for (int32_t k = 0; b->st != NULL && k < pw->n_stages; k++) {
    stage_state *ss = &b->st[k];
    free(ss->dur);
    for (int32_t j = 0; ss->fwd != NULL && j < b->m; j++)
      instance_free(&ss->fwd[j]);
    free(ss->fwd);
    instance_free(&ss->last_fwd);
    instance_free(&ss->last_bwd);
    free(ss->fwd_added);
    free(ss->bwd_added);
    free(ss->last_comp);
    free(ss->last_comm);
    free(ss->coll_dep);
    free(ss->local);
  }
  free(b->st);
  for (size_t i = 0; b->arrivals != NULL && i < (size_t)pw->n_xfers * (size_t)b->m; i++)
    free(b->arrivals[i]);
  free(b->arrivals);
  free(b->res_dev_out);
  free(b->res_nic_out);
  free(b->res_nic_in);
  free(b->deps);
  free(b->root_deps);
  free(b->root_first);
  free(b->root_n);
  free(b->tails);
  hap_sim_destroy(b->sim);
}

static hap_status prepare(sim_build *b, hap_err *err) {
  hap_pipe_lowered *pw = b->pw;
  const hap_cluster *c = pw->cluster;
  int32_t nd = c->n_devices, nh = c->n_hosts;
  b->st = calloc((size_t)pw->n_stages, sizeof *b->st);
  b->arrivals = calloc((size_t)(pw->n_xfers ? pw->n_xfers : 1) * (size_t)b->m, sizeof *b->arrivals);
  b->res_dev_out = malloc((size_t)nd * sizeof *b->res_dev_out);
  b->res_nic_out = malloc((size_t)nh * sizeof *b->res_nic_out);
  b->res_nic_in = malloc((size_t)nh * sizeof *b->res_nic_in);
  b->root_first = malloc((size_t)nd * sizeof *b->root_first);
  b->root_n = calloc((size_t)nd, sizeof *b->root_n);
  if (!b->st || !b->arrivals || !b->res_dev_out || !b->res_nic_out || !b->res_nic_in ||
      !b->root_first || !b->root_n)
    return oom(err);
  for (int32_t d = 0; d < nd; d++)
    b->res_dev_out[d] = -1;
  for (int32_t h = 0; h < nh; h++)
    b->res_nic_out[h] = b->res_nic_in[h] = -1;
  for (int32_t k = 0; k < pw->n_stages; k++) {
    hap_pipe_lowered_stage *s = &pw->stages[k];
    stage_state *ss = &b->st[k];
    ss->n = s->lw->n_devices;
    size_t cells = (size_t)s->lw->n_tasks * (size_t)ss->n;
    ss->dur = malloc((cells ? cells : 1) * sizeof *ss->dur);
    ss->fwd = calloc((size_t)b->m, sizeof *ss->fwd);
    ss->fwd_added = calloc((size_t)b->m, 1);
    ss->bwd_added = calloc((size_t)b->m, 1);
    ss->last_comp = malloc((size_t)ss->n * sizeof *ss->last_comp);
    ss->last_comm = malloc((size_t)ss->n * sizeof *ss->last_comm);
    ss->coll_dep = calloc((size_t)(s->lw->n_tasks ? s->lw->n_tasks : 1), 1);
    ss->local = malloc((size_t)nd * sizeof *ss->local);
    if (!ss->dur || !ss->fwd || !ss->fwd_added || !ss->bwd_added || !ss->last_comp ||
        !ss->last_comm || !ss->coll_dep || !ss->local)
      return oom(err);
    for (int32_t d = 0; d < nd; d++)
      ss->local[d] = -1;
    for (int32_t i = ss->n - 1; i >= 0; i--) /* the first local index of a device */
      ss->local[s->devices[i]] = i;
    for (int32_t t = 0; t < s->lw->n_tasks; t++) {
      const hap_task *kt = &s->lw->tasks[t];
      for (int32_t q = 0; q < kt->n_deps && kt->kind == HAP_TASK_COLLECTIVE; q++)
        ss->coll_dep[s->lw->deps[kt->dep0 + q]] = 1;
    }
    hap_status st = hap_plan_sim_price(s->lw, s->cluster, ss->dur, err);
    if (st != HAP_OK) {
      hap_err_prefix(err, "stages[%d]", k);
      return st;
    }
  }
  return hap_sim_create(nd, &b->sim, err);
}

hap_status hap_pipe_plan_sim_run(hap_pipe_lowered *pw, const hap_pipe_plan_sim_options *o,
                                 hap_pipe_plan_sim **out, hap_err *err) {
  *out = NULL;
  sim_build b = {.pw = pw,
                 .serial = o != NULL && o->serial,
                 .no_chains = o != NULL && o->no_chains,
                 .m = hap_pipe_order_micro(pw->order),
                 .p = hap_pipe_order_groups(pw->order)};
  hap_pipe_plan_sim *r = calloc(1, sizeof *r);
  hap_status st = r ? HAP_OK : oom(err);
  if (st == HAP_OK) {
    r->n_devices = pw->cluster->n_devices;
    r->n_groups = b.p;
    r->busy_s = calloc((size_t)r->n_devices, sizeof *r->busy_s);
    r->bubble = calloc((size_t)r->n_devices, sizeof *r->bubble);
    r->group_bubble = calloc((size_t)b.p, sizeof *r->group_bubble);
    if (!r->busy_s || !r->bubble || !r->group_bubble)
      st = oom(err);
  }
  if (st == HAP_OK)
    st = prepare(&b, err);
  if (st == HAP_OK)
    st = build(&b, err);
  if (st == HAP_OK)
    st = hap_sim_run(b.sim, NULL, err);
  if (st == HAP_OK)
    st = results(&b, r, err);
  if (st == HAP_OK && o != NULL && o->trace != NULL)
    st = write_trace(&b, o->trace, o->trace_devices, err);
  build_free(&b);
  if (st != HAP_OK) {
    hap_pipe_plan_sim_destroy(r);
    return st;
  }
  *out = r;
  return HAP_OK;
}
