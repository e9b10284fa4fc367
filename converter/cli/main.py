"""``tpu-export``: convert, inspect, validate and demo from the command line.

Errors print one line (``tpu-export: error: …``) and exit 2; a parity mismatch
exits 1. Outputs are written atomically.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Sequence

from converter.errors import ConversionError, InputError, first_line

EXIT_OK, EXIT_MISMATCH, EXIT_ERROR = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tpu-export", description="PyTorch → TPU runtime (JAX/XLA), StableHLO, "
                                "LiteRT and ONNX, with parity checks against PyTorch.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    c = sub.add_parser("convert", help="convert a model for one target",
                       description="Convert the model returned by FACTORY (path/to/file.py:function or "
                       "package.module:function returning (model, args[, kwargs]), or for --target litert a dict of "
                       "them by signature name: one file, a signature each), or a program saved with "
                       "torch.export.save (model.pt2).")
    c.add_argument("factory", metavar="FACTORY")
    c.add_argument("--target", required=True, choices=["tpu", "stablehlo", "litert", "onnx"])
    c.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="output file (litert, onnx, tpu: StableHLO text) or directory (stablehlo)")
    c.add_argument("--dynamic", metavar="I:D[=NAME][:MIN..MAX],…",
                   help="dynamic dims, e.g. 0:0=batch,1:0=batch; a range of sizes, e.g. 0:1=seq:1..512")
    c.add_argument("--channels-last-io", action="store_true", help="LiteRT: NHWC inputs and outputs")
    c.add_argument("--quantize", choices=["fp16", "int8", "int8-full"],
                   help="LiteRT: fp16 weights, int8 dynamic-range (weight-only, per-channel) quantization, or "
                        "int8-full: int8 compute with activation ranges calibrated on --calibration (default: the "
                        "factory's sample inputs)")
    c.add_argument("--calibration", metavar="FILE.pt",
                   help="--quantize int8-full: a torch.save'd list of input sets, each a tuple of the model's "
                        "positional inputs")
    c.add_argument("--int8-io", action="store_true",
                   help="--quantize int8-full: the model's float inputs and outputs are int8 too")
    c.add_argument("--strict", action="store_true", help="use torch.export strict tracing")

    i = sub.add_parser("inspect", help="describe a .tflite file, an .onnx file or a StableHLO directory")
    i.add_argument("path")

    v = sub.add_parser("validate", help="check every target against PyTorch and write reports",
                       description="Check every target against PyTorch for the model FACTORY returns, or the "
                       "program saved with torch.export.save (model.pt2).")
    v.add_argument("factory", metavar="FACTORY")
    v.add_argument("--targets", default="tpu,stablehlo,litert")
    v.add_argument("--report", default="tpu-export-report", metavar="DIR")
    v.add_argument("--num-random-inputs", type=int, default=2)
    v.add_argument("--dynamic", metavar="I:D[=NAME][:MIN..MAX],…",
                   help="dynamic dims, as for convert: every target is built with them, and the random inputs "
                        "take other sizes of them")
    v.add_argument("--quantize", choices=["fp16", "int8", "int8-full"],
                   help="quantize the litert target as convert does (int8-full calibrated on the sample inputs; "
                        "judged by task-level agreement)")
    v.add_argument("--no-op-profile", action="store_true",
                   help="skip the per-op error profile of a passing run (one compile less)")

    d = sub.add_parser("demo", help="bundled model → every target → parity summary")
    d.add_argument("--out", default="tpu-export-demo", metavar="DIR", help="where artifacts and reports go")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tpu-export`` console script."""
    args = _parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # torch 2.13's own pytree code trips its LeafSpec deprecation on every export; not the user's concern
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    try:
        return {"convert": _convert, "inspect": _inspect, "validate": _validate, "demo": _demo}[args.command](args)
    except (ConversionError, OSError) as e:
        print(f"tpu-export: error: {first_line(e)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


def _convert(args: argparse.Namespace) -> int:
    from converter.api import convert
    from converter.cli.factory import load_factory
    from exporters.atomic import write_bytes

    model, margs, mkwargs = load_factory(args.factory)
    if isinstance(model, dict) and args.target != "litert":
        raise InputError(f"a factory of several signatures ({', '.join(model)}) converts to --target litert, "
                         f"not {args.target}")
    if isinstance(model, dict) and args.dynamic:
        raise InputError("--dynamic applies to one model; give each signature's dynamic dims in the factory "
                         "(an ExportedProgram exported with them)")
    dynamic = _dynamic(args.dynamic, model, margs, mkwargs)
    options = {"channels_last_io": True} if args.channels_last_io else {}
    if args.quantize:
        if args.target != "litert":
            raise InputError(f"--quantize applies to --target litert, not {args.target}")
        options["quantize"] = args.quantize
    if (args.calibration or args.int8_io) and args.quantize != "int8-full":
        raise InputError("--calibration and --int8-io apply to --quantize int8-full")
    if args.calibration:
        options["calibration"] = _calibration_sets(args.calibration)
    if args.int8_io:
        options["int8_io"] = True
    if isinstance(model, dict):  # one .tflite, a signature per entry, the weights they share stored once
        from converter.api import convert_signatures

        art = convert_signatures(model, strict=args.strict, **options)
    else:
        art = convert(model, margs, mkwargs, target=args.target, dynamic_shapes=dynamic, strict=args.strict,
                      **options)
    out = Path(args.output)
    if args.target == "tpu":
        write_bytes(out, art.stablehlo().encode())
        what = "StableHLO compiled by the TPU runtime"
    else:
        art.save(out)
        what = args.target
    print(f"wrote {out} ({what})")
    return EXIT_OK


def _dynamic(text: str | None, model: Any, margs: tuple, mkwargs: dict) -> Any:
    """``--dynamic`` as torch.export ``dynamic_shapes`` for the factory's inputs.

    Raises:
        InputError: a bad item; any item for an exported program (its dynamic dims are its own).
    """
    from converter.cli.factory import parse_dynamic
    from converter.exported import is_exported

    if text and is_exported(model):
        raise InputError("--dynamic: an exported program's dynamic dims were fixed when it was exported "
                         "(torch.export.export(..., dynamic_shapes=...))")
    return parse_dynamic(text, margs, mkwargs)


def _calibration_sets(path: str) -> list:
    """The input sets saved in ``path`` (``torch.save`` of a list: each item a tuple of inputs, or one tensor).

    Raises:
        InputError: the file cannot be read as such a list.
    """
    import torch

    try:
        sets = torch.load(path, weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError) as e:  # (pickle errors come as RuntimeError / EOFError)
        raise InputError(f"cannot read calibration sets from {path}: {str(e).strip().splitlines()[0]}") from e
    if not isinstance(sets, (list, tuple)) or not sets or not all(
            isinstance(s, torch.Tensor) or isinstance(s, (list, tuple)) and all(isinstance(x, torch.Tensor) for x in s)
            for s in sets):
        raise InputError(f"{path} must hold a non-empty list of input sets (each a tuple of tensors, or a tensor)")
    return list(sets)


def _inspect(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if not path.exists():
        raise InputError(f"no such file: {path}")
    if path.is_dir():
        from exporters.stablehlo import load

        art = load(path)
        sig = art.signature
        print(f"StableHLO artifact {path}")
        for kind in ("inputs", "outputs"):
            for s in sig[kind]:
                print(f"  {kind[:-1]:6} {s['name']:12} {s['dtype']:9} {s['shape']}")
        for line in art.call_inputs.describe([s["name"] for s in sig["inputs"]], [s["name"] for s in sig["outputs"]]):
            print(f"  {line}")
        print(f"  weights: {len(sig['weights'])} tensors")
        return EXIT_OK
    if path.suffix.lower() == ".onnx":
        from exporters.onnx.inspect import inspect_onnx

        print(inspect_onnx(path))
        return EXIT_OK
    from exporters.litert.inspect import inspect_file

    print(inspect_file(str(path)))
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    from converter.cli.factory import load_factory
    from validators.parity import validate

    model, margs, mkwargs = load_factory(args.factory)
    if isinstance(model, dict):
        raise InputError(f"validate takes one model; this factory gives several ({', '.join(model)}): validate "
                         "each from a factory of its own")
    dynamic = _dynamic(args.dynamic, model, margs, mkwargs)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    target_options = {}
    if args.quantize:
        if "litert" not in targets:
            raise InputError("--quantize applies to the litert target; add it to --targets")
        target_options["litert"] = {"quantize": args.quantize}
    report = validate(model, margs, targets=targets, num_random_inputs=args.num_random_inputs,
                      sample_kwargs=mkwargs, target_options=target_options, op_profile=not args.no_op_profile,
                      dynamic_shapes=dynamic)
    paths = report.write(args.report)
    print(report.to_markdown())
    print(f"reports: {', '.join(str(p) for p in paths)}")
    return EXIT_OK if report.passed else EXIT_MISMATCH


def _demo(args: argparse.Namespace) -> int:
    from converter.cli.demo import run_demo

    return run_demo(Path(args.out))


if __name__ == "__main__":
    sys.exit(main())
