#include "csrc/rules/states.h"

#include "csrc/rules/tensors.h"
#include "csrc/rules/text.h"

namespace ascend_kv {

std::vector<std::string> StateNames(const char* list, size_t count)
{
    std::vector<std::string> names;
    for (size_t i = 0; i < count; ++i) {
        names.push_back(std::string(list) + "[" + std::to_string(i) + "]");
    }
    return names;
}

void RequireStates(const std::vector<at::Tensor>& states, const std::vector<std::string>& names, bool written,
                   bool meta)
{
    std::vector<Named> named;
    for (size_t i = 0; i < states.size(); ++i) {
        const at::Tensor& state = states[i];
        RequireData(names[i], state, meta);
        const int64_t size = static_cast<int64_t>(state.element_size());
        TORCH_CHECK_TYPE(size == 1 || size == 2 || size == 4 || size == 8, names[i],
                         " must have an element type of 1, 2, 4 or 8 bytes, got ", TorchDtype(state.scalar_type()));
        TORCH_CHECK_VALUE(state.dim() >= 1, names[i], " must be a state cache [num_slots, ...] of at least one "
                          "dimension, got shape ", ShapeOf(state));
        if (written) {
            RequireWritable(names[i], state);
        }
        named.push_back({names[i], state});
    }
    if (states.empty()) {
        return;
    }
    RequireSameDevice(named);
    for (size_t i = 1; i < states.size(); ++i) {
        TORCH_CHECK_VALUE(states[i].sym_size(0) == states[0].sym_size(0), names[i], ".shape[0] (num_slots) = ",
                          states[i].sym_size(0), " must equal ", names[0], ".shape[0] = ", states[0].sym_size(0),
                          ": a slot index names one slot of every state");
    }
}

c10::SymInt SlotBytes(const at::Tensor& state)
{
    c10::SymInt elements = 1;
    for (const c10::SymInt& size : state.sym_sizes().slice(1)) {
        elements = elements * size;
    }
    return elements * static_cast<int64_t>(state.element_size());
}

}  // namespace ascend_kv
