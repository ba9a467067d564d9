// Tensor checksums when an engine opens a model: corrupted weights stop the run naming the tensor instead
// of printing garbage. Models up to a size are checked on every load (XXH3 reads a warm file at several
// GB/s); bigger ones on their first use, remembered by file identity in the state directory until the
// file changes.
#pragma once
#include <cstdint>
#include <string>

#include "format/model_file.h"

namespace kvlm {

// Models up to this size are verified on every load; KVLM_VERIFY_EVERY_LOAD_UP_TO (bytes) overrides it.
constexpr uint64_t kVerifyAtLoadMaxBytes = uint64_t(1) << 30;
// How many verified big models the record remembers (the oldest are forgotten first).
constexpr size_t kVerifiedModelsKept = 64;

// $XDG_STATE_HOME/kvlm/verified_models, else ~/.local/state/kvlm/verified_models; "" when neither is set
// (then big models are verified on every load).
std::string verified_models_path();

struct ModelCheck {
    bool verified = false;     // the checksums were recomputed now
    bool first_use = false;    // a big model, verified now and remembered
    double seconds = 0;
};

// Throws Error naming the first tensor whose checksum does not match. show_progress: a bar on stderr
// while a big model is verified (only on a terminal).
ModelCheck check_model_at_load(const ModelFile& model, bool show_progress);

}  // namespace kvlm
