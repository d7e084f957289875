// errno_text(err): "No space left on device (ENOSPC)", the form every offload error message uses
// so a person can read it and a script can grep the symbolic name. Thread-safe (no strerror).
#pragma once

#include <string.h>  // strerrorname_np (glibc >= 2.32)

#include <string>
#include <system_error>

namespace strait::offload {

inline std::string errno_text(int err) {
  std::string text = std::system_category().message(err);
  if (const char* name = strerrorname_np(err); name != nullptr) {
    text += " (";
    text += name;
    text += ')';
  }
  return text;
}

}  // namespace strait::offload
