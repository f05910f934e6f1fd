# The HIP build check: hone's GPU kernels compiled as HIP for AMD's MI250X
# (gfx90a) and MI300 (gfx940), so that nothing CUDA-only creeps into them and a
# HIP backend can follow (docs/cuda.md, "HIP"). Objects only: Debian 12 has
# hipcc and the HIP runtime but no hipBLASLt, so no HIP program is linked. The
# tensor-core attention (attention_mma.cu, CUDA's warp matrix API) is a
# CUDA-only fast path and is left out, as are the host files (runtime, cuBLASLt,
# cuDNN), whose HIP counterparts are a port of their own.
set(HONE_HIP_CHECK AUTO CACHE STRING "Compile the GPU kernels as HIP as well (a check): AUTO, ON or OFF")
set(HONE_HIP_ARCHITECTURES "gfx90a;gfx940" CACHE STRING "AMD GPU targets of the HIP build check")

set(HONE_WITH_HIP_CHECK OFF)
if(NOT HONE_HIP_CHECK STREQUAL "OFF")
  find_program(HONE_HIPCC hipcc)
  find_path(HONE_HIP_INCLUDE_DIR hip/hip_runtime.h)
  if(HONE_HIPCC AND HONE_HIP_INCLUDE_DIR)
    set(HONE_WITH_HIP_CHECK ON)
  elseif(HONE_HIP_CHECK STREQUAL "ON")
    message(FATAL_ERROR "HONE_HIP_CHECK=ON but hipcc or hip/hip_runtime.h was not found (Debian: hipcc libamdhip64-dev)")
  endif()
endif()
message(STATUS "hone: HIP build check ${HONE_WITH_HIP_CHECK}")

if(HONE_WITH_HIP_CHECK)
  set(hip_flags -x hip -std=c++20 -O2 -Wall -Wextra -Wno-unused-parameter -Werror -I${CMAKE_SOURCE_DIR}/src)
  foreach(arch IN LISTS HONE_HIP_ARCHITECTURES)
    list(APPEND hip_flags --offload-arch=${arch})
  endforeach()
  set(hip_objects)
  foreach(kernel activation adamw attention cross_entropy elementwise embedding norm rope)
    set(source ${CMAKE_SOURCE_DIR}/src/hone/kernels/cuda/${kernel}.cu)
    set(object ${CMAKE_BINARY_DIR}/hip_check/${kernel}.o)
    add_custom_command(
      OUTPUT ${object}
      COMMAND ${HONE_HIPCC} ${hip_flags} -MD -MF ${object}.d -c ${source} -o ${object}
      DEPENDS ${source}
      DEPFILE ${object}.d
      COMMENT "HIP build check: ${kernel}.cu for ${HONE_HIP_ARCHITECTURES}"
      VERBATIM)
    list(APPEND hip_objects ${object})
  endforeach()
  add_custom_target(hone_hip_check ALL DEPENDS ${hip_objects})
endif()
