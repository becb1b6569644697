// How the rules' messages show values: as Python shows them, so an error reads the same from
// every backend and from the Python API (docs/semantics.md, "Errors and safety").
#pragma once

#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/core/SymInt.h>
#include <c10/util/ArrayRef.h>

namespace ascend_kv {

/// torch's name of a dtype without its module: "float16", "int8", "float8_e4m3fn".
std::string DtypeName(at::ScalarType dtype);

/// The dtype as Python prints it: "torch.float16".
std::string TorchDtype(at::ScalarType dtype);

/// "float16, bfloat16 or int8": a list of dtypes for a message.
std::string DtypeList(c10::ArrayRef<at::ScalarType> dtypes);

/// A shape as a Python tuple: "(2, 3)", "(5,)", "()".
std::string Tuple(c10::SymIntArrayRef values);
std::string Tuple(c10::IntArrayRef values);

/// A shape as a Python list: "[2, 3]".
std::string List(c10::SymIntArrayRef values);

/// tuple(t.shape) of a tensor.
inline std::string ShapeOf(const at::Tensor& t) { return Tuple(t.sym_sizes()); }

}  // namespace ascend_kv
