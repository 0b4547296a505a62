"""How a test compares the numbers of two runs: bit for bit, or within a tolerance derived from the precision and the
number of steps. Every such test carries the marker `compares(form, what)`; docs/tests.md lists them.

- **The same program on the same inputs** gives the same bits on one machine, in any precision: a run resumed from a
  checkpoint against the uninterrupted one when both run the same compiled step, a run with a log or a watch that only
  reads what the step computed. Those comparisons are exact (form "bit for bit").
- **Two different programs** (a scan of K steps against K single steps, the JAX step against the lazy one, 4 SPMD
  devices against 1, one layout against another, the project against the Trainer, a device against the host) add
  the same numbers in another order. Which bits come out depends on how XLA:CPU fuses and vectorizes each program
  for the CPU it runs on (16 float32 lanes with AVX-512, 8 with AVX2, bf16 instructions or none): results that
  agree bit for bit on one machine need not on another. Those comparisons hold a tolerance (form "float32" or
  "bf16"), never exactness.
"""

FORMS = ("bit for bit", "float32", "bf16")

# float32's unit roundoff. A sum of n terms added in another order differs by about sqrt(n) roundoffs (rounding errors
# add up as a random walk): 2**7 of them for 2**14 terms, more than a step of the demo models sums in one reduction
# but for the gradients' norm, which XLA sums in blocks (a tree's error grows with the log of the count). So two
# programs' step agrees to about FLOAT32_STEP, relative. Over a few steps at a small rate a difference carries into
# the next step and adds at most its own: linear in the steps (float32_apart). Measured here: the JAX step against the
# lazy one about 1e-7 after 10 steps, the project against transformers' Trainer 5e-7.
FLOAT32_ROUNDOFF = 2.0 ** -24
FLOAT32_STEP = 2.0 ** 7 * FLOAT32_ROUNDOFF
# bf16's resolution: 8 significant bits, so a value differs by up to one unit of 2**-8 of itself between two programs
# that round it at different points. The losses and metrics compared are float32 sums over many bf16 roundings,
# which land within that unit (measured: 4.8e-5 relative between 4 steps a call and 1 after the bf16 demo's 90 steps
# on an AMD EPYC with AVX-512 BF16, where an Intel Xeon gave the same bits).
BF16_RESOLUTION = 2.0 ** -8


def float32_apart(steps: int) -> float:
    """The relative tolerance between two float32 programs after `steps` optimizer steps (a forward alone: 1)."""
    return FLOAT32_STEP * max(steps, 1)


def relative(found: float, expected: float) -> float:
    return abs(found - expected) / max(abs(expected), 1e-30)


def near_ties(margins, bound: float) -> list[int]:
    """The rows whose margin (the most probable class's probability minus the next one's, or a logit gap) is within
    `bound`: there two programs may pick another label, anywhere else they pick the same."""
    return [row for row, margin in enumerate(margins) if margin <= bound]


def margin(probabilities) -> float:
    """The most probable class's lead over the next: how far the label is from a tie."""
    first, second = sorted(probabilities, reverse=True)[:2]
    return first - second
