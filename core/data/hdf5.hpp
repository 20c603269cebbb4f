// Thin RAII layer over the HDF5 C API: a move-only handle that closes whatever it holds, and helpers for
// the few kinds of datasets and attributes ddl stores. Every failing call throws with the file and object
// names; HDF5's own error printing is switched off so a bad file yields one line, not a stack dump.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ddl::h5 {

class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  Handle(Handle&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle();

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// HDF5 keeps its error-printing switch per thread: every thread that calls HDF5 turns it off first.
void silence_errors_on_this_thread();
// Called first thing in main: HDF5 must not tidy up at exit. A write that failed (a full disk) leaves its
// file open inside HDF5, and closing it again at exit crashes the library; the OS closes it instead.
void no_cleanup_at_exit();

Handle open_file(const std::string& path);    // read-only
Handle create_file(const std::string& path);  // truncates
Handle open_file_for_update(const std::string& path);
void flush(const Handle& file, const std::string& path);
// Files held in memory (HDF5's core driver, nothing written to disk), passed around as file images:
// `name` only names them in messages. An image opened for update keeps its changes in memory until
// file_image(). They use HDF5's default (1.6) format: HDF5 1.10.8 hands out the image of a 1.10-format file
// with a stale superblock checksum, which it then refuses to open.
Handle create_memory_file(const std::string& name);
Handle open_file_image(std::span<const char> image, bool writable, const std::string& name);
std::vector<char> file_image(const Handle& file, const std::string& name);
bool exists(const Handle& loc, const std::string& name);
// The names of a group's members, in name order.
std::vector<std::string> member_names(const Handle& group, const std::string& context);
// The size in bytes of the file that holds `loc` (a file, group, dataset or attribute).
hsize_t file_size(const Handle& loc, const std::string& context);
// The size of an open file as the file system has it now (context: its path). file_size() gives HDF5's
// view at open, which does not see the file cut short by someone else.
std::uintmax_t file_bytes_on_disk(const Handle& file, const std::string& context);
Handle open_dataset(const Handle& loc, const std::string& name, const std::string& context);

// Shape of a dataset.
std::vector<hsize_t> dataset_shape(const Handle& dataset, const std::string& context);

// Whole 1-D or N-D datasets of a native type (float, int32, int64, uint64, uint8).
template <typename T>
void write_dataset(const Handle& loc, const std::string& name, std::span<const T> data,
                   const std::vector<hsize_t>& shape);
template <typename T>
std::vector<T> read_dataset(const Handle& loc, const std::string& name, const std::string& context);
// Reads into a caller buffer whose size must equal the dataset's.
template <typename T>
void read_dataset_into(const Handle& loc, const std::string& name, std::span<T> out, const std::string& context);

// Slices of 1-D datasets: a dataset of `size` values made empty, then written or read piece by piece. A
// slice is one run of values from `offset`, or `blocks` equal runs `stride` values apart (a column block
// of a matrix), in one call.
template <typename T>
void create_vector(const Handle& loc, const std::string& name, std::size_t size);
template <typename T>
void write_slice(const Handle& loc, const std::string& name, std::size_t offset, std::span<const T> data,
                 std::size_t blocks = 1, std::size_t stride = 0);
template <typename T>
void read_slice(const Handle& loc, const std::string& name, std::size_t offset, std::span<T> out,
                const std::string& context, std::size_t blocks = 1, std::size_t stride = 0);

// Attributes.
void write_attribute(const Handle& loc, const std::string& name, std::int64_t value);
void write_attribute(const Handle& loc, const std::string& name, const std::string& value);
void write_attribute(const Handle& loc, const std::string& name, const std::vector<std::string>& values);
void write_attribute(const Handle& loc, const std::string& name, const std::vector<double>& values);
// Strings of one fixed length, stored in the object header, which the 1.8 file format checksums; the
// variable-length strings above live in the global heap, which has no checksum (and whose damage can
// send HDF5 1.10 into an endless loop). read_strings_attribute reads either kind.
void write_fixed_strings_attribute(const Handle& loc, const std::string& name, const std::vector<std::string>& values);
bool has_attribute(const Handle& loc, const std::string& name);
std::int64_t read_int_attribute(const Handle& loc, const std::string& name, const std::string& context);
std::string read_string_attribute(const Handle& loc, const std::string& name, const std::string& context);
std::vector<std::string> read_strings_attribute(const Handle& loc, const std::string& name, const std::string& context);
std::vector<double> read_doubles_attribute(const Handle& loc, const std::string& name, const std::string& context);

template <typename T>
hid_t native_type();

// Throws ddl::Error("<what>: <context>") when status < 0.
void check(herr_t status, const std::string& what, const std::string& context);
hid_t check_id(hid_t id, const std::string& what, const std::string& context);

}  // namespace ddl::h5
