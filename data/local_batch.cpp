#include "data/local_batch.h"

#include <algorithm>
#include <stdexcept>

#include "attention/core_attention.h"

namespace lct {

int64_t LocalBatch::num_targets() const {
  return std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; });
}

int64_t LocalBatch::attention_pairs(const AttentionMask& mask) const {
  if (mask.per_document()) {  // the prefix or the segments decide: count the tasks
    std::vector<AttentionTask> tasks;
    local_tasks(tasks);
    return lct::attention_pairs(tasks, mask);
  }
  int64_t pairs = 0;
  for (const DocPiece& p : pieces)
    pairs += prefix_pairs(p.pos, p.len, mask);
  return pairs;
}

void LocalBatch::local_tasks(std::vector<AttentionTask>& tasks) const {
  tasks.clear();
  for (const DocPiece& p : pieces) {
    if (segment_ids.empty()) {
      AttentionTask t{p.row, p.row, p.len, p.len, p.pos, p.pos, p.doc_len};
      t.prefix_len = p.prefix_len;
      tasks.push_back(t);
      continue;
    }
    if (p.pos != 0 || p.len != p.doc_len)
      throw std::logic_error("shared_question: a piece of a document (context parallelism or CAD) has no segment tasks");
    append_document_tasks(tasks, p.row, p.len, 0, segment_ids.data() + p.row);
  }
}

LossOn parse_loss_on(const std::string& name) {
  if (name == "all") return LossOn::all;
  if (name == "answers") return LossOn::answers;
  throw std::invalid_argument("expected all or answers, got '" + name + "'");
}

const char* loss_on_name(LossOn loss_on) { return loss_on == LossOn::answers ? "answers" : "all"; }

void keep_answer_targets(LocalBatch& batch) {
  for (size_t t = 0; t < batch.targets.size(); ++t)
    if (t >= batch.answer_mask.size() || batch.answer_mask[t] == 0) batch.targets[t] = -1;
}

}  // namespace lct
