"""Sparse compressed, strided nested and quantized tensors moved to the tpu device: every use says they have no
layout there."""

import warnings

import pytest
import torch

import tpu_runtime
from converter.errors import UnsupportedOpError


@pytest.fixture(scope="module")
def csr_on_tpu():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's "sparse CSR support is in beta" warning)
        return torch.eye(3).to_sparse_csr().to("tpu")


def test_ops_reaching_the_device_name_the_op_the_line_and_the_layout(csr_on_tpu):
    with pytest.raises(UnsupportedOpError, match=r"aten\._to_dense.* at .*test_sparse_layouts\.py:\d+ .*sparse "
                                                 r"compressed tensors \(CSR, CSC, BSR, BSC\) have no layout"):
        csr_on_tpu.to_dense()
    with pytest.raises(UnsupportedOpError, match=r"aten\._nnz"):
        repr(csr_on_tpu)


def test_mixing_with_a_dense_tpu_tensor_names_the_layout(csr_on_tpu):
    with pytest.raises(RuntimeError, match=r"a torch\.sparse_csr tensor on the tpu device \(shape \[3, 3\]\) has no "
                                           r"layout there: keep it on the CPU, or move x\.to_dense\(\) instead"):
        csr_on_tpu @ torch.ones(3, device="tpu")


@pytest.mark.parametrize("make, op, says", [
    (lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
     r"aten\._to_copy", r"nested tensors of the strided layout .* \(torch\.nested\.nested_tensor\(\.\.\., "
     r"layout=torch\.jagged\)\) hold tpu tensors"),
    (lambda: torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8),
     r"aten\.empty_quantized", r"quantized tensors .* have no layout on the tpu device: move x\.dequantize\(\)"),
], ids=["strided nested", "quantized"])
def test_moving_a_tensor_of_another_implementation_names_it_and_the_line(make, op, says):
    # (torch's dispatcher said "Could not run 'aten::_to_copy' with arguments from the 'NestedTensortpu' backend")
    x = make()
    with pytest.raises(UnsupportedOpError, match=rf"{op}.* at .*test_sparse_layouts\.py:\d+ .*{says}"):
        x.to("tpu")


@pytest.mark.parametrize("fallback", [False, True])
def test_quantizing_a_tpu_tensor_names_the_op_and_where_to_quantize(fallback):
    # (it said "no lowering ..." and pointed at the CPU fallback, whose quantized result could not be uploaded:
    # torch.ao.quantization.convert of a model prepared on the device makes its weight observers there)
    x = torch.randn(4, 2, device="tpu")
    scales, zero_points = torch.ones(4, device="tpu"), torch.zeros(4, dtype=torch.long, device="tpu")
    tpu_runtime.set_cpu_fallback(fallback)
    try:
        for quantize, op in ((lambda: torch.quantize_per_tensor(x, 0.1, 0, torch.qint8), "quantize_per_tensor"),
                             (lambda: torch.quantize_per_channel(x, scales, zero_points, 0, torch.qint8),
                              "quantize_per_channel")):
            with pytest.raises(UnsupportedOpError, match=rf"aten\.{op}\.default .* at .*test_sparse_layouts\.py:\d+ "
                                                         r".*no layout on the tpu device: quantize on the CPU"):
                quantize()
    finally:
        tpu_runtime.set_cpu_fallback(False)
