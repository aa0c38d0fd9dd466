// The links lct simulate charges a message to (src/sim/options.h: --hosts,
// --bandwidth/--latency, --host-bandwidth/--host-latency). The ranks sit on `hosts`
// hosts, ranks / hosts consecutive ranks each (mpirun's default placement by slot).
//   within a host   shared memory at --bandwidth: the exchanges lct overlaps (the
//                   gradient buckets, the context-parallel ring, CAD's exchange) are
//                   hidden behind compute as far as the compute lasts.
//   between hosts   TCP at --host-bandwidth: nothing is hidden. OpenMPI progresses a
//                   transfer over TCP only inside MPI calls, and lct calls MPI between
//                   kernel calls and layers: on the namespace cluster at 200 Mbit/s only
//                   about 70 of the 515 ms of the gradient all-reduce were hidden, and
//                   the context-parallel ring's steps ran as if the exchange were exposed
//                   (docs/clusters.md).
// A collective or ring whose ranks span hosts runs at the host link (its slowest).
#pragma once

#include <vector>

namespace lct {

struct Network {
  int ranks_per_host = 1;
  double bandwidth = 4e9, latency = 5e-6;            // within a host: bytes/s, seconds
  double host_bandwidth = 4e9, host_latency = 5e-6;  // between hosts

  // One host: every link is within it.
  static Network one_host(int ranks, double bandwidth, double latency) {
    return {ranks, bandwidth, latency, bandwidth, latency};
  }
  int host_of(int rank) const { return rank / ranks_per_host; }
  // Do these ranks sit on more than one host?
  bool spans_hosts(const std::vector<int>& ranks) const {
    for (const int r : ranks)
      if (host_of(r) != host_of(ranks.front())) return true;
    return false;
  }
  double bandwidth_of(bool across) const { return across ? host_bandwidth : bandwidth; }
  double latency_of(bool across) const { return across ? host_latency : latency; }
  // the seconds of `bytes` in `messages` messages over the link
  double seconds(double bytes, double messages, bool across) const {
    return bytes / bandwidth_of(across) + messages * latency_of(across);
  }
};

}  // namespace lct
