// The shape rules of ONNX's operators, written once: numpy's broadcasting, Reshape, Squeeze, Unsqueeze,
// Slice, Transpose, the reductions' kept axes, Concat and Gather. Shape inference before a graph is built
// (models/onnx/value_shapes.cpp), constant folding (fold_constants.cpp) and the operators that run a graph
// (core/graph/) all call these, so that they cannot disagree.
//
// Each throws ShapeError with what does not fit ("cannot broadcast [2x3] with [4]"); the graph layer and
// constant folding add the node's name where they call an operator. Dims are int64 (dnnl::memory::dims, ONNX's own).
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.hpp"

namespace ddl::shapes {

using Dims = std::vector<std::int64_t>;

class ShapeError : public InputError {
 public:
  using InputError::InputError;
};

std::string text(const Dims& dims);  // "[2x3x4]"
// Row-major strides of a tensor of `dims` (an axis of size 0 counts as 1, so that strides stay bounded).
Dims strides_of(const Dims& dims);
// The element count, throwing where a dimension is negative or the product passes `limit`.
std::int64_t count(const Dims& dims, std::int64_t limit = std::int64_t{1} << 40);
// `axis` counted from the back where negative, checked against `rank`.
std::int64_t axis_in(std::int64_t axis, std::size_t rank);

// numpy's rule: the shapes aligned at their last axes, an axis of 1 repeated.
Dims broadcast(const Dims& a, const Dims& b);
// The strides that read a tensor of `in` dims at each element of the `out` dims it broadcasts to (0 along
// the axes it repeats).
Dims broadcast_strides(const Dims& in, const Dims& out);

// Reshape's: 0 copies the input's dimension (unless allow_zero), one -1 takes what is left.
Dims reshape(const Dims& in, const Dims& shape, bool allow_zero = false);
// Flatten's: [product of the axes before `axis`, product of the rest].
Dims flatten(const Dims& in, std::int64_t axis);
// Squeeze's: the given axes (each of size 1) dropped; without axes every axis of size 1, but axis 0 where
// `keep_batch` (a value computed on images, whose batch may be 1 when a model is set up for one image).
Dims squeeze(const Dims& in, const Dims& axes, bool keep_batch);
// Unsqueeze's: axes of size 1 inserted where the output numbers them.
Dims unsqueeze(const Dims& in, const Dims& axes);
// Transpose's: `perm` (reversed where empty), checked to be a permutation of the axes.
Dims permutation(const Dims& in, const Dims& perm);
Dims transpose(const Dims& in, const Dims& perm);
// The reductions': the given axes (all where empty, unless noop_with_empty), kept as 1 or dropped.
std::vector<bool> reduced_axes(const Dims& in, const Dims& axes);
Dims reduce(const Dims& in, const Dims& axes, bool keep_dims);
// Concat's along `axis`.
Dims concat(const std::vector<Dims>& in, std::int64_t axis);
// Gather's: the indices' dims in place of the axis.
Dims gather(const Dims& in, std::int64_t axis, const Dims& index_dims);

// Slice's, steps of either sign with ONNX's clamping: where it starts reading (an offset into the input),
// the strides it reads with, and its dims.
struct SlicePlan {
  std::int64_t offset = 0;
  Dims dims, strides;
};
SlicePlan slice(const Dims& in, const Dims& starts, const Dims& ends, const Dims& axes, const Dims& steps);

}  // namespace ddl::shapes
