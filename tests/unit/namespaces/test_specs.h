// Namespace specs used by several tests.
#ifndef KVSTRATA_TESTS_UNIT_NAMESPACES_TEST_SPECS_H_
#define KVSTRATA_TESTS_UNIT_NAMESPACES_TEST_SPECS_H_

#include "daemon/namespaces/namespace_spec.h"

namespace kvstrata {

// Llama-3.1-8B in vLLM: 32 layers, 8 KV heads, head size 128, bf16, 16 tokens per block.
inline NamespaceSpec Llama8bSpec() {
  NamespaceSpec spec;
  spec.engine_kind = EngineKind::kVllm;
  spec.model = "meta-llama/Llama-3.1-8B";
  spec.dtype = DType::kBfloat16;
  spec.num_layers = 32;
  spec.num_kv_heads = 8;
  spec.head_size = 128;
  spec.tokens_per_block = 16;
  spec.kv_layout = KvLayout::kVllmNhd;
  return spec;
}

}  // namespace kvstrata

#endif  // KVSTRATA_TESTS_UNIT_NAMESPACES_TEST_SPECS_H_
