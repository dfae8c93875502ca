"""Building blocks of affine quantizers. Each block is a ``ScriptModule`` under
``BREVITAS_JIT=1`` and a plain ``nn.Module`` otherwise (see :mod:`brevitas_cpp.jit`)."""
