// A training layout as a value: what launch/ builds a run from, whether a user chose it with options or
// the planner chose it. ranks = replicas x stages x tensor.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ddl {

struct Layout {
  int replicas = 1, stages = 1, tensor = 1;  // D x S x T
  int micro_batches = 1;
  std::vector<std::size_t> cut;    // layers per stage (one entry per stage)
  std::vector<std::size_t> split;  // layers split across each tensor group, ascending (empty when T = 1)
  int batch = 0;                   // --batch-size: per rank that brings its own images, per group that shares
  // What the user chose, which the planner keeps: GPipe's schedule (every micro-batch's activations in
  // flight, where 1F1B keeps at most one a stage ahead) and --bucket-mb (data parallelism's all-reduce in
  // buckets during backward).
  bool gpipe = false;
  double bucket_bytes = 0;
  int ranks() const { return replicas * stages * tensor; }
  // "2 x 1 x 2, 1 micro-batch, split 10,12,13, batch 32"
  std::string describe() const;
};

}  // namespace ddl
