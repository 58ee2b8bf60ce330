// A thin RAII layer over the HDF5 C API, in the spirit of HighFive: files, groups, datasets and
// attributes as objects that close themselves; HDF5's own error printing silenced; every failure
// turned into an exception that names the file and object. Arrays are C order (row-major) as in
// HDF5; callers convert from Eigen's column-major storage deliberately (see RowMajorMatrix).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <type_traits>
#include <string>
#include <vector>

#include "kernel/support/types.hpp"

namespace rcsim::h5 {

// Owns one hid_t and closes it with the matching H5*close.
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept;
  ~Handle();
  hid_t id() const { return id_; }
  // Close now and return the closer's status (the destructor's close is unchecked: failure path).
  herr_t close();

 private:
  hid_t id_ = -1;
  herr_t (*closer_)(hid_t) = nullptr;
};

// A dense array read from a file: its shape and its values in C order.
// (The kernel's NdArray: Extent is hsize_t.)
static_assert(std::is_same_v<Extent, hsize_t>, "rcsim::Extent must be HDF5's hsize_t");
using Array = NdArray;

// While at least one QuietErrors exists in the process, HDF5's automatic error printing is off
// (rcsim reports failures by its exceptions, with the innermost HDF5 message); when the last one
// ends, the handler the caller had (h5py's, a host program's) is restored. Every Object holds one,
// so printing is off exactly while rcsim has something of HDF5 open.
class QuietErrors {
 public:
  QuietErrors();
  QuietErrors(const QuietErrors&) : QuietErrors() {}
  QuietErrors& operator=(const QuietErrors&) { return *this; }
  ~QuietErrors();
};

// Anything that carries attributes: file (root group), group or dataset.
class Object : private QuietErrors {
 public:
  hid_t id() const { return handle_.id(); }
  const std::string& path() const { return path_; }

  void set_attr(const std::string& name, const std::string& value) const;  // variable-length UTF-8
  void set_attr(const std::string& name, const char* value) const { set_attr(name, std::string(value)); }
  void set_attr(const std::string& name, double value) const;
  void set_attr(const std::string& name, std::int64_t value) const;
  void set_attr(const std::string& name, int value) const { set_attr(name, static_cast<std::int64_t>(value)); }
  void set_attr(const std::string& name, const std::vector<std::int64_t>& values) const;

  bool has_attr(const std::string& name) const;
  std::string attr_string(const std::string& name) const;
  std::int64_t attr_int(const std::string& name) const;
  double attr_double(const std::string& name) const;

 protected:
  Object(Handle h, std::string path) : handle_(std::move(h)), path_(std::move(path)) {}
  Handle handle_;
  std::string path_;  // "file.h5:/group/dataset", for messages
};

class Dataset : public Object {
 public:
  // Turn this dataset into a dimension scale called `name` (HDF5 HL, for xarray and h5dump).
  void make_scale(const std::string& name) const;
  // Attach `scale` to dimension `dim` of this dataset.
  void attach_scale(const Dataset& scale, unsigned dim) const;
  // The extent of each axis.
  std::vector<hsize_t> shape() const;
  // Write `count` consecutive entries of axis 0 from `first` on (a hyperslab: the full extent of
  // the other axes, `data` in C order), so that a large dataset is written piece by piece
  // without its whole copy in memory (made by Group::create, float64).
  void write_rows(hsize_t first, hsize_t count, const double* data) const;
  void write_rows(hsize_t first, hsize_t count, const std::uint8_t* data) const;  // made by Group::create_bytes
  // Write the dataset's cached chunks to the file now, checked (the close of a dataset is not).
  void flush() const;

 private:
  friend class Group;
  using Object::Object;
  void write_rows_of(hsize_t first, hsize_t count, hid_t memory_type, const void* data) const;
};

class Group : public Object {
 public:
  Group create_group(const std::string& name) const;
  Group open_group(const std::string& name) const;
  bool exists(const std::string& name) const;
  // The names of this group's direct members (links), in name order.
  std::vector<std::string> members() const;
  Dataset open_dataset(const std::string& name) const;
  // Unlink an object (group or dataset) from this group.
  void remove(const std::string& name) const;

  Dataset write(const std::string& name, const std::vector<hsize_t>& shape, const double* data) const;
  Dataset write(const std::string& name, const std::vector<hsize_t>& shape, const std::uint8_t* data) const;
  Dataset write(const std::string& name, const std::vector<hsize_t>& shape, const std::int64_t* data) const;
  Dataset write(const std::string& name, const std::vector<double>& values) const {
    return write(name, {values.size()}, values.data());
  }
  // A float64 dataset of this shape, chunked and compressed as write() would, to be filled with
  // Dataset::write_rows (then Dataset::flush). Its values equal those write() would store.
  Dataset create(const std::string& name, const std::vector<hsize_t>& shape) const;
  // The same for a uint8 dataset (the values write() of std::uint8_t would store).
  Dataset create_bytes(const std::string& name, const std::vector<hsize_t>& shape) const;
  Dataset write_string(const std::string& name, const std::string& text) const;
  // A 1-D dataset of variable-length UTF-8 strings.
  Dataset write_strings(const std::string& name, const std::vector<std::string>& texts) const;

  // A coordinate: a 1-D dataset that is a dimension scale of its own name (xarray, h5dump).
  Dataset write_coordinate(const std::string& name, const std::vector<std::int64_t>& values,
                           const std::string& long_name) const;
  Dataset write_coordinate(const std::string& name, const std::vector<double>& values,
                           const std::string& long_name) const;
  // Label every axis of `ds` (a dataset of this group) with the coordinate of that name in this
  // group, so that `xarray.open_dataset(file, group=...)` labels the array: each group carries its
  // own coordinates. A name without a coordinate yet gets an index coordinate 0, 1, ..., n-1.
  // Throws if a coordinate's length differs from the axis.
  void label_axes(const Dataset& ds, const std::vector<std::string>& dims) const;

  // Give every axis of the datasets in and below this group that still has no dimension scale an
  // index coordinate named "<dataset>_dim<k>" in the dataset's group, so that every axis is
  // labelled (xarray refuses a variable with labelled and unlabelled axes). Writers call it on
  // the file, or on the one group they add to an existing file (never on what they did not write:
  // HDF5's dimension-scale functions crash on hostile DIMENSION_LIST or CLASS attributes), before
  // their final flush; meaningful names are given by label_axes before that.
  void label_unlabelled_axes() const;

  // Read a numeric dataset as float64 (HDF5 converts integer and float types).
  Array read(const std::string& name) const;
  std::string read_string(const std::string& name) const;
  std::vector<std::string> read_strings(const std::string& name) const;
  // Read a 2-D dataset and check its shape; `expected` entries < 0 accept any extent.
  RowMajorMatrix read_matrix(const std::string& name, const std::vector<long long>& expected) const;

 protected:
  using Object::Object;
};

// Two ways to write. create() and open_readwrite() build the file in memory (HDF5's core driver,
// no backing store) and close() puts it on disk in one checked write of the whole image: HDF5
// itself never meets a full disk, a failed write is one clear error, and the bytes go through a
// descriptor that never follows a symlink. Run files and checkpoints, whose size must not be held
// in memory, use create_on_disk() and open_copy_on_disk() instead (below).
class File : public Group {
 public:
  // A new, empty file in memory; close() writes it to `filename` (normally an exclusive
  // temporary, see io/output_file.hpp).
  static File create(const std::string& filename);
  // Open for reading. `key` names the configuration key that gave the file, for messages.
  static File open_read(const std::string& filename, const std::string& key = "");
  // Read `source` into memory for modification; close() writes the modified file to `dest`
  // (a temporary: `source` itself is never edited in place).
  static File open_readwrite(const std::string& source, const std::string& dest);
  // The same two on disk, for files whose size must not be held in memory (run files and
  // checkpoints: docs/dev/memory.md): HDF5 writes `filename` (an exclusive temporary this
  // process created) itself, every dataset is flushed when written (checked), and close()
  // checks the final flush. A failed write (full disk, file-size limit) is a RuntimeError naming
  // the OS error; the process must have called no_close_at_exit() (HDF5 would otherwise crash
  // at exit trying again to close the file it could not write).
  static File create_on_disk(const std::string& filename);
  // Copy `source` to `dest` (checked) and open `dest` for modification on disk.
  static File open_copy_on_disk(const std::string& source, const std::string& dest);
  File(File&&) noexcept = default;
  File& operator=(File&&) = delete;
  // A file written in memory that was not closed is written by the destructor, unless the scope
  // is left by an exception (then nothing is written); errors there are ignored: code that keeps
  // the file calls close().
  ~File();
  void flush() const;
  // Write the whole file to its destination and close it; throws RuntimeError with the OS error
  // ("No space left on device", "File too large") naming the file. Every group, dataset and
  // attribute of the file must be closed already (std::logic_error otherwise).
  void close();
  // Close a file made by create() and return its bytes (an HDF5 file image, as close() would
  // write them) instead of writing them anywhere: for results that stay in memory (the Python
  // bindings, docs/user/python.md). h5py opens the image from an io.BytesIO.
  std::vector<char> close_to_image();
  const std::string& filename() const { return filename_; }

 private:
  File(Handle h, std::string filename, bool in_memory);
  std::vector<char> take_image();  // flush, copy the image and close (in memory only)
  std::string filename_;
  bool in_memory_ = false;
  int exceptions_ = 0;  // std::uncaught_exceptions() when made
};

// Tell HDF5 not to close its open files at process exit (H5dont_atexit; before any other HDF5
// call). A file on disk whose close failed (full disk) stays half-open in HDF5, and its
// exit-time close would crash the process after rcsim reported the error (rcsim's main()).
void no_close_at_exit();

// True if `path` is an HDF5 file whose root has filetype = `filetype` and complete = 1.
bool is_complete(const std::string& path, const std::string& filetype);

// Before writing `path` (given by configuration key `key`): refuse (UsageError naming the
// file) what rcsim must not replace: anything that is not a regular file, always; a regular file
// that is not a complete rcsim file of `filetype`, unless `force`.
void check_replaceable(const std::string& path, const std::string& key, const std::string& filetype, bool force);

// Format a shape as "[a, b, c]".
std::string shape_string(const std::vector<hsize_t>& shape);

// The chunk shape of a compressed dataset of this shape: at most `target` values (and at least
// one slice of the last axis), whatever the depth: a dataset of 10^6 layers is cut into chunks of
// `target` values (the old rule stored one value per chunk beyond 65536 layers).
std::vector<hsize_t> chunk_shape(const std::vector<hsize_t>& shape, hsize_t target = 65536);

}  // namespace rcsim::h5
