// The torch headers most of the library's files include, compiled once per build into a
// precompiled header where the compiler is GCC (ascend_kv/operators/build.py): parsing them is
// most of the time of a file's compile. Every file still includes what it uses.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
