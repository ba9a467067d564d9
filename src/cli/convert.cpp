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
                     "converted %s -> %s: %s, %d layers, n_embd %d, %d/%d heads, n_ff %d, vocab %d%s, "
                     "%zu tensors (%s), %.1f MB in %.1f s\n",
                     options.synthetic.empty() ? options.source.c_str() : ("synthetic " + options.synthetic).c_str(),
                     options.output.c_str(), c.architecture.c_str(), c.n_layers, c.n_embd, c.n_heads, c.n_kv_heads,
                     c.n_ff, c.n_vocab, c.tied_embeddings ? ", tied embeddings" : "",
                     s.n_tensors, s.types.c_str(), double(s.n_bytes) / 1e6, s.seconds);
        if (!s.kept_f16.empty())
            std::fprintf(stderr, "kvlm: %zu matrices stay f16: their rows are not whole %lld-element blocks of %s (%s%s)\n",
                         s.kept_f16.size(), (long long)dtype_block_elements(s.dtype), dtype_name(s.dtype), s.kept_f16.front().c_str(),
                         s.kept_f16.size() > 1 ? ", ..." : "");
        std::fprintf(stderr, "fingerprint %s\n", s.fingerprint.c_str());
    }
    return 0;
}

}  // namespace kvlm
