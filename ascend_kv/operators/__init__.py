"""PyTorch's side: the operators ``torch.ops.ascend_kv.*``, their per-device implementations and
how ``torch.compile`` functionalizes them."""
