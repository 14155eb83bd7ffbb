"""The tensor codec must give back exactly the view a kernel saw: dtype, geometry, and every bit."""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tilelens.store.files import tensors
from tilelens.store.files.blobs import table_to_ipc
from tilelens.store.files.tensors import DTYPES, TensorCodecError, table_to_tensor, tensor_to_table

REQUIRED = [
    "float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
]  # fmt: skip
FLOAT8 = sorted(
    name
    for name in dir(torch)
    if name.startswith("float8_") and isinstance(getattr(torch, name), torch.dtype)
)
_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The view's elements as same-width integers, so NaN payloads and -0.0 compare exactly."""
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view(_INT_OF_WIDTH[t.element_size()])


def assert_identical(a: torch.Tensor, b: torch.Tensor) -> None:
    assert b.dtype == a.dtype
    assert b.shape == a.shape
    assert b.stride() == a.stride()
    assert b.storage_offset() == a.storage_offset()
    assert b.device.type == "cpu"
    assert torch.equal(bits(a), bits(b))


def roundtrip(t: torch.Tensor) -> torch.Tensor:
    """Through Arrow IPC bytes, as the blob store does."""
    data = table_to_ipc(tensor_to_table(t))
    return table_to_tensor(pa.ipc.open_file(pa.BufferReader(data)).read_all())


def random_storage(dtype: torch.dtype, n: int, data: bytes) -> torch.Tensor:
    """n elements of dtype holding arbitrary bit patterns (NaNs, infinities, subnormals included)."""
    itemsize = dtype.itemsize
    raw = torch.tensor(list(data[: n * itemsize].ljust(n * itemsize, b"\x00")), dtype=torch.uint8)
    if dtype == torch.bool:
        raw = raw % 2  # only 0/1 are valid bools
    return raw.view(dtype)


def test_every_required_dtype_and_every_float8_is_supported() -> None:
    assert set(REQUIRED) <= set(DTYPES)
    assert FLOAT8 and set(FLOAT8) <= set(DTYPES)


@st.composite
def strided_views(draw: st.DrawFn) -> torch.Tensor:
    dtype = DTYPES[draw(st.sampled_from(sorted(DTYPES)))]
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
    strides = tuple(draw(st.lists(st.integers(0, 12), min_size=ndim, max_size=ndim)))
    offset = draw(st.integers(0, 20))
    reach = 0 if 0 in shape else sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + 1
    slack = draw(st.integers(0, 8))
    n = offset + reach + slack
    itemsize = dtype.itemsize
    payload = draw(st.binary(min_size=n * itemsize, max_size=n * itemsize))
    return random_storage(dtype, n, payload).as_strided(shape, strides, offset)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strided_views())
def test_arbitrary_strided_views_round_trip_bit_for_bit(t: torch.Tensor) -> None:
    assert_identical(t, roundtrip(t))


@pytest.mark.parametrize("name", sorted(DTYPES))
@settings(max_examples=25, deadline=None)
@given(payload=st.binary(min_size=0, max_size=96))
def test_every_dtype_round_trips_all_bit_patterns(name: str, payload: bytes) -> None:
    dtype = DTYPES[name]
    itemsize = dtype.itemsize
    t = random_storage(dtype, len(payload) // itemsize, payload)
    assert_identical(t, roundtrip(t))


def _base(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.arange(4 * 6 * 5, dtype=torch.float64).reshape(4, 6, 5).to(dtype)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: _base(), id="contiguous"),
        pytest.param(lambda: _base().transpose(0, 2), id="transposed"),
        pytest.param(lambda: _base().permute(2, 0, 1)[1:, ::2, 1::3], id="permuted-sliced-step"),
        pytest.param(lambda: _base()[2:, 1:4], id="storage-offset"),
        pytest.param(lambda: torch.arange(5.0)[:, None].expand(5, 7), id="expanded-stride-0"),
        pytest.param(lambda: torch.tensor(3.5).expand(4, 4), id="scalar-expanded"),
        pytest.param(lambda: _base()[1:1], id="zero-size"),
        pytest.param(lambda: _base()[3:, :, :0], id="zero-size-with-offset"),
        pytest.param(lambda: torch.tensor(-0.0), id="zero-dim"),
        pytest.param(
            lambda: _base(torch.bfloat16).to(memory_format=torch.contiguous_format)[::2], id="bf16-step"
        ),
        pytest.param(
            lambda: torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last), id="channels-last"
        ),
        pytest.param(lambda: torch.tensor([float("nan"), float("-inf"), -0.0]).repeat(3)[::2], id="specials"),
        pytest.param(lambda: torch.randn(3, 3, requires_grad=True), id="requires-grad"),
    ],
)
def test_named_views_round_trip(make) -> None:  # noqa: ANN001
    t = make()
    back = roundtrip(t)
    assert_identical(t.detach(), back)


def test_conjugate_view_keeps_its_values() -> None:
    z = torch.randn(4, dtype=torch.complex64)
    back = roundtrip(z.conj())
    assert not back.is_conj()
    assert torch.equal(bits(back), bits(z.conj().resolve_conj()))


def test_only_the_reachable_span_is_stored() -> None:
    big = torch.randn(1000, 1000)
    view = big[10:12, 100:103]  # reaches row 10 col 100 .. row 11 col 102
    data = tensor_to_table(view).column("data")[0].values
    stored = sum(data[i].as_buffer().size for i in range(len(data)))
    assert stored == (1000 + 3) * 4
    assert_identical(view, roundtrip(view))


def test_large_payload_is_split_into_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tensors, "CHUNK_BYTES", 1000)
    t = torch.randn(2600)
    assert len(tensor_to_table(t).column("data")[0].values) == 11
    assert_identical(t, roundtrip(t))


def test_stored_table_is_plain_data() -> None:
    table = tensor_to_table(torch.ones(2, 3, dtype=torch.bfloat16).t())
    row = table.to_pylist()[0]
    assert row["dtype"] == "bfloat16"
    assert row["shape"] == [3, 2] and row["strides"] == [1, 3] and row["storage_offset"] == 0
    assert table.schema.metadata[b"format"] == b"tilelens.tensor"


def _with(table: pa.Table, column: str, value: object) -> pa.Table:
    i = table.column_names.index(column)
    return table.set_column(i, table.schema.field(column), pa.array([value], table.schema.field(column).type))


def test_unknown_dtype_name_is_refused_not_looked_up() -> None:
    table = _with(tensor_to_table(torch.ones(2)), "dtype", "__class__")
    with pytest.raises(TensorCodecError, match="unsupported tensor dtype"):
        table_to_tensor(table)


def test_data_size_must_match_geometry() -> None:
    table = _with(tensor_to_table(torch.ones(4)), "shape", [5])
    with pytest.raises(TensorCodecError, match="bytes"):
        table_to_tensor(table)


def test_foreign_table_is_refused() -> None:
    with pytest.raises(TensorCodecError, match="not a TileLens tensor"):
        table_to_tensor(pa.table({"x": [1]}))


def test_non_tensors_and_sparse_tensors_are_refused() -> None:
    with pytest.raises(TensorCodecError):
        tensor_to_table([1, 2])  # type: ignore[arg-type]
    with pytest.raises(TensorCodecError, match="strided"):
        tensor_to_table(torch.eye(3).to_sparse())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_view_is_copied_to_cpu() -> None:
    t = torch.randn(64, 32, device="cuda").t()[1:, ::3]
    back = roundtrip(t)
    assert back.device.type == "cpu"
    assert (
        back.shape == t.shape and back.stride() == t.stride() and back.storage_offset() == t.storage_offset()
    )
    assert torch.equal(bits(back), bits(t).cpu())
