"""The public names of Brevitas 0.12.1 (tests/compat/brevitas_public_names.txt, listed by
scripts/list_brevitas_names.py) that brevitas_cpp does not support, by Brevitas module (below
``brevitas``), each with what to use instead; ``_unsupported`` makes them raise on use. A module
brevitas_cpp has no file for is made with only these names. A leaf: no imports of the package.

Everything else Brevitas exports exists here with Brevitas's behaviour (tests/compat checks both
halves against the recorded list)."""

from typing import Dict, Tuple

__all__ = ["HINTS", "UNSUPPORTED"]


def _names(classes: str = "", functions: str = "", values: str = "") -> Dict[str, str]:
    """{name: kind} from space-separated names of each kind (the stub raises on instantiation,
    on a call, or on any use of the value)."""
    kinds = {"class": classes, "function": functions, "value": values}
    return {name: kind for kind, names in kinds.items() for name in names.split()}


# What to use instead, shared by modules.
FX_BACKPORT = "use torch.fx (Brevitas keeps a private copy of it) instead"
FX = "use torch.fx.symbolic_trace, or brevitas_cpp.graph.trace to record the calls of a model, instead"
COMMON = "brevitas_cpp's layers have no export mode of their own; use the functions of brevitas_cpp.export instead"
EXPORT_INTERNALS = "brevitas_cpp's exports have no handler or manager classes to extend; use brevitas_cpp.export.export_onnx_qcdq or export_torch_qcdq instead"
QONNX = "QONNX export is not ported; use brevitas_cpp.export.export_onnx_qcdq (ONNX QCDQ) instead"
SHARK = "the Shark export is not ported; use brevitas_cpp.export.export_torch_qcdq instead"
INFERENCE = "use brevitas_cpp.export.inference.quant_inference_mode instead"
GRAPH = "Brevitas's fx-based graph transforms are not ported; quantize a float model with brevitas_cpp.graph.quantize_model or brevitas_cpp.graph.Quantizer instead"
EQUALIZE = "activation equalization and Hadamard rotations are not ported; quantize without them (brevitas_cpp.graph.quantize_model) instead"
GPXQ = "this PTQ algorithm is not ported; use brevitas_cpp.graph.calibration_mode and bias_correction_mode instead"
ACC = "accumulator clamping is not ported; use brevitas_cpp.nn.TruncAvgPool2d or an output quantizer (output_quant=...) instead"
FLEXML = "the FlexML target is not ported; use brevitas_cpp.graph.quantize_model instead"
OPS = "every straight-through estimator is a C++ op here; use the functions of brevitas_cpp.function (round_ste, tensor_clamp_ste, ...) instead"
QUANTIZE = "use brevitas_cpp.graph.quantize_model (or brevitas_cpp.graph.Quantizer) instead"
PARAMETRIZE = "rotation and scale parametrizations (equalization) are not ported; quantize without them (brevitas_cpp.graph.quantize_model) instead"
STATS = "use MeanSigmaStd (a constant sigma), AbsPercentile or MSE scaling instead"
RECURRENT = "use brevitas_cpp.nn.QuantRNN or QuantLSTM (built on QuantRecurrentStackBase) instead"
FLOAT_BIAS = "a minifloat bias quantizer is not ported; use an integer one (brevitas_cpp.quant.Int32Bias) instead"
TRUNC = "use brevitas_cpp.quant.TruncTo8bit or RoundTo8bit instead"
QUANT_TENSOR = "build brevitas_cpp.quant_tensor.IntQuantTensor(value, scale, zero_point, bit_width, signed, training) instead"
LOG_BIT_WIDTH = "Brevitas 0.12.1's hooks unpack a proxy's QuantTensor into three values and fail; read .bit_width of the output in a forward hook on the proxy instead"

UNSUPPORTED: Dict[str, Tuple[str, Dict[str, str]]] = {
    "backport": (
        FX_BACKPORT,
        _names(
            classes="SymBool SymFloat SymInt", functions="sym_float sym_int sym_max sym_min sym_not"
        ),
    ),
    "backport._guards": (
        FX_BACKPORT,
        _names(
            classes="Checkpointable DuplicateInputs Guard GuardBuilderBase GuardEnvExpr GuardSource GuardsCheckpointState GuardsContext ShapeGuard Source TracingContext",
            functions="tracing",
            values="T log",
        ),
    ),
    "backport._ops": (
        FX_BACKPORT,
        _names(classes="OpOverload OpOverloadPacket", functions="dl_open_guard"),
    ),
    "backport.fx": (
        FX_BACKPORT,
        _names(
            classes="CodeGen Graph GraphModule Interpreter Node Proxy ProxyableClassMeta Tracer Transformer",
            functions="map_arg replace_pattern symbolic_trace wrap",
            values="PH",
        ),
    ),
    "backport.fx._compatibility": (FX_BACKPORT, _names(functions="compatibility")),
    "backport.fx._pytree": (
        FX_BACKPORT,
        _names(
            functions="FlattenFuncSpec register_pytree_flatten_spec tree_flatten_spec",
            values="SUPPORTED_NODES",
        ),
    ),
    "backport.fx._symbolic_trace": (
        FX_BACKPORT,
        _names(
            classes="PHBase ProxyableClassMeta Tracer",
            functions="is_fx_tracing symbolic_trace wrap",
            values="HAS_VARSTUFF PH",
        ),
    ),
    "backport.fx.annotate": (FX_BACKPORT, _names(functions="annotate")),
    "backport.fx.config": (FX_BACKPORT, _names(values="disable_progress verbose_progress")),
    "backport.fx.experimental": (FX_BACKPORT, _names()),
    "backport.fx.experimental.proxy_tensor": (
        FX_BACKPORT,
        _names(
            classes="DecompositionInterpreter ProxySymDispatchMode ProxyTorchDispatchMode PythonKeyTracer",
            functions="decompose disable_autocast_cache disable_proxy_modes_tracing dispatch_trace fake_signature fetch_sym_proxy fetch_tensor_proxy get_innermost_proxy_mode get_isolated_graphmodule get_proxy_slot get_torch_dispatch_modes has_proxy_slot is_sym_node make_fx maybe_disable_fake_tensor_mode proxy_call set_meta set_proxy_slot snapshot_fake thunkify track_tensor track_tensor_tree unwrap_proxy wrap_key wrapper_and_args_for_make_fx",
            values="CONSTANT_NUMEL_LIMIT CURRENT_DECOMPOSITION_TABLE HANDLED_TYPES aten no_default prim proxy_slot py_sym_types",
        ),
    ),
    "backport.fx.experimental.symbolic_shapes": (
        FX_BACKPORT,
        _names(
            classes="FloorDiv GuardOnDataDependentSymNode IsNonOverlappingAndDenseIndicator Pow ShapeEnv ShapeGuardPrinter SymDispatchMode SymNode Symbol TrueDiv",
            functions="bind_symbols ceil_impl create_contiguous error eval_guards eval_is_non_overlapping_and_dense floor_ceil_helper floor_impl fx_placeholder_targets fx_placeholder_vals guard_bool guard_float guard_int guard_scalar has_symbolic_sizes_strides hint_int is_non_overlapping_and_dense method_to_operator safe_expand sym_sqrt to_node wrap_node",
            values="HAS_SYMPY SYMPY_INTERP SYM_FUNCTION_MODE SymTypes TLS alternate_impl_if_hinted_methods always_bool_magic_methods always_float_magic_methods always_int_magic_methods aten bool_magic_methods log magic_methods magic_methods_on_math magic_methods_on_operator_with_trailing_underscore magic_methods_on_submodule reflectable_magic_methods sizes_strides_methods unary_magic_methods",
        ),
    ),
    "backport.fx.graph": (
        FX_BACKPORT,
        _names(
            classes="CodeGen Graph PythonCode",
            functions="TransformCodeFunc",
            values="dtype_abbrs inplace_methods magic_methods reflectable_magic_methods",
        ),
    ),
    "backport.fx.graph_module": (
        FX_BACKPORT,
        _names(
            classes="GraphModule",
            functions="reduce_deploy_graph_module reduce_graph_module reduce_package_graph_module",
        ),
    ),
    "backport.fx.immutable_collections": (
        FX_BACKPORT,
        _names(classes="immutable_dict immutable_list", functions="register_pytree_node"),
    ),
    "backport.fx.interpreter": (FX_BACKPORT, _names(classes="Interpreter Transformer")),
    "backport.fx.node": (
        FX_BACKPORT,
        _names(
            classes="Node",
            functions="Argument BaseArgumentTypes Target map_aggregate map_arg",
            values="base_types",
        ),
    ),
    "backport.fx.operator_schemas": (
        FX_BACKPORT,
        _names(
            classes="ArgsKwargsPair",
            functions="check_for_mutable_operation create_type_hint get_signature_for_torch_op normalize_function normalize_module type_matches",
        ),
    ),
    "backport.fx.passes": (FX_BACKPORT, _names()),
    "backport.fx.passes.shape_prop": (FX_BACKPORT, _names(classes="ShapeProp TensorMetadata")),
    "backport.fx.proxy": (
        FX_BACKPORT,
        _names(
            classes="Attribute GraphAppendingTracer ParameterProxy Proxy Scope ScopeContextManager TraceError TracerBase",
            functions="assert_fn",
        ),
    ),
    "backport.fx.subgraph_rewriter": (
        FX_BACKPORT,
        _names(
            classes="Match ReplacedPatterns",
            functions="replace_pattern replace_pattern_with_filters",
        ),
    ),
    "backport.fx.traceback": (
        FX_BACKPORT,
        _names(
            functions="format_stack get_current_meta has_preserved_node_meta preserve_node_meta set_current_meta set_stack_trace",
            values="current_meta should_preserve_node_meta",
        ),
    ),
    "backport.utils": (FX_BACKPORT, _names()),
    "backport.utils._stats": (
        FX_BACKPORT,
        _names(functions="count count_label", values="simple_call_counter"),
    ),
    "backport.utils.weak": (
        FX_BACKPORT,
        _names(classes="WeakIdKeyDictionary WeakIdRef WeakTensorKeyDictionary"),
    ),
    "common": (COMMON, _names(classes="ExportMixin LayerProtocol", values="logging")),
    "core.stats": (STATS, _names(classes="MeanLearnedSigmaStd")),
    "core.stats.stats_op": (STATS, _names(classes="KLMinimizerThreshold MeanLearnedSigmaStd")),
    "export": (
        QONNX,
        _names(
            classes="QONNXDynamoManager QONNXManager StdQCDQONNXManager TorchQCDQManager",
            functions="enable_debug export_brevitas_onnx export_qonnx",
        ),
    ),
    "export.common": (EXPORT_INTERNALS, _names(functions="to_0dim_if_scalar to_item_if_0dim")),
    "export.common.handler": (EXPORT_INTERNALS, _names()),
    "export.common.handler.base": (
        EXPORT_INTERNALS,
        _names(
            classes="BaseHandler BitWidthHandlerMixin ClipMixin FloatClipMixin FloatZeroPointHandlerMixin QuantAxisMixin ScaleHandlerMixin ZeroPointHandlerMixin"
        ),
    ),
    "export.common.handler.qcdq": (
        EXPORT_INTERNALS,
        _names(
            classes="CDQCastBiasQuantProxyHandlerMixin CDQCastMixin CDQCastProxyHandlerMixin DQCastMixin DQMixin DynamicQDQCastActQuantProxyHandlerMixin DynamicQMixin FloatCDQCastBiasQuantProxyHandlerMixin FloatCDQCastProxyHandlerMixin FloatQCDQCastActQuantProxyHandlerMixin FloatQCDQCastWeightQuantProxyHandlerMixin FloatQMixin QCDQCastActQuantProxyHandlerMixin QCDQCastDecoupledWeightQuantProxyHandlerMixin QCDQCastDecoupledWeightQuantWithInputProxyHandlerMixin QCDQCastTruncQuantProxyHandlerMixin QCDQCastWeightQuantProxyHandlerMixin QMixin"
        ),
    ),
    "export.inference": (INFERENCE, _names(classes="InferenceManager")),
    "export.inference.handler": (
        INFERENCE,
        _names(
            classes="DynamicFloatInferenceHandler DynamicIntInferenceHandler FloatInferencetHandler FloatWeightInferencetHandler GroupwiseFloatInferenceHandler GroupwiseFloatWeightInferenceHandler GroupwiseIntInferenceHandler GroupwiseIntWeightInferenceHandler InferenceHandler IntInferencetHandler IntWeightInferencetHandler"
        ),
    ),
    "export.inference.manager": (INFERENCE, _names(classes="InferenceManager")),
    "export.manager": (
        EXPORT_INTERNALS,
        _names(classes="BaseManager ExportContext", values="logging"),
    ),
    "export.onnx": (EXPORT_INTERNALS, _names(functions="onnx_export_opset")),
    "export.onnx.debug": (
        EXPORT_INTERNALS,
        _names(classes="DebugMarkerFunction ONNXDebugHook", functions="enable_debug"),
    ),
    "export.onnx.function": (EXPORT_INTERNALS, _names(classes="LSTMCellFn")),
    "export.onnx.handler": (
        EXPORT_INTERNALS,
        _names(
            classes="Kernel1dApplHandlerMixin Kernel2dApplHandlerMixin Kernel3dApplHandlerMixin ONNXBaseHandler QuantLSTMLayerHandler"
        ),
    ),
    "export.onnx.manager": (
        EXPORT_INTERNALS,
        _names(classes="ONNXBaseManager PatchFp8Ops", values="onnx opt"),
    ),
    "export.onnx.qonnx": (QONNX, _names()),
    "export.onnx.qonnx.custom_ops": (
        QONNX,
        _names(
            functions="BipolarQuant FloatQuant Quant TruncQuant bipolar_quant bipolar_quant_wrapper float_quant float_quant_wrapper int_quant int_quant_wrapper trunc_quant trunc_quant_wrapper",
            values="DOMAIN_STRING DOMAIN_VERSION LIBRARY_STRING qonnx_op",
        ),
    ),
    "export.onnx.qonnx.function": (
        QONNX,
        _names(
            classes="BrevitasBinaryQuantFn BrevitasFloatQuantFn BrevitasQuantFn BrevitasQuantLSTMCellFn BrevitasTruncFn"
        ),
    ),
    "export.onnx.qonnx.handler": (
        QONNX,
        _names(
            classes="BrevitasActFloatQuantProxyHandler BrevitasActQuantProxyHandler BrevitasBiasQuantProxyHandler BrevitasDecoupledWeightQuantProxyHandler BrevitasDecoupledWeightQuantWithInputProxyHandler BrevitasFloatQuantProxyHandler BrevitasQuantLSTMLayerHandler BrevitasQuantProxyHandler BrevitasTruncQuantProxyHandler BrevitasWeightFloatQuantProxyHandler BrevitasWeightQuantProxyHandler"
        ),
    ),
    "export.onnx.qonnx.manager": (
        QONNX,
        _names(classes="QONNXDynamoManager QONNXManager", values="logging"),
    ),
    "export.onnx.standard": (EXPORT_INTERNALS, _names()),
    "export.onnx.standard.function": (
        EXPORT_INTERNALS,
        _names(
            classes="CastFn DequantizeLinearFn DynamicQuantizeLinearFn IntClipFn QuantizeLinearFn",
            values="AXIS_OPSET DATATYPE_DICT",
        ),
    ),
    "export.onnx.standard.manager": (
        EXPORT_INTERNALS,
        _names(classes="StdONNXBaseManager", values="DEFAULT_OPSET"),
    ),
    "export.onnx.standard.qcdq": (EXPORT_INTERNALS, _names()),
    "export.onnx.standard.qcdq.handler": (
        EXPORT_INTERNALS,
        _names(
            classes="StdCDQCastONNXBiasQuantProxyHandler StdCDQCastONNXMixin StdDQCastONNXMixin StdDynamicQDQCastONNXActQuantProxyHandler StdDynamicQDQCastONNXMixin StdFloatCDQCastONNXMixin StdFloatDQCastONNXMixin StdFloatQCDQCastONNXActQuantProxyHandler StdFloatQCDQCastONNXMixin StdFloatQCDQCastONNXWeightQuantProxyHandler StdQCDQCastONNXActQuantProxyHandler StdQCDQCastONNXDecoupledWeightQuantProxyHandler StdQCDQCastONNXDecoupledWeightQuantWithInputProxyHandler StdQCDQCastONNXMixin StdQCDQCastONNXQuantLSTMLayerHandler StdQCDQCastONNXTruncQuantProxyHandler StdQCDQCastONNXWeightQuantProxyHandler"
        ),
    ),
    "export.onnx.standard.qcdq.manager": (EXPORT_INTERNALS, _names(classes="StdQCDQONNXManager")),
    "export.shark": (SHARK, _names()),
    "export.shark.handler": (
        SHARK,
        _names(
            classes="SharkActEqualization SharkActQuantMixin SharkLinearQuant SharkQuantSDPA SharkWeightQuantMixin"
        ),
    ),
    "export.shark.manager": (SHARK, _names(classes="SharkManager")),
    "export.torch": (EXPORT_INTERNALS, _names()),
    "export.torch.qcdq": (EXPORT_INTERNALS, _names()),
    "export.torch.qcdq.handler": (
        EXPORT_INTERNALS,
        _names(
            classes="TorchCDQCastBiasQuantProxyHandler TorchCDQCastMixin TorchDQCastMixin TorchQCDQCastActQuantProxyHandler TorchQCDQCastDecoupledWeightQuantProxyHandler TorchQCDQCastDecoupledWeightQuantWithInputProxyHandler TorchQCDQCastMixin TorchQCDQCastTruncQuantProxyHandler TorchQCDQCastWeightQuantProxyHandler TorchQCDQHandler"
        ),
    ),
    "export.torch.qcdq.manager": (EXPORT_INTERNALS, _names(classes="TorchQCDQManager")),
    "function.ops_ste": (OPS, _names(functions="script_flag", values="fn_prefix")),
    "fx": (
        FX,
        _names(
            functions="brevitas_symbolic_trace brevitas_value_trace symbolic_trace value_trace",
            values="torch_version",
        ),
    ),
    "fx.brevitas_tracer": (
        FX,
        _names(
            classes="BrevitasSymbolicTracer BrevitasValueTracer",
            functions="brevitas_symbolic_trace brevitas_value_trace symbolic_trace value_trace",
            values="FNS_TO_PATCH",
        ),
    ),
    "fx.value_tracer": (
        FX,
        _names(
            classes="UnsetValueException ValueAttribute ValueProxy ValueTracer",
            values="FRAME_FILES extended_base_types torch_version",
        ),
    ),
    "graph": (
        GRAPH,
        _names(
            classes="AdaptiveAvgPoolToAvgPool AvgPoolToQuantDepthwiseConv CallableToModule ClipFloatWeights CollapseConsecutiveConcats DisableLastReturnQuantTensor DuplicateSharedStatelessModule EqualizeGraph FnToModule GraphActivationEqualization GraphChannelSplitting GraphRotationEqualization GraphTransform InsertModuleCallAfter LayerNormToRMS LayerwiseActivationEqualization LayerwiseActivationRotation MeanMethodToAdaptiveAvgPool2d MergeBatchNorm MergeLnAffine MethodToModule ModuleInstanceToModuleInstance ModuleToModule ModuleToModuleByClass ModuleToModuleByInstance ModuleToModuleByName MoveSplitBatchNormBeforeCat PerInputModuleToModuleByHook PerInputTransform QuantizationStatusManager TorchFunctionalToModule Transform load_quant_model_mode quantization_status_manager"
        ),
    ),
    "graph.base": (
        GRAPH,
        _names(
            classes="CallableToModule FnToModule GraphTransform InsertModuleCallAfter MethodToModule ModuleInstanceRegisterParametrization ModuleInstanceToModuleInstance ModuleInstanceTransformTensor ModuleInstanceWrapModule ModuleToModule ModuleToModuleByClass ModuleToModuleByInstance ModuleToModuleByName PerInputModuleToModuleByHook PerInputTransform Transform UntilFixedPointGraphTransform",
            functions="load_old_module_state_dict",
        ),
    ),
    "graph.calibrate": (
        GRAPH,
        _names(
            classes="ClipFloatWeights QuantizationStatusManager load_quant_model_mode norm_correction_mode quantization_status_manager",
            functions="extend_collect_stats_steps finalize_collect_stats set_collect_stats_to_average unpack_input",
            values="BN_LAYERS",
        ),
    ),
    "graph.channel_splitting": (GRAPH, _names(classes="GraphChannelSplitting")),
    "graph.equalize": (
        EQUALIZE,
        _names(
            classes="ActivationEqualization EqualizationIndexes EqualizationModuleWrapper EqualizationSinkWrapper EqualizationSourceWrapper EqualizeGraph GraphActivationEqualization GraphRotationEqualization LayerNormToRMS LayerwiseActivationEqualization LayerwiseActivationRotation MergeLnAffine RMSNorm Region RotationEqualization WalkRegionState activation_equalization_mode",
            functions="cat_handler find_sinks find_srcs find_srcs_channel_dim fuse_parametrizations get_weight_sink get_weight_source random_orthogonal_matrix transpose",
            values="EPSILON fast_hadamard_transform logging",
        ),
    ),
    "graph.fixed_point": (
        GRAPH,
        _names(classes="CollapseConsecutiveConcats MergeBatchNorm MoveSplitBatchNormBeforeCat"),
    ),
    "graph.gpfq": (GPXQ, _names(classes="GPFQ gpfq_mode")),
    "graph.gptq": (GPXQ, _names(classes="GPTQ LinAlgError gptq_mode")),
    "graph.gpxq": (GPXQ, _names(classes="GPxQ LayerHandler gpxq_mode", values="SUPPORTED_CONV_OP")),
    "graph.hadamard": (
        EQUALIZE,
        _names(
            functions="apply_exact_had_to_linear find_closest_hadamard_number get_hadK is_pow2 matmul_hadU matmul_hadU_cuda matmul_hadUt matmul_hadUt_cuda random_hadamard_matrix",
            values="fast_hadamard_transform",
        ),
    ),
    "graph.magr": (GPXQ, _names(classes="MagR magr_mode")),
    "graph.per_input": (
        GRAPH,
        _names(classes="AdaptiveAvgPoolToAvgPool AvgPoolToQuantDepthwiseConv"),
    ),
    "graph.qronos": (GPXQ, _names(classes="LinAlgError Qronos")),
    "graph.quantize": (
        QUANTIZE,
        _names(
            functions="LayerMapValueType align_input_quant layerwise_quantize preprocess_for_quantize quantize",
            values="COMPUTE_LAYER_MAP LAYERWISE_COMPUTE_LAYER_MAP QUANT_ACT_MAP QUANT_IDENTITY_MAP UNSIGNED_ACT_TUPLE",
        ),
    ),
    "graph.quantize_impl": (
        GRAPH,
        _names(
            functions="act_handler add_output_quant_handler are_inputs_quantized_and_aligned are_inputs_unsigned inp_placeholder_handler layer_handler layerwise_layer_handler output_quant_handler recursive_input_handler residual_handler",
            values="ADD_FNS ADD_METHODS BATCH_NORM MAX_RESIDUAL_ITERS PRECISION_PRESERVING_MODULES SIGN_PRESERVING_MODULES logging",
        ),
    ),
    "graph.standardize": (
        GRAPH,
        _names(
            classes="DisableLastReturnQuantTensor DuplicateSharedStatelessModule MeanMethodToAdaptiveAvgPool2d RemoveStochasticModules TorchFunctionalToModule"
        ),
    ),
    "graph.target": (FLEXML, _names()),
    "graph.target.flexml": (
        FLEXML,
        _names(
            functions="preprocess_for_flexml_quantize quantize_flexml",
            values="FLEXML_COMPUTE_LAYER_MAP FLEXML_QUANT_ACT_MAP FLEXML_QUANT_IDENTITY_MAP",
        ),
    ),
    "graph.utils": (
        GRAPH,
        _names(
            functions="del_module get_module get_module_name_and_parent get_node get_output_channel_dim get_output_channels is_conv_transposed is_quant_module is_subseq matches_module_pattern module_class_name name_from_module remove_weight_orig replace_all_uses_except replace_module set_module signature_keys",
            values="CONV_TRANSPOSED",
        ),
    ),
    "inject.defaults": (TRUNC, _names(classes="ShiftRoundSaturateTo8bit")),
    "nn": (ACC, _names(classes="ClampQuantAccumulator TruncQuantAccumulator")),
    "nn.equalized_layer": (
        EQUALIZE,
        _names(
            classes="EqualizedModule RotatedModule",
            functions="functional_rotate_input",
            values="INPUT_NAMES fast_hadamard_transform",
        ),
    ),
    "nn.mixin.acc": (ACC, _names(classes="QuantClampMixin")),
    "nn.mixin.base": (RECURRENT, _names(classes="QuantRecurrentLayerMixin")),
    "nn.quant_accumulator": (ACC, _names(classes="ClampQuantAccumulator TruncQuantAccumulator")),
    "nn.target": (FLEXML, _names(classes="FlexMLQuantAvgPool2d FlexMLQuantLeakyReLU")),
    "nn.target.flexml": (FLEXML, _names(classes="FlexMLQuantAvgPool2d FlexMLQuantLeakyReLU")),
    "onnx": (QONNX, _names(functions="enable_debug export_brevitas_onnx export_qonnx")),
    "ops": (OPS, _names()),
    "ops.autograd_ste_ops": (
        OPS,
        _names(
            classes="AbsBinarySignGradFn BinarySignSteFn CeilSteFn DPURoundSteFn FloorSteFn InplaceTensorClampSteFn RoundSteFn RoundToZeroSteFn ScalarClampMinSteFn ScalarClampSteFn TensorClampSteFn TernarySignSteFn",
            functions="abs_binary_sign_grad_impl binary_sign_ste_impl ceil_ste_impl dpu_round_ste_impl floor_ste_impl round_ste_impl round_to_zero_ste_impl scalar_clamp_min_ste_impl scalar_clamp_ste_impl tensor_clamp_ste_impl tensor_clamp_ste_impl_ ternary_sign_ste_impl",
        ),
    ),
    "proxy": (ACC, _names(classes="ClampQuantProxyFromInjector")),
    "proxy.float_parameter_quant": (FLOAT_BIAS, _names(classes="BiasFloatQuantProxyFromInjector")),
    "proxy.runtime_quant": (ACC, _names(classes="ClampQuantProxyFromInjector")),
    "quant": (ACC, _names(classes="NoneClampQuant ShiftRoundSaturateTo8bit")),
    "quant.none": (ACC, _names(classes="NoneClampQuant")),
    "quant.scaled_int": (TRUNC, _names(classes="ShiftRoundSaturateTo8bit")),
    "quant.solver": (ACC, _names(classes="ClampQuantSolver")),
    "quant.solver.clamp": (
        ACC,
        _names(
            classes="ClampQuantSolver SolveClampBitWidthImplFromEnum SolveClampTensorQuantFromEnum"
        ),
    ),
    "quant_tensor.int_torch_handler": (QUANT_TENSOR, _names(functions="create_int_quant_tensor")),
    "utils.logging": (
        LOG_BIT_WIDTH,
        _names(classes="LogActivationBitWidth LogBitWidth LogWeightBitWidth"),
    ),
    "utils.parametrization_utils": (
        PARAMETRIZE,
        _names(
            classes="RotationWeightParametrization ScaleWeightParametrization",
            functions="extract_trainable_rotation_matrices",
        ),
    ),
}

# Names whose alternative is not their module's: (module, name) -> what to use instead.
HINTS: Dict[Tuple[str, str], str] = {
    ("export", "StdQCDQONNXManager"): "use brevitas_cpp.export.export_onnx_qcdq instead",
    ("export", "TorchQCDQManager"): "use brevitas_cpp.export.export_torch_qcdq instead",
    (
        "export",
        "enable_debug",
    ): "compare an export with the model with brevitas_cpp.export.check_onnx_qcdq instead",
    (
        "export",
        "export_brevitas_onnx",
    ): "Brevitas's own ONNX dialect is not ported; use brevitas_cpp.export.export_onnx_qcdq instead",
    (
        "onnx",
        "enable_debug",
    ): "compare an export with the model with brevitas_cpp.export.check_onnx_qcdq instead",
    (
        "onnx",
        "export_brevitas_onnx",
    ): "Brevitas's own ONNX dialect is not ported; use brevitas_cpp.export.export_onnx_qcdq instead",
    ("graph", "MergeBatchNorm"): "use brevitas_cpp.graph.merge_bn instead",
    ("graph.fixed_point", "MergeBatchNorm"): "use brevitas_cpp.graph.merge_bn instead",
    (
        "graph",
        "ClipFloatWeights",
    ): "clip the float weights (torch.clamp_) before quantizing instead",
    (
        "graph.calibrate",
        "ClipFloatWeights",
    ): "clip the float weights (torch.clamp_) before quantizing instead",
    (
        "graph",
        "QuantizationStatusManager",
    ): "use brevitas_cpp.graph.calibration_mode (statistics collected without quantization) instead",
    (
        "graph.calibrate",
        "QuantizationStatusManager",
    ): "use brevitas_cpp.graph.calibration_mode (statistics collected without quantization) instead",
    (
        "graph",
        "quantization_status_manager",
    ): "use brevitas_cpp.graph.calibration_mode (statistics collected without quantization) instead",
    (
        "graph.calibrate",
        "quantization_status_manager",
    ): "use brevitas_cpp.graph.calibration_mode (statistics collected without quantization) instead",
    (
        "graph",
        "load_quant_model_mode",
    ): "load the state_dict directly (a float checkpoint loads strictly), into a layer built with bias=True to load a bias, instead",
    (
        "graph.calibrate",
        "load_quant_model_mode",
    ): "load the state_dict directly (a float checkpoint loads strictly), into a layer built with bias=True to load a bias, instead",
    ("quant", "ShiftRoundSaturateTo8bit"): TRUNC,
    ("fx", "torch_version"): "use brevitas_cpp.torch_version instead",
    ("fx.value_tracer", "torch_version"): "use brevitas_cpp.torch_version instead",
}
HINTS.update(
    {
        ("graph.calibrate", name): "use brevitas_cpp.graph.calibration_mode (it extends, averages "
        "and finalizes the statistics collection itself) instead"
        for name in (
            "BN_LAYERS",
            "extend_collect_stats_steps",
            "finalize_collect_stats",
            "norm_correction_mode",
            "set_collect_stats_to_average",
            "unpack_input",
        )
    }
)
HINTS.update(
    {
        ("graph", name): EQUALIZE
        for name in (
            "EqualizeGraph",
            "GraphActivationEqualization",
            "GraphRotationEqualization",
            "LayerNormToRMS",
            "LayerwiseActivationEqualization",
            "LayerwiseActivationRotation",
            "MergeLnAffine",
        )
    }
)
