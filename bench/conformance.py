"""ONNX node conformance of the golden model (float mode): a table per op, and JSON.

    python bench/conformance.py [--json bench/results/conformance.json] [--cache DIR]

The official node test cases are regenerated once into the cache folder with
onnx.backend.test.case.node.collect_testcases(); every case of every op in
onnx_import.SUPPORTED_OPS runs through modelcircuit.frontend.conformance.backend.GoldenBackend.
The pass rate is the issue's: passed / (all cases - excused refusals), where a refusal is
excused only if it is for a dtype or an attribute value the golden model does not support
and the error names it.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from modelcircuit.frontend.conformance import suite as oc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=os.path.join("bench", "results", "conformance.json"))
    ap.add_argument("--cache", default=None, help="cache folder for the regenerated cases")
    args = ap.parse_args()
    t0 = time.perf_counter()
    res = oc.run_conformance(args.cache)
    res["seconds"] = round(time.perf_counter() - t0, 2)
    print(oc.format_table(res))
    m = res["summary"]
    print(f"\n{m['passed']}/{m['cases']} cases pass; {m['excused']} excused (unsupported dtype "
          f"or attribute, named in the error); pass rate {m['passed']}/{m['counted']} = "
          f"{m['rate']:.1%} (issue: >= 80 %); {m['refused']} other refusals, {m['wrong']} "
          f"wrong, {m['crash']} crashes, {m['not run']} not run ({res['seconds']} s)")
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
