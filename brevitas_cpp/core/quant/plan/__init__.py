"""Plans: one op call for a whole stock quantizer.

A RescalingIntQuant is a chain of blocks (bit width, scaling, zero point, IntQuant), each a
module call and a few kernels. When the chain is exactly a stock quantizer whose arithmetic one
C++ op computes, its plan names that op and the op's constant arguments; forward then makes
one call instead of the chain, with the chain's numbers bit for bit. The chain stays the
definition and the fallback: a user's block, a hook on a block the op would skip, or operands
the op does not take run it.

    weight.py      the stock weight quantizer (AbsMax statistics) -> abs_max_int_quant
    activation.py  the stock activation quantizer: learned phase -> learned_int_quant,
                   statistics phase -> abs_percentile_int_quant (each with the ReLU before it)
    match.py       the one matcher: a block tree -> its QuantPlan (and whether a ReLU joins it)
    forward.py     PlannedQuant: the plan's constants and its one op call, for eager mode and
                   TorchScript alike; the eager gate (plan current, no hook skipped)
    operands.py    the per-call operand checks (metadata only: no synchronisation, no graph
                   break)

A plan is derived when the quantizer is built and again under core/replan.py's one rule when a
block of its tree is replaced. docs/architecture.md, "Where a fused path goes", says how a new
plan is added.

This __init__ imports nothing: the blocks the matchers recognise import operands.py.
"""
