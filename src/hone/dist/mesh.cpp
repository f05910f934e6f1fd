#include "hone/dist/mesh.hpp"

#include "hone/core/error.hpp"

namespace hone::dist {

DeviceMesh::DeviceMesh(Communicator& world, int dp, int tp) : world_(world), dp_(dp), tp_(tp) {
  HONE_CHECK(dp >= 1 && tp >= 1 && int64_t(dp) * tp == world.size(),
             "device mesh: dp {} x tp {} must equal the world size {}", dp, tp, world.size());
  dp_group_ = world.split(tp_rank(), dp_rank());
  tp_group_ = world.split(dp_rank(), tp_rank());
}

}  // namespace hone::dist
