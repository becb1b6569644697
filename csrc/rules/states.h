// The rules of a list of state caches (docs/semantics.md §14): hybrid models' per-request recurrent
// and convolution states, each a tensor [num_slots, ...] indexed by slot.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>

namespace ascend_kv {

/// "<list>[i]" for each of `count` states.
std::vector<std::string> StateNames(const char* list, size_t count);

/// Each state a dense tensor [num_slots, ...] of at least one dim whose elements are 1, 2, 4 or 8
/// bytes (TypeError / ValueError naming it); written ones writable; all on one device with one
/// num_slots (`meta`: a shapes-only check of meta tensors).
void RequireStates(const std::vector<at::Tensor>& states, const std::vector<std::string>& names, bool written,
                   bool meta);

/// Bytes of one slot of `state`: the elements of state.shape[1:] times the element size.
c10::SymInt SlotBytes(const at::Tensor& state);

}  // namespace ascend_kv
