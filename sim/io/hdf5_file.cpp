#include "io/hdf5_file.hpp"
#include "io/checked_read.hpp"
#include "io/hdf5_errors.hpp"

#include <hdf5_hl.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <mutex>
#include <stdexcept>

#include "kernel/support/errors.hpp"
#include "kernel/support/memory.hpp"
#include "kernel/support/printable.hpp"
#include "kernel/model/weights.hpp"
#include "io/safe_file.hpp"

namespace rcsim::h5 {

// The innermost message of the current HDF5 error stack, for our exceptions; the OS error
// instead when a write of a file on disk failed (HDF5's sec2 driver: "... error message = 'File
// too large', ..."), so that a full disk is named as such.
std::string hdf5_message() {
  std::pair<std::string, std::string> msg;  // first message, OS error
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* err, void* data) -> herr_t {
        auto* out = static_cast<std::pair<std::string, std::string>*>(data);
        if (!err->desc) return 0;
        const std::string desc = err->desc;
        if (out->first.empty()) out->first = desc;
        const std::string key = "error message = '";
        if (const auto at = desc.find(key); at != std::string::npos && out->second.empty()) {
          const auto end = desc.find('\'', at + key.size());
          if (end != std::string::npos) out->second = desc.substr(at + key.size(), end - at - key.size());
        }
        return 0;
      },
      &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg.second.empty() ? msg.first : msg.second;
}

[[noreturn]] void fail(const std::string& what) {
  const std::string detail = hdf5_message();
  throw RuntimeError(what + (detail.empty() ? "" : " (HDF5: " + detail + ")"));
}

hid_t check(hid_t id, const std::string& what) {
  if (id < 0) fail(what);
  return id;
}

void check(herr_t status, const char*, const std::string& what) {
  if (status < 0) fail(what);
}

Handle make_space(const std::vector<hsize_t>& shape) {
  if (shape.empty()) return Handle(check(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose);
  return Handle(check(H5Screate_simple(static_cast<int>(shape.size()), shape.data(), nullptr), "H5Screate_simple"),
                H5Sclose);
}

Handle utf8_string_type() {
  Handle t(check(H5Tcopy(H5T_C_S1), "H5Tcopy"), H5Tclose);
  H5Tset_size(t.id(), H5T_VARIABLE);
  H5Tset_cset(t.id(), H5T_CSET_UTF8);
  return t;
}

namespace {

// QuietErrors' state: how many exist, and the handler to restore when the last one ends.
std::mutex quiet_mutex;
int quiet_depth = 0;
H5E_auto2_t saved_handler = nullptr;
void* saved_data = nullptr;

// Refuse a dataset whose bytes do not live inside its file: external raw storage
// (H5Pset_external: the values are read from other files named in the dataset, e.g. /etc/shadow)
// or a virtual layout (a view of datasets in other files). rcsim reads only self-contained files.
// A dataset too large for this machine's memory (a hostile or corrupted shape) is refused
// before allocating, naming the dataset and its size.
void require_allocatable(double bytes, const std::string& what) {
  require_memory(bytes, "reading " + what, "is the file corrupted or not meant for rcsim?");
}

void require_self_contained(hid_t dataset, const std::string& path) {
  Handle dcpl(H5Dget_create_plist(dataset), H5Pclose);
  if (dcpl.id() < 0) fail("cannot read the storage properties of " + path);
  const int external = H5Pget_external_count(dcpl.id());
  if (external < 0) fail("cannot read the storage properties of " + path);
  if (external > 0) {
    char name[256] = {0};
    off_t offset = 0;
    hsize_t size = 0;
    H5Pget_external(dcpl.id(), 0, sizeof name - 1, name, &offset, &size);
    throw UsageError(path + ": the dataset's values are stored outside the file (external storage in '" +
                     printable(name) + "'); rcsim reads only datasets stored inside their file");
  }
  if (H5Pget_layout(dcpl.id()) == H5D_VIRTUAL)
    throw UsageError(path + ": the dataset is virtual (a view of datasets in other files); rcsim reads only "
                     "datasets stored inside their file");
}

}  // namespace

QuietErrors::QuietErrors() {
  const std::lock_guard<std::mutex> lock(quiet_mutex);
  if (quiet_depth++ == 0) {
    H5Eget_auto2(H5E_DEFAULT, &saved_handler, &saved_data);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
}

QuietErrors::~QuietErrors() {
  const std::lock_guard<std::mutex> lock(quiet_mutex);
  if (--quiet_depth == 0) H5Eset_auto2(H5E_DEFAULT, saved_handler, saved_data);
}

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = o.id_;
    closer_ = o.closer_;
    o.id_ = -1;
  }
  return *this;
}

herr_t Handle::close() {
  herr_t status = 0;
  if (id_ >= 0 && closer_) status = closer_(id_);
  id_ = -1;
  return status;
}

Handle::~Handle() {
  if (id_ >= 0 && closer_) closer_(id_);
}

std::string shape_string(const std::vector<hsize_t>& shape) { return rcsim::shape_string(shape); }

// ---- dimension scales ----

void Dataset::make_scale(const std::string& name) const {
  check(H5DSset_scale(id(), name.c_str()), "", "cannot make " + path_ + " a dimension scale");
}

void Dataset::attach_scale(const Dataset& scale, unsigned dim) const {
  check(H5DSattach_scale(id(), scale.id(), dim), "", "cannot attach scale to " + path_);
}

std::vector<hsize_t> Dataset::shape() const {
  Handle space(check(H5Dget_space(id()), "cannot read the shape of " + path_), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.id());
  if (rank < 0) throw RuntimeError("cannot read the shape of " + path_);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr);
  return dims;
}

// ---- groups and datasets ----

Dataset Group::write_coordinate(const std::string& name, const std::vector<std::int64_t>& values,
                                const std::string& long_name) const {
  Dataset ds = write(name, {values.size()}, values.data());
  ds.make_scale(name);
  ds.set_attr("long_name", long_name);
  return ds;
}

Dataset Group::write_coordinate(const std::string& name, const std::vector<double>& values,
                                const std::string& long_name) const {
  Dataset ds = write(name, values);
  ds.make_scale(name);
  ds.set_attr("long_name", long_name);
  return ds;
}

void Group::label_axes(const Dataset& ds, const std::vector<std::string>& dims) const {
  const std::vector<hsize_t> shape = ds.shape();
  if (shape.size() != dims.size())
    throw RuntimeError(ds.path() + ": " + std::to_string(shape.size()) + " axes but " + std::to_string(dims.size()) +
                  " dimension names");
  for (std::size_t k = 0; k < dims.size(); ++k) {
    if (!exists(dims[k])) {
      std::vector<std::int64_t> index(static_cast<std::size_t>(shape[k]));
      for (std::size_t i = 0; i < index.size(); ++i) index[i] = static_cast<std::int64_t>(i);
      write_coordinate(dims[k], index, "index along the axis '" + dims[k] + "'");
    }
    const Dataset scale = open_dataset(dims[k]);
    if (scale.shape() != std::vector<hsize_t>{shape[k]})
      throw RuntimeError(ds.path() + ": axis " + std::to_string(k) + " has " + std::to_string(shape[k]) +
                    " entries but the coordinate '" + dims[k] + "' has " + shape_string(scale.shape()));
    ds.attach_scale(scale, static_cast<unsigned>(k));
  }
}

Group Group::create_group(const std::string& name) const {
  Handle g(check(H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                 "cannot create group '" + name + "' in " + path_),
           H5Gclose);
  return Group(std::move(g), path_ + name + "/");
}

Group Group::open_group(const std::string& name) const {
  if (name != "/" && !exists(name)) throw UsageError(path_ + ": group '/" + printable(name) + "' is missing");
  Handle g(check(H5Gopen2(id(), name.c_str(), H5P_DEFAULT), "'/" + printable(name) + "' in " + path_ + " is not a readable group"),
           H5Gclose);
  return Group(std::move(g), path_ + name + "/");
}

Dataset Group::open_dataset(const std::string& name) const {
  if (!exists(name)) throw UsageError(path_ + ": dataset '/" + printable(name) + "' is missing");
  {
    Handle obj(H5Oopen(id(), name.c_str(), H5P_DEFAULT), H5Oclose);
    if (obj.id() < 0) fail(path_ + ": cannot open '/" + printable(name) + "' (corrupted file?)");
    const H5I_type_t type = H5Iget_type(obj.id());
    if (type == H5I_GROUP) throw UsageError(path_ + printable(name) + " is a group, expected a dataset");
    if (type != H5I_DATASET) throw UsageError(path_ + printable(name) + " is not a dataset");
  }
  Handle d(check(H5Dopen2(id(), name.c_str(), H5P_DEFAULT), "cannot open dataset '" + printable(name) + "' in " + path_),
           H5Dclose);
  require_self_contained(d.id(), path_ + name);
  return Dataset(std::move(d), path_ + name);
}

void Group::remove(const std::string& name) const {
  check(H5Ldelete(id(), name.c_str(), H5P_DEFAULT), "", "cannot remove '" + name + "' from " + path_);
}

bool Group::exists(const std::string& name) const {
  // Check each component so that a missing intermediate group is not an error.
  std::string partial;
  std::size_t start = 0;
  while (start <= name.size()) {
    const auto slash = name.find('/', start);
    partial = name.substr(0, slash);
    if (!partial.empty()) {
      const htri_t found = H5Lexists(id(), partial.c_str(), H5P_DEFAULT);
      if (found < 0) fail(path_ + ": cannot look up '/" + printable(partial) + "' (not a readable HDF5 file: corrupted?)");
      if (found == 0) return false;
      if (slash != std::string::npos) {  // an intermediate component must be a group
        Handle obj(H5Oopen(id(), partial.c_str(), H5P_DEFAULT), H5Oclose);
        if (obj.id() < 0) fail(path_ + ": cannot open '/" + printable(partial) + "' (not a readable HDF5 file: corrupted?)");
        if (H5Iget_type(obj.id()) != H5I_GROUP) return false;
      }
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return true;
}

std::vector<hsize_t> chunk_shape(const std::vector<hsize_t>& shape, hsize_t target) {
  // From the first axis on: as many slices of the axes after it as fit in `target` values (at
  // least one, at most the axis), so that a long last axis (deep runs: one value per layer) is
  // cut into chunks of about `target` values, not one value each.
  std::vector<hsize_t> chunk(shape.size(), 1);
  hsize_t after = 1;
  for (hsize_t s : shape) after *= std::max<hsize_t>(s, 1);
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const hsize_t axis = std::max<hsize_t>(shape[i], 1);
    after /= axis;  // values in one slice of the axes after i
    chunk[i] = after > target ? 1 : std::min(axis, std::max<hsize_t>(1, target / after));
  }
  return chunk;
}

namespace {
Handle create_dataset(hid_t loc, const std::string& path, const std::string& name, hid_t type,
                      const std::vector<hsize_t>& shape) {
  Handle space = make_space(shape);
  Handle plist(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  // Chunk and compress larger arrays (gzip level 4 with shuffle): spectra and tokens shrink a lot.
  hsize_t count = 1;
  for (hsize_t s : shape) count *= s;
  if (!shape.empty() && count >= 4096) {
    H5Pset_chunk(plist.id(), static_cast<int>(shape.size()), chunk_shape(shape).data());
    H5Pset_shuffle(plist.id());
    H5Pset_deflate(plist.id(), 4);
  }
  return Handle(check(H5Dcreate2(loc, name.c_str(), type, space.id(), H5P_DEFAULT, plist.id(), H5P_DEFAULT),
                      "cannot create dataset '" + name + "' in " + path),
                H5Dclose);
}
}  // namespace

#define RCSIM_H5_WRITE(CTYPE, FILETYPE, MEMTYPE)                                                        \
  Dataset Group::write(const std::string& name, const std::vector<hsize_t>& shape, const CTYPE* data) \
      const {                                                                                          \
    Handle d = create_dataset(id(), path_, name, FILETYPE, shape);                                     \
    check(H5Dwrite(d.id(), MEMTYPE, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "",                         \
          "cannot write dataset '" + name + "' in " + path_);                                          \
    /* cached chunks written now, checked: the dataset's close is not (files on disk) */              \
    check(H5Dflush(d.id()), "", "cannot write dataset '" + name + "' in " + path_);                   \
    return Dataset(std::move(d), path_ + name);                                                        \
  }
RCSIM_H5_WRITE(double, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE)
RCSIM_H5_WRITE(std::uint8_t, H5T_STD_U8LE, H5T_NATIVE_UINT8)
RCSIM_H5_WRITE(std::int64_t, H5T_STD_I64LE, H5T_NATIVE_INT64)
#undef RCSIM_H5_WRITE

Dataset Group::create(const std::string& name, const std::vector<hsize_t>& shape) const {
  Handle d = create_dataset(id(), path_, name, H5T_IEEE_F64LE, shape);
  return Dataset(std::move(d), path_ + name);
}

Dataset Group::create_bytes(const std::string& name, const std::vector<hsize_t>& shape) const {
  Handle d = create_dataset(id(), path_, name, H5T_STD_U8LE, shape);
  return Dataset(std::move(d), path_ + name);
}

void Dataset::write_rows(hsize_t first, hsize_t count, const double* data) const {
  write_rows_of(first, count, H5T_NATIVE_DOUBLE, data);
}
void Dataset::write_rows(hsize_t first, hsize_t count, const std::uint8_t* data) const {
  write_rows_of(first, count, H5T_NATIVE_UINT8, data);
}

void Dataset::write_rows_of(hsize_t first, hsize_t count, hid_t memory_type, const void* data) const {
  if (count == 0) return;
  Handle space(check(H5Dget_space(id()), "cannot read the shape of " + path_), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.id());
  if (rank < 1) throw std::logic_error("Dataset::write_rows: " + path_ + " has no axis 0");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank)), start(dims.size(), 0);
  H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr);
  if (first + count > dims[0]) throw std::logic_error("Dataset::write_rows: rows beyond the extent of " + path_);
  start[0] = first;
  dims[0] = count;
  check(H5Sselect_hyperslab(space.id(), H5S_SELECT_SET, start.data(), nullptr, dims.data(), nullptr), "",
        "cannot select rows of " + path_);
  const Handle memory = make_space(dims);
  check(H5Dwrite(id(), memory_type, memory.id(), space.id(), H5P_DEFAULT, data), "", "cannot write " + path_);
}

void Dataset::flush() const { check(H5Dflush(id()), "", "cannot write " + path_); }

Dataset Group::write_string(const std::string& name, const std::string& text) const {
  Handle t = utf8_string_type();
  Handle space = make_space({});
  Handle d(check(H5Dcreate2(id(), name.c_str(), t.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                 "cannot create dataset '" + name + "' in " + path_),
           H5Dclose);
  const char* p = text.c_str();
  check(H5Dwrite(d.id(), t.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p), "", "cannot write dataset '" + name + "'");
  return Dataset(std::move(d), path_ + name);
}

Dataset Group::write_strings(const std::string& name, const std::vector<std::string>& texts) const {
  Handle t = utf8_string_type();
  Handle space = make_space({texts.size()});
  Handle d(check(H5Dcreate2(id(), name.c_str(), t.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                 "cannot create dataset '" + name + "' in " + path_),
           H5Dclose);
  std::vector<const char*> p;
  for (const auto& s : texts) p.push_back(s.c_str());
  if (!p.empty())
    check(H5Dwrite(d.id(), t.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data()), "", "cannot write dataset '" + name + "'");
  return Dataset(std::move(d), path_ + name);
}

std::vector<std::string> Group::read_strings(const std::string& name) const {
  const Dataset ds = open_dataset(name);
  const hid_t d = ds.id();
  require_dataset_kind(d, path_ + name, Expect::string, false);
  Handle space(H5Dget_space(d), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.id());
  if (n < 0) fail("cannot read the shape of " + path_ + name);
  require_allocatable(static_cast<double>(n) * sizeof(char*), path_ + name);
  std::vector<char*> p(static_cast<std::size_t>(std::max<hssize_t>(n, 0)), nullptr);
  Handle t = utf8_string_type();
  if (!p.empty())
    check(H5Dread(d, t.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data()), "", "cannot read dataset " + path_ + name);
  std::vector<std::string> out;
  for (char* s : p) {
    out.emplace_back(s ? s : "");
    H5free_memory(s);
  }
  return out;
}

Array Group::read(const std::string& name) const {
  const Dataset ds = open_dataset(name);
  const hid_t d = ds.id();
  require_dataset_kind(d, path_ + name, Expect::number, false);
  Handle space(H5Dget_space(d), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.id());
  if (rank < 0) fail("cannot read the shape of " + path_ + name);
  Array a;
  a.shape.resize(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.id(), a.shape.data(), nullptr);
  double values = 1;  // in double: a corrupted or hostile shape must not overflow the count
  for (hsize_t s : a.shape) values *= static_cast<double>(s);
  require_allocatable(values * sizeof(double), path_ + name + " " + shape_string(a.shape));
  const auto count = static_cast<std::size_t>(values);
  a.data.resize(count);
  if (count == 0) return a;
  Handle type(H5Dget_type(d), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_ENUM) {
    check(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.data.data()), "",
          "cannot read dataset " + path_ + name);
    return a;
  }
  // An enum (h5py stores bool arrays as one: FALSE = 0, TRUE = 1): its members' integer values.
  // HDF5 converts enums only to enums, so the raw values are read in the enum's native form and
  // converted from its integer base type to double in place (a double is at least as wide).
  Handle native(H5Tget_native_type(type.id(), H5T_DIR_ASCEND), H5Tclose);
  Handle base(native.id() >= 0 ? H5Tget_super(native.id()) : -1, H5Tclose);
  if (native.id() < 0 || base.id() < 0 || H5Tget_size(base.id()) > sizeof(double))
    fail("cannot read the enum values of " + path_ + name);
  check(H5Dread(d, native.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, a.data.data()), "", "cannot read dataset " + path_ + name);
  check(H5Tconvert(base.id(), H5T_NATIVE_DOUBLE, count, a.data.data(), nullptr, H5P_DEFAULT), "",
        "cannot convert the enum values of " + path_ + name);
  return a;
}

std::string Group::read_string(const std::string& name) const {
  const Dataset ds = open_dataset(name);
  require_dataset_kind(ds.id(), path_ + name, Expect::string, true);
  Handle t = utf8_string_type();
  char* p = nullptr;
  check(H5Dread(ds.id(), t.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p), "", "cannot read dataset " + path_ + name);
  std::string s = p ? p : "";
  H5free_memory(p);
  return s;
}

RowMajorMatrix Group::read_matrix(const std::string& name, const std::vector<long long>& expected) const {
  const Array a = read(name);
  bool ok = a.shape.size() == expected.size();
  for (std::size_t i = 0; ok && i < expected.size(); ++i)
    ok = expected[i] < 0 || a.shape[i] == static_cast<hsize_t>(expected[i]);
  if (!ok || a.shape.size() != 2) {
    std::string want = "[";
    for (std::size_t i = 0; i < expected.size(); ++i)
      want += (i ? ", " : "") + (expected[i] < 0 ? std::string("any") : std::to_string(expected[i]));
    throw UsageError(path_ + name + ": expected shape " + want + "], got " + shape_string(a.shape));
  }
  RowMajorMatrix m(static_cast<Eigen::Index>(a.shape[0]), static_cast<Eigen::Index>(a.shape[1]));
  std::copy(a.data.begin(), a.data.end(), m.data());
  return m;
}

namespace {
herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> Group::members() const {
  std::vector<std::string> names;
  hsize_t at = 0;
  check(H5Literate(id(), H5_INDEX_NAME, H5_ITER_INC, &at, collect_link, &names), "", "cannot list the members of " + path_);
  return names;
}

namespace {
// Give each unlabelled axis of `ds` (the dataset `leaf` of `parent`) an index coordinate.
void label_remaining_axes(const Group& parent, const std::string& leaf, const Dataset& ds) {
  const std::vector<hsize_t> shape = ds.shape();
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (H5DSget_num_scales(ds.id(), static_cast<unsigned>(k)) > 0) continue;
    const std::string dim = leaf + "_dim" + std::to_string(k);
    if (!parent.exists(dim)) {
      std::vector<std::int64_t> index(static_cast<std::size_t>(shape[k]));
      for (std::size_t i = 0; i < index.size(); ++i) index[i] = static_cast<std::int64_t>(i);
      parent.write_coordinate(dim, index, "index along axis " + std::to_string(k) + " of " + leaf);
    }
    ds.attach_scale(parent.open_dataset(dim), static_cast<unsigned>(k));
  }
}
}  // namespace

void Group::label_unlabelled_axes() const {
  std::vector<std::string> names;
  check(H5Lvisit(id(), H5_INDEX_NAME, H5_ITER_INC, collect_link, &names), "",
        "cannot list the objects of " + path_);
  for (const std::string& name : names) {
    Handle obj(H5Oopen(id(), name.c_str(), H5P_DEFAULT), H5Oclose);
    if (obj.id() < 0 || H5Iget_type(obj.id()) != H5I_DATASET || H5DSis_scale(obj.id()) > 0) continue;
    const Dataset ds = open_dataset(name);
    const auto slash = name.rfind('/');
    if (slash == std::string::npos) {
      label_remaining_axes(*this, name, ds);
    } else {
      label_remaining_axes(open_group(name.substr(0, slash)), name.substr(slash + 1), ds);
    }
  }
}

}  // namespace rcsim::h5
