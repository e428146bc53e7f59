/* grad_buckets.h — gradient synchronisation that overlaps the backward pass (hap-run --overlap,
 * docs/execution.md "Overlap"), as PyTorch DDP's buckets do: each gradient summed over every rank
 * is copied into the open bucket of a staging area when its all-reduce task comes; a bucket whose
 * size reaches the bucket bytes has its sum started without waiting (comm all_reduce_start), and
 * compute goes on. A gradient of at least the bucket bytes, or of 64 KiB, is summed in place on
 * its own (no copies): buckets gather the small gradients. hap_buckets_progress, called between
 * tasks, lets the started sums advance (Open MPI's shared-memory transport moves data only inside
 * MPI calls); hap_buckets_finish starts the last, partial bucket, waits for all of them and copies
 * each sum back into its gradient. Between add and finish a gradient's buffer must not change (the
 * runner finishes before the first update). Internal to run/. Ownership: hap_buckets_create returns
 * an owned set freed with hap_buckets_destroy; it borrows the comm, whose ops must have
 * all_reduce_start, reduce_test and reduce_wait. */
#ifndef HAP_RUN_GRAD_BUCKETS_H
#define HAP_RUN_GRAD_BUCKETS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "exec/comm.h"

typedef struct hap_buckets hap_buckets;

/* bucket_bytes >= 4: the size at which a bucket's sum starts (a larger gradient is one bucket). */
hap_status hap_buckets_create(hap_comm *c, int64_t bucket_bytes, hap_buckets **out, hap_err *err);
void hap_buckets_destroy(hap_buckets *b);

/* Queue grad[0..count) for the sum over ranks (float32). */
hap_status hap_buckets_add(hap_buckets *b, float *grad, int64_t count, hap_err *err);
/* Let started sums advance without waiting. */
hap_status hap_buckets_progress(hap_buckets *b, hap_err *err);
/* Every queued gradient summed in place; the set is empty afterwards. */
hap_status hap_buckets_finish(hap_buckets *b, hap_err *err);
/* Gradients queued and not yet finished. */
bool hap_buckets_pending(const hap_buckets *b);
/* Buckets started so far (over the set's life), for tests and reports. */
int64_t hap_buckets_started(const hap_buckets *b);

#endif
