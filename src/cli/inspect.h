// `lct inspect`: what a checkpoint holds (config, progress, tensors with statistics,
// checksum status, metrics summary) and a side-by-side comparison of two runs.
#pragma once

#include <string>
#include <vector>

#include "src/metrics/step_metrics.h"

namespace lct {

// Print a human-readable report (or JSON) of one file; returns the exit code
// (non-zero when a checksum fails or the file cannot be read).
int inspect_file(const std::string& path, bool json);
// A run's metrics summary as inspect --json prints it ("metrics"): the loss, and every
// step metrics field with a summary (src/metrics/step_metrics.h), over the last steps.
std::string metrics_summary_json(const std::vector<StepRecord>& history);
// Print two runs side by side: config differences, loss and throughput.
int compare_files(const std::string& a, const std::string& b, bool json);

}  // namespace lct
