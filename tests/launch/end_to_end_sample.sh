# Sourced, not run: the end-to-end tests (DdlTrain.*) that the suite's second runs take, under ASan and UBSan
# (tests/sanitizers/run_sanitizers.sh) and inside the Debian release that is not the host's
# (tests/launch/fresh_machine.sh); the host's suite runs them all. One of each kind of path: training and
# its outputs, data parallelism, pipelines, split layers, the planner, bf16, checkpoints and resuming, faults
# and bad input, eval and predict. Left to the host: the same paths at a larger scale (ResNet-18, every split
# layout, three hosts, re-planning) and the tests that wait by design. All of them ran under ASan 1,888 s
# on 2 cores (CI has 90 minutes for everything), these about a third of that.
end_to_end_tests=(
  LearnsAndWritesMetricsAndCheckpoints
  ConfigFileSetsOptionsAndTheCommandLineWins
  VisionTransformerShapeAndAugmentationOptions
  ImagesKeptInMemoryTrainExactlyAsReadFromTheFile
  RanksMatchOneRankWithTheGlobalBatch
  PipelinesMatchOneRankForSeedCnn
  Bf16PipelinesMatchOneRankForSeedCnn
  CheckpointOfOneLayoutResumesInAnother
  SplitLayersReportTheBytesTheySend
  PlanOnlyPlansThisOrALargerClusterAndStops
  Bf16TracksF32AndItsCheckpointsResumeInF32
  InitStartsFromACheckpointsWeights
  AStoppedRankIsNamedWithinTheTimeout
  SigtermStopsEveryRankWithACheckpointAndResumeContinuesExactly
  BadInputEndsWithOneClearLine
  BadInputStopsEveryRank
  TrainsFromShardFilesOnSeveralRanks
  ARankFailingDuringTrainingStopsTheJob
  TruncatedDataDuringTrainingIsNamed
  ADamagedCheckpointIsRefusedAndAutoResumeFallsBack
  DataToolRejectsBadInput
  DataInfoDescribesACheckpoint
  EvalGivesTrainingsValidationFiguresOnAnyRankCount
  PredictAgreesWithEvalOnTheSameImages
  EvalAndPredictRefuseBadInputInOneLine
)
end_to_end_sample="^DdlTrain\\.($(IFS='|'; echo "${end_to_end_tests[*]}"))\$"
