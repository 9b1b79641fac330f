#!/usr/bin/python3
"""Parses Prometheus text exposition with the Python client's own parser
(python3-prometheus-client), so the metrics tests check rampart's output against a
real parser rather than against our reading of the format.

usage: prom_parse.py FILE [PREFIX]

Prints one line per sample, 'name{label="value",...} value', labels sorted, and exits 0;
exits 1 with a sentence when the text does not parse, a family has no HELP text or no
TYPE, or a metric name does not start with PREFIX (default rampart_)."""
import sys


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    prefix = sys.argv[2] if len(sys.argv) == 3 else "rampart_"
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        print("prom_parse.py: python3-prometheus-client is not installed: "
              "apt-get install python3-prometheus-client (scripts/deps.txt)", file=sys.stderr)
        return 1
    with open(sys.argv[1], encoding="utf-8") as f:
        text = f.read()
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser raises ValueError and friends on bad input
        print(f"prom_parse.py: {sys.argv[1]} does not parse: {e}", file=sys.stderr)
        return 1
    if not families:
        print(f"prom_parse.py: {sys.argv[1]} holds no metrics", file=sys.stderr)
        return 1
    for fam in families:
        if not fam.name.startswith(prefix):
            print(f"prom_parse.py: metric {fam.name} does not start with {prefix}",
                  file=sys.stderr)
            return 1
        if fam.type == "unknown" or not fam.documentation:
            print(f"prom_parse.py: metric {fam.name} lacks a TYPE or HELP line",
                  file=sys.stderr)
            return 1
        for s in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            print(f"{s.name}{{{labels}}} {s.value!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
