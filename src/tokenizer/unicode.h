// UTF-8 helpers and the GPT-2 byte <-> unicode map of byte-level BPE vocabularies.
// Every function accepts arbitrary bytes: invalid UTF-8 never reads past the end and always makes progress.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvlm {

// Bytes in the UTF-8 sequence whose lead byte is `lead` (1-4); 1 for continuation and invalid bytes,
// so a loop stepping by this value always advances.
size_t utf8_char_length(uint8_t lead);

// Classifies the bytes at the start of s[0, n): the length (1-4) of a complete, valid UTF-8 character;
// 0 if they cannot start a valid character (the first byte is invalid); -1 if they are a valid but
// incomplete prefix that more bytes could complete.
int utf8_sequence_status(const char* s, size_t n);

// Decodes the character at s[0, n) (n >= 1); on invalid bytes returns U+FFFD with *length = 1.
uint32_t utf8_decode(const char* s, size_t n, size_t* length);
std::string codepoint_to_utf8(uint32_t codepoint);
bool is_valid_utf8(std::string_view text);
// Replaces every invalid byte (and an incomplete tail) with U+FFFD.
std::string sanitize_utf8(std::string_view text);

// GPT-2 byte-level encoding: each byte maps to one printable code point (e.g. ' ' -> U+0120 'Ġ').
const std::string& byte_to_unicode(uint8_t byte);  // as UTF-8
int unicode_to_byte(uint32_t codepoint);           // -1 if the code point is not in the map
std::string byte_level_encode(std::string_view bytes);
// Inverse of byte_level_encode; characters outside the map are copied through as their UTF-8.
std::string byte_level_decode(std::string_view piece);
void byte_level_decode_append(std::string_view piece, std::string* out);  // the same, appended to *out

}  // namespace kvlm
