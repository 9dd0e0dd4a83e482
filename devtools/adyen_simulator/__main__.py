"""``python -m devtools.adyen_simulator``: the Adyen simulator in the foreground (the same as
``payorch provider-sim --provider adyen``)."""

from __future__ import annotations

import argparse
import binascii
import sys

from devtools.adyen_simulator.config import AdyenSimulatorConfig
from devtools.adyen_simulator.faults import parse_fault_spec
from devtools.adyen_simulator.server import serve


def build_config(argv: list[str] | None = None) -> tuple[AdyenSimulatorConfig, str, int]:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.adyen_simulator",
        description="Serve an Adyen-compatible Checkout API (v71 subset) with fault injection.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=12112)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="OP:MODE[:P][:k=v]",
        help="Arm a fault rule (repeatable); see devtools/adyen_simulator/faults.py.",
    )
    parser.add_argument("--stall-seconds", type=float, default=30.0)
    parser.add_argument("--notification-url", default=None)
    parser.add_argument("--hmac-key", default=None, help="The HMAC key, hex (Customer Area).")
    args = parser.parse_args(argv)
    try:
        rules = tuple(parse_fault_spec(spec) for spec in args.fault)
    except ValueError as exc:
        parser.error(str(exc))
    if (args.notification_url is None) != (args.hmac_key is None):
        parser.error("give both --notification-url and --hmac-key, or neither")
    if args.hmac_key is not None:
        try:
            binascii.unhexlify(args.hmac_key)
        except (binascii.Error, ValueError):
            parser.error("--hmac-key is a hex string")
    config = AdyenSimulatorConfig(
        seed=args.seed,
        faults=rules,
        stall_seconds=args.stall_seconds,
        notification_url=args.notification_url,
        hmac_key=args.hmac_key,
    )
    return config, args.host, args.port


def main(argv: list[str] | None = None) -> None:
    config, host, port = build_config(argv)
    print(f"Adyen simulator on http://{host}:{port}/v71 ({len(config.faults)} fault rules)")
    sys.stdout.flush()
    serve(config, host=host, port=port)


if __name__ == "__main__":
    main()
