/* launcher.h — what the launcher (mpirun, Slurm) tells a process through its environment, for the
 * tools that run one rank per device. Reads the environment only; no MPI call. */
#ifndef HAP_HARNESS_LAUNCHER_H
#define HAP_HARNESS_LAUNCHER_H

#include <stdbool.h>
#include <stdint.h>

/* This rank's index among the ranks of its host: the first of OMPI_COMM_WORLD_LOCAL_RANK
 * (Open MPI), MPI_LOCALRANKID (MPICH), SLURM_LOCALID (Slurm) that holds an integer
 * 0..INT32_MAX-1 (a bad value is skipped); else `world_rank`. Which GPU a rank takes. */
int32_t hap_local_rank(int32_t world_rank);

/* Slurm: a task srun started has SLURM_STEP_NUM_TASKS and SLURM_PROCID set (a batch script's
 * own environment has SLURM_PROCID=0 but no step task count, and is not a task). */

/* Before MPI starts: is this process rank 0 of its job, or not started by a launcher? True when
 * OMPI_COMM_WORLD_RANK (else PMI_RANK, else an srun task's SLURM_PROCID) is unset or "0". Who
 * says a job-wide error once. */
bool hap_launcher_rank0(void);

/* Before MPI starts: was this process started by an MPI launcher (mpirun, mpiexec, srun)? True
 * when OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK is set, or it is an srun task. A tool run
 * without one starts as a single rank of its own. */
bool hap_launched_by_mpi(void);

/* The number of ranks the launcher started: the first of OMPI_COMM_WORLD_SIZE, PMI_SIZE and (an
 * srun task) SLURM_STEP_NUM_TASKS that holds an integer >= 1, its name in *var (may be NULL);
 * -1 when none does. MPI's world must have as many (hap_harness_mpi_init checks). */
int32_t hap_launcher_size(const char **var);

#endif
