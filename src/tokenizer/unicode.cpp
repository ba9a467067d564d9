// UTF-8 helpers and the GPT-2 byte <-> unicode map (see unicode.h).
#include "tokenizer/unicode.h"

#include <array>

namespace kvlm {

size_t utf8_char_length(uint8_t lead) {
    if (lead < 0x80) return 1;
    if ((lead & 0xE0) == 0xC0) return 2;
    if ((lead & 0xF0) == 0xE0) return 3;
    if ((lead & 0xF8) == 0xF0) return 4;
    return 1;
}

int utf8_sequence_status(const char* s, size_t n) {
    if (n == 0) return -1;
    const auto b0 = static_cast<uint8_t>(s[0]);
    if (b0 < 0x80) return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (rules out overlongs and surrogates)
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    for (size_t i = 1; i < need; ++i) {
        if (i >= n) return -1;
        const auto b = static_cast<uint8_t>(s[i]);
        const uint8_t min = i == 1 ? lo : 0x80, max = i == 1 ? hi : 0xBF;
        if (b < min || b > max) return 0;
    }
    return static_cast<int>(need);
}

uint32_t utf8_decode(const char* s, size_t n, size_t* length) {
    const int status = utf8_sequence_status(s, n);
    if (status <= 0) {
        *length = 1;
        return 0xFFFD;
    }
    *length = static_cast<size_t>(status);
    const auto* u = reinterpret_cast<const uint8_t*>(s);
    switch (status) {
        case 1: return u[0];
        case 2: return ((u[0] & 0x1Fu) << 6) | (u[1] & 0x3Fu);
        case 3: return ((u[0] & 0x0Fu) << 12) | ((u[1] & 0x3Fu) << 6) | (u[2] & 0x3Fu);
        default: return ((u[0] & 0x07u) << 18) | ((u[1] & 0x3Fu) << 12) | ((u[2] & 0x3Fu) << 6) | (u[3] & 0x3Fu);
    }
}

std::string codepoint_to_utf8(uint32_t cp) {
    std::string out;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return out;
}

bool is_valid_utf8(std::string_view text) {
    for (size_t i = 0; i < text.size();) {
        const int status = utf8_sequence_status(text.data() + i, text.size() - i);
        if (status <= 0) return false;
        i += static_cast<size_t>(status);
    }
    return true;
}

std::string sanitize_utf8(std::string_view text) {
    static const std::string replacement = "\xEF\xBF\xBD";
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        const int status = utf8_sequence_status(text.data() + i, text.size() - i);
        if (status > 0) {
            out.append(text.data() + i, static_cast<size_t>(status));
            i += static_cast<size_t>(status);
        } else if (status == 0) {
            out += replacement;
            i += 1;
        } else {  // incomplete tail
            out += replacement;
            break;
        }
    }
    return out;
}

namespace {

struct ByteMap {
    std::array<std::string, 256> to_unicode;
    std::array<int, 512> from_unicode;  // every mapped code point is < 324

    ByteMap() {
        from_unicode.fill(-1);
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            const uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
            to_unicode[b] = codepoint_to_utf8(cp);
            from_unicode[cp] = b;
        }
    }
};

const ByteMap& byte_map() {
    static const ByteMap map;
    return map;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t byte) { return byte_map().to_unicode[byte]; }

int unicode_to_byte(uint32_t codepoint) {
    return codepoint < 512 ? byte_map().from_unicode[codepoint] : -1;
}

std::string byte_level_encode(std::string_view bytes) {
    const ByteMap& map = byte_map();
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes) out += map.to_unicode[static_cast<uint8_t>(c)];
    return out;
}

void byte_level_decode_append(std::string_view piece, std::string* out) {
    // Every code point becomes one byte or keeps its own bytes: never longer than the piece. Written in place,
    // with ASCII (most of a vocabulary) looked up directly: a 49k-token vocabulary decodes at every start.
    const ByteMap& map = byte_map();
    size_t n = out->size();
    out->resize(n + piece.size());
    char* bytes = out->data();
    for (size_t i = 0; i < piece.size();) {
        const auto lead = static_cast<uint8_t>(piece[i]);
        if (lead < 0x80 && map.from_unicode[lead] >= 0) {
            bytes[n++] = static_cast<char>(map.from_unicode[lead]);
            i++;
            continue;
        }
        size_t length = 0;
        const uint32_t cp = utf8_decode(piece.data() + i, piece.size() - i, &length);
        const int byte = cp < 512 ? map.from_unicode[cp] : -1;
        if (byte >= 0 && length > 0 && cp != 0xFFFD) {
            bytes[n++] = static_cast<char>(byte);
        } else {
            for (size_t k = 0; k < length; k++) bytes[n++] = piece[i + k];
        }
        i += length;
    }
    out->resize(n);
}

std::string byte_level_decode(std::string_view piece) {
    std::string out;
    byte_level_decode_append(piece, &out);
    return out;
}

}  // namespace kvlm
