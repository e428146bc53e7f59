/* keep_loaded_sanitize.c — sanitizer builds only (HAP_SANITIZE): dlclose() does nothing, so every
 * shared object stays mapped until the process exits.
 *
 * Why: Open MPI 4.1 unloads its plugins (mca_*.so) in MPI_Finalize and has no parameter to stop it
 * (mca_base_component_disable_dlclose arrived in 5.0). LeakSanitizer then meets the frames of
 * Open MPI's never-freed allocations in unmapped plugins; for each such frame it re-reads
 * /proc/self/maps looking for the module, which cost about 3 s per rank at every exit (4.4 s
 * against 1.2 s for a 2-rank hap-run on dev-2c), and the suppressions (tests/profile/lsan-mpi.supp)
 * could not name those frames. Linked into every binary that links hap_exec (exec/CMakeLists.txt),
 * the executable's definition takes precedence over libc's for every library. Never in a normal
 * build. */
#include <dlfcn.h>

int dlclose(void *handle) {
  (void)handle;
  return 0;
}
