"""The domain of the operations (docs/semantics.md): the checked forms of a call and the rules
that make them, shared by every implementation."""
