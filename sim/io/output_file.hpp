// One output file, written so that nothing is lost and nothing that is not rcsim's is replaced.
// Every file rcsim writes goes through OutputFile: the lock (one writer per output), the exclusive
// temporary beside the target, the HDF5 header (filetype, format version, provenance, command
// line), the complete flag, the checked close, and the final rename, which refuses a target that
// appeared or was replaced while rcsim was writing (io/safe_file.hpp has the POSIX pieces).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/hdf5_file.hpp"
#include "io/safe_file.hpp"

namespace rcsim {

// The attributes every HDF5 file rcsim writes starts with.
struct FileHeader {
  std::string filetype;                    // "rcsim-run", "rcsim-equilibria", ...
  int format_version = 1;
  std::optional<std::string> command_line{};  // written when given
  const char* time_attr = "created_utc";   // "updated_utc" for a file rewritten as it progresses
  bool complete_flag = true;               // complete = 0 now, 1 in mark_complete
};

// filetype, format_version, the provenance attributes (io/provenance.hpp), command_line, and
// complete = 0 (when h.complete_flag).
void write_header(const h5::Object& f, const FileHeader& h);
// The last step before the close: every unlabelled axis gets a dimension scale; complete = 1.
void mark_complete(const h5::File& f);

struct OutputOptions {
  // The configuration key that named the target ("output.file"), named in errors; "" for a file
  // rcsim names itself (a checkpoint, a sweep index).
  std::string key{};
  // "output 'x.h5'": take the target's exclusive lock (TARGET.lock) and remove the stale
  // temporaries of a killed writer. "": the caller holds a lock that covers this target.
  std::string lock_what{};
  // Further targets whose stale temporaries the lock covers (a run's "x.h5.partial").
  std::vector<std::string> also_clean{};
};

class OutputFile {
 public:
  // Creates the target's directory if missing (for a target named by a key), refuses a target that is not a regular file, takes
  // the lock, and creates the exclusive temporary (fails fast on an unwritable directory). A
  // target that appears or changes between the check and the temporary is refused.
  OutputFile(std::string target, OutputOptions o);
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  // Removes the temporary unless it was published; releases the lock.
  ~OutputFile();

  const std::string& target() const { return target_; }
  const std::string& temporary() const { return tmp_; }

  // The temporary is complete and closed (checked): rename it onto the target. Refuses a target
  // that is no longer a regular file, or that appeared or was replaced since the start.
  void publish();

  // Write the temporary as a new HDF5 file: header, body(f), mark_complete, checked close, publish.
  void write_hdf5(const FileHeader& h, const std::function<void(const h5::File&)>& body);
  // Write the temporary as the target (an existing HDF5 file) with its group `group` made anew:
  // the target read into memory, `group` removed and created, body(g), the unlabelled axes in
  // `group` labelled, checked close, publish. Nothing else of the file is touched (it may hold
  // whatever a user or a tool put there). The HDF5 part runs isolated (io/isolated.hpp): libhdf5
  // can crash rather than fail on a corrupted file's metadata; then the target stays untouched
  // and the crash is one error line starting with `what`.
  void update_hdf5(const std::string& group, const std::function<void(const h5::Group&)>& body,
                   const std::string& what);
  // Write bytes to the temporary (every write and the close checked), then publish.
  void write_bytes(const std::string& bytes);

 private:
  std::string target_;
  std::string key_;
  std::optional<ExclusiveLock> lock_;
  std::string tmp_;
  bool published_ = false;
};

// The --force rule for an output named on the command line, checked while its OutputFile holds
// the lock (so that no other process publishes the target between the check and the rename) and
// before any computing: never a file the command reads (`inputs`: {what it is read as, path};
// not even with --force); a target that is not a regular file is refused by OutputFile itself;
// without --force never an existing file: `filetype` "" (a text output: any file there may be a
// user's) or a complete file of that type (a finished run; h5::check_replaceable's message for a
// file that is not one). `key` names the option in messages ("--measure").
struct OutputInput {
  std::string role;  // "the checkpoint", "--ids-file"
  std::string path;
};
void refuse_existing_output(const OutputFile& out, const std::string& key, const std::vector<OutputInput>& inputs,
                            bool force, const std::string& filetype);

}  // namespace rcsim
