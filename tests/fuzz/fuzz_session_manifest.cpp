// Session manifest decoder (src/session/session_format.cpp) on arbitrary bytes; a decoded manifest must
// encode and decode back to the same content.
#include <cstdlib>

#include "fuzz/fuzz_util.h"
#include "session/session_format.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    kvlm::SessionManifest manifest;
    try {
        manifest = kvlm::decode_manifest(data, size, "fuzz.manifest");
    } catch (const kvlm::Error&) {
        return 0;
    }
    std::vector<uint8_t> bytes = kvlm::encode_manifest(manifest);
    kvlm::SessionManifest again = kvlm::decode_manifest(bytes.data(), bytes.size(), "re-encoded");
    if (again.tokens != manifest.tokens || again.n_kv_tokens != manifest.n_kv_tokens ||
        again.blocks.size() != manifest.blocks.size())
        std::abort();
    return 0;
}
