"""Summarize an A2A TCK compatibility.json: per-transport counts, then every requirement
that did not pass, with its transports and first errors.

    python3 tests/tck/summarize.py REPORTS_DIR/compatibility.json
"""

import json
import sys


def main(path: str) -> None:
    report = json.load(open(path, encoding="utf-8"))
    print("summary:", json.dumps(report["summary"]))
    for transport, counts in report["per_transport"].items():
        print(f"  {transport:10} total {counts['total']:3}  passed {counts['passed']:3}  "
              f"failed {counts['failed']:3}  skipped {counts['skipped']:3}")
    for rid, entry in report["per_requirement"].items():
        if entry["status"] in ("PASS", "NOT TESTED"):
            continue
        transports = ", ".join(f"{t}={s}" for t, s in entry["transports"].items())
        print(f"{entry['level']:6} {entry['status']:7} {rid} [{transports}]")
        for error in entry["errors"][:3]:
            print("         ", str(error).replace("\n", " | ")[:300])


if __name__ == "__main__":
    main(sys.argv[1])
