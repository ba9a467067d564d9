// `kvlm convert`: runs the converter and reports one summary line plus the model fingerprint on stderr.
#include <cstdio>

#include "cli/cli.h"
#include "import/convert.h"

namespace kvlm {

int cmd_convert(const ConvertOptions& options) {
    ConvertSummary s = convert_model(options, !options.quiet);
    if (!options.quiet) {
        const ModelConfig& c = s.config;
        std::fprintf(stderr,
                     "converted %s -> %s: %s, %d layers, n_embd %d, %d/%d heads, n_ff %d, vocab %d, %s%s, "
                     "%zu tensors, %.1f MB in %.1f s\n",
                     options.synthetic.empty() ? options.source.c_str() : ("synthetic " + options.synthetic).c_str(),
                     options.output.c_str(), c.architecture.c_str(), c.n_layers, c.n_embd, c.n_heads, c.n_kv_heads,
                     c.n_ff, c.n_vocab, dtype_name(s.dtype), c.tied_embeddings ? ", tied embeddings" : "",
                     s.n_tensors, double(s.n_bytes) / 1e6, s.seconds);
        std::fprintf(stderr, "fingerprint %s\n", s.fingerprint.c_str());
    }
    return 0;
}

}  // namespace kvlm
