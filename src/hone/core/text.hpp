#pragma once
// Numbers as a person reads them in banners, progress lines and reports.
#include <cstdint>
#include <string>
#include <string_view>

namespace hone {

// "512 B", "1.50 KiB", "2.00 GiB": binary units, two decimals above bytes.
std::string format_bytes(double bytes);
// `word` or its plural after a count of n ("1 prompt", "2 prompts");
// `plural_form` where adding an s will not do.
std::string plural(int64_t n, std::string_view word, std::string_view plural_form = "");

}  // namespace hone
