// `kvlm tokenize MODEL TEXT`: the token ids of TEXT under the model's tokenizer, space-separated on one
// line, or with --pieces one "id<TAB>piece" line per token (the piece as printable text, see below).
#include <fmt/format.h>

#include <cstdio>

#include "cli/cli.h"
#include "format/model_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kvlm {

namespace {

// What a token contributes, made visible on one line: control tokens show their piece ("<s>"), bytes that are
// not complete UTF-8 characters show as \xNN, and \n \t \r \\ are escaped.
std::string printable_piece(const Tokenizer& tokenizer, int32_t id) {
    std::string bytes = tokenizer.decode_token(id);
    if (bytes.empty()) return tokenizer.piece(id);
    std::string out;
    for (size_t i = 0; i < bytes.size();) {
        const int status = utf8_sequence_status(bytes.data() + i, bytes.size() - i);
        if (status <= 0) {
            out += fmt::format("\\x{:02X}", static_cast<uint8_t>(bytes[i]));
            ++i;
            continue;
        }
        const char c = bytes[i];
        if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c == '\r') out += "\\r";
        else if (c == '\\') out += "\\\\";
        else out.append(bytes, i, static_cast<size_t>(status));
        i += static_cast<size_t>(status);
    }
    return out;
}

}  // namespace

int cmd_tokenize(const TokenizeOptions& options) {
    const auto model = ModelFile::open(options.model_path);
    const Tokenizer tokenizer(model->metadata().tokenizer);
    const std::string text = options.text_given ? options.text
                                                : read_piped_stdin("no text: pass TEXT or pipe it on stdin");
    const std::vector<int32_t> ids = tokenizer.encode(text, !options.no_bos, !options.no_special);
    std::string out;
    if (options.pieces) {
        for (int32_t id : ids) out += fmt::format("{}\t{}\n", id, printable_piece(tokenizer, id));
    } else {
        for (size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
        out += "\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}

}  // namespace kvlm
