"""Average pooling of quantized inputs with a requantized output (Brevitas's
brevitas.nn.quant_avg_pool).

Integer hardware averages a window by summing it and shifting right instead of dividing. These
layers model that: pooling an IntQuantTensor gives the window sum as an accumulator, at scale
``input_scale / window`` and bit width ``ceil(log2((2 ** input_bit_width - 1) * window))``
(IntQuantTensor's avg_pool2d handlers), and ``trunc_quant`` then requantizes the accumulator to
its bit width (8 by default, most significant bits kept, rounded). A plain Tensor input, or
trunc_quant=None, gives exactly the float pooling, unless the layer cached the metadata of an
earlier quantized input (``cache_inference_quant_act``): a plain Tensor is then read on that
grid."""

from typing import Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn import AdaptiveAvgPool2d, AvgPool2d
from torch.nn import functional as F

from brevitas_cpp.nn._error_context import call_naming_layer
from brevitas_cpp.nn.mixin.acc import AccQuantType, TruncMixin
from brevitas_cpp.nn.mixin.base import QuantLayerMixin
from brevitas_cpp.proxy.script import script_error
from brevitas_cpp.proxy.utils import _CachedIO
from brevitas_cpp.quant import RoundTo8bit
from brevitas_cpp.quant_tensor import QuantTensor, _unpack_quant_tensor
from brevitas_cpp.quant_tensor.int_torch_handler import compute_adaptive_kernel_size_stride

__all__ = ["TruncAvgPool2d", "TruncAdaptiveAvgPool2d"]


def _input_to_requantize(layer: TruncMixin, x: Union[Tensor, QuantTensor]) -> Optional[QuantTensor]:
    """The QuantTensor whose pooling the layer requantizes, or None for plain float pooling.
    With cache_inference_quant_act set, a quantized input's metadata is kept (in cache_class,
    Brevitas's name) so that later plain tensors, e.g. QuantTensors decayed to tensors in a
    traced graph, are read on the same grid."""
    if not layer.is_trunc_quant_enabled:
        return None
    if isinstance(x, QuantTensor):
        if layer.cache_inference_quant_act:
            layer.cache_class = _CachedIO(x, layer.cache_quant_io_metadata_only)
        return x
    if layer.cache_class is not None:
        return layer.cache_class.quant_tensor.set(value=x)
    return None


def _check_scriptable(layer: TruncMixin) -> None:
    """Scripted, these layers are the float pooling: truncation needs an IntQuantTensor."""
    if layer.is_trunc_quant_enabled:
        raise script_error(
            layer,
            "truncation (trunc_quant) requantizes an IntQuantTensor input",
            "Trace the "
            "model instead, or build the layer with trunc_quant=None and "
            "return_quant_tensor=False (plain float pooling).",
        )
    if layer.cache_class is not None:
        raise script_error(
            layer,
            "it cached a quantized input's metadata (cache_inference_quant_act) to read "
            "plain tensors on that grid",
            "Trace the model instead.",
        )


class _TruncAvgPoolBase(TruncMixin, QuantLayerMixin):
    """What the truncating poolings share: the forward (pool, then requantize the accumulator)
    and the inference cache of a quantized input's metadata. Subclasses define _pool."""

    def _init_trunc_avg_pool(
        self, trunc_quant: Optional[AccQuantType], return_quant_tensor: bool, **kwargs
    ) -> None:
        QuantLayerMixin.__init__(self, return_quant_tensor)
        TruncMixin.__init__(self, trunc_quant=trunc_quant, **kwargs)
        self.cache_inference_quant_act = False
        self.cache_quant_io_metadata_only = True
        # Optional[_CachedIO]; not annotated here: TorchScript warns about instance annotations.
        self.cache_class = None

    @property
    def channelwise_separable(self) -> bool:
        return True

    @property
    def requires_export_handler(self) -> bool:
        return True

    def __prepare_scriptable__(self) -> "_TruncAvgPoolBase":
        _check_scriptable(self)
        return super().__prepare_scriptable__()

    def _pool(self, x: Tensor) -> Tensor:
        """The float pooling; on an IntQuantTensor its handler gives the accumulator."""
        raise NotImplementedError(f"{type(self).__name__} does not define _pool")

    # input: a Tensor, or in eager mode a QuantTensor (annotated as what TorchScript accepts).
    def forward(self, input: Tensor):
        if torch.jit.is_scripting():
            # Truncation is off (checked by __prepare_scriptable__): the float pooling.
            return self._pool(input)
        # An error names the layer (TorchScript compiles no try statement: eager mode only).
        return call_naming_layer(self, self._layer_forward, input)

    def _layer_forward(self, input: Tensor):
        x = self.unpack_input(input)
        qx = _input_to_requantize(self, x)
        if qx is not None:
            y = self.trunc_quant(self._pool(qx))
        else:
            y = self._pool(_unpack_quant_tensor(x))
        return self.pack_output(y)


class TruncAvgPool2d(_TruncAvgPoolBase, AvgPool2d):
    """AvgPool2d whose division by the window size is a requantization by ``trunc_quant``.

    Needs a QuantTensor input to requantize (a plain Tensor is pooled in float); returns a
    QuantTensor by default (return_quant_tensor=True). Keywords configure trunc_quant
    (e.g. ``bit_width=4``)."""

    def __init__(
        self,
        kernel_size: Union[int, Tuple[int, int]],
        stride: Optional[Union[int, Tuple[int, int]]] = None,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: Optional[int] = None,
        trunc_quant: Optional[AccQuantType] = RoundTo8bit,
        return_quant_tensor: bool = True,
        **kwargs,
    ) -> None:
        AvgPool2d.__init__(
            self,
            kernel_size=kernel_size,
            stride=stride,
            ceil_mode=ceil_mode,
            count_include_pad=count_include_pad,
            divisor_override=divisor_override,
        )
        self._init_trunc_avg_pool(trunc_quant, return_quant_tensor, **kwargs)

    @property
    def _avg_scaling(self) -> int:
        """Elements of the pooling window (what Brevitas divides the scale by, ignoring
        padding and divisor_override)."""
        if isinstance(self.kernel_size, tuple):
            return self.kernel_size[0] * self.kernel_size[1]
        return self.kernel_size * self.kernel_size

    def _pool(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(
            x,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )


class TruncAdaptiveAvgPool2d(_TruncAvgPoolBase, AdaptiveAvgPool2d):
    """AdaptiveAvgPool2d whose division is a requantization by ``trunc_quant``; the window is
    that of the fixed pooling the adaptive one amounts to (compute_kernel_size_stride). Same
    input/output conventions as TruncAvgPool2d."""

    def __init__(
        self,
        output_size: Union[int, Tuple[int, int]],
        trunc_quant: Optional[AccQuantType] = RoundTo8bit,
        return_quant_tensor: bool = True,
        **kwargs,
    ) -> None:
        AdaptiveAvgPool2d.__init__(self, output_size=output_size)
        self._init_trunc_avg_pool(trunc_quant, return_quant_tensor, **kwargs)

    @property
    def padding(self) -> int:
        return 0

    @staticmethod
    def compute_kernel_size_stride(input_shape, output_shape):
        """Per spatial dim, the (kernel sizes, strides) of the fixed pooling that maps
        input_shape to output_shape."""
        return compute_adaptive_kernel_size_stride(input_shape, output_shape)

    def _pool(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(x, self.output_size)
