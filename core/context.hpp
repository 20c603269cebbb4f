// The per-process compute context: the one oneDNN CPU engine and stream every layer runs on.
// Passed explicitly to whoever needs it; there is no global instance.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace ddl {

class Context {
 public:
  Context() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const dnnl::engine& engine() const { return engine_; }
  dnnl::stream& stream() { return stream_; }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
};

}  // namespace ddl
