#include "daemon/rpc/proto_convert.h"

namespace kvstrata {

NamespaceSpec FromProto(const v1::NamespaceSpec& p) {
  NamespaceSpec s;
  s.engine_kind = static_cast<EngineKind>(p.engine_kind());
  s.model = p.model();
  s.dtype = static_cast<DType>(p.dtype());
  s.num_layers = p.num_layers();
  s.num_kv_heads = p.num_kv_heads();
  s.head_size = p.head_size();
  s.tokens_per_block = p.tokens_per_block();
  s.tp_size = p.tp_size();
  s.tp_rank = p.tp_rank();
  s.pp_size = p.pp_size();
  s.pp_rank = p.pp_rank();
  s.kv_layout = static_cast<KvLayout>(p.kv_layout());
  s.attention_kind = static_cast<AttentionKind>(p.attention_kind());
  s.salt = p.salt();
  s.opaque_block_bytes = p.opaque_block_bytes();
  s.kv_group = p.kv_group();
  return s;
}

v1::NamespaceSpec ToProto(const NamespaceSpec& s) {
  v1::NamespaceSpec p;
  p.set_engine_kind(static_cast<v1::EngineKind>(s.engine_kind));
  p.set_model(s.model);
  p.set_dtype(static_cast<v1::DType>(s.dtype));
  p.set_num_layers(s.num_layers);
  p.set_num_kv_heads(s.num_kv_heads);
  p.set_head_size(s.head_size);
  p.set_tokens_per_block(s.tokens_per_block);
  p.set_tp_size(s.tp_size);
  p.set_tp_rank(s.tp_rank);
  p.set_pp_size(s.pp_size);
  p.set_pp_rank(s.pp_rank);
  p.set_kv_layout(static_cast<v1::KvLayout>(s.kv_layout));
  p.set_attention_kind(static_cast<v1::AttentionKind>(s.attention_kind));
  p.set_salt(s.salt);
  p.set_opaque_block_bytes(s.opaque_block_bytes);
  p.set_kv_group(s.kv_group);
  return p;
}

uint64_t UnixMillis(absl::Time time) { return static_cast<uint64_t>(absl::ToUnixMillis(time)); }

}  // namespace kvstrata
