"""Side-by-side measurement, one harness for every workload: a workload (`workloads/`, one file each, the
`Workload` protocol of workload.py) names its model, data and peers; runner.py trains the peers
interleaved (A B C A B C) and reports medians, ratios, FLOPs, memory and loss differences; report.py
writes bench.md, bench.json and bench.png; flags.py makes the `turbotrain bench` flags from the workloads'
dataclasses. A script's job, never a timed test (docs/bench.md)."""
