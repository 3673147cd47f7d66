# Cross build for AArch64 Linux with Debian's gcc-aarch64-linux-gnu
# (scripts/aarch64.sh).  Its tests run under RPAL_QEMU, a qemu-aarch64 of
# version 8 or later, with the target's libraries from the cross sysroot.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_ASM_COMPILER aarch64-linux-gnu-gcc)
set(RPAL_AARCH64_SYSROOT /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH ${RPAL_AARCH64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
if(RPAL_QEMU)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${RPAL_QEMU} -L ${RPAL_AARCH64_SYSROOT})
endif()
