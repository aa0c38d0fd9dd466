#include "model/recompute.h"

#include <stdexcept>

namespace lct {

}  // namespace lct
