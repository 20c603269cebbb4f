// The one place where oneDNN 2.x and 3.x differ for ddl. oneDNN 3 dropped the operation descriptors
// (convolution_forward::desc, ...): a primitive descriptor is made from the engine and the operation's
// arguments directly; memory::desc's dims()/data_type() became get_dims()/get_data_type(); post-ops'
// append_eltwise lost its scale; output scales gave way to per-argument runtime scales. The functions
// here make each primitive descriptor ddl uses, with the arguments in oneDNN 3's order (engine first),
// and answer the descriptor queries, so that the layers read the same on either version.
// Outputs of eltwise, softmax and the normalizations take the layout of their source, as oneDNN 2 did.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <vector>

#if DNNL_VERSION_MAJOR != 2 && DNNL_VERSION_MAJOR != 3
#error "ddl builds against oneDNN 2.x or 3.x"
#endif

namespace ddl {

using md_t = dnnl::memory::desc;
using dims_vec = dnnl::memory::dims;

// ---- Descriptor queries -----------------------------------------------------------------------------

inline dims_vec dims_of(const md_t& md) {
#if DNNL_VERSION_MAJOR >= 3
  return md.get_dims();
#else
  return md.dims();
#endif
}

inline dnnl::memory::data_type data_type_of(const md_t& md) {
#if DNNL_VERSION_MAJOR >= 3
  return md.get_data_type();
#else
  return md.data_type();
#endif
}

// ---- Attributes -------------------------------------------------------------------------------------

// Appends an element-wise post-op (no scale: every ddl post-op has scale 1).
inline void append_eltwise(dnnl::post_ops& ops, dnnl::algorithm alg, float alpha, float beta) {
#if DNNL_VERSION_MAJOR >= 3
  ops.append_eltwise(alg, alpha, beta);
#else
  ops.append_eltwise(1.0f, alg, alpha, beta);
#endif
}

// An attribute that multiplies a matmul's result by `alpha` (dst = alpha * src x weights; ddl uses it
// without bias). oneDNN 2: a common output scale; oneDNN 3, which has no output scales: a linear
// post-op alpha * x + 0, the same single multiplication.
inline dnnl::primitive_attr output_scale_attr(float alpha) {
  dnnl::primitive_attr attr;
  if (alpha == 1.0f) return attr;
#if DNNL_VERSION_MAJOR >= 3
  dnnl::post_ops ops;
  ops.append_eltwise(dnnl::algorithm::eltwise_linear, alpha, 0.0f);
  attr.set_post_ops(ops);
#else
  attr.set_output_scales(0, {alpha});
#endif
  return attr;
}

// ---- Execution arguments ---------------------------------------------------------------------------

// Batch normalization backward with use_shift: oneDNN 2 requires DNNL_ARG_SHIFT among its arguments,
// oneDNN 3 rejects it (the shift does not enter the backward pass).
inline constexpr bool kBatchNormBackwardTakesShift = DNNL_VERSION_MAJOR < 3;

// ---- Primitive descriptors --------------------------------------------------------------------------
// An empty memory::desc() for a bias means "no bias" on both versions.

inline dnnl::convolution_forward::primitive_desc make_conv_forward_pd(
    const dnnl::engine& eng, dnnl::prop_kind prop, dnnl::algorithm alg, const md_t& src, const md_t& weights,
    const md_t& bias, const md_t& dst, const dims_vec& strides, const dims_vec& dilates, const dims_vec& padding_l,
    const dims_vec& padding_r, const dnnl::primitive_attr& attr = dnnl::primitive_attr()) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, prop, alg, src, weights, bias, dst, strides, dilates, padding_l, padding_r, attr};
#else
  return {dnnl::convolution_forward::desc(prop, alg, src, weights, bias, dst, strides, dilates, padding_l, padding_r),
          attr, eng};
#endif
}

inline dnnl::convolution_backward_data::primitive_desc make_conv_backward_data_pd(
    const dnnl::engine& eng, dnnl::algorithm alg, const md_t& diff_src, const md_t& weights, const md_t& diff_dst,
    const dims_vec& strides, const dims_vec& dilates, const dims_vec& padding_l, const dims_vec& padding_r,
    const dnnl::convolution_forward::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, alg, diff_src, weights, diff_dst, strides, dilates, padding_l, padding_r, hint};
#else
  return {
      dnnl::convolution_backward_data::desc(alg, diff_src, weights, diff_dst, strides, dilates, padding_l, padding_r),
      eng, hint};
#endif
}

inline dnnl::convolution_backward_weights::primitive_desc make_conv_backward_weights_pd(
    const dnnl::engine& eng, dnnl::algorithm alg, const md_t& src, const md_t& diff_weights, const md_t& diff_bias,
    const md_t& diff_dst, const dims_vec& strides, const dims_vec& dilates, const dims_vec& padding_l,
    const dims_vec& padding_r, const dnnl::convolution_forward::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, alg, src, diff_weights, diff_bias, diff_dst, strides, dilates, padding_l, padding_r, hint};
#else
  return {dnnl::convolution_backward_weights::desc(alg, src, diff_weights, diff_bias, diff_dst, strides, dilates,
                                                   padding_l, padding_r),
          eng, hint};
#endif
}

// The deconvolution (a convolution's transpose, ONNX's ConvTranspose) takes the convolution's arguments in
// the same order; its weights are [OC, IC, k...] ([G, OC / G, IC / G, k...]) of the output's channels.
inline dnnl::deconvolution_forward::primitive_desc make_deconv_forward_pd(
    const dnnl::engine& eng, dnnl::prop_kind prop, dnnl::algorithm alg, const md_t& src, const md_t& weights,
    const md_t& bias, const md_t& dst, const dims_vec& strides, const dims_vec& dilates, const dims_vec& padding_l,
    const dims_vec& padding_r) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, prop, alg, src, weights, bias, dst, strides, dilates, padding_l, padding_r};
#else
  return {dnnl::deconvolution_forward::desc(prop, alg, src, weights, bias, dst, strides, dilates, padding_l, padding_r),
          eng};
#endif
}

inline dnnl::deconvolution_backward_data::primitive_desc make_deconv_backward_data_pd(
    const dnnl::engine& eng, dnnl::algorithm alg, const md_t& diff_src, const md_t& weights, const md_t& diff_dst,
    const dims_vec& strides, const dims_vec& dilates, const dims_vec& padding_l, const dims_vec& padding_r,
    const dnnl::deconvolution_forward::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, alg, diff_src, weights, diff_dst, strides, dilates, padding_l, padding_r, hint};
#else
  return {
      dnnl::deconvolution_backward_data::desc(alg, diff_src, weights, diff_dst, strides, dilates, padding_l, padding_r),
      eng, hint};
#endif
}

inline dnnl::deconvolution_backward_weights::primitive_desc make_deconv_backward_weights_pd(
    const dnnl::engine& eng, dnnl::algorithm alg, const md_t& src, const md_t& diff_weights, const md_t& diff_bias,
    const md_t& diff_dst, const dims_vec& strides, const dims_vec& dilates, const dims_vec& padding_l,
    const dims_vec& padding_r, const dnnl::deconvolution_forward::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, alg, src, diff_weights, diff_bias, diff_dst, strides, dilates, padding_l, padding_r, hint};
#else
  return {dnnl::deconvolution_backward_weights::desc(alg, src, diff_weights, diff_bias, diff_dst, strides, dilates,
                                                     padding_l, padding_r),
          eng, hint};
#endif
}

inline dnnl::inner_product_forward::primitive_desc make_inner_product_forward_pd(
    const dnnl::engine& eng, dnnl::prop_kind prop, const md_t& src, const md_t& weights, const md_t& bias,
    const md_t& dst, const dnnl::primitive_attr& attr = dnnl::primitive_attr()) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, prop, src, weights, bias, dst, attr};
#else
  return {dnnl::inner_product_forward::desc(prop, src, weights, bias, dst), attr, eng};
#endif
}

inline dnnl::inner_product_backward_data::primitive_desc make_inner_product_backward_data_pd(
    const dnnl::engine& eng, const md_t& diff_src, const md_t& weights, const md_t& diff_dst,
    const dnnl::inner_product_forward::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, diff_src, weights, diff_dst, hint};
#else
  return {dnnl::inner_product_backward_data::desc(diff_src, weights, diff_dst), eng, hint};
#endif
}

inline dnnl::inner_product_backward_weights::primitive_desc make_inner_product_backward_weights_pd(
    const dnnl::engine& eng, const md_t& src, const md_t& diff_weights, const md_t& diff_bias, const md_t& diff_dst,
    const dnnl::inner_product_forward::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, src, diff_weights, diff_bias, diff_dst, hint};
#else
  return {dnnl::inner_product_backward_weights::desc(src, diff_weights, diff_bias, diff_dst), eng, hint};
#endif
}

// No dilation (oneDNN 3 asks for it: zeros).
inline dnnl::pooling_forward::primitive_desc make_pooling_forward_pd(const dnnl::engine& eng, dnnl::prop_kind prop,
                                                                     dnnl::algorithm alg, const md_t& src,
                                                                     const md_t& dst, const dims_vec& strides,
                                                                     const dims_vec& kernel, const dims_vec& padding_l,
                                                                     const dims_vec& padding_r) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, prop, alg, src, dst, strides, kernel, dims_vec(kernel.size(), 0), padding_l, padding_r};
#else
  return {dnnl::pooling_forward::desc(prop, alg, src, dst, strides, kernel, padding_l, padding_r), eng};
#endif
}

inline dnnl::pooling_backward::primitive_desc make_pooling_backward_pd(
    const dnnl::engine& eng, dnnl::algorithm alg, const md_t& diff_src, const md_t& diff_dst, const dims_vec& strides,
    const dims_vec& kernel, const dims_vec& padding_l, const dims_vec& padding_r,
    const dnnl::pooling_forward::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, alg, diff_src, diff_dst, strides, kernel, dims_vec(kernel.size(), 0), padding_l, padding_r, hint};
#else
  return {dnnl::pooling_backward::desc(alg, diff_src, diff_dst, strides, kernel, padding_l, padding_r), eng, hint};
#endif
}

// Element-wise on `data` (the output has its layout).
inline dnnl::eltwise_forward::primitive_desc make_eltwise_forward_pd(const dnnl::engine& eng, dnnl::prop_kind prop,
                                                                     dnnl::algorithm alg, const md_t& data,
                                                                     float alpha = 0.0f, float beta = 0.0f) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, prop, alg, data, data, alpha, beta};
#else
  return {dnnl::eltwise_forward::desc(prop, alg, data, alpha, beta), eng};
#endif
}

// `diff` is the layout of both gradients; `data` the source's, or the destination's for the
// *_use_dst_for_bwd algorithms.
inline dnnl::eltwise_backward::primitive_desc make_eltwise_backward_pd(
    const dnnl::engine& eng, dnnl::algorithm alg, const md_t& diff, const md_t& data, float alpha, float beta,
    const dnnl::eltwise_forward::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, alg, diff, diff, data, alpha, beta, hint};
#else
  return {dnnl::eltwise_backward::desc(alg, diff, data, alpha, beta), eng, hint};
#endif
}

// The plain ("accurate") softmax along `axis`.
inline dnnl::softmax_forward::primitive_desc make_softmax_forward_pd(const dnnl::engine& eng, dnnl::prop_kind prop,
                                                                     const md_t& data, int axis) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, prop, dnnl::algorithm::softmax_accurate, data, data, axis};
#else
  return {dnnl::softmax_forward::desc(prop, data, axis), eng};
#endif
}

// `diff` is the layout of both gradients, `dst` the forward's output.
inline dnnl::softmax_backward::primitive_desc make_softmax_backward_pd(
    const dnnl::engine& eng, const md_t& diff, const md_t& dst, int axis,
    const dnnl::softmax_forward::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, dnnl::algorithm::softmax_accurate, diff, diff, dst, axis, hint};
#else
  return {dnnl::softmax_backward::desc(diff, dst, axis), eng, hint};
#endif
}

// A shuffle along `axis` of `data` (the output has its layout), by oneDNN's group_size: the axis seen as
// [size / group_size, group_size] and transposed.
inline dnnl::shuffle_forward::primitive_desc make_shuffle_forward_pd(const dnnl::engine& eng, dnnl::prop_kind prop,
                                                                     const md_t& data, int axis, int group_size) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, prop, data, data, axis, group_size};
#else
  return {dnnl::shuffle_forward::desc(prop, data, axis, group_size), eng};
#endif
}

inline dnnl::shuffle_backward::primitive_desc make_shuffle_backward_pd(
    const dnnl::engine& eng, const md_t& diff, int axis, int group_size,
    const dnnl::shuffle_forward::primitive_desc& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, diff, diff, axis, group_size, hint};
#else
  return {dnnl::shuffle_backward::desc(diff, axis, group_size), eng, hint};
#endif
}

// Batch and layer normalization take the same arguments on either version: `Forward` is
// dnnl::batch_normalization_forward or dnnl::layer_normalization_forward.
template <class Forward>
typename Forward::primitive_desc make_normalization_forward_pd(const dnnl::engine& eng, dnnl::prop_kind prop,
                                                               const md_t& data, float epsilon,
                                                               dnnl::normalization_flags flags) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, prop, data, data, epsilon, flags};
#else
  return {typename Forward::desc(prop, data, epsilon, flags), eng};
#endif
}

// `Backward` is dnnl::batch_normalization_backward or dnnl::layer_normalization_backward; `diff` is the
// layout of both gradients, `src` the forward's source.
template <class Backward, class ForwardPd>
typename Backward::primitive_desc make_normalization_backward_pd(const dnnl::engine& eng, dnnl::prop_kind prop,
                                                                 const md_t& diff, const md_t& src, float epsilon,
                                                                 dnnl::normalization_flags flags,
                                                                 const ForwardPd& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, prop, diff, diff, src, epsilon, flags, hint};
#else
  return {typename Backward::desc(prop, diff, src, epsilon, flags), eng, hint};
#endif
}

inline dnnl::binary::primitive_desc make_binary_pd(const dnnl::engine& eng, dnnl::algorithm alg, const md_t& src0,
                                                   const md_t& src1, const md_t& dst,
                                                   const dnnl::primitive_attr& attr = dnnl::primitive_attr()) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, alg, src0, src1, dst, attr};
#else
  return {dnnl::binary::desc(alg, src0, src1, dst), attr, eng};
#endif
}

// A reduction of `src` to `dst`'s dimensions (the axes where dst has 1), e.g. a sum over the plane.
inline dnnl::reduction::primitive_desc make_reduction_pd(const dnnl::engine& eng, dnnl::algorithm alg, const md_t& src,
                                                         const md_t& dst) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, alg, src, dst, 0.0f, 0.0f};
#else
  return {dnnl::reduction::desc(alg, src, dst, 0.0f, 0.0f), eng};
#endif
}

inline dnnl::matmul::primitive_desc make_matmul_pd(const dnnl::engine& eng, const md_t& src, const md_t& weights,
                                                   const md_t& bias, const md_t& dst,
                                                   const dnnl::primitive_attr& attr = dnnl::primitive_attr()) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, src, weights, bias, dst, attr};
#else
  return {dnnl::matmul::desc(src, weights, bias, dst), attr, eng};
#endif
}

inline dnnl::concat::primitive_desc make_concat_pd(const dnnl::engine& eng, const md_t& dst, int axis,
                                                   const std::vector<md_t>& srcs) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, dst, axis, srcs};
#else
  return {dst, axis, srcs, eng};
#endif
}

inline dnnl::sum::primitive_desc make_sum_pd(const dnnl::engine& eng, const md_t& dst, const std::vector<float>& scales,
                                             const std::vector<md_t>& srcs) {
#if DNNL_VERSION_MAJOR >= 3
  return {eng, dst, scales, srcs};
#else
  return {dst, scales, srcs, eng};
#endif
}

}  // namespace ddl
