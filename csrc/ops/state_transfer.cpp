// gather_state_slots and scatter_state_slots (docs/semantics.md §14.2): the slots of every state of
// every layer to or from one byte buffer in one call. The kernel is block_copy's in its transfer
// mode (a state slot is a block whose other side is a dense run of a buffer row).
#include <algorithm>

#include "cpu_fallback/host.h"
#include "cpu_fallback/on_device.h"
#include "csrc/ops/ops.h"
#include "csrc/ops/route.h"
#include "csrc/ops/upload.h"
#include "csrc/rules/formats.h"
#include "csrc/rules/kernel_domain.h"
#include "csrc/rules/state_transfer.h"

namespace ascend_kv {
namespace {

/// The states with bytes to move, as the [num_slots, rows, row] views the kernel copies (each in
/// its domain), and where each one's slot starts in a buffer row.
void Launch(const KernelLibrary& kernels, const StateTransferCall& call, const at::Tensor& ids)
{
    std::vector<at::Tensor> views;
    std::vector<int64_t> offsets;
    for (size_t c = 0; c < call.states.size(); ++c) {
        const at::Tensor& state = call.states[c];
        if (state.numel()) {
            const BlockRows rows = *BlockRowsOf(state);
            views.push_back(state.as_strided({state.size(0), rows.rows, rows.row}, {rows.block_stride, rows.row_stride, 1}));
            offsets.push_back(call.offsets[c]);
        }
    }
    if (!views.empty()) {
        kernels.transfer_slots(views, offsets, call.buffer, ids, call.gather);
    }
}

/// Why the kernel cannot move the call's slots in place, or "" when it can.
std::string OutsideReason(const StateTransferCall& call)
{
    return BlockCopyOutsideReason(call.states, /*simultaneous=*/false, 0, "state");
}

/// The sim on host tensors: states outside the kernel's domain run on contiguous copies.
void RunOnSim(const StateTransferCall& call)
{
    StateTransferCall ran = call;
    for (at::Tensor& state : ran.states) {
        state = state.numel() && !BlockRowsOf(state) ? state.contiguous() : state;
    }
    Count(Ran::kSim);
    Launch(Kernels(Backend::kSim), ran, OnDevice({call.slot_ids}, call.buffer.device())[0]);
    if (!call.gather) {
        for (size_t c = 0; c < call.states.size(); ++c) {
            WriteBack(call.states[c], ran.states[c]);
        }
    }
}

/// Every tensor of a device call in its device's base storage format.
void RequireFormats(const StateTransferCall& call)
{
    std::vector<Named> named{{call.BufferName(), call.buffer}};
    for (size_t c = 0; c < call.states.size(); ++c) {
        named.push_back({call.names[c], call.states[c]});
    }
    RequireBaseFormats(named);
}

/// One backend call for every state of a checked call.
void Run(StateTransferCall& call)
{
    if (call.states.empty() || call.slot_ids.size(0) == 0) {
        return;
    }
    const at::Device device = call.states[0].device();
    if (device.is_cpu()) {
        const std::vector<int64_t> ids = PlanStateTransfer(call);
        if (HostBackend(Operation::kBlockCopy) == Backend::kSim) {
            RunOnSim(call);
            return;
        }
        Count(Ran::kHostPaths);
        host::TransferStateSlots(call, ids);
        return;
    }
    RequireFormats(call);
    bool skips = true;  // whether some id may write nothing: then a host buffer's rows go up first
    if (ReadsValues({call.slot_ids})) {
        const std::vector<int64_t> ids = PlanStateTransfer(call);
        skips = std::any_of(ids.begin(), ids.end(), [](int64_t id) { return id < 0; });
    }
    call.slot_ids = OnDevice({call.slot_ids}, device)[0];
    const at::Tensor given = call.buffer;
    call.buffer = BufferOnDevice(given, device, !call.gather || skips);
    if (DeviceBackend(Operation::kBlockCopy, device, OutsideReason(call)) == Backend::kNpu) {
        Count(Ran::kKernels);
        Launch(Kernels(Backend::kNpu), call, call.slot_ids);
    } else {
        Count(Ran::kDeviceFallback);
        on_device::TransferStateSlots(call);
    }
    if (call.gather) {
        BufferBack(given, call.buffer);
    }
}

}  // namespace

void GatherStateSlots(at::TensorList states, const at::Tensor& slot_ids, const at::Tensor& out)
{
    BelowAutograd guard;
    StateTransferCall call = CheckGatherStateSlots(states, slot_ids, out, Check::kCall);
    Run(call);
}

void GatherStateSlotsMeta(at::TensorList states, const at::Tensor& slot_ids, const at::Tensor& out)
{
    NoteTracing();
    CheckGatherStateSlots(states, slot_ids, out, Check::kShapes);
}

void ScatterStateSlots(const at::Tensor& src, at::TensorList states, const at::Tensor& slot_ids)
{
    BelowAutograd guard;
    StateTransferCall call = CheckScatterStateSlots(src, states, slot_ids, Check::kCall);
    Run(call);
}

void ScatterStateSlotsMeta(const at::Tensor& src, at::TensorList states, const at::Tensor& slot_ids)
{
    NoteTracing();
    CheckScatterStateSlots(src, states, slot_ids, Check::kShapes);
}

}  // namespace ascend_kv
