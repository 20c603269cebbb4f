# Sourced, not run: the end-to-end tests (DdlTrain.*) that the suite's second run takes, under ASan and
# UBSan inside the Debian release that is not the host's (tests/sanitizers/run_sanitizers.sh,
# tests/launch/fresh_machine.sh); the host's suite runs them all. One of each kind of path that only a
# whole program takes: training and its outputs, data parallelism, pipelines with bf16 messages, split
# layers, the planner, the image cache, sharded files, checkpoints resumed in another layout, a stop
# signal, a rank that fails, bad input, a damaged checkpoint, eval and predict. Left to the host: the same
# paths at a larger scale or again (ResNet-18, every split layout, three hosts, re-planning, more bad
# input) and the tests that wait by design. The layers, models, pool, loader, checkpoints and communicator
# are tested in-process there, with leak checks.
end_to_end_tests=(
  LearnsAndWritesMetricsAndCheckpoints
  RanksMatchOneRankWithTheGlobalBatch
  Bf16PipelinesMatchOneRankForSeedCnn
  SplitLayersReportTheBytesTheySend
  PlanOnlyPlansThisOrALargerClusterAndStops
  ImagesKeptInMemoryTrainExactlyAsReadFromTheFile
  TrainsFromShardFilesOnSeveralRanks
  CheckpointOfOneLayoutResumesInAnother
  SigtermStopsEveryRankWithACheckpointAndResumeContinuesExactly
  ARankFailingDuringTrainingStopsTheJob
  BadInputEndsWithOneClearLine
  ADamagedCheckpointIsRefusedAndAutoResumeFallsBack
  EvalGivesTrainingsValidationFiguresOnAnyRankCount
  PredictAgreesWithEvalOnTheSameImages
)
end_to_end_sample="^DdlTrain\\.($(IFS='|'; echo "${end_to_end_tests[*]}"))\$"
