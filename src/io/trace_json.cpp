#include "src/io/trace_json.h"

#include <sstream>
#include <stdexcept>

#include "data/files.h"
#include "src/io/output_files.h"
#include "src/io/h5io.h"

namespace lct {
namespace {
const char* track_name(TraceTrack track) {
  switch (track) {
    case TraceTrack::compute: return "compute";
    case TraceTrack::wait: return "wait (blocked in MPI)";
    case TraceTrack::step: return "steps";
  }
  return "?";
}
}  // namespace

void write_trace_json(const std::string& path, const std::vector<TraceProcess>& ranks,
                      const std::string& what) {
  require_replaceable_output(path, what);
  std::ostringstream out;
  out.precision(15);
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  const auto event = [&](const std::string& json) {
    out << (first ? "" : ",\n") << json;
    first = false;
  };
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string pid = std::to_string(r);
    event("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + pid + ",\"args\":{\"name\":\"" +
          ranks[r].name + "\"}}");
    event("{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + pid + ",\"args\":{\"sort_index\":" +
          pid + "}}");
    for (TraceTrack t : {TraceTrack::compute, TraceTrack::wait, TraceTrack::step})
      event("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid + ",\"tid\":" +
            std::to_string(int(t)) + ",\"args\":{\"name\":\"" + track_name(t) + "\"}}");
    for (const TraceEvent& s : ranks[r].events) {
      std::ostringstream e;
      e.precision(15);
      e << "{\"ph\":\"X\",\"pid\":" << pid << ",\"tid\":" << int(s.track) << ",\"ts\":" << s.begin_us
        << ",\"dur\":" << (s.end_us - s.begin_us) << ",\"cat\":\"" << track_name(s.track)
        << "\",\"name\":\"" << s.name << '"';
      if (s.arg >= 0) e << ",\"args\":{\"step\":" << s.arg << '}';
      e << '}';
      event(e.str());
    }
  }
  out << "\n]}\n";
  try {
    write_text_atomically(path, out.str());  // temporary file, fsync, rename
  } catch (const std::exception& e) {
    throw std::runtime_error(what + ": " + e.what());
  }
}

}  // namespace lct
