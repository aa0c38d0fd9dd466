#include "parallel/trace_writer.h"

#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "parallel/mpi_util.h"

namespace lct {
namespace {
const char* track_name(int track) {
  switch (track) {
    case int(TraceTrack::compute): return "compute";
    case int(TraceTrack::wait): return "wait (blocked in MPI)";
    case int(TraceTrack::step): return "steps";
  }
  return "?";
}
}  // namespace

Trace start_aligned_trace(const ProcessGrid& grid) {
  MPI_Barrier(grid.world());
  return Trace(TraceClock::now());
}

void write_trace(const Trace& trace, const ProcessGrid& grid, const std::string& path) {
  // this rank's spans as text lines: track begin_us end_us arg name
  std::ostringstream mine;
  mine.precision(15);
  for (const TraceSpan& s : trace.spans()) {
    const auto us = [&](TraceClock::time_point t) {
      return std::chrono::duration<double, std::micro>(t - trace.epoch()).count();
    };
    mine << int(s.track) << ' ' << us(s.begin) << ' ' << us(s.end) << ' ' << s.arg << ' ' << s.name
         << '\n';
  }
  const std::string text = mine.str();
  const int n = grid.world_size(), rank = grid.world_rank();
  int count = mpi_count(int64_t(text.size()), "a rank's trace");
  std::vector<int> counts(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
  MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, grid.world());
  int64_t total = 0;
  for (int r = 0; r < n; ++r) displs[size_t(r)] = mpi_count(total, "the job's trace"), total += counts[size_t(r)];
  std::vector<char> all(rank == 0 ? static_cast<size_t>(total) : 0);
  MPI_Gatherv(text.data(), count, MPI_CHAR, all.data(), counts.data(), displs.data(), MPI_CHAR, 0,
              grid.world());
  if (rank != 0) return;

  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp);
  if (!out) throw std::runtime_error("trace.path: cannot write '" + tmp + "'");
  out.precision(15);
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  const auto event = [&](const std::string& json) {
    out << (first ? "" : ",\n") << json;
    first = false;
  };
  for (int r = 0; r < n; ++r) {
    const GridCoordinates c = grid_coordinates(grid.layout(), r);
    std::ostringstream meta;
    meta << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << r << ",\"args\":{\"name\":\"rank "
         << r << " (dp " << c.dp_rank << ", pp " << c.pp_rank << ", cp " << c.cp_rank << ")\"}}";
    event(meta.str());
    event("{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + std::to_string(r) +
          ",\"args\":{\"sort_index\":" + std::to_string(r) + "}}");
    for (int t = 0; t < 3; ++t)
      event("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(r) + ",\"tid\":" +
            std::to_string(t) + ",\"args\":{\"name\":\"" + track_name(t) + "\"}}");
    std::istringstream lines(std::string(all.data() + displs[size_t(r)], size_t(counts[size_t(r)])));
    int track = 0;
    double begin = 0, end = 0;
    long long arg = -1;
    std::string name;
    while (lines >> track >> begin >> end >> arg && std::getline(lines >> std::ws, name)) {
      std::ostringstream e;
      e.precision(15);
      e << "{\"ph\":\"X\",\"pid\":" << r << ",\"tid\":" << track << ",\"ts\":" << begin
        << ",\"dur\":" << (end - begin) << ",\"cat\":\"" << track_name(track) << "\",\"name\":\""
        << name << '"';  // span names are literals without quotes or backslashes
      if (arg >= 0) e << ",\"args\":{\"step\":" << arg << '}';
      e << '}';
      event(e.str());
    }
  }
  out << "\n]}\n";
  out.close();
  if (!out) throw std::runtime_error("trace.path: writing '" + tmp + "' failed");
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw std::runtime_error("trace.path: cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
}

}  // namespace lct
