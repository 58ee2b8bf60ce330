// The HDF5 layer's files (io/hdf5_file.hpp: File, is_complete, check_replaceable): created,
// opened, flushed, closed and taken as images, every call checked.
#include <hdf5.h>

#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "io/hdf5_errors.hpp"
#include "io/hdf5_file.hpp"
#include "io/safe_file.hpp"
#include "kernel/support/errors.hpp"
#include "kernel/support/printable.hpp"

namespace rcsim::h5 {

namespace {

// File access without HDF5's own file locks (flock on the whole file, exclusive for RDWR): rcsim
// reads a file whole and writes only new files (through its temporaries and its own output
// locks), so a reader such as h5py holding the file open must not make rcsim fail (issue 22).
Handle unlocked_access() {
  Handle fapl(check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"), H5Pclose);
#if H5_VERSION_GE(1, 10, 7)
  check(H5Pset_file_locking(fapl.id(), false, true), "", "H5Pset_file_locking");
#endif
  return fapl;
}

Handle memory_access() {
  Handle fapl = unlocked_access();
  check(H5Pset_fapl_core(fapl.id(), 1 << 20, 0), "", "H5Pset_fapl_core");  // no backing store
  return fapl;
}

}  // namespace

File::File(Handle h, std::string filename, bool in_memory)
    : Group(std::move(h), filename + ":/"), filename_(std::move(filename)), in_memory_(in_memory),
      exceptions_(std::uncaught_exceptions()) {}

File::~File() {
  if (in_memory_ && id() >= 0 && std::uncaught_exceptions() == exceptions_) {
    try {
      close();
    } catch (...) {
    }
  }
}

File File::create(const std::string& filename) {
  const ::rcsim::h5::QuietErrors quiet;
  const Handle fapl = memory_access();
  const hid_t id = H5Fcreate(filename.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id());
  if (id < 0) fail("cannot create the HDF5 file '" + filename + "' in memory");
  return File(Handle(id, H5Fclose), filename, true);
}

File File::open_read(const std::string& filename, const std::string& key) {
  const ::rcsim::h5::QuietErrors quiet;
  const std::string who = (key.empty() ? "file '" : key + " '") + printable(filename) + "'";
  std::error_code ec;
  const auto st = std::filesystem::status(filename, ec);
  if (!std::filesystem::exists(st)) throw UsageError(who + ": no such file");
  if (std::filesystem::is_directory(st)) throw UsageError(who + " is a directory, expected an HDF5 file");
  if (!std::filesystem::is_regular_file(st)) throw UsageError(who + " is not a regular file, expected an HDF5 file");
  const htri_t is_hdf5 = H5Fis_hdf5(filename.c_str());
  hdf5_message();
  if (is_hdf5 < 0) throw UsageError(who + ": cannot read it (permission denied, or not a readable HDF5 file)");
  if (is_hdf5 == 0) throw UsageError(who + " is not an HDF5 file (no HDF5 signature)");
  const Handle fapl = unlocked_access();
  const hid_t id = H5Fopen(filename.c_str(), H5F_ACC_RDONLY, fapl.id());
  if (id < 0) {
    hdf5_message();
    throw UsageError(who + " is not a readable HDF5 file (truncated or corrupted)");
  }
  return File(Handle(id, H5Fclose), filename, false);
}

File File::open_readwrite(const std::string& source, const std::string& dest) {
  const ::rcsim::h5::QuietErrors quiet;
  const Handle fapl = memory_access();
  const hid_t id = H5Fopen(source.c_str(), H5F_ACC_RDWR, fapl.id());
  if (id < 0) fail("cannot open '" + source + "' for modification");
  return File(Handle(id, H5Fclose), dest, true);
}

File File::create_on_disk(const std::string& filename) {
  const ::rcsim::h5::QuietErrors quiet;
  const Handle fapl = unlocked_access();
  const hid_t id = H5Fcreate(filename.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id());
  if (id < 0) fail("cannot create the HDF5 file '" + filename + "'");
  return File(Handle(id, H5Fclose), filename, false);
}

File File::open_copy_on_disk(const std::string& source, const std::string& dest) {
  const ::rcsim::h5::QuietErrors quiet;
  copy_whole_file(source, dest);
  const Handle fapl = unlocked_access();
  const hid_t id = H5Fopen(dest.c_str(), H5F_ACC_RDWR, fapl.id());
  if (id < 0) fail("cannot open '" + dest + "' (a copy of '" + source + "') for modification");
  return File(Handle(id, H5Fclose), dest, false);
}

void no_close_at_exit() { H5dont_atexit(); }

void File::flush() const {
  if (H5Fflush(id(), H5F_SCOPE_GLOBAL) < 0) fail("cannot flush '" + filename_ + "'");
}

std::vector<char> File::take_image() {
  const ssize_t open_objects =
      H5Fget_obj_count(id(), H5F_OBJ_DATASET | H5F_OBJ_GROUP | H5F_OBJ_DATATYPE | H5F_OBJ_ATTR | H5F_OBJ_LOCAL);
  if (open_objects > 0)
    throw std::logic_error("h5::File::close: " + std::to_string(open_objects) + " objects of '" + filename_ +
                           "' still open");
  std::vector<char> image;
  std::string error;
  if (H5Fflush(id(), H5F_SCOPE_GLOBAL) < 0) {
    error = "cannot flush '" + filename_ + "' in memory";
  } else {
    const ssize_t size = H5Fget_file_image(id(), nullptr, 0);
    if (size < 0) {
      error = "cannot get the image of '" + filename_ + "'";
    } else {
      image.resize(static_cast<std::size_t>(size));
      if (H5Fget_file_image(id(), image.data(), image.size()) != size) error = "cannot get the image of '" + filename_ + "'";
    }
  }
  if (!error.empty()) fail(error);  // the handle closes itself (in memory: no disk involved)
  if (handle_.close() < 0) fail("cannot close '" + filename_ + "' in memory");
  return image;
}

void File::close() {
  if (id() < 0) return;
  if (!in_memory_) {
    const ssize_t open_objects =
        H5Fget_obj_count(id(), H5F_OBJ_DATASET | H5F_OBJ_GROUP | H5F_OBJ_DATATYPE | H5F_OBJ_ATTR | H5F_OBJ_LOCAL);
    if (open_objects > 0)
      throw std::logic_error("h5::File::close: " + std::to_string(open_objects) + " objects of '" + filename_ +
                             "' still open");
    if (handle_.close() < 0) fail("cannot close '" + filename_ + "'");
    return;
  }
  const std::vector<char> image = take_image();
  write_whole_file(filename_, image.data(), image.size());
}

std::vector<char> File::close_to_image() {
  if (id() < 0 || !in_memory_) throw std::logic_error("h5::File::close_to_image: '" + filename_ + "' is not an open file in memory");
  return take_image();
}

namespace {
// Empty if `path` is an HDF5 file whose root has filetype = `filetype` and complete = 1;
// otherwise why not, for the refusal (every attribute read checked: an array, a string where a
// number belongs, ... is a reason, never a crash).
std::string incomplete_reason(const std::string& path, const std::string& filetype) {
  const ::rcsim::h5::QuietErrors quiet;
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    hdf5_message();
    return "not an HDF5 file";
  }
  try {
    const File f = File::open_read(path);
    if (!f.has_attr("filetype")) return "no attribute 'filetype'";
    const std::string type = f.attr_string("filetype");
    if (type != filetype) return "filetype '" + printable(type) + "'";
    if (!f.has_attr("complete")) return "no attribute 'complete'";
    if (f.attr_int("complete") != 1) return "attribute 'complete' != 1";
    return "";
  } catch (const std::exception& e) {
    return printable(e.what(), 2 * kEchoLimit);
  }
}
}  // namespace

bool is_complete(const std::string& path, const std::string& filetype) {
  return incomplete_reason(path, filetype).empty();
}

void check_replaceable(const std::string& path, const std::string& key, const std::string& filetype, bool force) {
  require_regular_or_absent(path, key);
  if (force || !path_exists(path)) return;
  const std::string reason = incomplete_reason(path, filetype);
  if (reason.empty()) return;
  throw UsageError((key.empty() ? std::string() : "key '" + key + "': ") + "'" + printable(path) +
                   "' exists and is not a complete " + filetype + " file (" + reason +
                   "); refusing to overwrite it (remove it, choose another name, or rerun with --force)");
}

}  // namespace rcsim::h5
