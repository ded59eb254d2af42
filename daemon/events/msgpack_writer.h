// MsgpackWriter: appends MessagePack values to a byte string (the subset the KV event
// wire format needs: nil, bool, integers, float64, str, arrays and maps). Integers use
// the smallest encoding, as msgspec and msgpack-python do. Value type; not thread-safe.
#ifndef KVSTRATA_DAEMON_EVENTS_MSGPACK_WRITER_H_
#define KVSTRATA_DAEMON_EVENTS_MSGPACK_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace kvstrata {

class MsgpackWriter {
 public:
  void Nil();
  void Bool(bool value);
  void Uint(uint64_t value);
  void Int(int64_t value);
  void Double(double value);
  void Str(std::string_view value);
  void ArrayHeader(uint32_t size);  // followed by `size` values
  void MapHeader(uint32_t size);    // followed by `size` key/value pairs

  const std::string& bytes() const { return out_; }
  std::string Release() { return std::move(out_); }

 private:
  void Byte(uint8_t b) { out_.push_back(static_cast<char>(b)); }
  void BigEndian(uint64_t value, int bytes);
  void Head(uint8_t code, uint64_t value, int bytes);
  std::string out_;
};

}  // namespace kvstrata

#endif  // KVSTRATA_DAEMON_EVENTS_MSGPACK_WRITER_H_
