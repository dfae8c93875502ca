"""What every quantizer block returns: (value, scale, zero_point, bit_width), all tensors. The
proxies hand layers the same four fields as a QuantTuple, whose metadata may be None
(brevitas_cpp.proxy.script)."""

from typing import Tuple

from torch import Tensor

QuantBlockOutput = Tuple[Tensor, Tensor, Tensor, Tensor]
