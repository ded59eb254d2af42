// Namespace specs (wire form) shared by the integration tests and the RPC benchmarks.
#ifndef KVSTRATA_TESTS_INTEGRATION_PROTO_SPECS_H_
#define KVSTRATA_TESTS_INTEGRATION_PROTO_SPECS_H_

#include <cstdint>
#include <string>

#include "kvstrata/v1/common.pb.h"

namespace kvstrata::testing {

// Blocks of `block_bytes` with no geometry (engine "other", layout opaque).
inline v1::NamespaceSpec OpaqueSpec(const std::string& model, uint64_t block_bytes,
                                    const std::string& salt = "") {
  v1::NamespaceSpec spec;
  spec.set_engine_kind(v1::ENGINE_KIND_OTHER);
  spec.set_model(model);
  spec.set_dtype(v1::DTYPE_UINT8);
  spec.set_num_layers(1);
  spec.set_num_kv_heads(1);
  spec.set_head_size(1);
  spec.set_tokens_per_block(16);
  spec.set_kv_layout(v1::KV_LAYOUT_OPAQUE);
  spec.set_opaque_block_bytes(block_bytes);
  spec.set_salt(salt);
  return spec;
}

// Llama-3.1-8B in vLLM: 32 layers, 8 KV heads, head size 128, bf16, 16 tokens per block.
inline v1::NamespaceSpec Llama8bSpec() {
  v1::NamespaceSpec spec;
  spec.set_engine_kind(v1::ENGINE_KIND_VLLM);
  spec.set_model("meta-llama/Llama-3.1-8B");
  spec.set_dtype(v1::DTYPE_BFLOAT16);
  spec.set_num_layers(32);
  spec.set_num_kv_heads(8);
  spec.set_head_size(128);
  spec.set_tokens_per_block(16);
  spec.set_kv_layout(v1::KV_LAYOUT_VLLM_NHD);
  return spec;
}

}  // namespace kvstrata::testing

#endif  // KVSTRATA_TESTS_INTEGRATION_PROTO_SPECS_H_
