"""Classification into the five categories: the known traps, real names, SME twins, overrides."""

from __future__ import annotations

import re

import pytest
from test_ops import FRAMEWORK, REAL_NATIVE, REAL_XNNPACK, SME_XNNPACK

from pytest_sme2.analysis import categories
from pytest_sme2.analysis.categories import (
    CATEGORIES,
    NATIVE_OPERATORS,
    SUBCATEGORY_CATEGORY,
    XNNPACK_OPERATORS,
    Classifier,
    classify,
    is_leaf,
    subcategory,
)
from pytest_sme2.errors import ConfigError

CONV, GEMM, DM, EW, OTHER = CATEGORIES

# Every trap of ETDump operator names (substring matching gets each one wrong): (name, category,
# sub).
TRAPS = {
    # Convert is Data Movement, as the reference kit's categorize() counts it (issue 10)
    "convert-is-not-convolution": ("Convert (NC, F32, QD8) #1", DM, "quantize/convert"),
    "convert-qdu8-is-not-convolution": ("Convert (NC, F32, QDU8) #2", DM, "quantize/convert"),
    "dim-order-copy-is-data-movement": (
        "native_call__to_dim_order_copy.out",
        DM,
        "quantize/convert",
    ),
    "resize-bilinear-is-not-gemm": ("Resize Bilinear (NHWC) #1", DM, "resize"),
    "batch-matmul-is-gemm": ("Batch Matrix Multiply (NC, F32) GEMM #1", GEMM, "batch matmul"),
    "batch-matmul-without-microkernel-is-gemm": (
        "Batch Matrix Multiply (NC, F32)",
        GEMM,
        "batch matmul",
    ),
    "addmm-is-gemm-not-add": ("native_call_addmm.out", GEMM, "fully connected"),
    "deconvolution-is-convolution": (
        "Deconvolution (NHWC, F32) Subconv2D #1",
        CONV,
        "deconvolution",
    ),
    "max-pooling-is-not-elementwise": ("Max Pooling (NHWC, F32) #1", OTHER, "pooling"),
    "dwconv-is-convolution": ("Convolution (NHWC, F32) DWConv #1", CONV, "depthwise convolution"),
    "copy-sign-is-not-a-copy": ("Copy Sign (ND) #1", EW, "binary"),
    "average-pooling-microkernel-is-pooling": (
        "Average Pooling (NHWC, F32) Average Pooling #1",
        OTHER,
        "pooling",
    ),
    "mean-reduce2-is-a-reduction": ("Mean (ND) Reduce2 #1", OTHER, "reduction"),
    "native-layer-norm-is-normalization": (
        "native_call_native_layer_norm.out",
        OTHER,
        "normalization",
    ),
    "invalid-unary-op-is-unary": ("Invalid Unary Op #1", EW, "unary"),
}


def _each(category: str, names: str) -> dict[str, str]:
    return {name.strip(): category for name in names.split("|")}


# Category of every operator in the real-name tables of test_ops (Convolution by microkernel).
XNNPACK_CATEGORY = {
    **_each(CONV, "Convolution | Deconvolution"),
    **_each(GEMM, "Fully Connected | Batch Matrix Multiply"),
    **_each(DM, "Transpose | Static Reshape | Copy | Constant Pad | Resize Bilinear | Convert"),
    **_each(
        EW,
        "Abs | Add | Ceiling | Clamp | Divide | Exp | Floor | GELU | HardSwish"
        " | LeakyReLU | Log | Maximum | Minimum | Multiply | Negate | Sigmoid | Square | Subtract"
        " | TanH | Invalid Unary Op | Reciprocal Square Root | Square Root",
    ),
    **_each(OTHER, "Average Pooling | Max Pooling | Mean | Softmax"),
}
NATIVE_CATEGORY = {
    **_each(CONV, "convolution"),
    **_each(GEMM, "addmm | bmm"),
    **_each(
        DM,
        "_clone_dim_order | _to_dim_order_copy | cat | constant_pad_nd | expand_copy"
        " | permute_copy | repeat | slice_copy | split_with_sizes_copy | upsample_bilinear2d",
    ),
    **_each(
        EW,
        "abs | add | ceil | clamp | div | elu | exp | floor | gelu | hardtanh"
        " | leaky_relu | log | maximum | minimum | mul | neg | pow | relu | rsqrt | sigmoid | sqrt"
        " | sub | tanh",
    ),
    **_each(
        OTHER,
        "_native_batch_norm_legit_no_training | _softmax | avg_pool2d | max_pool2d_with_indices"
        " | mean | native_layer_norm",
    ),
}


@pytest.mark.parametrize(("name", "category", "sub"), TRAPS.values(), ids=TRAPS.keys())
def test_traps(name: str, category: str, sub: str) -> None:
    assert (classify(name), subcategory(name), is_leaf(name)) == (category, sub, True)


@pytest.mark.parametrize("row", REAL_XNNPACK, ids=[row[0] for row in REAL_XNNPACK])
def test_real_xnnpack_names(row: tuple) -> None:
    name, operator = row[0], row[1]
    assert classify(name) == XNNPACK_CATEGORY[operator]
    assert subcategory(name) != "other"
    assert is_leaf(name)


@pytest.mark.parametrize(("name", "operator"), REAL_NATIVE, ids=[row[0] for row in REAL_NATIVE])
def test_real_native_names(name: str, operator: str) -> None:
    assert classify(name) == NATIVE_CATEGORY[operator]
    assert subcategory(name) != "other"
    assert is_leaf(name)


_UNPACKED = {"PF32": "F32", "PF16": "F16", "PQS8": "QS8"}


@pytest.mark.parametrize("name", [row[0] for row in SME_XNNPACK])
def test_packed_variants_classify_like_their_unpacked_twins(name: str) -> None:
    twin = re.sub(r"\b(PF32|PF16|PQS8)\b", lambda m: _UNPACKED[m[1]], name)
    assert classify(name) == classify(twin) in (CONV, GEMM)
    assert subcategory(name) == subcategory(twin)


@pytest.mark.parametrize("name", FRAMEWORK)
def test_wrappers_are_not_leaves(name: str) -> None:
    assert not is_leaf(name)
    assert (classify(name), subcategory(name)) == (OTHER, "other")


@pytest.mark.parametrize("name", ["delegate#3", "<unnamed>", "", "Something Else"])
def test_unknown_names_are_other_and_not_leaves(name: str) -> None:
    assert (classify(name), subcategory(name), is_leaf(name)) == (OTHER, "other", False)


def test_unknown_operators_of_known_shape_are_other_leaves() -> None:
    for name in ("Frobnicate (NC, F32) #1", "native_call_frobnicate.out"):
        assert (classify(name), subcategory(name), is_leaf(name)) == (OTHER, "other", True)


def test_tables_map_into_the_five_categories() -> None:
    assert CATEGORIES == ("Convolution", "GEMM", "Data Movement", "Elementwise", "Other")
    assert set(SUBCATEGORY_CATEGORY.values()) == set(CATEGORIES)
    used = set(XNNPACK_OPERATORS.values()) | set(NATIVE_OPERATORS.values())
    assert used <= set(SUBCATEGORY_CATEGORY)


def test_docstring_table_matches_the_mapping() -> None:
    """The module docstring documents every sub-category; it must not drift from the code."""
    rows = re.findall(
        r"^(\S.*?)\s{2,}(Convolution|GEMM|Data Movement|Elementwise|Other)\s{2,}",
        categories.__doc__,
        flags=re.MULTILINE,
    )
    assert dict(rows) == dict(SUBCATEGORY_CATEGORY)


# --- overrides ----------------------------------------------------------------------------


def test_override_by_operator_and_by_full_name() -> None:
    classifier = Classifier.from_lines(
        [
            "# comment",
            "; another comment",
            "",
            "Resize Bilinear = Other",
            "convert (nc, f32, qd8) = elementwise",
            "addmm = Elementwise",
        ]
    )
    assert classifier.classify("Resize Bilinear (NHWC) #4") == OTHER
    assert classifier.classify("Convert (NC, F32, QD8) #1") == EW
    assert classifier.classify("Convert (NC, F32, QDU8) #1") == DM  # other key: default
    assert classifier.classify("native_call_addmm.out") == EW
    assert classifier.subcategory("Resize Bilinear (NHWC) #4") == "resize"
    assert classifier.is_leaf("Resize Bilinear (NHWC) #4")
    assert classify("Resize Bilinear (NHWC) #4") == DM  # the default is untouched


def test_full_name_override_wins_over_operator_override() -> None:
    classifier = Classifier({"Convert": "Other", "Convert (NC, F32, QD8)": "GEMM"})
    assert classifier.classify("Convert (NC, F32, QD8) #1") == GEMM
    assert classifier.classify("Convert (NC) #1") == OTHER


def test_overrides_are_normalised_and_hashable() -> None:
    a = Classifier.from_lines(["Softmax = elementwise"])
    b = Classifier({"  softmax ": "Elementwise"})
    assert a == b and hash(a) == hash(b)
    assert dict(a.overrides) == {"softmax": EW}
    with pytest.raises(TypeError):
        a.overrides["x"] = GEMM  # type: ignore[index]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("Resize Bilinear", "line 2 'Resize Bilinear': expected 'Operator Name = Category'"),
        ("= GEMM", "line 2 '= GEMM': expected"),
        ("Softmax =", "line 2 'Softmax =': expected"),
        ("Softmax = Matmul", "line 2 'Softmax = Matmul': unknown category 'Matmul'"),
    ],
)
def test_bad_override_lines(line: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        Classifier.from_lines(["Add = Other", line], source="sme2_category_overrides")
    assert str(info.value).startswith("sme2_category_overrides, line 2")
    assert "\n" not in str(info.value)


def test_bad_override_mapping() -> None:
    with pytest.raises(ConfigError, match="'Softmax' = 'Bogus'"):
        Classifier({"Softmax": "Bogus"})
