"""Counters, gauges and histograms written in the Prometheus text format (version 0.0.4), thread-safe."""

import math
import threading


def labels_text(labels: dict) -> str:
    if not labels:
        return ""
    escaped = (str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for v in labels.values())
    return "{" + ",".join(f'{k}="{v}"' for k, v in zip(labels, escaped)) + "}"


class Histogram:
    def __init__(self, buckets):
        self.buckets = sorted(buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float):
        self.counts[next((i for i, b in enumerate(self.buckets) if value <= b), len(self.buckets))] += 1
        self.sum += value

    def lines(self, name: str, labels: dict) -> list[str]:
        out, total = [], 0
        for bound, count in zip([*self.buckets, math.inf], self.counts):
            total += count
            le = "+Inf" if bound == math.inf else repr(float(bound))
            out.append(f"{name}_bucket{labels_text({**labels, 'le': le})} {total}")
        return out + [f"{name}_sum{labels_text(labels)} {self.sum}", f"{name}_count{labels_text(labels)} {total}"]


class Registry:
    """Metrics by name: each has a kind, a help line and values by label set."""

    def __init__(self):
        self.lock = threading.Lock()
        self.metrics = {}  # name -> (kind, help, buckets, {label tuple: value or Histogram})

    def define(self, name: str, kind: str, help_text: str, buckets=None):
        self.metrics[name] = (kind, help_text, buckets, {})

    def inc(self, name: str, amount: float = 1, **labels):
        with self.lock:
            values = self.metrics[name][3]
            key = tuple(labels.items())
            values[key] = values.get(key, 0) + amount

    def set(self, name: str, value: float, **labels):
        with self.lock:
            self.metrics[name][3][tuple(labels.items())] = value

    def observe(self, name: str, value: float, **labels):
        with self.lock:
            _, _, buckets, values = self.metrics[name]
            key = tuple(labels.items())
            if key not in values:
                values[key] = Histogram(buckets)
            values[key].observe(value)

    def render(self) -> str:
        lines = []
        with self.lock:
            for name, (kind, help_text, _, values) in self.metrics.items():
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
                for key, value in values.items():
                    labels = dict(key)
                    if isinstance(value, Histogram):
                        lines += value.lines(name, labels)
                    else:
                        lines.append(f"{name}{labels_text(labels)} {value}")
        return "\n".join(lines) + "\n"
