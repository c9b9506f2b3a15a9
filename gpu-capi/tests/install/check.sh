#!/usr/bin/env bash
# Checks an installed C library (`cargo xtask install --prefix PREFIX`) as its users build
# against it: gpu-capi's C test program and C++ header test, compiled with
# `pkg-config --cflags --libs gpu-runtime` and with CMake's `find_package(gpu_runtime)`, each
# run on the host backend. Needs cc, c++, pkg-config and cmake. Usage: check.sh PREFIX
set -euo pipefail
prefix=$(realpath "${1:?usage: check.sh PREFIX}")
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GPU_RUNTIME_BACKEND=host
run() { # PROGRAM [ARGS]: runs a test program; it prints its checks, 0 failed
  "$@" | tail -1
}

echo "--- pkg-config: $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --modversion gpu-runtime)"
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs gpu-runtime)
cc -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror "$here/../c/api_test.c" $flags \
  -o "$work/api_test"
c++ -std=c++11 -Wall -Wextra -Wpedantic -Werror "$here/../c/header_test.cpp" $flags \
  -o "$work/header_test"
LD_LIBRARY_PATH="$prefix/lib" run "$work/api_test" "$work/trace.txt"
LD_LIBRARY_PATH="$prefix/lib" run "$work/header_test"

echo "--- cmake: find_package(gpu_runtime)"
cmake -S "$here" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" -DCMAKE_CXX_FLAGS="-Wall -Wextra -Wpedantic -Werror" \
  >/dev/null
cmake --build "$work/cmake" >/dev/null
# The shared library's folder is in the executable's build RPATH: no LD_LIBRARY_PATH.
run "$work/cmake/api_test" "$work/trace-cmake.txt"
run "$work/cmake/header_test"
echo "install check: ok"
