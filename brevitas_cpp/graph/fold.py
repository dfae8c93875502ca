"""BatchNorm folding over a traced model (Brevitas's merge_bn, found by the graph).

``merge_bn(model, *example_inputs)`` traces the model, finds every BatchNorm whose input is the
output of a convolution, transposed convolution or linear layer that nothing else reads, folds
the BatchNorm's eval-mode affine into that layer's weight and bias (brevitas_cpp.nn.utils.
merge_bn, which also rebuilds a quant layer's weight quantizer), and puts nn.Identity in the
BatchNorm's place. Before QAT or export: the folded model computes what the eval model did.
"""

from typing import Any, Dict, List, Tuple

from torch import nn

from brevitas_cpp.graph.trace import module_scopes, trace
from brevitas_cpp.nn.utils import merge_bn as merge_bn_into_layer

__all__ = ["merge_bn"]

_LAYER_OPS = {
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "linear",
}
_LAYERS = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
    nn.Linear,
)


def _output_channel_dim(layer: nn.Module) -> int:
    # A transposed convolution's weight is [in, out / groups, ...]; the others' [out, ...].
    return 1 if getattr(layer, "transposed", False) else 0


def merge_bn(model: nn.Module, *example_inputs: Any) -> List[Tuple[str, str]]:
    """Fold each BatchNorm into the layer it follows (see the module docstring); returns the
    (layer name, BatchNorm name) pairs folded. The BatchNorms must be in eval mode."""
    training = [
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training
    ]
    if training:
        raise RuntimeError(
            f"merge_bn: {', '.join(training)} in training mode; folding uses the running "
            f"statistics (eval-mode BatchNorm): call model.eval() first"
        )
    graph = trace(model, *example_inputs)
    by_scope: Dict[str, Tuple[str, nn.Module]] = {}
    scopes = module_scopes(model)
    for name, module in model.named_modules():
        by_scope.setdefault(scopes[id(module)], (name, module))
    folded: List[Tuple[str, str]] = []
    for node in graph.nodes:
        if node.op != "batch_norm" or not node.inputs:
            continue
        bn_name, bn = by_scope.get(node.module_scope, (None, None))
        producer = graph.nodes[node.inputs[0]]
        layer_name, layer = by_scope.get(producer.module_scope, (None, None))
        if (
            not isinstance(bn, nn.modules.batchnorm._BatchNorm)
            or producer.op not in _LAYER_OPS
            or not isinstance(layer, _LAYERS)
            or [n.index for n in graph.successors(producer)] != [node.index]
        ):
            continue
        merge_bn_into_layer(layer, bn, output_channel_dim=_output_channel_dim(layer))
        parent_name, _, child = bn_name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, nn.Identity())
        folded.append((layer_name, bn_name))
    return folded
