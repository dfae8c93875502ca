"""Brevitas's ``brevitas.quant.experimental``: minifloat quantizers (``float``, the OCP and FNUZ
FP8 variants in ``float_quant_ocp`` and ``float_quant_fnuz``, their bases in ``float_base``)."""
