#include "hone/data/batch.hpp"

#include "hone/core/error.hpp"

namespace hone::data {

int64_t saved_position(const nlohmann::json& state) {
  const auto position = state.find("position");
  HONE_CHECK(position != state.end() && position->is_number_integer() && position->get<int64_t>() >= 0,
             "data state {} has no 'position' of 0 or more", state.dump());
  return position->get<int64_t>();
}

void check_saved_epoch(const nlohmann::json& state, int64_t samples_per_epoch) {
  const auto saved = state.find("samples_per_epoch");
  if (saved == state.end()) return;  // states saved before it was kept
  HONE_CHECK(saved->is_number_integer() && saved->get<int64_t>() == samples_per_epoch,
             "the checkpoint's data had {} samples per epoch, this dataset has {}: resuming on other data would not "
             "reproduce the run",
             saved->dump(), samples_per_epoch);
}

}  // namespace hone::data
