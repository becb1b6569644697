"""The support matrix: product lines, SoC names, and which operations Huawei documents on each line.

The one place of the tables of docs/hardware.md. The dispatcher, ``ascend-kv support-matrix``
and the README's support table (:func:`markdown_table`) all come from the data here.

A SoC name is what the runtime reports (``torch_npu.npu.get_device_name(i)``, from
``aclrtGetSocName()``), e.g. ``"Ascend910B3"``. Names match case-insensitively, ignoring
surrounding whitespace, by prefix; torch_npu's numeric ``SocVersion`` is never used (its values
changed between releases).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OPERATIONS = ("KVCacheOperation", "PagedCacheLoadOperation", "ReshapeAndCacheOperation", "BlockCopyOperation")
"""The operations of this package, by their ATB names."""

KERNEL_LINES = ("atlas-a3", "atlas-a2")
"""The product lines the package's AscendC kernels are built for (the ``dav-2201`` vector cores)."""


@dataclass(frozen=True)
class ProductLine:
    """One Atlas product line and the operations Huawei documents on it.

    Attributes
    ----------
    id : str
        Stable identifier, e.g. ``"atlas-a2"``.
    name : str
        Huawei's name of the line.
    soc_names : str
        The SoC names of the line, for people (the matching rules are :data:`SOC_PATTERNS`).
    supported_ops : tuple of str
        The operations (from :data:`OPERATIONS`) Huawei documents on this line.
    layouts : tuple of str
        The cache layouts (``"nd"``, ``"nz"``) Huawei documents for ReshapeAndCacheOperation here.
    layout_note : str
        Huawei's restriction on those layouts, if any (e.g. ``"float16 only"``).
    op_notes : tuple of (str, str)
        ``(operation, restriction)`` pairs for the other operations, as Huawei documents them
        (e.g. ``("BlockCopyOperation", "float16 only")``).
    """

    id: str
    name: str
    soc_names: str
    supported_ops: tuple[str, ...]
    layouts: tuple[str, ...] = ()
    layout_note: str = ""
    op_notes: tuple[tuple[str, str], ...] = ()

    def supports(self, op: str) -> bool:
        """Whether Huawei documents operation ``op`` (an :data:`OPERATIONS` name) on this line."""
        return _operation(op) in self.supported_ops

    def kernels_run(self, op: str) -> bool:
        """Whether the package's AscendC kernels run operation ``op`` on this line (elsewhere the fallback does)."""
        return self.supports(op) and self.id in KERNEL_LINES


_RESHAPE = ("ReshapeAndCacheOperation",)
_BLOCK_COPY_ND_NZ = (("BlockCopyOperation", "ND, NZ"),)
PRODUCT_LINES: tuple[ProductLine, ...] = (
    ProductLine("atlas-350", "Atlas 350 accelerator card", "Ascend950..., Ascend910_95...", _RESHAPE, ("nd",),
                "some scenarios"),
    ProductLine(
        "atlas-a3",
        "Atlas A3 training series / Atlas A3 inference series",
        "Ascend910_93... (e.g. Ascend910_9391, Ascend910_9382, Ascend910_9362)",
        OPERATIONS, ("nd", "nz"), "key-only too", _BLOCK_COPY_ND_NZ,
    ),
    ProductLine(
        "atlas-a2",
        "Atlas A2 training series / Atlas A2 inference series (Atlas 800I A2)",
        "Ascend910B followed by more characters (Ascend910B1, B2, B2C, B3, B4, B4-1)",
        OPERATIONS, ("nd", "nz"), "key-only too", _BLOCK_COPY_ND_NZ,
    ),
    ProductLine(
        "atlas-training",
        "Atlas training series (first-generation Ascend 910)",
        "Ascend910A, Ascend910ProA, Ascend910ProB, Ascend910PremiumA, exactly Ascend910B",
        _RESHAPE, ("nz",),
    ),
    ProductLine(
        "atlas-inference", "Atlas inference series (Ascend 310P)", "Ascend310P... (P1 to P7, incl. vir names)",
        (*_RESHAPE, "BlockCopyOperation"), ("nz",), "", (("BlockCopyOperation", "float16 only"),),
    ),
    ProductLine(
        "atlas-200i-500-a2", "Atlas 200I/500 A2 inference products (Ascend 310B)", "Ascend310B... (B1 to B4)",
        _RESHAPE, ("nz",), "float16 only",
    ),
)
"""Every known product line, in Huawei's documentation's order."""


@dataclass(frozen=True)
class SocPattern:
    """A rule mapping SoC names to a product line.

    Attributes
    ----------
    text : str
        Lower-case text the normalised name must start with (or equal, when ``exact``).
    exact : bool
        The name must equal ``text``; such rules win over prefix rules.
    line : str
        The product line id.
    """

    text: str
    exact: bool
    line: str

    def matches(self, normalised: str) -> bool:
        """Whether the normalised (stripped, lower-case) name falls under this rule."""
        return normalised == self.text if self.exact else normalised.startswith(self.text)


SOC_PATTERNS: tuple[SocPattern, ...] = (
    SocPattern("ascend910b", True, "atlas-training"),  # the first-generation part, as ATB treats it
    SocPattern("ascend910b", False, "atlas-a2"),
    SocPattern("ascend910_93", False, "atlas-a3"),
    SocPattern("ascend950", False, "atlas-350"),
    SocPattern("ascend910_95", False, "atlas-350"),
    SocPattern("ascend910a", False, "atlas-training"),
    SocPattern("ascend910proa", False, "atlas-training"),
    SocPattern("ascend910prob", False, "atlas-training"),
    SocPattern("ascend910premiuma", False, "atlas-training"),
    SocPattern("ascend310p", False, "atlas-inference"),
    SocPattern("ascend310b", False, "atlas-200i-500-a2"),
)
"""SoC-name rules. Exact rules first; no two prefix rules overlap."""

_BY_ID = {line.id: line for line in PRODUCT_LINES}


def _operation(op: str) -> str:
    if op not in OPERATIONS:
        raise ValueError(f"op must be one of {', '.join(OPERATIONS)}, got {op!r}")
    return op


def normalise_soc_name(soc: str) -> str:
    """``soc`` stripped of surrounding whitespace and lower-cased: the form the rules match."""
    if not isinstance(soc, str):
        raise TypeError(f"soc must be a str, got {type(soc).__name__}")
    return soc.strip().lower()


def product_line(soc: str) -> ProductLine | None:
    """The product line of SoC name ``soc``, or None when no rule knows the name.

    Examples
    --------
    >>> product_line("Ascend910B3").id, product_line(" ascend910b ").id, product_line("Ascend910C")
    ('atlas-a2', 'atlas-training', None)
    """
    name = normalise_soc_name(soc)
    for pattern in SOC_PATTERNS:  # exact rules come first, prefix rules never overlap
        if pattern.matches(name):
            return _BY_ID[pattern.line]
    return None


def is_supported(op: str, soc: str) -> bool:
    """Whether Huawei documents operation ``op`` on SoC ``soc`` (False for unknown SoCs)."""
    _operation(op)
    line = product_line(soc)
    return line is not None and line.supports(op)


def matrix() -> dict[str, dict[str, bool]]:
    """The whole matrix: ``{product line id: {operation: documented}}``, in table order."""
    return {line.id: {op: line.supports(op) for op in OPERATIONS} for line in PRODUCT_LINES}


def line_answer(line: ProductLine | None) -> dict[str, Any]:
    """What ``ascend-kv support-matrix --json`` says of a product line (None: an unknown SoC's).

    Returns
    -------
    dict
        ``{"ops": {operation: bool}, "layouts": {"ReshapeAndCacheOperation": [layout, ...]},
        "kernels_run": {operation: bool}}``: what Huawei documents on the line, and where
        ascend_kv's own kernels run (:meth:`ProductLine.kernels_run`; elsewhere the fallback).
    """
    return {
        "ops": {op: line is not None and line.supports(op) for op in OPERATIONS},
        "layouts": {"ReshapeAndCacheOperation": [] if line is None else list(line.layouts)},
        "kernels_run": {op: line is not None and line.kernels_run(op) for op in OPERATIONS},
    }


def soc_answer(soc: str) -> dict[str, Any]:
    """The answer for one SoC, as ``ascend-kv support-matrix --soc NAME --json`` prints it.

    Returns
    -------
    dict
        ``{"soc": soc, "product_line": id or None, **line_answer(line)}`` (:func:`line_answer`;
        nothing documented for an unknown SoC); ``soc`` is echoed as given.
    """
    line = product_line(soc)
    return {"soc": soc, "product_line": None if line is None else line.id, **line_answer(line)}


def _cell(line: ProductLine, op: str) -> str:
    if not line.supports(op):
        return "no"
    if op != "ReshapeAndCacheOperation":
        note = dict(line.op_notes).get(op)
        return f"yes ({note})" if note else "yes"
    note = f"; {line.layout_note}" if line.layout_note else ""
    return f"yes ({', '.join(layout.upper() for layout in line.layouts)}{note})"


def markdown_table() -> str:
    """The support matrix as a Markdown table (the README's table is exactly this text)."""
    header = ["Product line", "id", "SoC names", *OPERATIONS, "ascend_kv's kernels"]
    rows = [
        [line.name, f"`{line.id}`", line.soc_names, *(_cell(line, op) for op in OPERATIONS),
         "yes" if line.id in KERNEL_LINES else "no (the fallback runs on the NPU)"]
        for line in PRODUCT_LINES
    ]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
