"""ExtendedInjector: wiring by constructor argument name, @value returning a class or a
this-reference, let() overrides, errors that name the quantizer and attribute."""

import pytest

from brevitas_cpp.inject import (
    DependencyError,
    ExtendedInjector,
    Injector,
    MissingDependencyError,
    this,
    value,
)


class Scaling:
    def __init__(self, scaling_init, scaling_min_val=None):
        self.scaling_init = scaling_init
        self.scaling_min_val = scaling_min_val


class TensorQuant:
    def __init__(self, scaling_impl, bit_width, signed=True):
        self.scaling_impl = scaling_impl
        self.bit_width = bit_width
        self.signed = signed


class Quant(ExtendedInjector):
    bit_width = 8
    scaling_init = 0.5
    scaling_impl = Scaling
    tensor_quant = TensorQuant


def test_classes_are_built_with_arguments_wired_by_name():
    tq = Quant.tensor_quant
    assert isinstance(tq, TensorQuant) and isinstance(tq.scaling_impl, Scaling)
    assert (tq.bit_width, tq.signed) == (8, True)
    # Optional arguments with no attribute keep their defaults; defined ones are injected.
    assert tq.scaling_impl.scaling_min_val is None
    assert Quant.let(scaling_min_val=1e-3).tensor_quant.scaling_impl.scaling_min_val == 1e-3


def test_each_lookup_builds_fresh_objects_shared_within_the_lookup():
    class Pair:
        def __init__(self, scaling_impl, tensor_quant):
            self.a, self.b = scaling_impl, tensor_quant

    pair = Quant.let(pair=Pair).pair
    assert pair.a is pair.b.scaling_impl
    assert Quant.scaling_impl is not Quant.scaling_impl


def test_value_returning_a_class_is_instantiated():

    class Solved(Quant):
        @value
        def scaling_impl(bit_width):
            return Scaling if bit_width > 1 else TensorQuant

    assert isinstance(Solved.scaling_impl, Scaling)
    assert isinstance(Solved.tensor_quant.scaling_impl, Scaling)
    # The quantizer class itself keeps its @value (a later lookup can choose differently).
    with pytest.raises(DependencyError, match="circular dependency: scaling_impl"):
        Solved.let(bit_width=1).scaling_impl  # TensorQuant would need scaling_impl itself
    assert isinstance(Solved.scaling_impl, Scaling)


def test_attributes_ending_in_class_stay_classes():
    assert Quant.let(proxy_class=Scaling).proxy_class is Scaling


def test_value_returning_this_follows_the_reference():

    class Conditional(Quant):
        narrow_range = True

        @value
        def signed(bit_width):
            return this.narrow_range if bit_width > 2 else False

    assert Conditional.signed is True
    assert Conditional.let(bit_width=2).signed is False
    assert Quant.let(alias=this.bit_width).alias == 8


def test_let_and_inheritance_override():

    class Four(Quant):
        bit_width = 4

    assert Four.tensor_quant.bit_width == 4
    assert Four.let(bit_width=2).tensor_quant.bit_width == 2
    assert Quant.tensor_quant.bit_width == 8


def test_missing_dependency_names_quantizer_attribute_and_chain():

    class Broken(ExtendedInjector):
        tensor_quant = TensorQuant
        scaling_impl = Scaling

    with pytest.raises(MissingDependencyError) as info:
        Broken.tensor_quant
    message = str(info.value)
    assert "'Broken'" in message and "'scaling_init'" in message
    assert "tensor_quant -> scaling_impl" in message
    assert isinstance(info.value, DependencyError) and isinstance(info.value, AttributeError)
    assert not hasattr(Broken, "tensor_quant")
    assert getattr(Broken, "nothing", 3) == 3


def test_dynamic_cycle_is_reported():

    class Cyclic(ExtendedInjector):
        @value
        def a():
            return TensorQuant  # needs scaling_impl and bit_width

        bit_width = 8
        scaling_impl = this.a

    with pytest.raises(DependencyError, match="circular"):
        Cyclic.a


def test_contains_and_no_instances():
    assert "bit_width" in Quant and "nothing" not in Quant
    with pytest.raises(DependencyError, match="Do not instantiate"):
        Quant()


def test_mixes_with_plain_dependencies_injectors():

    class Plain(Injector):
        bit_width = 3

    class Mixed(Plain, Quant):
        pass

    assert Mixed.tensor_quant.bit_width == 3
