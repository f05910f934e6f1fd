#pragma once
// ModelConfig as JSON: model.json in every hone model and checkpoint folder, so
// that a folder says what it holds. The keys are those of a run config's
// `model.*` section (model.dim, model.rope_scaling.factor, ...).
#include <string>

#include "hone/config/config.hpp"
#include "hone/model/config.hpp"

namespace hone {

Json model_config_to_json(const ModelConfig& config);
// Every key is required and no other is allowed (a field this hone does not
// know would change the model); throws hone::Error naming `context` and the key.
ModelConfig model_config_from_json(const Json& j, const std::string& context);

}  // namespace hone
