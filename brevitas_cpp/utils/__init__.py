"""Helpers user code imports from Brevitas's ``brevitas.utils``: for now ``torch_utils``.

The package ranks just above ``function`` (its STE ops) and below ``core``, so the quantizer
blocks may use it (Brevitas's minifloat quantizer calls ``float_internal_scale``)."""
