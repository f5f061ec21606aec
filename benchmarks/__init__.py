"""The benchmark scripts (run each as a module from the repository root: ``python -m
benchmarks.bench_all``), their shared harness (:mod:`benchmarks.harness`, :mod:`benchmarks.common`)
and the fair training suite (:mod:`benchmarks.suite`). See benchmarks/README.md."""
