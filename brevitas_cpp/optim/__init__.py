"""Optimizers Brevitas ships (``brevitas.optim``): sign SGD and Cayley SGD on the Stiefel
manifold (rotations that stay orthogonal, e.g. for SpinQuant). They depend on torch only."""

from brevitas_cpp.optim.cailey_sgd import CaileySGD
from brevitas_cpp.optim.sign_sgd import SignSGD, sign_sgd

__all__ = ["CaileySGD", "SignSGD", "sign_sgd"]
