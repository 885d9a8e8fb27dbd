"""Formats `wirespeed bench raw --json` lines (stdin) as one table."""
import json
import sys

rows = [json.loads(line) for line in sys.stdin if line.strip()]
head = f"{'transport':<10}{'size':>10}{'streams':>8}{'MB/s':>12}{'msgs/s':>13}{'p50 us':>10}{'p99 us':>10}"
print(head)
print("-" * len(head))
for r in rows:
    size = r["message_bytes"]
    label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
    print(f"{r['transport']:<10}{label:>10}{r['streams']:>8}{r['mb_per_s']:>12.0f}{r['msgs_per_s']:>13.0f}"
          f"{r['latency_us']['p50']:>10.0f}{r['latency_us']['p99']:>10.0f}")
