#include "hone/io/peft.hpp"

#include <functional>
#include <set>

#include "hone/io/atomic_file.hpp"
#include "hone/io/checkpoint.hpp"
#include "hone/io/hf.hpp"
#include "hone/io/json_file.hpp"
#include "hone/io/safetensors.hpp"

namespace hone {

namespace {

// `adapter(name)`: the adapter tensor of that hone name.
void write_peft(const ModelConfig& config, const LoraConfig& lora,
                const std::function<Tensor(const std::string&)>& adapter, const std::string& dir,
                const std::string& base_model) {
  std::vector<NamedTensor> tensors;
  std::set<std::string> modules;
  for (const LoraTarget& t : lora_targets(config, lora)) {
    // The Hugging Face tensor that is exactly this adapter's rows.
    const HfTensor* match = nullptr;
    const std::vector<HfTensor> hf = hf_tensors_of(config, t.base);
    for (const HfTensor& h : hf) {
      if (h.row_begin == t.row_begin && h.rows == t.rows) match = &h;
    }
    HONE_CHECK(match != nullptr && !match->transposed,
               "{}: PEFT cannot hold the {} adapter of layer {}: Hugging Face stores {} as {} (export the merged "
               "model to a Hugging Face folder instead)",
               dir, t.module, t.layer, t.base, hf.empty() ? "nothing" : hf.front().name);
    const std::string module = match->name.substr(0, match->name.size() - std::string(".weight").size());
    modules.insert(module.substr(module.rfind('.') + 1));
    tensors.push_back({"base_model.model." + module + ".lora_A.weight", adapter(t.a_name())});
    tensors.push_back({"base_model.model." + module + ".lora_B.weight", adapter(t.b_name())});
  }
  const Json adapter_config = {{"base_model_name_or_path", base_model},
                               {"bias", "none"},
                               {"fan_in_fan_out", false},
                               {"inference_mode", true},
                               {"init_lora_weights", true},
                               {"lora_alpha", lora.alpha},
                               {"lora_dropout", lora.dropout},
                               {"modules_to_save", nullptr},
                               {"peft_type", "LORA"},
                               {"r", lora.rank},
                               {"target_modules", std::vector<std::string>(modules.begin(), modules.end())},
                               {"task_type", "CAUSAL_LM"}};
  AtomicFolder folder(dir, /*replace=*/false);
  write_json_file(folder.file("adapter_config.json"), adapter_config);
  write_safetensors(folder.file("adapter_model.safetensors"), tensors, {{"format", "pt"}});
  folder.commit();
}

}  // namespace

void export_peft(const Transformer& model, const std::string& dir, const std::string& base_model) {
  HONE_CHECK(model.lora().has_value(), "{}: the model has no LoRA adapters to export", dir);
  write_peft(model.config(), *model.lora(),
             [&](const std::string& name) { return model.trainable_params().get(name).value; }, dir, base_model);
}

void export_peft(const std::string& checkpoint, const ModelConfig& config, const LoraConfig& lora,
                 const std::string& dir, const std::string& base_model) {
  const SafetensorsFile adapters(adapter_file(checkpoint));
  write_peft(config, lora, [&](const std::string& name) { return adapters.load(name); }, dir, base_model);
}

}  // namespace hone
