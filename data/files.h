// Input files are what they claim to be: a regular file, checked on the opened
// descriptor (a FIFO would block forever, /dev/zero never end, a socket never open), and
// read to its size at open time, so a file that shrinks underneath is an error message,
// never a SIGBUS.
#pragma once

#include <string>

namespace lct {

// The whole of `path`; `what` names it in errors (e.g. "data.path"). Throws
// std::runtime_error: "what 'path': not a regular file (a FIFO)", "... cannot open
// (reason)", "... changed while it was read".
std::string read_regular_file(const std::string& path, const std::string& what);
// Throws the same errors when `path` is not a regular file, without reading it (for
// files another library opens by name, e.g. HDF5).
void require_regular_file(const std::string& path, const std::string& what);

// "fnv1a64:<16 hex digits>" of what lct reads at `path`: a regular file's bytes, or a
// folder's regular files (sorted by name; names and bytes). Ranks compare it to know they
// read the same data, not only files of the same size. Throws like read_regular_file.
std::string content_hash(const std::string& path, const std::string& what);

// Outputs go to a new path or replace a regular file; never a symlink (the link would
// be replaced, not what it names), a folder, a device, a FIFO or a socket (as root,
// renaming over /dev/null would replace it). Throws std::runtime_error naming `what`.
void require_replaceable_output(const std::string& path, const std::string& what);

}  // namespace lct
