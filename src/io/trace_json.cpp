#include "src/io/trace_json.h"

#include <stdexcept>

#include "data/files.h"
#include "src/io/output_files.h"
#include "src/io/h5io.h"
#include "src/util/json.h"

namespace lct {
namespace {
const char* track_name(TraceTrack track) {
  switch (track) {
    case TraceTrack::compute: return "compute";
    case TraceTrack::wait: return "wait (blocked in MPI)";
    case TraceTrack::step: return "steps";
    case TraceTrack::product: return "products (linear layers)";
  }
  return "?";
}
}  // namespace

void write_trace_json(const std::string& path, const std::vector<TraceProcess>& ranks,
                      const std::string& what) {
  require_replaceable_output(path, what);
  // one event per line, so that a long timeline stays readable and diffable
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  const auto event = [&](const Json& e) {
    out += (first ? "" : ",\n") + json_text(e);
    first = false;
  };
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int pid = int(r);
    event({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", ranks[r].name}}}});
    event({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});
    for (TraceTrack t : {TraceTrack::compute, TraceTrack::wait, TraceTrack::step, TraceTrack::product})
      event({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", int(t)}, {"args", {{"name", track_name(t)}}}});
    for (const TraceEvent& s : ranks[r].events) {
      Json e = {{"ph", "X"},  {"pid", pid}, {"tid", int(s.track)}, {"ts", s.begin_us}, {"dur", s.end_us - s.begin_us},
                {"cat", track_name(s.track)}, {"name", s.name}};
      if (s.arg >= 0) e["args"] = {{"step", s.arg}};
      event(e);
    }
  }
  out += "\n]}\n";
  try {
    write_text_atomically(path, out);  // temporary file, fsync, rename
  } catch (const std::exception& e) {
    throw std::runtime_error(what + ": " + e.what());
  }
}

}  // namespace lct
