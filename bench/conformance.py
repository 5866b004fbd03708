"""ONNX node conformance of the golden model (float mode): a table per op, and JSON.

    python bench/conformance.py [--json bench/results/conformance.json] [--cache DIR]

The official node test cases are regenerated once into the cache folder with
onnx.backend.test.case.node.collect_testcases(); every case of every op in
onnx_import.SUPPORTED_OPS runs through modelcircuit.graphs.onnx_backend.GoldenBackend.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from modelcircuit.graphs import onnx_backend as ob


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=os.path.join("bench", "results", "conformance.json"))
    ap.add_argument("--cache", default=None, help="cache folder for the regenerated cases")
    args = ap.parse_args()
    t0 = time.perf_counter()
    res = ob.run_conformance(args.cache)
    res["seconds"] = round(time.perf_counter() - t0, 2)
    print(ob.format_table(res))
    n = len(res["cases"])
    passed = sum(c["passed"] for c in res["cases"])
    accepted = [c for c in res["cases"] if c["status"] != "refused"]
    res["summary"] = {"cases": n, "passed": passed,
                      "accepted": len(accepted),
                      "accepted_passed": sum(c["passed"] for c in accepted)}
    print(f"\n{passed}/{n} cases pass; {res['summary']['accepted_passed']}/{len(accepted)} of "
          f"the cases not refused pass ({res['seconds']} s)")
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
