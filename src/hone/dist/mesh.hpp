#pragma once
// DeviceMesh: the world arranged as dp × tp, row-major with tp fastest, so the
// tp ranks of one replica are neighbours (one node, the fast links). World rank
// r has dp index r / tp and tp index r % tp.
//   dp group of r: the ranks with r's tp index (they hold the same shard of the
//                  weights and average gradients);
//   tp group of r: the ranks with r's dp index (one model replica, split).
#include <memory>

#include "hone/dist/communicator.hpp"

namespace hone::dist {

class DeviceMesh {
 public:
  // Collective over `world` (it splits it twice); dp · tp must equal its size.
  DeviceMesh(Communicator& world, int dp, int tp);

  int dp_size() const { return dp_; }
  int tp_size() const { return tp_; }
  int dp_rank() const { return world_.rank() / tp_; }
  int tp_rank() const { return world_.rank() % tp_; }
  Communicator& world() const { return world_; }
  Communicator& dp() const { return *dp_group_; }
  Communicator& tp() const { return *tp_group_; }

  // The world rank at (dp index, tp index).
  int world_rank(int dp_index, int tp_index) const { return dp_index * tp_ + tp_index; }

 private:
  Communicator& world_;
  int dp_, tp_;
  std::unique_ptr<Communicator> dp_group_, tp_group_;
};

}  // namespace hone::dist
