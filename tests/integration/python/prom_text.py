"""A small parser of Prometheus' text exposition format, for the tests: samples keyed by
(name, frozenset of labels), plus each family's TYPE."""
from __future__ import annotations

import re
import urllib.request
from typing import Dict, FrozenSet, Optional, Tuple

Key = Tuple[str, FrozenSet[Tuple[str, str]]]
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Metrics:
    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: Dict[Key, float] = {}
        self.types: Dict[str, str] = {}
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                assert name not in self.types, f"two TYPE lines for {name}"
                self.types[name] = kind
            elif line and not line.startswith("#"):
                m = _SAMPLE.match(line)
                assert m, f"unparsable metrics line: {line!r}"
                labels = frozenset(_LABEL.findall(m.group(2) or ""))
                self.samples[(m.group(1), labels)] = float(m.group(3))

    def get(self, name: str, **labels: str) -> Optional[float]:
        return self.samples.get((name, frozenset(labels.items())))

    def value(self, name: str, **labels: str) -> float:
        v = self.get(name, **labels)
        assert v is not None, f"no sample {name}{labels}"
        return v

    def names(self) -> set:
        return {name for name, _ in self.samples}


def scrape(address: str) -> Metrics:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        return Metrics(response.read().decode())
