# hap-run end to end under mpirun (Open MPI): --check on every zoo model under hap, dp-ev and dp-cp
# plans on 2 ranks and on 4 ranks (oversubscribed on this 2-core machine, with the heterogeneous
# ratios of a V100 + P100 plan), the trace, usage errors and a killed rank. Included by
# tests/CMakeLists.txt.
find_program(HAP_MPIRUN NAMES mpirun mpiexec)
if(TARGET hap-run AND TARGET hap-synth AND HAP_MPIRUN)
  # The --check matrices run a narrow vgg19 (width 16, classifier 256: 0.5 M parameters, every op
  # of the full one); the full-size one (140 M parameters, ~25 s a case on 4 ranks) runs once, in
  # run_check_policies_vgg19. Under the sanitizers (~10x slower) vgg19 is left out (its ops are in
  # the kernel unit tests there) and the fault test runs one case per kind.
  # Under the sanitizers 2 ranks run mlp, bert-moe (its all-to-alls) and gpt (attention, layer
  # norm, embeddings: bert's and vit's ops, which the kernel unit tests also run there), and 4
  # ranks mlp alone (every collective and layout of the heterogeneous 4-rank plans), keeping CI's
  # sanitizer step short.
  set(HAP_CHECK_MODELS "^(mlp|bert|vit|gpt|vgg19:.*width)")
  set(HAP_CHECK_MODELS_4 "${HAP_CHECK_MODELS}")
  set(HAP_FAULTS_MODE "all")
  if(HAP_SANITIZE)
    set(HAP_CHECK_MODELS "^(mlp|bert-moe|gpt)")
    set(HAP_CHECK_MODELS_4 "^mlp")
    set(HAP_FAULTS_MODE "quick")
  endif()
  # the mpi backend's collectives, whole and in pieces (exec/mpi/comm_mpi.c)
  add_executable(test_comm_mpi ${CMAKE_CURRENT_SOURCE_DIR}/run/test_comm_mpi.c)
  target_link_libraries(test_comm_mpi PRIVATE hap_exec)
  add_test(NAME run_comm_mpi
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_comm_mpi.sh
                   $<TARGET_FILE:test_comm_mpi> ${HAP_MPIRUN})
  set(HAP_ALL_STRATEGIES "hap dp-ev dp-cp megatron-tp")
  add_test(NAME run_check_2ranks
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_check.sh $<TARGET_FILE:hap-synth>
                   $<TARGET_FILE:hap-run> 2 cpu-2 ${HAP_ALL_STRATEGIES} ${HAP_CHECK_MODELS})
  add_test(NAME run_check_4ranks
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_check.sh $<TARGET_FILE:hap-synth>
                   $<TARGET_FILE:hap-run> 4 paper-hetero:gpus_per_host=1,hosts=2
                   ${HAP_ALL_STRATEGIES} ${HAP_CHECK_MODELS_4})
  # 2-D plans: megatron-tp on 2 hosts x 2 devices (tensor parallel inside a host, 2 replicas)
  add_test(NAME run_check_megatron
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_check.sh $<TARGET_FILE:hap-synth>
                   $<TARGET_FILE:hap-run> 4 paper-homo:gpus_per_host=2,hosts=2 megatron-tp
                   ${HAP_CHECK_MODELS})
  # every training policy of issue 14 (run/test_check_policies.sh): the zoo models of the matrices
  # on 2 and 4 ranks, and the full-size vgg19 (140 M parameters) once on 2 ranks with Adam, full
  # recomputation and 4 micro-batches in fp32: in bf16 its 19 layers of rounding flip enough ReLU
  # and max-pool choices that single bias gradients differ by 0.08-0.3 in relative L2
  # (docs/execution.md)
  set(HAP_POLICY_MODELS "${HAP_CHECK_MODELS}")
  set(HAP_POLICY_MODELS_4 "${HAP_CHECK_MODELS}")
  if(HAP_SANITIZE)
    set(HAP_POLICY_MODELS "^mlp")
    set(HAP_POLICY_MODELS_4 "^mlp")
  endif()
  add_test(NAME run_check_policies_2ranks
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_check_policies.sh
                   $<TARGET_FILE:hap-synth> $<TARGET_FILE:hap-run> 2 cpu-2 hap ${HAP_POLICY_MODELS})
  add_test(NAME run_check_policies_4ranks
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_check_policies.sh
                   $<TARGET_FILE:hap-synth> $<TARGET_FILE:hap-run> 4
                   paper-hetero:gpus_per_host=1,hosts=2 hap ${HAP_POLICY_MODELS_4})
  # policy ZeRO stages 1-3 (hap-run shards optimizer state by rows of each replicated parameter):
  # hap and dp-cp plans (every parameter replicated, uneven batch ratios) on 4 ranks
  set(HAP_ZERO_MODELS "^(mlp|bert-base|gpt:.*fine)")
  if(HAP_SANITIZE)
    set(HAP_ZERO_MODELS "^mlp")
  endif()
  add_test(NAME run_check_zero
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_check_policies.sh
                   $<TARGET_FILE:hap-synth> $<TARGET_FILE:hap-run> 4
                   paper-hetero:gpus_per_host=1,hosts=2 "hap dp-cp" ${HAP_ZERO_MODELS}
                   "optimizer=momentum,zero=1"
                   "precision=bf16,optimizer=adam,zero=2,micro_batches=4"
                   "optimizer=adamw,zero=3,recompute=full")
  # Adam's second step on a wider bert (64 wide, 32 x 16 tokens): its noise gradients once made
  # --check fail a correct dp-ev run (gradient error 3.4e-4 at iteration 2, from parameters that
  # had legitimately drifted apart in step 1; run/check.h, "the reference follows the run")
  add_test(NAME run_check_adam_steps
           COMMAND env
                   "HAP_CHECK_MODEL_SPECS=bert-base:layers=2,batch=32,seq=16,width=64,heads=4,vocab=128"
                   bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_check.sh $<TARGET_FILE:hap-synth>
                   $<TARGET_FILE:hap-run> 2 cpu-2 "dp-ev hap" "." "optimizer=adam")
  set(HAP_POLICY_TESTS run_check_policies_2ranks run_check_policies_4ranks run_check_zero
                       run_check_adam_steps)
  if(NOT HAP_SANITIZE)
    add_test(NAME run_check_policies_vgg19
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_check_policies.sh
                     $<TARGET_FILE:hap-synth> $<TARGET_FILE:hap-run> 2 cpu-2 hap "^vgg19:batch=4$"
                     "optimizer=adam,recompute=full,micro_batches=4")
    list(APPEND HAP_POLICY_TESTS run_check_policies_vgg19)
  endif()
  # pipelined plans (issue 15): 2 stages x 2 and 4 stages x 1 on 4 ranks, GPipe and 1F1B
  add_test(NAME run_check_pipeline
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_check_pipeline.sh
                   $<TARGET_FILE:hap-synth> $<TARGET_FILE:hap-run> ${HAP_POLICY_MODELS})
  # segment boundaries: shared splits, a re-shard that moves the difference, one that copies
  add_test(NAME run_check_segments
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_check_segments.sh
                   $<TARGET_FILE:hap-synth> $<TARGET_FILE:hap-run>)
  # the alpa strategy's plans (Alpa's intra-operator pass, issue 16) on 4 ranks
  add_test(NAME run_check_alpa
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_check.sh $<TARGET_FILE:hap-synth>
                   $<TARGET_FILE:hap-run> 4 paper-hetero:gpus_per_host=1,hosts=2 alpa
                   ${HAP_CHECK_MODELS_4})
  # the galvatron strategy's plans (flat and pipelined, layers sharded per the memory limit) on 4
  # ranks (issue 16)
  add_test(NAME run_check_galvatron
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_check_galvatron.sh
                   $<TARGET_FILE:hap-synth> $<TARGET_FILE:hap-run> ${HAP_CHECK_MODELS_4})
  # sufficient-factor broadcasting: even and uneven splits, a skipped gather fails, bad plans
  add_test(NAME run_check_sfb
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_check_sfb.sh
                   $<TARGET_FILE:hap-synth> $<TARGET_FILE:hap-run> $<TARGET_FILE:hap-sim>)
  # hap-run --overlap: bucketed gradient sums checked, reported, refused where they do not apply
  add_test(NAME run_overlap
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_overlap.sh $<TARGET_FILE:hap-synth>
                   $<TARGET_FILE:hap-run> ${HAP_CHECK_MODELS})
  add_test(NAME run_end_to_end
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_run.sh $<TARGET_FILE:hap-synth>
                   $<TARGET_FILE:hap-run>)
  # every deliberate fault (HAP_FAULT) is reported as 'check: FAILED' with its tensor and rank,
  # and makes test_check.sh fail
  add_test(NAME run_check_faults
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_check_faults.sh
                   $<TARGET_FILE:hap-synth> $<TARGET_FILE:hap-run> ${HAP_FAULTS_MODE})
  # sanitizer build: LeakSanitizer in MPI ranks reports our leaks and names Open MPI's frames
  set(HAP_SANITIZE_TESTS)
  if(HAP_SANITIZE)
    add_executable(test_sanitize_leak ${CMAKE_CURRENT_SOURCE_DIR}/run/test_sanitize_leak.c)
    target_link_libraries(test_sanitize_leak PRIVATE hap_exec)
    add_test(NAME run_sanitize_leak
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_sanitize_leak.sh
                     $<TARGET_FILE:test_sanitize_leak> ${HAP_MPIRUN}
                     ${CMAKE_CURRENT_SOURCE_DIR}/profile/lsan-mpi.supp)
    set(HAP_SANITIZE_TESTS run_sanitize_leak)
  endif()
  set(HAP_RUN_TESTS run_check_2ranks run_check_4ranks run_check_megatron run_check_pipeline
                    run_check_segments run_check_sfb run_check_alpa run_check_galvatron run_end_to_end
                    run_comm_mpi run_overlap
                    run_check_faults ${HAP_POLICY_TESTS} ${HAP_SANITIZE_TESTS})
  # PROCESSORS 4: up to 4 ranks each (oversubscribed where fewer cores); ctest caps it at its -j,
  # so on 2 cores they run one at a time, on more several at once. No timing is judged here.
  set_tests_properties(${HAP_RUN_TESTS} PROPERTIES LABELS "mpi;run" TIMEOUT 900 PROCESSORS 4)
  if(HAP_SANITIZE)
    # Open MPI's own allocations are not ours to free (tests/profile/lsan-mpi.supp).
    set_tests_properties(${HAP_RUN_TESTS} PROPERTIES
      ENVIRONMENT "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/profile/lsan-mpi.supp:fast_unwind_on_malloc=0:print_suppressions=0")
  endif()
else()
  # mpirun comes with openmpi-bin, which setup installs. Without it the hap-run tests cannot run: a
  # failure, never a pass.
  add_test(NAME run_needs_mpirun
           COMMAND sh -c "echo 'mpirun not found (openmpi-bin): the hap-run tests cannot run' >&2; exit 1")
endif()
# check_passed.sh judges --check's output by its numbers (no MPI needed)
add_test(NAME run_check_passed_judge
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run/test_check_passed.sh)
