// Structure-aware fuzzing of the HDF5 files ddl reads. HDF5's parser of file bytes is the library's, not
// ddl's, and it is not robust to damaged bytes: byte-level fuzzing (the *_bytes targets) crashes it or makes
// it allocate terabytes within seconds (findings/hdf5_library/README.md). The dataset and checkpoint targets
// instead start from a valid file as ddl writes it and let the fuzzer edit it through HDF5's own API: remove
// any attribute, dataset or group, or put in its place one of another type, count, shape and content, with
// storage written or never written. HDF5 then only reads well-formed files, and what the fuzzer explores is
// every check of ddl's readers.
#pragma once

#include <algorithm>
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/data/hdf5.hpp"

namespace ddl::fuzz {

// The names edits pick from: a format's attributes (on the root group) and objects (datasets, groups).
struct Hdf5Names {
  std::vector<std::string> attributes, objects;
};

namespace detail {

// DDL_FUZZ_VERBOSE=1 prints each edit: how to read a finding's input (fuzz_<target> FILE).
inline void say(const std::string& what) {
  static const bool verbose = std::getenv("DDL_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "edit: %s\n", what.c_str());
}

inline std::string describe(hid_t type, hsize_t count, const std::string& space) {
  std::string t;
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      t = std::string(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(8 * H5Tget_size(type));
      break;
    case H5T_FLOAT:
      t = "float" + std::to_string(8 * H5Tget_size(type));
      break;
    default:
      t = H5Tis_variable_str(type) > 0 ? "string" : "char[" + std::to_string(H5Tget_size(type)) + "]";
  }
  return t + " " + space + " (" + std::to_string(count) + " values)";
}

// Mostly small, and the sizes that overflow or exhaust a careless reader.
inline hsize_t dimension(FuzzedDataProvider& in) {
  static constexpr hsize_t sizes[] = {
      0, 1, 2, 3, 4, 5, 8, 64, hsize_t{1} << 20, hsize_t{1} << 31, hsize_t{1} << 40, hsize_t{1} << 60};
  return in.PickValueInArray(sizes);
}

// A scalar, a null (no values) or a simple space of rank 1 to 4; `count` is its number of values, saturated.
inline h5::Handle dataspace(FuzzedDataProvider& in, hsize_t& count, std::string& shape) {
  const int rank = in.ConsumeIntegralInRange(-1, 4);
  if (rank < 0) {
    count = 1;
    shape = "scalar";
    return h5::Handle(H5Screate(H5S_SCALAR));
  }
  if (rank == 0) {
    count = 0;
    shape = "null";
    return h5::Handle(H5Screate(H5S_NULL));
  }
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  count = 1;
  shape = "[";
  for (auto& d : dims) {
    d = dimension(in);
    shape += (shape.size() > 1 ? ", " : "") + std::to_string(d);
    if (__builtin_mul_overflow(count, d, &count)) count = ~hsize_t{0};
  }
  shape += "]";
  return h5::Handle(H5Screate_simple(rank, dims.data(), nullptr));
}

// A type ddl writes, or one it does not expect there.
inline h5::Handle type(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0:
      return h5::Handle(H5Tcopy(H5T_NATIVE_INT8));
    case 1:
      return h5::Handle(H5Tcopy(H5T_NATIVE_UINT8));
    case 2:
      return h5::Handle(H5Tcopy(H5T_NATIVE_INT32));
    case 3:
      return h5::Handle(H5Tcopy(H5T_NATIVE_INT64));
    case 4:
      return h5::Handle(H5Tcopy(H5T_NATIVE_UINT64));
    case 5:
      return h5::Handle(H5Tcopy(H5T_NATIVE_FLOAT));
    case 6:
      return h5::Handle(H5Tcopy(H5T_NATIVE_DOUBLE));
    default: {
      h5::Handle t(H5Tcopy(H5T_C_S1));
      H5Tset_size(t.get(), in.ConsumeBool() ? H5T_VARIABLE : in.ConsumeIntegralInRange<std::size_t>(1, 16));
      return t;
    }
  }
}

// `count` values of `type` from the input: numbers as raw bytes (NaN, infinities, extremes), strings as
// strings. `strings` keeps variable-length ones alive; `bytes` is the buffer to write.
inline void values(FuzzedDataProvider& in, hid_t type, hsize_t count, std::vector<std::uint8_t>& bytes,
                   std::vector<std::string>& strings, std::vector<const char*>& pointers) {
  if (H5Tis_variable_str(type) > 0) {
    for (hsize_t i = 0; i < count; ++i) strings.push_back(in.ConsumeRandomLengthString(16));
    for (const auto& s : strings) pointers.push_back(s.c_str());
    return;
  }
  bytes = in.ConsumeBytes<std::uint8_t>(count * H5Tget_size(type));
  bytes.resize(count * H5Tget_size(type));
}

inline std::string pick(FuzzedDataProvider& in, const std::vector<std::string>& names) {
  if (in.ConsumeIntegralInRange(0, 15) == 0) return in.ConsumeRandomLengthString(8);  // one ddl does not know
  return names[in.ConsumeIntegralInRange<std::size_t>(0, names.size() - 1)];
}

inline void edit_attribute(hid_t file, FuzzedDataProvider& in, const Hdf5Names& names) {
  const std::string name = pick(in, names.attributes);
  if (H5Aexists(file, name.c_str()) > 0) H5Adelete(file, name.c_str());
  if (in.ConsumeIntegralInRange(0, 4) == 0) return say("attribute '" + name + "' removed");
  hsize_t count = 0;
  std::string shape;
  h5::Handle space = dataspace(in, count, shape), t = type(in);
  // HDF5 allocates a large attribute's whole buffer when it creates it in a file of the 1.10 format (dense
  // attribute storage): an edit that claims exabytes would fail this harness, not the reader under test.
  const hsize_t value_bytes = std::max<hsize_t>(H5Tget_size(t.get()), 1);
  if (count > (hsize_t{1} << 20) / value_bytes)
    return say("attribute '" + name + "' of " + describe(t.get(), count, shape) + ": too large to create");
  h5::Handle a(H5Acreate2(file, name.c_str(), t.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  say("attribute '" + name + "' is " + describe(t.get(), count, shape) + (a.valid() ? "" : ": refused by HDF5"));
  if (!a.valid() || count == 0 || count > 64) return;  // an attribute of many values: created, never written
  std::vector<std::uint8_t> bytes;
  std::vector<std::string> strings;
  std::vector<const char*> pointers;
  values(in, t.get(), count, bytes, strings, pointers);
  H5Awrite(a.get(), t.get(), pointers.empty() ? static_cast<const void*>(bytes.data()) : pointers.data());
}

inline void edit_object(hid_t file, FuzzedDataProvider& in, const Hdf5Names& names) {
  const std::string name = pick(in, names.objects);
  if (name.empty()) return;
  H5Ldelete(file, name.c_str(), H5P_DEFAULT);  // fails harmlessly when absent
  h5::Handle links(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(links.get(), 1);
  switch (in.ConsumeIntegralInRange(0, 2)) {
    case 0:
      return say("object '" + name + "' removed");
    case 1:
      h5::Handle(H5Gcreate2(file, name.c_str(), links.get(), H5P_DEFAULT, H5P_DEFAULT));
      return say("object '" + name + "' is an empty group");
    default: {
      hsize_t count = 0;
      std::string shape;
      h5::Handle space = dataspace(in, count, shape), t = type(in);
      h5::Handle d(H5Dcreate2(file, name.c_str(), t.get(), space.get(), links.get(), H5P_DEFAULT, H5P_DEFAULT));
      say("object '" + name + "' is a dataset of " + describe(t.get(), count, shape) +
          (!d.valid()                   ? ": refused by HDF5"
           : count == 0 || count > 4096 ? ", unwritten"
                                        : ""));
      // Many values are left unwritten: their storage is never allocated, so the file stays small while it
      // claims them, which is the claim a reader must check.
      if (!d.valid() || count == 0 || count > 4096) return;
      std::vector<std::uint8_t> bytes;
      std::vector<std::string> strings;
      std::vector<const char*> pointers;
      values(in, t.get(), count, bytes, strings, pointers);
      H5Dwrite(d.get(), t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT,
               pointers.empty() ? static_cast<const void*>(bytes.data()) : pointers.data());
    }
  }
}

}  // namespace detail

// Up to 8 edits of the file at `path`, each an attribute or an object, as the input says. Edits HDF5 refuses
// (an attribute too large for its header, a size that overflows) are left out.
inline void edit_hdf5_file(const std::string& path, FuzzedDataProvider& in, const Hdf5Names& names) {
  h5::Handle file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
  if (!file.valid()) std::abort();
  for (int edits = in.ConsumeIntegralInRange(0, 8); edits > 0 && in.remaining_bytes() > 0; --edits) {
    if (in.ConsumeBool())
      detail::edit_attribute(file.get(), in, names);
    else
      detail::edit_object(file.get(), in, names);
  }
}

}  // namespace ddl::fuzz
