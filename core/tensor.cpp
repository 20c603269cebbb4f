#include "core/tensor.hpp"

#include "core/error.hpp"

namespace ddl {

Tensor::Tensor(const dnnl::memory::desc& md, const dnnl::engine& engine)
    : md_(md), storage_(md.get_size()), memory_(md, engine, storage_.data()) {}

Tensor::Tensor(const dnnl::memory::desc& md, const dnnl::engine& engine, AlignedBuffer<std::byte> storage)
    : md_(md), storage_(std::move(storage)), memory_(md, engine, storage_.data()) {
  if (storage_.size() < md.get_size()) throw Error("tensor: storage smaller than its descriptor");
}

DataType Tensor::data_type() const {
  switch (data_type_of(md_)) {
    case dt::f32:
      return DataType::f32;
    case dt::bf16:
      return DataType::bf16;
    default:
      throw Error("tensor: unsupported data type");
  }
}

std::size_t Tensor::elements() const { return product(dims()); }

std::size_t product(const dims_t& dims) {
  std::size_t n = 1;
  for (auto d : dims) n *= static_cast<std::size_t>(d);
  return n;
}

std::string to_string(const dims_t& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

dnnl::memory::desc plain_desc(const dims_t& dims, dt type) {
  static constexpr tag tags[] = {tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde};
  if (dims.empty() || dims.size() > 5) throw Error("plain_desc: unsupported rank " + to_string(dims));
  return dnnl::memory::desc(dims, type, tags[dims.size() - 1]);
}

std::optional<dnnl::memory::desc> channel_blocked_desc(const dims_t& dims, dt type, int block) {
  const bool by16 = block == 16;
  if (dims.size() == 3) return dnnl::memory::desc(dims, type, by16 ? tag::aBc16b : tag::aBc8b);
  if (dims.size() == 4) return dnnl::memory::desc(dims, type, by16 ? tag::aBcd16b : tag::aBcd8b);
  if (dims.size() == 5) return dnnl::memory::desc(dims, type, by16 ? tag::aBcde16b : tag::aBcde8b);
  return std::nullopt;
}

int channel_block(const dnnl::memory::desc& md) {
  for (const int block : {16, 8})
    if (const auto blocked = channel_blocked_desc(dims_of(md), data_type_of(md), block); blocked && *blocked == md)
      return block;
  return 0;
}

}  // namespace ddl
