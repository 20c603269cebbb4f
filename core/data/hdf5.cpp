#include "core/data/hdf5.hpp"

#include <algorithm>
#include <filesystem>

#include <sys/stat.h>

#include "core/error.hpp"

namespace ddl::h5 {
namespace {

// HDF5's file drivers put the system's reason for a failed read or write ("No space left on device") into
// the text of one entry of the error stack: " ... errno = 28, error message = 'No space left on device'".
// Returns that reason, or "" when the stack has none. Walks a copy, as any other HDF5 call clears it.
std::string system_reason_on_error_stack() {
  const hid_t stack = H5Eget_current_stack();
  if (stack < 0) return "";
  std::string reason;
  auto find = [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
    const std::string desc = e->desc ? e->desc : "";
    const std::string key = "error message = '";
    const auto at = desc.find(key);
    if (at != std::string::npos) {
      const auto end = desc.find('\'', at + key.size());
      *static_cast<std::string*>(out) =
          desc.substr(at + key.size(), end == std::string::npos ? end : end - at - key.size());
    }
    return 0;
  };
  H5Ewalk2(stack, H5E_WALK_DOWNWARD, find, &reason);
  H5Eclose_stack(stack);
  return reason;
}

std::string with_reason(const std::string& message) {
  const std::string reason = system_reason_on_error_stack();
  return reason.empty() ? message : message + " (" + reason + ")";
}

// Reads of a file ddl opened read-only fail only when the file is damaged: bad input, named as such.
void check_read(herr_t status, const std::string& what, const std::string& context) {
  if (status < 0)
    throw InputError(with_reason(what + (context.empty() ? "" : ": " + context) + " (corrupt or truncated file?)"));
}

hid_t check_read_id(hid_t id, const std::string& what, const std::string& context) {
  check_read(id < 0 ? -1 : 0, what, context);
  return id;
}

// No dataset or attribute of ddl's formats holds more values than its file has bytes, so a count above it
// comes from a damaged file and must not size an allocation.
void check_fits_in_file(const Handle& loc, hsize_t count, std::size_t value_bytes, const std::string& what,
                        const std::string& context) {
  const hsize_t size = file_size(loc, context);
  if (count > size / value_bytes)
    throw InputError(context + ": " + what + " claims " + std::to_string(count) + " values, more than its " +
                     std::to_string(size) + "-byte file can hold (corrupt file?)");
}

Handle scalar_space() { return Handle(check_id(H5Screate(H5S_SCALAR), "H5Screate", "scalar")); }

Handle vector_space(hsize_t n) { return Handle(check_id(H5Screate_simple(1, &n, nullptr), "H5Screate_simple", "")); }

Handle variable_string_type() {
  Handle t(check_id(H5Tcopy(H5T_C_S1), "H5Tcopy", "string type"));
  check(H5Tset_size(t.get(), H5T_VARIABLE), "H5Tset_size", "string type");
  check(H5Tset_cset(t.get(), H5T_CSET_UTF8), "H5Tset_cset", "string type");
  return t;
}

Handle open_attribute(const Handle& loc, const std::string& name, const std::string& context) {
  if (!has_attribute(loc, name)) throw InputError(context + ": attribute '" + name + "' is missing");
  return Handle(check_read_id(H5Aopen(loc.get(), name.c_str(), H5P_DEFAULT), "cannot open attribute " + name, context));
}

// The number of values of an attribute, checked against its file's size.
hsize_t attribute_values(const Handle& attribute, const std::string& name, std::size_t value_bytes,
                         const std::string& context) {
  Handle space(check_read_id(H5Aget_space(attribute.get()), "cannot read attribute " + name, context));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  check_read(n < 0 ? -1 : 0, "cannot read attribute " + name, context);
  check_fits_in_file(attribute, static_cast<hsize_t>(n), value_bytes, "attribute '" + name + "'", context);
  return static_cast<hsize_t>(n);
}

// An attribute read as numbers must hold numbers (HDF5 would fail converting a string).
void require_numeric(const Handle& attribute, const std::string& name, const std::string& context) {
  Handle type(check_read_id(H5Aget_type(attribute.get()), "cannot read attribute " + name, context));
  const H5T_class_t c = H5Tget_class(type.get());
  if (c != H5T_INTEGER && c != H5T_FLOAT) throw InputError(context + ": attribute '" + name + "' is not a number");
}

void replace_attribute(const Handle& loc, const std::string& name) {
  if (has_attribute(loc, name)) check(H5Adelete(loc.get(), name.c_str()), "H5Adelete " + name, "");
}

}  // namespace

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    Handle old(id_);
    id_ = o.id_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

Handle::~Handle() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE:
      H5Fclose(id_);
      break;
    case H5I_GROUP:
      H5Gclose(id_);
      break;
    case H5I_DATASET:
      H5Dclose(id_);
      break;
    case H5I_DATASPACE:
      H5Sclose(id_);
      break;
    case H5I_DATATYPE:
      H5Tclose(id_);
      break;
    case H5I_ATTR:
      H5Aclose(id_);
      break;
    case H5I_GENPROP_LST:
      H5Pclose(id_);
      break;
    default:
      break;
  }
}

void check(herr_t status, const std::string& what, const std::string& context) {
  if (status < 0) throw Error(with_reason(what + (context.empty() ? "" : ": " + context)));
}

hid_t check_id(hid_t id, const std::string& what, const std::string& context) {
  if (id < 0) throw Error(with_reason(what + (context.empty() ? "" : ": " + context)));
  return id;
}

template <>
hid_t native_type<float>() {
  return H5T_NATIVE_FLOAT;
}
template <>
hid_t native_type<double>() {
  return H5T_NATIVE_DOUBLE;
}
template <>
hid_t native_type<std::int32_t>() {
  return H5T_NATIVE_INT32;
}
template <>
hid_t native_type<std::int64_t>() {
  return H5T_NATIVE_INT64;
}
template <>
hid_t native_type<std::uint64_t>() {
  return H5T_NATIVE_UINT64;
}
template <>
hid_t native_type<std::uint8_t>() {
  return H5T_NATIVE_UINT8;
}

hsize_t file_size(const Handle& loc, const std::string& context) {
  Handle file(check_read_id(H5Iget_file_id(loc.get()), "cannot find the file of an object", context));
  hsize_t size = 0;
  check_read(H5Fget_filesize(file.get(), &size), "cannot tell the file's size", context);
  return size;
}

std::uintmax_t file_bytes_on_disk(const Handle& file, const std::string& context) {
  Handle access(check_read_id(H5Fget_access_plist(file.get()), "cannot get the file's access properties", context));
  struct stat st {};
  if (H5Pget_driver(access.get()) == H5FD_SEC2) {  // its handle is the file descriptor (an int)
    void* handle = nullptr;
    check_read(H5Fget_vfd_handle(file.get(), H5P_DEFAULT, &handle), "cannot get the file's descriptor", context);
    if (fstat(*static_cast<int*>(handle), &st) != 0) throw Error(context + ": cannot stat the open file");
  } else if (stat(context.c_str(), &st) != 0) {  // another driver (HDF5_DRIVER): the file by its name
    throw Error(context + ": cannot stat the file");
  }
  return static_cast<std::uintmax_t>(st.st_size);
}

void silence_errors_on_this_thread() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

void no_cleanup_at_exit() { check(H5dont_atexit(), "H5dont_atexit", ""); }

Handle open_file(const std::string& path) {
  silence_errors_on_this_thread();
  if (!std::filesystem::exists(path)) throw InputError(path + ": no such file");
  if (H5Fis_hdf5(path.c_str()) <= 0) throw InputError(path + ": not an HDF5 file (corrupt or wrong format)");
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) throw InputError(path + ": cannot open HDF5 file (corrupt or truncated?)");
  return Handle(id);
}

Handle create_file(const std::string& path) {
  silence_errors_on_this_thread();
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) {
    const std::string reason = system_reason_on_error_stack();
    throw InputError(path + ": cannot create file (" +
                     (reason.empty() ? "directory missing or not writable?" : reason) + ")");
  }
  return Handle(id);
}

Handle open_file_for_update(const std::string& path) {
  silence_errors_on_this_thread();
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (id < 0) throw Error(path + ": cannot open HDF5 file for writing");
  return Handle(id);
}

void flush(const Handle& file, const std::string& path) {
  check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "cannot flush", path);
}

namespace {

// The core driver without a backing store: the file lives and dies in memory.
void use_memory(const Handle& access, const std::string& name) {
  constexpr std::size_t kGrowBy = std::size_t{64} << 20;
  check(H5Pset_fapl_core(access.get(), kGrowBy, false), "H5Pset_fapl_core", name);
}

}  // namespace

Handle create_memory_file(const std::string& name) {
  silence_errors_on_this_thread();
  Handle in_memory(check_id(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", name));
  use_memory(in_memory, name);
  return Handle(check_id(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, in_memory.get()),
                         "cannot create the file in memory", name));
}

Handle open_file_image(std::span<const char> image, bool writable, const std::string& name) {
  silence_errors_on_this_thread();
  Handle access(check_id(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", name));
  use_memory(access, name);
  // HDF5 copies the image: the caller's buffer is not written.
  check(H5Pset_file_image(access.get(), const_cast<char*>(image.data()), image.size()), "H5Pset_file_image", name);
  const hid_t id = H5Fopen(name.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, access.get());
  if (id < 0) throw InputError(name + ": cannot open the file image (corrupt?)");
  return Handle(id);
}

std::vector<char> file_image(const Handle& file, const std::string& name) {
  check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "cannot flush", name);
  const ssize_t size = H5Fget_file_image(file.get(), nullptr, 0);
  if (size < 0) throw Error(name + ": cannot get the file image's size");
  std::vector<char> image(static_cast<std::size_t>(size));
  if (H5Fget_file_image(file.get(), image.data(), image.size()) != size)
    throw Error(name + ": cannot copy the file image");
  return image;
}

bool exists(const Handle& loc, const std::string& name) { return H5Lexists(loc.get(), name.c_str(), H5P_DEFAULT) > 0; }

std::vector<std::string> member_names(const Handle& group, const std::string& context) {
  H5G_info_t info{};
  check(H5Gget_info(group.get(), &info), "H5Gget_info", context);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t length = H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    check(static_cast<herr_t>(length < 0 ? -1 : 0), "H5Lget_name_by_idx", context);
    std::string name(static_cast<std::size_t>(length) + 1, '\0');
    H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(static_cast<std::size_t>(length));
    names.push_back(std::move(name));
  }
  return names;
}

Handle open_dataset(const Handle& loc, const std::string& name, const std::string& context) {
  if (!exists(loc, name)) throw InputError(context + ": dataset '" + name + "' is missing");
  return Handle(check_read_id(H5Dopen2(loc.get(), name.c_str(), H5P_DEFAULT), "cannot open dataset " + name, context));
}

std::vector<hsize_t> dataset_shape(const Handle& dataset, const std::string& context) {
  Handle space(check_read_id(H5Dget_space(dataset.get()), "cannot read a dataset's shape", context));
  int rank = H5Sget_simple_extent_ndims(space.get());
  check_read(rank, "cannot read a dataset's shape", context);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  check_read(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "cannot read a dataset's shape", context);
  return dims;
}

template <typename T>
void write_dataset(const Handle& loc, const std::string& name, std::span<const T> data,
                   const std::vector<hsize_t>& shape) {
  Handle space(
      check_id(H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr), "H5Screate_simple", name));
  Handle ds(check_id(
      H5Dcreate2(loc.get(), name.c_str(), native_type<T>(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      "cannot create dataset", name));
  if (!data.empty())
    check(H5Dwrite(ds.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), "cannot write dataset",
          name);
}

namespace {

// The number of values, checked against the file's size (ddl stores datasets uncompressed).
std::size_t element_count(const Handle& dataset, std::size_t value_bytes, const std::string& name,
                          const std::string& context) {
  hsize_t n = 1;
  for (auto d : dataset_shape(dataset, context))
    if (__builtin_mul_overflow(n, d, &n)) n = ~hsize_t{0};
  check_fits_in_file(dataset, n, value_bytes, "dataset '" + name + "'", context);
  return static_cast<std::size_t>(n);
}

template <typename T>
void read_whole(const Handle& dataset, std::span<T> out, const std::string& name, const std::string& context) {
  if (!out.empty())
    check_read(H5Dread(dataset.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()),
               "cannot read dataset " + name, context);
}

}  // namespace

template <typename T>
std::vector<T> read_dataset(const Handle& loc, const std::string& name, const std::string& context) {
  Handle ds = open_dataset(loc, name, context);
  std::vector<T> out(element_count(ds, sizeof(T), name, context));
  read_whole(ds, std::span<T>(out), name, context);
  return out;
}

template <typename T>
void read_dataset_into(const Handle& loc, const std::string& name, std::span<T> out, const std::string& context) {
  Handle ds = open_dataset(loc, name, context);
  const std::size_t n = element_count(ds, sizeof(T), name, context);
  if (n != out.size())
    throw InputError(context + ": dataset '" + name + "' has " + std::to_string(n) + " values, expected " +
                     std::to_string(out.size()));
  read_whole(ds, out, name, context);
}

template <typename T>
void create_vector(const Handle& loc, const std::string& name, std::size_t size) {
  Handle space = vector_space(size);
  Handle ds(check_id(
      H5Dcreate2(loc.get(), name.c_str(), native_type<T>(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      "cannot create dataset", name));
}

namespace {

// The file's selection [offset, offset + n) of a 1-D dataset, and a memory space of n values.
std::pair<Handle, Handle> slice_spaces(const Handle& ds, std::size_t offset, std::size_t n, const std::string& name,
                                       std::size_t blocks, std::size_t stride) {
  Handle file_space(check_id(H5Dget_space(ds.get()), "H5Dget_space", name));
  hsize_t size = 0;
  const std::size_t block = blocks > 0 ? n / blocks : 0;
  const std::size_t end = blocks > 1 ? offset + (blocks - 1) * stride + block : offset + n;
  if (blocks == 0 || block * blocks != n || (blocks > 1 && stride < block) ||
      H5Sget_simple_extent_ndims(file_space.get()) != 1 ||
      H5Sget_simple_extent_dims(file_space.get(), &size, nullptr) < 0 || end > size)
    throw InputError(name + ": no values [" + std::to_string(offset) + ", " + std::to_string(end) +
                     ") in a dataset of " + std::to_string(size));
  const hsize_t start = offset, step = blocks > 1 ? stride : 1, count = blocks, length = block;
  check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, &step, &count, &length), "H5Sselect_hyperslab",
        name);
  return {std::move(file_space), vector_space(n)};
}

}  // namespace

template <typename T>
void write_slice(const Handle& loc, const std::string& name, std::size_t offset, std::span<const T> data,
                 std::size_t blocks, std::size_t stride) {
  Handle ds = open_dataset(loc, name, name);
  if (data.empty()) return;
  auto [file_space, memory_space] = slice_spaces(ds, offset, data.size(), name, blocks, stride);
  check(H5Dwrite(ds.get(), native_type<T>(), memory_space.get(), file_space.get(), H5P_DEFAULT, data.data()),
        "cannot write dataset", name);
}

template <typename T>
void read_slice(const Handle& loc, const std::string& name, std::size_t offset, std::span<T> out,
                const std::string& context, std::size_t blocks, std::size_t stride) {
  Handle ds = open_dataset(loc, name, context);
  auto [file_space, memory_space] =
      slice_spaces(ds, offset, out.size(), context + ": dataset '" + name + "'", blocks, stride);
  if (out.empty()) return;
  check_read(H5Dread(ds.get(), native_type<T>(), memory_space.get(), file_space.get(), H5P_DEFAULT, out.data()),
             "cannot read dataset " + name, context);
}

#define DDL_H5_INSTANTIATE(T)                                                                                         \
  template void create_vector<T>(const Handle&, const std::string&, std::size_t);                                    \
  template void write_slice<T>(const Handle&, const std::string&, std::size_t, std::span<const T>, std::size_t,      \
                               std::size_t);                                                                         \
  template void read_slice<T>(const Handle&, const std::string&, std::size_t, std::span<T>, const std::string&,      \
                              std::size_t, std::size_t);                                                             \
  template void write_dataset<T>(const Handle&, const std::string&, std::span<const T>, const std::vector<hsize_t>&); \
  template std::vector<T> read_dataset<T>(const Handle&, const std::string&, const std::string&);                     \
  template void read_dataset_into<T>(const Handle&, const std::string&, std::span<T>, const std::string&);
DDL_H5_INSTANTIATE(float)
DDL_H5_INSTANTIATE(std::int32_t)
DDL_H5_INSTANTIATE(std::int64_t)
DDL_H5_INSTANTIATE(std::uint64_t)
DDL_H5_INSTANTIATE(std::uint8_t)
#undef DDL_H5_INSTANTIATE

void write_attribute(const Handle& loc, const std::string& name, std::int64_t value) {
  replace_attribute(loc, name);
  Handle space = scalar_space();
  Handle a(check_id(H5Acreate2(loc.get(), name.c_str(), H5T_NATIVE_INT64, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create attribute", name));
  check(H5Awrite(a.get(), H5T_NATIVE_INT64, &value), "cannot write attribute", name);
}

void write_attribute(const Handle& loc, const std::string& name, const std::string& value) {
  replace_attribute(loc, name);
  Handle type = variable_string_type();
  Handle space = scalar_space();
  Handle a(check_id(H5Acreate2(loc.get(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create attribute", name));
  const char* p = value.c_str();
  check(H5Awrite(a.get(), type.get(), &p), "cannot write attribute", name);
}

void write_attribute(const Handle& loc, const std::string& name, const std::vector<std::string>& values) {
  replace_attribute(loc, name);
  Handle type = variable_string_type();
  Handle space = vector_space(values.size());
  Handle a(check_id(H5Acreate2(loc.get(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create attribute", name));
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  check(H5Awrite(a.get(), type.get(), ptrs.data()), "cannot write attribute", name);
}

void write_attribute(const Handle& loc, const std::string& name, const std::vector<double>& values) {
  replace_attribute(loc, name);
  Handle space = vector_space(values.size());
  Handle a(check_id(H5Acreate2(loc.get(), name.c_str(), H5T_NATIVE_DOUBLE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create attribute", name));
  check(H5Awrite(a.get(), H5T_NATIVE_DOUBLE, values.data()), "cannot write attribute", name);
}

void write_fixed_strings_attribute(const Handle& loc, const std::string& name, const std::vector<std::string>& values) {
  replace_attribute(loc, name);
  std::size_t length = 1;  // HDF5 has no strings of length 0
  for (const auto& v : values) length = std::max(length, v.size());
  std::string packed(length * values.size(), '\0');
  for (std::size_t i = 0; i < values.size(); ++i) packed.replace(i * length, values[i].size(), values[i]);
  Handle type(check_id(H5Tcopy(H5T_C_S1), "H5Tcopy", name));
  check(H5Tset_size(type.get(), length), "H5Tset_size", name);
  check(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), "H5Tset_strpad", name);
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "H5Tset_cset", name);
  Handle space = vector_space(values.size());
  Handle a(check_id(H5Acreate2(loc.get(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    "cannot create attribute", name));
  check(H5Awrite(a.get(), type.get(), packed.data()), "cannot write attribute", name);
}

bool has_attribute(const Handle& loc, const std::string& name) { return H5Aexists(loc.get(), name.c_str()) > 0; }

std::int64_t read_int_attribute(const Handle& loc, const std::string& name, const std::string& context) {
  Handle a = open_attribute(loc, name, context);
  require_numeric(a, name, context);
  // H5Aread writes every value the attribute holds: more than one would overrun `v`.
  if (attribute_values(a, name, sizeof(std::int64_t), context) != 1)
    throw InputError(context + ": attribute '" + name + "' is not a single number");
  std::int64_t v = 0;
  check_read(H5Aread(a.get(), H5T_NATIVE_INT64, &v), "cannot read attribute " + name, context);
  return v;
}

std::string read_string_attribute(const Handle& loc, const std::string& name, const std::string& context) {
  auto v = read_strings_attribute(loc, name, context);
  if (v.size() != 1) throw InputError(context + ": attribute '" + name + "' is not a single string");
  return v[0];
}

std::vector<std::string> read_strings_attribute(const Handle& loc, const std::string& name,
                                                const std::string& context) {
  Handle a = open_attribute(loc, name, context);
  Handle space(check_read_id(H5Aget_space(a.get()), "cannot read attribute " + name, context));
  Handle file_type(check_read_id(H5Aget_type(a.get()), "cannot read attribute " + name, context));
  if (H5Tget_class(file_type.get()) != H5T_STRING) throw InputError(context + ": attribute '" + name + "' is not text");
  if (H5Tis_variable_str(file_type.get()) <= 0) {
    const std::size_t length = H5Tget_size(file_type.get());
    if (length == 0) throw InputError(context + ": attribute '" + name + "' has an impossible size");
    const hsize_t n = attribute_values(a, name, length, context);
    std::string packed(length * static_cast<std::size_t>(n), '\0');
    Handle type(check_read_id(H5Tcopy(file_type.get()), "cannot read attribute " + name, context));
    check_read(H5Aread(a.get(), type.get(), packed.data()), "cannot read attribute " + name, context);
    std::vector<std::string> out;
    for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
      std::string v = packed.substr(i * length, length);
      v.erase(std::find(v.begin(), v.end(), '\0'), v.end());
      out.push_back(std::move(v));
    }
    return out;
  }
  // A variable-length string takes at least 16 bytes in the file (length, heap address, index).
  const hsize_t n = attribute_values(a, name, 16, context);
  Handle type = variable_string_type();
  std::vector<char*> ptrs(static_cast<std::size_t>(n), nullptr);
  check_read(H5Aread(a.get(), type.get(), ptrs.data()), "cannot read attribute " + name, context);
  std::vector<std::string> out;
  for (char* p : ptrs) out.emplace_back(p ? p : "");
  H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, ptrs.data());
  return out;
}

std::vector<double> read_doubles_attribute(const Handle& loc, const std::string& name, const std::string& context) {
  Handle a = open_attribute(loc, name, context);
  require_numeric(a, name, context);
  std::vector<double> out(static_cast<std::size_t>(attribute_values(a, name, 1, context)));
  if (!out.empty())
    check_read(H5Aread(a.get(), H5T_NATIVE_DOUBLE, out.data()), "cannot read attribute " + name, context);
  return out;
}

}  // namespace ddl::h5
