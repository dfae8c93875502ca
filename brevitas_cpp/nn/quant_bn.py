"""Batch norms as quantized per-channel affines: BatchNorm1dToQuantScaleBias (inputs [N, C, L])
and BatchNorm2dToQuantScaleBias (inputs [N, C, H, W]). Loading a batch norm's state_dict folds
its running statistics into weight = gamma / sqrt(var + eps) and bias = beta - mean * weight."""

from typing import Optional

import torch

from brevitas_cpp import config
from brevitas_cpp.quant import Int8WeightPerTensorFloat

from .quant_layer import ActQuantType, BiasQuantType, WeightQuantType
from .quant_scale_bias import QuantScaleBias
from .utils import mul_add_from_bn

__all__ = ["BatchNorm1dToQuantScaleBias", "BatchNorm2dToQuantScaleBias"]


class _BatchNormToQuantScaleBias(QuantScaleBias):
    """Loads either its own state_dict or a batch norm's (folded at load time)."""

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        weight_key = prefix + "weight"
        bias_key = prefix + "bias"
        running_mean_key = prefix + "running_mean"
        running_var_key = prefix + "running_var"
        num_batches_tracked_key = prefix + "num_batches_tracked"
        folded = running_mean_key in state_dict and running_var_key in state_dict
        if folded:
            mean, var = state_dict.pop(running_mean_key), state_dict.pop(running_var_key)
            # A batch norm with affine=False has no weight and bias: gamma 1, beta 0.
            gamma = state_dict.pop(weight_key, None)
            beta = state_dict.pop(bias_key, None)
            gamma = torch.ones_like(mean) if gamma is None else gamma
            beta = torch.zeros_like(mean) if beta is None else beta
            state_dict.pop(num_batches_tracked_key, None)
            weight_init, bias_init = mul_add_from_bn(
                bn_mean=mean, bn_var=var, bn_eps=self.eps, bn_weight=gamma, bn_bias=beta
            )
            with torch.no_grad():
                self.weight.copy_(weight_init)
                self.bias.copy_(bias_init)
        super(_BatchNormToQuantScaleBias, self)._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        # Folded from the statistics, weight and bias are not missing.
        for key in (weight_key, bias_key):
            if key in missing_keys and (folded or config.IGNORE_MISSING_KEYS):
                missing_keys.remove(key)
        if num_batches_tracked_key in unexpected_keys:
            unexpected_keys.remove(num_batches_tracked_key)


class BatchNorm1dToQuantScaleBias(_BatchNormToQuantScaleBias):
    """A BatchNorm1d over [N, C, L] inputs as a quantized per-channel affine."""

    def __init__(
        self,
        num_features,
        eps: float = 1e-5,
        weight_quant: Optional[WeightQuantType] = Int8WeightPerTensorFloat,
        bias_quant: Optional[BiasQuantType] = None,
        input_quant: Optional[ActQuantType] = None,
        output_quant: Optional[ActQuantType] = None,
        return_quant_tensor: bool = False,
        **kwargs,
    ):
        super(BatchNorm1dToQuantScaleBias, self).__init__(
            num_features,
            bias=True,
            runtime_shape=(1, -1, 1),
            weight_quant=weight_quant,
            bias_quant=bias_quant,
            input_quant=input_quant,
            output_quant=output_quant,
            return_quant_tensor=return_quant_tensor,
            **kwargs,
        )
        self.eps = eps


class BatchNorm2dToQuantScaleBias(_BatchNormToQuantScaleBias):
    """A BatchNorm2d over [N, C, H, W] inputs as a quantized per-channel affine."""

    def __init__(
        self,
        num_features,
        eps: float = 1e-5,
        weight_quant: Optional[WeightQuantType] = Int8WeightPerTensorFloat,
        bias_quant: Optional[BiasQuantType] = None,
        input_quant: Optional[ActQuantType] = None,
        output_quant: Optional[ActQuantType] = None,
        return_quant_tensor: bool = False,
        **kwargs,
    ):
        super(BatchNorm2dToQuantScaleBias, self).__init__(
            num_features,
            bias=True,
            runtime_shape=(1, -1, 1, 1),
            weight_quant=weight_quant,
            bias_quant=bias_quant,
            input_quant=input_quant,
            output_quant=output_quant,
            return_quant_tensor=return_quant_tensor,
            **kwargs,
        )
        self.eps = eps
