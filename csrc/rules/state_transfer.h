// The rules of gather_state_slots and scatter_state_slots (docs/semantics.md §14.2): slots of every
// state of every layer to or from one byte buffer, each slot's bytes as they are (no relayout).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "csrc/rules/check.h"

namespace ascend_kv {

/// A checked gather_state_slots or scatter_state_slots call. Item (c, j) moves slot slot_ids[j] of
/// states[c] to or from bytes [offsets[c], offsets[c] + slot bytes of c) of buffer row j, the slot's
/// elements in the order of their addresses (a checked call's states are InMemoryOrder views).
struct StateTransferCall {
    bool gather = true;               ///< gather: states -> buffer; scatter: buffer -> states
    std::vector<at::Tensor> states;   ///< [num_slots, ...] each, one device and num_slots
    std::vector<std::string> names;
    at::Tensor buffer;                ///< out / src: [n, sum of slot bytes] uint8, rows contiguous
    at::Tensor slot_ids;              ///< [n] int32/int64; negative entries are padding
    std::vector<int64_t> offsets;     ///< per state, where its slot starts in a buffer row (kCall only)

    const char* BufferName() const { return gather ? "out" : "src"; }
};

StateTransferCall CheckGatherStateSlots(at::TensorList states, const at::Tensor& slot_ids, const at::Tensor& out,
                                        Check check);

StateTransferCall CheckScatterStateSlots(const at::Tensor& src, at::TensorList states, const at::Tensor& slot_ids,
                                         Check check);

/// The rules of a call on its slot ids (read on the host, one transfer at most): each negative
/// (padding) or in [0, num_slots), and for scatter_state_slots the non-negative ones distinct. Returns them.
std::vector<int64_t> PlanStateTransfer(const StateTransferCall& call);

}  // namespace ascend_kv
