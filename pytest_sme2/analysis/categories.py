"""Operator events → the five canonical categories (and a finer sub-category).

The categories are the user's: Convolution, GEMM, Data Movement, Elementwise, Other. Other is the
residual of E2E in ``analysis``; here it also takes the leaf operators that are none of the four.
Only leaf operator events are classified (XNNPACK operators and ``native_call_*`` kernels, see
``is_leaf``); wrappers (``Method::execute``, ``DELEGATE_CALL``, ``OPERATOR_CALL``, ...) contain
them and would count the same time twice.

The decision is made on the parsed operator (``ops.parse_op_name``), never on a substring of the
raw name. Sub-category → category, and why:

=====================  =============  =======================================================
sub-category           category       why
=====================  =============  =======================================================
convolution            Convolution    IGEMM/GEMM/SPMM/HWC2CHW convolutions
depthwise convolution  Convolution    ``DWConv`` microkernel: still a convolution, never SME
deconvolution          Convolution    a transposed convolution (``Subconv2D``/IGEMM)
fully connected        GEMM           one matrix product per call (``Fully Connected``, addmm)
batch matmul           GEMM           ``Batch Matrix Multiply``, bmm/matmul: matrix products
attention              GEMM           fused scaled-dot-product attention is two batch matmuls
transpose              Data Movement  permutes elements (also depth↔space, channel shuffle)
reshape/copy           Data Movement  moves or copies bytes unchanged (incl. ``Pack LH``)
concat/split/slice     Data Movement  copies pieces of tensors; gathers and embeddings too
pad                    Data Movement  copies a tensor into a larger, constant-filled one
resize                 Data Movement  resamples neighbours (bilinear/nearest): memory-bound
quantize/convert       Data Movement  dtype casts and (de)quantization: the reference kit's
                                      categorize() counts convert and copy as Data Movement,
                                      and published SME2 shares use it
unary                  Elementwise    one input, one output element per element
binary                 Elementwise    two inputs broadcast element by element
pooling                Other          windowed reductions: not a GEMM, not per-element
normalization          Other          row statistics then a per-element map, both
softmax                Other          a row reduction (max, sum) around an exponential
reduction              Other          mean/sum/max over axes: not per-element
other                  Other          anything not recognised (overridable by config)
=====================  =============  =======================================================

A ``Classifier`` carries user overrides (``"Operator Name = Category"`` lines, keyed by parsed
operator or by the full name without `` #n``); the module-level functions use the defaults.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pytest_sme2.analysis.ops import OpName, parse_op_name
from pytest_sme2.errors import ConfigError

CONVOLUTION, GEMM, DATA_MOVEMENT, ELEMENTWISE, OTHER = (
    "Convolution",
    "GEMM",
    "Data Movement",
    "Elementwise",
    "Other",
)
CATEGORIES = (CONVOLUTION, GEMM, DATA_MOVEMENT, ELEMENTWISE, OTHER)

SUBCATEGORY_CATEGORY: Mapping[str, str] = MappingProxyType(
    {
        "convolution": CONVOLUTION,
        "depthwise convolution": CONVOLUTION,
        "deconvolution": CONVOLUTION,
        "fully connected": GEMM,
        "batch matmul": GEMM,
        "attention": GEMM,
        "transpose": DATA_MOVEMENT,
        "reshape/copy": DATA_MOVEMENT,
        "concat/split/slice": DATA_MOVEMENT,
        "pad": DATA_MOVEMENT,
        "resize": DATA_MOVEMENT,
        "quantize/convert": DATA_MOVEMENT,
        "unary": ELEMENTWISE,
        "binary": ELEMENTWISE,
        "pooling": OTHER,
        "normalization": OTHER,
        "softmax": OTHER,
        "reduction": OTHER,
        "other": OTHER,
    }
)


def _table(groups: Mapping[str, str]) -> Mapping[str, str]:
    """``{sub-category: "op | op | ..."}`` → ``{op: sub-category}``: shorter than 200 pairs."""
    return MappingProxyType(
        {op.strip(): sub for sub, ops in groups.items() for op in ops.split("|") if op.strip()}
    )


# XNNPACK operator types (the part before the parentheses), as named by the XNNPACK in the
# executorch 1.5.1 wheels plus older spellings (``Leaky ReLU``, ``Tanh``, ``Concatenate``).
# ``Convolution`` is decided by microkernel (``DWConv`` → depthwise) in ``_subcategory``.
XNNPACK_OPERATORS = _table(
    {
        "deconvolution": "Deconvolution",
        "fully connected": "Fully Connected | Dynamic Fully Connected",
        "batch matmul": "Batch Matrix Multiply",
        "attention": "Scaled Dot-Product Attention",
        "transpose": "Transpose | Depth To Space | Space To Depth | Channel Shuffle",
        "reshape/copy": "Static Reshape | Static Expand Dims | Fuse Dims | Split Dims | Copy"
        " | Pack LH",
        "concat/split/slice": "Slice | Concatenate | Even Split",
        "pad": "Constant Pad",
        "resize": "Resize Bilinear | Unpooling",
        "quantize/convert": "Convert",
        "unary": "Abs | ApproxGELU | GELU | Bankers Rounding | Bankders Rounding | Ceiling | Clamp"
        " | Exp | Floor | HardSwish | LeakyReLU | Leaky ReLU | ELU | Log | Negate"
        " | Reciprocal Square Root | Sigmoid | Square | Square Root | TanH | Tanh | Cube Root"
        " | Cosine | Sine | Count Leading Zeros | Bitwise Not | Population Count | Sign"
        " | Truncation | Unary Elementwise | Invalid Unary Op",
        "binary": "Add | Multiply | Subtract | Divide | Copy Sign | Squared Difference | PReLU"
        " | Minimum | Maximum | Modulus | ATan2 | Power | Bitwise And | Bitwise Or"
        " | Bitwise Xor | AND | OR | XOR | Shift Left | Shift Right Logical"
        " | Shift Right Arithmetic | Binary Elementwise | Invalid Binary Op | RoPE",
        "pooling": "Max Pooling | Average Pooling | Global Average Pooling | Global Sum Pooling"
        " | ArgMax Pooling",
        "normalization": "Normalize",
        "softmax": "Softmax",
        "reduction": "Mean | Mean Squared | Sum | Sum Squared | Reduce Max | Reduce Min",
    }
)

# ExecuTorch kernels (``native_call_<op>.<overload>``): aten/edge op names, namespace stripped.
NATIVE_OPERATORS = _table(
    {
        "convolution": "convolution | conv1d | conv2d | conv3d | _convolution",
        "deconvolution": "conv_transpose1d | conv_transpose2d | conv_transpose3d",
        "fully connected": "addmm | mm | linear",
        "batch matmul": "bmm | baddbmm | matmul",
        "attention": "scaled_dot_product_attention | sdpa_with_kv_cache | custom_sdpa",
        "transpose": "permute_copy | transpose_copy | t_copy | pixel_shuffle | pixel_unshuffle",
        "reshape/copy": "view_copy | expand_copy | repeat | squeeze_copy | unsqueeze_copy | clone"
        " | _clone_dim_order | copy | alias_copy | fill | full | full_like | zeros | ones"
        " | scalar_tensor | update_cache",
        "concat/split/slice": "cat | stack | slice_copy | slice_scatter | split_copy"
        " | split_with_sizes_copy | unbind_copy | select_copy | select_scatter | narrow_copy"
        " | index | index_select | index_put | gather | scatter | scatter_add | embedding"
        " | roll | flip | tril | triu",
        "pad": "constant_pad_nd | pad | reflection_pad1d | reflection_pad2d | replication_pad1d"
        " | replication_pad2d",
        "resize": "upsample_bilinear2d | upsample_nearest2d | upsample_bicubic2d"
        " | _upsample_bilinear2d_aa | grid_sampler_2d",
        # _to_dim_order_copy is a dtype cast or a memory-format change; the name cannot tell,
        # and in lowered programs it is the cast (fp16 ↔ fp32 around non-delegated ops).
        "quantize/convert": "_to_dim_order_copy | _to_copy | quantize_per_tensor"
        " | dequantize_per_tensor | quantize_per_channel | dequantize_per_channel"
        " | quantize_per_token | dequantize_per_token | choose_qparams"
        " | choose_qparams_per_token_asymmetric",
        "unary": "abs | relu | relu6 | gelu | sigmoid | tanh | hardswish | hardsigmoid | hardtanh"
        " | silu | elu | leaky_relu | prelu | exp | expm1 | log | log1p | log2 | log10 | sqrt"
        " | rsqrt | reciprocal | neg | clamp | clamp_min | clamp_max | floor | ceil | round"
        " | trunc | sign | sin | cos | tan | erf | logical_not | bitwise_not | isnan | isinf"
        " | softplus | mish | glu | nan_to_num",
        "binary": "add | sub | rsub | mul | div | pow | maximum | minimum | fmod | masked_fill"
        " | remainder | atan2 | eq | ne | lt | le | gt | ge | logical_and | logical_or"
        " | logical_xor | bitwise_and | bitwise_or | bitwise_xor | where | lerp | floor_divide"
        " | addcmul | addcdiv",
        "pooling": "max_pool2d | max_pool2d_with_indices | avg_pool2d | adaptive_avg_pool2d"
        " | _adaptive_avg_pool2d | adaptive_max_pool2d | max_pool1d | avg_pool1d"
        " | max_unpool2d",
        "normalization": "native_layer_norm | layer_norm | native_batch_norm"
        " | _native_batch_norm_legit | _native_batch_norm_legit_no_training | native_group_norm"
        " | group_norm | instance_norm | rms_norm",
        "softmax": "_softmax | softmax | _log_softmax | log_softmax",
        "reduction": "mean | sum | amax | amin | max | min | argmax | argmin | var | var_mean"
        " | std | prod | cumsum | any | all | logsumexp | linalg_vector_norm | norm",
    }
)


def _subcategory(op: OpName) -> str:
    """The default sub-category of a parsed name ("other" when not an operator we know)."""
    if op.source == "xnnpack":
        if op.operator == "Convolution":
            return "depthwise convolution" if op.microkernel == "DWConv" else "convolution"
        return XNNPACK_OPERATORS.get(op.operator, "other")
    if op.source == "native":
        return NATIVE_OPERATORS.get(op.operator, "other")
    return "other"


def is_leaf(event_name: str) -> bool:
    """True for the events that are classified: XNNPACK operators and ``native_call_*`` kernels.

    Wrappers (``Method::execute``, ``DELEGATE_CALL``, ``OPERATOR_CALL``, ...) and names of unknown
    shape are not: their time is made of leaves (or is overhead, which lands in Other as residual).
    """
    return parse_op_name(event_name).source in ("xnnpack", "native")


def canonical_category(name: str) -> str | None:
    """``"data movement"`` → ``"Data Movement"``; None if ``name`` is not one of the five."""
    folded = name.strip().casefold()
    return next((c for c in CATEGORIES if c.casefold() == folded), None)


@dataclass(frozen=True)
class Classifier:
    """Default classification plus per-operator overrides.

    ``overrides`` maps an operator (parsed ``operator``, e.g. ``"Resize Bilinear"`` or
    ``"addmm"``) or a full name without `` #n`` (``"Convert (NC, F32, QD8)"``) to a category;
    keys match case-insensitively and the full-name key wins over the operator key. The
    sub-category is not overridden (it describes what the operator is, not where it is counted).
    """

    overrides: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        normalized: dict[str, str] = {}
        for key, value in self.overrides.items():
            category = canonical_category(value)
            if category is None or not key.strip():
                raise ConfigError(
                    f"category override {key!r} = {value!r}: expected 'Operator Name = Category'"
                    f" with Category one of {', '.join(CATEGORIES)}"
                )
            normalized[key.strip().casefold()] = category
        object.__setattr__(self, "overrides", MappingProxyType(normalized))

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.overrides.items())))

    @classmethod
    def from_lines(
        cls, lines: Iterable[str], source: str = "sme2_category_overrides"
    ) -> Classifier:
        """Overrides from ``"Operator Name = Category"`` lines (an ini ``linelist``).

        Blank lines and lines starting with ``#`` or ``;`` are skipped. ``source`` names where the
        lines came from (an ini option or a file) in the ``ConfigError`` for a bad line.
        """
        overrides: dict[str, str] = {}
        for number, line in _numbered(lines):
            key, sep, value = line.partition("=")
            category = canonical_category(value)
            if not sep or not key.strip() or not value.strip():
                raise ConfigError(
                    f"{source}, line {number} {line!r}: expected 'Operator Name = Category'"
                )
            if category is None:
                raise ConfigError(
                    f"{source}, line {number} {line!r}: unknown category {value.strip()!r}"
                    f" (choose one of {', '.join(CATEGORIES)})"
                )
            overrides[key.strip()] = category
        return cls(overrides)

    def classify(self, event_name: str) -> str:
        """One of ``CATEGORIES`` for any event name (wrappers and unknown names → Other)."""
        op = parse_op_name(event_name)
        if self.overrides:
            override = self.overrides.get(op.key.casefold()) or self.overrides.get(
                op.operator.casefold()
            )
            if override is not None:
                return override
        return SUBCATEGORY_CATEGORY[_subcategory(op)]

    def is_leaf(self, event_name: str) -> bool:
        """Whether ``event_name`` is classified at all (see module-level ``is_leaf``)."""
        return is_leaf(event_name)

    def subcategory(self, event_name: str) -> str:
        """The finer kind of operator (a key of ``SUBCATEGORY_CATEGORY``), "other" if unknown."""
        return _subcategory(parse_op_name(event_name))


def _numbered(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """(1-based line number, stripped line) for the lines that carry a setting."""
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if text and not text.startswith(("#", ";")):
            yield number, text


DEFAULT = Classifier()


def classify(event_name: str) -> str:
    """The default category of an event name; see the table in the module docstring."""
    return DEFAULT.classify(event_name)


def subcategory(event_name: str) -> str:
    """The default sub-category of an event name; see the table in the module docstring."""
    return DEFAULT.subcategory(event_name)
