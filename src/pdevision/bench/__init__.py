"""Cost measurement: parameters, FLOPs, throughput and memory."""

from pdevision.bench.flops import count_macs, count_params

__all__ = ["count_macs", "count_params"]
