#include "csrc/rules/state_transfer.h"

#include <unordered_map>

#include "csrc/rules/index_values.h"
#include "csrc/rules/kernel_domain.h"
#include "csrc/rules/memory.h"
#include "csrc/rules/states.h"
#include "csrc/rules/tensors.h"
#include "csrc/rules/text.h"

namespace ascend_kv {
namespace {

StateTransferCall CheckStateTransfer(bool gather, at::TensorList states, const at::Tensor& slot_ids,
                                     const at::Tensor& buffer, Check check)
{
    StateTransferCall call;
    call.gather = gather;
    call.states = states.vec();
    call.names = StateNames("states", states.size());
    call.buffer = buffer;
    call.slot_ids = slot_ids;
    const char* name = call.BufferName();
    const bool meta = AllowsMeta(check, states.empty() ? buffer : states[0]);
    RequireStates(call.states, call.names, /*written=*/!gather, meta);
    RequireData(name, buffer, meta);
    RequireDtype(name, buffer, {at::kByte});
    RequireIndexTensor("slot_ids", slot_ids, 1, meta);
    c10::SymInt row = 0;
    for (const at::Tensor& state : call.states) {
        row = row + SlotBytes(state);
    }
    TORCH_CHECK_VALUE(buffer.dim() == 2 && buffer.sym_size(0) == slot_ids.sym_size(0) && buffer.sym_size(1) == row,
                      name, " must have shape (", slot_ids.sym_size(0), ", ", row, ") ([len(slot_ids), the bytes of "
                      "one slot of every state]), got ", ShapeOf(buffer));
    if (!call.states.empty()) {
        const at::Device device = call.states[0].device();
        TORCH_CHECK_VALUE(buffer.is_cpu() || buffer.device() == device || (meta && buffer.is_meta()), name,
                          " must be on the states' device (", device, ") or on the host, got ", buffer.device());
        RequireIndexDevices(device, {{"slot_ids", slot_ids}});
    }
    if (check == Check::kShapes) {
        return call;
    }
    for (at::Tensor& state : call.states) {
        state = InMemoryOrder(state);  // a slot's bytes go in the order of their addresses
    }
    TORCH_CHECK_VALUE(buffer.size(1) <= 1 || buffer.stride(1) == 1, name, " must hold each row's bytes contiguously "
                      "(stride 1 along dim 1), got strides ", Tuple(buffer.strides()));
    int64_t offset = 0;
    for (const at::Tensor& state : call.states) {
        call.offsets.push_back(offset);
        offset += SlotBytes(state).expect_int();
    }
    std::vector<Named> named;
    for (size_t i = 0; i < call.states.size(); ++i) {
        named.push_back({call.names[i], call.states[i]});
    }
    if (gather) {
        RequireWritable(name, buffer);
        RequireApart(name, buffer, named);
        return call;
    }
    for (const Named& written : named) {
        RequireApart(written.name, written.tensor, {{name, buffer}});
    }
    RequireOutputsApart(named);
    return call;
}

}  // namespace

StateTransferCall CheckGatherStateSlots(at::TensorList states, const at::Tensor& slot_ids, const at::Tensor& out,
                                        Check check)
{
    return CheckStateTransfer(true, states, slot_ids, out, check);
}

StateTransferCall CheckScatterStateSlots(const at::Tensor& src, at::TensorList states, const at::Tensor& slot_ids,
                                         Check check)
{
    return CheckStateTransfer(false, states, slot_ids, src, check);
}

std::vector<int64_t> PlanStateTransfer(const StateTransferCall& call)
{
    const IndexTensors host = OnHost({call.slot_ids});
    const IndexReader reader(host[0]);
    std::vector<int64_t> ids(reader.Rows());
    const int64_t slots = call.states.empty() ? 0 : call.states[0].size(0);
    std::unordered_map<int64_t, int64_t> first;
    for (int64_t j = 0; j < reader.Rows(); ++j) {
        ids[j] = reader(j);
        if (ids[j] < 0 || call.states.empty()) {
            continue;  // padding (and with no state, nothing to name)
        }
        TORCH_CHECK_VALUE(ids[j] < slots, "slot_ids[", j, "] = ", ids[j], " is out of range: the states hold ", slots,
                          " slots");
        if (!call.gather) {
            const auto [at, inserted] = first.emplace(ids[j], j);
            TORCH_CHECK_VALUE(inserted, "slot_ids[", j, "] = ", ids[j], " repeats slot_ids[", at->second,
                              "]: scatter_state_slots writes a slot from one buffer row only");
        }
    }
    return ids;
}

}  // namespace ascend_kv
