"""The reference benchmarks: what each bf16 level and each eval batching choice costs here, and which
updates each precision level keeps when it fine-tunes a pretrained model.

Run `python -m pytest benchmarks` (quick profile) or `python -m pytest benchmarks --bench-profile full`
(or BENCH_PROFILE=full) on a TPU host with PJRT_DEVICE=TPU, or on the CPU with PJRT_DEVICE=CPU.
Every figure lands in pytest-benchmark's JSON (`--benchmark-json`), in benchmark-results/results.md
and in benchmark-results/results.png.
"""
