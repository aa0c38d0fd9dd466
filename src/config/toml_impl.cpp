// toml++'s implementation, compiled once. Every file that includes <toml++/toml.h> sees
// TOML_HEADER_ONLY=0 (lct_config's public definition), so it reads declarations only:
// the header-only library took about 13 s to compile per including file under the
// sanitizers, 1 s this way.
#define TOML_IMPLEMENTATION
#include <toml++/toml.h>
