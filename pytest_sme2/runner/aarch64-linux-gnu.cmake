# Cross-compiles sme2_runner for Linux aarch64 (run under qemu-aarch64 or on a device).
#
# Needs Debian's g++-aarch64-linux-gnu and an aarch64 executorch wheel unpacked somewhere, passed
# as -DEXECUTORCH_PACKAGE_DIR=<unpacked>/executorch. The triple and the target's library root can
# be overridden with -DSME2_CROSS_TRIPLE=... and -DSME2_CROSS_ROOT=....
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(SME2_CROSS_TRIPLE "aarch64-linux-gnu" CACHE STRING "GNU triple of the cross compiler")
set(SME2_CROSS_ROOT "/usr/${SME2_CROSS_TRIPLE}" CACHE PATH "The target's headers and libraries")

set(CMAKE_C_COMPILER "${SME2_CROSS_TRIPLE}-gcc")
set(CMAKE_CXX_COMPILER "${SME2_CROSS_TRIPLE}-g++")

# Debian's cross compilers already search ${SME2_CROSS_ROOT}/{include,lib}; it is not a sysroot
# in the --sysroot sense (no usr/ inside), so only CMake's own searches are pointed at it. The
# executorch package is found through executorch_DIR, which these modes do not reroot.
set(CMAKE_FIND_ROOT_PATH "${SME2_CROSS_ROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
