#include "daemon/events/kv_event.h"

namespace kvstrata {

uint64_t ExternalBlockHash(std::string_view key_bytes) {
  std::string_view tail = key_bytes.size() > 8 ? key_bytes.substr(key_bytes.size() - 8) : key_bytes;
  uint64_t value = 0;
  for (char c : tail) value = (value << 8) | static_cast<uint8_t>(c);
  return value;
}

}  // namespace kvstrata
