// Fuzz target: a Hugging Face config.json through ParseHfConfig, and the same bytes as a
// generation_config.json through MergeGenerationConfig (onto the preset "tiny"). A config or
// an error, never a crash (nlohmann::json type errors included).
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<saturn::ModelConfig> config = saturn::ParseHfConfig(text, "fuzz");
  if (config.ok()) (void)config->NumParameters();
  saturn::ModelConfig tiny = *saturn::PresetConfig("tiny");
  (void)saturn::MergeGenerationConfig(text, &tiny);
  return 0;
}
